// ops::linear: weights packed once by pack_linear for the path that runs them on the active
// instruction-set tier (runtime/isa.h), then run without allocating in steady state. Paths
// are oneDNN matmul (weights in the blocked layout its brgemm wants, one cached primitive per
// (rows, row stride, activation)) or Prism's own kernels (runtime/cpu/linear_kernels.h,
// linear_int8.h) where oneDNN has none or a slow one. Baseline code: every vector loop is a
// tier kernel under runtime/cpu/kernels/.
// Must not: reorder weights per call, create a primitive per call, or malloc scratch per call
// in steady state (conversion buffers are thread-local and only grow).
//
// NOTE (paths): one PackedLinear class; its LinearPath is chosen at pack time from the tier
// and the precision (PackedLinear::default_path):
//   precision | avx2                     | avx512                   | avx512_bf16, amx
//   f32       | onednn (gemm:jit, avx2)  | onednn (brgemm)          | onednn (brgemm; amx: AMX)
//   bf16      | bf16_widen_onednn        | bf16_widen_onednn        | onednn_dpbf16
//   int8      | int8_prism               | int8_prism               | onednn (s8, VNNI / AMX)
// - onednn_dpbf16: oneDNN brgemm for rows > cpu::kSmallMMaxRows and, at decode-sized M, the
//   _mm512_dpbf16_ps kernel reading the same packed weights (kernels/linear_bf16_dot.cpp,
//   figures there): oneDNN is well below the memory bandwidth at M = 1..8.
// - bf16_widen_onednn: oneDNN 2.6 has no bf16 matmul on AVX2 at all, and on avx512_core only
//   an emulated gemm:jit. Weights stay bf16 (half of f32's bytes: decode is bandwidth-bound)
//   in our panel layout. Below kWidenedOnednnMinRows rows they are widened to f32 in the
//   kernel (kernels/linear_bf16_widen.cpp; activations stay f32); from there on, block by
//   block into an f32 scratch that oneDNN's f32 matmul multiplies (run_widened_onednn: the
//   widening is O(K N) against the GEMM's O(M K N)). bf16_widen is the kernel at every M, for
//   tests and benches. Figures: "NOTE (bf16 without native bf16)" below.
// - int8_prism: without VNNI oneDNN 2.6's s8 matmul is both slow (about half f32's rate on
//   AVX2) and wrong for full-range s8: it multiplies the source shifted to u8 by the s8
//   weights with vpmaddubsw, whose int16 pair sums saturate past 2^15 (255 * 127 * 2; oneDNN
//   asks for 7-bit weights there). Forced to avx512_core, LinearTest's int8 cases were off by
//   up to 0.6 at values of ~2 (13 of 32 outputs of a 64 -> 32 linear out of bound). Prism's
//   int8 kernel (linear_int8.h, kernels/linear_int8.cpp) takes both tiers without VNNI, with
//   the activations quantised by the same row kernel as oneDNN's path.
//
// NOTE (bf16 without native bf16): bench/linear_bench, Zen 4 with PRISM_ISA forced, 2 threads,
// wall clock, OMP_WAIT_POLICY=PASSIVE, one run (2026-12-02); x: f32's time over the path's.
//  - avx2, decode (M = 1, SmolLM2-360M and Llama-3.2-1B linears and the Llama-3 LM head):
//    bf16_widen 1.88-2.53x f32 (40-92% of the read bandwidth); int8_prism 2.42-3.99x.
//    Prefill: at M = 64 bf16 1.16-2.02x (oneDNN's f32 gemm:jit is weak at small M), at M = 512
//    0.96-1.03x; BERT-base at M = 4096 0.82-0.94x (768 -> 3072 with GELU the worst).
//  - avx512, decode: bf16_widen 2.44-2.74x f32, oneDNN's emulated bf16 0.52-2.11x (slower than
//    f32 from M = 2); prefill: bf16_widen 0.85-0.92x f32 (one 1.27x), oneDNN's bf16 0.26-0.52x.
//  So bf16 pays wherever decode does (bandwidth), and costs up to ~15% in large prefills
//  against oneDNN's f32 GEMM, whose micro-kernel ours does not match at K = 768 and whose
//  fused GELU is cheaper than our accurate one (BERT up 768 -> 3072: kernel 1.00x f32 without
//  GELU, 0.85x with it); int8_prism is the faster choice for prefill on both tiers.
//  The widened route (same runs, linear_bench prefill at M = 512..4096, 2026-12-02): it can
//  only trail f32 by its widening pass, and does, by 0-10% (avx2 0.89-1.04x, avx512 0.89-0.99x
//  at M >= 1024); at M = 4096 BERT-base it beats the kernel on both tiers (avx2 0.96-1.01x
//  against 0.85-1.00x, avx512 0.89-0.99x against 0.82-0.86x); at M = 512 it loses on avx2
//  (0.54-0.95x against 0.94-1.03x: each block is a GEMM of its own). So it takes over at
//  kWidenedOnednnMinRows = 1024 rows.
//
// NOTE (weight layout, oneDNN): the layout is chosen by asking oneDNN for `format_tag::any`
// weights of a matmul at a representative M (kPackRows). Measured with oneDNN 2.6.3 on Zen 4
// (AVX-512 BF16/VNNI): brgemm picks the same blocked layout for M = 1, 32, 256, 1024 and
// 4096 (it depends on K, N and the dtypes only), and a primitive created with that explicit
// layout for any other M is again brgemm at full speed, so packing once loses nothing.
// DNNL_RUNTIME_DIM_VAL for M is not an option: brgemm matmul in 2.6 rejects runtime dims
// and the gemm fallback wants plain weights (and is slower).
//
// NOTE (int8): activations are quantised per row (token): sx[m] = max|x[m,:]| / 127,
// q = round(x / sx), s8. Weights per output channel: sw[n] = max|w[n,:]| / 127, s8. oneDNN
// computes sw[n] * (q_x @ q_w) (per-N output scales) into the f32 output; our epilogue then
// applies y = act(sx[m] * y + b[n]) in place, row by row. oneDNN 2.6 cannot fuse the per-row
// scale: a binary_mul post-op with a [M, 1] src1 falls back to ref_int8 (hundreds of times
// slower), and its own bias is added before the output scale, where it would need a per-row
// correction. Measured at 1024^3: s8 x s8 (brgemm shifts the source to u8 and subtracts a
// compensation that the pack-time reorder computes) runs within ~10% of raw u8 x s8 (the
// machine's noise level), and faster than u8 with a zero point of 128 (which needs a
// per-call compensation); at BERT shapes u8 x s8 would gain 2-3%, within noise. So the
// quantisation stays symmetric s8, which also keeps the zero exact.
//
// NOTE (int8 at BERT-base shapes, M = 4096, K = 768): measured on the shared 2-core Zen 4,
// alternating variants. The raw s8 x s8 oneDNN matmul with per-N output scales runs at
// 90-95% of its own 1024^3 u8 x s8 figure at 768->768 and 768->3072 (u8 x s8: 93-98%, the
// difference within noise), so the GEMM is not the limit there; the passes around it are.
// The quantise pass costs ~0.4 ms at [4096, 768] (noisy machine); the epilogue was the cost
// (see kernels/linear_rows.cpp). Tried and dropped: running quantise -> GEMM -> epilogue in
// row blocks of 256/512 so activations and outputs stay in L2, (a) with the three passes each
// parallel per block: 1.3-8x slower (one oneDNN fork-join per block), (b) each thread owning
// whole blocks with a sequential oneDNN inside the parallel region: no gain beyond noise
// (-10% to +10%), and it needs a user scratchpad per thread, since oneDNN 2.6's library
// scratchpad is shared between concurrent executions (without it the output was wrong).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/arena.h"
#include "runtime/cpu/dnnl_context.h"
#include "runtime/cpu/linear_packed.h"
#include "runtime/cpu/scratch_buffer.h"
#include "runtime/cpu/vec_math.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// Rows of the matmul used to pick the packed weight layout (see the NOTE above).
constexpr int64_t kPackRows = 256;
// A bound on cached primitives per weight: decode batches make M take many values; past
// this the cache is cleared (primitives are rebuilt on demand; a rare cost, not a leak).
constexpr size_t kMaxCachedPrimitives = 512;

