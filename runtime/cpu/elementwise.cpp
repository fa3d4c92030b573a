// add, mul and the in-place residual add_, with numpy broadcasting over f32 tensors of any
// strides. A shape-only plan turns every case into rows of one inner loop with per-operand
// strides (0 for a broadcast operand), so the common cases (same shape; a bias row; a
// per-row scale) hit the tier's vector kernel (runtime/cpu/kernels/pointwise.cpp) and
// everything else a scalar strided loop.
// NOTE: dims are coalesced first (size-1 dims dropped, mergeable neighbours merged), so a
// contiguous [T, H] + [T, H] is one long row and [T, H] + [H] is T rows of H.
#include <algorithm>

#include "runtime/cpu/pointwise_kernels.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {
namespace {

enum class Binary : uint8_t { add, mul };

constexpr int kMax = Dims::kMaxDims;
constexpr int64_t kGrainElems = 32768;  // below this a tensor stays on one thread

struct Plan {
  int rank = 0;          // after coalescing; >= 1
  int64_t shape[kMax];   // out shape
  int64_t so[kMax], sa[kMax], sb[kMax];  // element strides of out, a, b (0: broadcast)
};

Dims broadcast_shape(const Dims& a, const Dims& b) {
  const int rank = std::max(a.size(), b.size());
  Dims out;
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.size()), ib = i - (rank - b.size());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    PRISM_CHECK_MSG(da == db || da == 1 || db == 1, "add/mul: shapes do not broadcast");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

// Strides of t as an operand of an output of shape `out` (right-aligned; 0 where broadcast).
void operand_strides(const Tensor& t, const Dims& out, int64_t* s) {
  const int off = out.size() - t.dim();
  for (int i = 0; i < out.size(); ++i) {
    const int it = i - off;
    s[i] = (it < 0 || t.size(it) == 1) ? 0 : t.stride(it);
  }
}

Plan make_plan(const Tensor& out, const Tensor& a, const Tensor& b) {
  const Dims& shape = out.shape();
  int64_t so[kMax], sa[kMax], sb[kMax];
  for (int i = 0; i < shape.size(); ++i) so[i] = out.stride(i);
  operand_strides(a, shape, sa);
  operand_strides(b, shape, sb);
  Plan p;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    const int j = p.rank - 1;
    // Merge into the previous kept dim when every operand walks them as one.
    if (j >= 0 && p.so[j] == so[i] * shape[i] && p.sa[j] == sa[i] * shape[i] &&
        p.sb[j] == sb[i] * shape[i]) {
      p.shape[j] *= shape[i];
      p.so[j] = so[i], p.sa[j] = sa[i], p.sb[j] = sb[i];
      continue;
    }
    p.shape[p.rank] = shape[i];
    p.so[p.rank] = so[i], p.sa[p.rank] = sa[i], p.sb[p.rank] = sb[i];
    ++p.rank;
  }
  if (p.rank == 0) {  // every dim 1 (or a 0-d tensor): one element
    p.rank = 1;
    p.shape[0] = 1;
    p.so[0] = p.sa[0] = p.sb[0] = 0;
  }
  return p;
}

inline float apply(Binary op, float x, float y) { return op == Binary::add ? x + y : x * y; }

// o[i * so] = a[i * sa] op b[i * sb] for i < n.
void inner(Binary op, float* o, const float* a, const float* b, int64_t n, int64_t so, int64_t sa,
           int64_t sb) {
  if (so == 1 && (sa == 1 || sa == 0) && (sb == 1 || sb == 0)) {
    const cpu::PointwiseKernels& k = cpu::pointwise_kernels();
    (op == Binary::add ? k.add : k.mul)(a, sa, b, sb, o, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) o[i * so] = apply(op, a[i * sa], b[i * sb]);
}

// Runs the plan; out may alias a (add_), element for element.
void run(Binary op, const Plan& p, float* po, const float* pa, const float* pb) {
  const int last = p.rank - 1;
  const int64_t n = p.shape[last];
  int64_t rows = 1;
  for (int i = 0; i < last; ++i) rows *= p.shape[i];
  if (rows == 1) {
    // One long row: split it into blocks instead.
    constexpr int64_t kBlock = 4096;
    parallel_for((n + kBlock - 1) / kBlock, kGrainElems / kBlock, [&](int64_t b0, int64_t b1) {
      const int64_t i0 = b0 * kBlock, i1 = std::min(n, b1 * kBlock);
      inner(op, po + i0 * p.so[last], pa + i0 * p.sa[last], pb + i0 * p.sb[last], i1 - i0,
            p.so[last], p.sa[last], p.sb[last]);
    });
    return;
  }
  parallel_for(rows, std::max<int64_t>(1, kGrainElems / n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t oo = 0, oa = 0, ob = 0, rem = r;
      for (int i = last - 1; i >= 0; --i) {
        const int64_t idx = rem % p.shape[i];
        rem /= p.shape[i];
        oo += idx * p.so[i], oa += idx * p.sa[i], ob += idx * p.sb[i];
      }
      inner(op, po + oo, pa + oa, pb + ob, n, p.so[last], p.sa[last], p.sb[last]);
    }
  });
}

void check_f32(const Tensor& a, const Tensor& b) {
  PRISM_CHECK_MSG(a.dtype() == DType::f32 && b.dtype() == DType::f32, "add/mul: f32 only");
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  check_f32(a, b);
  Tensor out = Tensor::empty(broadcast_shape(a.shape(), b.shape()), DType::f32);
  if (out.numel() == 0) return out;
  run(op, make_plan(out, a, b), out.data<float>(), a.data<float>(), b.data<float>());
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(Binary::add, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(Binary::mul, a, b); }

void add_(Tensor& a, const Tensor& b) {
  check_f32(a, b);
  PRISM_CHECK_MSG(broadcast_shape(a.shape(), b.shape()) == a.shape(),
                  "add_: b must broadcast to a's shape");
  if (a.numel() == 0) return;
  run(Binary::add, make_plan(a, a, b), a.data<float>(), a.data<float>(), b.data<float>());
}

}  // namespace prism::ops
