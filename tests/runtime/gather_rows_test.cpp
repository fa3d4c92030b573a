// gather_rows: x[rows] against a naive gather, element for element (a copy is exact), with i32
// and i64 rows, repeats, every row width from 1 to 33 and no rows at all; a row outside x aborts.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism {
namespace {

using test::random_f32;

// The naive gather: out[i][j] = x[rows[i]][j].
std::vector<float> naive_gather(const Tensor& x, const std::vector<int64_t>& rows) {
  const int64_t d = x.size(1);
  std::vector<float> out;
  for (int64_t r : rows)
    for (int64_t j = 0; j < d; ++j) out.push_back(x.data<float>()[r * d + j]);
  return out;
}

void expect_gather(const Tensor& got, const Tensor& x, const std::vector<int64_t>& rows) {
  ASSERT_EQ(got.shape(), Dims({int64_t(rows.size()), x.size(1)}));
  ASSERT_EQ(got.dtype(), DType::f32);
  const std::vector<float> want = naive_gather(x, rows);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got.data<float>()[i], want[i]) << "element " << i;
}

TEST(GatherRowsTest, MatchesNaiveGatherForI32AndI64Rows) {
  for (int64_t d = 1; d <= 33; ++d) {
    const Tensor x = random_f32({9, d}, uint32_t(d));
    const std::vector<int64_t> rows = {8, 0, 3, 3, 5};
    expect_gather(ops::gather_rows(x, Tensor::from<int32_t>({8, 0, 3, 3, 5}, {5})), x, rows);
    expect_gather(ops::gather_rows(x, Tensor::from<int64_t>({8, 0, 3, 3, 5}, {5})), x, rows);
  }
}

TEST(GatherRowsTest, WideRowsAndEveryRowOnce) {
  const Tensor x = random_f32({6, 2048}, 7);
  const std::vector<int64_t> rows = {5, 4, 3, 2, 1, 0};
  expect_gather(ops::gather_rows(x, Tensor::from<int32_t>({5, 4, 3, 2, 1, 0}, {6})), x, rows);
}

TEST(GatherRowsTest, NoRowsGivesAnEmptyResult) {
  const Tensor x = random_f32({4, 16}, 3);
  const Tensor got = ops::gather_rows(x, Tensor::empty({0}, DType::i32));
  EXPECT_EQ(got.shape(), Dims({0, 16}));
}

TEST(GatherRowsDeathTest, RowOutsideXAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor x = random_f32({4, 8}, 5);
  EXPECT_DEATH(ops::gather_rows(x, Tensor::from<int32_t>({1, 4}, {2})), "row out of range");
  EXPECT_DEATH(ops::gather_rows(x, Tensor::from<int32_t>({-1}, {1})), "row out of range");
  EXPECT_DEATH(ops::gather_rows(x, Tensor::from<int64_t>({0, 9}, {2})), "row out of range");
}

TEST(GatherRowsDeathTest, WrongShapesAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor x = random_f32({4, 8}, 6);
  EXPECT_DEATH(ops::gather_rows(x.view({2, 2, 8}), Tensor::from<int32_t>({0}, {1})), "x must be");
  EXPECT_DEATH(ops::gather_rows(x, Tensor::from<int32_t>({0, 1}, {1, 2})), "rows must be");
  EXPECT_DEATH(ops::gather_rows(x, Tensor::from<float>({0.0f}, {1})), "rows must be");
}

}  // namespace
}  // namespace prism
