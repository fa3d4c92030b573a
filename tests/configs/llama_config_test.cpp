// configs/llama_config: config.json keys of Llama 2/3, Mistral, Qwen2, Qwen3 and SmolLM2 read
// with transformers' defaults, the family rules (Qwen2's fixed biases, sliding windows), RoPE
// scaling types, and clear errors for what Prism cannot run.
#include "configs/llama_config.h"

#include <string>

#include <gtest/gtest.h>

namespace prism::configs {
namespace {

// meta-llama/Llama-3.2-1B's config.json.
constexpr char kLlama32[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

// meta-llama/Llama-2-7b-hf's (no num_key_value_heads default needed: it has one).
constexpr char kLlama2[] = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
  "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": true, "vocab_size": 32000})";

// Qwen/Qwen2.5-0.5B-Instruct's.
constexpr char kQwen25[] = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
  "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// mistralai/Mistral-7B-v0.1's.
constexpr char kMistral[] = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})";

// HuggingFaceTB/SmolLM2-360M-Instruct's.
constexpr char kSmolLm2[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 960, "initializer_range": 0.02,
  "intermediate_size": 2560, "is_llama_config": true, "max_position_embeddings": 8192, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 15, "num_hidden_layers": 32, "num_key_value_heads": 5,
  "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": false,
  "rope_scaling": null, "rope_theta": 100000, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3", "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16",
  "fp16": "float16"}}, "use_cache": true, "vocab_size": 49152})";

// Qwen/Qwen3-4B's (Tongyi-MAI/Z-Image-Turbo's text_encoder/config.json is the same).
constexpr char kQwen3[] = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2560,
  "initializer_range": 0.02, "intermediate_size": 9728, "max_position_embeddings": 40960, "max_window_layers": 36,
  "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

Result<LlamaConfig> parse(const std::string& json) {
  auto hf = configs::HfConfig::parse(json);
  if (!hf) return hf.status();
  return LlamaConfig::from_hf(*hf);
}

std::string edited(std::string json, const std::string& from, const std::string& to) {
  const size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) json.replace(at, from.size(), to);
  return json;
}

TEST(LlamaConfig, ReadsLlama32WithLlama3RopeScaling) {
  auto c = parse(kLlama32);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->intermediate_size, 8192);
  EXPECT_EQ(c->num_hidden_layers, 16);
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::llama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->q_k_v_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_EQ(c->max_context(), 131072);
}

TEST(LlamaConfig, ReadsLlama2) {
  auto c = parse(kLlama2);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->head_dim, 128);  // hidden_size / num_attention_heads
  EXPECT_EQ(c->num_key_value_heads, 32);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::none);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);  // transformers' default: the key is absent
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->max_context(), 4096);
}

TEST(LlamaConfig, Qwen2HasQkvBiasesAndIgnoresAnUnusedSlidingWindow) {
  auto c = parse(kQwen25);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_TRUE(c->q_k_v_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->max_context(), 32768);
  // attention_bias means nothing to Qwen2: its module always has q/k/v biases, never o's.
  auto b = parse(edited(kQwen25, "\"attention_dropout\": 0.0", "\"attention_bias\": false"));
  ASSERT_TRUE(b.has_value()) << b.status().to_string();
  EXPECT_TRUE(b->q_k_v_bias);
  EXPECT_FALSE(b->o_bias);
  // With use_sliding_window the window caps the context.
  auto w = parse(edited(edited(kQwen25, "\"use_sliding_window\": false", "\"use_sliding_window\": true"),
                        "\"sliding_window\": 32768", "\"sliding_window\": 4096"));
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_EQ(w->max_context(), 4096);
}