using cpu::ScratchBuffer;  // conversion scratch without a malloc per call in steady state

ScratchBuffer& src_scratch() {
  thread_local ScratchBuffer buffer;
  return buffer;
}
ScratchBuffer& scale_scratch() {
  thread_local ScratchBuffer buffer;
  return buffer;
}

dnnl::algorithm eltwise_algorithm(Activation act) {
  switch (act) {
    case Activation::gelu_erf: return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case Activation::silu: return dnnl::algorithm::eltwise_swish;  // x * sigmoid(1 * x)
    case Activation::relu: return dnnl::algorithm::eltwise_relu;
    case Activation::quick_gelu: return dnnl::algorithm::eltwise_swish;  // x * sigmoid(1.702 x)
    case Activation::none: break;
  }
  return dnnl::algorithm::undef;
}

void append_activation(dnnl::post_ops& po, Activation act) {
  if (act == Activation::none) return;
  // alpha: swish's beta, x * sigmoid(alpha x) (1 = SiLU, 1.702 = QuickGELU); relu's
  // negative slope (0). beta unused.
  const float alpha = act == Activation::silu         ? 1.0f
                      : act == Activation::quick_gelu ? cpu::kQuickGeluAlpha
                                                      : 0.0f;
  po.append_eltwise(1.0f, eltwise_algorithm(act), alpha, 0.0f);
}

