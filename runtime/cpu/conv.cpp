// conv1d and conv2d through oneDNN's convolution_forward, f32, on PyTorch's own layouts
// (NCL / NCHW activations, OIL / OIHW weights, reshaped to GOIL / GOIHW for groups), and
// conv2d on weights packed once at load (pack_conv2d: PackedConv below, its own NOTE).
// Primitives are cached by shape and parameters; the lock covers only the lookup.
// NOTE: the plain primitive runs on the plain layouts, with no reorder of activations or
// weights. The alternative, oneDNN's blocked layouts, needs the weights reordered on every
// call (caching them by data pointer is unsafe: a freed and reused buffer would hit a stale
// entry) plus reorders of src and dst. bench/ops_bench measures both side by side: on one
// thread, plain beats blocked-with-reorders on Whisper's conv1 (80 -> 384) and the ViT
// 16x16 patch embedding (~0.75-0.8x the time) but is ~1.7x slower on Whisper's conv2
// (384 -> 384, stride 2). pack_conv2d removes the per-call weight reorder for models that
// hold their weights (the VAE decoder); conv1d and callers without a packed weight keep the
// plain path.
// NOTE (packed figures): bench/conv_bench, the FLUX VAE decoder's conv shapes at a 256 x 256
// image, one core of the development machine (amx tier) timed by its CPU clock, against
// oneDNN's GEMM peak in the same run (packed linear 2048^3: f32 183, bf16 755 GFLOP/s):
//   build/bench/conv_bench --image 256 --threads 1
//   shape (count per decode)          plain f32      packed f32          packed bf16
//   512->512 3x3 @32^2 (x10)          164 GF/s 90%   189 GF/s 1.15x      1298 GF/s 7.9x
//   512->512 3x3 @64^2 (x7)           164          198       1.20x      1218      7.4x
//   512->512 3x3 @128^2               160          179       1.12x       832      5.2x
//   512->256 3x3 @128^2               158          169       1.07x       768      4.9x
//   256->256 3x3 @128^2 (x5)          158          167       1.06x       580      3.7x
//   256->256 3x3 @256^2               146          163       1.12x       501      3.4x
//   256->128 3x3 @256^2               118          153       1.29x       425      3.6x
//   128->128 3x3 @256^2 (x5)          128          137       1.07x       330      2.6x
//   1x1 512->256 / 256->128           167 / 90     = plain (NCHW kept, f32 at either precision)
//   16->512 conv_in / 128->3 conv_out 164 / 10     0.88x / 1.28x       2.3x / 4.5x
// At a 512 x 512 image (--image 512; peaks f32 170, bf16 735) the same pattern: packed f32
// 1.05-1.30x, bf16 2.4-7.3x on the 3x3 convolutions, the full-resolution ones lowest (their
// NCHW <-> blocked reorders are memory-bound passes over the largest activations).
// So in f32 the plain primitive is already at 80-90% of the GEMM peak on the VAE's 3x3
// stride-1 convolutions and packing gains 1.06-1.29x (the ~1.7x of the NOTE above is
// Whisper's stride-2 conv); the large win is bf16 on AMX (2.6-7.9x, the AMX tiles), which
// needs the packed weights. The blocked path costs one activation-sized buffer more at the
// peak (source copy, then destination copy; vae_decode_bench's "decode added" 696 -> 898 MiB
// at 512 x 512).
// Scratchpad is user-managed (drawn from the arena per call) so one primitive can run from
// several threads at once.
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <string>
#include <vector>

#include "runtime/cpu/dnnl_context.h"
#include "runtime/isa.h"
#include "runtime/ops.h"

namespace prism::ops {
namespace {

using dnnl::memory;

// One convolution: spatial dims are [L] or [H, W].
struct ConvShape {
  int64_t n, c_in, c_out, groups;
  std::vector<int64_t> in, kernel, out, stride, padding, dilation;  // per spatial dim
  bool has_bias;

