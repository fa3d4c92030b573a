// models/llama/llama.h: the Llama-family decoders (Llama 2 and 3, Mistral, Qwen2/2.5, Qwen3,
// SmolLM2) behind the Decoder interface. Loads a Hugging Face directory by its real
// parameter names ("model.embed_tokens.weight", "model.layers.{i}.self_attn.q_proj.weight",
// ..., Qwen3's "...self_attn.q_norm.weight" / "k_norm", "lm_head.weight" unless tied) and
// computes logits with runtime ops against the engine's paged KV cache. Scheduling, sampling
// and the cache layout are not the model's. The same layers without cache or LM head, as a
// text encoder: llama_text_encoder.h.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "configs/llama_config.h"
#include "formats/safetensors.h"
#include "models/decoder.h"
#include "runtime/ops.h"

namespace prism::models {

// dir: a model directory (config.json + model.safetensors or a sharded index), its stack under
// "model." (*ForCausalLM) or unprefixed (a tied base-model checkpoint: Qwen3Model). precision
// applies to the linear layers (q/k/v, o, gate/up, down, LM head); the embedding table keeps
// the checkpoint's dtype and the RMSNorm weights are f32. Errors: the config's
// (configs::LlamaConfig::from_hf), a missing tensor (not_found naming it) or a misshapen one
// (invalid_argument naming it and both shapes), each prefixed with dir.
Result<std::unique_ptr<Decoder>> load_llama(const std::string& dir, ops::Precision precision);

// Where the decoder's tensors sit in a checkpoint: "<prefix>embed_tokens.weight",
// "<prefix>layers.{i}.*", "<prefix>norm.weight", and the LM head (optional when tied). The
// defaults are a plain LLM's; the LM inside a vision-language checkpoint sits under the
// VLM's prefix ("language_model.model." + "language_model.lm_head.weight" in LLaVA, ...).
struct LlamaWeightNames {
  std::string prefix = "model.";
  std::string lm_head = "lm_head.weight";
};

// The decoder of a larger checkpoint (a VLM's text model): its config comes from elsewhere
// (the VLM's text_config) and its tensors from `names` in `weights`. Errors as above, not
// prefixed with a directory (the caller knows it).
Result<std::unique_ptr<Decoder>> load_llama(const formats::WeightSource& weights, const configs::LlamaConfig& config,
                                            const LlamaWeightNames& names, ops::Precision precision);

}  // namespace prism::models
