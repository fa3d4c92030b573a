// engines/transcribe/voice_activity.h: a deployment's voice activity detector — the Silero
// network (models/vad, when knob vad = "silero" with vad_model = the .onnx path) or the
// built-in energy detector (media::EnergyVad; the default, and the demo's) — and its span
// rules (media::VadParams from knobs). Whole recordings for long-form, per-stream state for
// live audio, where one call scores a window of every stream together.
// Must not: buffer audio or endpoint a stream (live.cpp and media::StreamingEndpointer do).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "media/speech_spans.h"
#include "serving/config.h"

namespace prism::models {
class SileroVad;
struct SileroState;
}  // namespace prism::models

namespace prism::engines::transcribe {

struct VadSettings {
  std::string kind = "energy";  // knob vad: "energy" | "silero" (default: "silero" when vad_model is set)
  std::string model_path;       // knob vad_model (silero): path of silero_vad.onnx
  media::VadParams params;      // knobs vad_threshold (0, 1), vad_min_speech_ms, vad_min_silence_ms,
                                // vad_speech_pad_ms (0..60000)
  // invalid_argument naming the knob for a bad value (vad = "silero" without vad_model, or
  // vad = "energy" with one, included); knob names in knob_names(). The file is not read here.
  static Result<VadSettings> from_knobs(const serving::Knobs& knobs);
  static std::vector<std::string> knob_names();
};

class VoiceActivity {
 public:
  // Silero: the network from settings.model_path; a missing or invalid file is
  // invalid_argument naming knob vad_model and the file.
  static Result<std::shared_ptr<const VoiceActivity>> load(const VadSettings& settings);

  // Per-window speech probabilities of a whole recording (media::speech_spans' input).
  std::vector<float> probabilities(std::span<const float> samples16k) const;
  // Speech spans of a whole recording under the settings' rules.
  std::vector<media::SpeechSpan> spans(std::span<const float> samples16k) const;

  // One live stream's detector state (Silero's LSTM state and context, or the energy floor).
  // Owned by the stream's user; used with the VoiceActivity that made it.
  class Stream {
   public:
    Stream();
    ~Stream();
    int64_t windows() const { return windows_; }  // windows scored so far

   private:
    friend class VoiceActivity;
    // NOTE: behind a pointer so that this header (which api/ reaches) names no tensor-side type.
    std::unique_ptr<models::SileroState> silero_;
    media::EnergyVad energy_;
    int64_t windows_ = 0;
  };
  std::unique_ptr<Stream> new_stream() const;
  // Scores one media::kVadWindow-sample window for each stream (streams[i] advances): Silero
  // runs them as one batch. Called from one thread at a time per stream. A window of another
  // size is a bug (PRISM_CHECK).
  std::vector<float> step(std::span<const std::span<const float>> windows, std::span<Stream* const> streams) const;

  const VadSettings& settings() const { return settings_; }
  ~VoiceActivity();

 private:
  VoiceActivity() = default;
  VadSettings settings_;
  std::unique_ptr<models::SileroVad> silero_;  // null: energy
};

}  // namespace prism::engines::transcribe
