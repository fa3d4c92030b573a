// pipelines/transcribe/voice_activity.h: a transcribe deployment's voice activity detector and
// its span rules (media::VadParams from knobs). Two detectors:
//  - "silero": the network, run by a "vad" deployment (engines/vad) that this object only
//    sends requests to, so windows of every recording and every live stream are batched
//    there, on the compute pool, with their own metrics. Knob vad_deployment names that
//    deployment; with vad_model alone, add_vad_deployments() adds one for the file.
//  - "energy": the built-in detector (media::EnergyVad; the default, and the demo's), a few
//    additions per window, run in place.
// Whole recordings for long-form; per-stream state for live audio, where one call scores a
// window of every stream together.
// Must not: buffer audio or endpoint a stream (live.cpp and media::StreamingEndpointer do).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "frontends/vad_payload.h"
#include "media/speech_spans.h"
#include "serving/config.h"
#include "serving/request.h"

namespace prism::pipelines::transcribe {

struct VadSettings {
  std::string kind = "energy";  // knob vad: "energy" | "silero" (default: "silero" when vad_model
                                // or vad_deployment is set)
  std::string model_path;       // knob vad_model (silero): path of silero_vad.onnx
  std::string deployment;       // knob vad_deployment (silero): the "vad" deployment that runs it
  media::VadParams params;      // knobs vad_threshold (0, 1), vad_min_speech_ms, vad_min_silence_ms,
                                // vad_speech_pad_ms (0..60000)
  // invalid_argument naming the knob for a bad value (vad = "silero" without vad_model or
  // vad_deployment, or vad = "energy" with one, included); knob names in knob_names(). The
  // file is not read here.
  static Result<VadSettings> from_knobs(const serving::Knobs& knobs);
  static std::vector<std::string> knob_names();
};

// Gives every transcribe deployment of `config` whose VAD is a Silero file (vad_model, no
// vad_deployment) the "vad" deployment that runs it: one per file, named after the first
// transcribe deployment using it ("<name>-vad"), batching the windows of every deployment that
// shares the file; its knob vad_deployment then names it. A bad VAD knob is invalid_argument
// naming it; a missing file is the new deployment's load failure. Run before the deployments
// are built (app/ does, for `prism serve` and `prism transcribe`).
Status add_vad_deployments(serving::Config& config);

// How a Silero detector reaches its "vad" deployment: queue one request (Deployment::submit).
using VadSubmit = std::function<Status(serving::RequestPtr)>;

class VoiceActivity {
 public:
  // energy: in place (`submit` unused). silero: requests go through `submit`, which must
  // reach a "vad" deployment; failed_precondition without one.
  static Result<std::shared_ptr<const VoiceActivity>> connect(const VadSettings& settings, VadSubmit submit);

  // Per-window speech probabilities of a whole recording (media::speech_spans' input).
  // Blocks until the deployment answered (silero): its error (unavailable, resource_exhausted,
  // cancelled) is the caller's.
  Result<std::vector<float>> probabilities(std::span<const float> samples16k) const;
  // Speech spans of a whole recording under the settings' rules.
  Result<std::vector<media::SpeechSpan>> spans(std::span<const float> samples16k) const;

  // One live stream's detector state (Silero's recurrent state and context, or the energy
  // floor). Owned by the stream's user; used with the VoiceActivity that made it.
  class Stream {
   public:
    int64_t windows() const { return windows_; }  // windows scored so far

   private:
    friend class VoiceActivity;
    frontends::VadStreamState silero_;
    media::EnergyVad energy_;
    int64_t windows_ = 0;
  };
  std::unique_ptr<Stream> new_stream() const;
  // Scores one media::kVadWindow-sample window for each stream (streams[i] advances; on an
  // error none does): Silero sends one request per stream, all at once, and waits for them.
  // Called from one thread at a time per stream. A window of another size is a bug
  // (PRISM_CHECK).
  Result<std::vector<float>> step(std::span<const std::span<const float>> windows,
                                  std::span<Stream* const> streams) const;

  const VadSettings& settings() const { return settings_; }

 private:
  VoiceActivity() = default;
  VadSettings settings_;
  VadSubmit submit_;  // silero only
};

}  // namespace prism::pipelines::transcribe
