// add, mul and add_ against a naive broadcasting reference: equal shapes, numpy broadcasting
// in both directions, strided operands, and tensors big enough to split over threads.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism {
namespace {

using test::all_close;
using test::random_f32;

// out[idx] = a[idx'] op b[idx''] with numpy's right-aligned broadcasting, by index arithmetic.
std::vector<double> ref_broadcast(const Tensor& a, const Tensor& b, bool mul) {
  const int rank = std::max(a.dim(), b.dim());
  Dims out;
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.dim()), ib = i - (rank - b.dim());
    out.push_back(std::max(ia >= 0 ? a.size(ia) : 1, ib >= 0 ? b.size(ib) : 1));
  }
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  std::vector<double> res(out.numel());
  for (int64_t flat = 0; flat < out.numel(); ++flat) {
    int64_t rem = flat, oa = 0, ob = 0, sa = 1, sb = 1;
    for (int i = rank - 1; i >= 0; --i) {
      const int64_t idx = rem % out[i];
      rem /= out[i];
      const int ia = i - (rank - a.dim()), ib = i - (rank - b.dim());
      if (ia >= 0) oa += (a.size(ia) == 1 ? 0 : idx) * sa, sa *= a.size(ia);
      if (ib >= 0) ob += (b.size(ib) == 1 ? 0 : idx) * sb, sb *= b.size(ib);
    }
    const double x = ac.data<float>()[oa], y = bc.data<float>()[ob];
    res[flat] = mul ? x * y : x + y;
  }
  return res;
}

struct Case {
  Dims a, b, out;
};

TEST(ElementwiseTest, AddAndMulBroadcast) {
  const Case cases[] = {
      {{3, 77}, {3, 77}, {3, 77}},      {{2, 1, 4}, {3, 1}, {2, 3, 4}}, {{3, 1}, {2, 1, 4}, {2, 3, 4}},
      {{5, 7}, {7}, {5, 7}},            {{5, 7}, {5, 1}, {5, 7}},       {{1}, {3, 4}, {3, 4}},
      {{1, 77}, {13, 1}, {13, 77}},     {{1}, {1}, {1}},                {{2, 3, 5}, {2, 1, 5}, {2, 3, 5}},
      {{300, 257}, {257}, {300, 257}},  {{100003}, {100003}, {100003}}, {{4, 1, 6, 1}, {5, 1, 7}, {4, 5, 6, 7}},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const Tensor a = random_f32(c.a, seed++), b = random_f32(c.b, seed++);
    const Tensor s = ops::add(a, b), p = ops::mul(a, b);
    EXPECT_EQ(s.shape(), c.out);
    EXPECT_EQ(p.shape(), c.out);
    EXPECT_TRUE(all_close(s, ref_broadcast(a, b, false), 1e-7, 0)) << c.a.to_string() << " + " << c.b.to_string();
    EXPECT_TRUE(all_close(p, ref_broadcast(a, b, true), 1e-7, 0)) << c.a.to_string() << " * " << c.b.to_string();
  }
}

TEST(ElementwiseTest, StridedOperands) {
  const Tensor a = random_f32({9, 5}, 40).transpose(0, 1);  // [5, 9] column-major
  const Tensor b = random_f32({5, 18}, 41).slice(1, 3, 12);  // [5, 9] with row stride 18
  EXPECT_TRUE(all_close(ops::add(a, b), ref_broadcast(a, b, false), 1e-7, 0));
  const Tensor c = random_f32({9}, 42);
  EXPECT_TRUE(all_close(ops::mul(a, c), ref_broadcast(a, c, true), 1e-7, 0));
}

