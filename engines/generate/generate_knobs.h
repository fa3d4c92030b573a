// engines/generate/generate_knobs.h: the knobs of a generate deployment (KV cache, step
// budget, prefix caching, speculation, encoder batch sizes), read and range-checked once at
// load. The names each kind of deployment accepts: a text-only chat deployment, a
// vision-language one (plus the vision processor's), a transcribe one (plus the speech
// processor's). Must not: read knobs anywhere else, or change them after load.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "serving/config.h"

namespace prism::engines::generate {

struct EngineKnobs {
  int64_t kv_cache_bytes = 256ll << 20;
  std::string kv_cache_dtype = "auto";
  int block_size = 16;
  int64_t max_step_tokens = 512;
  bool prefix_caching = true;
  std::string speculation = "none";
  int num_speculative_tokens = 4;
  int ngram_min = 1, ngram_max = 3;
  int max_encoder_views = 8;  // VLMs: views per media encoder call
  int max_encoder_segments = 8;  // speech models: audio segments per speech encoder call
};

// The knobs of a deployment whose frontend has a vision processor (vision) or a speech
// processor (speech); invalid_argument naming the knob, its rule and the value otherwise.
Result<EngineKnobs> read_knobs(const serving::Knobs& k, bool vision, bool speech);

}  // namespace prism::engines::generate
