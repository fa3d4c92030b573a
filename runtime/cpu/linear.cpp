// ops::linear on oneDNN matmul: weights packed once by pack_linear into the blocked layout
// oneDNN's brgemm kernels want, then one cached primitive per (rows, row stride, activation).
// bf16 at decode-sized M (rows <= cpu::kSmallMMaxRows) instead streams those same packed
// weights through our own kernel (linear_small_m.cpp): oneDNN is well below the memory
// bandwidth there.
// Must not: reorder weights per call, create a primitive per call, or malloc scratch per call
// in steady state (conversion buffers are thread-local and only grow).
//
// NOTE (weight layout): the layout is chosen by asking oneDNN for `format_tag::any` weights
// of a matmul at a representative M (kPackRows). Measured with oneDNN 2.6.3 on Zen 4
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
// (see int8_epilogue_rows). Tried and dropped: running quantise -> GEMM -> epilogue in row
// blocks of 256/512 so activations and outputs stay in L2, (a) with the three passes each
// parallel per block: 1.3-8x slower (one oneDNN fork-join per block), (b) each thread owning
// whole blocks with a sequential oneDNN inside the parallel region: no gain beyond noise
// (-10% to +10%), and it needs a user scratchpad per thread, since oneDNN 2.6's library
// scratchpad is shared between concurrent executions (without it the output was wrong).
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/arena.h"
#include "runtime/cpu/dnnl_context.h"
#include "runtime/cpu/linear_activation.h"
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

// ---- activation conversion kernels (rows of K floats, row stride ld) ----

// [M, K] f32 (row stride ld) -> [M, K] bf16 contiguous, round to nearest even.
void convert_rows_bf16(const float* x, int64_t ld, int64_t M, int64_t K, bf16* out) {
  parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1)), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* src = x + m * ld;
      bf16* dst = out + m * K;
      int64_t k = 0;
#if defined(__AVX512BF16__)
      for (; k + 16 <= K; k += 16) {
        __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + k));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), reinterpret_cast<__m256i&>(v));
      }
#endif
      for (; k < K; ++k) dst[k] = f32_to_bf16(src[k]);
    }
  });
}

// [M, K] f32 (row stride ld) -> [M, K] s8 contiguous and scales[M], symmetric per row:
// scale = max|x| / 127 (1 for an all-zero row), q = round_half_even(x / scale).
void quantize_rows_s8(const float* x, int64_t ld, int64_t M, int64_t K, int8_t* out, float* scales) {
  parallel_for(M, std::max<int64_t>(1, 8192 / std::max<int64_t>(K, 1)), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* src = x + m * ld;
      int8_t* dst = out + m * K;
      float amax = 0.0f;
      int64_t k = 0;
#if defined(__AVX512F__)
      __m512 vmax = _mm512_setzero_ps();
      for (; k + 16 <= K; k += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(src + k)));
      if (k < K) {
        const __mmask16 tail = __mmask16((1u << (K - k)) - 1);
        vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail, src + k)));
      }
      amax = _mm512_reduce_max_ps(vmax);
#else
      for (; k < K; ++k) amax = std::max(amax, std::fabs(src[k]));
#endif
      const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      scales[m] = scale;
      k = 0;
#if defined(__AVX512F__)
      // NOTE: cvtps_epi32 rounds half to even under the default MXCSR, like nearbyint; the
      // saturating narrow cannot saturate since |x * inv| <= 127 (up to rounding of inv).
      const __m512 vinv = _mm512_set1_ps(inv);
      for (; k + 16 <= K; k += 16) {
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(src + k), vinv));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k), _mm512_cvtsepi32_epi8(q));
      }
      if (k < K) {
        const __mmask16 tail = __mmask16((1u << (K - k)) - 1);
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail, src + k), vinv));
        _mm512_mask_cvtsepi32_storeu_epi8(dst + k, tail, q);
      }
#else
      for (; k < K; ++k) {
        const float q = std::nearbyint(src[k] * inv);
        dst[k] = int8_t(std::clamp(q, -127.0f, 127.0f));
      }
#endif
    }
  });
}


// ---- int8 epilogue: y = act(sx[m] * y + b[n]) ----
// The activations are linear_activation.h's (cpu::activate512 / cpu::activate).

using cpu::activate;
#if defined(__AVX512F__)
using cpu::activate512;
#endif