  std::vector<int64_t> key() const {
    std::vector<int64_t> k = {n, c_in, c_out, groups, has_bias, int64_t(in.size())};
    for (const auto* v : {&in, &kernel, &stride, &padding, &dilation}) k.insert(k.end(), v->begin(), v->end());
    return k;
  }
};

struct ConvPrimitive {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  size_t scratchpad_bytes = 0;
};

memory::dims dims_of(std::initializer_list<int64_t> head, const std::vector<int64_t>& tail) {
  memory::dims d(head);
  d.insert(d.end(), tail.begin(), tail.end());
  return d;
}

std::shared_ptr<const ConvPrimitive> create(const ConvShape& s) {
  using tag = memory::format_tag;
  const bool is_1d = s.in.size() == 1;
  const memory::desc src({dims_of({s.n, s.c_in}, s.in)}, memory::data_type::f32, is_1d ? tag::ncw : tag::nchw);
  const memory::desc dst({dims_of({s.n, s.c_out}, s.out)}, memory::data_type::f32, is_1d ? tag::ncw : tag::nchw);
  const memory::desc wei =
      s.groups == 1
          ? memory::desc(dims_of({s.c_out, s.c_in}, s.kernel), memory::data_type::f32, is_1d ? tag::oiw : tag::oihw)
          : memory::desc(dims_of({s.groups, s.c_out / s.groups, s.c_in / s.groups}, s.kernel),
                         memory::data_type::f32, is_1d ? tag::goiw : tag::goihw);
  const memory::desc bias = s.has_bias ? memory::desc({s.c_out}, memory::data_type::f32, tag::x) : memory::desc();
  memory::dims dilation;  // oneDNN counts the gaps: PyTorch's dilation - 1
  for (int64_t d : s.dilation) dilation.push_back(d - 1);
  const memory::dims padding(s.padding.begin(), s.padding.end());
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto p = std::make_shared<ConvPrimitive>();
  try {
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, wei, bias, dst,
        memory::dims(s.stride.begin(), s.stride.end()), dilation, padding, padding);
    p->pd = dnnl::convolution_forward::primitive_desc(desc, attr, cpu::dnnl_engine());
    p->prim = dnnl::convolution_forward(p->pd);
    p->scratchpad_bytes = p->pd.scratchpad_desc().get_size();
  } catch (const dnnl::error&) {
    PRISM_CHECK_MSG(false, "conv: oneDNN could not create the convolution primitive");
  }
  return p;
}

std::shared_ptr<const ConvPrimitive> lookup(const ConvShape& s) {
  static std::mutex mu;
  static std::map<std::vector<int64_t>, std::shared_ptr<const ConvPrimitive>> cache;
  const std::vector<int64_t> key = s.key();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  // Created outside the lock (it takes milliseconds); a racing thread's copy is dropped.
  std::shared_ptr<const ConvPrimitive> p = create(s);
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, std::move(p)).first->second;
}

