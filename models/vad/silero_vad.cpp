// Silero VAD's 16 kHz network, as the file's then-branch of `If(sr == 16000)` computes it:
//   x = [context(64) | window(512)]               [B, 576]
//   reflect-pad 64 on the right                   [B, 640]
//   conv1d(stft.forward_basis_buffer, stride 128) [B, 258, 4]: real rows 0..128, imaginary 129..257
//   magnitude sqrt(re² + im²)                     [B, 129, 4]
//   encoder.{0,1,2,3}.reparam_conv (k3, pad 1, strides 1, 2, 2, 1) + ReLU → [B, 128, 1]
//   LSTMCell(decoder.rnn: torch gate order i, f, g, o) on the single frame, state (h, c)
//   ReLU → decoder.decoder.2 (1×1 conv, 128 → 1) → sigmoid; the mean over the one frame.
// The front end (everything before the LSTM, plus the LSTM's input projection) depends on the
// window and its context only, so it runs batched; the recurrence runs per step. The STFT conv
// runs as one GEMM over the windows' four 256-sample frames; the encoder convs are ops::conv1d.
#include "models/vad/silero_vad.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "formats/onnx.h"
#include "runtime/ops.h"

namespace prism::models {

namespace {

constexpr int kFrame = kSileroContext + kSileroWindow;  // 576: what the network reads per window
constexpr int kPad = 64;                                 // right reflect padding of the STFT
constexpr int kFilter = 256, kHop = 128, kBins = 129;    // STFT: 256-point, 129 bins
constexpr int kGates = 4 * kSileroHidden;
constexpr int kStrides[4] = {1, 2, 2, 1};
// probabilities(): windows whose front end runs as one batch (bounds memory on long audio).
constexpr int64_t kWindowsPerBlock = 1024;

// NOTE: runtime ops build and cache a oneDNN primitive per input shape, the convolutions
// without bound; live batches and recordings' last blocks come in every size. Batches are
// padded with silent rows to a few sizes — powers of two up to 64, then multiples of 64 —
// so the shapes stay under 25 and a new batch size costs no compile in a live tick.
int64_t padded_rows(int64_t n) {
  if (n > 64) return (n + 63) / 64 * 64;
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void relu_(Tensor& t) {
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = std::max(p[i], 0.0f);
}

// NOTE: a NaN or infinity would poison a stream's LSTM state for good; such samples (which
// only broken float audio carries) are read as silence instead.
float clean(float v) { return std::isfinite(v) ? v : 0.0f; }

}  // namespace

// The network's weights, laid out for the ops (SileroVad::Weights is this).
struct SileroWeights {
  ops::LinearWeight stft_basis;       // stft.forward_basis_buffer [258, 1, 256] as [258, 256]
  std::array<Tensor, 4> enc_weight;   // [C_out, C_in, 3] f32: 129→128, 128→64, 64→64, 64→128
  std::array<Tensor, 4> enc_bias;     // [C_out] f32
  ops::LinearWeight input_gates;      // decoder.rnn.weight_ih [512, 128], bias b_ih + b_hh
  // decoder.rnn.weight_hh transposed: [128, 512] f32. The recurrence is 128 × 512 per stream,
  // too small for a GEMM call to pay (its threads cost more than the math): plain loops.
  std::vector<float> hidden_gates_t;
  std::array<float, kSileroHidden> head_weight{};  // decoder.decoder.2.weight [1, 128, 1]
  float head_bias = 0;                              // decoder.decoder.2.bias [1]
};

struct SileroVad::Weights : SileroWeights {};

namespace {

// The tensors of the branch whose names end in `prefix` + PyTorch name.
class BranchTensors {
 public:
  BranchTensors(const std::string& path, const formats::OnnxWeights& w, std::string prefix)
      : path_(path), w_(w), prefix_(std::move(prefix)) {}

