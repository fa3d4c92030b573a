// models/whisper/whisper_encoder.cpp: Whisper's audio encoder and the decoder's
// cross-attention K/V projections, behind SpeechEncoder. Log-mel segments in, one CrossKv per
// segment out. The transformer layers are the pre-LN encoder layer the vision towers use
// (models/common/transformer_layer.h), loaded here under Whisper's names. Computes only.
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/safetensors.h"
#include "models/common/activation.h"
#include "models/common/transformer_layer.h"
#include "models/common/weight_loading.h"
#include "models/whisper/whisper.h"
#include "models/whisper/whisper_weights.h"
#include "runtime/arena.h"

namespace prism::models {
namespace {

using formats::WeightSource;
using common::TransformerLayer;
using common::uniform_cu_seqlens;
using whisper::LinearPieces;

constexpr float kLayerNormEps = 1e-5f;  // nn.LayerNorm's default, which Whisper keeps

struct EncoderWeights {
  Tensor conv1_weight, conv1_bias;  // [d, num_mel_bins, 3], [d] f32
  Tensor conv2_weight, conv2_bias;  // [d, d, 3], [d] f32
  Tensor embed_positions;           // [max_source_positions, d] f32 (the sinusoids)
  // layers.{i}: self_attn_layer_norm → layer_norm1, self_attn.{q,k,v}_proj (k without a
  // bias: zero) → self_attn_qkv_proj, self_attn.out_proj, final_layer_norm → layer_norm2,
  // fc1 → mlp_fc1, fc2 → mlp_fc2.
  std::vector<TransformerLayer> layers;
  common::LayerNormWeights layer_norm;  // [d]
  // decoder.layers.{l}.encoder_attn.{k,v}_proj stacked along out: [2 d, d], rows k
  // (bias zero), then v.
  std::vector<ops::LinearWeight> cross_kv_proj;
};

Result<TransformerLayer> load_encoder_layer(const WeightSource& src, const std::string& p, const configs::WhisperConfig& c,
                                            ops::Precision precision) {
  const int64_t d = c.d_model, ffn = c.encoder_ffn_dim;
  TransformerLayer L;
  PRISM_ASSIGN_OR_RETURN(L.layer_norm1, common::load_layer_norm(src, p + "self_attn_layer_norm", d));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_qkv_proj, whisper::load_self_attn_qkv(src, p, d, precision));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_out_proj, whisper::load_linear(src, p + "self_attn.out_proj", d, d, precision));
  PRISM_ASSIGN_OR_RETURN(L.layer_norm2, common::load_layer_norm(src, p + "final_layer_norm", d));
  PRISM_ASSIGN_OR_RETURN(L.mlp_fc1, whisper::load_linear(src, p + "fc1", ffn, d, precision));
  PRISM_ASSIGN_OR_RETURN(L.mlp_fc2, whisper::load_linear(src, p + "fc2", d, ffn, precision));
  return L;
}

Result<EncoderWeights> load_encoder_weights(const WeightSource& src, const configs::WhisperConfig& c,
                                            ops::Precision precision) {
  const std::string p = whisper::checkpoint_prefix(src, "encoder.conv1.weight");
  const std::string enc = p + "encoder.";
  const int64_t d = c.d_model;
  EncoderWeights w;
  PRISM_ASSIGN_OR_RETURN(w.conv1_weight, common::load_f32(src, enc + "conv1.weight", {d, c.num_mel_bins, 3}));
  PRISM_ASSIGN_OR_RETURN(w.conv1_bias, common::load_f32(src, enc + "conv1.bias", {d}));
  PRISM_ASSIGN_OR_RETURN(w.conv2_weight, common::load_f32(src, enc + "conv2.weight", {d, d, 3}));
  PRISM_ASSIGN_OR_RETURN(w.conv2_bias, common::load_f32(src, enc + "conv2.bias", {d}));
  PRISM_ASSIGN_OR_RETURN(w.embed_positions,
                         common::load_f32(src, enc + "embed_positions.weight", {c.max_source_positions, d}));
  for (int64_t i = 0; i < c.encoder_layers; ++i) {
    PRISM_ASSIGN_OR_RETURN(TransformerLayer layer,
                           load_encoder_layer(src, enc + "layers." + std::to_string(i) + ".", c, precision));
    w.layers.push_back(std::move(layer));
  }
  PRISM_ASSIGN_OR_RETURN(w.layer_norm, common::load_layer_norm(src, enc + "layer_norm", d));
  for (int64_t l = 0; l < c.decoder_layers; ++l) {
    const std::string a = p + "decoder.layers." + std::to_string(l) + ".encoder_attn.";
    PRISM_ASSIGN_OR_RETURN(
        ops::LinearWeight kv,
        whisper::load_stacked_linear(src, LinearPieces{{a + "k_proj", a + "v_proj"}, {d, d}, {true, false}}, d,
                                     precision));
    w.cross_kv_proj.push_back(std::move(kv));
  }
  return w;
}