Tensor run_conv(const Tensor& x, const Tensor& weight, const Tensor& bias, ConvShape s) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32 && weight.dtype() == DType::f32, "conv: f32 only");
  const int nd = int(s.stride.size());
  PRISM_CHECK_MSG(x.dim() == nd + 2 && weight.dim() == nd + 2, "conv: x and weight rank");
  PRISM_CHECK_MSG(s.groups >= 1 && x.size(1) % s.groups == 0 && weight.size(0) % s.groups == 0,
                  "conv: channels must divide by groups");
  PRISM_CHECK_MSG(weight.size(1) * s.groups == x.size(1), "conv: weight's C_in / groups mismatch");
  s.n = x.size(0);
  s.c_in = x.size(1);
  s.c_out = weight.size(0);
  s.has_bias = bias.defined();
  if (s.has_bias)
    PRISM_CHECK_MSG(bias.dtype() == DType::f32 && bias.dim() == 1 && bias.size(0) == s.c_out,
                    "conv: bias must be [C_out] f32");
  for (int i = 0; i < nd; ++i) {
    PRISM_CHECK_MSG(s.stride[i] >= 1 && s.dilation[i] >= 1 && s.padding[i] >= 0, "conv: bad params");
    s.in.push_back(x.size(2 + i));
    s.kernel.push_back(weight.size(2 + i));
    const int64_t span = s.dilation[i] * (s.kernel[i] - 1) + 1;
    const int64_t out = (s.in[i] + 2 * s.padding[i] - span) / s.stride[i] + 1;
    PRISM_CHECK_MSG(s.in[i] + 2 * s.padding[i] >= span && out >= 1, "conv: kernel larger than input");
    s.out.push_back(out);
  }
  const Tensor xc = x.contiguous(), wc = weight.contiguous();
  const Tensor bc = s.has_bias ? bias.contiguous() : Tensor();
  Dims out_shape{s.n, s.c_out};
  for (int64_t o : s.out) out_shape.push_back(o);
  Tensor out = Tensor::empty(out_shape, DType::f32);
  if (out.numel() == 0) return out;

  const std::shared_ptr<const ConvPrimitive> p = lookup(s);
  const Tensor scratch = p->scratchpad_bytes ? Tensor::empty({int64_t(p->scratchpad_bytes)}, DType::u8) : Tensor();
  const dnnl::engine& eng = cpu::dnnl_engine();
  const dnnl::convolution_forward::primitive_desc& pd = p->pd;
  try {
    // Memory objects only wrap our buffers: the primitive's descs are the plain layouts.
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(pd.src_desc(), eng, xc.raw_data())},
        {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), eng, wc.raw_data())},
        {DNNL_ARG_DST, memory(pd.dst_desc(), eng, out.raw_data())},
    };
    if (s.has_bias) args.emplace(DNNL_ARG_BIAS, memory(pd.bias_desc(), eng, bc.raw_data()));
    if (p->scratchpad_bytes) args.emplace(DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), eng, scratch.raw_data()));
    dnnl::stream& stream = cpu::dnnl_stream();
    p->prim.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error&) {
    PRISM_CHECK_MSG(false, "conv: oneDNN failed to run the convolution");
  }
  return out;
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv1dParams& p) {
  ConvShape s{};
  s.groups = p.groups;
  s.stride = {p.stride};
  s.padding = {p.padding};
  s.dilation = {p.dilation};
  return run_conv(x, weight, bias, std::move(s));  // [N, C_out, L_out] f32
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  ConvShape s{};
  s.groups = p.groups;
  s.stride = {p.stride_h, p.stride_w};
  s.padding = {p.padding_h, p.padding_w};
  s.dilation = {p.dilation_h, p.dilation_w};
  return run_conv(x, weight, bias, std::move(s));  // [N, C_out, H_out, W_out] f32
}

// ---- packed 2-D convolution -------------------------------------------------------------

namespace {

using tag = memory::format_tag;
using dt = memory::data_type;

// Primitive creation through the C API, so "no implementation" is a null result rather than
// an exception escaping Prism code.
std::optional<dnnl::convolution_forward::primitive_desc> try_conv_pd(const memory::desc& src, const memory::desc& wei,
                                                                     const memory::desc& bias, const memory::desc& dst,
                                                                     const Conv2dParams& p) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                          src, wei, bias, dst, {p.stride_h, p.stride_w},
                                          {p.dilation_h - 1, p.dilation_w - 1}, {p.padding_h, p.padding_w},
                                          {p.padding_h, p.padding_w});
  dnnl_primitive_desc_t c_pd = nullptr;
  if (dnnl_primitive_desc_create(&c_pd, &d.data, attr.get(), cpu::dnnl_engine().get(), nullptr) != dnnl_success)
    return std::nullopt;
  return dnnl::convolution_forward::primitive_desc(c_pd);
}

