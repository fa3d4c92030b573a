// GenerateFrontend over tiny model directories written here: config.json, a real tokenizer
// from ../shared/testdata (GPT-2's tokenizer.json or Llama 2's tokenizer.model, copied into
// the scratch directory), tokenizer_config.json with a chat template, generation_config.json.
#include "frontends/generate_frontend.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util/paths.h"

namespace prism::frontends {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A ChatML-style template (Qwen2's shape).
constexpr const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

struct ModelDir {
  std::string name;
  json config = {{"model_type", "llama"}, {"vocab_size", 50304}, {"max_position_embeddings", 2048},
                 {"eos_token_id", 50256}};
  std::optional<json> tokenizer_config = json{{"chat_template", kChatMl}, {"eos_token", "<|endoftext|>"}};
  std::optional<json> generation_config;
  std::string tokenizer = "gpt2";  // or "llama2-spm"

  std::string write_out() const {
    const fs::path dir = test::scratch_dir("generate_frontend_" + name);
    write(dir / "config.json", config.dump());
    if (tokenizer_config) write(dir / "tokenizer_config.json", tokenizer_config->dump());
    if (generation_config) write(dir / "generation_config.json", generation_config->dump());
    const fs::path src = fs::path(test::testdata_dir()) / "tokenizers" / tokenizer;
    if (tokenizer == "gpt2") fs::copy_file(src / "tokenizer.json", dir / "tokenizer.json");
    else fs::copy_file(src / "tokenizer.model", dir / "tokenizer.model");
    return dir.string();
  }
};

serving::DeploymentConfig deployment(const std::string& dir) {
  serving::DeploymentConfig c;
  c.name = "tiny";
  c.task = "chat";
  c.model = dir;
  return c;
}

Result<std::shared_ptr<const GenerateFrontend>> load(const ModelDir& m, serving::Knobs knobs = {}) {
  serving::DeploymentConfig c = deployment(m.write_out());
  c.knobs = std::move(knobs);
  return GenerateFrontend::load(c);
}

TEST(GenerateFrontend, ReadsContextVocabEosAndDefaults) {
  ModelDir m;
  m.name = "basic";
  m.config["eos_token_id"] = json::array({50256, 7});
  m.generation_config = json{{"eos_token_id", json::array({7, 11})}, {"temperature", 0.6}, {"top_p", 0.9},
                             {"top_k", 20}, {"do_sample", true}, {"max_new_tokens", 99}};
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->max_context(), 2048);
  EXPECT_EQ((*fe)->vocab_size(), 50304);
  EXPECT_EQ((*fe)->eos_token_ids(), (std::vector<int32_t>{50256, 7, 11}));  // union, first seen order
  const SamplingParams& d = (*fe)->default_sampling();
  EXPECT_FLOAT_EQ(d.temperature, 0.6f);
  EXPECT_FLOAT_EQ(d.top_p, 0.9f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_EQ(d.max_tokens, SamplingParams{}.max_tokens);  // other fields at their defaults
  ASSERT_NE((*fe)->chat_template(), nullptr);
}

TEST(GenerateFrontend, DoSampleFalseMeansGreedyAndTokenizerEosIsAdded) {
  ModelDir m;
  m.name = "greedy";
  m.config.erase("eos_token_id");
  m.generation_config = json{{"do_sample", false}, {"temperature", 0.7}};
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->default_sampling().temperature, 0.0f);
  EXPECT_EQ((*fe)->eos_token_ids(), (std::vector<int32_t>{50256}));  // the tokenizer's <|endoftext|>
}

TEST(GenerateFrontend, NoGenerationConfigKeepsSamplingDefaults) {
  ModelDir m;
  m.name = "nogen";
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->default_sampling().temperature, 1.0f);
  EXPECT_EQ((*fe)->default_sampling().top_p, 1.0f);
  EXPECT_EQ((*fe)->default_sampling().top_k, 0);
}

TEST(GenerateFrontend, SlidingWindowCapsTheContext) {
  ModelDir m;
  m.name = "mistral";
  m.config["model_type"] = "mistral";
  m.config["max_position_embeddings"] = 32768;
  m.config["sliding_window"] = 4096;
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->max_context(), 4096);

  m.config["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->max_context(), 32768);

  m.name = "qwen2";
  m.config["model_type"] = "qwen2";
  m.config["sliding_window"] = 4096;
  m.config["use_sliding_window"] = false;  // Qwen2: the window is declared but unused
  fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->max_context(), 32768);
  m.config["use_sliding_window"] = true;
  fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->max_context(), 4096);

  m.name = "qwen3";  // the same rule
  m.config["model_type"] = "qwen3";
  m.config["use_sliding_window"] = false;
  fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->max_context(), 32768);
}

