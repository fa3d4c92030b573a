// embedding: f32, bf16 and f16 tables with i32 and i64 ids of any shape, checked element for
// element (the widening to f32 is exact); an out-of-range id aborts.
#include <gtest/gtest.h>

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

TEST(EmbeddingDeathTest, OutOfRangeIdAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor table = random_f32({10, 4}, 3);
  EXPECT_DEATH(ops::embedding(table, Tensor::from<int32_t>({3, 10}, {2})), "out of range");
  EXPECT_DEATH(ops::embedding(table, Tensor::from<int64_t>({-1}, {1})), "out of range");
}

}  // namespace
}  // namespace prism