std::optional<dnnl::reorder> try_reorder(const memory::desc& from, const memory::desc& to) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl_primitive_desc_t c_pd = nullptr;
  const dnnl::engine& eng = cpu::dnnl_engine();
  if (dnnl_reorder_primitive_desc_create(&c_pd, &from.data, eng.get(), &to.data, eng.get(), attr.get()) !=
      dnnl_success)
    return std::nullopt;
  return dnnl::reorder(dnnl::reorder::primitive_desc(c_pd));
}

size_t scratchpad_bytes(const dnnl::primitive& prim) {
  if (!prim) return 0;
  // get_primitive_desc() returns the primitive's own descriptor (not a copy); the wrapper
  // made here must not free it, hence the weak handle.
  dnnl::primitive_desc_base pd(const_cast<dnnl_primitive_desc_t>(prim.get_primitive_desc()), true);
  return pd.scratchpad_desc().get_size();
}

// The spatial size oneDNN is asked about at pack time, to pick the weights' layout before any
// input is seen: large enough that no implementation for small images is preferred.
constexpr int64_t kPackSpatial = 64;

bool native_bf16() { return active_isa() >= Isa::avx512_bf16; }

}  // namespace

// NOTE (packed conv): the weights are reordered once, at pack time, into the layout oneDNN
// picks (format_tag::any) for a representative input (N = 1, 64 x 64). Each input shape
// (N, H, W) then gets its own primitive, also with layouts of oneDNN's choosing, cached here.
// Should a shape's primitive want another weights layout, the packed weights are reordered
// into it once and kept beside the first copy (owned here, so no stale-pointer hazard); at
// the FLUX VAE's shapes (a debug count, 256 x 256 image) every f32 primitive takes the packed
// layout; in bf16 (AMX) the 3x3 convolutions at 256 x 256 positions take another one, so those
// seven (256 and 128 channels, ~1 MiB each) hold a second copy (~8 MiB in all).
// (ConvWeight::packed_bytes counts the first copy only.) On the amx tier
// tests/runtime/conv_packed_test's OneWeightManyShapes runs through such re-layouts.
// Activations arrive and leave as plain NCHW f32: the source is reordered into the
// primitive's layout (and to bf16) in a per-call buffer, and the destination back. Except for
// 1x1 stride-1 convolutions (the VAE's shortcuts): a GEMM straight on NCHW, whose few FLOPs
// per activation byte do not pay for two reorders (bench/conv_bench, one core: blocked f32
// 0.40-0.69x the plain primitive, bf16 0.76-1.92x), so they keep NCHW f32 and compute in f32
// at either precision.
class PackedConv {
 public:
  static Result<std::shared_ptr<PackedConv>> create(const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                                                    Precision precision);
  // x: [N, C_in, H, W] f32 contiguous. Returns [N, C_out, H_out, W_out] f32 contiguous.
  Tensor run(const Tensor& x) const;
  bool bf16() const { return bf16_; }
  std::string impl() const { return impl_; }
  int64_t bytes() const {
    return int64_t(weights_.front().get_desc().get_size()) + (bias_.defined() ? int64_t(bias_.nbytes()) : 0);
  }

 private:
  struct Plan {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    size_t scratch_bytes = 0;
    void* weights = nullptr;  // owned by PackedConv::weights_
    dnnl::reorder to_src, from_dst;  // empty when the primitive takes the plain layout
    size_t reorder_scratch_bytes = 0;
  };
  memory::desc activation_md(int64_t n, int64_t c, int64_t h, int64_t w, dt type, tag t) const {
    return memory::desc({n, c, h, w}, type, t);
  }
  memory::desc weights_md(tag t, dt type) const;
  std::optional<dnnl::convolution_forward::primitive_desc> make_pd(int64_t n, int64_t h, int64_t w) const;
  std::shared_ptr<const Plan> plan(int64_t n, int64_t h, int64_t w) const;
  void* weights_in(const memory::desc& md) const;  // caller holds mu_