TEST(LlamaConfig, ReadsQwen3WithQkNorm) {
  auto c = parse(kQwen3);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "qwen3");
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c->hidden_size, 2560);
  EXPECT_EQ(c->num_hidden_layers, 36);
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->head_dim, 128);  // not 2560 / 32 = 80
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->q_k_v_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->max_context(), 40960);  // sliding_window null and unused
  // attention_bias covers q/k/v and o, as Llama's.
  auto b = parse(edited(kQwen3, "\"attention_bias\": false", "\"attention_bias\": true"));
  ASSERT_TRUE(b.has_value()) << b.status().to_string();
  EXPECT_TRUE(b->q_k_v_bias);
  EXPECT_TRUE(b->o_bias);
  // No head_dim: Qwen3Config's default, 128.
  auto d = parse(edited(kQwen3, "\"head_dim\": 128,", ""));
  ASSERT_TRUE(d.has_value()) << d.status().to_string();
  EXPECT_EQ(d->head_dim, 128);
  // The base model (a diffusion pipeline's text_encoder/ may declare Qwen3Model).
  auto base = parse(edited(kQwen3, "\"Qwen3ForCausalLM\"", "\"Qwen3Model\""));
  ASSERT_TRUE(base.has_value()) << base.status().to_string();
  EXPECT_EQ(base->architecture, "Qwen3Model");
  // With use_sliding_window the window caps the context.
  auto w = parse(edited(edited(kQwen3, "\"use_sliding_window\": false", "\"use_sliding_window\": true"),
                        "\"sliding_window\": null", "\"sliding_window\": 4096"));
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_EQ(w->max_context(), 4096);
  // Other families never take q/k norms.
  auto l = parse(kLlama32);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  EXPECT_FALSE(l->qk_norm);
}

// transformers 5 writes rope_theta and the scaling keys together in "rope_parameters".
TEST(LlamaConfig, ReadsRopeParameters) {
  auto plain = parse(edited(kQwen3, "\"rope_scaling\": null, \"rope_theta\": 1000000",
                            R"("rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"})"));
  ASSERT_TRUE(plain.has_value()) << plain.status().to_string();
  EXPECT_DOUBLE_EQ(plain->rope_theta, 1e6);
  EXPECT_EQ(plain->rope_scaling.type, RopeScalingType::none);
  const std::string llama3 = R"("rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,)";
  auto scaled = parse(edited(kLlama32, llama3,
                             R"("rope_parameters": {"rope_theta": 500000.0, "factor": 32.0, "high_freq_factor": 4.0,
                   "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},)"));
  ASSERT_TRUE(scaled.has_value()) << scaled.status().to_string();
  EXPECT_DOUBLE_EQ(scaled->rope_theta, 500000.0);
  EXPECT_EQ(scaled->rope_scaling.type, RopeScalingType::llama3);
  EXPECT_DOUBLE_EQ(scaled->rope_scaling.factor, 32.0);
}

TEST(LlamaConfig, MistralSlidingWindowCapsTheContext) {
  auto c = parse(kMistral);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "mistral");
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->max_position_embeddings, 32768);
  EXPECT_EQ(c->max_context(), 4096);
  EXPECT_FALSE(c->q_k_v_bias);
  // Mistral v0.3 writes "sliding_window": null: no window.
  auto v03 = parse(edited(kMistral, "\"sliding_window\": 4096", "\"sliding_window\": null"));
  ASSERT_TRUE(v03.has_value()) << v03.status().to_string();
  EXPECT_EQ(v03->max_context(), 32768);
}

TEST(LlamaConfig, ReadsSmolLm2) {
  auto c = parse(kSmolLm2);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->num_attention_heads, 15);
  EXPECT_EQ(c->num_key_value_heads, 5);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_DOUBLE_EQ(c->rope_theta, 100000.0);  // an integer in the file
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->max_context(), 8192);
}

TEST(LlamaConfig, OptionalLlamaBiasesAndDefaults) {
  auto c = parse(edited(edited(kLlama32, "\"attention_bias\": false", "\"attention_bias\": true"),
                        "\"mlp_bias\": false", "\"mlp_bias\": true"));
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_TRUE(c->q_k_v_bias);
  EXPECT_TRUE(c->o_bias);
  EXPECT_TRUE(c->mlp_bias);
  // No num_key_value_heads: multi-head attention. No rms_norm_eps: 1e-6.
  auto d = parse(edited(edited(kLlama2, "\"num_key_value_heads\": 32,", ""), "\"rms_norm_eps\": 1e-05,", ""));
  ASSERT_TRUE(d.has_value()) << d.status().to_string();
  EXPECT_EQ(d->num_key_value_heads, 32);
  EXPECT_DOUBLE_EQ(d->rms_norm_eps, 1e-6);
}

