// configs/whisper_config.cpp: WhisperConfig, config.json keys as transformers' WhisperConfig
// names them, its defaults (whisper-tiny's sizes) for omitted keys, and detection.
#include "configs/whisper_config.h"

#include <filesystem>
#include <string>
#include <vector>

namespace prism::configs {
namespace {

constexpr char kArchitecture[] = "WhisperForConditionalGeneration";

Result<Activation> parse_mlp_activation(const std::string& name, const std::string& origin) {
  const std::optional<Activation> act = parse_activation(name);
  if (act && act != Activation::quick_gelu) return *act;
  return unimplemented(origin + ": activation_function '" + name +
                       "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)");
}

}  // namespace

Result<WhisperConfig> WhisperConfig::from_hf(const HfConfig& hf, const std::string& origin) {
  PRISM_ASSIGN_OR_RETURN(const std::string model_type, hf.get_string("model_type", ""));
  if (model_type != "whisper") return unimplemented(origin + ": model_type '" + model_type + "' is not whisper");
  if (hf.has("architectures")) {
    PRISM_ASSIGN_OR_RETURN(const std::vector<std::string> archs, hf.get_strings("architectures"));
    if (!archs.empty() && archs[0] != kArchitecture)
      return unimplemented(origin + ": architectures '" + archs[0] + "' is not supported for model_type 'whisper' (" +
                           kArchitecture + ")");
  }
  WhisperConfig c;
  PRISM_ASSIGN_OR_RETURN(c.d_model, hf.get_int("d_model", c.d_model));
  PRISM_ASSIGN_OR_RETURN(c.encoder_layers, hf.get_int("encoder_layers", c.encoder_layers));
  PRISM_ASSIGN_OR_RETURN(c.decoder_layers, hf.get_int("decoder_layers", c.decoder_layers));
  PRISM_ASSIGN_OR_RETURN(c.encoder_heads, hf.get_int("encoder_attention_heads", c.encoder_heads));
  PRISM_ASSIGN_OR_RETURN(c.decoder_heads, hf.get_int("decoder_attention_heads", c.decoder_heads));
  PRISM_ASSIGN_OR_RETURN(c.encoder_ffn_dim, hf.get_int("encoder_ffn_dim", c.encoder_ffn_dim));
  PRISM_ASSIGN_OR_RETURN(c.decoder_ffn_dim, hf.get_int("decoder_ffn_dim", c.decoder_ffn_dim));
  PRISM_ASSIGN_OR_RETURN(c.num_mel_bins, hf.get_int("num_mel_bins", c.num_mel_bins));
  PRISM_ASSIGN_OR_RETURN(c.max_source_positions, hf.get_int("max_source_positions", c.max_source_positions));
  PRISM_ASSIGN_OR_RETURN(c.max_target_positions, hf.get_int("max_target_positions", c.max_target_positions));
  PRISM_ASSIGN_OR_RETURN(c.vocab_size, hf.get_int("vocab_size", c.vocab_size));
  PRISM_ASSIGN_OR_RETURN(c.scale_embedding, hf.get_bool("scale_embedding", c.scale_embedding));
  PRISM_ASSIGN_OR_RETURN(const std::string activation, hf.get_string("activation_function", "gelu"));
  PRISM_ASSIGN_OR_RETURN(c.activation, parse_mlp_activation(activation, origin));
  for (auto [key, out] : {std::pair{"eos_token_id", &c.eos_token_id},
                          std::pair{"decoder_start_token_id", &c.decoder_start_token_id}}) {
    if (!hf.has(key)) continue;
    PRISM_ASSIGN_OR_RETURN(*out, hf.get_int(key));
  }
  for (auto [key, out] : {std::pair{"suppress_tokens", &c.suppress_tokens},
                          std::pair{"begin_suppress_tokens", &c.begin_suppress_tokens}}) {
    if (!hf.has(key)) continue;
    PRISM_ASSIGN_OR_RETURN(*out, hf.get_ints(key));
  }
  PRISM_RETURN_IF_ERROR(c.validate(origin));
  return c;
}

Result<WhisperConfig> WhisperConfig::load(const std::string& dir_or_file) {
  PRISM_ASSIGN_OR_RETURN(const HfConfig hf, HfConfig::load(dir_or_file));
  return from_hf(hf, hf.origin());
}

Status WhisperConfig::validate(const std::string& origin) const {
  auto positive = [&](int64_t v, const char* key) -> Status {
    if (v <= 0) return invalid_argument(origin + ": " + key + " must be positive, got " + std::to_string(v));
    return Status();
  };
  PRISM_RETURN_IF_ERROR(positive(d_model, "d_model"));
  PRISM_RETURN_IF_ERROR(positive(encoder_layers, "encoder_layers"));
  PRISM_RETURN_IF_ERROR(positive(decoder_layers, "decoder_layers"));
  PRISM_RETURN_IF_ERROR(positive(encoder_heads, "encoder_attention_heads"));
  PRISM_RETURN_IF_ERROR(positive(decoder_heads, "decoder_attention_heads"));
  PRISM_RETURN_IF_ERROR(positive(encoder_ffn_dim, "encoder_ffn_dim"));
  PRISM_RETURN_IF_ERROR(positive(decoder_ffn_dim, "decoder_ffn_dim"));
  PRISM_RETURN_IF_ERROR(positive(num_mel_bins, "num_mel_bins"));
  PRISM_RETURN_IF_ERROR(positive(max_source_positions, "max_source_positions"));
  PRISM_RETURN_IF_ERROR(positive(max_target_positions, "max_target_positions"));
  PRISM_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  if (d_model % encoder_heads != 0)
    return invalid_argument(origin + ": d_model " + std::to_string(d_model) +
                            " is not a multiple of encoder_attention_heads " + std::to_string(encoder_heads));
  if (d_model % decoder_heads != 0)
    return invalid_argument(origin + ": d_model " + std::to_string(d_model) +
                            " is not a multiple of decoder_attention_heads " + std::to_string(decoder_heads));
  return Status();
}

bool is_whisper_model(const std::string& dir) {
  Result<HfConfig> hf = HfConfig::load(dir);
  if (!hf) return false;
  Result<std::string> model_type = hf->get_string("model_type");
  return model_type && *model_type == "whisper";
}

}  // namespace prism::configs