dt dnnl_dt(Precision p) {
  switch (p) {
    case Precision::f32: return dt::f32;
    case Precision::bf16: return dt::bf16;
    case Precision::int8: return dt::s8;
  }
  return dt::undef;
}

// ---- passes over rows (the tier's row kernels, threaded here) ----

// [M, K] f32 (row stride ld) -> [M, K] f32 contiguous, in the thread's source scratch:
// brgemm (oneDNN 2.6) rejects a strided source and the fallback is the reference kernel, so
// the rows are gathered, O(M K) against the GEMM's O(M K N).
const float* contiguous_rows(const float* x, int64_t M, int64_t ld, int64_t K) {
  if (ld == K) return x;
  float* xc = static_cast<float*>(src_scratch().get(size_t(M * K) * sizeof(float)));
  parallel_for(M, std::max<int64_t>(1, 16384 / K), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) std::memcpy(xc + m * K, x + m * ld, size_t(K) * sizeof(float));
  });
  return xc;
}

// [M, K] f32 (row stride ld) -> [M, K] bf16 contiguous, round to nearest even.
void convert_rows_bf16(const float* x, int64_t ld, int64_t M, int64_t K, bf16* out) {
  const cpu::LinearRowKernels& k = cpu::linear_row_kernels();
  parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1)), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) k.to_bf16(x + m * ld, K, out + m * K);
  });
}

// [M, K] f32 (row stride ld) -> [M, K] s8 contiguous and scales[M], symmetric per row
// (LinearRowKernels::quantize_s8).
void quantize_rows_s8(const float* x, int64_t ld, int64_t M, int64_t K, int8_t* out, float* scales) {
  const cpu::LinearRowKernels& k = cpu::linear_row_kernels();
  parallel_for(M, std::max<int64_t>(1, 8192 / std::max<int64_t>(K, 1)), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) scales[m] = k.quantize_s8(x + m * ld, K, out + m * K);
  });
}

// y: [M, N] f32 in place: y = act(sx[m] * y + bias[n]); sx: [M]; bias: [N] or null.
void int8_epilogue(float* y, int64_t M, int64_t N, const float* sx, const float* bias, Activation act) {
  const cpu::LinearRowKernels& k = cpu::linear_row_kernels();
  parallel_for(M, std::max<int64_t>(1, 4096 / std::max<int64_t>(N, 1)),
               [&](int64_t m0, int64_t m1) { k.int8_epilogue(y, m0, m1, N, sx, bias, act); });
}

// Weights per output channel: sw[n] = max|w[n, :]| / 127 (1 for a zero row),
// q = round_half_even(w / sw). w: [N, K] any float dtype. Load time only.
void quantize_weights(const Tensor& weight, Tensor& q_out, std::vector<float>& scales) {
  const int64_t N = weight.size(0), K = weight.size(1);
  const Tensor w32 = weight.to(DType::f32).contiguous();
  q_out = Tensor::empty({N, K}, DType::i8);
  scales.assign(size_t(N), 1.0f);
  const float* w = w32.data<float>();
  int8_t* q = q_out.data<int8_t>();
  parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      float amax = 0.0f;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
      const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
      scales[size_t(n)] = scale;
      for (int64_t k = 0; k < K; ++k)
        q[n * K + k] = int8_t(std::clamp(std::nearbyint(w[n * K + k] / scale), -127.0f, 127.0f));
    }
  });
}

