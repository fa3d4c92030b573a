// ops::matmul on oneDNN: batched, numpy-broadcast batch dims, strided operands described to
// oneDNN as they lie (no copies) whenever a fast implementation accepts them. One primitive
// per (shapes, strides, alpha), cached process-wide; never one per call.
// Must not: copy operands the fast kernels can read in place, or hold the cache lock while
// a primitive runs.
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cpu/dnnl_context.h"
#include "runtime/ops.h"

namespace prism::ops {

namespace {

using dt = dnnl::memory::data_type;

// Bound on cached primitives: past it the cache is cleared (rebuilt on demand).
constexpr size_t kMaxCachedPrimitives = 1024;

struct MatmulPlan {
  dnnl::matmul prim;
  bool fast = false;  // false: oneDNN chose a reference kernel for these strides
};

std::mutex g_mu;  // guards g_cache only; never held while executing
std::map<std::vector<int64_t>, MatmulPlan>& cache() {
  static std::map<std::vector<int64_t>, MatmulPlan> c;
  return c;
}

// Operand of rank `rank` (leading dims padded with 1): dims and element strides as oneDNN
// sees them. With transpose, the last two dims are swapped (a [N, K] view read as [K, N]).
struct Operand {
  dnnl::memory::dims dims, strides;
};

Operand describe(const Tensor& t, int rank, bool transpose) {
  Operand o;
  const int pad = rank - t.dim();
  for (int i = 0; i < rank; ++i) {
    const int d = i - pad;
    o.dims.push_back(d < 0 ? 1 : t.size(d));
    o.strides.push_back(d < 0 ? 0 : t.stride(d));
  }
  if (transpose) {
    std::swap(o.dims[rank - 1], o.dims[rank - 2]);
    std::swap(o.strides[rank - 1], o.strides[rank - 2]);
  }
  // Size-1 dims: any stride reads the same element; give oneDNN the dense one, which its
  // layout checks accept.
  int64_t dense = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (o.dims[i] == 1) o.strides[i] = dense;
    dense *= o.dims[i];
  }
  return o;
}

dnnl::memory::desc dense_desc(const dnnl::memory::dims& dims) {
  dnnl::memory::dims strides(dims.size());
  int64_t s = 1;
  for (int i = int(dims.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= dims[i];
  }
  return dnnl::memory::desc(dims, dt::f32, strides);
}

MatmulPlan make_plan(const Operand& a, const Operand& b, const dnnl::memory::dims& out, float alpha) {
  const dnnl::memory::desc a_md(a.dims, dt::f32, a.strides);
  const dnnl::memory::desc b_md(b.dims, dt::f32, b.strides);
  const dnnl::memory::desc c_md = dense_desc(out);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  dnnl_primitive_desc_t c_pd = nullptr;
  dnnl::matmul::desc d(a_md, b_md, c_md);
  MatmulPlan plan;
  // The C API: an unsupported layout is a status, not an exception through Prism code.
  if (dnnl_primitive_desc_create(&c_pd, &d.data, attr.get(), cpu::dnnl_engine().get(), nullptr) !=
      dnnl_success)
    return plan;
  dnnl::matmul::primitive_desc pd(c_pd);
  plan.fast = std::string(pd.impl_info_str()).find("ref") == std::string::npos;
  plan.prim = dnnl::matmul(pd);
  return plan;
}

MatmulPlan find_plan(const Operand& a, const Operand& b, const dnnl::memory::dims& out, float alpha) {
  std::vector<int64_t> key;
  key.reserve(4 * a.dims.size() + 2);
  key.push_back(int64_t(a.dims.size()));
  for (const auto* v : {&a.dims, &a.strides, &b.dims, &b.strides}) key.insert(key.end(), v->begin(), v->end());
  uint32_t alpha_bits;
  std::memcpy(&alpha_bits, &alpha, 4);
  key.push_back(alpha_bits);
  std::lock_guard<std::mutex> lock(g_mu);
  auto& c = cache();
  auto it = c.find(key);
  if (it != c.end()) return it->second;
  if (c.size() >= kMaxCachedPrimitives) c.clear();
  return c.emplace(std::move(key), make_plan(a, b, out, alpha)).first->second;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, const MatmulOptions& options) {
  PRISM_CHECK_MSG(a_in.dtype() == DType::f32 && b_in.dtype() == DType::f32, "matmul: f32 only");
  PRISM_CHECK_MSG(a_in.dim() >= 2 && b_in.dim() >= 2, "matmul: operands need rank >= 2");
  const bool tb = options.transpose_b;
  const int rank = std::max(a_in.dim(), b_in.dim());
  PRISM_CHECK_MSG(rank <= Dims::kMaxDims, "matmul: rank too large");
  const int64_t M = a_in.size(-2), K = a_in.size(-1);
  const int64_t N = tb ? b_in.size(-2) : b_in.size(-1);
  PRISM_CHECK_MSG((tb ? b_in.size(-1) : b_in.size(-2)) == K, "matmul: inner dims differ");

  // Broadcast batch dims, numpy-style.
  Dims out_shape;
  for (int i = 0; i < rank - 2; ++i) {
    const int da = i - (rank - a_in.dim()), db = i - (rank - b_in.dim());
    const int64_t sa = da < 0 ? 1 : a_in.size(da), sb = db < 0 ? 1 : b_in.size(db);
    PRISM_CHECK_MSG(sa == sb || sa == 1 || sb == 1, "matmul: batch dims do not broadcast");
    out_shape.push_back(std::max(sa, sb));
  }
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, DType::f32);
  if (out.numel() == 0) return out;
  if (K == 0) return Tensor::zeros(out_shape, DType::f32);

  // The fast kernels need the contiguous dim of each operand to be K (a) and N or K (b).
  Tensor a = a_in.stride(-1) == 1 ? a_in : a_in.contiguous();
  Tensor b = b_in.stride(-1) == 1 ? b_in : b_in.contiguous();
  const dnnl::memory::dims out_dims(out_shape.begin(), out_shape.end());
  MatmulPlan plan = find_plan(describe(a, rank, false), describe(b, rank, tb), out_dims, options.alpha);
  if (!plan.fast) {
    // Unusual strides: copy to dense operands, which the fast kernels take.
    a = a.contiguous();
    b = b.contiguous();
    plan = find_plan(describe(a, rank, false), describe(b, rank, tb), out_dims, options.alpha);
    PRISM_CHECK_MSG(plan.prim, "matmul: oneDNN has no implementation");
  }

  dnnl::engine& eng = cpu::dnnl_engine();
  dnnl::stream& stream = cpu::dnnl_stream();
  const Operand ao = describe(a, rank, false), bo = describe(b, rank, tb);
  dnnl::memory a_mem({ao.dims, dt::f32, ao.strides}, eng, a.raw_data());
  dnnl::memory b_mem({bo.dims, dt::f32, bo.strides}, eng, b.raw_data());
  dnnl::memory c_mem(dense_desc(out_dims), eng, out.raw_data());
  plan.prim.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  stream.wait();
  return out;
}

}  // namespace prism::ops
