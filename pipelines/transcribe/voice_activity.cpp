// The deployment's VAD: knobs → settings, the "vad" deployments a config's Silero files need,
// and the two ways a detector runs — a whole recording (long-form: one stream, windows in
// order) and a step over many live streams (one window each).
// NOTE: Silero runs in its "vad" deployment, on the compute pool, batched with every other
// caller's windows; this side only sends the requests and waits for them (a job worker, the
// live scheduler: threads that are no engine's). The energy detector is a few additions per
// window: it runs in place.
#include "pipelines/transcribe/voice_activity.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string_view>

#include "base/check.h"

namespace prism::pipelines::transcribe {

static_assert(media::kVadWindow == frontends::kVadWindowSamples, "live windows are the detector's windows");

namespace {

constexpr std::array<std::string_view, 7> kKnobNames = {"vad",           "vad_model",         "vad_deployment",
                                                       "vad_threshold", "vad_min_speech_ms", "vad_min_silence_ms",
                                                       "vad_speech_pad_ms"};
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
  PRISM_ASSIGN_OR_RETURN(s.deployment, knobs.get_string("vad_deployment", ""));
  // A model file or a vad deployment alone says which detector is wanted; an explicit vad must
  // agree with it.
  const bool network = !s.model_path.empty() || !s.deployment.empty();
  PRISM_ASSIGN_OR_RETURN(s.kind, knobs.get_string("vad", network ? "silero" : "energy"));
  if (s.kind != "energy" && s.kind != "silero")
    return invalid_argument(knobs.where("vad") + " must be \"energy\" or \"silero\", got \"" + s.kind + "\"");
  if (s.kind == "silero" && !network)
    return invalid_argument(knobs.where("vad") +
                            " is \"silero\", which needs knob 'vad_model' (the path of silero_vad.onnx) or "
                            "'vad_deployment' (a deployment of task \"vad\")");
  if (s.kind == "energy" && network) {
    const std::string_view knob = s.model_path.empty() ? "vad_deployment" : "vad_model";
    return invalid_argument(knobs.where(knob) + " is set, but " + knobs.where("vad") +
                            " is \"energy\", which runs no model: set vad = \"silero\" or remove " + std::string(knob));
  }

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

namespace {

// The "vad" deployment's defaults for one add_vad_deployments makes: batches of many streams'
// pieces, and a millisecond's wait for the other live streams of a tick.
serving::DeploymentConfig vad_deployment(std::string name, std::string model_path) {
  serving::DeploymentConfig d;
  d.name = std::move(name);
  d.task = "vad";
  d.model = std::move(model_path);
  d.timeout_ms = 0;  // a recording's windows take as long as the recording is long
  d.batching.max_batch_size = 256;
  d.batching.max_batch_tokens = int64_t{1} << 30;  // costs are windows; the engine steps through them
  d.batching.max_queue_delay_us = 1000;
  return d;
}

// Waits for requests sent together; the first error wins.
class Pending {
 public:
  explicit Pending(size_t n) : outputs_(n) {}
  serving::Completion completion(size_t i) {
    return [this, i](Result<serving::PayloadPtr> r) {
      std::lock_guard lock(mu_);
      if (!r.has_value()) {
        if (error_.ok()) error_ = r.status();
      } else if (auto* out = dynamic_cast<frontends::VadOutput*>(r->get()); out != nullptr) {
        outputs_[i] = std::move(*out);
      } else if (error_.ok()) {
        error_ = internal_error("the vad deployment answered with something that is not a VadOutput");
      }
      ++done_;
      cv_.notify_all();
    };
  }
  void not_sent(Status s) {
    std::lock_guard lock(mu_);
    if (error_.ok()) error_ = std::move(s);
    ++done_;
  }
  Result<std::vector<frontends::VadOutput>> wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_ == outputs_.size(); });
    if (!error_.ok()) return error_;
    return std::move(outputs_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<frontends::VadOutput> outputs_;
  size_t done_ = 0;
  Status error_;
};

// Sends one request per input and waits for every answer.
Result<std::vector<frontends::VadOutput>> call(const VadSubmit& submit, std::vector<std::unique_ptr<frontends::VadInput>> inputs) {
  Pending pending(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t cost = frontends::vad_windows(int64_t(inputs[i]->samples.size()));
    serving::RequestPtr r = serving::make_request(std::move(inputs[i]), pending.completion(i));
    r->cost_tokens = std::max<int64_t>(1, cost);
    if (Status s = submit(std::move(r)); !s.ok()) pending.not_sent(std::move(s));
  }
  return pending.wait();
}

}  // namespace

Status add_vad_deployments(serving::Config& config) {
  std::vector<serving::DeploymentConfig> added;
  for (serving::DeploymentConfig& d : config.deployments) {
    if (d.task != "transcribe") continue;
    PRISM_ASSIGN_OR_RETURN(const VadSettings s, VadSettings::from_knobs(d.knobs));
    if (s.kind != "silero" || !s.deployment.empty()) continue;
    auto same_file = [&](const serving::DeploymentConfig& v) { return v.model == s.model_path; };
    auto it = std::find_if(added.begin(), added.end(), same_file);
    if (it == added.end()) {
      auto taken = [&](const std::string& name) {
        auto named = [&](const serving::DeploymentConfig& o) { return o.name == name; };
        return std::any_of(config.deployments.begin(), config.deployments.end(), named) ||
               std::any_of(added.begin(), added.end(), named);
      };
      std::string name = d.name + "-vad";
      for (int k = 2; taken(name); ++k) name = d.name + "-vad-" + std::to_string(k);
      added.push_back(vad_deployment(name, s.model_path));
      it = added.end() - 1;
    }
    d.knobs.set("vad_deployment", it->name, d.knobs.origin("vad_model"));
  }
  for (serving::DeploymentConfig& v : added) config.deployments.push_back(std::move(v));
  return config.validate();
}

Result<std::shared_ptr<const VoiceActivity>> VoiceActivity::connect(const VadSettings& settings, VadSubmit submit) {
  if (settings.kind != "energy" && settings.kind != "silero")
    return invalid_argument("knob 'vad' must be \"energy\" or \"silero\", got \"" + settings.kind + "\"");
  if (settings.kind == "silero" && !submit)
    return failed_precondition("the Silero voice activity detector needs a \"vad\" deployment (knob 'vad_deployment')");
  std::shared_ptr<VoiceActivity> vad(new VoiceActivity());
  vad->settings_ = settings;
  if (settings.kind == "silero") vad->submit_ = std::move(submit);
  return std::shared_ptr<const VoiceActivity>(std::move(vad));
}

Result<std::vector<float>> VoiceActivity::probabilities(std::span<const float> samples16k) const {
  if (!submit_) return media::energy_vad_probabilities(samples16k);
  if (samples16k.empty()) return std::vector<float>();
  // NOTE: one request for the whole recording: its state chains window to window, and the
  // engine steps through it a block at a time, batched with whatever else waits.
  std::vector<std::unique_ptr<frontends::VadInput>> inputs;
  inputs.push_back(std::make_unique<frontends::VadInput>());
  inputs.back()->samples.assign(samples16k.begin(), samples16k.end());
  PRISM_ASSIGN_OR_RETURN(std::vector<frontends::VadOutput> out, call(submit_, std::move(inputs)));
  return std::move(out.front().probabilities);
}

Result<std::vector<media::SpeechSpan>> VoiceActivity::spans(std::span<const float> samples16k) const {
  PRISM_ASSIGN_OR_RETURN(const std::vector<float> probs, probabilities(samples16k));
  return media::speech_spans(probs, int64_t(samples16k.size()), settings_.params);
}

std::unique_ptr<VoiceActivity::Stream> VoiceActivity::new_stream() const { return std::make_unique<Stream>(); }

Result<std::vector<float>> VoiceActivity::step(std::span<const std::span<const float>> windows,
                                               std::span<Stream* const> streams) const {
  PRISM_CHECK(windows.size() == streams.size());
  for (const std::span<const float>& w : windows)
    PRISM_CHECK_MSG(w.size() == size_t(media::kVadWindow), "VoiceActivity::step: a window is not kVadWindow samples");
  std::vector<float> probs(streams.size());
  if (!submit_) {
    for (size_t i = 0; i < streams.size(); ++i) {
      probs[i] = streams[i]->energy_.push(windows[i]);
      ++streams[i]->windows_;
    }
    return probs;
  }
  if (streams.empty()) return probs;
  std::vector<std::unique_ptr<frontends::VadInput>> inputs;
  for (size_t i = 0; i < streams.size(); ++i) {
    auto in = std::make_unique<frontends::VadInput>();
    in->samples.assign(windows[i].begin(), windows[i].end());
    in->state = streams[i]->silero_;
    inputs.push_back(std::move(in));
  }
  PRISM_ASSIGN_OR_RETURN(std::vector<frontends::VadOutput> out, call(submit_, std::move(inputs)));
  for (size_t i = 0; i < streams.size(); ++i) {
    PRISM_CHECK(out[i].probabilities.size() == 1);
    probs[i] = out[i].probabilities[0];
    streams[i]->silero_ = out[i].state;
    ++streams[i]->windows_;
  }
  return probs;
}

}  // namespace prism::pipelines::transcribe
