// configs/llama_config.cpp: LlamaConfig, config.json keys as transformers' LlamaConfig, MistralConfig, Qwen2Config
// and Qwen3Config name them, with their defaults where transformers has one.
#include "configs/llama_config.h"

#include <algorithm>
#include <filesystem>
#include <vector>

namespace prism::configs {
namespace {

struct Family {
  const char* model_type;
  const char* architecture;       // the causal LM
  const char* base_architecture;  // the same stack without LM head (text encoders)
  int64_t default_max_position_embeddings;  // transformers' config default
};
constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM", "LlamaModel", 2048},
    {"mistral", "MistralForCausalLM", "MistralModel", 4096 * 32},
    {"qwen2", "Qwen2ForCausalLM", "Qwen2Model", 32768},
    {"qwen3", "Qwen3ForCausalLM", "Qwen3Model", 32768},
};

// rope_scaling: null, or {"rope_type" (or the older "type"): ...}. transformers' ROPE
// validation requires the keys each type reads, so a missing one is an error here too.
// NOTE: configs saved by transformers 5 put rope_theta and the scaling keys together in
// "rope_parameters" ({"rope_theta": ..., "rope_type": "default"}); read there when present, so
// such a config does not silently run with the default theta.
Result<RopeScaling> parse_rope_scaling(const HfConfig& hf, const std::string& origin) {
  RopeScaling r;
  const bool v5 = hf.has("rope_parameters");
  const char* key = v5 ? "rope_parameters" : "rope_scaling";
  if (!hf.has(key)) return r;
  PRISM_ASSIGN_OR_RETURN(const HfConfig s, hf.get_object(key));
  if (v5 && !s.has("rope_type")) return r;  // rope_theta alone
  std::string type;
  if (s.has("rope_type")) {
    PRISM_ASSIGN_OR_RETURN(type, s.get_string("rope_type"));
  } else {
    PRISM_ASSIGN_OR_RETURN(type, s.get_string("type"));
  }
  if (type == "default") return r;
  if (type == "linear") {
    r.type = RopeScalingType::linear;
    PRISM_ASSIGN_OR_RETURN(r.factor, s.get_float("factor"));
  } else if (type == "llama3") {
    r.type = RopeScalingType::llama3;
    PRISM_ASSIGN_OR_RETURN(r.factor, s.get_float("factor"));
    PRISM_ASSIGN_OR_RETURN(r.low_freq_factor, s.get_float("low_freq_factor"));
    PRISM_ASSIGN_OR_RETURN(r.high_freq_factor, s.get_float("high_freq_factor"));
    PRISM_ASSIGN_OR_RETURN(r.original_max_position_embeddings, s.get_int("original_max_position_embeddings"));
    if (!(r.high_freq_factor > r.low_freq_factor) || !(r.low_freq_factor > 0))
      return invalid_argument(origin + ": rope_scaling needs 0 < low_freq_factor < high_freq_factor");
    if (r.original_max_position_embeddings <= 0)
      return invalid_argument(origin + ": rope_scaling.original_max_position_embeddings must be positive");
  } else {
    return unimplemented(origin + ": rope_scaling type '" + type +
                         "' is not supported (default, linear, llama3)");
  }
  if (!(r.factor >= 1.0)) return invalid_argument(origin + ": rope_scaling.factor must be >= 1");
  return r;
}

}  // namespace