TEST(ElementwiseTest, AddInPlace) {
  for (const Case& c : {Case{{5, 7}, {7}, {}}, Case{{5, 7}, {5, 1}, {}}, Case{{2, 3, 4}, {2, 3, 4}, {}},
                        Case{{3, 77}, {1}, {}}, Case{{512, 768}, {512, 768}, {}}}) {
    Tensor a = random_f32(c.a, 50);
    const Tensor b = random_f32(c.b, 51);
    const std::vector<double> expected = ref_broadcast(a, b, false);
    const void* before = a.raw_data();
    ops::add_(a, b);
    EXPECT_EQ(a.raw_data(), before);
    EXPECT_TRUE(all_close(a, expected, 1e-7, 0)) << c.a.to_string() << " += " << c.b.to_string();
  }
}

TEST(ElementwiseTest, AddInPlaceIntoAView) {
  // The residual stream as a column slice of a wider buffer: only the view changes.
  Tensor base = random_f32({4, 10}, 60);
  const std::vector<double> orig = test::to_doubles(base);
  Tensor view = base.slice(1, 2, 7);  // [4, 5]
  const Tensor b = random_f32({5}, 61);
  const std::vector<double> expected = ref_broadcast(view, b, false);
  ops::add_(view, b);
  EXPECT_TRUE(all_close(view, expected, 1e-7, 0));
  const float* p = base.data<float>();
  for (int r = 0; r < 4; ++r)
    for (int j : {0, 1, 7, 8, 9}) EXPECT_EQ(p[r * 10 + j], float(orig[r * 10 + j]));
}

// Every row length from 1 to 33 (whole vectors of 8 and 16 lanes, every masked tail), with a
// row, a broadcast value or a bias row as the other operand: one f32 rounding per element, so
// the result must equal the float arithmetic exactly, and IEEE specials must come through.
TEST(ElementwiseTest, EveryTailLengthIsExact) {
  for (int64_t n = 1; n <= 33; ++n) {
    Tensor a = random_f32({2, n}, uint32_t(300 + n));
    const Tensor row = random_f32({2, n}, uint32_t(400 + n)), one = random_f32({1}, uint32_t(500 + n));
    const Tensor bias = random_f32({n}, uint32_t(600 + n));
    a.data<float>()[n - 1] = INFINITY;                 // the last lane of a tail
    if (n > 1) a.data<float>()[n + 1] = NAN;           // second row, lane 1
    for (const Tensor* b : {&row, &one, &bias}) {
      const Tensor s = ops::add(a, *b), p = ops::mul(a, *b), s_rev = ops::add(*b, a);
      for (int64_t i = 0; i < 2 * n; ++i) {
        const float x = a.data<float>()[i];
        const float y = b->numel() == 1 ? b->data<float>()[0] : b->data<float>()[b->numel() == n ? i % n : i];
        const float sum = x + y, prod = x * y;
        if (std::isnan(sum)) {
          ASSERT_TRUE(std::isnan(s.data<float>()[i]) && std::isnan(s_rev.data<float>()[i])) << n << " " << i;
        } else {
          ASSERT_EQ(s.data<float>()[i], sum) << n << " " << i;
          ASSERT_EQ(s_rev.data<float>()[i], sum) << n << " " << i;
        }
        if (std::isnan(prod)) {
          ASSERT_TRUE(std::isnan(p.data<float>()[i])) << n << " " << i;
        } else {
          ASSERT_EQ(p.data<float>()[i], prod) << n << " " << i;
        }
      }
      Tensor acc = a.clone();
      ops::add_(acc, *b);
      for (int64_t i = 0; i < 2 * n; ++i) {
        if (!std::isnan(s.data<float>()[i])) {
          ASSERT_EQ(acc.data<float>()[i], s.data<float>()[i]) << n << " " << i;
        }
      }
    }
  }
}

TEST(ElementwiseDeathTest, IncompatibleShapesAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(ops::add(random_f32({2, 3}, 1), random_f32({4}, 2)), "broadcast");
  Tensor a = random_f32({3}, 3);
  EXPECT_DEATH(ops::add_(a, random_f32({2, 3}, 4)), "broadcast");
}

}  // namespace
}  // namespace prism
