// configs/llama_config.h: the config.json of a Llama-family decoder (Llama 2 and 3,
// Mistral, Qwen2/2.5, Qwen3, SmolLM2), typed and validated. Hyper-parameters only: no weights, no
// generation settings (eos, chat template) and no serving knobs.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "configs/hf_config.h"

namespace prism::configs {

// How inv_freq is edited before the RoPE table is built (transformers' ROPE_INIT_FUNCTIONS).
enum class RopeScalingType : uint8_t {
  none,    // rope_scaling null or {"rope_type": "default"}
  linear,  // inv_freq / factor
  llama3,  // Llama 3.1+: low frequencies / factor, high ones kept, a smooth ramp between
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3
};

struct LlamaConfig {
  std::string model_type;    // "llama" | "mistral" | "qwen2" | "qwen3"
  // architectures[0] ("" when absent): the family's *ForCausalLM, or its base model
  // (LlamaModel, Qwen3Model, ...: a checkpoint without LM head, e.g. a diffusion pipeline's
  // text_encoder/).
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // default num_attention_heads
  int64_t head_dim = 0;             // default hidden_size / num_attention_heads (qwen3: 128)
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool q_k_v_bias = false;  // llama, qwen3: attention_bias; qwen2: always
  bool o_bias = false;      // llama, qwen3: attention_bias; qwen2: never
  bool mlp_bias = false;    // llama: mlp_bias
  // qwen3: RMSNorm over head_dim of every query and key head (self_attn.q_norm / k_norm,
  // [head_dim] each), after the projection and before RoPE.
  bool qk_norm = false;
  int64_t max_position_embeddings = 0;
  int64_t sliding_window = 0;  // 0: none (mistral's, or qwen2's / qwen3's when use_sliding_window)

  // invalid_argument / not_found naming the key for a bad or missing value; unimplemented
  // for a model_type, architecture, hidden_act or rope_scaling type Prism does not run.
  // origin names the file in messages (HfConfig's own errors carry its path already).
  static Result<LlamaConfig> from_hf(const HfConfig& hf, const std::string& origin = "config.json");
  // dir/config.json, or a .json path.
  static Result<LlamaConfig> load(const std::string& dir_or_file);
  Status validate(const std::string& origin = "config.json") const;

  // The longest context attended correctly: max_position_embeddings, capped by the sliding
  // window (Prism runs full attention, which equals windowed attention up to the window).
  int64_t max_context() const;
};

}  // namespace prism::configs