Result<LlamaConfig> LlamaConfig::from_hf(const HfConfig& hf, const std::string& origin) {
  LlamaConfig c;
  PRISM_ASSIGN_OR_RETURN(c.model_type, hf.get_string("model_type"));
  const Family* family = nullptr;
  for (const Family& f : kFamilies)
    if (c.model_type == f.model_type) family = &f;
  if (!family)
    return unimplemented(origin + ": model_type '" + c.model_type +
                         "' is not a Llama-family decoder Prism runs (llama, mistral, qwen2, qwen3)");
  if (hf.has("architectures")) {
    PRISM_ASSIGN_OR_RETURN(const std::vector<std::string> archs, hf.get_strings("architectures"));
    if (!archs.empty()) c.architecture = archs[0];
    if (!c.architecture.empty() && c.architecture != family->architecture &&
        c.architecture != family->base_architecture)
      return unimplemented(origin + ": architectures '" + c.architecture + "' is not supported for model_type '" +
                           c.model_type + "' (" + family->architecture + ", " + family->base_architecture + ")");
  }
  const bool qwen2 = c.model_type == "qwen2", qwen3 = c.model_type == "qwen3";
  PRISM_ASSIGN_OR_RETURN(c.vocab_size, hf.get_int("vocab_size"));
  PRISM_ASSIGN_OR_RETURN(c.hidden_size, hf.get_int("hidden_size"));
  PRISM_ASSIGN_OR_RETURN(c.intermediate_size, hf.get_int("intermediate_size"));
  PRISM_ASSIGN_OR_RETURN(c.num_hidden_layers, hf.get_int("num_hidden_layers"));
  PRISM_ASSIGN_OR_RETURN(c.num_attention_heads, hf.get_int("num_attention_heads"));
  PRISM_ASSIGN_OR_RETURN(c.num_key_value_heads, hf.get_int("num_key_value_heads", c.num_attention_heads));
  if (c.num_attention_heads <= 0)
    return invalid_argument(origin + ": num_attention_heads must be positive, got " +
                            std::to_string(c.num_attention_heads));
  // NOTE: Qwen3Config's head_dim defaults to 128, not hidden_size / num_attention_heads.
  PRISM_ASSIGN_OR_RETURN(c.head_dim, hf.get_int("head_dim", qwen3 ? 128 : c.hidden_size / c.num_attention_heads));
  PRISM_ASSIGN_OR_RETURN(c.rms_norm_eps, hf.get_float("rms_norm_eps", 1e-6));
  if (hf.has("rope_parameters")) {
    PRISM_ASSIGN_OR_RETURN(const HfConfig rope, hf.get_object("rope_parameters"));
    PRISM_ASSIGN_OR_RETURN(c.rope_theta, rope.get_float("rope_theta", 10000.0));
  } else {
    PRISM_ASSIGN_OR_RETURN(c.rope_theta, hf.get_float("rope_theta", 10000.0));
  }
  PRISM_ASSIGN_OR_RETURN(c.rope_scaling, parse_rope_scaling(hf, origin));
  PRISM_ASSIGN_OR_RETURN(c.tie_word_embeddings, hf.get_bool("tie_word_embeddings", false));
  PRISM_ASSIGN_OR_RETURN(c.max_position_embeddings,
                         hf.get_int("max_position_embeddings", family->default_max_position_embeddings));
  PRISM_ASSIGN_OR_RETURN(const std::string hidden_act, hf.get_string("hidden_act", "silu"));
  if (hidden_act != "silu")
    return unimplemented(origin + ": hidden_act '" + hidden_act + "' is not supported (silu)");
  if (qwen2 || qwen3) {
    // NOTE: sliding_window applies only with use_sliding_window (then to the layers from
    // max_window_layers on; capping the context at the window covers every layer either way).
    PRISM_ASSIGN_OR_RETURN(const bool use_sliding_window, hf.get_bool("use_sliding_window", false));
    if (use_sliding_window) {
      PRISM_ASSIGN_OR_RETURN(c.sliding_window, hf.get_int("sliding_window", 0));
    }
  }
  // Qwen3Attention always has q_norm / k_norm; its attention_bias covers q/k/v/o as Llama's.
  c.qk_norm = qwen3;
  if (qwen2) {
    // NOTE: Qwen2Attention has q/k/v biases and no o_proj bias, whatever the config says.
    c.q_k_v_bias = true;
  } else {
    PRISM_ASSIGN_OR_RETURN(const bool attention_bias, hf.get_bool("attention_bias", false));
    c.q_k_v_bias = c.o_bias = attention_bias;
    if (c.model_type == "llama") {
      PRISM_ASSIGN_OR_RETURN(c.mlp_bias, hf.get_bool("mlp_bias", false));
    }
    if (c.model_type == "mistral") {
      PRISM_ASSIGN_OR_RETURN(c.sliding_window, hf.get_int("sliding_window", 0));
    }
  }
  PRISM_RETURN_IF_ERROR(c.validate(origin));
  return c;
}

Result<LlamaConfig> LlamaConfig::load(const std::string& dir_or_file) {
  PRISM_ASSIGN_OR_RETURN(const HfConfig hf, HfConfig::load(dir_or_file));
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string path =
      fs::is_directory(dir_or_file, ec) ? (fs::path(dir_or_file) / "config.json").string() : dir_or_file;
  return from_hf(hf, path);
}

Status LlamaConfig::validate(const std::string& origin) const {
  auto positive = [&](int64_t v, const char* key) -> Status {
    if (v <= 0) return invalid_argument(origin + ": " + key + " must be positive, got " + std::to_string(v));
    return Status();
  };
  PRISM_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  PRISM_RETURN_IF_ERROR(positive(hidden_size, "hidden_size"));
  PRISM_RETURN_IF_ERROR(positive(intermediate_size, "intermediate_size"));
  PRISM_RETURN_IF_ERROR(positive(num_hidden_layers, "num_hidden_layers"));
  PRISM_RETURN_IF_ERROR(positive(num_attention_heads, "num_attention_heads"));
  PRISM_RETURN_IF_ERROR(positive(num_key_value_heads, "num_key_value_heads"));
  PRISM_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  PRISM_RETURN_IF_ERROR(positive(max_position_embeddings, "max_position_embeddings"));
  if (sliding_window < 0) return invalid_argument(origin + ": sliding_window must be positive");
  if (num_attention_heads % num_key_value_heads != 0)
    return invalid_argument(origin + ": num_attention_heads " + std::to_string(num_attention_heads) +
                            " is not a multiple of num_key_value_heads " + std::to_string(num_key_value_heads));
  if (head_dim % 2 != 0) return invalid_argument(origin + ": head_dim " + std::to_string(head_dim) + " must be even (RoPE)");
  if (!(rms_norm_eps > 0)) return invalid_argument(origin + ": rms_norm_eps must be positive");
  if (!(rope_theta > 0)) return invalid_argument(origin + ": rope_theta must be positive");
  return Status();
}

int64_t LlamaConfig::max_context() const {
  return sliding_window > 0 ? std::min(max_position_embeddings, sliding_window) : max_position_embeddings;
}

}  // namespace prism::configs
