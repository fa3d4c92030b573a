// engines/generate/cross_input.h: the input stage of an encoder-decoder speech model
// (Whisper). Each request carries one audio segment; its cross-attention memory is encoded
// when the request is first admitted, batched over the requests admitted in the same step
// (one encoder call per frame count, at most max_encoder_segments segments each), and held
// until the request ends: choices, forks and recomputations after preemption share it. Such
// requests bypass the prefix cache (their K/V depends on the audio). It must not compute
// log-mel features (the frontend did) or run the encoder outside a compute turn.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engines/generate/generate_engine_factory.h"
#include "engines/generate/input_stage.h"
#include "runtime/arena.h"

namespace prism::engines::generate {

// The series of a speech deployment.
struct SpeechMetrics {
  SpeechMetrics(serving::MetricsRegistry& m, const serving::Labels& l);
  serving::Histogram& encoder_seconds;
  serving::Counter& segments;
};

class CrossInput final : public InputStage {
 public:
  // Loads the speech encoder through `loader`, checks it against the frontend's mel bins, and
  // warms it up on a silent full-length segment (whose memory the decoder's warm-up attends).
  static Result<std::unique_ptr<CrossInput>> load(const StageContext& context, const SpeechEncoderLoader& loader,
                                                  int num_mel_bins, int max_encoder_segments);

  Status check(const frontends::GenerateInput& in) const override;
  bool keys_kv_by_tokens(const RequestState& rs) const override { return !rs.input->audio; }
  void acquire(std::span<const StepItem> items, StageFailures& failed) override;
  void fill(std::span<const StepItem> items, int64_t num_tokens, models::DecoderBatch& batch) override;
  void fill_warm_up(models::DecoderBatch& batch) const override;
  void describe(nlohmann::json& engine) const override;
  void log_loaded(const std::string& deployment) const override;

 private:
  CrossInput(const StageContext& context, int max_encoder_segments);
  // One SpeechEncoder::encode over `features` (each [num_mel_bins, frames] f32); the memories
  // are heap-owned (outlive the encoder's arena). internal_error when the encoder throws or
  // returns the wrong count or frames. *seconds (if given): the call's time.
  Result<std::vector<std::shared_ptr<const models::CrossKv>>> encode_segments(
      std::span<const float* const> features, int64_t frames, double* seconds = nullptr);

  const std::string deployment_;
  ComputeMetrics& compute_;  // not owned
  const int threads_;
  const int max_encoder_segments_;
  SpeechMetrics metrics_;
  std::unique_ptr<models::SpeechEncoder> encoder_;
  Arena arena_;                         // the encoder's activations
  std::vector<float> input_;            // [segments, num_mel_bins, frames] f32 of a batched call
  std::shared_ptr<const models::CrossKv> warm_cross_;  // a silent segment's memory
};

}  // namespace prism::engines::generate
