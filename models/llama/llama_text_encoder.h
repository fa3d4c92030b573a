// models/llama/llama_text_encoder.h: a Llama-family stack (Qwen3 in Z-Image, ...) as a text
// encoder behind models::Encoder: the hidden states one chosen layer outputs for every token of
// a batch of prompts, what diffusion pipelines condition on (transformers'
// output_hidden_states=True, hidden_states[k]). Causal attention within each prompt, no KV
// cache, no LM head; the layers after the chosen one are not even loaded. The chat template,
// tokenization, padding policy and which rows to keep are the pipeline's, not this file's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "models/encoder.h"
#include "runtime/ops.h"

namespace prism::models {

struct LlamaTextEncoderOptions {
  // Index into transformers' hidden_states tuple of a model with L layers: 0 the token
  // embeddings, i in [1, L - 1] the output of layer i - 1 (0-based) before any norm, L the last
  // layer's output after the final norm (last_hidden_state). Negative counts from the end as
  // in Python: -1 is L; -2 is the output of layer L - 2, the second-to-last, which Z-Image
  // conditions on.
  int64_t hidden_states_index = -1;
};

// dir: a model directory (config.json of a Llama-family model: qwen3, llama, qwen2, mistral;
// architectures *ForCausalLM or the base model, Qwen3Model, ...), weights under "model." or
// unprefixed. Loads embed_tokens and layers [0, i) for hidden_states_index i (plus the final
// norm when i = L); precision applies to the layers' linears as in load_llama.
// encode(): [T, hidden] f32; positions restart at 0 in each sequence of cu_seqlens; with
// kv_lens (a right-padded batch) the real tokens' rows equal those of the unpadded prompt and
// padding rows are unspecified. Errors: the config's, hidden_states_index outside [-(L + 1), L]
// (invalid_argument), a missing or misshapen tensor (naming it), prefixed with dir.
Result<std::unique_ptr<Encoder>> load_llama_text_encoder(const std::string& dir, ops::Precision precision,
                                                         const LlamaTextEncoderOptions& options = {});

}  // namespace prism::models
