// configs/hf_config: every getter on a good value, an absent key, null, and the wrong type; the
// errors must name the file and the key so a checkpoint author can fix config.json.
#include "configs/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "test_util/paths.h"

namespace prism::configs {
namespace {

using ::testing::HasSubstr;

constexpr const char* kConfig = R"({
  "architectures": ["LlamaForCausalLM"],
  "hidden_size": 4096,
  "big": 18446744073709551615,
  "negative": -3,
  "float_int": 2048.0,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000,
  "tie_word_embeddings": false,
  "model_type": "llama",
  "sliding_window": null,
  "torch_dtype": "bfloat16",
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": "4"},
  "mixed": ["a", 1]
})";

HfConfig config() {
  Result<HfConfig> c = HfConfig::parse(kConfig);
  EXPECT_TRUE(c.has_value()) << c.status().to_string();
  return *c;
}

void expect_error(const Status& s, StatusCode code, const std::string& text) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_THAT(s.message(), HasSubstr(text));
}

TEST(HfConfig, LoadsFromADirectoryOrAFile) {
  const std::string dir = test::scratch_dir("hf_config_load");
  std::ofstream(dir + "/config.json") << kConfig;
  Result<HfConfig> by_dir = HfConfig::load(dir);
  ASSERT_TRUE(by_dir.has_value()) << by_dir.status().to_string();
  EXPECT_EQ(*by_dir->get_int("hidden_size"), 4096);
  Result<HfConfig> by_file = HfConfig::load(dir + "/config.json");
  ASSERT_TRUE(by_file.has_value());
  // Errors name the file it came from.
  expect_error(by_file->get_int("model_type").status(), StatusCode::invalid_argument,
               dir + "/config.json: 'model_type'");
}

TEST(HfConfig, LoadMissingFile) {
  const std::string dir = test::scratch_dir("hf_config_missing");
  Result<HfConfig> c = HfConfig::load(dir);
  ASSERT_FALSE(c.has_value());
  expect_error(c.status(), StatusCode::not_found, dir + "/config.json");
}

TEST(HfConfig, ParseErrors) {
  Result<HfConfig> bad = HfConfig::parse("{\"a\": ", "x/config.json");
  ASSERT_FALSE(bad.has_value());
  expect_error(bad.status(), StatusCode::invalid_argument, "x/config.json: not valid JSON");
  Result<HfConfig> array = HfConfig::parse("[1]");
  ASSERT_FALSE(array.has_value());
  expect_error(array.status(), StatusCode::invalid_argument, "config.json: must be a JSON object, got array");
  Result<HfConfig> utf8 = HfConfig::parse("{\"a\": \"\xff\"}");
  ASSERT_FALSE(utf8.has_value());
  expect_error(utf8.status(), StatusCode::invalid_argument, "not valid JSON");
}

TEST(HfConfig, Has) {
  const HfConfig c = config();
  EXPECT_TRUE(c.has("hidden_size"));
  EXPECT_FALSE(c.has("absent"));
  EXPECT_FALSE(c.has("sliding_window"));  // null counts as absent
}

TEST(HfConfig, GetInt) {
  const HfConfig c = config();
  EXPECT_EQ(*c.get_int("hidden_size"), 4096);
  EXPECT_EQ(*c.get_int("negative"), -3);
  EXPECT_EQ(*c.get_int("float_int"), 2048);  // exporters write 2048.0; Python takes it
  EXPECT_EQ(*c.get_int("rope_theta"), 500000);
  expect_error(c.get_int("model_type").status(), StatusCode::invalid_argument,
               "config.json: 'model_type' must be an integer, got string \"llama\"");
  expect_error(c.get_int("rms_norm_eps").status(), StatusCode::invalid_argument,
               "'rms_norm_eps' must be an integer, got number 1e-05");
  expect_error(c.get_int("tie_word_embeddings").status(), StatusCode::invalid_argument, "got boolean");
  expect_error(c.get_int("big").status(), StatusCode::invalid_argument,
               "'big' must be an integer that fits in 64 bits");
  expect_error(c.get_int("absent").status(), StatusCode::not_found, "config.json: missing 'absent'");
  expect_error(c.get_int("sliding_window").status(), StatusCode::not_found, "missing 'sliding_window'");
}

TEST(HfConfig, GetIntWithDefault) {
  const HfConfig c = config();
  EXPECT_EQ(*c.get_int("hidden_size", 7), 4096);
  EXPECT_EQ(*c.get_int("absent", 7), 7);
  EXPECT_EQ(*c.get_int("sliding_window", -1), -1);
  expect_error(c.get_int("model_type", 7).status(), StatusCode::invalid_argument,
               "'model_type' must be an integer");
}

