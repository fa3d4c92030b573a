// configs/bert_config.cpp: BertConfig, config.json keys as transformers' BertConfig and XLMRobertaConfig name them,
// with their defaults where transformers has one.
#include "configs/bert_config.h"

namespace prism::configs {
namespace {

Result<Activation> parse_hidden_act(const std::string& name) {
  // transformers' ACT2FN: "gelu" is the exact (erf) form; "gelu_new" and
  // "gelu_pytorch_tanh" are the tanh approximation.
  const std::optional<Activation> act = parse_activation(name);
  if (act && act != Activation::quick_gelu) return *act;
  return unimplemented("config.json: hidden_act '" + name +
                       "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)");
}

}  // namespace

Result<BertConfig> BertConfig::from_hf(const HfConfig& hf) {
  BertConfig c;
  PRISM_ASSIGN_OR_RETURN(c.model_type, hf.get_string("model_type"));
  const bool xlmr = c.model_type == "xlm-roberta";
  if (c.model_type != "bert" && !xlmr)
    return unimplemented("config.json: model_type '" + c.model_type +
                         "' is not a BERT-family encoder Prism runs (bert, xlm-roberta)");
  PRISM_ASSIGN_OR_RETURN(c.vocab_size, hf.get_int("vocab_size"));
  PRISM_ASSIGN_OR_RETURN(c.hidden_size, hf.get_int("hidden_size"));
  PRISM_ASSIGN_OR_RETURN(c.num_hidden_layers, hf.get_int("num_hidden_layers"));
  PRISM_ASSIGN_OR_RETURN(c.num_attention_heads, hf.get_int("num_attention_heads"));
  PRISM_ASSIGN_OR_RETURN(c.intermediate_size, hf.get_int("intermediate_size"));
  PRISM_ASSIGN_OR_RETURN(c.max_position_embeddings, hf.get_int("max_position_embeddings"));
  PRISM_ASSIGN_OR_RETURN(c.type_vocab_size, hf.get_int("type_vocab_size", 2));
  PRISM_ASSIGN_OR_RETURN(c.pad_token_id, hf.get_int("pad_token_id", xlmr ? 1 : 0));
  PRISM_ASSIGN_OR_RETURN(c.layer_norm_eps, hf.get_float("layer_norm_eps", 1e-12));
  PRISM_ASSIGN_OR_RETURN(c.hidden_act, hf.get_string("hidden_act", "gelu"));
  PRISM_ASSIGN_OR_RETURN(c.activation, parse_hidden_act(c.hidden_act));
  PRISM_ASSIGN_OR_RETURN(const std::string position_type, hf.get_string("position_embedding_type", "absolute"));
  if (position_type != "absolute")
    return unimplemented("config.json: position_embedding_type '" + position_type + "' is not supported (absolute)");
  PRISM_ASSIGN_OR_RETURN(const bool is_decoder, hf.get_bool("is_decoder", false));
  if (is_decoder) return unimplemented("config.json: is_decoder BERT models are not encoders Prism runs");
  c.position_offset = xlmr ? c.pad_token_id + 1 : 0;
  PRISM_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<BertConfig> BertConfig::load(const std::string& dir_or_file) {
  PRISM_ASSIGN_OR_RETURN(const HfConfig hf, HfConfig::load(dir_or_file));
  return from_hf(hf);
}

Status BertConfig::validate() const {
  auto positive = [](int64_t v, const char* key) -> Status {
    if (v <= 0)
      return invalid_argument(std::string("config.json: ") + key + " must be positive, got " + std::to_string(v));
    return Status();
  };
  PRISM_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  PRISM_RETURN_IF_ERROR(positive(hidden_size, "hidden_size"));
  PRISM_RETURN_IF_ERROR(positive(num_hidden_layers, "num_hidden_layers"));
  PRISM_RETURN_IF_ERROR(positive(num_attention_heads, "num_attention_heads"));
  PRISM_RETURN_IF_ERROR(positive(intermediate_size, "intermediate_size"));
  PRISM_RETURN_IF_ERROR(positive(max_position_embeddings, "max_position_embeddings"));
  PRISM_RETURN_IF_ERROR(positive(type_vocab_size, "type_vocab_size"));
  if (hidden_size % num_attention_heads != 0)
    return invalid_argument("config.json: hidden_size " + std::to_string(hidden_size) +
                            " is not a multiple of num_attention_heads " + std::to_string(num_attention_heads));
  if (pad_token_id < 0 || pad_token_id >= vocab_size)
    return invalid_argument("config.json: pad_token_id " + std::to_string(pad_token_id) + " is outside the vocabulary");
  if (max_tokens() < 1)
    return invalid_argument("config.json: max_position_embeddings " + std::to_string(max_position_embeddings) +
                            " leaves no position past the offset " + std::to_string(position_offset));
  if (!(layer_norm_eps > 0)) return invalid_argument("config.json: layer_norm_eps must be positive");
  return Status();
}

}  // namespace prism::configs