// The dpbf16 kernel's view of oneDNN's packed bf16 weights when `desc` is the layout it knows
// (cpu::Bf16PanelWeights), else nullopt (the caller stays on oneDNN).
std::optional<cpu::Bf16PanelWeights> bf16_panel_weights(const dnnl::memory::desc& desc, const void* data, int64_t k,
                                                        int64_t n) {
  const dnnl_memory_desc_t& d = desc.data;
  if (d.ndims != 2 || d.data_type != dnnl_bf16 || d.format_kind != dnnl_blocked || d.extra.flags != 0 ||
      d.offset0 != 0)
    return std::nullopt;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const bool layout = b.inner_nblks == 3 && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 && b.inner_blks[1] == 64 &&
                      b.inner_idxs[1] == 1 && b.inner_blks[2] == 2 && b.inner_idxs[2] == 0;
  if (!layout || d.dims[0] != k || d.dims[1] != n) return std::nullopt;
  const int64_t k_pad = d.padded_dims[0], n_pad = d.padded_dims[1];
  // Blocks of 32 k (16 pairs) x 64 n; the K blocks of a group back to back (so k pairs sit
  // every 128 elements), groups after that.
  if (k_pad % 32 != 0 || n_pad % 64 != 0 || b.strides[0] != 32 * 64 || b.strides[1] < k_pad * 64)
    return std::nullopt;
  cpu::Bf16PanelWeights w;
  w.data = static_cast<const bf16*>(data);
  w.k = k;
  w.n = n;
  w.k_pairs = k_pad / 2;
  w.group_stride = b.strides[1];
  return w;
}

// oneDNN's implementation for a precision's matmul at a representative shape on this tier
// ("brg:avx512_core_bf16", "gemm:jit", ...), or "none".
std::string onednn_impl(Precision p) {
  const dnnl::memory::desc src({kPackRows, 1024}, dnnl_dt(p), tag::ab);
  const dnnl::memory::desc w({1024, 1024}, dnnl_dt(p), tag::any);
  const dnnl::memory::desc dst({kPackRows, 1024}, dt::f32, tag::ab);
  dnnl::matmul::desc d(src, w, dst);
  dnnl_primitive_desc_t c_pd = nullptr;
  dnnl::primitive_attr attr;
  if (dnnl_primitive_desc_create(&c_pd, &d.data, attr.get(), cpu::dnnl_engine().get(), nullptr) != dnnl_success)
    return "none";
  const dnnl::matmul::primitive_desc pd(c_pd);
  return pd.impl_info_str();
}

}  // namespace

// ---- precision names ----

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::f32: return "f32";
    case Precision::bf16: return "bf16";
    case Precision::int8: return "int8";
  }
  return "?";
}

Result<Precision> parse_precision(std::string_view name) {
  if (name == "f32") return Precision::f32;
  if (name == "bf16") return Precision::bf16;
  if (name == "int8") return Precision::int8;
  return invalid_argument("unknown precision '" + std::string(name) + "' (expected f32, bf16 or int8)");
}

std::string_view linear_path_name(LinearPath path) {
  switch (path) {
    case LinearPath::onednn: return "onednn";
    case LinearPath::onednn_dpbf16: return "onednn_dpbf16";
    case LinearPath::bf16_widen: return "bf16_widen";
    case LinearPath::bf16_widen_onednn: return "bf16_widen_onednn";
    case LinearPath::int8_prism: return "int8_prism";
  }
  return "?";
}

std::string linear_path(Precision p) {
  const std::string tier(isa_name(active_isa()));
  switch (PackedLinear::default_path(p)) {
    case LinearPath::onednn:
      return tier + ": oneDNN " + std::string(precision_name(p)) + " matmul (" + onednn_impl(p) + ")";
    case LinearPath::onednn_dpbf16:
      return tier + ": oneDNN bf16 matmul (" + onednn_impl(p) + ") + Prism's dpbf16 decode kernel (rows <= " +
             std::to_string(cpu::kSmallMMaxRows) + ")";
    case LinearPath::bf16_widen: return tier + ": bf16 weights widened to f32 in Prism's kernel (every M)";
    case LinearPath::bf16_widen_onednn:
      return tier + ": bf16 weights widened to f32 in Prism's kernel (rows < " +
             std::to_string(kWidenedOnednnMinRows) + "), else widened in blocks for oneDNN's f32 matmul (" +
             onednn_impl(Precision::f32) + ")";
    case LinearPath::int8_prism: return tier + ": Prism's int8 kernel (s8 weights, per-token s8 activations)";
  }
  return tier + ": ?";
}

