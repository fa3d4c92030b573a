// Transcription (long-form orchestration) over a fake submit that answers from scripted
// outputs: chunks completing out of order still report segments in time order, at absolute
// times; a failing chunk is re-run at the next temperature and only it; a chunk failing at
// every temperature keeps its best attempt; a silent chunk is dropped; sequential mode
// conditions each chunk on the text before it; cancellation, refusals and engine errors end it
// with on_done once. The audio is real speech (jfk.flac, decoded by media::decode_audio) with
// silences, cut by the deployment's energy VAD; the speech processor is the real one over
// Whisper-shaped tokenizer files. Then chunk_decode's pieces: whisper's avg_logprob, the
// end-of-text logprob hook, best_attempt; and the knobs.
#include "pipelines/transcribe/transcription.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>

#include "base/file.h"
#include "engines/generate/generate_engine.h"
#include "pipelines/transcribe/chunk_decode.h"
#include "pipelines/transcribe/chunk_plan.h"
#include "media/audio.h"
#include "media/log_mel.h"
#include "serving/deployment.h"
#include "test_util/paths.h"
#include "test_util/speech_samples.h"
#include "test_util/reference_io.h"
#include "test_util/whisper_tokenizer.h"

namespace prism::pipelines::transcribe {
namespace {

using frontends::GenerateFrontend;
using frontends::GenerateInput;
using frontends::GenerateOutput;
using frontends::SpeechProcessor;

constexpr double kRate = media::kSpeechSampleRate;

// ---- shared fixtures: a Whisper frontend (tokenizer files only) and speech audio ----

const std::string& whisper_dir() {
  static const std::string dir = [] {
    const std::string d = test::scratch_dir("transcription_test_whisper");
    Result<test::WhisperTokenIds> ids = test::write_whisper_files(d);
    PRISM_CHECK_MSG(ids.has_value(), ids.status().message().c_str());
    return d;
  }();
  return dir;
}

std::shared_ptr<const GenerateFrontend> whisper_frontend() {
  static const std::shared_ptr<const GenerateFrontend> frontend = [] {
    const std::string dir = whisper_dir();
    serving::DeploymentConfig config;
    config.name = "whisper";
    config.task = "transcribe";
    config.model = dir;
    Result<std::shared_ptr<const GenerateFrontend>> fe = GenerateFrontend::load(config);
    PRISM_CHECK_MSG(fe.has_value(), fe.status().message().c_str());
    return *fe;
  }();
  return frontend;
}

using test::jfk;

// jfk.flac `repeats` times, each after `gap_seconds` of silence, and the same silence at the end.
std::vector<float> speech_with_silences(int repeats, double gap_seconds) {
  const auto gap = size_t(gap_seconds * kRate);
  std::vector<float> out;
  for (int i = 0; i < repeats; ++i) {
    out.insert(out.end(), gap, 0.0f);
    out.insert(out.end(), jfk().begin(), jfk().end());
  }
  out.insert(out.end(), gap, 0.0f);
  return out;
}

std::shared_ptr<const VoiceActivity> energy_vad() {
  static const std::shared_ptr<const VoiceActivity> vad = [] {
    Result<std::shared_ptr<const VoiceActivity>> v = VoiceActivity::connect(VadSettings{}, nullptr);
    PRISM_CHECK_MSG(v.has_value(), v.status().message().c_str());
    return *v;
  }();
  return vad;
}

// ---- the fake engine ----

struct Answer {
  std::string text = " hello";
  double start = 0.0, end = 1.0;  // the segment's timestamps in the chunk
  float token_logprob = -0.1f;    // every generated token's
  float no_speech = 0.01f;
};

class FakeEngine {
 public:
  explicit FakeEngine(std::shared_ptr<const GenerateFrontend> frontend) : frontend_(std::move(frontend)) {}
  const SpeechProcessor& speech() const { return *frontend_->speech(); }

  Status submit(serving::RequestPtr r) {
    std::lock_guard lock(mu_);
    if (refuse_from_ >= 0 && int(requests_.size()) >= refuse_from_) return resource_exhausted("queue full");
    const auto* in = dynamic_cast<const GenerateInput*>(r->input.get());
    PRISM_CHECK(in != nullptr && in->audio.has_value());
    auto [it, added] = chunk_of_features_.emplace(in->audio->features.get(), int(chunk_of_features_.size()));
    chunk_.push_back(it->second);
    requests_.push_back(std::move(r));
    return Status();
  }
  std::function<Status(serving::RequestPtr)> submit_fn() {
    return [this](serving::RequestPtr r) { return submit(std::move(r)); };
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return requests_.size();
  }
  serving::RequestPtr request(size_t i) const {
    std::lock_guard lock(mu_);
    return requests_.at(i);
  }
  const GenerateInput& input(size_t i) const { return dynamic_cast<const GenerateInput&>(*request(i)->input); }
  int chunk(size_t i) const {
    std::lock_guard lock(mu_);
    return chunk_.at(i);
  }
  void refuse_from(int n) { refuse_from_ = n; }

  // The tokens a decode of `a` generates: <|start|> text <|end|> (end-of-text not included).
  std::vector<int32_t> tokens(const Answer& a) const {
    std::vector<int32_t> t = {timestamp(a.start)};
    for (const int32_t x : speech().encode_text(a.text)) t.push_back(x);
    t.push_back(timestamp(a.end));
    return t;
  }
  int32_t timestamp(double s) const { return speech().timestamp_begin() + int32_t(std::lround(s / 0.02)); }

