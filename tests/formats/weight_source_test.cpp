// WeightSource: a model directory as models see it — one file or shards through
// model.safetensors.index.json — and get(name, shape, dtype) with its shape check and float
// conversion. Errors must name the directory, the shard and the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/safetensors.h"
#include "runtime/arena.h"
#include "test_util/paths.h"

namespace prism::formats {
namespace {

using ::testing::HasSubstr;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Two shards: a and b in one, c in the other.
std::string make_sharded(const std::string& name) {
  const std::string dir = test::scratch_dir(name);
  EXPECT_TRUE(write_safetensors(dir + "/model-00001-of-00002.safetensors",
                                {{"a", Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                                 {"b", Tensor::from<int64_t>({10, 20}, {2})}})
                  .ok());
  EXPECT_TRUE(
      write_safetensors(dir + "/model-00002-of-00002.safetensors", {{"c", Tensor::from<float>({-1}, {1})}})
          .ok());
  write_text(dir + "/model.safetensors.index.json",
             R"({"metadata":{"total_size":36},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
             R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  return dir;
}

Status open_error(const std::string& dir_or_file) {
  Result<WeightSource> s = WeightSource::open(dir_or_file);
  EXPECT_FALSE(s.has_value());
  return s.status();
}

TEST(WeightSource, OpensADirectoryWithOneFile) {
  const std::string dir = test::scratch_dir("ws_single");
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors",
                                {{"z", Tensor::from<float>({1}, {1})}, {"a", Tensor::from<float>({2}, {1})}})
                  .ok());
  Result<WeightSource> s = WeightSource::open(dir);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  EXPECT_EQ(s->names(), (std::vector<std::string>{"a", "z"}));  // sorted
  EXPECT_TRUE(s->contains("z"));
  EXPECT_FALSE(s->contains("y"));
  EXPECT_EQ(s->get("z")->data<float>()[0], 1.0f);

  Result<WeightSource> by_file = WeightSource::open(dir + "/model.safetensors");
  ASSERT_TRUE(by_file.has_value());
  EXPECT_EQ(by_file->names(), s->names());
}

TEST(WeightSource, OpensShardsOnceEach) {
  const std::string dir = make_sharded("ws_sharded");
  Result<WeightSource> s = WeightSource::open(dir);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  EXPECT_EQ(s->names(), (std::vector<std::string>{"a", "b", "c"}));
  const Tensor a = *s->get("a"), b = *s->get("b"), c = *s->get("c");
  EXPECT_EQ(a.data<float>()[5], 6.0f);
  EXPECT_EQ(b.data<int64_t>()[1], 20);
  EXPECT_EQ(c.data<float>()[0], -1.0f);
  EXPECT_EQ(a.owner(), b.owner());  // one mapping per shard
  EXPECT_NE(a.owner(), c.owner());

  Result<WeightSource> by_index = WeightSource::open(dir + "/model.safetensors.index.json");
  ASSERT_TRUE(by_index.has_value()) << by_index.status().to_string();
  EXPECT_EQ(by_index->names(), s->names());
}

TEST(WeightSource, NeitherFileInTheDirectory) {
  const std::string dir = test::scratch_dir("ws_empty_dir");
  Status s = open_error(dir);
  EXPECT_EQ(s.code(), StatusCode::not_found);
  EXPECT_THAT(s.message(), HasSubstr(dir));
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors.index.json"));
}

TEST(WeightSource, NoSuchPath) {
  const std::string path = test::scratch_dir("ws_no_path") + "/nothing";
  Status s = open_error(path);
  EXPECT_EQ(s.code(), StatusCode::not_found);
  EXPECT_THAT(s.message(), HasSubstr(path));
}

TEST(WeightSource, MissingShard) {
  const std::string dir = make_sharded("ws_missing_shard");
  std::filesystem::remove(dir + "/model-00002-of-00002.safetensors");
  Status s = open_error(dir);
  EXPECT_EQ(s.code(), StatusCode::not_found);
  EXPECT_THAT(s.message(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors.index.json"));
}

TEST(WeightSource, CorruptShardIsNamed) {
  const std::string dir = make_sharded("ws_corrupt_shard");
  write_text(dir + "/model-00002-of-00002.safetensors", "abc");
  Status s = open_error(dir);
  EXPECT_EQ(s.code(), StatusCode::data_loss);
  EXPECT_THAT(s.message(), HasSubstr("shard 'model-00002-of-00002.safetensors'"));
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
}

TEST(WeightSource, TensorListedInAShardThatLacksIt) {
  const std::string dir = make_sharded("ws_wrong_shard");
  write_text(
      dir + "/model.safetensors.index.json",
      R"({"weight_map":{"a":"model-00001-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}})");
  Status s = open_error(dir);
  EXPECT_EQ(s.code(), StatusCode::data_loss);
  EXPECT_THAT(s.message(), HasSubstr("'c'"));
  EXPECT_THAT(s.message(), HasSubstr("model-00001-of-00002.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("does not contain it"));
}

TEST(WeightSource, DuplicateTensorInIndex) {
  const std::string dir = make_sharded("ws_duplicate");
  write_text(
      dir + "/model.safetensors.index.json",
      R"({"weight_map":{"c":"model-00002-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}})");
  Status s = open_error(dir);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_THAT(s.message(), HasSubstr("'c' twice"));
}

TEST(WeightSource, IndexNotJson) {
  const std::string dir = make_sharded("ws_index_not_json");
  write_text(dir + "/model.safetensors.index.json", "{\"weight_map\": ");
  Status s = open_error(dir);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_THAT(s.message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors.index.json"));
}

TEST(WeightSource, IndexWithoutWeightMap) {
  const std::string dir = make_sharded("ws_no_weight_map");
  write_text(dir + "/model.safetensors.index.json", R"({"metadata":{}})");
  EXPECT_THAT(open_error(dir).message(), HasSubstr("missing 'weight_map'"));
  write_text(dir + "/model.safetensors.index.json", R"({"weight_map":[]})");
  EXPECT_THAT(open_error(dir).message(), HasSubstr("'weight_map' must be an object"));
  write_text(dir + "/model.safetensors.index.json", "[]");
  EXPECT_THAT(open_error(dir).message(), HasSubstr("must be a JSON object"));
}

TEST(WeightSource, ShardNameMustBeAFileInTheDirectory) {
  const std::string dir = make_sharded("ws_bad_shard_name");
  write_text(dir + "/model.safetensors.index.json", R"({"weight_map":{"a":3}})");
  EXPECT_THAT(open_error(dir).message(), HasSubstr("shard of tensor 'a' must be a file name"));
  write_text(dir + "/model.safetensors.index.json", R"({"weight_map":{"a":"../x.safetensors"}})");
  EXPECT_THAT(open_error(dir).message(), HasSubstr("inside the model directory"));
  write_text(dir + "/model.safetensors.index.json", R"({"weight_map":{"a":"/etc/passwd"}})");
  EXPECT_THAT(open_error(dir).message(), HasSubstr("inside the model directory"));
}

TEST(WeightSource, GetChecksTheShape) {
  Result<WeightSource> s = WeightSource::open(make_sharded("ws_shape"));
  ASSERT_TRUE(s.has_value());
  Result<Tensor> ok = s->get("a", {2, 3});
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->raw_data(), s->get("a")->raw_data());  // same dtype: zero-copy
  Result<Tensor> bad = s->get("a", {3, 2});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::invalid_argument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'a'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("expected shape [3, 2], got [2, 3]"));
  EXPECT_THAT(bad.status().message(), HasSubstr("model-00001-of-00002.safetensors"));
}

TEST(WeightSource, GetUnknownTensor) {
  Result<WeightSource> s = WeightSource::open(make_sharded("ws_unknown"));
  ASSERT_TRUE(s.has_value());
  Result<Tensor> r = s->get("model.norm.weight", {4});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::not_found);
  EXPECT_THAT(r.status().message(), HasSubstr("'model.norm.weight'"));
}

