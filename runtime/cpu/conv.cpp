// conv1d and conv2d through oneDNN's convolution_forward, f32, on PyTorch's own layouts
// (NCL / NCHW activations, OIL / OIHW weights, reshaped to GOIL / GOIHW for groups).
// Primitives are cached by shape and parameters; the lock covers only the lookup.
// NOTE: the primitive runs on the plain layouts, with no reorder of activations or weights.
// The alternative, oneDNN's blocked layouts, needs the weights reordered on every call
// (caching them by data pointer is unsafe: a freed and reused buffer would hit a stale
// entry) plus reorders of src and dst. bench/ops_bench measures both side by side: on one
// thread, plain beats blocked-with-reorders on Whisper's conv1 (80 -> 384) and the ViT
// 16x16 patch embedding (~0.75-0.8x the time) but is ~1.7x slower on Whisper's conv2
// (384 -> 384, stride 2). Recovering that needs weights packed once at load (a pack_conv
// next to pack_linear), an ops.h change left for later.
// Scratchpad is user-managed (drawn from the arena per call) so one primitive can run from
// several threads at once.
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/cpu/dnnl_context.h"
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

}  // namespace prism::ops