TEST(LlamaConfig, RopeScalingTypes) {
  const std::string llama3 = R"({"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"})";
  auto with = [&](const std::string& scaling) { return parse(edited(kLlama32, llama3, scaling)); };
  auto linear = with(R"({"type": "linear", "factor": 2.0})");  // the older "type" key
  ASSERT_TRUE(linear.has_value()) << linear.status().to_string();
  EXPECT_EQ(linear->rope_scaling.type, RopeScalingType::linear);
  EXPECT_DOUBLE_EQ(linear->rope_scaling.factor, 2.0);
  auto def = with(R"({"rope_type": "default"})");
  ASSERT_TRUE(def.has_value()) << def.status().to_string();
  EXPECT_EQ(def->rope_scaling.type, RopeScalingType::none);
  auto none = with("null");
  ASSERT_TRUE(none.has_value()) << none.status().to_string();
  EXPECT_EQ(none->rope_scaling.type, RopeScalingType::none);

  auto yarn = with(R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})");
  ASSERT_FALSE(yarn.has_value());
  EXPECT_EQ(yarn.status().code(), StatusCode::unimplemented);
  EXPECT_NE(yarn.status().message().find("rope_scaling type 'yarn'"), std::string::npos) << yarn.status().to_string();
  auto missing = with(R"({"rope_type": "llama3", "factor": 8.0})");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.status().message().find("rope_scaling.low_freq_factor"), std::string::npos)
      << missing.status().to_string();
  auto untyped = with(R"({"factor": 8.0})");
  ASSERT_FALSE(untyped.has_value());
  EXPECT_NE(untyped.status().message().find("rope_scaling.type"), std::string::npos) << untyped.status().to_string();
}

TEST(LlamaConfig, ErrorsNameTheKey) {
  struct Case {
    std::string json;
    StatusCode code;
    std::string mention;
  };
  const Case cases[] = {
      {edited(kLlama32, "\"model_type\": \"llama\"", "\"model_type\": \"gemma2\""), StatusCode::unimplemented, "gemma2"},
      {edited(kLlama32, "\"LlamaForCausalLM\"", "\"LlamaForSequenceClassification\""), StatusCode::unimplemented,
       "LlamaForSequenceClassification"},
      {edited(kLlama32, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\""), StatusCode::unimplemented, "hidden_act"},
      {edited(kLlama32, "\"hidden_size\": 2048,", ""), StatusCode::not_found, "hidden_size"},
      {edited(kLlama32, "\"vocab_size\": 128256", "\"vocab_size\": \"big\""), StatusCode::invalid_argument, "vocab_size"},
      {edited(kLlama32, "\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5"), StatusCode::invalid_argument,
       "num_key_value_heads"},
      {edited(kLlama32, "\"num_attention_heads\": 32", "\"num_attention_heads\": 0"), StatusCode::invalid_argument,
       "num_attention_heads"},
      {edited(kLlama32, "\"head_dim\": 64", "\"head_dim\": 63"), StatusCode::invalid_argument, "head_dim"},
      {edited(kLlama32, "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": 1"), StatusCode::invalid_argument,
       "tie_word_embeddings"},
  };
  for (const Case& c : cases) {
    auto r = parse(c.json);
    ASSERT_FALSE(r.has_value()) << c.mention;
    EXPECT_EQ(r.status().code(), c.code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(c.mention), std::string::npos) << r.status().to_string();
    EXPECT_NE(r.status().message().find("config.json"), std::string::npos) << r.status().to_string();
  }
}

}  // namespace
}  // namespace prism::configs
