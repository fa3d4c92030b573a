// configs/sentence_embedding: reading the sentence-transformers layout of a model directory
// (modules.json, the Pooling module's config.json, Normalize), its default without
// modules.json, and clear errors for malformed or unsupported files.
#include "configs/sentence_embedding.h"

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "test_util/paths.h"

namespace prism::configs {
namespace {

void write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

constexpr char kModulesWithNormalize[] = R"([
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
])";
constexpr char kModulesWithoutNormalize[] = R"([
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
])";

std::string pooling_config(bool cls, bool mean, bool last, bool max = false) {
  auto b = [](bool v) { return v ? "true" : "false"; };
  return std::string("{\"word_embedding_dimension\": 384, \"pooling_mode_cls_token\": ") + b(cls) +
         ", \"pooling_mode_mean_tokens\": " + b(mean) + ", \"pooling_mode_max_tokens\": " + b(max) +
         ", \"pooling_mode_mean_sqrt_len_tokens\": false, \"pooling_mode_weightedmean_tokens\": false" +
         ", \"pooling_mode_lasttoken\": " + b(last) + ", \"include_prompt\": true}";
}

// A model directory with modules.json and 1_Pooling/config.json.
std::string model_dir(const std::string& name, const std::string& modules, const std::string& pooling) {
  const std::string dir = test::scratch_dir("sentence_embedding_" + name);
  write(dir + "/modules.json", modules);
  if (!pooling.empty()) write(dir + "/1_Pooling/config.json", pooling);
  return dir;
}

TEST(SentenceEmbeddingConfig, EachPoolingMode) {
  struct Case {
    const char* name;
    std::string pooling;
    Pooling want;
  };
  const Case cases[] = {{"cls", pooling_config(true, false, false), Pooling::cls},
                        {"mean", pooling_config(false, true, false), Pooling::mean},
                        {"last", pooling_config(false, false, true), Pooling::last_token}};
  for (const Case& c : cases) {
    auto config = read_sentence_embedding_config(model_dir(c.name, kModulesWithNormalize, c.pooling));
    ASSERT_TRUE(config.has_value()) << c.name << ": " << config.status().to_string();
    EXPECT_EQ(config->pooling, c.want) << c.name;
    EXPECT_TRUE(config->normalize) << c.name;
    EXPECT_EQ(config->source, "1_Pooling/config.json") << c.name;
  }
}

TEST(SentenceEmbeddingConfig, NormalizeOnlyWhenListed) {
  auto config = read_sentence_embedding_config(
      model_dir("no_normalize", kModulesWithoutNormalize, pooling_config(false, true, false)));
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  EXPECT_EQ(config->pooling, Pooling::mean);
  EXPECT_FALSE(config->normalize);
}

TEST(SentenceEmbeddingConfig, OldPoolingConfigWithoutNewerKeys) {
  // all-MiniLM-L6-v2's file predates pooling_mode_lasttoken and weightedmean.
  const std::string old = R"({"word_embedding_dimension": 384, "pooling_mode_cls_token": false,
    "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false})";
  auto config = read_sentence_embedding_config(model_dir("old", kModulesWithNormalize, old));
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  EXPECT_EQ(config->pooling, Pooling::mean);
}

TEST(SentenceEmbeddingConfig, NoModulesJsonMeansMeanWithoutNormalisation) {
  auto config = read_sentence_embedding_config(test::scratch_dir("sentence_embedding_plain"));
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  EXPECT_EQ(config->pooling, Pooling::mean);
  EXPECT_FALSE(config->normalize);
  EXPECT_NE(config->source.find("default"), std::string::npos) << config->source;
}

void expect_error(const std::string& dir, StatusCode code, const std::string& mention) {
  auto config = read_sentence_embedding_config(dir);
  ASSERT_FALSE(config.has_value()) << dir;
  EXPECT_EQ(config.status().code(), code) << config.status().to_string();
  EXPECT_NE(config.status().message().find(mention), std::string::npos) << config.status().to_string();
}

TEST(SentenceEmbeddingConfig, MalformedFilesAreNamed) {
  expect_error(model_dir("bad_modules", "[{\"idx\": 0,", ""), StatusCode::invalid_argument, "modules.json");
  expect_error(model_dir("modules_object", "{\"type\": \"x\"}", ""), StatusCode::invalid_argument, "modules.json");
  expect_error(model_dir("module_without_type", "[{\"idx\": 0}]", ""), StatusCode::invalid_argument, "modules.json");
  expect_error(model_dir("bad_pooling", kModulesWithNormalize, "{\"pooling_mode_cls_token\": tru"),
               StatusCode::invalid_argument, "1_Pooling/config.json");
  expect_error(model_dir("pooling_not_bool", kModulesWithNormalize, "{\"pooling_mode_cls_token\": 1}"),
               StatusCode::invalid_argument, "pooling_mode_cls_token");
  expect_error(model_dir("no_mode", kModulesWithNormalize, pooling_config(false, false, false)),
               StatusCode::invalid_argument, "no pooling_mode");
  expect_error(model_dir("missing_pooling", kModulesWithNormalize, ""), StatusCode::not_found, "1_Pooling");
}

TEST(SentenceEmbeddingConfig, UnsupportedModesAndModulesAreNamed) {
  expect_error(model_dir("max", kModulesWithNormalize, pooling_config(false, false, false, true)),
               StatusCode::unimplemented, "pooling_mode_max_tokens");
  expect_error(model_dir("two_modes", kModulesWithNormalize, pooling_config(true, true, false)),
               StatusCode::unimplemented, "pooling_mode_cls_token");
  const std::string with_dense = R"([
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}])";
  expect_error(model_dir("dense", with_dense, pooling_config(false, true, false)), StatusCode::unimplemented,
               "sentence_transformers.models.Dense");
}

}  // namespace
}  // namespace prism::configs
