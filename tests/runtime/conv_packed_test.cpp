// conv2d on weights packed once (ops::pack_conv2d) against the plain ops::conv2d on the same
// inputs: the VAE decoder's shapes (3x3 pad 1, 1x1, channel changes, 3 output channels), odd
// sizes, batch > 1, stride, dilation, groups, no bias, a strided input, one packed weight
// over several input shapes and from several threads at once; and pack_conv2d's errors.
//
// NOTE (bounds): every output is a sum of K = C_in / groups * KH * KW products plus the bias.
// Summed in f32 in any order, each result is within (K + 1) u of the exact one relative to
// S = sum |x| |w| + |b| (u = 2^-24), so packed f32 and plain differ by at most 2 (K + 1) u S;
// S is the plain conv of |x| and |w| plus |b|. bf16 (native tiers) also rounds x and w to
// bf16 (relative error 2^-8 each), so each product is off by at most (2^-7 + 2^-16) of its
// magnitude: (2^-7 + 2^-16 + 2 (K + 1) u) S. Where bf16 computes in f32 (tiers without native
// bf16, and 1x1 convolutions on any tier, conv.cpp's NOTE) the f32 bound holds.
#include <cmath>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/isa.h"
#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism {
namespace {

using ops::Conv2dParams;
using ops::Precision;

struct Case {
  const char* name;
  int64_t n, c_in, h, w, c_out, kh, kw;
  Conv2dParams p;
  bool bias = true;
};

const Case kCases[] = {
    {"vae conv_in 3x3", 1, 4, 9, 7, 32, 3, 3, {.padding_h = 1, .padding_w = 1}},
    {"vae resnet 3x3 32->32", 1, 32, 12, 10, 32, 3, 3, {.padding_h = 1, .padding_w = 1}},
    {"vae channel change 32->16", 1, 32, 13, 11, 16, 3, 3, {.padding_h = 1, .padding_w = 1}},
    {"vae shortcut 1x1", 1, 32, 13, 11, 16, 1, 1, {}},
    {"vae conv_out 16->3", 1, 16, 17, 15, 3, 3, 3, {.padding_h = 1, .padding_w = 1}},
    {"batch 3 odd sizes", 3, 24, 7, 5, 40, 3, 3, {.padding_h = 1, .padding_w = 1}},
    {"rgb 5x5 stride 2", 2, 3, 23, 19, 16, 5, 5, {.stride_h = 2, .stride_w = 2, .padding_h = 2, .padding_w = 2}},
    {"dilation 2 no bias", 1, 8, 11, 13, 8, 3, 3, {.padding_h = 2, .padding_w = 2, .dilation_h = 2, .dilation_w = 2},
     false},
    {"groups 2", 2, 8, 6, 9, 12, 3, 3, {.padding_h = 1, .padding_w = 1, .groups = 2}},
    {"1x1 wide", 2, 64, 5, 3, 48, 1, 1, {}},
};

Tensor abs_of(const Tensor& t) {
  Tensor a = t.contiguous().clone();
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = std::fabs(a.data<float>()[i]);
  return a;
}

// max over outputs of |got - want| / S, S as in the NOTE.
double max_scaled_error(const Tensor& got, const Tensor& want, const Tensor& scale) {
  EXPECT_EQ(got.shape(), want.shape());
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double d = std::fabs(double(got.data<float>()[i]) - double(want.data<float>()[i]));
    worst = std::max(worst, d / std::max(double(scale.data<float>()[i]), 1e-30));
  }
  return worst;
}

struct Bounds {
  double f32, bf16;
};
Bounds bounds(int64_t k) {
  const double u = std::ldexp(1.0, -24), rel = 2.0 * double(k + 1) * u;
  return {rel, std::ldexp(1.0, -7) + std::ldexp(1.0, -16) + rel};
}

bool bf16_native(int64_t kh, int64_t kw) { return active_isa() >= Isa::avx512_bf16 && !(kh == 1 && kw == 1); }

TEST(ConvPackedTest, MatchesPlainConv) {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    const Tensor x = test::random_f32({c.n, c.c_in, c.h, c.w}, seed++, -1, 1);
    const Tensor w = test::random_f32({c.c_out, c.c_in / c.p.groups, c.kh, c.kw}, seed++, -0.5f, 0.5f);
    const Tensor b = c.bias ? test::random_f32({c.c_out}, seed++, -0.5f, 0.5f) : Tensor();
    const Tensor plain = ops::conv2d(x, w, b, c.p);
    Tensor scale = ops::conv2d(abs_of(x), abs_of(w), c.bias ? abs_of(b) : Tensor(), c.p);
    const Bounds bound = bounds(c.c_in / c.p.groups * c.kh * c.kw);
    for (Precision prec : {Precision::f32, Precision::bf16}) {
      Result<ops::ConvWeight> cw = ops::pack_conv2d(w, b, c.p, prec);
      ASSERT_TRUE(cw.has_value()) << c.name << ": " << cw.status().to_string();
      EXPECT_EQ(cw->out_channels, c.c_out);
      EXPECT_EQ(cw->has_bias, c.bias);
      const Tensor got = ops::conv2d(x, *cw);
      const double err = max_scaled_error(got, plain, scale);
      const bool bf16 = prec == Precision::bf16 && bf16_native(c.kh, c.kw);
      EXPECT_LE(err, bf16 ? bound.bf16 : bound.f32) << c.name << " " << ops::precision_name(prec);
      std::cout << "[ packed   ] " << c.name << " " << ops::precision_name(prec) << ": max |err| / S = " << err
                << " (bound " << (bf16 ? bound.bf16 : bound.f32) << ")\n";
      // The same primitive on the same input: bitwise the same.
      const Tensor again = ops::conv2d(x, *cw);
      EXPECT_EQ(std::memcmp(again.raw_data(), got.raw_data(), got.nbytes()), 0) << c.name;
    }
  }
}