  // Completes request i as the engine would: the processor probes the start-of-transcript row
  // (giving the no-speech probability), then the choice ends on end-of-text.
  void answer(size_t i, const Answer& a) {
    serving::RequestPtr r = request(i);
    const auto& in = dynamic_cast<const GenerateInput&>(*r->input);
    if (in.logits_processor) {
      std::unique_ptr<frontends::LogitsProcessor> p = in.logits_processor(0);
      if (p->probe_position() >= 0) {
        // softmax(row)[nospeech] = a.no_speech with every other logit 0.
        std::vector<float> row(size_t(frontend_->vocab_size()), 0.0f);
        const double v = double(row.size());
        row[size_t(speech().no_speech())] = float(std::log(a.no_speech * (v - 1) / (1 - a.no_speech)));
        p->probe(row);
      }
    }
    auto out = std::make_unique<GenerateOutput>();
    frontends::ChoiceDelta c;
    c.tokens = tokens(a);
    for (const int32_t t : c.tokens) c.logprobs.push_back({{t, a.token_logprob}, {}});
    c.finish = frontends::FinishReason::stop;
    out->completion_tokens = int64_t(c.tokens.size()) + 1;
    out->choices.push_back(std::move(c));
    r->complete(serving::PayloadPtr(std::move(out)));
  }

 private:
  std::shared_ptr<const GenerateFrontend> frontend_;
  mutable std::mutex mu_;
  std::vector<serving::RequestPtr> requests_;
  std::vector<int> chunk_;  // chunk index per request (by features, in order of first submit)
  std::map<const void*, int> chunk_of_features_;
  int refuse_from_ = -1;
};

// What a transcription reported, in order.
struct Recorder {
  std::vector<Segment> segments;
  std::vector<std::pair<int, int>> progress;
  std::vector<Result<Transcript>> done;

  TranscriptionEvents events() {
    TranscriptionEvents e;
    e.on_segment = [this](const Segment& s) { segments.push_back(s); };
    e.on_progress = [this](int d, int t) { progress.emplace_back(d, t); };
    e.on_done = [this](Result<Transcript> t) { done.push_back(std::move(t)); };
    return e;
  }
};

class TranscriptionTest : public ::testing::Test {
 protected:
  TranscriptionContext context(bool parallel = true, double chunk_seconds = 5.0) {
    TranscriptionContext c;
    c.frontend = whisper_frontend();
    c.vad = energy_vad();
    c.settings.chunk_seconds = chunk_seconds;
    c.settings.parallel_chunks = parallel;
    c.submit = engine_.submit_fn();
    c.metrics = metrics_;
    return c;
  }
  // The chunks the orchestrator must make of `samples` (its VAD and plan, independently).
  std::vector<Chunk> expected_chunks(const std::vector<float>& samples, double chunk_seconds = 5.0) {
    return plan_chunks(energy_vad()->spans(samples).value(), int64_t(chunk_seconds * kRate));
  }
  const SpeechProcessor& speech() { return *whisper_frontend()->speech(); }