// One row block of the epilogue with the activation fixed at compile time.
// NOTE (speed): measured at M = 4096 on Zen 4 (same process, the old one-vector kernel vs
// four vectors per step, the outputs bit-identical, machine under load): the epilogue alone went from 3.7 to 1.2-1.4 ms at N = 768 (no
// activation) and from 22-32 to 14-16 ms at N = 3072 with GELU(erf), where it had cost about
// as much as the s8 GEMM itself. Two causes: each vector's activation is one ~35-op dependency
// chain, so 4 independent vectors per step let the out-of-order core overlap them; and the
// activation switch and the bias test are hoisted out of the loop (one instantiation each)
// instead of being re-decided per vector. End to end (linear_bench, old and new binaries
// back to back): 768->768 74% -> 82% of the 1024^3 peak, 768->3072 + GELU 48% -> 55%. The
// rest of the GELU gap is the epilogue's erf math over [4096, 3072] f32 (oneDNN's fused
// post-op in the bf16 path costs ~8%), which a per-thread row-blocked epilogue could hide.
template <Activation kAct, bool kBias>
void int8_epilogue_rows(float* y, int64_t m0, int64_t m1, int64_t N, const float* sx, const float* bias) {
  for (int64_t m = m0; m < m1; ++m) {
    float* row = y + m * N;
    int64_t n = 0;
#if defined(__AVX512F__)
    const __m512 s = _mm512_set1_ps(sx[m]);
    // v = y * s (+ b) for 16 lanes at n under mask.
    auto scaled = [&](int64_t at, __mmask16 mask) {
      const __m512 v = _mm512_maskz_loadu_ps(mask, row + at);
      return kBias ? _mm512_fmadd_ps(v, s, _mm512_maskz_loadu_ps(mask, bias + at)) : _mm512_mul_ps(v, s);
    };
    const __mmask16 all = 0xffff;
    for (; n + 64 <= N; n += 64) {
      const __m512 v0 = scaled(n, all), v1 = scaled(n + 16, all);
      const __m512 v2 = scaled(n + 32, all), v3 = scaled(n + 48, all);
      _mm512_storeu_ps(row + n, activate512(v0, kAct));
      _mm512_storeu_ps(row + n + 16, activate512(v1, kAct));
      _mm512_storeu_ps(row + n + 32, activate512(v2, kAct));
      _mm512_storeu_ps(row + n + 48, activate512(v3, kAct));
    }
    for (; n < N; n += 16) {
      const __mmask16 mask = N - n >= 16 ? all : __mmask16((1u << (N - n)) - 1);
      _mm512_mask_storeu_ps(row + n, mask, activate512(scaled(n, mask), kAct));
    }
#endif
    for (; n < N; ++n) row[n] = activate(row[n] * sx[m] + (kBias ? bias[n] : 0.0f), kAct);
  }
}

template <Activation kAct>
void int8_epilogue_act(float* y, int64_t M, int64_t N, const float* sx, const float* bias) {
  parallel_for(M, std::max<int64_t>(1, 4096 / std::max<int64_t>(N, 1)), [&](int64_t m0, int64_t m1) {
    if (bias)
      int8_epilogue_rows<kAct, true>(y, m0, m1, N, sx, bias);
    else
      int8_epilogue_rows<kAct, false>(y, m0, m1, N, sx, bias);
  });
}

// y: [M, N] f32 in place; sx: [M]; bias: [N] or null.
void int8_epilogue(float* y, int64_t M, int64_t N, const float* sx, const float* bias, Activation act) {
  switch (act) {
    case Activation::none: return int8_epilogue_act<Activation::none>(y, M, N, sx, bias);
    case Activation::relu: return int8_epilogue_act<Activation::relu>(y, M, N, sx, bias);
    case Activation::gelu_erf: return int8_epilogue_act<Activation::gelu_erf>(y, M, N, sx, bias);
    case Activation::gelu_tanh: return int8_epilogue_act<Activation::gelu_tanh>(y, M, N, sx, bias);
    case Activation::silu: return int8_epilogue_act<Activation::silu>(y, M, N, sx, bias);
    case Activation::quick_gelu: return int8_epilogue_act<Activation::quick_gelu>(y, M, N, sx, bias);
  }
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

// ---- PackedLinear ----

PackedLinear::PackedLinear(Precision precision, int64_t in_features, int64_t out_features)
    : precision_(precision), in_(in_features), out_(out_features) {}

dt PackedLinear::src_dt() const {
  switch (precision_) {
    case Precision::f32: return dt::f32;
    case Precision::bf16: return dt::bf16;
    case Precision::int8: return dt::s8;
  }
  return dt::undef;
}

dt PackedLinear::weight_dt() const {
  switch (precision_) {
    case Precision::f32: return dt::f32;
    case Precision::bf16: return dt::bf16;
    case Precision::int8: return dt::s8;
  }
  return dt::undef;
}

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
  if (precision_ == Precision::int8) act = Activation::none;  // applied in the epilogue
  const auto key = std::make_tuple(rows, ld, uint8_t(act));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  if (cache_.size() >= kMaxCachedPrimitives) cache_.clear();
  // Built under the lock: creation is once per shape, and holding the lock keeps two
  // threads from building the same primitive. Returned by value (a refcounted handle), so
  // a later clear() never frees a primitive that another thread executes.
  return cache_.emplace(key, dnnl::matmul(make_pd(rows, ld, act, weights_md_))).first->second;
}