  int64_t c_in_ = 0, c_out_ = 0, kh_ = 0, kw_ = 0;
  Conv2dParams p_;
  bool bf16_ = false;
  bool plain_activations_ = false;  // 1x1 stride 1: NCHW in and out, no reorders (NOTE)
  std::string impl_;  // oneDNN's implementation at the pack-time shape
  Tensor bias_;       // [C_out] f32, or undefined
  mutable std::mutex mu_;
  mutable std::vector<dnnl::memory> weights_;  // packed copies, one per layout; [0] from pack time
  mutable std::map<std::array<int64_t, 3>, std::shared_ptr<const Plan>> plans_;  // by (N, H, W)
};

memory::desc PackedConv::weights_md(tag t, dt type) const {
  if (p_.groups == 1) return memory::desc({c_out_, c_in_, kh_, kw_}, type, t == tag::any ? tag::any : tag::oihw);
  return memory::desc({p_.groups, c_out_ / p_.groups, c_in_ / p_.groups, kh_, kw_}, type,
                      t == tag::any ? tag::any : tag::goihw);
}

std::optional<dnnl::convolution_forward::primitive_desc> PackedConv::make_pd(int64_t n, int64_t h, int64_t w) const {
  const int64_t ho = (h + 2 * p_.padding_h - (p_.dilation_h * (kh_ - 1) + 1)) / p_.stride_h + 1;
  const int64_t wo = (w + 2 * p_.padding_w - (p_.dilation_w * (kw_ - 1) + 1)) / p_.stride_w + 1;
  const dt in = bf16_ ? dt::bf16 : dt::f32;
  const memory::desc bias = bias_.defined() ? memory::desc({c_out_}, dt::f32, tag::x) : memory::desc();
  const tag act = plain_activations_ ? tag::nchw : tag::any;
  return try_conv_pd(activation_md(n, c_in_, h, w, in, act), weights_md(tag::any, in), bias,
                     activation_md(n, c_out_, ho, wo, dt::f32, act), p_);
}

Result<std::shared_ptr<PackedConv>> PackedConv::create(const Tensor& weight, const Tensor& bias,
                                                       const Conv2dParams& p, Precision precision) {
  auto packed = std::shared_ptr<PackedConv>(new PackedConv());
  PackedConv& c = *packed;
  c.c_out_ = weight.size(0);
  c.c_in_ = weight.size(1) * p.groups;
  c.kh_ = weight.size(2);
  c.kw_ = weight.size(3);
  c.p_ = p;
  c.plain_activations_ = c.kh_ == 1 && c.kw_ == 1 && p.stride_h == 1 && p.stride_w == 1 && p.padding_h == 0 &&
                         p.padding_w == 0;
  c.bf16_ = precision == Precision::bf16 && native_bf16() && !c.plain_activations_;
  if (bias.defined()) c.bias_ = bias.contiguous().to(DType::f32).clone();
  // The representative input: kPackSpatial, or the smallest the kernel admits.
  const int64_t h = std::max(kPackSpatial, p.dilation_h * (c.kh_ - 1) + 1);
  const int64_t w = std::max(kPackSpatial, p.dilation_w * (c.kw_ - 1) + 1);
  std::optional<dnnl::convolution_forward::primitive_desc> pd = c.make_pd(1, h, w);
  if (!pd && c.bf16_) {  // no bf16 convolution for this shape on the tier: compute in f32
    c.bf16_ = false;
    pd = c.make_pd(1, h, w);
  }
  if (!pd)
    return internal_error("oneDNN has no convolution for weight " + weight.shape().to_string() + " on the " +
                          std::string(isa_name(active_isa())) + " tier");
  c.impl_ = pd->impl_info_str();
  const Tensor w_src = weight.to(DType::f32).contiguous();  // [C_out, C_in / groups, KH, KW]
  const dnnl::engine& eng = cpu::dnnl_engine();
  const memory plain(c.weights_md(tag::oihw, dt::f32), eng, w_src.raw_data());
  memory dst(pd->weights_desc(), eng);
  std::optional<dnnl::reorder> r = try_reorder(plain.get_desc(), dst.get_desc());
  if (!r) return internal_error("oneDNN cannot reorder conv weights into " + c.impl_ + "'s layout");
  const size_t scratch = scratchpad_bytes(*r);
  const Tensor s = scratch ? Tensor::empty({int64_t(scratch)}, DType::u8) : Tensor();
  std::unordered_map<int, memory> args = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, dst}};
  if (scratch) args.emplace(DNNL_ARG_SCRATCHPAD, memory({{int64_t(scratch)}, dt::u8, tag::x}, eng, s.raw_data()));
  r->execute(cpu::dnnl_stream(), args);
  cpu::dnnl_stream().wait();
  c.weights_.push_back(std::move(dst));
  return packed;
}