  serving::MetricsRegistry registry_;
  std::shared_ptr<AsrMetrics> metrics_ =
      std::make_shared<AsrMetrics>(registry_, serving::Labels{{"deployment", "w"}, {"modality", "asr"}});
  FakeEngine engine_{whisper_frontend()};
  Recorder rec_;
};

std::string chunk_text(int k) { return " chunk " + std::to_string(k); }

TEST_F(TranscriptionTest, OutOfOrderCompletionsReportSegmentsInTimeOrder) {
  const std::vector<float> audio = speech_with_silences(3, 2.0);
  const std::vector<Chunk> chunks = expected_chunks(audio);
  ASSERT_GE(chunks.size(), 4u) << "the test wants several chunks";
  auto t = Transcription::start(context(), audio, {}, rec_.events());

  // Every chunk is submitted at once, in order, with its own log-mel segment.
  ASSERT_EQ(engine_.size(), chunks.size());
  for (size_t k = 0; k < chunks.size(); ++k) {
    ASSERT_EQ(engine_.chunk(k), int(k));
    const GenerateInput& in = engine_.input(k);
    ASSERT_TRUE(in.audio.has_value());
    EXPECT_EQ(in.audio->frames, media::kWhisperChunkFrames);
    EXPECT_TRUE(in.sampling.logprobs);
    EXPECT_EQ(in.sampling.temperature, 0.0f);
    EXPECT_EQ(in.sampling.n, 1);
    EXPECT_FALSE(in.sampling.ignore_eos);
    EXPECT_EQ(in.sampling.max_tokens, speech().max_new_tokens(in.prompt.size()));
    EXPECT_TRUE(bool(in.logits_processor));
    EXPECT_EQ(in.prompt.front(), speech().sot());  // no prompt text: no <|startofprev|>
  }
  const Chunk& c1 = chunks[1];
  const media::LogMel mel = media::log_mel_spectrogram(
      std::span(audio).subspan(size_t(c1.start), size_t(c1.end - c1.start)), speech().num_mel_bins());
  EXPECT_EQ(*engine_.input(1).audio->features, mel.values);

  // Complete from the last chunk to the first: nothing is reported until chunk 0 is final.
  for (size_t k = chunks.size(); k-- > 1;) engine_.answer(k, {chunk_text(int(k)), 0.5, 2.0});
  EXPECT_TRUE(rec_.segments.empty());
  EXPECT_EQ(rec_.progress.size(), chunks.size() - 1);
  EXPECT_TRUE(rec_.done.empty());
  engine_.answer(0, {chunk_text(0), 0.5, 2.0});

  ASSERT_EQ(rec_.segments.size(), chunks.size());
  for (size_t k = 0; k < chunks.size(); ++k) {
    const Segment& s = rec_.segments[k];
    const double start = double(chunks[k].start) / kRate, end = double(chunks[k].end) / kRate;
    EXPECT_EQ(s.id, int(k));
    EXPECT_EQ(s.text, chunk_text(int(k)));
    EXPECT_EQ(s.seek, chunks[k].start);
    EXPECT_NEAR(s.start, std::min(start + 0.5, end), 1e-9);
    EXPECT_NEAR(s.end, std::min(start + 2.0, end), 1e-9);  // inside the chunk
    EXPECT_EQ(s.temperature, 0.0f);
    // (3 tokens or more) × -0.1, end-of-text not seen by the fake: sum / (n + 1).
    const double n = double(engine_.tokens({chunk_text(int(k)), 0.5, 2.0}).size());
    EXPECT_NEAR(s.avg_logprob, -0.1 * n / (n + 1), 1e-6);
    EXPECT_NEAR(s.no_speech_prob, 0.01, 1e-4);
    EXPECT_EQ(s.compression_ratio, compression_ratio(s.text));
  }
  EXPECT_EQ(rec_.progress.back(), std::make_pair(int(chunks.size()), int(chunks.size())));
  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value()) << rec_.done[0].status().message();
  const Transcript& tr = *rec_.done[0];
  EXPECT_EQ(tr.segments.size(), chunks.size());
  std::string text;
  for (size_t k = 0; k < chunks.size(); ++k) text += (k ? " chunk " : "chunk ") + std::to_string(k);
  EXPECT_EQ(tr.text, text);
  EXPECT_NEAR(tr.duration, double(audio.size()) / kRate, 1e-9);
  EXPECT_EQ(tr.stats.chunks, int(chunks.size()));
  EXPECT_EQ(tr.stats.rerun_chunks, 0);
  EXPECT_EQ(tr.stats.silent_chunks, 0);
  double speech_seconds = 0;
  for (const Chunk& c : chunks)
    for (const media::SpeechSpan& s : c.spans) speech_seconds += double(s.end - s.start) / kRate;
  EXPECT_NEAR(tr.stats.speech_seconds, speech_seconds, 1e-9);
  EXPECT_GT(tr.stats.speech_seconds, 0.4 * 3 * 11.0);  // jfk talks through half of its 11 s or more
  EXPECT_EQ(metrics_->chunks.value(), double(chunks.size()));
  EXPECT_NEAR(metrics_->audio_seconds.value(), tr.duration, 1e-9);
  EXPECT_EQ(metrics_->real_time_factor.count(), 1u);
  EXPECT_EQ(metrics_->chunk_seconds.count(), chunks.size());
}

TEST_F(TranscriptionTest, OnlyTheFailingChunkIsRerunAtTheNextTemperature) {
  const std::vector<float> audio = speech_with_silences(2, 2.0);
  const size_t n = expected_chunks(audio).size();
  ASSERT_GE(n, 3u);
  auto t = Transcription::start(context(), audio, {}, rec_.events());
  ASSERT_EQ(engine_.size(), n);
  for (size_t k = 0; k < n; ++k)
    engine_.answer(k, k == 1 ? Answer{" bad", 0, 1, -2.5f} : Answer{chunk_text(int(k))});
  // One re-run: chunk 1's, at 0.2, over the same features and prompt.
  ASSERT_EQ(engine_.size(), n + 1);
  EXPECT_EQ(engine_.chunk(n), 1);
  EXPECT_EQ(engine_.input(n).sampling.temperature, 0.2f);
  EXPECT_EQ(engine_.input(n).audio->features, engine_.input(1).audio->features);
  EXPECT_EQ(engine_.input(n).prompt, engine_.input(1).prompt);
  EXPECT_EQ(rec_.segments.size(), 1u);  // chunk 0's; chunk 1 is not final
  engine_.answer(n, {chunk_text(1)});
  EXPECT_EQ(engine_.size(), n + 1);

  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value());
  const Transcript& tr = *rec_.done[0];
  ASSERT_EQ(tr.segments.size(), n);
  EXPECT_EQ(tr.segments[1].text, chunk_text(1));
  EXPECT_EQ(tr.segments[1].temperature, 0.2f);
  EXPECT_EQ(tr.segments[0].temperature, 0.0f);
  EXPECT_EQ(tr.stats.rerun_chunks, 1);
  EXPECT_EQ(metrics_->rerun_chunks.value(), 1.0);
  // Every decode's tokens count, the failed one's too.
  int64_t tokens = int64_t(engine_.tokens({" bad"}).size()) + 1;
  for (size_t k = 0; k < n; ++k) tokens += int64_t(engine_.tokens({chunk_text(int(k))}).size()) + 1;
  EXPECT_EQ(tr.stats.decoded_tokens, tokens);
}

TEST_F(TranscriptionTest, RepetitionFailsAChunkToo) {
  const std::vector<float> audio = speech_with_silences(1, 1.0);
  const size_t n = expected_chunks(audio).size();
  ASSERT_GE(n, 1u);
  auto t = Transcription::start(context(), audio, {}, rec_.events());
  std::string loop;
  for (int i = 0; i < 30; ++i) loop += " the the the";
  ASSERT_GT(compression_ratio(loop), 2.4f);
  engine_.answer(0, {loop});
  ASSERT_EQ(engine_.size(), n + 1);
  EXPECT_EQ(engine_.chunk(n), 0);
  EXPECT_EQ(engine_.input(n).sampling.temperature, 0.2f);
}