TEST(HfConfig, GetFloat) {
  const HfConfig c = config();
  EXPECT_DOUBLE_EQ(*c.get_float("rms_norm_eps"), 1e-5);
  EXPECT_DOUBLE_EQ(*c.get_float("rope_theta"), 500000.0);  // integers are numbers too
  EXPECT_DOUBLE_EQ(*c.get_float("absent", 0.5), 0.5);
  EXPECT_DOUBLE_EQ(*c.get_float("sliding_window", 0.5), 0.5);
  expect_error(c.get_float("torch_dtype").status(), StatusCode::invalid_argument,
               "config.json: 'torch_dtype' must be a number, got string");
  expect_error(c.get_float("torch_dtype", 1.0).status(), StatusCode::invalid_argument, "must be a number");
  expect_error(c.get_float("absent").status(), StatusCode::not_found, "missing 'absent'");
}

TEST(HfConfig, GetBool) {
  const HfConfig c = config();
  EXPECT_FALSE(*c.get_bool("tie_word_embeddings"));
  EXPECT_TRUE(*c.get_bool("absent", true));
  expect_error(c.get_bool("hidden_size").status(), StatusCode::invalid_argument,
               "'hidden_size' must be a boolean, got integer 4096");
  expect_error(c.get_bool("hidden_size", false).status(), StatusCode::invalid_argument, "must be a boolean");
  expect_error(c.get_bool("absent").status(), StatusCode::not_found, "missing 'absent'");
}

TEST(HfConfig, GetString) {
  const HfConfig c = config();
  EXPECT_EQ(*c.get_string("model_type"), "llama");
  EXPECT_EQ(*c.get_string("absent", "x"), "x");
  EXPECT_EQ(*c.get_string("sliding_window", "x"), "x");
  expect_error(c.get_string("hidden_size").status(), StatusCode::invalid_argument,
               "'hidden_size' must be a string, got integer");
  expect_error(c.get_string("architectures", "x").status(), StatusCode::invalid_argument, "got array");
  expect_error(c.get_string("absent").status(), StatusCode::not_found, "missing 'absent'");
}

TEST(HfConfig, GetStrings) {
  const HfConfig c = config();
  EXPECT_EQ(*c.get_strings("architectures"), (std::vector<std::string>{"LlamaForCausalLM"}));
  expect_error(c.get_strings("model_type").status(), StatusCode::invalid_argument,
               "'model_type' must be an array of strings, got string");
  expect_error(c.get_strings("mixed").status(), StatusCode::invalid_argument,
               "'mixed[1]' must be a string, got integer 1");
  expect_error(c.get_strings("absent").status(), StatusCode::not_found, "missing 'absent'");
  Result<HfConfig> empty = HfConfig::parse(R"({"architectures": []})");
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->get_strings("architectures")->empty());
}

TEST(HfConfig, GetObjectAndNestedErrors) {
  const HfConfig c = config();
  Result<HfConfig> rope = c.get_object("rope_scaling");
  ASSERT_TRUE(rope.has_value()) << rope.status().to_string();
  EXPECT_EQ(*rope->get_string("rope_type"), "llama3");
  EXPECT_DOUBLE_EQ(*rope->get_float("factor"), 8.0);
  EXPECT_DOUBLE_EQ(*rope->get_float("low_freq_factor", 1.0), 1.0);
  // Nested keys are named by their path, in the same file.
  expect_error(rope->get_float("high_freq_factor").status(), StatusCode::invalid_argument,
               "config.json: 'rope_scaling.high_freq_factor' must be a number, got string \"4\"");
  expect_error(rope->get_int("absent").status(), StatusCode::not_found, "missing 'rope_scaling.absent'");
  expect_error(c.get_object("absent").status(), StatusCode::not_found, "missing 'absent'");
  expect_error(c.get_object("sliding_window").status(), StatusCode::not_found, "missing 'sliding_window'");
  expect_error(c.get_object("hidden_size").status(), StatusCode::invalid_argument,
               "'hidden_size' must be an object");
}

TEST(HfConfig, DumpIsTheJson) {
  const HfConfig c = config();
  Result<HfConfig> again = HfConfig::parse(c.dump());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->dump(), c.dump());
  EXPECT_THAT(c.dump(), HasSubstr("\"hidden_size\": 4096"));
}

TEST(HfConfig, CopiesAndMovesAreIndependent) {
  HfConfig a = config();
  HfConfig b = a;
  Result<HfConfig> other = HfConfig::parse(R"({"hidden_size": 8})");
  ASSERT_TRUE(other.has_value());
  a = *other;
  EXPECT_EQ(*a.get_int("hidden_size"), 8);
  EXPECT_EQ(*b.get_int("hidden_size"), 4096);
  HfConfig moved = std::move(b);
  EXPECT_EQ(*moved.get_int("hidden_size"), 4096);
  b = std::move(moved);
  EXPECT_EQ(*b.get_int("hidden_size"), 4096);
}

}  // namespace
}  // namespace prism::configs
