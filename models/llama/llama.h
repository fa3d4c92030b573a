// models/llama/llama.h: the Llama-family decoders (Llama 2 and 3, Mistral, Qwen2/2.5,
// SmolLM2) behind the Decoder interface. Loads a Hugging Face directory by its real
// parameter names ("model.embed_tokens.weight", "model.layers.{i}.self_attn.q_proj.weight",
// ..., "lm_head.weight" unless tied) and computes logits with runtime ops against the
// engine's paged KV cache. Scheduling, sampling and the cache layout are not the model's.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "models/decoder.h"
#include "models/llama/llama_config.h"
#include "runtime/ops.h"

namespace prism::models {

// dir: a model directory (config.json + model.safetensors or a sharded index). precision
// applies to the linear layers (q/k/v, o, gate/up, down, LM head); the embedding table keeps
// the checkpoint's dtype and the RMSNorm weights are f32. Errors: the config's
// (LlamaConfig::from_hf), a missing tensor (not_found naming it) or a misshapen one
// (invalid_argument naming it and both shapes), each prefixed with dir.
Result<std::unique_ptr<Decoder>> load_llama(const std::string& dir, ops::Precision precision);

}  // namespace prism::models