TEST_F(TranscriptionTest, AChunkFailingAtEveryTemperatureKeepsItsBestAttempt) {
  const std::vector<float> audio = speech_with_silences(1, 1.0);
  const size_t n = expected_chunks(audio).size();
  auto t = Transcription::start(context(), audio, {}, rec_.events());
  for (size_t k = 1; k < n; ++k) engine_.answer(k, {chunk_text(int(k))});
  // Chunk 0 fails at 0, 0.2, ... 1.0: six decodes; the one at 0.4 has the best logprob.
  const std::vector<float> ladder = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f};
  size_t next = 0;
  for (size_t attempt = 0; attempt < ladder.size(); ++attempt) {
    ASSERT_EQ(engine_.size(), n + attempt);
    EXPECT_EQ(engine_.input(next).sampling.temperature, ladder[attempt]);
    EXPECT_TRUE(rec_.done.empty());
    engine_.answer(next, {" try " + std::to_string(attempt), 0, 1, attempt == 2 ? -1.5f : -3.0f});
    next = n + attempt;
  }
  ASSERT_EQ(engine_.size(), n + ladder.size() - 1);
  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value());
  EXPECT_EQ(rec_.done[0]->segments.at(0).text, " try 2");
  EXPECT_EQ(rec_.done[0]->segments.at(0).temperature, 0.4f);
  EXPECT_EQ(rec_.done[0]->stats.rerun_chunks, 1);
}

TEST_F(TranscriptionTest, NoFallbackDecodesEachChunkOnce) {
  const std::vector<float> audio = speech_with_silences(1, 1.0);
  const size_t n = expected_chunks(audio).size();
  TranscribeOptions o;
  o.temperature_fallback = false;
  auto t = Transcription::start(context(), audio, o, rec_.events());
  for (size_t k = 0; k < n; ++k) engine_.answer(k, {chunk_text(int(k)), 0, 1, -5.0f});
  EXPECT_EQ(engine_.size(), n);
  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value());
  EXPECT_EQ(rec_.done[0]->segments.size(), n);  // kept though they fail the checks
}

TEST_F(TranscriptionTest, ASilentChunkIsDroppedNotRerun) {
  const std::vector<float> audio = speech_with_silences(2, 2.0);
  const size_t n = expected_chunks(audio).size();
  ASSERT_GE(n, 3u);
  auto t = Transcription::start(context(), audio, {}, rec_.events());
  for (size_t k = 0; k < n; ++k)
    engine_.answer(k, k == 1 ? Answer{" um", 0, 1, -1.5f, 0.9f} : Answer{chunk_text(int(k))});
  EXPECT_EQ(engine_.size(), n);  // no re-run
  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value());
  const Transcript& tr = *rec_.done[0];
  ASSERT_EQ(tr.segments.size(), n - 1);
  EXPECT_EQ(tr.segments[0].text, chunk_text(0));
  EXPECT_EQ(tr.segments[1].text, chunk_text(2));
  EXPECT_EQ(tr.segments[1].id, 1);
  EXPECT_EQ(tr.stats.silent_chunks, 1);
  EXPECT_EQ(tr.stats.rerun_chunks, 0);
  EXPECT_EQ(rec_.segments.size(), n - 1);
}

TEST_F(TranscriptionTest, HighNoSpeechWithAGoodLogprobIsKept) {
  const std::vector<float> audio = speech_with_silences(1, 1.0);
  const size_t n = expected_chunks(audio).size();
  auto t = Transcription::start(context(), audio, {}, rec_.events());
  for (size_t k = 0; k < n; ++k) engine_.answer(k, {chunk_text(int(k)), 0, 1, -0.2f, 0.9f});
  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value());
  EXPECT_EQ(rec_.done[0]->segments.size(), n);
}

TEST_F(TranscriptionTest, ThePromptConditionsOnlyTheFirstParallelChunk) {
  const std::vector<float> audio = speech_with_silences(2, 2.0);
  const size_t n = expected_chunks(audio).size();
  TranscribeOptions o;
  o.prompt = "Kennedy, Americans";
  o.language = "English";
  o.task = frontends::SpeechTask::translate;
  auto t = Transcription::start(context(), audio, o, rec_.events());
  ASSERT_EQ(engine_.size(), n);
  frontends::SpeechDecodeOptions d;
  d.language = "en";
  d.task = frontends::SpeechTask::translate;
  d.segment_seconds = double(expected_chunks(audio)[0].end - expected_chunks(audio)[0].start) / kRate;
  d.previous = speech().encode_text(o.prompt);
  EXPECT_EQ(engine_.input(0).prompt, speech().prompt(d));
  d.previous.clear();
  EXPECT_EQ(engine_.input(1).prompt, speech().prompt(d));
  for (size_t k = 0; k < n; ++k) engine_.answer(k, {chunk_text(int(k))});
  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value());
  EXPECT_EQ(rec_.done[0]->language, "en");
}

TEST_F(TranscriptionTest, SequentialChunksFollowOneAnotherConditionedOnTheText) {
  const std::vector<float> audio = speech_with_silences(3, 2.0);
  const size_t n = expected_chunks(audio).size();
  ASSERT_GE(n, 3u);
  TranscribeOptions o;
  o.language = "en";
  auto t = Transcription::start(context(/*parallel=*/false), audio, o, rec_.events());
  // One at a time; chunk 1 is conditioned on chunk 0's tokens (text and timestamps).
  ASSERT_EQ(engine_.size(), 1u);
  engine_.answer(0, {chunk_text(0), 0, 1});
  ASSERT_EQ(engine_.size(), 2u);
  EXPECT_EQ(engine_.chunk(1), 1);
  const std::vector<int32_t> t0 = engine_.tokens({chunk_text(0), 0, 1});
  const std::vector<Chunk> chunks = expected_chunks(audio);
  frontends::SpeechDecodeOptions d;
  d.language = "en";
  d.previous = t0;
  d.segment_seconds = double(chunks[1].end - chunks[1].start) / kRate;
  EXPECT_EQ(engine_.input(1).prompt, speech().prompt(d));
  EXPECT_NE(engine_.input(1).prompt.front(), speech().sot());
  EXPECT_EQ(rec_.segments.size(), 1u);  // reported as soon as final

  // Chunk 1 passes only at 0.6 (> 0.5): chunk 2 starts from an empty context.
  for (float temp : {0.0f, 0.2f, 0.4f}) {
    const size_t i = engine_.size() - 1;
    EXPECT_EQ(engine_.input(i).sampling.temperature, temp);
    engine_.answer(i, {" bad", 0, 1, -3.0f});
  }
  ASSERT_EQ(engine_.input(engine_.size() - 1).sampling.temperature, 0.6f);
  engine_.answer(engine_.size() - 1, {chunk_text(1)});
  const GenerateInput& in2 = engine_.input(engine_.size() - 1);
  EXPECT_EQ(engine_.chunk(engine_.size() - 1), 2);
  EXPECT_EQ(in2.prompt.front(), speech().sot());  // no <|startofprev|>
  for (size_t k = 2; k < n; ++k) {
    ASSERT_EQ(engine_.chunk(engine_.size() - 1), int(k));
    engine_.answer(engine_.size() - 1, {chunk_text(int(k))});
  }
  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value());
  EXPECT_EQ(rec_.done[0]->segments.size(), n);
}