// One packed weight over inputs of other sizes and batches (a primitive per shape, the weights
// reused or re-laid-out once), and a strided input.
TEST(ConvPackedTest, OneWeightManyShapes) {
  const Conv2dParams p{.padding_h = 1, .padding_w = 1};
  const Tensor w = test::random_f32({32, 16, 3, 3}, 50, -0.5f, 0.5f);
  const Tensor b = test::random_f32({32}, 51, -0.5f, 0.5f);
  const Bounds bound = bounds(16 * 9);
  for (Precision prec : {Precision::f32, Precision::bf16}) {
    Result<ops::ConvWeight> cw = ops::pack_conv2d(w, b, p, prec);
    ASSERT_TRUE(cw.has_value()) << cw.status().to_string();
    const bool bf16 = prec == Precision::bf16 && bf16_native(3, 3);
    uint32_t seed = 60;
    for (const Dims& shape : {Dims{1, 16, 3, 3}, Dims{2, 16, 40, 33}, Dims{1, 16, 1, 1}, Dims{4, 16, 8, 64},
                              Dims{1, 16, 130, 7}}) {
      const Tensor x = test::random_f32(shape, seed++, -1, 1);
      const Tensor scale = ops::conv2d(abs_of(x), abs_of(w), abs_of(b), p);
      const double err = max_scaled_error(ops::conv2d(x, *cw), ops::conv2d(x, w, b, p), scale);
      EXPECT_LE(err, bf16 ? bound.bf16 : bound.f32) << shape.to_string() << " " << ops::precision_name(prec);
    }
    // A view with strides (every other column): read as its values.
    const Tensor wide = test::random_f32({1, 16, 9, 22}, seed++, -1, 1);
    const Tensor x = wide.slice(3, 0, 11);
    const Tensor scale = ops::conv2d(abs_of(x), abs_of(w), abs_of(b), p);
    EXPECT_LE(max_scaled_error(ops::conv2d(x, *cw), ops::conv2d(x.contiguous(), w, b, p), scale),
              bf16 ? bound.bf16 : bound.f32);
  }
}

// Several threads on one packed weight at once, each with its own shape (so primitives are
// also created concurrently): each result bitwise the one computed alone.
TEST(ConvPackedTest, SeveralThreads) {
  const Conv2dParams p{.padding_h = 1, .padding_w = 1};
  const Tensor w = test::random_f32({24, 24, 3, 3}, 70, -0.5f, 0.5f);
  const Tensor b = test::random_f32({24}, 71, -0.5f, 0.5f);
  for (Precision prec : {Precision::f32, Precision::bf16}) {
    Result<ops::ConvWeight> cw = ops::pack_conv2d(w, b, p, prec);
    ASSERT_TRUE(cw.has_value());
    constexpr int kThreads = 4;
    std::vector<Tensor> inputs, got(kThreads * 2);
    for (int t = 0; t < kThreads; ++t) inputs.push_back(test::random_f32({1 + t % 2, 24, 9 + t, 17 - t}, 80 + t, -1, 1));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads * 2; ++t)  // two threads per shape
      threads.emplace_back([&, t] { got[t] = ops::conv2d(inputs[t % kThreads], *cw); });
    for (std::thread& t : threads) t.join();
    for (int t = 0; t < kThreads * 2; ++t) {
      const Tensor alone = ops::conv2d(inputs[t % kThreads], *cw);
      ASSERT_EQ(got[t].shape(), alone.shape());
      EXPECT_EQ(std::memcmp(got[t].raw_data(), alone.raw_data(), alone.nbytes()), 0) << t;
    }
  }
}

TEST(ConvPackedTest, PackErrors) {
  const Tensor w = test::random_f32({8, 4, 3, 3}, 90);
  const Tensor b = test::random_f32({8}, 91);
  EXPECT_EQ(ops::pack_conv2d(Tensor(), b, {}, Precision::f32).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(ops::pack_conv2d(w.view({8, 36}), b, {}, Precision::f32).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(ops::pack_conv2d(w, test::random_f32({7}, 92), {}, Precision::f32).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(ops::pack_conv2d(w, b, {}, Precision::int8).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(ops::pack_conv2d(w, b, {.groups = 3}, Precision::f32).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(ops::pack_conv2d(w, b, {.stride_h = 0}, Precision::f32).status().code(), StatusCode::invalid_argument);
  // bf16 / f16 checkpoints are accepted (widened, then packed).
  EXPECT_TRUE(ops::pack_conv2d(w.to(DType::bf16), b.to(DType::bf16), {}, Precision::f32).has_value());
}

TEST(ConvPackedTest, PathPerTier) {
  const std::string tier(isa_name(active_isa()));
  for (Precision p : {Precision::f32, Precision::bf16}) {
    const std::string path = ops::conv2d_path(p);
    EXPECT_EQ(path.rfind(tier + ": ", 0), 0u) << path;
  }
  const std::string bf16 = ops::conv2d_path(Precision::bf16);
  if (active_isa() >= Isa::avx512_bf16)
    EXPECT_NE(bf16.find("bf16 convolution"), std::string::npos) << bf16;
  else
    EXPECT_NE(bf16.find("no native bf16, computes in f32"), std::string::npos) << bf16;
}

}  // namespace
}  // namespace prism
