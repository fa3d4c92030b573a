// The demo chat checkpoint: same bytes twice, a tokenizer and chat template Prism loads, and
// a Llama (models/llama) whose greedy babble is printable text that does not end early.
#include "tools/demo/demo_chat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "configs/hf_config.h"
#include "formats/safetensors.h"
#include "models/llama/llama.h"
#include "test_util/paths.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"


namespace prism::tools::demo {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Written once for the whole file (each test only reads it).
const std::string& demo_dir() {
  static const std::string dir = [] {
    std::string d = test::scratch_dir("demo_chat");
    Status s = write_demo_chat(d);
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }();
  return dir;
}

TEST(DemoChat, SameBytesEveryRun) {
  const std::string again = test::scratch_dir("demo_chat_again");
  ASSERT_TRUE(write_demo_chat(again).ok());
  int files = 0;
  for (const auto& entry : fs::directory_iterator(demo_dir())) {
    const fs::path other = fs::path(again) / entry.path().filename();
    ASSERT_TRUE(fs::exists(other)) << other;
    EXPECT_EQ(read_file(entry.path()), read_file(other)) << entry.path().filename();
    ++files;
  }
  EXPECT_EQ(files, 6);  // config, generation_config, weights, tokenizer, tokenizer_config, README
}

TEST(DemoChat, LlamaConfigAndWeightNames) {
  auto config = configs::HfConfig::load(demo_dir());
  ASSERT_TRUE(config.has_value()) << config.status().message();
  EXPECT_EQ(config->get_string("model_type").value(), "llama");
  EXPECT_EQ(config->get_strings("architectures").value(), std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_TRUE(config->get_bool("tie_word_embeddings").value());
  EXPECT_EQ(config->get_int("hidden_size").value(), 64);
  EXPECT_EQ(config->get_int("num_hidden_layers").value(), 2);
  EXPECT_EQ(config->get_int("num_attention_heads").value(), 4);
  EXPECT_EQ(config->get_int("num_key_value_heads").value(), 2);
  EXPECT_EQ(config->get_int("max_position_embeddings").value(), 2048);
  EXPECT_EQ(config->get_int("eos_token_id").value(), 2);

  auto weights = formats::WeightSource::open(demo_dir());
  ASSERT_TRUE(weights.has_value()) << weights.status().message();
  const int64_t vocab = config->get_int("vocab_size").value();
  for (const char* name : {"model.norm.weight", "model.layers.1.self_attn.q_proj.weight",
                           "model.layers.1.post_attention_layernorm.weight"})
    EXPECT_TRUE(weights->contains(name)) << name;
  EXPECT_FALSE(weights->contains("lm_head.weight"));  // tied
  EXPECT_TRUE(weights->get("model.embed_tokens.weight", {vocab, 64}).has_value());
  EXPECT_TRUE(weights->get("model.layers.0.self_attn.k_proj.weight", {32, 64}).has_value());
  EXPECT_TRUE(weights->get("model.layers.0.self_attn.o_proj.weight", {64, 64}).has_value());
  EXPECT_TRUE(weights->get("model.layers.1.mlp.gate_proj.weight", {128, 64}).has_value());
  EXPECT_TRUE(weights->get("model.layers.1.mlp.down_proj.weight", {64, 128}).has_value());
  EXPECT_EQ(weights->names().size(), 1u + 2u * 9u + 1u);
}

TEST(DemoChat, ByteLevelBpeTokenizer) {
  auto tok = text::Tokenizer::load(demo_dir());
  ASSERT_TRUE(tok.has_value()) << tok.status().message();
  auto config = configs::HfConfig::load(demo_dir());
  EXPECT_EQ(tok->vocab_size(), config->get_int("vocab_size").value());
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), 0);
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), 1);
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), 2);
  EXPECT_GE(tok->vocab_size(), 3 + 256 + 300);  // a few hundred merges

  // Common words are one token each; anything else falls back to bytes and round-trips.
  const std::string sentence = "The water of the river is very near today.";
  const text::Encoding words = tok->encode(sentence, false);
  EXPECT_EQ(words.ids.size(), 10u);  // "The", " water", ..., " today", "."
  EXPECT_EQ(tok->decode(words.ids).value(), sentence);
  EXPECT_EQ(tok->encode(" world", false).ids.size(), 1u);
  for (const std::string s : {"Zürich, 東京 — ok? \t\n", "x", "<|im_start|>user\nhi<|im_end|>\n"}) {
    const text::Encoding e = tok->encode(s, false);
    EXPECT_EQ(tok->decode(e.ids).value(), s);
  }
  const text::Encoding chat = tok->encode("<|im_start|>user\nhi<|im_end|>", false);
  ASSERT_GE(chat.ids.size(), 3u);
  EXPECT_EQ(chat.ids.front(), 1);
  EXPECT_EQ(chat.ids.back(), 2);
}