TEST_F(TranscriptionTest, AtMostMaxChunksInFlightAndARerunKeepsItsSlot) {
  const std::vector<float> audio = speech_with_silences(2, 2.0);
  const size_t n = expected_chunks(audio).size();
  ASSERT_GE(n, 4u);
  TranscriptionContext c = context();
  c.settings.max_chunks_in_flight = 2;
  auto t = Transcription::start(std::move(c), audio, {}, rec_.events());
  ASSERT_EQ(engine_.size(), 2u);
  engine_.answer(1, {chunk_text(1)});  // final: chunk 2 takes its slot
  ASSERT_EQ(engine_.size(), 3u);
  EXPECT_EQ(engine_.chunk(2), 2);
  engine_.answer(0, {" bad", 0, 1, -3.0f});  // failed: its re-run keeps the slot
  ASSERT_EQ(engine_.size(), 4u);
  EXPECT_EQ(engine_.chunk(3), 0);
  EXPECT_EQ(engine_.input(3).sampling.temperature, 0.2f);
  engine_.answer(3, {chunk_text(0)});
  ASSERT_EQ(engine_.size(), 5u);
  EXPECT_EQ(engine_.chunk(4), 3);
  // The rest, each answered as it arrives (size() grows as slots pass on).
  for (size_t i = 2; i < engine_.size(); ++i)
    if (!engine_.request(i)->completed()) engine_.answer(i, {chunk_text(engine_.chunk(i))});
  EXPECT_EQ(engine_.size(), n + 1);
  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value());
  ASSERT_EQ(rec_.done[0]->segments.size(), n);
  for (size_t k = 0; k < n; ++k) EXPECT_EQ(rec_.done[0]->segments[k].text, chunk_text(int(k)));
}

TEST_F(TranscriptionTest, CancelEndsItOnceAndCancelsTheRequests) {
  const std::vector<float> audio = speech_with_silences(2, 2.0);
  const size_t n = expected_chunks(audio).size();
  auto t = Transcription::start(context(), audio, {}, rec_.events());
  engine_.answer(0, {chunk_text(0)});
  t->cancel();
  ASSERT_EQ(rec_.done.size(), 1u);
  EXPECT_EQ(rec_.done[0].status().code(), StatusCode::cancelled);
  for (size_t k = 1; k < n; ++k) EXPECT_TRUE(engine_.request(k)->cancelled()) << k;
  EXPECT_FALSE(engine_.request(0)->cancelled());
  // The engine then completes them (as cancelled, or with a late output): nothing more fires.
  engine_.request(1)->complete_cancelled();
  for (size_t k = 2; k < n; ++k) engine_.answer(k, {chunk_text(int(k))});
  t->cancel();
  EXPECT_EQ(rec_.done.size(), 1u);
  EXPECT_EQ(engine_.size(), n);
}

TEST_F(TranscriptionTest, CancelFromASegmentCallbackDoesNotDeadlock) {
  const std::vector<float> audio = speech_with_silences(2, 2.0);
  const size_t n = expected_chunks(audio).size();
  std::shared_ptr<Transcription> t;
  TranscriptionEvents e = rec_.events();
  e.on_segment = [&](const Segment& s) {
    rec_.segments.push_back(s);
    t->cancel();
  };
  t = Transcription::start(context(), audio, {}, std::move(e));
  engine_.answer(0, {chunk_text(0)});
  ASSERT_EQ(rec_.done.size(), 1u);
  EXPECT_EQ(rec_.done[0].status().code(), StatusCode::cancelled);
  EXPECT_EQ(rec_.segments.size(), 1u);
  for (size_t k = 1; k < n; ++k) EXPECT_TRUE(engine_.request(k)->cancelled());
}

TEST_F(TranscriptionTest, AnEngineErrorFailsItAndWithdrawsTheRest) {
  const std::vector<float> audio = speech_with_silences(2, 2.0);
  const size_t n = expected_chunks(audio).size();
  auto t = Transcription::start(context(), audio, {}, rec_.events());
  engine_.request(1)->complete(internal_error("boom"));
  ASSERT_EQ(rec_.done.size(), 1u);
  EXPECT_EQ(rec_.done[0].status().code(), StatusCode::internal);
  EXPECT_EQ(rec_.done[0].status().message(), "boom");
  for (size_t k = 0; k < n; ++k)
    if (k != 1) EXPECT_TRUE(engine_.request(k)->cancelled());
}

