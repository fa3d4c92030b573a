// models/pooling: CLS, mean and last-token pooling over packed and padded flat batches, and
// row L2 normalisation (torch.nn.functional.normalize's eps), on hand-made numbers.
#include "models/pooling.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace prism::models {
namespace {

using configs::parse_pooling;
using configs::Pooling;
using configs::pooling_name;

// hidden [T, 2]: row t = (t, 10 t), so every pooled value says which rows it read.
Tensor rows(int64_t t) {
  std::vector<float> v;
  for (int64_t i = 0; i < t; ++i) {
    v.push_back(float(i));
    v.push_back(float(10 * i));
  }
  return Tensor::from<float>(std::span<const float>(v), {t, 2});
}

std::vector<float> values(const Tensor& x) { return {x.data<float>(), x.data<float>() + x.numel()}; }

EncoderBatch packed(std::initializer_list<int32_t> cu) {
  EncoderBatch b;
  b.cu_seqlens = Tensor::from<int32_t>(cu, {int64_t(cu.size())});
  return b;
}

TEST(Pooling, PackedSequences) {
  const Tensor h = rows(6);
  const EncoderBatch b = packed({0, 1, 4, 6});  // lengths 1, 3, 2
  EXPECT_EQ(values(pool(h, b, Pooling::cls)), std::vector<float>({0, 0, 1, 10, 4, 40}));
  EXPECT_EQ(values(pool(h, b, Pooling::last_token)), std::vector<float>({0, 0, 3, 30, 5, 50}));
  EXPECT_EQ(values(pool(h, b, Pooling::mean)), std::vector<float>({0, 0, 2, 20, 4.5f, 45}));
  EXPECT_EQ(pool(h, b, Pooling::mean).shape(), Dims({3, 2}));
}

TEST(Pooling, PaddedSlotsIgnoreThePadding) {
  const Tensor h = rows(8);
  EncoderBatch b = packed({0, 4, 8});  // two slots of 4
  b.kv_lens = Tensor::from<int32_t>({2, 4}, {2});
  EXPECT_EQ(values(pool(h, b, Pooling::cls)), std::vector<float>({0, 0, 4, 40}));
  EXPECT_EQ(values(pool(h, b, Pooling::last_token)), std::vector<float>({1, 10, 7, 70}));
  EXPECT_EQ(values(pool(h, b, Pooling::mean)), std::vector<float>({0.5f, 5, 5.5f, 55}));
}

TEST(Pooling, StridedRowsAndNoSequences) {
  const Tensor wide = rows(3);
  const Tensor h = Tensor::zeros({3, 4}, DType::f32);
  h.slice(1, 0, 2).copy_from(wide);
  EXPECT_EQ(values(pool(h.slice(1, 0, 2), packed({0, 3}), Pooling::mean)), std::vector<float>({1, 10}));
  EXPECT_EQ(pool(Tensor::zeros({0, 2}, DType::f32), packed({0}), Pooling::mean).shape(), Dims({0, 2}));
}

TEST(Pooling, Names) {
  for (Pooling p : {Pooling::cls, Pooling::mean, Pooling::last_token}) {
    auto parsed = parse_pooling(pooling_name(p));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(pooling_name(Pooling::last_token), "last_token");
  auto bad = parse_pooling("max");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(bad.status().message().find("cls, mean, last_token"), std::string::npos);
}

TEST(L2Normalize, RowsBecomeUnitLengthAndZeroStaysZero) {
  Tensor x = Tensor::from<float>({3, 4, 0, 0,  0, 0, 0, 0,  0, 1e-20f, 0, 0,  -2, 0, 0, 0}, {4, 4});
  l2_normalize_rows(x);
  const std::vector<float> v = values(x);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(v[i], 0.0f);  // ||x|| = 0: divided by 1e-12, stays 0
  EXPECT_FLOAT_EQ(v[9], 1e-8f);                        // ||x|| = 1e-20 < 1e-12: x / 1e-12
  EXPECT_FLOAT_EQ(v[12], -1.0f);
}

}  // namespace
}  // namespace prism::models