TEST(GenerateFrontend, MaxModelLenKnobLowersTheContext) {
  ModelDir m;
  m.name = "knob";
  serving::Knobs knobs;
  knobs.set("max_model_len", int64_t(512), "prism.toml:7");
  knobs.set("kv_cache_bytes", int64_t(1) << 20);  // the engine's knobs are not refused here
  knobs.set("speculation", std::string("ngram"));
  auto fe = load(m, knobs);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->max_context(), 512);

  serving::Knobs larger;
  larger.set("max_model_len", int64_t(4096), "prism.toml:7");
  auto bad = load(m, larger);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(bad.status().message().find("prism.toml:7"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("4096"), std::string::npos);
  EXPECT_NE(bad.status().message().find("2048"), std::string::npos);

  serving::Knobs wrong_type;
  wrong_type.set("max_model_len", std::string("big"));
  EXPECT_FALSE(load(m, wrong_type).has_value());
  serving::Knobs tiny;
  tiny.set("max_model_len", int64_t(0));
  EXPECT_FALSE(load(m, tiny).has_value());
}

TEST(GenerateFrontend, BadModelDirectoriesAreClearErrors) {
  serving::DeploymentConfig c = deployment(test::scratch_dir("generate_frontend_empty"));
  auto missing = GenerateFrontend::load(c);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_NE(missing.status().message().find("config.json"), std::string::npos);

  ModelDir m;
  m.name = "novocab";
  m.config.erase("vocab_size");
  auto novocab = load(m);
  ASSERT_FALSE(novocab.has_value());
  EXPECT_NE(novocab.status().message().find("vocab_size"), std::string::npos);

  m.name = "badeos";
  m.config["vocab_size"] = 50304;
  m.config["eos_token_id"] = "</s>";
  EXPECT_FALSE(load(m).has_value());

  m.name = "badgen";
  m.config["eos_token_id"] = 2;
  m.generation_config = json{{"temperature", "hot"}};
  auto badgen = load(m);
  ASSERT_FALSE(badgen.has_value());
  EXPECT_NE(badgen.status().message().find("generation_config.json"), std::string::npos);

  m.name = "notemplate_syntax";
  m.generation_config.reset();
  m.tokenizer_config = json{{"chat_template", "{% for %}"}};
  EXPECT_FALSE(load(m).has_value());  // a template Prism cannot parse fails at load
}

TEST(GenerateFrontend, ChatPromptRendersWithGenerationPromptWithoutAddingSpecialTokens) {
  ModelDir m;
  m.name = "chat";
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  text::ChatRequest chat;
  chat.messages = nlohmann::ordered_json::array({{{"role", "system"}, {"content", "Be brief."}},
                                                 {{"role", "user"}, {"content", "Hi!"}}});
  auto ids = (*fe)->chat_prompt(chat);
  ASSERT_TRUE(ids.has_value()) << ids.status().to_string();
  const std::string want =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(*ids, (*fe)->tokenizer().encode(want, false).ids);
  EXPECT_EQ(*(*fe)->tokenizer().decode(*ids), want);
}

TEST(GenerateFrontend, NoChatTemplateOnlyServesCompletions) {
  ModelDir m;
  m.name = "notemplate";
  m.tokenizer_config.reset();
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->chat_template(), nullptr);
  text::ChatRequest chat;
  chat.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto ids = (*fe)->chat_prompt(chat);
  ASSERT_FALSE(ids.has_value());
  EXPECT_EQ(ids.status().code(), StatusCode::failed_precondition);

  m.name = "template_without_chat";
  m.tokenizer_config = json{{"eos_token", "<|endoftext|>"}};
  fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->chat_template(), nullptr);
}

TEST(GenerateFrontend, ChatTemplateJinjaFileIsUsed) {
  ModelDir m;
  m.name = "jinja";
  m.tokenizer_config = json{{"bos_token", "<|endoftext|>"}};
  const std::string dir = m.write_out();
  write(fs::path(dir) / "chat_template.jinja",
        "{{ bos_token }}{% for message in messages %}[{{ message['role'] }}] {{ message['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}");
  auto fe = GenerateFrontend::load(deployment(dir));
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  ASSERT_NE((*fe)->chat_template(), nullptr);
  text::ChatRequest chat;
  chat.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto ids = (*fe)->chat_prompt(chat);
  ASSERT_TRUE(ids.has_value()) << ids.status().to_string();
  EXPECT_EQ(*(*fe)->tokenizer().decode(*ids), "<|endoftext|>[user] Hi\n[assistant] ");
}