void* PackedConv::weights_in(const memory::desc& md) const {
  for (const memory& m : weights_)
    if (m.get_desc() == md) return m.get_data_handle();
  const dnnl::engine& eng = cpu::dnnl_engine();
  memory dst(md, eng);
  std::optional<dnnl::reorder> r = try_reorder(weights_.front().get_desc(), md);
  PRISM_CHECK_MSG(r.has_value(), "conv: oneDNN cannot reorder the packed weights into a shape's layout");
  const size_t scratch = scratchpad_bytes(*r);
  const Tensor s = scratch ? Tensor::empty({int64_t(scratch)}, DType::u8) : Tensor();
  std::unordered_map<int, memory> args = {{DNNL_ARG_FROM, weights_.front()}, {DNNL_ARG_TO, dst}};
  if (scratch) args.emplace(DNNL_ARG_SCRATCHPAD, memory({{int64_t(scratch)}, dt::u8, tag::x}, eng, s.raw_data()));
  r->execute(cpu::dnnl_stream(), args);
  cpu::dnnl_stream().wait();
  weights_.push_back(std::move(dst));
  return weights_.back().get_data_handle();
}

std::shared_ptr<const PackedConv::Plan> PackedConv::plan(int64_t n, int64_t h, int64_t w) const {
  const std::array<int64_t, 3> key = {n, h, w};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  }
  // Created outside the lock (milliseconds); a racing thread's copy is dropped.
  auto plan = std::make_shared<Plan>();
  std::optional<dnnl::convolution_forward::primitive_desc> pd = make_pd(n, h, w);
  PRISM_CHECK_MSG(pd.has_value(), "conv: oneDNN could not create the packed convolution primitive");
  plan->pd = *pd;
  plan->prim = dnnl::convolution_forward(plan->pd);
  plan->scratch_bytes = plan->pd.scratchpad_desc().get_size();
  const memory::dims src_dims = plan->pd.src_desc().dims(), dst_dims = plan->pd.dst_desc().dims();
  const memory::desc plain_src(src_dims, dt::f32, tag::nchw), plain_dst(dst_dims, dt::f32, tag::nchw);
  if (plan->pd.src_desc() != plain_src) {
    std::optional<dnnl::reorder> r = try_reorder(plain_src, plan->pd.src_desc());
    PRISM_CHECK_MSG(r.has_value(), "conv: oneDNN cannot reorder the source");
    plan->to_src = *r;
  }
  if (plan->pd.dst_desc() != plain_dst) {
    std::optional<dnnl::reorder> r = try_reorder(plan->pd.dst_desc(), plain_dst);
    PRISM_CHECK_MSG(r.has_value(), "conv: oneDNN cannot reorder the destination");
    plan->from_dst = *r;
  }
  plan->reorder_scratch_bytes = std::max(scratchpad_bytes(plan->to_src), scratchpad_bytes(plan->from_dst));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  plan->weights = weights_in(plan->pd.weights_desc());
  return plans_.emplace(key, std::move(plan)).first->second;
}

