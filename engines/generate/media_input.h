// engines/generate/media_input.h: the input stage of a vision-language model. A prompt's image
// tokens take rows of its media items' encoder features (media_rows.h): from the process's
// media cache, else from one batched encoder run over every item the step's planned sequences
// miss. A request holds its rows only while a running choice still has visual positions to
// compute. It must not decode or resize media (the frontend did) or run the encoder outside a
// compute turn.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engines/encode/media_encode.h"
#include "engines/generate/generate_engine_factory.h"
#include "engines/generate/input_stage.h"

namespace prism::engines::generate {

// The series of a vision-language deployment.
struct VlmMetrics {
  VlmMetrics(serving::MetricsRegistry& m, const serving::Labels& l);
  serving::Histogram& encoder_seconds;
  serving::Histogram& visual_tokens;
  serving::Counter& frames;
  serving::Counter& cache_lookups;
  serving::Counter& cache_hits;
  serving::Gauge& cache_bytes;
};

class MediaInput final : public InputStage {
 public:
  // Loads the media encoder through `loader`, checks it against the decoder and the frontend's
  // image token, and warms it up (one blank view). max_encoder_views: views per encoder call.
  static Result<std::unique_ptr<MediaInput>> load(const StageContext& context, const MediaEncoderLoader& loader,
                                                  int32_t image_token_id, int max_encoder_views);

  Status check(const frontends::GenerateInput& in) const override;
  Status admit(RequestState& rs) override;
  void acquire(std::span<const StepItem> items, StageFailures& failed) override;
  void place(const RequestState& rs, int64_t first_position, int32_t first_row, std::span<int32_t> tokens) override;
  void fill(std::span<const StepItem> items, int64_t num_tokens, models::DecoderBatch& batch) override;
  void after_step(std::span<const std::unique_ptr<RequestState>> requests,
                  std::span<Sequence* const> running) override;
  void describe(nlohmann::json& engine) const override;
  void log_loaded(const std::string& deployment) const override;

 private:
  MediaInput(const StageContext& context, int32_t image_token_id, int max_encoder_views);
  struct MediaNeed {
    RequestState* rs;
    size_t item;  // into rs->input->media
  };
  // The items whose rows the planned sequences need and their requests do not hold.
  std::vector<MediaNeed> media_needs(std::span<const StepItem> items) const;
  // Pools an item's features into its request's rows; invalid_argument on a count mismatch.
  Status place_media_rows(const MediaNeed& n, const encode::MediaFeatures& features);

  const std::string deployment_;
  ComputeMetrics& compute_;  // not owned
  const int threads_;
  const int64_t hidden_;
  const int32_t image_token_id_;
  const int max_encoder_views_;
  VlmMetrics metrics_;
  std::unique_ptr<models::MediaEncoder> encoder_;
  std::unique_ptr<encode::MediaEncodeRunner> runner_;
  std::string encoder_id_;  // the media cache's name for this encoder's outputs
  // This step's media rows: (row of the batch, its input embedding); not owned (request rows).
  std::vector<std::pair<int32_t, const float*>> batch_media_;
};

}  // namespace prism::engines::generate