TEST_F(TranscriptionTest, ARefusedSubmitFailsIt) {
  const std::vector<float> audio = speech_with_silences(2, 2.0);
  engine_.refuse_from(2);
  auto t = Transcription::start(context(), audio, {}, rec_.events());
  ASSERT_EQ(rec_.done.size(), 1u);
  EXPECT_EQ(rec_.done[0].status().code(), StatusCode::resource_exhausted);
  ASSERT_EQ(engine_.size(), 2u);
  EXPECT_TRUE(engine_.request(0)->cancelled());
  EXPECT_TRUE(engine_.request(1)->cancelled());
}

TEST_F(TranscriptionTest, NoSpeechIsAnEmptyTranscript) {
  const std::vector<float> silence(size_t(5 * kRate), 0.0f);
  auto t = Transcription::start(context(), silence, {}, rec_.events());
  EXPECT_EQ(engine_.size(), 0u);
  ASSERT_EQ(rec_.done.size(), 1u);
  ASSERT_TRUE(rec_.done[0].has_value()) << rec_.done[0].status().message();
  EXPECT_TRUE(rec_.done[0]->segments.empty());
  EXPECT_EQ(rec_.done[0]->text, "");
  EXPECT_NEAR(rec_.done[0]->duration, 5.0, 1e-9);
  EXPECT_EQ(rec_.done[0]->stats.chunks, 0);

  Recorder empty;
  Transcription::start(context(), {}, {}, empty.events());
  ASSERT_EQ(empty.done.size(), 1u);
  ASSERT_TRUE(empty.done[0].has_value());
  EXPECT_EQ(empty.done[0]->duration, 0.0);
}

TEST_F(TranscriptionTest, BadRequestsAreRefusedBeforeAnySubmit) {
  const std::vector<float> audio = speech_with_silences(1, 1.0);
  auto expect_refused = [&](TranscriptionContext c, TranscribeOptions o, std::string_view words) {
    Recorder r;
    Transcription::start(std::move(c), audio, std::move(o), r.events());
    ASSERT_EQ(r.done.size(), 1u);
    ASSERT_FALSE(r.done[0].has_value());
    EXPECT_EQ(r.done[0].status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.done[0].status().message().find(words), std::string::npos) << r.done[0].status().message();
  };
  TranscribeOptions o;
  o.language = "xx";
  expect_refused(context(), o, "xx");
  o = {};
  o.temperature = 1.5f;
  expect_refused(context(), o, "temperature");
  o = {};
  o.fixed_tokens_per_chunk = 10000;
  expect_refused(context(), o, "fixed_tokens_per_chunk");
  TranscriptionContext c = context();
  c.settings.max_audio_seconds = 5;
  expect_refused(c, {}, "more than the limit of 5.0 s");
  EXPECT_EQ(engine_.size(), 0u);
}

TEST_F(TranscriptionTest, FixedTokensIgnoreEndOfText) {
  const std::vector<float> audio = speech_with_silences(1, 1.0);
  TranscribeOptions o;
  o.fixed_tokens_per_chunk = 17;
  auto t = Transcription::start(context(), audio, o, rec_.events());
  ASSERT_GE(engine_.size(), 1u);
  EXPECT_TRUE(engine_.input(0).sampling.ignore_eos);
  EXPECT_EQ(engine_.input(0).sampling.max_tokens, 17);
  t->cancel();
}

// ---- a real tiny Whisper through the generate engine ----

// tests/reference/whisper_family.py's tiny random checkpoint with the real multilingual
// vocabulary, and the test tokenizer files over it.
Result<std::string> tiny_whisper_dir() {
  PRISM_ASSIGN_OR_RETURN(std::string dir, test::generate_reference("whisper_family.py", "transcription_tiny_whisper",
                                                                   "write --vocab 51865 --no-reference"));
  PRISM_RETURN_IF_ERROR(test::write_whisper_files(dir).status());
  return dir;
}

// What one transcription on a real deployment reported, for a test thread waiting on it.
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> finished;  // names, in order of on_done
  std::map<std::string, Result<Transcript>> results;
  std::map<std::string, int> final_chunks;  // from on_progress
  std::map<std::string, int> others_final_at_done;  // the other transcription's final chunks then

  TranscriptionEvents events(const std::string& name, const std::string& other) {
    TranscriptionEvents e;
    e.on_progress = [this, name](int done, int) {
      std::lock_guard lock(mu);
      final_chunks[name] = done;
    };
    e.on_done = [this, name, other](Result<Transcript> t) {
      std::lock_guard lock(mu);
      finished.push_back(name);
      results.emplace(name, std::move(t));
      others_final_at_done[name] = final_chunks[other];
      cv.notify_all();
    };
    return e;
  }
  // A bound against a hang only; nothing is asserted on time.
  bool wait(size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::minutes(10), [&] { return finished.size() >= n; });
  }
};

