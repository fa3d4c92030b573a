// pipelines/transcribe/chunk_decode.cpp: a chunk's decode request and the reading of its output.
// It must not keep state across decodes: the orchestrator owns that.
#include "pipelines/transcribe/chunk_decode.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace prism::pipelines::transcribe {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Terms more than this many nats below the row's maximum add < vocab · e^-30 ≈ 5e-9 of it:
// below float precision, so they are skipped.
constexpr float kNegligibleNats = 30.0f;

float row_max(std::span<const float> row) {
  float max = kNegInf;
  for (const float v : row) max = v > max ? v : max;
  return max;
}

// log_softmax(row)[token], given the row's maximum.
float log_softmax_at(std::span<const float> row, int32_t token, float max) {
  const float x = row[size_t(token)];
  if (x == kNegInf) return kNegInf;
  const float floor = max - kNegligibleNats;
  double total = 0.0;
  for (const float v : row)
    if (v > floor) total += std::exp(double(v - max));
  return float(double(x - max) - std::log(total));
}

// Wraps the speech rules of choice 0 and, after them, notes the end-of-text token's logprob in
// the processed row: the engine reports no logprob for the stop token that ends a choice, and
// whisper's avg_logprob counts it.
// NOTE: a greedy decode samples end-of-text only where it is the row's maximum, so elsewhere
// the full softmax sum is skipped (the value noted then is never read): one pass per step.
class EndOfTextLogprob final : public frontends::LogitsProcessor {
 public:
  EndOfTextLogprob(std::unique_ptr<frontends::LogitsProcessor> rules, int32_t eot, bool greedy,
                   std::shared_ptr<ChunkDecodeProbe> probe)
      : rules_(std::move(rules)), eot_(eot), greedy_(greedy), probe_(std::move(probe)) {}

  void process(std::span<float> logits, std::span<const int32_t> generated) override {
    if (rules_) rules_->process(logits, generated);
    if (eot_ < 0 || size_t(eot_) >= logits.size()) return;
    const float max = row_max(logits);
    probe_->last_step = int64_t(generated.size());
    probe_->eot_logprob = greedy_ && logits[size_t(eot_)] < max ? kNegInf : log_softmax_at(logits, eot_, max);
  }
  int64_t probe_position() const override { return rules_ ? rules_->probe_position() : -1; }
  void probe(std::span<const float> logits) override {
    if (rules_) rules_->probe(logits);
  }

 private:
  std::unique_ptr<frontends::LogitsProcessor> rules_;
  int32_t eot_;
  bool greedy_;
  std::shared_ptr<ChunkDecodeProbe> probe_;  // shared with the orchestrator; engine thread writes
};

}  // namespace

ChunkDecode make_chunk_decode(const frontends::GenerateFrontend& frontend, const ChunkDecodeSpec& spec) {
  const frontends::SpeechProcessor* speech = frontend.speech();
  PRISM_CHECK(speech != nullptr);
  ChunkDecode d;
  d.probe = std::make_shared<ChunkDecodeProbe>();
  d.input = std::make_unique<frontends::GenerateInput>();
  frontends::GenerateInput& in = *d.input;
  in.prompt = speech->prompt(spec.speech);
  in.audio = frontends::AudioSegment{spec.features, spec.frames};

  // Whisper samples plainly: no penalties or filters, only the temperature.
  frontends::SamplingParams& p = in.sampling;
  p.temperature = spec.temperature;
  p.logprobs = true;
  p.n = 1;
  const int room = int(std::max<int64_t>(1, frontend.max_context() - int64_t(in.prompt.size())));
  p.max_tokens = std::max(1, std::min(speech->max_new_tokens(in.prompt.size()), room));
  if (spec.fixed_tokens > 0) {
    p.max_tokens = std::min(spec.fixed_tokens, room);
    p.ignore_eos = true;
  }

  // The observations live in the probe (aliasing pointer): one allocation per decode.
  std::shared_ptr<std::vector<frontends::SpeechObservation>> observations(d.probe, &d.probe->observations);
  frontends::LogitsProcessorFactory rules = speech->rules(spec.speech, std::move(observations));
  if (p.ignore_eos) {
    in.logits_processor = std::move(rules);  // never ends on end-of-text: nothing to note
  } else {
    in.logits_processor = [rules = std::move(rules), eot = speech->eot(), greedy = p.temperature == 0.0f,
                           probe = d.probe](int choice) -> std::unique_ptr<frontends::LogitsProcessor> {
      std::unique_ptr<frontends::LogitsProcessor> inner = rules ? rules(choice) : nullptr;
      if (choice != 0) return inner;
      return std::make_unique<EndOfTextLogprob>(std::move(inner), eot, greedy, probe);
    };
  }
  return d;
}

float whisper_avg_logprob(std::span<const frontends::TokenLogprobs> logprobs, std::optional<float> eot_logprob) {
  double sum = eot_logprob.value_or(0.0f);
  for (const frontends::TokenLogprobs& t : logprobs) sum += t.chosen.logprob;
  return float(sum / double(logprobs.size() + 1));
}

DecodedChunk read_chunk_decode(const frontends::SpeechProcessor& speech, const frontends::GenerateOutput& output,
                               const ChunkDecodeProbe& probe, float temperature, const QualityThresholds& thresholds) {
  PRISM_CHECK(!output.choices.empty());
  const frontends::ChoiceDelta& c = output.choices.front();
  DecodedChunk d;
  d.temperature = temperature;
  d.tokens = c.tokens;
  d.text = speech.text(c.tokens);
  d.compression_ratio = compression_ratio(d.text);
  d.no_speech_prob = probe.observations.front().no_speech_prob;
  d.language = probe.observations.front().language;
  d.decoded_tokens = output.completion_tokens;

  // NOTE: whisper's prompt holds the language and task (it detects the language in a pass of
  // its own); here an undetected language is picked, and the task forced, as the first
  // generated tokens. They are prompt in whisper's terms: not in the mean.
  size_t skip = 0;
  while (skip < c.tokens.size() && c.tokens[skip] > speech.eot() && c.tokens[skip] < speech.timestamp_begin()) ++skip;
  std::span<const frontends::TokenLogprobs> logprobs(c.logprobs);
  logprobs = logprobs.subspan(std::min(skip, logprobs.size()));
  std::optional<float> eot;
  if (c.finish == frontends::FinishReason::stop && probe.last_step == int64_t(c.tokens.size())) eot = probe.eot_logprob;
  d.avg_logprob = whisper_avg_logprob(logprobs, eot);
  d.verdict = judge(d.compression_ratio, d.avg_logprob, d.no_speech_prob, thresholds);
  return d;
}

size_t best_attempt(std::span<const DecodedChunk> attempts, const QualityThresholds& thresholds) {
  PRISM_CHECK(!attempts.empty());
  auto best_of = [&](bool within_ratio) -> std::optional<size_t> {
    std::optional<size_t> best;
    for (size_t i = 0; i < attempts.size(); ++i) {
      if (within_ratio && attempts[i].compression_ratio > thresholds.compression_ratio) continue;
      if (!best || attempts[i].avg_logprob > attempts[*best].avg_logprob) best = i;
    }
    return best;
  };
  if (const std::optional<size_t> b = best_of(true)) return *b;
  return *best_of(false);
}

}  // namespace prism::pipelines::transcribe