  Result<Tensor> get(const std::string& name, const Dims& shape) const {
    auto it = w_.tensors.find(prefix_ + name);
    if (it == w_.tensors.end()) return invalid_argument(what() + "has no tensor '" + name + "'");
    const Tensor& t = it->second;
    if (t.dtype() != DType::f32 || !(t.shape() == shape))
      return invalid_argument(what() + "tensor '" + name + "' is " + t.to_string() + ", expected " + shape.to_string() + " f32");
    return t;
  }

 private:
  std::string what() const { return path_ + " is not a Silero VAD v5/v6 model: its 16 kHz branch "; }
  const std::string& path_;
  const formats::OnnxWeights& w_;
  std::string prefix_;
};

// The name prefix of the 16 kHz branch: where its STFT basis (258 × 1 × 256) is.
Result<std::string> find_16k_prefix(const std::string& path, const formats::OnnxWeights& w) {
  const std::string basis = "stft.forward_basis_buffer";
  for (const auto& [name, t] : w.tensors) {
    if (name.size() < basis.size() || name.compare(name.size() - basis.size(), basis.size(), basis) != 0) continue;
    if (t.shape() == Dims{2 * kBins, 1, kFilter}) return name.substr(0, name.size() - basis.size());
  }
  return invalid_argument(path + " is not a Silero VAD v5/v6 model: no 16 kHz STFT basis '" + basis + "' [258, 1, 256]");
}

}  // namespace

Result<std::unique_ptr<SileroVad>> SileroVad::load(const std::string& onnx_path) {
  PRISM_ASSIGN_OR_RETURN(const formats::OnnxWeights file, formats::read_onnx_weights(onnx_path));
  PRISM_ASSIGN_OR_RETURN(const std::string prefix, find_16k_prefix(onnx_path, file));
  const BranchTensors src(onnx_path, file, prefix);

  auto w = std::make_shared<Weights>();
  PRISM_ASSIGN_OR_RETURN(const Tensor basis, src.get("stft.forward_basis_buffer", {2 * kBins, 1, kFilter}));
  PRISM_ASSIGN_OR_RETURN(w->stft_basis, ops::pack_linear(basis.view({2 * kBins, kFilter}), Tensor(), ops::Precision::f32));
  const int64_t channels[5] = {kBins, 128, 64, 64, kSileroHidden};
  for (int i = 0; i < 4; ++i) {
    const std::string name = "encoder." + std::to_string(i) + ".reparam_conv.";
    PRISM_ASSIGN_OR_RETURN(w->enc_weight[i], src.get(name + "weight", {channels[i + 1], channels[i], 3}));
    PRISM_ASSIGN_OR_RETURN(w->enc_bias[i], src.get(name + "bias", {channels[i + 1]}));
  }
  PRISM_ASSIGN_OR_RETURN(const Tensor w_ih, src.get("decoder.rnn.weight_ih", {kGates, kSileroHidden}));
  PRISM_ASSIGN_OR_RETURN(const Tensor w_hh, src.get("decoder.rnn.weight_hh", {kGates, kSileroHidden}));
  PRISM_ASSIGN_OR_RETURN(const Tensor b_ih, src.get("decoder.rnn.bias_ih", {kGates}));
  PRISM_ASSIGN_OR_RETURN(const Tensor b_hh, src.get("decoder.rnn.bias_hh", {kGates}));
  PRISM_ASSIGN_OR_RETURN(const Tensor head_w, src.get("decoder.decoder.2.weight", {1, kSileroHidden, 1}));
  PRISM_ASSIGN_OR_RETURN(const Tensor head_b, src.get("decoder.decoder.2.bias", {1}));

  // Both LSTM biases are added to every gate pre-activation: fold them into one.
  const Tensor gate_bias = ops::add(b_ih, b_hh);
  PRISM_ASSIGN_OR_RETURN(w->input_gates, ops::pack_linear(w_ih, gate_bias, ops::Precision::f32));
  w->hidden_gates_t.resize(size_t(kGates) * kSileroHidden);
  for (int r = 0; r < kGates; ++r)
    for (int k = 0; k < kSileroHidden; ++k) w->hidden_gates_t[size_t(k) * kGates + r] = w_hh.data<float>()[r * kSileroHidden + k];
  std::copy_n(head_w.data<float>(), kSileroHidden, w->head_weight.begin());
  w->head_bias = head_b.data<float>()[0];

  std::unique_ptr<SileroVad> vad(new SileroVad());
  vad->w_ = std::move(w);
  return vad;
}

namespace {

// frames: [N, 576] f32, each window with its context (N from padded_rows). Returns the LSTM
// input projections x W_ih^T + b_ih + b_hh: [N, 512] f32.
Tensor front_end(const SileroWeights& w, const Tensor& frames) {
  const int64_t n = frames.size(0);
  // The STFT conv (kernel 256, stride 128) over the reflect-padded 640 samples is 4 frames of
  // 256 samples each times the basis: one GEMM over every window's frames.
  // Reflect padding (the edge sample not repeated): sample 576 + j is x[574 - j].
  constexpr int kStftFrames = (kFrame + kPad - kFilter) / kHop + 1;  // 4
  Tensor stft_in = Tensor::empty({n * kStftFrames, kFilter}, DType::f32);
  for (int64_t b = 0; b < n; ++b) {
    const float* x = frames.data<float>() + b * kFrame;
    std::array<float, kFrame + kPad> padded;
    std::copy_n(x, kFrame, padded.begin());
    for (int j = 0; j < kPad; ++j) padded[kFrame + j] = x[kFrame - 2 - j];
    for (int t = 0; t < kStftFrames; ++t)
      std::copy_n(padded.begin() + t * kHop, kFilter, stft_in.data<float>() + (b * kStftFrames + t) * kFilter);
  }
  const Tensor spec = ops::linear(stft_in, w.stft_basis);  // [N * 4, 258]: real 0..128, imaginary 129..257
  Tensor x = Tensor::empty({n, kBins, kStftFrames}, DType::f32);  // magnitudes, channels first for the convs
  for (int64_t b = 0; b < n; ++b) {
    float* m = x.data<float>() + b * kBins * kStftFrames;
    for (int t = 0; t < kStftFrames; ++t) {
      const float* re = spec.data<float>() + (b * kStftFrames + t) * 2 * kBins;
      const float* im = re + kBins;
      for (int f = 0; f < kBins; ++f) m[f * kStftFrames + t] = std::sqrt(re[f] * re[f] + im[f] * im[f]);
    }
  }
  for (int i = 0; i < 4; ++i) {
    x = ops::conv1d(x, w.enc_weight[i], w.enc_bias[i], {.stride = kStrides[i], .padding = 1});
    relu_(x);
  }
  // NOTE: 640 samples give 4 STFT frames, halved twice: one frame per window, so the
  // network's mean over time is that frame.
  PRISM_CHECK(x.size(1) == kSileroHidden && x.size(2) == 1);
  return ops::linear(x.view({n, kSileroHidden}), w.input_gates);
}

// One LSTM step and the head for each stream: input_gates [B, 512] (rows of front_end's
// output), states[b] advances, probs[b] is its speech probability.
void recurrent_step(const SileroWeights& w, const float* input_gates, std::span<SileroState* const> states,
                    float* probs) {
  constexpr int H = kSileroHidden;
  for (size_t b = 0; b < states.size(); ++b) {
    SileroState& s = *states[b];
    // gates = input_gates + h W_hh^T, accumulated as axpys over h (vectorises without
    // reordering any sum).
    std::array<float, kGates> g;
    std::copy_n(input_gates + b * kGates, kGates, g.begin());
    for (int k = 0; k < H; ++k) {
      const float hk = s.h[k];
      const float* row = w.hidden_gates_t.data() + size_t(k) * kGates;
      for (int r = 0; r < kGates; ++r) g[r] += row[r] * hk;
    }
    float logit = w.head_bias;
    for (int k = 0; k < H; ++k) {
      // torch.nn.LSTMCell: gates i, f, g, o in that order along the 512 rows.
      const float i = sigmoid(g[k]);
      const float f = sigmoid(g[H + k]);
      const float cell = std::tanh(g[2 * H + k]);
      const float o = sigmoid(g[3 * H + k]);
      s.c[k] = f * s.c[k] + i * cell;
      s.h[k] = o * std::tanh(s.c[k]);
      logit += w.head_weight[k] * std::max(s.h[k], 0.0f);
    }
    probs[b] = sigmoid(logit);
  }
}

}  // namespace

std::vector<std::vector<float>> SileroVad::run(std::span<const std::span<const float>> sequences,
                                               std::span<SileroState* const> states) const {
  PRISM_CHECK(sequences.size() == states.size());
  // Every window of every sequence, in order: (sequence, first sample of the window).
  struct WindowRef {
    size_t sequence;
    int64_t start;
  };
  std::vector<WindowRef> windows;
  std::vector<std::vector<float>> probs(sequences.size());
  for (size_t s = 0; s < sequences.size(); ++s) {
    const int64_t n = (int64_t(sequences[s].size()) + kSileroWindow - 1) / kSileroWindow;
    probs[s].assign(size_t(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) windows.push_back({s, i * kSileroWindow});
  }
  // The sample at i of sequence s: its state's context before 0, zeros past its end.
  auto sample = [&](size_t s, int64_t i) {
    const std::span<const float> x = sequences[s];
    if (i < 0) return states[s]->context[size_t(kSileroContext + i)];
    return i < int64_t(x.size()) ? clean(x[size_t(i)]) : 0.0f;
  };
  for (size_t first = 0; first < windows.size(); first += size_t(kWindowsPerBlock)) {
    const int64_t n = std::min<int64_t>(kWindowsPerBlock, int64_t(windows.size() - first));
    Tensor frames = Tensor::zeros({padded_rows(n), kFrame}, DType::f32);
    for (int64_t b = 0; b < n; ++b) {
      const WindowRef& w = windows[first + size_t(b)];
      float* f = frames.data<float>() + b * kFrame;
      for (int j = 0; j < kFrame; ++j) f[j] = sample(w.sequence, w.start - kSileroContext + j);
    }
    const Tensor gates = front_end(*w_, frames);
    for (int64_t b = 0; b < n; ++b) {
      const WindowRef& w = windows[first + size_t(b)];
      SileroState* one[1] = {states[w.sequence]};
      recurrent_step(*w_, gates.data<float>() + b * kGates, one, probs[w.sequence].data() + w.start / kSileroWindow);
    }
  }
  // Each state's context becomes the last 64 samples its sequence's last window read.
  for (size_t s = 0; s < sequences.size(); ++s) {
    const int64_t end = int64_t(probs[s].size()) * kSileroWindow;
    if (end == 0) continue;
    std::array<float, kSileroContext> context;
    for (int j = 0; j < kSileroContext; ++j) context[size_t(j)] = sample(s, end - kSileroContext + j);
    states[s]->context = context;
  }
  return probs;
}

std::vector<float> SileroVad::step(std::span<const std::span<const float>> windows,
                                   std::span<SileroState* const> states) const {
  for (const std::span<const float>& w : windows)
    PRISM_CHECK_MSG(w.size() == size_t(kSileroWindow), "SileroVad::step: a window is not 512 samples");
  std::vector<std::vector<float>> per_window = run(windows, states);
  std::vector<float> probs(windows.size());
  for (size_t b = 0; b < windows.size(); ++b) probs[b] = per_window[b][0];
  return probs;
}

std::vector<float> SileroVad::probabilities(std::span<const float> samples16k) const {
  SileroState state;
  SileroState* one[1] = {&state};
  const std::span<const float> recording[1] = {samples16k};
  return std::move(run(recording, one)[0]);
}

}  // namespace prism::models
