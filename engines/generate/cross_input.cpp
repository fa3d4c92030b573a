// engines/generate/cross_input.cpp: the cross-attention memory of a speech model's requests.
#include "engines/generate/cross_input.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "base/log.h"

namespace prism::engines::generate {

SpeechMetrics::SpeechMetrics(serving::MetricsRegistry& m, const serving::Labels& l)
    : encoder_seconds(m.histogram("prism_asr_encoder_seconds",
                                  "Speech encoder seconds per encode call (the segments of one frame count "
                                  "admitted in one step, up to max_encoder_segments).",
                                  serving::latency_buckets_seconds(), l)),
      segments(m.counter("prism_asr_segments_encoded_total",
                         "Audio segments encoded (once per request: a preempted request keeps its memory).", l)) {}

CrossInput::CrossInput(const StageContext& context, int max_encoder_segments)
    : deployment_(context.config.name),
      compute_(context.compute),
      threads_(context.threads),
      max_encoder_segments_(max_encoder_segments),
      metrics_(context.metrics, context.labels) {}

Result<std::unique_ptr<CrossInput>> CrossInput::load(const StageContext& context, const SpeechEncoderLoader& loader,
                                                     int num_mel_bins, int max_encoder_segments) {
  if (!loader) return internal_error("a speech deployment needs a speech encoder loader");
  std::unique_ptr<CrossInput> stage(new CrossInput(context, max_encoder_segments));
  PRISM_ASSIGN_OR_RETURN(stage->encoder_, loader(context.config, context.precision));
  if (stage->encoder_ == nullptr) return internal_error("the speech encoder loader returned nothing");
  const models::SpeechEncoder& e = *stage->encoder_;
  if (e.num_mel_bins() != num_mel_bins)
    return invalid_argument("the speech encoder takes " + std::to_string(e.num_mel_bins()) +
                            " mel bins, but the model's config.json says num_mel_bins = " +
                            std::to_string(num_mel_bins));
  if (e.input_frames() < 2 || e.input_frames() % 2 != 0)
    return internal_error("the speech encoder takes " + std::to_string(e.input_frames()) +
                          " frames (an even count >= 2 is needed)");
  // Warm-up: a silent full-length segment builds the encoder's primitives and sizes its arena.
  const std::vector<float> silence(size_t(e.num_mel_bins() * e.input_frames()), 0.0f);
  const float* features[] = {silence.data()};
  PRISM_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const models::CrossKv>> cross,
                         stage->encode_segments(features, e.input_frames()));
  stage->warm_cross_ = std::move(cross.front());
  return stage;
}

// The shape of a speech prompt's audio segment.
Status CrossInput::check(const frontends::GenerateInput& in) const {
  if (!in.audio) return invalid_argument("a request to a speech model needs an audio segment");
  const frontends::AudioSegment& a = *in.audio;
  const int64_t most = encoder_->input_frames(), mels = encoder_->num_mel_bins();
  if (a.frames < 2 || a.frames % 2 != 0 || a.frames > most)
    return invalid_argument("the audio segment has " + std::to_string(a.frames) +
                            " frames; the speech encoder takes an even count in [2, " + std::to_string(most) + "]");
  const size_t values = a.features ? a.features->size() : 0;
  if (int64_t(values) != mels * a.frames)
    return invalid_argument("the audio segment holds " + std::to_string(values) +
                            " values, not num_mel_bins × frames = " + std::to_string(mels) + " × " +
                            std::to_string(a.frames));
  return {};
}

// NOTE: the segments of every request admitted this step are encoded together: one call per
// distinct frame count (the encoder's input is [B, mels, F]), at most max_encoder_segments
// segments each, in admission order. A request is encoded once.
void CrossInput::acquire(std::span<const StepItem> items, StageFailures& failed) {
  std::vector<RequestState*> need;
  std::vector<int64_t> frame_counts;  // distinct, in admission order
  for (const StepItem& it : items) {
    RequestState* rs = it.seq->request;
    if (!rs->input->audio || rs->cross || std::find(need.begin(), need.end(), rs) != need.end()) continue;
    need.push_back(rs);
    const int64_t frames = rs->input->audio->frames;
    if (std::find(frame_counts.begin(), frame_counts.end(), frames) == frame_counts.end())
      frame_counts.push_back(frames);
  }
  for (const int64_t frames : frame_counts) {
    std::vector<RequestState*> group;
    for (RequestState* rs : need)
      if (rs->input->audio->frames == frames) group.push_back(rs);
    const size_t most = size_t(max_encoder_segments_);
    for (size_t at = 0; at < group.size(); at += most) {
      const auto call = std::span<RequestState* const>(group).subspan(at, std::min(group.size() - at, most));
      std::vector<const float*> features;
      for (const RequestState* rs : call) features.push_back(rs->input->audio->features->data());
      double seconds = 0;
      Result<std::vector<std::shared_ptr<const models::CrossKv>>> cross = encode_segments(features, frames, &seconds);
      metrics_.encoder_seconds.observe(seconds);
      if (!cross.has_value()) {
        PRISM_LOG_ERROR("deployment {}: {}", deployment_, cross.status().message());
        for (RequestState* rs : call) failed.emplace_back(rs, cross.status());
        continue;
      }
      metrics_.segments.inc(double(call.size()));
      for (size_t k = 0; k < call.size(); ++k) call[k]->cross = std::move(cross.value()[k]);
    }
  }
}

