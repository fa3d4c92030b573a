// configs/bert_config: config.json keys of BERT and XLM-RoBERTa read with transformers'
// defaults, the XLM-R position offset, and clear errors for what Prism cannot run.
#include "configs/bert_config.h"

#include <string>

#include <gtest/gtest.h>

namespace prism::configs {
namespace {

// all-MiniLM-L6-v2's config.json.
constexpr char kMiniLm[] = R"({
  "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": false,
  "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 384, "initializer_range": 0.02,
  "intermediate_size": 1536, "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
  "num_attention_heads": 12, "num_hidden_layers": 6, "pad_token_id": 0, "position_embedding_type": "absolute",
  "transformers_version": "4.8.2", "type_vocab_size": 2, "use_cache": true, "vocab_size": 30522})";

// multilingual-e5-base's (XLMRobertaModel).
constexpr char kXlmr[] = R"({
  "architectures": ["XLMRobertaModel"], "attention_probs_dropout_prob": 0.1, "bos_token_id": 0,
  "eos_token_id": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
  "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
  "max_position_embeddings": 514, "model_type": "xlm-roberta", "num_attention_heads": 12,
  "num_hidden_layers": 12, "output_past": true, "pad_token_id": 1, "position_embedding_type": "absolute",
  "torch_dtype": "float32", "type_vocab_size": 1, "use_cache": true, "vocab_size": 250002})";

Result<BertConfig> parse(const std::string& json) {
  auto hf = configs::HfConfig::parse(json);
  if (!hf) return hf.status();
  return BertConfig::from_hf(*hf);
}

std::string edited(std::string json, const std::string& from, const std::string& to) {
  const size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) json.replace(at, from.size(), to);
  return json;
}

TEST(BertConfig, ReadsBert) {
  auto c = parse(kMiniLm);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "bert");
  EXPECT_EQ(c->hidden_size, 384);
  EXPECT_EQ(c->head_dim(), 32);
  EXPECT_EQ(c->num_hidden_layers, 6);
  EXPECT_EQ(c->intermediate_size, 1536);
  EXPECT_EQ(c->vocab_size, 30522);
  EXPECT_EQ(c->type_vocab_size, 2);
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-12);
  EXPECT_EQ(c->activation, Activation::gelu_erf);
  EXPECT_EQ(c->position_offset, 0);
  EXPECT_EQ(c->max_tokens(), 512);
}

TEST(BertConfig, XlmRobertaPositionsStartPastThePaddingIndex) {
  auto c = parse(kXlmr);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->pad_token_id, 1);
  EXPECT_EQ(c->position_offset, 2);
  EXPECT_EQ(c->max_tokens(), 512);  // 514 positions, the first two never used
  EXPECT_EQ(c->type_vocab_size, 1);
}

TEST(BertConfig, DefaultsForAbsentKeys) {
  const std::string minimal = R"({"model_type": "bert", "vocab_size": 100, "hidden_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 32})";
  auto c = parse(minimal);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->type_vocab_size, 2);
  EXPECT_EQ(c->pad_token_id, 0);
  EXPECT_EQ(c->hidden_act, "gelu");
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-12);
}

TEST(BertConfig, Activations) {
  struct Case {
    const char* name;
    Activation want;
  };
  for (const Case& k : {Case{"gelu", Activation::gelu_erf}, Case{"gelu_new", Activation::gelu_tanh},
                        Case{"gelu_pytorch_tanh", Activation::gelu_tanh}, Case{"relu", Activation::relu}}) {
    auto c = parse(edited(kMiniLm, "\"hidden_act\": \"gelu\"", std::string("\"hidden_act\": \"") + k.name + "\""));
    ASSERT_TRUE(c.has_value()) << k.name << ": " << c.status().to_string();
    EXPECT_EQ(c->activation, k.want) << k.name;
  }
  auto silu = parse(edited(kMiniLm, "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"silu\""));
  ASSERT_FALSE(silu.has_value());
  EXPECT_EQ(silu.status().code(), StatusCode::unimplemented);
  EXPECT_NE(silu.status().message().find("silu"), std::string::npos);
}

void expect_error(const std::string& json, StatusCode code, const std::string& mention) {
  auto c = parse(json);
  ASSERT_FALSE(c.has_value()) << mention;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(mention), std::string::npos) << c.status().to_string();
}

TEST(BertConfig, ClearErrors) {
  expect_error(edited(kMiniLm, "\"model_type\": \"bert\"", "\"model_type\": \"mpnet\""), StatusCode::unimplemented,
               "mpnet");
  expect_error(edited(kMiniLm, "\"model_type\": \"bert\",", ""), StatusCode::not_found, "model_type");
  expect_error(edited(kMiniLm, "\"hidden_size\": 384,", ""), StatusCode::not_found, "hidden_size");
  expect_error(edited(kMiniLm, "\"hidden_size\": 384", "\"hidden_size\": \"384\""), StatusCode::invalid_argument,
               "hidden_size");
  expect_error(edited(kMiniLm, "\"num_attention_heads\": 12", "\"num_attention_heads\": 7"),
               StatusCode::invalid_argument, "num_attention_heads");
  expect_error(edited(kMiniLm, "\"num_hidden_layers\": 6", "\"num_hidden_layers\": 0"), StatusCode::invalid_argument,
               "num_hidden_layers");
  expect_error(edited(kMiniLm, "\"position_embedding_type\": \"absolute\"",
                      "\"position_embedding_type\": \"relative_key\""),
               StatusCode::unimplemented, "relative_key");
  expect_error(edited(kMiniLm, "\"pad_token_id\": 0", "\"pad_token_id\": 40000"), StatusCode::invalid_argument,
               "pad_token_id");
  expect_error(edited(kXlmr, "\"max_position_embeddings\": 514", "\"max_position_embeddings\": 2"),
               StatusCode::invalid_argument, "max_position_embeddings");
}

}  // namespace
}  // namespace prism::configs