Tensor PackedConv::run(const Tensor& x) const {
  const std::shared_ptr<const Plan> p = plan(x.size(0), x.size(2), x.size(3));
  const dnnl::convolution_forward::primitive_desc& pd = p->pd;
  const dnnl::engine& eng = cpu::dnnl_engine();
  dnnl::stream& stream = cpu::dnnl_stream();
  // Per-call buffers (the current arena, if any): the source in the primitive's layout, its
  // destination, and the scratchpads.
  auto buffer = [](size_t bytes) { return bytes ? Tensor::empty({int64_t(bytes)}, DType::u8) : Tensor(); };
  Tensor src_buf = p->to_src ? buffer(pd.src_desc().get_size()) : Tensor();
  const Tensor dst_buf = p->from_dst ? buffer(pd.dst_desc().get_size()) : Tensor();
  const Tensor scratch = buffer(std::max(p->scratch_bytes, p->reorder_scratch_bytes));
  const memory::dims out_dims = pd.dst_desc().dims();
  // With a blocked destination the output is allocated only after the source copy is freed.
  Tensor out = p->from_dst ? Tensor() : Tensor::empty(Dims(std::span<const int64_t>(out_dims)), DType::f32);
  const memory plain_src(memory::desc(pd.src_desc().dims(), dt::f32, tag::nchw), eng, x.raw_data());
  const memory src = p->to_src ? memory(pd.src_desc(), eng, src_buf.raw_data()) : plain_src;
  const memory dst = p->from_dst ? memory(pd.dst_desc(), eng, dst_buf.raw_data())
                                 : memory(memory::desc(out_dims, dt::f32, tag::nchw), eng, out.raw_data());
  std::optional<memory> scratch_mem;
  if (scratch.defined()) scratch_mem = memory({{scratch.numel()}, dt::u8, tag::x}, eng, scratch.raw_data());
  try {
    auto with_scratch = [&](std::unordered_map<int, memory> args) {
      if (scratch_mem) args.emplace(DNNL_ARG_SCRATCHPAD, *scratch_mem);
      return args;
    };
    if (p->to_src) p->to_src.execute(stream, with_scratch({{DNNL_ARG_FROM, plain_src}, {DNNL_ARG_TO, src}}));
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src},
                                            {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), eng, p->weights)},
                                            {DNNL_ARG_DST, dst}};
    if (bias_.defined()) args.emplace(DNNL_ARG_BIAS, memory(pd.bias_desc(), eng, bias_.raw_data()));
    p->prim.execute(stream, with_scratch(std::move(args)));
    // The source copy is dead once the convolution has run: freed before the destination's
    // reorder, so at most one extra activation buffer is live with the input and output.
    stream.wait();
    src_buf = Tensor();
    if (p->from_dst) {
      out = Tensor::empty(Dims(std::span<const int64_t>(out_dims)), DType::f32);
      const memory plain_dst(memory::desc(out_dims, dt::f32, tag::nchw), eng, out.raw_data());
      p->from_dst.execute(stream, with_scratch({{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, plain_dst}}));
      stream.wait();
    }
  } catch (const dnnl::error&) {
    PRISM_CHECK_MSG(false, "conv: oneDNN failed to run the packed convolution");
  }
  return out;  // [N, C_out, H_out, W_out] f32
}

