// embedding: f32, bf16 and f16 tables with i32 and i64 ids of any shape, checked element for
// element (the widening to f32 is exact); an out-of-range id aborts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism {
namespace {

using test::random_f32;

void expect_rows(const Tensor& out, const Tensor& table_f32, const std::vector<int64_t>& ids) {
  const int64_t h = table_f32.size(1);
  ASSERT_EQ(out.numel(), int64_t(ids.size()) * h);
  for (size_t r = 0; r < ids.size(); ++r)
    for (int64_t i = 0; i < h; ++i)
      ASSERT_EQ(out.data<float>()[r * h + i], table_f32.data<float>()[ids[r] * h + i]) << "row " << r << " col " << i;
}

TEST(EmbeddingTest, GathersRowsForEveryDtype) {
  for (int64_t h : {77, 16, 1, 2048}) {
    const Tensor table = random_f32({50, h}, 1);
    const std::vector<int64_t> ids = {0, 49, 7, 7, 23, 1};
    const Tensor ids32 = Tensor::from<int32_t>({0, 49, 7, 7, 23, 1}, {2, 3});
    const Tensor ids64 = Tensor::from<int64_t>({0, 49, 7, 7, 23, 1}, {6});
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      const Tensor t = table.to(dt);
      const Tensor exact = t.to(DType::f32);  // the values the table really holds
      const Tensor a = ops::embedding(t, ids32);
      EXPECT_EQ(a.shape(), Dims({2, 3, h}));
      expect_rows(a, exact, ids);
      const Tensor b = ops::embedding(t, ids64);
      EXPECT_EQ(b.shape(), Dims({6, h}));
      expect_rows(b, exact, ids);
    }
  }
}

TEST(EmbeddingTest, ManyIdsRunInParallel) {
  const Tensor table = random_f32({1000, 256}, 2);
  std::vector<int32_t> ids(4099);
  std::vector<int64_t> ids64(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ids64[i] = ids[i] = int32_t((i * 7919) % 1000);
  const Tensor out = ops::embedding(table.to(DType::bf16), Tensor::from<int32_t>(std::span<const int32_t>(ids), {int64_t(ids.size())}));
  expect_rows(out, table.to(DType::bf16).to(DType::f32), ids64);
}

// Every row width from 1 to 33 (whole vectors of 8 and 16 lanes, every tail; the tail of a
// 16-bit row is widened from a padded copy, never read past the row's end).
TEST(EmbeddingTest, EveryTailWidthIsExact) {
  for (int64_t h = 1; h <= 33; ++h) {
    const Tensor table = random_f32({5, h}, uint32_t(h));
    const std::vector<int64_t> ids = {4, 0, 2};
    for (DType dt : {DType::bf16, DType::f16}) {
      const Tensor t = table.to(dt);
      expect_rows(ops::embedding(t, Tensor::from<int32_t>({4, 0, 2}, {3})), t.to(DType::f32), ids);
    }
  }
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The widening is exact for every class of value: +-0, denormals, the largest finite, +-inf
// (NaN stays NaN), in every lane.
TEST(EmbeddingTest, SpecialValuesWidenExactly) {
  const uint16_t bf16_bits[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc1, 0x3f80, 0xc2f7};
  const uint16_t f16_bits[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e01, 0x3c00, 0x0400};
  for (int64_t h : {11, 19, 33}) {
    std::vector<bf16> b(size_t(2 * h));
    std::vector<f16> f(size_t(2 * h));
    for (int64_t i = 0; i < 2 * h; ++i) {
      b[size_t(i)] = bf16{bf16_bits[i % 11]};
      f[size_t(i)] = f16{f16_bits[(i + 3) % 11]};
    }
    const Tensor ids = Tensor::from<int32_t>({1, 0}, {2});
    const Tensor ob = ops::embedding(Tensor::from<bf16>(std::span<const bf16>(b), {2, h}), ids);
    const Tensor of = ops::embedding(Tensor::from<f16>(std::span<const f16>(f), {2, h}), ids);
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t i = 0; i < h; ++i) {
        const size_t src = size_t((1 - r) * h + i);
        const float want_b = bf16_to_f32(b[src]), want_f = f16_to_f32(f[src]);
        const float got_b = ob.data<float>()[r * h + i], got_f = of.data<float>()[r * h + i];
        EXPECT_TRUE(std::isnan(want_b) ? std::isnan(got_b) : bits_of(got_b) == bits_of(want_b)) << h << " " << i;
        EXPECT_TRUE(std::isnan(want_f) ? std::isnan(got_f) : bits_of(got_f) == bits_of(want_f)) << h << " " << i;
      }
  }
}

TEST(EmbeddingDeathTest, OutOfRangeIdAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor table = random_f32({10, 4}, 3);
  EXPECT_DEATH(ops::embedding(table, Tensor::from<int32_t>({3, 10}, {2})), "out of range");
  EXPECT_DEATH(ops::embedding(table, Tensor::from<int64_t>({-1}, {1})), "out of range");
}

}  // namespace
}  // namespace prism
