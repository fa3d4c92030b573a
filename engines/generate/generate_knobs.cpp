// engines/generate/generate_knobs.cpp: reading and checking the generate knobs.
#include "engines/generate/generate_knobs.h"

#include <array>
#include <span>
#include <string_view>
#include <vector>

#include "frontends/speech_processor.h"
#include "frontends/vision_processor.h"

namespace prism::engines::generate {
namespace {

// The engine's knobs and the frontend's (max_model_len): a text-only chat deployment takes no
// other.
constexpr std::array<std::string_view, 10> kKnownKnobs = {
    "kv_cache_bytes", "kv_cache_dtype", "block_size", "max_step_tokens", "prefix_caching",
    "speculation",    "num_speculative_tokens", "ngram_min", "ngram_max", "max_model_len"};

}  // namespace

// A vision-language deployment also takes the engine's max_encoder_views and the vision
// processor's budget and media-source knobs (VisionProcessor::load checks their values); a
// speech deployment the engine's max_encoder_segments and the orchestration's knobs
// (SpeechProcessor::knob_names(); pipelines/transcribe checks their values).
Result<EngineKnobs> read_knobs(const serving::Knobs& k, bool vision, bool speech) {
  if (vision) {
    std::vector<std::string_view> known(kKnownKnobs.begin(), kKnownKnobs.end());
    known.push_back("max_encoder_views");
    const std::span<const std::string_view> processor = frontends::VisionProcessor::knob_names();
    known.insert(known.end(), processor.begin(), processor.end());
    PRISM_RETURN_IF_ERROR(k.check_names(known, "a chat deployment of a vision-language model"));
  } else if (speech) {
    std::vector<std::string_view> known(kKnownKnobs.begin(), kKnownKnobs.end());
    known.push_back("max_encoder_segments");
    const std::span<const std::string_view> orchestration = frontends::SpeechProcessor::knob_names();
    known.insert(known.end(), orchestration.begin(), orchestration.end());
    PRISM_RETURN_IF_ERROR(k.check_names(known, "a transcribe deployment"));
  } else {
    PRISM_RETURN_IF_ERROR(k.check_names(kKnownKnobs, "a chat deployment"));
  }
  EngineKnobs e;
  PRISM_ASSIGN_OR_RETURN(e.kv_cache_bytes, k.get_int("kv_cache_bytes", e.kv_cache_bytes));
  PRISM_ASSIGN_OR_RETURN(e.kv_cache_dtype, k.get_string("kv_cache_dtype", e.kv_cache_dtype));
  PRISM_ASSIGN_OR_RETURN(int64_t block_size, k.get_int("block_size", e.block_size));
  PRISM_ASSIGN_OR_RETURN(e.max_step_tokens, k.get_int("max_step_tokens", e.max_step_tokens));
  PRISM_ASSIGN_OR_RETURN(e.prefix_caching, k.get_bool("prefix_caching", e.prefix_caching));
  PRISM_ASSIGN_OR_RETURN(e.speculation, k.get_string("speculation", e.speculation));
  PRISM_ASSIGN_OR_RETURN(int64_t spec, k.get_int("num_speculative_tokens", e.num_speculative_tokens));
  PRISM_ASSIGN_OR_RETURN(int64_t nmin, k.get_int("ngram_min", e.ngram_min));
  PRISM_ASSIGN_OR_RETURN(int64_t nmax, k.get_int("ngram_max", e.ngram_max));
  PRISM_ASSIGN_OR_RETURN(int64_t views, k.get_int("max_encoder_views", e.max_encoder_views));
  PRISM_ASSIGN_OR_RETURN(int64_t segments, k.get_int("max_encoder_segments", e.max_encoder_segments));
  auto bad = [&](std::string_view name, const std::string& rule, int64_t got) {
    return invalid_argument(k.where(name) + " must be " + rule + " (got " + std::to_string(got) + ")");
  };
  if (e.kv_cache_bytes < 1) return bad("kv_cache_bytes", ">= 1", e.kv_cache_bytes);
  if (block_size < 1 || block_size > 1024) return bad("block_size", "in [1, 1024]", block_size);
  if (e.max_step_tokens < 1) return bad("max_step_tokens", ">= 1", e.max_step_tokens);
  if (spec < 1 || spec > 64) return bad("num_speculative_tokens", "in [1, 64]", spec);
  if (nmin < 1 || nmin > 64) return bad("ngram_min", "in [1, 64]", nmin);
  if (nmax < nmin || nmax > 64) return bad("ngram_max", "in [ngram_min, 64]", nmax);
  if (views < 1 || views > 4096) return bad("max_encoder_views", "in [1, 4096]", views);
  if (segments < 1 || segments > 4096) return bad("max_encoder_segments", "in [1, 4096]", segments);
  if (e.speculation != "none" && e.speculation != "ngram")
    return invalid_argument(k.where("speculation") + " must be none or ngram (got '" + e.speculation + "')");
  if (e.kv_cache_dtype != "auto" && e.kv_cache_dtype != "f32" && e.kv_cache_dtype != "bf16" &&
      e.kv_cache_dtype != "int8")
    return invalid_argument(k.where("kv_cache_dtype") + " must be auto, f32, bf16 or int8 (got '" +
                            e.kv_cache_dtype + "')");
  e.block_size = int(block_size);
  e.num_speculative_tokens = int(spec);
  e.ngram_min = int(nmin);
  e.ngram_max = int(nmax);
  e.max_encoder_views = int(views);
  e.max_encoder_segments = int(segments);
  return e;
}

}  // namespace prism::engines::generate
