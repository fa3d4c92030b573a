#include "runtime/tensor.h"

#include <gtest/gtest.h>

#include "runtime/arena.h"

namespace prism {
namespace {

TEST(TensorTest, EmptyIsContiguousAndAligned) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::f32);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_FALSE(Tensor().defined());
}

TEST(TensorTest, ViewsShareMemory) {
  Tensor t = Tensor::from<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.shape(), Dims({3, 2}));
  Tensor c = tt.contiguous();
  const float* p = c.data<float>();
  EXPECT_EQ(std::vector<float>(p, p + 6), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.data<float>()[0], 1.0f);
  s.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[1], 42.0f);
  Tensor row = t.select(0, 1);
  EXPECT_EQ(row.shape(), Dims({3}));
  EXPECT_EQ(row.data<float>()[2], 5.0f);
  EXPECT_EQ(t.view({3, -1}).shape(), Dims({3, 2}));
  EXPECT_EQ(t.unsqueeze(0).shape(), Dims({1, 2, 3}));
  EXPECT_EQ(t.permute({1, 0}).contiguous().data<float>()[1], 3.0f);
}

// Slices whose rows are contiguous but apart (one memcpy per row), over 3 dims.
TEST(TensorTest, ContiguousOfStridedRowsCopiesEveryElement) {
  std::vector<float> v(2 * 3 * 8);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  Tensor t = Tensor::from<float>(std::span<const float>(v), {2, 3, 8});
  Tensor s = t.slice(2, 2, 7);  // [2, 3, 5], row stride 8
  ASSERT_FALSE(s.is_contiguous());
  Tensor c = s.contiguous();
  ASSERT_TRUE(c.is_contiguous());
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t k = 0; k < 5; ++k)
        EXPECT_EQ(c.data<float>()[(a * 3 + b) * 5 + k], float((a * 3 + b) * 8 + 2 + k)) << a << b << k;
}

TEST(TensorTest, DtypeConversionsRoundTrip) {
  Tensor t = Tensor::from<float>({1.0f, -2.5f, 3.140625f, 65504.0f, 1e-8f}, {5});
  Tensor b = t.to(DType::bf16).to(DType::f32);
  EXPECT_FLOAT_EQ(b.data<float>()[1], -2.5f);
  EXPECT_FLOAT_EQ(b.data<float>()[2], 3.140625f);
  Tensor h = t.to(DType::f16).to(DType::f32);
  EXPECT_FLOAT_EQ(h.data<float>()[3], 65504.0f);
  EXPECT_NEAR(h.data<float>()[4], 0.0f, 6e-8f);
  Tensor i = Tensor::from<float>({1.4f, -300.0f, 300.0f}, {3}).to(DType::i8);
  EXPECT_EQ(i.data<int8_t>()[0], 1);
  EXPECT_EQ(i.data<int8_t>()[1], -128);
  EXPECT_EQ(i.data<int8_t>()[2], 127);
}

TEST(TensorTest, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256).bits, f32_to_bf16(1.0f).bits);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
}

TEST(ArenaTest, TensorsComeFromTheCurrentArena) {
  Arena arena(1 << 20);
  {
    ArenaScope scope(&arena);
    Tensor a = Tensor::empty({1000}, DType::f32);
    EXPECT_EQ(a.owner(), nullptr);
    EXPECT_GE(arena.used_bytes(), 4000u);
  }
  EXPECT_EQ(current_arena(), nullptr);
  Tensor heap = Tensor::empty({10}, DType::f32);
  EXPECT_NE(heap.owner(), nullptr);
}

TEST(ArenaTest, GrowsThenSettlesIntoOneBlock) {
  Arena arena(0);
  for (int i = 0; i < 5; ++i) arena.allocate(600 * 1024);
  EXPECT_GT(arena.num_blocks(), 1);
  const size_t high = arena.high_water_bytes();
  arena.reset();
  EXPECT_EQ(arena.num_blocks(), 1);
  EXPECT_GE(arena.capacity_bytes(), high);
  for (int i = 0; i < 5; ++i) arena.allocate(600 * 1024);
  EXPECT_EQ(arena.num_blocks(), 1);  // steady state: no new block
}

}  // namespace
}  // namespace prism