TEST(RealWhisper, AShortFileCompletesWhileATenMinuteOneStillDecodes) {
  Result<std::string> dir = tiny_whisper_dir();
  ASSERT_TRUE(dir.has_value()) << dir.status().message();
  serving::DeploymentConfig config;
  config.name = "asr";
  config.task = "transcribe";
  config.model = *dir;
  config.batching.max_batch_size = 8;
  config.knobs.set("kv_cache_bytes", int64_t(16) << 20);
  serving::EngineFactories engines;
  engines::generate::register_generate_engine(engines);
  Result<serving::EngineKind> kind = engines.find("transcribe");
  ASSERT_TRUE(kind.has_value()) << kind.status().message();
  serving::MetricsRegistry metrics;
  serving::Deployment deployment(config, *kind, metrics);
  deployment.start();
  const Status ready = deployment.wait_ready();
  ASSERT_TRUE(ready.ok()) << ready.message();

  // 10 minutes: jfk.flac 40 times with 4 s of silence around each; then 3 s of it.
  const std::vector<float> long_audio = speech_with_silences(40, 4.0);
  ASSERT_GE(double(long_audio.size()) / kRate, 600.0);
  const std::vector<float> short_audio(jfk().begin(), jfk().begin() + ptrdiff_t(3 * kRate));

  const auto frontend = std::dynamic_pointer_cast<const GenerateFrontend>(deployment.frontend());
  ASSERT_TRUE(frontend && frontend->speech());
  // The long one's chunk segments, as submitted.
  std::mutex features_mu;
  std::vector<std::shared_ptr<const std::vector<float>>> long_features;
  auto context = [&](bool record) {
    TranscriptionContext c;
    c.frontend = frontend;
    c.vad = energy_vad();
    c.settings.max_chunks_in_flight = config.batching.max_batch_size;  // as AsrServices sets it
    c.submit = [&, record](serving::RequestPtr r) {
      if (record) {
        const auto& in = dynamic_cast<const GenerateInput&>(*r->input);
        std::lock_guard lock(features_mu);
        if (long_features.empty() || long_features.back() != in.audio->features)
          long_features.push_back(in.audio->features);
      }
      return deployment.submit(std::move(r));
    };
    return c;
  };

  // Random weights never stop: a fixed decode length, longer for the long file's 30 s chunks
  // than for the 3 s one (speech makes tokens at a roughly constant rate), and no fallback
  // (every random decode fails the checks).
  TranscribeOptions long_options, short_options;
  long_options.language = short_options.language = "en";
  long_options.temperature_fallback = short_options.temperature_fallback = false;
  long_options.fixed_tokens_per_chunk = 40;
  short_options.fixed_tokens_per_chunk = 4;
  Waiter w;
  auto long_t = Transcription::start(context(true), long_audio, long_options, w.events("long", "short"));
  auto short_t = Transcription::start(context(false), short_audio, short_options, w.events("short", "long"));
  ASSERT_TRUE(w.wait(2)) << "the transcriptions did not finish";
  deployment.stop();

  const Result<Transcript>& lt = w.results.at("long");
  const Result<Transcript>& st = w.results.at("short");
  ASSERT_TRUE(lt.has_value()) << lt.status().message();
  ASSERT_TRUE(st.has_value()) << st.status().message();
  // No head-of-line blocking: the short file finished first, while the long one still had
  // chunks to decode.
  EXPECT_EQ(w.finished, (std::vector<std::string>{"short", "long"}));
  EXPECT_LT(w.others_final_at_done.at("short"), lt->stats.chunks);
  // It waited for one batch of the long one's chunks at most (those running when it came;
  // with a fixed length they all end at the same step), never behind the rest of the file.
  EXPECT_LE(w.others_final_at_done.at("short"), config.batching.max_batch_size);
  std::printf("long: %d chunks, %d final when the 3 s file was done\n", lt->stats.chunks,
              w.others_final_at_done.at("short"));

  // The long one's chunks are the plan over every VAD span, each decoded once for 40 tokens.
  const std::vector<Chunk> plan = plan_chunks(energy_vad()->spans(long_audio).value(), int64_t(30 * kRate));
  ASSERT_GE(plan.size(), 15u);
  EXPECT_EQ(lt->stats.chunks, int(plan.size()));
  EXPECT_EQ(lt->stats.decoded_tokens, int64_t(plan.size()) * 40);
  EXPECT_EQ(st->stats.decoded_tokens, int64_t(st->stats.chunks) * 4);
  ASSERT_EQ(long_features.size(), plan.size());
  const int n_mels = frontend->speech()->num_mel_bins();
  for (size_t k = 0; k < plan.size(); ++k) {
    const media::LogMel mel = media::log_mel_spectrogram(
        std::span(long_audio).subspan(size_t(plan[k].start), size_t(plan[k].end - plan[k].start)), n_mels);
    EXPECT_EQ(*long_features[k], mel.values) << "chunk " << k;
  }
  double previous_start = 0;
  for (const Segment& s : lt->segments) {
    EXPECT_GE(s.start, previous_start);
    EXPECT_LE(s.start, s.end);
    EXPECT_LE(s.end, lt->duration);
    previous_start = s.start;
  }
}

// ---- chunk_decode's pieces ----

TEST(ChunkDecode, WhisperAvgLogprob) {
  std::vector<frontends::TokenLogprobs> lp = {{{1, -0.5f}, {}}, {{2, -1.5f}, {}}};
  EXPECT_FLOAT_EQ(whisper_avg_logprob(lp, -0.25f), (-0.5f - 1.5f - 0.25f) / 3);
  EXPECT_FLOAT_EQ(whisper_avg_logprob(lp, std::nullopt), (-0.5f - 1.5f) / 3);
  EXPECT_FLOAT_EQ(whisper_avg_logprob({}, -0.5f), -0.5f);
}