TEST(DemoChat, ChatMlTemplate) {
  auto tmpl = text::ChatTemplate::load(demo_dir());
  ASSERT_TRUE(tmpl.has_value()) << tmpl.status().message();
  text::ChatRequest req;
  req.messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}])");
  req.add_generation_prompt = true;
  EXPECT_EQ(tmpl->render(req).value(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
}

TEST(DemoChat, TomlKnobs) {
  const std::string toml = kDemoChatToml;
  EXPECT_NE(toml.find("kv_cache_bytes = 16777216"), std::string::npos);
  EXPECT_NE(toml.find("prefix_caching = true"), std::string::npos);
}

// Greedy decoding of one sequence through models::Decoder with a contiguous f32 paged cache.
std::vector<int32_t> greedy(models::Decoder& model, std::vector<int32_t> prompt, int num_new) {
  constexpr int kBlockSize = 16;
  const models::KvSpec spec = model.kv_spec();
  const int max_len = static_cast<int>(prompt.size()) + num_new;
  const int num_blocks = (max_len + kBlockSize - 1) / kBlockSize;
  std::vector<models::KvLayer> kv(spec.num_layers);
  for (auto& layer : kv) {
    layer.k = Tensor::zeros({num_blocks, kBlockSize, spec.num_kv_heads, spec.head_dim}, DType::f32);
    layer.v = Tensor::zeros({num_blocks, kBlockSize, spec.num_kv_heads, spec.head_dim}, DType::f32);
  }
  std::vector<int32_t> table(num_blocks);
  for (int b = 0; b < num_blocks; ++b) table[b] = b;
  std::vector<int32_t> out;
  std::vector<int32_t> step = std::move(prompt);
  int cached = 0;
  while (static_cast<int>(out.size()) < num_new) {
    const int t = static_cast<int>(step.size());
    std::vector<int32_t> positions(t);
    for (int i = 0; i < t; ++i) positions[i] = cached + i;
    models::DecoderBatch batch;
    batch.token_ids = Tensor::from<int32_t>(step, {t});
    batch.positions = Tensor::from<int32_t>(positions, {t});
    batch.slot_mapping = Tensor::from<int32_t>(positions, {t});
    batch.cu_seqlens_q = Tensor::from<int32_t>({0, t}, {2});
    batch.block_tables = Tensor::from<int32_t>(table, {1, num_blocks});
    batch.context_lens = Tensor::from<int32_t>({cached + t}, {1});
    batch.logits_rows = Tensor::from<int32_t>({t - 1}, {1});
    Tensor logits = model.forward(batch, kv);
    const float* l = logits.data<float>();
    int32_t best = 0;
    for (int64_t i = 1; i < model.vocab_size(); ++i)
      if (l[i] > l[best]) best = static_cast<int32_t>(i);
    out.push_back(best);
    cached += t;
    step = {best};
  }
  return out;
}

TEST(DemoChat, LoadsAsLlamaAndBabblesReadably) {
  auto model = models::load_llama(demo_dir(), ops::Precision::f32);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  auto tok = text::Tokenizer::load(demo_dir());
  ASSERT_TRUE(tok.has_value());
  EXPECT_EQ((*model)->vocab_size(), tok->vocab_size());
  EXPECT_EQ((*model)->kv_spec().num_layers, 2);
  EXPECT_EQ((*model)->kv_spec().num_kv_heads, 2);
  EXPECT_EQ((*model)->kv_spec().head_dim, 16);
  EXPECT_EQ((*model)->max_context(), 2048);

  const text::Encoding prompt =
      tok->encode("<|im_start|>user\nTell me about the river.<|im_end|>\n<|im_start|>assistant\n", false);
  const std::vector<int32_t> reply = greedy(**model, prompt.ids, 48);
  for (int32_t id : reply) EXPECT_GT(id, 2) << "a special token in the reply";
  const std::string text = tok->decode(reply).value();
  for (unsigned char c : text) EXPECT_TRUE((c >= 0x20 && c < 0x7f) || c == '\n') << "byte " << int(c) << " in " << text;
  EXPECT_GE(std::count(text.begin(), text.end(), ' '), 8) << text;  // words, not letters
}

}  // namespace
}  // namespace prism::tools::demo