TEST(GenerateFrontend, TemplateErrorsComeBackAsInvalidArgument) {
  ModelDir m;
  m.name = "raise";
  m.tokenizer_config = json{{"chat_template", "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be "
                                              "user') }}{% endif %}{{ messages[0]['content'] }}"}};
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  text::ChatRequest chat;
  chat.messages = nlohmann::ordered_json::array({{{"role", "assistant"}, {"content", "Hi"}}});
  auto ids = (*fe)->chat_prompt(chat);
  ASSERT_FALSE(ids.has_value());
  EXPECT_EQ(ids.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(ids.status().message().find("first must be user"), std::string::npos);
}

TEST(GenerateFrontend, AnEmptyRenderedPromptIsAnError) {
  ModelDir m;
  m.name = "empty_render";
  m.tokenizer_config = json{{"chat_template", "{% if false %}x{% endif %}"}};
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  text::ChatRequest chat;
  chat.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto ids = (*fe)->chat_prompt(chat);
  ASSERT_FALSE(ids.has_value());
  EXPECT_EQ(ids.status().code(), StatusCode::invalid_argument);
}

TEST(GenerateFrontend, TextPromptAddsTheTokenizersSpecialTokens) {
  ModelDir m;
  m.name = "spm";
  m.tokenizer = "llama2-spm";
  m.config["vocab_size"] = 32000;
  m.config["eos_token_id"] = 2;
  m.tokenizer_config = json{{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  const std::vector<int32_t> ids = (*fe)->text_prompt("Hello world");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);  // <s>
  EXPECT_EQ((*fe)->eos_token_ids(), (std::vector<int32_t>{2}));

  ModelDir g;
  g.name = "gpt2_prompt";
  auto gpt2 = load(g);
  ASSERT_TRUE(gpt2.has_value());
  EXPECT_EQ((*gpt2)->text_prompt("Hello world"), (std::vector<int32_t>{15496, 995}));  // GPT-2 adds none
}

TEST(GenerateFrontend, CheckIdsNamesTheFirstBadId) {
  ModelDir m;
  m.name = "ids";
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value());
  auto ok = (*fe)->check_ids({1, 2, 50303});
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(*ok, (std::vector<int32_t>{1, 2, 50303}));
  auto bad = (*fe)->check_ids({1, 50304, -1});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::out_of_range);
  EXPECT_NE(bad.status().message().find("50304"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("position 1"), std::string::npos) << bad.status().message();
  auto negative = (*fe)->check_ids({-5});
  ASSERT_FALSE(negative.has_value());
  EXPECT_NE(negative.status().message().find("-5"), std::string::npos);
  EXPECT_FALSE((*fe)->check_ids({}).has_value());
}

TEST(GenerateFrontend, ResolveMaxTokensGivesTheNumbers) {
  ModelDir m;
  m.name = "resolve";
  auto fe = load(m);
  ASSERT_TRUE(fe.has_value());
  const GenerateFrontend& f = **fe;
  EXPECT_EQ(*f.resolve_max_tokens(2000, 48), 48);
  EXPECT_EQ(*f.resolve_max_tokens(2000, std::nullopt), 48);  // the room left
  auto over = f.resolve_max_tokens(2000, 100);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(over.status().message(),
            "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens (2000 in the "
            "messages, 100 in the completion). Please reduce the length of the messages or completion.");
  auto full = f.resolve_max_tokens(2048, std::nullopt);
  ASSERT_FALSE(full.has_value());
  EXPECT_NE(full.status().message().find("2048 tokens"), std::string::npos) << full.status().message();
  EXPECT_FALSE(f.resolve_max_tokens(10, 0).has_value());
  EXPECT_FALSE(f.resolve_max_tokens(10, -3).has_value());
  EXPECT_FALSE(f.resolve_max_tokens(10, int64_t(1) << 40).has_value());
}

TEST(GenerateFrontend, TokenTextGivesEachTokensBytes) {
  ModelDir g;
  g.name = "token_text_gpt2";
  auto gpt2 = load(g);
  ASSERT_TRUE(gpt2.has_value());
  const GenerateFrontend& f = **gpt2;
  EXPECT_EQ(f.token_text(262), " the");
  EXPECT_EQ(f.token_text(50256), "<|endoftext|>");
  // A token holding part of a character: its raw bytes, which concatenate to the text.
  const std::vector<int32_t> ids = f.tokenizer().encode("中😀", false).ids;
  ASSERT_GT(ids.size(), 2u);
  std::string joined;
  for (int32_t id : ids) joined += f.token_text(id);
  EXPECT_EQ(joined, "中😀");
  EXPECT_EQ(f.token_text(-1), "");
  EXPECT_EQ(f.token_text(50300), "");  // a logits row with no token

  ModelDir s;
  s.name = "token_text_spm";
  s.tokenizer = "llama2-spm";
  s.config["vocab_size"] = 32000;
  s.config["eos_token_id"] = 2;
  auto spm = load(s);
  ASSERT_TRUE(spm.has_value()) << spm.status().to_string();
  const GenerateFrontend& l = **spm;
  const std::vector<int32_t> words = l.tokenizer().encode("Hello world 😀", false).ids;
  std::string text;
  for (int32_t id : words) text += l.token_text(id);
  EXPECT_EQ(text, " Hello world 😀");  // "▁Hello" keeps its space; <0xF0>... are bytes
  EXPECT_EQ(l.token_text(*l.tokenizer().token_to_id("<0xE2>")), "\xE2");
}

}  // namespace
}  // namespace prism::frontends
