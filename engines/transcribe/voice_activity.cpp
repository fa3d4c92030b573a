// The deployment's VAD: knobs → settings, the detector they name, and the two ways it runs —
// a whole recording (long-form: one stream, windows in order) and a step over many live
// streams (one window each, Silero's windows as one batch).
// NOTE: Silero runs on its caller's thread (the live scheduler, an audio job: no engine's,
// with a team of one) and takes a turn on the compute pool for that thread's team
// (runtime/compute_gate.h), so with the engines it never runs more threads than the pool has.
// The energy detector is a few additions per window: no turn.
#include "engines/transcribe/voice_activity.h"

#include <array>
#include <cstdio>
#include <string_view>

#include <omp.h>

#include "models/vad/silero_vad.h"
#include "runtime/compute_gate.h"

namespace prism::engines::transcribe {

static_assert(media::kVadWindow == models::kSileroWindow, "live windows are Silero's windows");

namespace {

constexpr std::array<std::string_view, 6> kKnobNames = {
    "vad", "vad_model", "vad_threshold", "vad_min_speech_ms", "vad_min_silence_ms", "vad_speech_pad_ms"};
constexpr int64_t kMaxVadMs = 60'000;

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A millisecond knob: 0..kMaxVadMs; absent keeps `value`.
Status read_ms(const serving::Knobs& knobs, std::string_view name, int& value) {
  if (!knobs.has(name)) return Status();
  PRISM_ASSIGN_OR_RETURN(const int64_t v, knobs.get_int(name, value));
  if (v < 0 || v > kMaxVadMs)
    return invalid_argument(knobs.where(name) + " must be between 0 and " + std::to_string(kMaxVadMs) +
                            " (milliseconds), got " + std::to_string(v));
  value = int(v);
  return Status();
}

}  // namespace

std::vector<std::string> VadSettings::knob_names() { return {kKnobNames.begin(), kKnobNames.end()}; }

Result<VadSettings> VadSettings::from_knobs(const serving::Knobs& knobs) {
  VadSettings s;
  PRISM_ASSIGN_OR_RETURN(s.model_path, knobs.get_string("vad_model", ""));
  // A model file alone says which detector is wanted; an explicit vad must agree with it.
  PRISM_ASSIGN_OR_RETURN(s.kind, knobs.get_string("vad", s.model_path.empty() ? "energy" : "silero"));
  if (s.kind != "energy" && s.kind != "silero")
    return invalid_argument(knobs.where("vad") + " must be \"energy\" or \"silero\", got \"" + s.kind + "\"");
  if (s.kind == "silero" && s.model_path.empty())
    return invalid_argument(knobs.where("vad") + " is \"silero\", which needs knob 'vad_model': the path of silero_vad.onnx");
  if (s.kind == "energy" && !s.model_path.empty())
    return invalid_argument(knobs.where("vad_model") + " is set, but " + knobs.where("vad") +
                            " is \"energy\", which reads no model: set vad = \"silero\" or remove vad_model");

  if (knobs.has("vad_threshold")) {
    PRISM_ASSIGN_OR_RETURN(const double t, knobs.get_double("vad_threshold", s.params.threshold));
    if (!(t > 0.0 && t < 1.0))
      return invalid_argument(knobs.where("vad_threshold") + " must be between 0 and 1 (exclusive), got " + format_number(t));
    s.params.threshold = float(t);
  }
  PRISM_RETURN_IF_ERROR(read_ms(knobs, "vad_min_speech_ms", s.params.min_speech_ms));
  PRISM_RETURN_IF_ERROR(read_ms(knobs, "vad_min_silence_ms", s.params.min_silence_ms));
  PRISM_RETURN_IF_ERROR(read_ms(knobs, "vad_speech_pad_ms", s.params.speech_pad_ms));
  return s;
}

VoiceActivity::~VoiceActivity() = default;

Result<std::shared_ptr<const VoiceActivity>> VoiceActivity::load(const VadSettings& settings) {
  std::shared_ptr<VoiceActivity> vad(new VoiceActivity());
  vad->settings_ = settings;
  if (settings.kind == "silero") {
    if (settings.model_path.empty())
      return invalid_argument("knob 'vad_model' must be the path of silero_vad.onnx when vad = \"silero\"");
    Result<std::unique_ptr<models::SileroVad>> model = models::SileroVad::load(settings.model_path);
    // Whatever went wrong with the file (missing, not ONNX, not Silero), it is the knob's value.
    if (!model.has_value()) return invalid_argument("knob 'vad_model': " + model.status().message());
    vad->silero_ = std::move(*model);
  } else if (settings.kind != "energy") {
    return invalid_argument("knob 'vad' must be \"energy\" or \"silero\", got \"" + settings.kind + "\"");
  }
  return std::shared_ptr<const VoiceActivity>(std::move(vad));
}

std::vector<float> VoiceActivity::probabilities(std::span<const float> samples16k) const {
  // NOTE: the state chains window to window, so a recording is one stream in order (the
  // Silero front end still batches its windows; see SileroVad::probabilities).
  if (silero_) {
    ComputeGate::Lease turn = ComputeGate::process().acquire(omp_get_max_threads());
    return silero_->probabilities(samples16k);
  }
  return media::energy_vad_probabilities(samples16k);
}

std::vector<media::SpeechSpan> VoiceActivity::spans(std::span<const float> samples16k) const {
  return media::speech_spans(probabilities(samples16k), int64_t(samples16k.size()), settings_.params);
}

VoiceActivity::Stream::Stream() : silero_(std::make_unique<models::SileroState>()) {}
VoiceActivity::Stream::~Stream() = default;

std::unique_ptr<VoiceActivity::Stream> VoiceActivity::new_stream() const { return std::make_unique<Stream>(); }

std::vector<float> VoiceActivity::step(std::span<const std::span<const float>> windows,
                                       std::span<Stream* const> streams) const {
  PRISM_CHECK(windows.size() == streams.size());
  for (const std::span<const float>& w : windows)
    PRISM_CHECK_MSG(w.size() == size_t(media::kVadWindow), "VoiceActivity::step: a window is not kVadWindow samples");
  for (Stream* s : streams) ++s->windows_;
  if (!silero_) {
    std::vector<float> probs(streams.size());
    for (size_t i = 0; i < streams.size(); ++i) probs[i] = streams[i]->energy_.push(windows[i]);
    return probs;
  }
  std::vector<models::SileroState*> states(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) states[i] = streams[i]->silero_.get();
  ComputeGate::Lease turn = ComputeGate::process().acquire(omp_get_max_threads());
  return silero_->step(windows, states);
}

}  // namespace prism::engines::transcribe