Result<ConvWeight> pack_conv2d(const Tensor& weight, const Tensor& bias, const Conv2dParams& params,
                               Precision precision) {
  if (!weight.defined()) return invalid_argument("pack_conv2d: weight is undefined");
  if (weight.device() != Device::cpu) return invalid_argument("pack_conv2d: weight is not on the cpu");
  if (weight.dim() != 4)
    return invalid_argument("pack_conv2d: weight must be [C_out, C_in / groups, KH, KW], got " +
                            weight.shape().to_string());
  const DType wd = weight.dtype();
  if (wd != DType::f32 && wd != DType::bf16 && wd != DType::f16)
    return invalid_argument("pack_conv2d: weight dtype " + std::string(dtype_name(wd)) + " (expected f32, bf16 or f16)");
  if (precision == Precision::int8) return invalid_argument("pack_conv2d: int8 is not supported (f32 or bf16)");
  const Conv2dParams& p = params;
  if (p.groups < 1 || p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 || p.padding_h < 0 ||
      p.padding_w < 0)
    return invalid_argument("pack_conv2d: bad stride, dilation, padding or groups");
  for (int64_t d = 0; d < 4; ++d)
    if (weight.size(d) <= 0) return invalid_argument("pack_conv2d: empty weight " + weight.shape().to_string());
  if (weight.size(0) % p.groups != 0) return invalid_argument("pack_conv2d: C_out does not divide by groups");
  if (bias.defined()) {
    if (bias.dim() != 1 || bias.size(0) != weight.size(0))
      return invalid_argument("pack_conv2d: bias must be [" + std::to_string(weight.size(0)) + "], got " +
                              bias.shape().to_string());
    const DType bd = bias.dtype();
    if (bd != DType::f32 && bd != DType::bf16 && bd != DType::f16)
      return invalid_argument("pack_conv2d: bias dtype " + std::string(dtype_name(bd)));
  }
  ConvWeight w;
  PRISM_ASSIGN_OR_RETURN(w.packed, PackedConv::create(weight, bias, params, precision));
  w.out_channels = weight.size(0);
  w.in_channels = weight.size(1) * p.groups;
  w.kernel_h = weight.size(2);
  w.kernel_w = weight.size(3);
  w.params = params;
  w.precision = precision;
  w.has_bias = bias.defined();
  w.packed_bytes = w.packed->bytes();
  return w;
}

Tensor conv2d(const Tensor& x, const ConvWeight& w) {
  PRISM_CHECK_MSG(w.defined(), "conv2d: weight not packed");
  PRISM_CHECK_MSG(x.dtype() == DType::f32 && x.dim() == 4, "conv2d: x must be [N, C_in, H, W] f32");
  PRISM_CHECK_MSG(x.size(1) == w.in_channels, "conv2d: x's channels differ from the packed weight's C_in");
  const Conv2dParams& p = w.params;
  const int64_t ho = (x.size(2) + 2 * p.padding_h - (p.dilation_h * (w.kernel_h - 1) + 1)) / p.stride_h + 1;
  const int64_t wo = (x.size(3) + 2 * p.padding_w - (p.dilation_w * (w.kernel_w - 1) + 1)) / p.stride_w + 1;
  PRISM_CHECK_MSG(x.size(2) + 2 * p.padding_h >= p.dilation_h * (w.kernel_h - 1) + 1 &&
                      x.size(3) + 2 * p.padding_w >= p.dilation_w * (w.kernel_w - 1) + 1,
                  "conv2d: kernel larger than input");
  if (x.size(0) == 0 || ho <= 0 || wo <= 0) return Tensor::empty({x.size(0), w.out_channels, ho, wo}, DType::f32);
  return w.packed->run(x.contiguous());  // [N, C_out, H_out, W_out]
}

std::string conv2d_path(Precision p) {
  const std::string tier(isa_name(active_isa()));
  if (p == Precision::int8) return tier + ": no int8 convolution";
  // A 3x3 256 -> 256 convolution, the VAE decoder's commonest, asks oneDNN for its choice.
  Result<ConvWeight> w = pack_conv2d(Tensor::zeros({256, 256, 3, 3}, DType::f32), Tensor(),
                                     {.padding_h = 1, .padding_w = 1}, p);
  if (!w) return tier + ": " + w.status().message();
  const std::string impl = "oneDNN " + std::string(w->packed->bf16() ? "bf16" : "f32") + " convolution (" +
                           w->packed->impl() + "), weights packed once, NCHW activations reordered per call";
  if (p == Precision::bf16 && !w->packed->bf16()) return tier + ": no native bf16, computes in f32: " + impl;
  return tier + ": " + impl;
}

}  // namespace prism::ops
