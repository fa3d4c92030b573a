// models/common/transformer_layer.cpp: pre-LN encoder layers, loaded by CLIP / SigLIP
// checkpoint names (Whisper's encoder loads its own) and run as a straight line of runtime ops.
#include "models/common/transformer_layer.h"

#include <string>
#include <vector>

#include "models/common/weight_loading.h"

namespace prism::models::common {

using formats::WeightSource;

Result<MlpActivation> MlpActivation::parse(const std::string& hidden_act) {
  MlpActivation a;
  if (hidden_act == "quick_gelu") a.fused = ops::Activation::quick_gelu;
  else if (hidden_act == "gelu") a.fused = ops::Activation::gelu_erf;
  else if (hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh") a.fused = ops::Activation::gelu_tanh;
  else
    return invalid_argument("config.json: hidden_act '" + hidden_act +
                            "' is not supported (quick_gelu, gelu, gelu_new, gelu_pytorch_tanh)");
  return a;
}

Result<LayerNormWeights> load_layer_norm(const WeightSource& src, const std::string& base, int64_t hidden) {
  LayerNormWeights w;
  PRISM_ASSIGN_OR_RETURN(w.weight, load_f32(src, base + ".weight", {hidden}));
  PRISM_ASSIGN_OR_RETURN(w.bias, load_f32(src, base + ".bias", {hidden}));
  return w;
}

Result<TransformerLayer> load_transformer_layer(const WeightSource& src, const std::string& p,
                                                const TransformerShape& shape, ops::Precision precision) {
  const int64_t h = shape.hidden_size, inter = shape.intermediate_size;
  TransformerLayer L;
  PRISM_ASSIGN_OR_RETURN(L.layer_norm1, load_layer_norm(src, p + "layer_norm1", h));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_qkv_proj,
                         load_linear(src, {p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"},
                                     {h, h, h}, h, true, precision));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_out_proj, load_linear(src, {p + "self_attn.out_proj"}, {h}, h, true, precision));
  PRISM_ASSIGN_OR_RETURN(L.layer_norm2, load_layer_norm(src, p + "layer_norm2", h));
  PRISM_ASSIGN_OR_RETURN(L.mlp_fc1, load_linear(src, {p + "mlp.fc1"}, {inter}, h, true, precision));
  PRISM_ASSIGN_OR_RETURN(L.mlp_fc2, load_linear(src, {p + "mlp.fc2"}, {h}, inter, true, precision));
  return L;
}

Tensor layer_norm(const Tensor& x, const LayerNormWeights& w, float eps) {
  return ops::layer_norm(x, w.weight, w.bias, eps);
}

Tensor transformer_layer_forward(const TransformerLayer& L, const TransformerShape& shape, const Tensor& x,
                                 const ops::AttentionSeqs& seqs, bool causal, Arena* out) {
  const int64_t t = x.size(0), h = shape.hidden_size, heads = shape.num_heads, d = h / heads;
  const Tensor qkv = ops::linear(layer_norm(x, L.layer_norm1, shape.layer_norm_eps), L.self_attn_qkv_proj)
                         .view({t, 3, heads, d});  // [T, 3, A, D]
  const Tensor context = ops::attention(qkv.select(1, 0), qkv.select(1, 1), qkv.select(1, 2), seqs,
                                        ops::AttentionParams{.scale = 0.0f, .causal = causal});  // [T, A, D]
  Tensor a = ops::linear(context.view({t, h}), L.self_attn_out_proj);
  ops::add_(a, x);  // a = x + attention
  const Tensor up = ops::linear(layer_norm(a, L.layer_norm2, shape.layer_norm_eps), L.mlp_fc1,
                                shape.activation.fused);  // hidden_act in fc1's epilogue
  const Tensor m = ops::linear(up, L.mlp_fc2);
  ArenaScope scope(out);
  return ops::add(a, m);
}

ForwardArenas& forward_arenas() {
  thread_local ForwardArenas arenas;
  return arenas;
}

Tensor run_layers(std::span<const TransformerLayer> layers, const TransformerShape& shape, const Tensor& x,
                  const ops::AttentionSeqs& seqs, bool causal, Arena* out) {
  ForwardArenas& arenas = forward_arenas();
  const size_t n = layers.size();
  if (n == 0) {
    if (out == &arenas.hidden[0]) return x;
    ArenaScope scope(out);
    return x.clone();
  }
  Tensor h = x;
  for (size_t l = 0; l < n; ++l) {
    Arena* const dst = l + 1 == n ? out : &arenas.hidden[(l + 1) % 2];
    // held layer l - 1's input, read by now
    if (dst == &arenas.hidden[0] || dst == &arenas.hidden[1]) dst->reset();
    arenas.scratch.reset();
    ArenaScope scope(&arenas.scratch);
    h = transformer_layer_forward(layers[l], shape, h, seqs, causal, dst);
  }
  return h;
}

Tensor uniform_cu_seqlens(int64_t n, int64_t len) {
  Tensor cu = Tensor::empty({n + 1}, DType::i32);
  int32_t* c = cu.data<int32_t>();
  for (int64_t i = 0; i <= n; ++i) c[i] = int32_t(i * len);
  return cu;
}

}  // namespace prism::models::common