// ---- PackedLinear ----

PackedLinear::PackedLinear(Precision precision, LinearPath path, int64_t in_features, int64_t out_features)
    : precision_(precision), path_(path), in_(in_features), out_(out_features) {}

LinearPath PackedLinear::default_path(Precision precision) {
  const Isa isa = active_isa();
  switch (precision) {
    case Precision::f32: return LinearPath::onednn;
    case Precision::bf16: return isa >= Isa::avx512_bf16 ? LinearPath::onednn_dpbf16 : LinearPath::bf16_widen_onednn;
    case Precision::int8: return isa >= Isa::avx512_bf16 ? LinearPath::onednn : LinearPath::int8_prism;
  }
  return LinearPath::onednn;
}

dt PackedLinear::src_dt() const { return dnnl_dt(precision_); }
dt PackedLinear::weight_dt() const { return dnnl_dt(precision_); }

dnnl::primitive_attr PackedLinear::make_attr(Activation act) const {
  dnnl::primitive_attr attr;
  dnnl::post_ops po;
  if (precision_ == Precision::int8) {
    // Bias and activation follow the per-row scale, in int8_epilogue.
    attr.set_output_scales(/*mask: per N*/ 1 << 1, weight_scales_);
  } else {
    append_activation(po, act);
  }
  attr.set_post_ops(po);
  return attr;
}

dnnl::matmul::primitive_desc PackedLinear::make_pd(int64_t rows, int64_t ld, Activation act,
                                                    const dnnl::memory::desc& weights) const {
  const dnnl::memory::desc src({rows, in_}, src_dt(), dnnl::memory::dims{ld, 1});
  const dnnl::memory::desc dst({rows, out_}, dt::f32, tag::ab);
  const bool fused_bias = has_bias_ && precision_ != Precision::int8;
  const dnnl::memory::desc bias = fused_bias ? dnnl::memory::desc({1, out_}, dt::f32, tag::ab)
                                             : dnnl::memory::desc();
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, bias, dst),
                                      make_attr(act), cpu::dnnl_engine());
}

dnnl::matmul PackedLinear::primitive(int64_t rows, int64_t ld, Activation act) const {
  PRISM_CHECK_MSG(uses_onednn(), "linear: these weights are not packed for oneDNN");
  if (precision_ == Precision::int8) act = Activation::none;  // applied in the epilogue
  return cached_primitive({rows, ld, uint8_t(act), out_}, [&] { return make_pd(rows, ld, act, weights_md_); });
}

dnnl::matmul PackedLinear::cached_primitive(const PrimitiveKey& key,
                                            const std::function<dnnl::matmul::primitive_desc()>& make) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  if (cache_.size() >= kMaxCachedPrimitives) cache_.clear();
  // Built under the lock: creation is once per shape, and holding the lock keeps two
  // threads from building the same primitive. Returned by value (a refcounted handle), so
  // a later clear() never frees a primitive that another thread executes.
  return cache_.emplace(key, dnnl::matmul(make())).first->second;
}