TEST(ChunkDecode, ReadCountsTheEndOfTextAndSkipsForcedLanguageTokens) {
  const SpeechProcessor& sp = *whisper_frontend()->speech();
  const int32_t en = *sp.language_token("en");
  const std::vector<int32_t> text = sp.encode_text("hello world");
  GenerateOutput out;
  frontends::ChoiceDelta c;
  // Detected language and forced task first (not counted), then <|0.00|> text <|1.00|>.
  const int32_t transcribe = en + 100;  // <|transcribe|>: 50359 = <|en|> 50259 + 100 (99 languages, translate)
  c.tokens = {en, transcribe, sp.timestamp_begin()};
  c.tokens.insert(c.tokens.end(), text.begin(), text.end());
  c.tokens.push_back(sp.timestamp_begin() + 50);
  for (const int32_t t : c.tokens) c.logprobs.push_back({{t, t == en ? -9.0f : -0.5f}, {}});
  c.finish = frontends::FinishReason::stop;
  out.choices.push_back(c);
  out.completion_tokens = int64_t(c.tokens.size()) + 1;
  ChunkDecodeProbe probe;
  probe.observations[0] = {0.25f, "en", 0.9f};
  probe.last_step = int64_t(c.tokens.size());
  probe.eot_logprob = -0.75f;
  const DecodedChunk d = read_chunk_decode(sp, out, probe, 0.4f);
  const double counted = double(text.size() + 2);  // text and two timestamps
  EXPECT_NEAR(d.avg_logprob, (-0.5 * counted - 0.75) / (counted + 1), 1e-6);
  EXPECT_EQ(d.text, " hello world");
  EXPECT_EQ(d.language, "en");
  EXPECT_EQ(d.no_speech_prob, 0.25f);
  EXPECT_EQ(d.temperature, 0.4f);
  EXPECT_EQ(d.decoded_tokens, out.completion_tokens);
  EXPECT_EQ(d.verdict, Verdict::ok);
  // Ended by the length limit: the end-of-text logprob of some earlier step does not count.
  out.choices[0].finish = frontends::FinishReason::length;
  EXPECT_NEAR(read_chunk_decode(sp, out, probe, 0).avg_logprob, (-0.5 * counted) / (counted + 1), 1e-6);
}

TEST(ChunkDecode, TheHookNotesTheEndOfTextLogprobOfTheProcessedRow) {
  const GenerateFrontend& fe = *whisper_frontend();
  const SpeechProcessor& sp = *fe.speech();
  ChunkDecodeSpec spec;
  spec.speech.language = "en";
  spec.speech.timestamps = false;
  spec.features = std::make_shared<const std::vector<float>>(size_t(80 * 3000), 0.0f);
  spec.frames = 3000;
  spec.temperature = 0.2f;  // sampling: any token may end it, so the value is always exact
  ChunkDecode d = make_chunk_decode(fe, spec);
  std::unique_ptr<frontends::LogitsProcessor> p = d.input->logits_processor(0);
  std::vector<float> row(size_t(fe.vocab_size()));
  for (size_t i = 0; i < row.size(); ++i) row[i] = float(std::sin(double(i)) * 3.0);
  const std::vector<int32_t> generated = sp.encode_text("hello");
  p->process(row, generated);
  // Whatever the rules did to the row, the hook saw the result.
  double max = -INFINITY, sum = 0;
  for (const float v : row) max = std::max(max, double(v));
  for (const float v : row) sum += std::exp(double(v) - max);
  EXPECT_EQ(d.probe->last_step, int64_t(generated.size()));
  EXPECT_NEAR(d.probe->eot_logprob, double(row[size_t(sp.eot())]) - max - std::log(sum), 1e-4);
  EXPECT_TRUE(std::isfinite(d.probe->eot_logprob));

  // Greedy: exact where end-of-text is the row's maximum (the only place it can be picked).
  spec.temperature = 0.0f;
  ChunkDecode g = make_chunk_decode(fe, spec);
  std::unique_ptr<frontends::LogitsProcessor> gp = g.input->logits_processor(0);
  std::vector<float> flat(size_t(fe.vocab_size()), 0.0f);
  flat[size_t(sp.eot())] = 5.0f;
  gp->process(flat, generated);
  max = -INFINITY, sum = 0;
  for (const float v : flat) max = std::max(max, double(v));
  for (const float v : flat) sum += std::exp(double(v) - max);
  EXPECT_EQ(max, 5.0);
  EXPECT_NEAR(g.probe->eot_logprob, 5.0 - max - std::log(sum), 1e-5);
}

TEST(ChunkDecode, BestAttempt) {
  std::vector<DecodedChunk> a(3);
  a[0].avg_logprob = -1.2f, a[0].compression_ratio = 1.5f;
  a[1].avg_logprob = -0.5f, a[1].compression_ratio = 3.0f;  // best logprob, but a loop
  a[2].avg_logprob = -1.1f, a[2].compression_ratio = 2.0f;
  EXPECT_EQ(best_attempt(a), 2u);
  a[0].compression_ratio = a[2].compression_ratio = 2.5f;  // all loops: best logprob of all
  EXPECT_EQ(best_attempt(a), 1u);
}

// ---- knobs ----

TEST(TranscribeSettings, FromKnobs) {
  serving::Knobs k;
  Result<TranscribeSettings> s = TranscribeSettings::from_knobs(k);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->chunk_seconds, 30.0);
  EXPECT_TRUE(s->parallel_chunks);
  k.set("asr_chunk_seconds", int64_t(20));
  k.set("asr_parallel_chunks", false);
  k.set("max_audio_seconds", 600.0);
  s = TranscribeSettings::from_knobs(k);
  ASSERT_TRUE(s.has_value()) << s.status().message();
  EXPECT_EQ(s->chunk_seconds, 20.0);
  EXPECT_FALSE(s->parallel_chunks);
  EXPECT_EQ(s->max_audio_seconds, 600.0);

  k.set("asr_chunk_seconds", 45.0, "deploy.toml:7");
  s = TranscribeSettings::from_knobs(k);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(s.status().message().find("deploy.toml:7: knob 'asr_chunk_seconds'"), std::string::npos)
      << s.status().message();
  k.set("asr_chunk_seconds", 30.0);
  k.set("max_audio_seconds", -1.0);
  EXPECT_FALSE(TranscribeSettings::from_knobs(k).has_value());
  k.set("max_audio_seconds", 10.0);
  k.set("asr_parallel_chunks", std::string("yes"));
  EXPECT_FALSE(TranscribeSettings::from_knobs(k).has_value());

  const std::vector<std::string> names = TranscribeSettings::knob_names();
  for (const char* n : {"asr_chunk_seconds", "asr_parallel_chunks", "max_audio_seconds", "vad", "vad_threshold"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

}  // namespace
}  // namespace prism::pipelines::transcribe