TEST(WeightSource, GetConvertsBetweenFloatTypes) {
  const std::string dir = test::scratch_dir("ws_convert");
  const std::vector<float> values = {1.0f, -2.5f, 3.140625f, 1e-3f, 65504.0f, -0.0f};
  std::vector<bf16> as_bf16;
  std::vector<f16> as_f16;
  for (float v : values) as_bf16.push_back(f32_to_bf16(v)), as_f16.push_back(f32_to_f16(v));
  const std::vector<f8_e4m3> as_f8 = {{0x38}, {0xC4}, {0x01}, {0x7E}};  // 1, -3, min subnormal, 448
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", {{"f32", Tensor::from<float>(values, {6})},
                                                             {"bf16", Tensor::from<bf16>(as_bf16, {6})},
                                                             {"f16", Tensor::from<f16>(as_f16, {6})},
                                                             {"f8", Tensor::from<f8_e4m3>(as_f8, {4})},
                                                             {"i64", Tensor::from<int64_t>({1, 2}, {2})}})
                  .ok());
  Result<WeightSource> s = WeightSource::open(dir);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();

  Arena arena;
  ArenaScope scope(&arena);  // converted weights must not come from a forward pass's arena
  const Tensor from_bf16 = *s->get("bf16", {6}, DType::f32);
  const Tensor from_f16 = *s->get("f16", {6}, DType::f32);
  const Tensor to_bf16 = *s->get("f32", {6}, DType::bf16);
  const Tensor to_f16 = *s->get("f32", {6}, DType::f16);
  const Tensor bf16_to_f16 = *s->get("bf16", {6}, DType::f16);
  const Tensor from_f8 = *s->get("f8", {4}, DType::f32);
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_NE(from_bf16.owner(), nullptr);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(from_bf16.data<float>()[i], bf16_to_f32(as_bf16[i])) << i;
    EXPECT_EQ(from_f16.data<float>()[i], f16_to_f32(as_f16[i])) << i;
    EXPECT_EQ(to_bf16.data<bf16>()[i].bits, as_bf16[i].bits) << i;
    EXPECT_EQ(to_f16.data<f16>()[i].bits, as_f16[i].bits) << i;
    EXPECT_EQ(bf16_to_f16.data<f16>()[i].bits, f32_to_f16(bf16_to_f32(as_bf16[i])).bits) << i;
  }
  EXPECT_EQ(from_f8.data<float>()[0], 1.0f);
  EXPECT_EQ(from_f8.data<float>()[1], -3.0f);
  EXPECT_EQ(from_f8.data<float>()[2], std::ldexp(1.0f, -9));
  EXPECT_EQ(from_f8.data<float>()[3], 448.0f);

  Result<Tensor> to_f8 = s->get("f32", {6}, DType::f8_e4m3);
  ASSERT_FALSE(to_f8.has_value());
  EXPECT_THAT(to_f8.status().message(), HasSubstr("cannot convert to f8_e4m3"));
  Result<Tensor> int_to_float = s->get("i64", {2}, DType::f32);
  ASSERT_FALSE(int_to_float.has_value());
  EXPECT_THAT(int_to_float.status().message(), HasSubstr("'i64'"));
  EXPECT_THAT(int_to_float.status().message(), HasSubstr("stored as i64, cannot convert to f32"));
  EXPECT_TRUE(s->get("i64", {2}, DType::i64).has_value());
}

}  // namespace
}  // namespace prism::formats