Result<std::vector<std::shared_ptr<const models::CrossKv>>> CrossInput::encode_segments(
    std::span<const float* const> features, int64_t frames, double* seconds) {
  const int64_t mels = encoder_->num_mel_bins(), per_segment = mels * frames;
  const int64_t B = int64_t(features.size());
  const float* input = features[0];
  if (B > 1) {
    input_.resize(size_t(B * per_segment));
    for (int64_t b = 0; b < B; ++b)
      std::copy(features[size_t(b)], features[size_t(b)] + per_segment, input_.begin() + b * per_segment);
    input = input_.data();
  }
  std::vector<std::shared_ptr<const models::CrossKv>> cross;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  {
    ArenaScope scope(&arena_);
    // The encoder only reads its input.
    const Tensor x = Tensor::from_blob(const_cast<float*>(input), {B, mels, frames}, DType::f32);
    try {
      ComputeTurn turn(compute_, threads_);
      cross = encoder_->encode(x);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (error.empty() && int64_t(cross.size()) != B)
    error = "the speech encoder returned " + std::to_string(cross.size()) + " memories for " + std::to_string(B) +
            " segments";
  for (size_t b = 0; error.empty() && b < cross.size(); ++b) {
    if (cross[b] == nullptr || cross[b]->frames != frames / 2 || cross[b]->k.size() != cross[b]->v.size()) {
      error = "the speech encoder returned a malformed memory for a segment of " + std::to_string(frames) + " frames";
      break;
    }
    // NOTE: the memory outlives this call's arena: tensors the encoder drew from it (no owner)
    // are copied to the heap, outside the scope.
    auto borrowed = [](const Tensor& t) { return t.defined() && t.owner() == nullptr; };
    const models::CrossKv& c = *cross[b];
    if (std::none_of(c.k.begin(), c.k.end(), borrowed) && std::none_of(c.v.begin(), c.v.end(), borrowed)) continue;
    auto owned = std::make_shared<models::CrossKv>();
    owned->frames = c.frames;
    for (const Tensor& t : c.k) owned->k.push_back(borrowed(t) ? t.clone() : t);
    for (const Tensor& t : c.v) owned->v.push_back(borrowed(t) ? t.clone() : t);
    cross[b] = std::move(owned);
  }
  arena_.reset();
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!error.empty()) return internal_error("speech encoding failed: " + error);
  return cross;
}

void CrossInput::fill(std::span<const StepItem> items, int64_t num_tokens, models::DecoderBatch& batch) {
  batch.cross.reserve(items.size());
  for (const StepItem& it : items) {
    PRISM_CHECK(it.seq->request->cross != nullptr);  // acquire gave every planned request one
    batch.cross.push_back(it.seq->request->cross.get());
  }
}

void CrossInput::fill_warm_up(models::DecoderBatch& batch) const { batch.cross = {warm_cross_.get()}; }

void CrossInput::describe(nlohmann::json& engine) const {
  engine["speech"] = {{"num_mel_bins", encoder_->num_mel_bins()},
                      {"input_frames", encoder_->input_frames()},
                      {"output_frames", encoder_->output_frames()},
                      {"max_encoder_segments", max_encoder_segments_}};
}

void CrossInput::log_loaded(const std::string& deployment) const {
  PRISM_LOG_INFO("deployment {}: speech encoder: {} mel bins, {} frames in, {} out, {} segments per call", deployment,
                 encoder_->num_mel_bins(), encoder_->input_frames(), encoder_->output_frames(),
                 max_encoder_segments_);
}

}  // namespace prism::engines::generate