class WhisperEncoderModel final : public WhisperEncoder {
 public:
  WhisperEncoderModel(configs::WhisperConfig config, EncoderWeights weights)
      : c_(std::move(config)), w_(std::move(weights)) {
    shape_.hidden_size = c_.d_model;
    shape_.intermediate_size = c_.encoder_ffn_dim;
    shape_.num_heads = int(c_.encoder_heads);
    shape_.layer_norm_eps = kLayerNormEps;
    shape_.activation.fused = common::op_activation(c_.activation);
  }

  std::vector<std::shared_ptr<const CrossKv>> encode(const Tensor& features) const override;
  Tensor encoder_output(const Tensor& features) const override;
  int64_t num_mel_bins() const override { return c_.num_mel_bins; }
  int64_t input_frames() const override { return 2 * c_.max_source_positions; }
  int64_t output_frames() const override { return c_.max_source_positions; }
  double flops_per_segment() const override;

 private:
  Tensor forward(const Tensor& features) const;

  configs::WhisperConfig c_;
  EncoderWeights w_;
  common::TransformerShape shape_;
};

// features [B, num_mel_bins, F] → the encoder's output [B * F / 2, d] in the forward arenas'
// staging arena (valid until the next forward on this thread).
// NOTE: activations live in common::forward_arenas() (per thread): scratch for the convs, the
// layers alternating between the two hidden arenas, the output in staging.
Tensor WhisperEncoderModel::forward(const Tensor& features) const {
  PRISM_CHECK_MSG(features.dtype() == DType::f32 && features.dim() == 3 && features.is_contiguous() &&
                      features.size(1) == c_.num_mel_bins,
                  "whisper encoder: features must be [B, num_mel_bins, F] f32, contiguous");
  const int64_t b = features.size(0), f = features.size(2), frames = f / 2, d = c_.d_model;
  PRISM_CHECK_MSG(f % 2 == 0 && f >= 2 && f <= input_frames(),
                  "whisper encoder: F must be even, in [2, input_frames()]");
  common::ForwardArenas& arenas = common::forward_arenas();
  arenas.scratch.reset();
  arenas.hidden[0].reset();
  Tensor x;  // [B * F / 2, d], in hidden[0]
  {
    ArenaScope scope(&arenas.scratch);
    const Tensor a = ops::gelu(ops::conv1d(features, w_.conv1_weight, w_.conv1_bias, {.padding = 1}));  // [B, d, F]
    const Tensor s = ops::gelu(ops::conv1d(a, w_.conv2_weight, w_.conv2_bias, {.stride = 2, .padding = 1}));
    ArenaScope to_hidden(&arenas.hidden[0]);
    x = s.transpose(1, 2).contiguous();                        // [B, F / 2, d]
    ops::add_(x, w_.embed_positions.slice(0, 0, frames));      // the first F / 2 positions
    x = x.view({b * frames, d});
  }
  Tensor cu;
  {
    ArenaScope heap(nullptr);  // lives across every layer's arena resets
    cu = uniform_cu_seqlens(b, frames);
  }
  const ops::AttentionSeqs seqs{cu, cu, Tensor()};
  const size_t num_layers = w_.layers.size();
  const Tensor last = common::run_layers(w_.layers, shape_, x, seqs, false, &arenas.hidden[num_layers % 2]);
  arenas.staging.reset();
  ArenaScope to_staging(&arenas.staging);
  return common::layer_norm(last, w_.layer_norm, kLayerNormEps);
}