Result<std::shared_ptr<PackedLinear>> PackedLinear::create(const Tensor& weight, const Tensor& bias,
                                                           Precision precision) {
  const int64_t N = weight.size(0), K = weight.size(1);
  auto packed = std::shared_ptr<PackedLinear>(new PackedLinear(precision, K, N));
  PackedLinear& p = *packed;
  p.has_bias_ = bias.defined();

  // The layout brgemm wants for these K, N and dtypes (see the NOTE at the top).
  const dnnl::memory::desc any_w({K, N}, p.weight_dt(), tag::any);
  dnnl::matmul::primitive_desc pd;
  {
    dnnl::memory::desc src({kPackRows, K}, p.src_dt(), tag::ab);
    dnnl::memory::desc dst({kPackRows, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (precision == Precision::int8) {
      p.weight_scales_.assign(size_t(N), 1.0f);
      attr = p.make_attr(Activation::none);
    }
    dnnl_primitive_desc_t c_pd = nullptr;
    dnnl::matmul::desc d(src, any_w, dst);
    // The C API, so a failure is a status rather than an exception escaping Prism code.
    if (dnnl_primitive_desc_create(&c_pd, &d.data, attr.get(), cpu::dnnl_engine().get(), nullptr) !=
        dnnl_success)
      return internal_error("oneDNN has no matmul for linear " + std::to_string(K) + "->" +
                            std::to_string(N) + " in " + std::string(precision_name(precision)));
    pd = dnnl::matmul::primitive_desc(c_pd);
  }
  p.weights_md_ = pd.weights_desc();

  // Source weights as oneDNN's [K, N] view of the row-major [N, K] tensor.
  Tensor w_src;
  if (precision == Precision::int8) {
    // sw[n] = max|w[n, :]| / 127; q = round_half_even(w / sw).
    Tensor w32 = weight.to(DType::f32).contiguous();
    w_src = Tensor::empty({N, K}, DType::i8);
    const float* w = w32.data<float>();
    int8_t* q = w_src.data<int8_t>();
    for (int64_t n = 0; n < N; ++n) {
      float amax = 0.0f;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
      const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
      p.weight_scales_[size_t(n)] = scale;
      for (int64_t k = 0; k < K; ++k)
        q[n * K + k] = int8_t(std::clamp(std::nearbyint(w[n * K + k] / scale), -127.0f, 127.0f));
    }
  } else {
    w_src = weight.to(precision == Precision::f32 ? DType::f32 : DType::bf16).contiguous();
  }
  dnnl::memory::desc plain_w({K, N}, p.weight_dt(), dnnl::memory::dims{1, K});
  dnnl::memory plain(plain_w, cpu::dnnl_engine(), w_src.raw_data());
  p.weights_ = dnnl::memory(p.weights_md_, cpu::dnnl_engine());
  dnnl::reorder(plain, p.weights_).execute(cpu::dnnl_stream(), plain, p.weights_);
  cpu::dnnl_stream().wait();

  if (p.has_bias_) {
    p.bias_ = bias.contiguous().to(DType::f32).clone();
  }
  if (precision == Precision::bf16)
    p.small_m_ = cpu::bf16_panel_weights(p.weights_md_, p.weights_.get_data_handle(), K, N);
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
  if (small_m_ && rows <= cpu::kSmallMMaxRows) return run_small_m(x, rows, ld, act, y);
  run_onednn(x, rows, ld, act, y);
}

void PackedLinear::run_small_m(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const {
  PRISM_CHECK_MSG(small_m_.has_value(), "linear: no small-M path for these weights");
  cpu::small_m_linear_bf16(x, rows, ld, *small_m_, has_bias_ ? bias_.data<float>() : nullptr, act, y);
}

void PackedLinear::run_onednn(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const {
  dnnl::engine& eng = cpu::dnnl_engine();
  dnnl::stream& stream = cpu::dnnl_stream();

  const void* src = x;
  int64_t src_ld = ld;
  const float* row_scales = nullptr;
  std::unordered_map<int, dnnl::memory> args;
  if (precision_ == Precision::f32 && ld != in_) {
    // brgemm (oneDNN 2.6) rejects a strided source and the fallback is the reference
    // kernel, so gather the rows: O(M K) against the GEMM's O(M K N).
    float* xc = static_cast<float*>(src_scratch().get(size_t(rows * in_) * sizeof(float)));
    parallel_for(rows, std::max<int64_t>(1, 16384 / in_), [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) std::memcpy(xc + m * in_, x + m * ld, size_t(in_) * sizeof(float));
    });
    src = xc;
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
  if (row_scales)
    int8_epilogue(y, rows, out_, row_scales, has_bias_ ? bias_.data<float>() : nullptr, act);
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