Status PackedLinear::pack_onednn(const Tensor& weight) {
  const int64_t N = out_, K = in_;
  // The layout brgemm wants for these K, N and dtypes (see the NOTE at the top).
  const dnnl::memory::desc any_w({K, N}, weight_dt(), tag::any);
  dnnl::matmul::primitive_desc pd;
  {
    dnnl::memory::desc src({kPackRows, K}, src_dt(), tag::ab);
    dnnl::memory::desc dst({kPackRows, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (precision_ == Precision::int8) {
      weight_scales_.assign(size_t(N), 1.0f);
      attr = make_attr(Activation::none);
    }
    dnnl_primitive_desc_t c_pd = nullptr;
    dnnl::matmul::desc d(src, any_w, dst);
    // The C API, so a failure is a status rather than an exception escaping Prism code.
    if (dnnl_primitive_desc_create(&c_pd, &d.data, attr.get(), cpu::dnnl_engine().get(), nullptr) !=
        dnnl_success)
      return internal_error("oneDNN has no matmul for linear " + std::to_string(K) + "->" + std::to_string(N) +
                            " in " + std::string(precision_name(precision_)) + " on the " +
                            std::string(isa_name(active_isa())) + " tier");
    pd = dnnl::matmul::primitive_desc(c_pd);
  }
  weights_md_ = pd.weights_desc();

  // Source weights as oneDNN's [K, N] view of the row-major [N, K] tensor.
  Tensor w_src;
  if (precision_ == Precision::int8)
    quantize_weights(weight, w_src, weight_scales_);
  else
    w_src = weight.to(precision_ == Precision::f32 ? DType::f32 : DType::bf16).contiguous();
  dnnl::memory::desc plain_w({K, N}, weight_dt(), dnnl::memory::dims{1, K});
  dnnl::memory plain(plain_w, cpu::dnnl_engine(), w_src.raw_data());
  weights_ = dnnl::memory(weights_md_, cpu::dnnl_engine());
  dnnl::reorder(plain, weights_).execute(cpu::dnnl_stream(), plain, weights_);
  cpu::dnnl_stream().wait();
  return Status();
}

Result<std::shared_ptr<PackedLinear>> PackedLinear::create(const Tensor& weight, const Tensor& bias,
                                                           Precision precision) {
  return create(weight, bias, precision, default_path(precision));
}

Result<std::shared_ptr<PackedLinear>> PackedLinear::create(const Tensor& weight, const Tensor& bias,
                                                           Precision precision, LinearPath path) {
  const int64_t N = weight.size(0), K = weight.size(1);
  const bool fits = path == LinearPath::onednn || (path == LinearPath::onednn_dpbf16 && precision == Precision::bf16) ||
                    ((path == LinearPath::bf16_widen || path == LinearPath::bf16_widen_onednn) &&
                     precision == Precision::bf16) ||
                    (path == LinearPath::int8_prism && precision == Precision::int8);
  if (!fits)
    return invalid_argument("linear path " + std::string(linear_path_name(path)) + " cannot run " +
                            std::string(precision_name(precision)));
  if (path == LinearPath::onednn_dpbf16 && cpu::bf16_dot_kernels().small_m == nullptr)
    return failed_precondition("linear path onednn_dpbf16 needs AVX512_BF16; the tier is " +
                               std::string(isa_name(active_isa())));
  auto packed = std::shared_ptr<PackedLinear>(new PackedLinear(precision, path, K, N));
  PackedLinear& p = *packed;
  p.has_bias_ = bias.defined();
  if (p.has_bias_) p.bias_ = bias.contiguous().to(DType::f32).clone();

  switch (path) {
    case LinearPath::onednn:
      PRISM_RETURN_IF_ERROR(p.pack_onednn(weight));
      break;
    case LinearPath::onednn_dpbf16:
      PRISM_RETURN_IF_ERROR(p.pack_onednn(weight));
      p.small_m_ = bf16_panel_weights(p.weights_md_, p.weights_.get_data_handle(), K, N);
      break;
    case LinearPath::bf16_widen:
    case LinearPath::bf16_widen_onednn: {
      const Tensor w = weight.to(DType::bf16).contiguous();
      p.widen_ = cpu::pack_bf16_widen(w.data<bf16>(), N, K, cpu::bf16_widen_kernels().panel_width);
      break;
    }
    case LinearPath::int8_prism: {
      Tensor q;
      quantize_weights(weight, q, p.weight_scales_);
      PRISM_ASSIGN_OR_RETURN(p.int8_, cpu::int8_kernels().pack(q.data<int8_t>(), p.weight_scales_.data(), N, K));
      break;
    }
  }
  return packed;
}

Result<LinearWeight> pack_linear(const Tensor& weight, const Tensor& bias, Precision precision) {
  if (!weight.defined()) return invalid_argument("pack_linear: weight is undefined");
  if (weight.device() != Device::cpu) return invalid_argument("pack_linear: weight is not on the cpu");
  if (weight.dim() != 2)
    return invalid_argument("pack_linear: weight must be [out, in], got " + weight.shape().to_string());
  const DType wd = weight.dtype();
  if (wd != DType::f32 && wd != DType::bf16 && wd != DType::f16)
    return invalid_argument("pack_linear: weight dtype " + std::string(dtype_name(wd)) +
                            " (expected f32, bf16 or f16)");
  const int64_t N = weight.size(0), K = weight.size(1);
  if (N <= 0 || K <= 0)
    return invalid_argument("pack_linear: empty weight " + weight.shape().to_string());
  if (bias.defined()) {
    if (bias.dim() != 1 || bias.size(0) != N)
      return invalid_argument("pack_linear: bias must be [" + std::to_string(N) + "], got " +
                              bias.shape().to_string());
    const DType bd = bias.dtype();
    if (bd != DType::f32 && bd != DType::bf16 && bd != DType::f16)
      return invalid_argument("pack_linear: bias dtype " + std::string(dtype_name(bd)) +
                              " (expected f32, bf16 or f16)");
  }
  // Packed weights must not come from (and die with) an arena the caller has active.
  ArenaScope no_arena(nullptr);
  PRISM_ASSIGN_OR_RETURN(std::shared_ptr<PackedLinear> packed, PackedLinear::create(weight, bias, precision));
  LinearWeight w;
  w.packed = std::move(packed);
  w.in_features = K;
  w.out_features = N;
  w.precision = precision;
  w.has_bias = bias.defined();
  return w;
}

// ---- linear ----

void PackedLinear::run(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const {
  switch (path_) {
    case LinearPath::onednn: return run_onednn(x, rows, ld, act, y);
    case LinearPath::onednn_dpbf16:
      if (small_m_ && rows <= cpu::kSmallMMaxRows) return run_small_m(x, rows, ld, act, y);
      return run_onednn(x, rows, ld, act, y);
    case LinearPath::bf16_widen_onednn:
      if (rows >= kWidenedOnednnMinRows) return run_widened_onednn(x, rows, ld, act, y);
      [[fallthrough]];
    case LinearPath::bf16_widen:
      return cpu::bf16_widen_kernels().gemm(x, rows, ld, widen_, bias_ptr(), act, y);
    case LinearPath::int8_prism: return run_int8_prism(x, rows, ld, act, y);
  }
}

void PackedLinear::run_small_m(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const {
  PRISM_CHECK_MSG(small_m_.has_value(), "linear: no small-M path for these weights");
  PRISM_CHECK_MSG(rows >= 1 && rows <= cpu::kBf16DotMaxRows, "linear: small-M kernel rows out of range");
  cpu::bf16_dot_kernels().small_m(x, rows, ld, *small_m_, bias_ptr(), act, y);
}

void PackedLinear::run_int8_prism(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const {
  int8_t* xq = static_cast<int8_t*>(src_scratch().get(size_t(rows * in_)));
  float* sx = static_cast<float*>(scale_scratch().get(size_t(rows) * sizeof(float)));
  quantize_rows_s8(x, ld, rows, in_, xq, sx);
  cpu::int8_kernels().gemm(xq, rows, sx, int8_, bias_ptr(), act, y);
}

void PackedLinear::run_onednn(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const {
  dnnl::engine& eng = cpu::dnnl_engine();
  dnnl::stream& stream = cpu::dnnl_stream();

  const void* src = x;
  int64_t src_ld = ld;
  const float* row_scales = nullptr;
  std::unordered_map<int, dnnl::memory> args;
  if (precision_ == Precision::f32 && ld != in_) {
    src = contiguous_rows(x, rows, ld, in_);
    src_ld = in_;
  } else if (precision_ == Precision::bf16) {
    bf16* xb = static_cast<bf16*>(src_scratch().get(size_t(rows * in_) * sizeof(bf16)));
    convert_rows_bf16(x, ld, rows, in_, xb);
    src = xb;
    src_ld = in_;
  } else if (precision_ == Precision::int8) {
    int8_t* xq = static_cast<int8_t*>(src_scratch().get(size_t(rows * in_)));
    float* sx = static_cast<float*>(scale_scratch().get(size_t(rows) * sizeof(float)));
    quantize_rows_s8(x, ld, rows, in_, xq, sx);
    src = xq;
    src_ld = in_;
    row_scales = sx;
  }
  const dnnl::matmul prim = primitive(rows, src_ld, act);
  args.emplace(DNNL_ARG_SRC, dnnl::memory({{rows, in_}, src_dt(), dnnl::memory::dims{src_ld, 1}}, eng,
                                          const_cast<void*>(src)));
  args.emplace(DNNL_ARG_WEIGHTS, weights_);
  if (has_bias_ && precision_ != Precision::int8)
    args.emplace(DNNL_ARG_BIAS, dnnl::memory({{1, out_}, dt::f32, tag::ab}, eng, bias_.raw_data()));
  args.emplace(DNNL_ARG_DST, dnnl::memory({{rows, out_}, dt::f32, tag::ab}, eng, y));
  prim.execute(stream, args);
  stream.wait();
  if (row_scales) int8_epilogue(y, rows, out_, row_scales, bias_ptr(), act);
}

// The f32 copy of one block of widened panels stays under this many bytes: big enough that
// each oneDNN call is a long GEMM at prefill sizes (BERT-base and SmolLM2 layers in one
// block), small enough to be a modest scratch.
constexpr int64_t kWidenedBlockBytes = 16 << 20;

ScratchBuffer& widened_scratch() {
  thread_local ScratchBuffer buffer;
  return buffer;
}

void PackedLinear::run_widened_onednn(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const {
  dnnl::engine& eng = cpu::dnnl_engine();
  dnnl::stream& stream = cpu::dnnl_stream();
  const int64_t K = in_, P = widen_.panel_width;
  // Equal blocks: a narrow last block would be a slow GEMM of its own.
  const int64_t cap = std::max<int64_t>(1, kWidenedBlockBytes / (K * P * int64_t(sizeof(float))));
  const int64_t blocks = (widen_.panels + cap - 1) / cap;
  const int64_t block_panels = (widen_.panels + blocks - 1) / blocks;
  float* wf = static_cast<float*>(widened_scratch().get(size_t(block_panels * P * K) * sizeof(float)));
  const float* src = contiguous_rows(x, rows, ld, K);
  const dnnl::memory::desc src_md({rows, K}, dt::f32, tag::ab);
  for (int64_t p0 = 0; p0 < widen_.panels; p0 += block_panels) {
    const int64_t p1 = std::min(widen_.panels, p0 + block_panels);
    const int64_t col0 = p0 * P, cols = std::min(out_, p1 * P) - col0;
    cpu::widen_bf16_panels(widen_, p0, p1, wf);
    // A column block of y: rows of `cols` values at the full row stride.
    const dnnl::memory::desc w_md({K, cols}, dt::f32, tag::ab);
    const dnnl::memory::desc dst_md({rows, cols}, dt::f32, dnnl::memory::dims{out_, 1});
    const dnnl::memory::desc bias_md = has_bias_ ? dnnl::memory::desc({1, cols}, dt::f32, tag::ab)
                                                 : dnnl::memory::desc();
    const dnnl::matmul prim = cached_primitive({rows, K, uint8_t(act), cols}, [&] {
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, w_md, bias_md, dst_md), make_attr(act), eng);
    });
    std::unordered_map<int, dnnl::memory> args;
    args.emplace(DNNL_ARG_SRC, dnnl::memory(src_md, eng, const_cast<float*>(src)));
    args.emplace(DNNL_ARG_WEIGHTS, dnnl::memory(w_md, eng, wf));
    if (has_bias_) args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_md, eng, const_cast<float*>(bias_ptr() + col0)));
    args.emplace(DNNL_ARG_DST, dnnl::memory(dst_md, eng, y + col0));
    prim.execute(stream, args);
    stream.wait();
  }
}

Tensor linear(const Tensor& x, const LinearWeight& w, Activation act) {
  PRISM_CHECK_MSG(w.defined(), "linear: weight not packed");
  PRISM_CHECK_MSG(x.dtype() == DType::f32, "linear: x must be f32");
  PRISM_CHECK_MSG(x.dim() >= 1 && x.size(-1) == w.in_features, "linear: x's last dim != in_features");
  const int64_t K = w.in_features;
  const int64_t rows = x.numel() / std::max<int64_t>(K, 1);

  Dims out_shape = x.shape();
  out_shape[out_shape.size() - 1] = w.out_features;
  Tensor y = Tensor::empty(out_shape, DType::f32);
  if (rows == 0) return y;

  // Flatten the leading dims to rows with one stride when the layout allows (a column
  // slice of a wider tensor stays a view); otherwise copy.
  Tensor src = x;
  int64_t ld = 0;  // 0: not fixed yet (every leading dim seen so far has size 1)
  int64_t expect = 0;
  bool uniform = x.stride(-1) == 1 || K == 1;
  for (int d = x.dim() - 2; d >= 0 && uniform; --d) {
    if (x.size(d) == 1) continue;
    if (ld == 0) {
      ld = x.stride(d);
      expect = ld * x.size(d);
      uniform = ld >= K;
    } else {
      uniform = x.stride(d) == expect;
      expect *= x.size(d);
    }
  }
  if (ld == 0) ld = K;
  if (!uniform) {
    src = x.contiguous();
    ld = K;
  }
  w.packed->run(src.data<float>(), rows, ld, act, y.data<float>());
  return y;
}

}  // namespace prism::ops