Tensor WhisperEncoderModel::encoder_output(const Tensor& features) const {
  const int64_t b = features.size(0), frames = features.size(2) / 2;
  Arena* const result = current_arena();
  const Tensor enc = forward(features);
  ArenaScope scope(result);
  return enc.view({b, frames, c_.d_model}).clone();
}

// NOTE: one GEMM per decoder layer over every segment's rows (k and v stacked), then each
// segment's rows are copied into tensors of its own, so a CrossKv holds only its segment's
// memory and lives as long as its request, whatever the others do.
std::vector<std::shared_ptr<const CrossKv>> WhisperEncoderModel::encode(const Tensor& features) const {
  const int64_t b = features.size(0), frames = features.size(2) / 2, d = c_.d_model;
  const int64_t heads = c_.decoder_heads, head_dim = c_.decoder_head_dim();
  std::vector<std::shared_ptr<CrossKv>> out;
  if (b == 0) return {};
  const Tensor enc = forward(features);  // [B * frames, d] in staging
  {
    ArenaScope heap(nullptr);
    for (int64_t s = 0; s < b; ++s) {
      auto kv = std::make_shared<CrossKv>();
      kv->frames = frames;
      for (int64_t l = 0; l < c_.decoder_layers; ++l) {
        kv->k.push_back(Tensor::empty({frames, heads, head_dim}, DType::f32));
        kv->v.push_back(Tensor::empty({frames, heads, head_dim}, DType::f32));
      }
      out.push_back(std::move(kv));
    }
  }
  Arena& scratch = common::forward_arenas().scratch;
  for (int64_t l = 0; l < c_.decoder_layers; ++l) {
    scratch.reset();
    ArenaScope scope(&scratch);
    const Tensor kv = ops::linear(enc, w_.cross_kv_proj[l]);  // [B * frames, 2 d]: k, then v
    for (int64_t s = 0; s < b; ++s) {
      const Tensor rows = kv.slice(0, s * frames, (s + 1) * frames);
      out[s]->k[l].view({frames, d}).copy_from(rows.slice(1, 0, d));
      out[s]->v[l].view({frames, d}).copy_from(rows.slice(1, d, 2 * d));
    }
  }
  scratch.reset();
  return {out.begin(), out.end()};
}

// NOTE: 2 x multiply-adds at F = input_frames(): conv1 (M 3 d per input frame), conv2
// (3 d d per output frame), per layer and frame q/k/v/out (4 d²) and fc1/fc2 (2 d ffn),
// attention (2 d per frame pair), and every decoder layer's cross k/v (2 d² per frame).
double WhisperEncoderModel::flops_per_segment() const {
  const double f = double(input_frames()), frames = double(output_frames()), d = double(c_.d_model);
  const double mels = double(c_.num_mel_bins), ffn = double(c_.encoder_ffn_dim);
  const double convs = f * 3 * mels * d + frames * 3 * d * d;
  const double layer = frames * (4 * d * d + 2 * d * ffn) + 2 * d * frames * frames;
  const double cross = double(c_.decoder_layers) * frames * 2 * d * d;
  return 2.0 * (convs + double(c_.encoder_layers) * layer + cross);
}

}  // namespace

Result<std::unique_ptr<SpeechEncoder>> load_whisper_encoder(const std::string& dir, ops::Precision precision) {
  ArenaScope no_arena(nullptr);  // weights outlive every forward's arena
  PRISM_ASSIGN_OR_RETURN(const configs::WhisperConfig config, configs::WhisperConfig::load(dir));
  PRISM_ASSIGN_OR_RETURN(const WeightSource src, WeightSource::open(dir));
  Result<EncoderWeights> weights = load_encoder_weights(src, config, precision);
  if (!weights) return common::in_dir(dir, weights.status());
  return std::unique_ptr<SpeechEncoder>(new WhisperEncoderModel(config, std::move(*weights)));
}

}  // namespace prism::models
