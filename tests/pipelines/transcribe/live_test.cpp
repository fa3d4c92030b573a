// LiveScheduler / LiveStream over a fake submit that answers scripted text. The audio is real
// speech (jfk.flac, decoded by media::decode_audio) with silences, scored by the deployment's
// energy VAD; the speech processor is the real one over Whisper-shaped tokenizer files. Most
// tests tick the scheduler by hand (LiveHooks::manual_ticks) with a fake clock, so they assert
// on what happens after which audio, never on time: the order of events for speech and
// silence, the partial cadence and windows, commit, clear, the maximum utterance, a final
// re-run at the next temperature, a stall and a flood closing only their stream, the knobs,
// the metrics; one test runs the real scheduler thread with 8 streams at once.
#include "pipelines/transcribe/live.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "base/file.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "media/audio.h"
#include "media/log_mel.h"
#include "serving/metrics.h"
#include "test_util/paths.h"
#include "test_util/speech_samples.h"
#include "test_util/whisper_tokenizer.h"

namespace prism::pipelines::transcribe {
namespace {

using frontends::GenerateFrontend;
using frontends::GenerateInput;
using frontends::GenerateOutput;
using frontends::SpeechProcessor;
using serving::Clock;

constexpr int kRate = media::kSpeechSampleRate;

// ---- shared fixtures ---------------------------------------------------------------------------

std::shared_ptr<const GenerateFrontend> whisper_frontend() {
  static const std::shared_ptr<const GenerateFrontend> frontend = [] {
    const std::string dir = test::scratch_dir("live_test_whisper");
    Result<test::WhisperTokenIds> ids = test::write_whisper_files(dir);
    PRISM_CHECK_MSG(ids.has_value(), "write_whisper_files failed");
    serving::DeploymentConfig config;
    config.name = "whisper";
    config.task = "transcribe";
    config.model = dir;
    Result<std::shared_ptr<const GenerateFrontend>> fe = GenerateFrontend::load(config);
    PRISM_CHECK_MSG(fe.has_value(), "GenerateFrontend::load failed");
    return *fe;
  }();
  return frontend;
}

std::shared_ptr<const VoiceActivity> energy_vad() {
  static const std::shared_ptr<const VoiceActivity> vad = [] {
    Result<std::shared_ptr<const VoiceActivity>> v = VoiceActivity::connect(VadSettings{}, nullptr);
    PRISM_CHECK_MSG(v.has_value(), "VoiceActivity::connect failed");
    return *v;
  }();
  return vad;
}

using test::jfk;

std::vector<float> silence(double seconds) { return std::vector<float>(size_t(seconds * kRate), 0.0f); }

std::vector<float> concat(std::initializer_list<std::vector<float>> parts) {
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// ---- the fake engine ---------------------------------------------------------------------------

struct Seen {
  bool final = false;  // 30 s of features (finals); partials have fewer frames
  int64_t frames = 0;
  float temperature = 0;
  std::vector<int32_t> prompt;
};

// Answers decodes with scripted text: partials " w1 w2 ... wN" (N grows with every partial),
// finals "<|0.00|> final <|1.00|>". auto_answer completes each request inside submit (on the
// scheduler's thread); else they wait for answer_all().
class FakeEngine {
 public:
  const SpeechProcessor& speech() const { return *whisper_frontend()->speech(); }

  Status submit(serving::RequestPtr r) {
    bool now = false;
    {
      std::lock_guard lock(mu_);
      if (refuse_) return resource_exhausted("queue full");
      const auto* in = dynamic_cast<const GenerateInput*>(r->input.get());
      PRISM_CHECK(in != nullptr && in->audio.has_value());
      seen_.push_back(
          {in->audio->frames == media::kWhisperChunkFrames, in->audio->frames, in->sampling.temperature, in->prompt});
      now = auto_answer_;
      if (!now) held_.push_back(r);
    }
    if (now) answer(r);
    cv_.notify_all();
    return Status();
  }
  std::function<Status(serving::RequestPtr)> submit_fn() {
    return [this](serving::RequestPtr r) { return submit(std::move(r)); };
  }

  void answer_all() {
    std::vector<serving::RequestPtr> held;
    {
      std::lock_guard lock(mu_);
      held.swap(held_);
    }
    for (auto& r : held) answer(r);
  }
  std::vector<Seen> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }
  size_t held() const {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  void set_auto(bool on) { auto_answer_ = on; }
  void set_refuse(bool on) {
    std::lock_guard lock(mu_);
    refuse_ = on;
  }
  void set_final_logprob(float lp) {
    std::lock_guard lock(mu_);
    final_logprob_ = lp;
  }

 private:
  void answer(const serving::RequestPtr& r) {
    const auto& in = dynamic_cast<const GenerateInput&>(*r->input);
    const bool final = in.audio->frames == media::kWhisperChunkFrames;
    std::vector<int32_t> tokens;
    float lp = -0.1f;
    if (final) {
      std::lock_guard lock(mu_);
      lp = final_logprob_;
      final_logprob_ = -0.1f;  // a re-run succeeds
      tokens.push_back(speech().timestamp_begin());
      for (int32_t t : speech().encode_text("final words")) tokens.push_back(t);
      tokens.push_back(speech().timestamp_begin() + 50);  // <|1.00|>
    } else {
      std::string text;
      {
        std::lock_guard lock(mu_);
        ++partials_answered_;
        for (int i = 1; i <= partials_answered_; ++i) text += " w" + std::to_string(i);
      }
      tokens = speech().encode_text(text);
    }
    auto out = std::make_unique<GenerateOutput>();
    frontends::ChoiceDelta c;
    c.tokens = tokens;
    for (int32_t t : tokens) c.logprobs.push_back({{t, lp}, {}});
    c.finish = frontends::FinishReason::stop;
    out->completion_tokens = int64_t(tokens.size()) + 1;
    out->choices.push_back(std::move(c));
    r->complete(serving::PayloadPtr(std::move(out)));
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Seen> seen_;
  std::vector<serving::RequestPtr> held_;
  std::atomic<bool> auto_answer_{true};
  bool refuse_ = false;
  float final_logprob_ = -0.1f;
  int partials_answered_ = 0;
};

// ---- what a stream reported ----------------------------------------------------------------------

struct Event {
  std::string kind;  // started, partial, stopped, committed, final, final_failed, error
  int64_t item = -1;
  double a = 0, b = 0;  // started: start; stopped: end; committed/partial: [start, end)
  std::string text;
  Status status;
  Transcript transcript;
};

class Recorder {
 public:
  LiveStreamEvents events() {
    LiveStreamEvents e;
    e.on_speech_started = [this](int64_t item, double s) { add({"started", item, s, 0, {}, {}, {}}); };
    e.on_speech_stopped = [this](int64_t item, double s) { add({"stopped", item, s, 0, {}, {}, {}}); };
    e.on_committed = [this](int64_t item, double s, double t) { add({"committed", item, s, t, {}, {}, {}}); };
    e.on_partial = [this](const LivePartial& p) { add({"partial", p.item, p.start, p.end, p.text, {}, {}}); };
    e.on_final = [this](int64_t item, const Transcript& t) { add({"final", item, 0, 0, t.text, {}, t}); };
    e.on_final_failed = [this](int64_t item, const Status& s) { add({"final_failed", item, 0, 0, {}, s, {}}); };
    e.on_error = [this](const Status& s) { add({"error", -1, 0, 0, {}, s, {}}); };
    return e;
  }
  std::vector<Event> all() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  std::vector<Event> of(const std::string& kind) const {
    std::vector<Event> out;
    for (const Event& e : all())
      if (e.kind == kind) out.push_back(e);
    return out;
  }
  // Waits (up to a minute: a deadline for a hung test, not a timing assertion).
  bool wait_for(const std::function<bool(const std::vector<Event>&)>& done) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return done(events_); });
  }

 private:
  void add(Event e) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> events_;
};

size_t count(const std::vector<Event>& events, const std::string& kind) {
  return size_t(std::count_if(events.begin(), events.end(), [&](const Event& e) { return e.kind == kind; }));
}

// ---- the fixture ---------------------------------------------------------------------------------

class LiveTest : public ::testing::Test {
 protected:
  std::shared_ptr<LiveScheduler> scheduler(LiveSettings settings = {}, bool manual = true) {
    TranscriptionContext c;
    c.frontend = whisper_frontend();
    c.vad = energy_vad();
    c.submit = engine_.submit_fn();
    c.metrics = metrics_;
    LiveHooks hooks;
    hooks.manual_ticks = manual;
    hooks.now = [this] {
      std::lock_guard lock(clock_mu_);
      return now_;
    };
    scheduler_ = LiveScheduler::create(std::move(c), settings, std::move(hooks));
    return scheduler_;
  }
  void advance(double seconds) {
    std::lock_guard lock(clock_mu_);
    now_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  std::shared_ptr<LiveStream> open(Recorder& rec, LiveStreamOptions options = {}) {
    Result<std::shared_ptr<LiveStream>> s = scheduler_->open(std::move(options), rec.events());
    EXPECT_TRUE(s.has_value()) << s.status().to_string();
    return s.has_value() ? *s : nullptr;
  }
  // Appends `samples` in chunks of `chunk_seconds`, advancing the clock by as much and ticking
  // after each.
  void feed(LiveStream& s, std::span<const float> samples, double chunk_seconds = 0.1) {
    const auto n = size_t(chunk_seconds * kRate);
    for (size_t i = 0; i < samples.size(); i += n) {
      ASSERT_TRUE(s.append(samples.subspan(i, std::min(n, samples.size() - i))).ok());
      advance(chunk_seconds);
      scheduler_->tick();
    }
  }
  void TearDown() override {
    if (scheduler_) scheduler_->stop();
  }

  std::mutex clock_mu_;
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  serving::MetricsRegistry registry_;
  std::shared_ptr<AsrMetrics> metrics_ =
      std::make_shared<AsrMetrics>(registry_, serving::Labels{{"deployment", "w"}, {"modality", "asr"}});
  FakeEngine engine_;
  std::shared_ptr<LiveScheduler> scheduler_;
};

LiveStreamOptions no_vad() {
  LiveStreamOptions o;
  o.server_vad = false;
  return o;
}

// ---- tests -----------------------------------------------------------------------------------------

TEST_F(LiveTest, SpeechBetweenSilencesGivesEventsInOrder) {
  scheduler();
  Recorder rec;
  LiveStreamOptions o;
  media::VadParams vad = energy_vad()->settings().params;
  vad.min_silence_ms = 700;  // jfk's pauses are shorter: one item per sentence group at most
  o.vad = vad;
  auto stream = open(rec, o);
  const std::vector<float> audio = concat({silence(1.0), jfk(), silence(2.0)});
  feed(*stream, audio);
  for (int i = 0; i < 5; ++i) scheduler_->tick();

  const std::vector<Event> events = rec.all();
  const std::vector<Event> started = rec.of("started");
  ASSERT_GE(started.size(), 1u);
  ASSERT_EQ(rec.of("stopped").size(), started.size());
  ASSERT_EQ(rec.of("committed").size(), started.size());
  ASSERT_EQ(rec.of("final").size(), started.size());
  EXPECT_EQ(count(events, "error"), 0u);
  EXPECT_GE(count(events, "partial"), 3u);

  // Speech starts after the leading silence and ends before the trailing one is over; items
  // count up from 0, each: started < partials < stopped < committed < final.
  const double jfk_end = 1.0 + double(jfk().size()) / kRate;
  EXPECT_GE(started.front().a, 0.9);
  EXPECT_LT(started.front().a, 2.0);
  const Event last_stop = rec.of("stopped").back();
  EXPECT_GT(last_stop.a, jfk_end - 1.5);
  EXPECT_LE(last_stop.a, jfk_end + 0.8);
  int64_t item = -1;
  std::string state = "final";
  double item_start = 0, item_end = 0;
  for (const Event& e : events) {
    if (e.kind == "started") {
      ASSERT_EQ(state, "final");
      ASSERT_EQ(e.item, item + 1);
      item = e.item;
      item_start = e.a;
      state = "started";
    } else if (e.kind == "partial") {
      ASSERT_EQ(e.item, item);
      ASSERT_TRUE(state == "started" || state == "partial");
      EXPECT_GE(e.a, item_start - 1e-9);
      EXPECT_LE(e.b - e.a, LiveSettings{}.window_seconds + 1e-9);
      state = "partial";
    } else if (e.kind == "stopped") {
      ASSERT_EQ(e.item, item);
      item_end = e.a;
      EXPECT_GT(item_end, item_start);
      state = "stopped";
    } else if (e.kind == "committed") {
      ASSERT_EQ(state, "stopped");
      EXPECT_DOUBLE_EQ(e.a, item_start);
      EXPECT_DOUBLE_EQ(e.b, item_end);
      state = "committed";
    } else if (e.kind == "final") {
      ASSERT_EQ(state, "committed");
      ASSERT_EQ(e.item, item);
      EXPECT_EQ(e.text, " final words");
      ASSERT_EQ(e.transcript.segments.size(), 1u);
      EXPECT_DOUBLE_EQ(e.transcript.segments[0].start, item_start);
      EXPECT_LE(e.transcript.segments[0].end, item_end + 1e-9);
      EXPECT_NEAR(e.transcript.duration, item_end - item_start, 1e-9);
      state = "final";
    }
  }
  EXPECT_EQ(state, "final");

  // Finals decode 30 s with timestamps; partials their window, an even number of frames.
  const std::vector<Seen> seen = engine_.seen();
  size_t finals = 0;
  for (const Seen& s : seen) {
    if (s.final) {
      ++finals;
      continue;
    }
    EXPECT_EQ(s.frames % 2, 0);
    EXPECT_LE(s.frames, int64_t(LiveSettings{}.window_seconds * kRate / media::kWhisperHop) + 2);
  }
  EXPECT_EQ(finals, started.size());
}

TEST_F(LiveTest, PartialsFollowTheCadenceOneInFlightPerStream) {
  LiveSettings settings;
  settings.partial_ms = 200;
  settings.window_seconds = 1.0;
  scheduler(settings);
  engine_.set_auto(false);
  Recorder rec;
  auto stream = open(rec, no_vad());
  const std::vector<float>& speech = jfk();
  std::span<const float> audio(speech);

  feed(*stream, audio.subspan(0, 1600));  // 100 ms: not yet
  EXPECT_EQ(engine_.seen().size(), 0u);
  feed(*stream, audio.subspan(1600, 1600));  // 200 ms: the first partial
  ASSERT_EQ(engine_.seen().size(), 1u);
  EXPECT_FALSE(engine_.seen()[0].final);
  EXPECT_EQ(engine_.seen()[0].frames, 3200 / media::kWhisperHop);
  feed(*stream, audio.subspan(3200, 20800));  // 1.3 s more: still in flight, no other
  EXPECT_EQ(engine_.seen().size(), 1u);
  engine_.answer_all();
  ASSERT_EQ(rec.of("partial").size(), 1u);
  EXPECT_DOUBLE_EQ(rec.of("partial")[0].a, 0.0);
  EXPECT_DOUBLE_EQ(rec.of("partial")[0].b, 0.2);
  scheduler_->tick();  // 1.3 s arrived since: the next partial, over the last 1 s
  ASSERT_EQ(engine_.seen().size(), 2u);
  EXPECT_EQ(engine_.seen()[1].frames, 16000 / media::kWhisperHop);
  engine_.answer_all();
  const Event p = rec.of("partial").back();
  EXPECT_NEAR(p.a, 0.5, 1e-9);
  EXPECT_NEAR(p.b, 1.5, 1e-9);
  // With 100 ms more (less than partial_ms): nothing new; with 200 ms, the next.
  feed(*stream, audio.subspan(24000, 1600));
  EXPECT_EQ(engine_.seen().size(), 2u);
  feed(*stream, audio.subspan(25600, 1600));
  EXPECT_EQ(engine_.seen().size(), 3u);
  // A window shorter than a frame pair is still an even number of frames.
  for (const Seen& s : engine_.seen()) EXPECT_EQ(s.frames % 2, 0);
}

TEST_F(LiveTest, CommitEndsTheItemAndNeedsAudio) {
  scheduler();
  Recorder rec;
  auto stream = open(rec, no_vad());
  Status empty = stream->commit();
  EXPECT_EQ(empty.code(), StatusCode::invalid_argument);
  EXPECT_NE(empty.message().find("buffer too small"), std::string::npos) << empty.message();

  std::span<const float> audio(jfk());
  feed(*stream, audio.subspan(0, 2 * kRate), 0.25);
  ASSERT_TRUE(stream->commit().ok());
  EXPECT_EQ(stream->commit().code(), StatusCode::invalid_argument);  // nothing since
  scheduler_->tick();
  ASSERT_EQ(rec.of("committed").size(), 1u);
  EXPECT_EQ(rec.of("committed")[0].item, 0);
  EXPECT_DOUBLE_EQ(rec.of("committed")[0].a, 0.0);
  EXPECT_DOUBLE_EQ(rec.of("committed")[0].b, 2.0);
  ASSERT_EQ(rec.of("final").size(), 1u);
  EXPECT_EQ(rec.of("final")[0].text, " final words");
  EXPECT_TRUE(rec.of("started").empty());  // no VAD: no speech events

  feed(*stream, audio.subspan(2 * kRate, kRate / 2));
  ASSERT_TRUE(stream->commit().ok());
  scheduler_->tick();
  ASSERT_EQ(rec.of("committed").size(), 2u);
  EXPECT_EQ(rec.of("committed")[1].item, 1);
  EXPECT_DOUBLE_EQ(rec.of("committed")[1].a, 2.0);
  EXPECT_DOUBLE_EQ(rec.of("committed")[1].b, 2.5);
  ASSERT_EQ(rec.of("final").size(), 2u);
  EXPECT_DOUBLE_EQ(rec.of("final")[1].transcript.segments.at(0).start, 2.0);
  EXPECT_DOUBLE_EQ(rec.of("final")[1].transcript.segments.at(0).end, 2.5);  // clipped to the item
}

TEST_F(LiveTest, ClearDropsBufferedAudio) {
  scheduler();
  Recorder rec;
  auto stream = open(rec, no_vad());
  std::span<const float> audio(jfk());
  feed(*stream, audio.subspan(0, kRate));
  const size_t partials_before = rec.of("partial").size();
  stream->clear();
  EXPECT_EQ(stream->commit().code(), StatusCode::invalid_argument);  // the buffer is empty now
  ASSERT_TRUE(stream->append(audio.subspan(kRate, kRate / 2)).ok());
  ASSERT_TRUE(stream->commit().ok());
  scheduler_->tick();
  scheduler_->tick();
  ASSERT_EQ(rec.of("committed").size(), 1u);
  const Event c = rec.of("committed")[0];
  EXPECT_DOUBLE_EQ(c.a, 1.0);  // stream time goes on; the cleared second is not in the item
  EXPECT_DOUBLE_EQ(c.b, 1.5);
  EXPECT_EQ(rec.of("final").size(), 1u);
  // Partials after the clear are of the new item only.
  const std::vector<Event> partials = rec.of("partial");
  for (size_t i = partials_before; i < partials.size(); ++i) EXPECT_EQ(partials[i].item, c.item);
}

TEST_F(LiveTest, LongSpeechIsCutAtTheMaximumUtterance) {
  LiveSettings settings;
  settings.max_utterance_seconds = 2.0;
  scheduler(settings);
  Recorder rec;
  auto stream = open(rec, no_vad());
  std::span<const float> audio(jfk());
  feed(*stream, audio.subspan(0, 5 * kRate));
  ASSERT_TRUE(stream->commit().ok());
  scheduler_->tick();
  const std::vector<Event> committed = rec.of("committed");
  ASSERT_EQ(committed.size(), 3u);
  const double bounds[][2] = {{0, 2}, {2, 4}, {4, 5}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(committed[i].item, int64_t(i));
    EXPECT_DOUBLE_EQ(committed[i].a, bounds[i][0]);
    EXPECT_DOUBLE_EQ(committed[i].b, bounds[i][1]);
  }
  EXPECT_EQ(rec.of("final").size(), 3u);
}

TEST_F(LiveTest, AFailedFinalIsDecodedAgainAtTheNextTemperature) {
  scheduler();
  engine_.set_final_logprob(-2.0f);  // avg_logprob < -1: failed
  Recorder rec;
  auto stream = open(rec, no_vad());
  feed(*stream, std::span<const float>(jfk()).subspan(0, kRate));
  ASSERT_TRUE(stream->commit().ok());
  scheduler_->tick();
  std::vector<float> final_temperatures;
  for (const Seen& s : engine_.seen())
    if (s.final) final_temperatures.push_back(s.temperature);
  EXPECT_EQ(final_temperatures, (std::vector<float>{0.0f, 0.2f}));
  ASSERT_EQ(rec.of("final").size(), 1u);
  EXPECT_FLOAT_EQ(rec.of("final")[0].transcript.segments.at(0).temperature, 0.2f);
  EXPECT_EQ(rec.of("final")[0].transcript.stats.rerun_chunks, 1);
}

TEST_F(LiveTest, ARefusedFinalIsReportedAndTheStreamGoesOn) {
  scheduler();
  Recorder rec;
  auto stream = open(rec, no_vad());
  feed(*stream, std::span<const float>(jfk()).subspan(0, kRate / 2));
  engine_.set_refuse(true);
  ASSERT_TRUE(stream->commit().ok());
  scheduler_->tick();
  ASSERT_EQ(rec.of("final_failed").size(), 1u);
  EXPECT_EQ(rec.of("final_failed")[0].status.code(), StatusCode::resource_exhausted);
  engine_.set_refuse(false);
  feed(*stream, std::span<const float>(jfk()).subspan(kRate, kRate / 2));
  ASSERT_TRUE(stream->commit().ok());
  scheduler_->tick();
  EXPECT_EQ(rec.of("final").size(), 1u);
  EXPECT_FALSE(stream->closed());
}

TEST_F(LiveTest, AStalledStreamIsClosedAndOnlyIt) {
  LiveSettings settings;
  settings.stall_seconds = 5.0;
  scheduler(settings);
  Recorder a_rec, b_rec;
  auto a = open(a_rec, no_vad());
  auto b = open(b_rec, no_vad());
  std::span<const float> audio(jfk());
  ASSERT_TRUE(a->append(audio.subspan(0, kRate)).ok());
  ASSERT_TRUE(b->append(audio.subspan(0, kRate)).ok());
  scheduler_->tick();
  advance(4.0);
  ASSERT_TRUE(a->append(audio.subspan(kRate, kRate)).ok());
  scheduler_->tick();
  EXPECT_TRUE(b_rec.of("error").empty());
  advance(2.0);  // b: 6 s without audio; a: 2 s
  scheduler_->tick();
  ASSERT_EQ(b_rec.of("error").size(), 1u);
  EXPECT_EQ(b_rec.of("error")[0].status.code(), StatusCode::deadline_exceeded);
  EXPECT_TRUE(b->closed());
  EXPECT_EQ(b->append(audio.subspan(0, 100)).code(), StatusCode::failed_precondition);
  EXPECT_EQ(scheduler_->open_streams(), 1);

  EXPECT_TRUE(a_rec.of("error").empty());
  ASSERT_TRUE(a->commit().ok());
  scheduler_->tick();
  EXPECT_EQ(a_rec.of("final").size(), 1u);
}

TEST_F(LiveTest, AFloodingStreamIsClosedAndOnlyIt) {
  scheduler();
  Recorder a_rec, b_rec;
  auto a = open(a_rec, no_vad());
  auto b = open(b_rec);
  std::vector<float> minute(size_t(61 * kRate), 0.01f);
  Status s = a->append(minute);
  EXPECT_EQ(s.code(), StatusCode::resource_exhausted);
  ASSERT_EQ(a_rec.of("error").size(), 1u);
  EXPECT_EQ(a_rec.of("error")[0].status.code(), StatusCode::resource_exhausted);
  EXPECT_TRUE(a->closed());
  feed(*b, std::span<const float>(jfk()).subspan(0, kRate));
  EXPECT_TRUE(b_rec.of("error").empty());
  EXPECT_FALSE(b->closed());
}

TEST_F(LiveTest, OptionsAreCheckedAndUsed) {
  scheduler();
  Recorder rec;
  LiveStreamOptions bad;
  bad.language = "xx";
  EXPECT_EQ(scheduler_->open(bad, rec.events()).status().code(), StatusCode::invalid_argument);
  LiveStreamOptions bad_vad;
  bad_vad.vad = media::VadParams{};
  bad_vad.vad->threshold = 1.5f;
  EXPECT_EQ(scheduler_->open(bad_vad, rec.events()).status().code(), StatusCode::invalid_argument);

  LiveStreamOptions o = no_vad();
  o.language = "French";
  o.prompt = "Bonjour";
  auto stream = open(rec, o);
  feed(*stream, std::span<const float>(jfk()).subspan(0, kRate / 2));
  ASSERT_TRUE(stream->commit().ok());
  scheduler_->tick();
  const SpeechProcessor& speech = *whisper_frontend()->speech();
  const std::vector<Seen> seen = engine_.seen();
  ASSERT_FALSE(seen.empty());
  for (const Seen& s : seen)
    EXPECT_NE(std::find(s.prompt.begin(), s.prompt.end(), *speech.language_token("fr")), s.prompt.end());
  // The prompt text conditions every decode: <|startofprev|> first.
  for (const Seen& s : seen) EXPECT_NE(s.prompt.front(), speech.sot());

  // update(): a bad language is refused; a good one applies from the next tick on.
  EXPECT_EQ(stream->update(bad).code(), StatusCode::invalid_argument);
  LiveStreamOptions en = no_vad();
  en.language = "en";
  ASSERT_TRUE(stream->update(en).ok());
  feed(*stream, std::span<const float>(jfk()).subspan(kRate, kRate / 2));
  ASSERT_TRUE(stream->commit().ok());
  scheduler_->tick();
  const Seen last = engine_.seen().back();
  EXPECT_NE(std::find(last.prompt.begin(), last.prompt.end(), *speech.language_token("en")), last.prompt.end());
  EXPECT_EQ(last.prompt.front(), speech.sot());
}

TEST_F(LiveTest, MetricsCountStreamsAndPartialLatency) {
  scheduler();
  Recorder rec;
  auto stream = open(rec, no_vad());
  EXPECT_EQ(metrics_->live_streams.value(), 1.0);
  engine_.set_auto(false);
  feed(*stream, std::span<const float>(jfk()).subspan(0, 3200));
  // The second 100 ms arrived at +0.1 s and triggered the partial at the tick at +0.2 s; it is
  // delivered at +0.45 s (fake clock): 350 ms after its audio.
  advance(0.25);
  engine_.answer_all();
  ASSERT_EQ(rec.of("partial").size(), 1u);
  EXPECT_EQ(metrics_->live_latency.count(), 1u);
  EXPECT_NEAR(metrics_->live_latency.sum(), 0.35, 1e-6);
  stream->close();
  EXPECT_EQ(metrics_->live_streams.value(), 0.0);
  EXPECT_EQ(stream->append(jfk()).code(), StatusCode::failed_precondition);
}

TEST_F(LiveTest, ClosingCancelsDecodesAndSilencesEvents) {
  scheduler();
  engine_.set_auto(false);
  Recorder rec;
  auto stream = open(rec, no_vad());
  feed(*stream, std::span<const float>(jfk()).subspan(0, kRate));
  ASSERT_TRUE(stream->commit().ok());
  scheduler_->tick();
  ASSERT_GE(engine_.held(), 1u);
  const size_t before = rec.all().size();
  stream->close();
  stream->close();  // idempotent
  engine_.answer_all();
  EXPECT_EQ(rec.all().size(), before);
  EXPECT_TRUE(rec.of("final").empty());
}

TEST_F(LiveTest, EightStreamsAtOnceAllGetFinals) {
  LiveSettings settings;
  settings.tick_ms = 10;
  scheduler(settings, /*manual=*/false);
  constexpr int kStreams = 8;
  std::vector<Recorder> recs(kStreams);
  std::vector<std::shared_ptr<LiveStream>> streams;
  for (int i = 0; i < kStreams; ++i) streams.push_back(open(recs[i]));
  const std::vector<float> audio = concat({silence(0.5), jfk(), silence(1.5)});
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      const size_t n = kRate / 5;  // 200 ms appends
      for (size_t k = 0; k < audio.size(); k += n)
        ASSERT_TRUE(streams[i]->append(std::span(audio).subspan(k, std::min(n, audio.size() - k))).ok());
      // Speech ended (the trailing silence stops it), and commit ends whatever remains.
      (void)streams[i]->commit();
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(recs[i].wait_for([](const std::vector<Event>& ev) {
      return count(ev, "committed") >= 1 && count(ev, "final") == count(ev, "committed") && count(ev, "error") == 0;
    })) << "stream "
        << i;
    EXPECT_GE(recs[i].of("started").size(), 1u);
    EXPECT_EQ(recs[i].of("error").size(), 0u);
    for (const Event& f : recs[i].of("final")) EXPECT_EQ(f.text, " final words");
  }
  EXPECT_EQ(scheduler_->open_streams(), kStreams);
  scheduler_->stop();  // before the recorders go: no event after it
  EXPECT_EQ(scheduler_->open_streams(), 0);
}

TEST(LiveSettingsTest, KnobsAreReadAndChecked) {
  serving::Knobs knobs;
  knobs.set("live_tick_ms", int64_t(20));
  knobs.set("live_partial_ms", int64_t(300));
  knobs.set("live_window_seconds", 8.0);
  knobs.set("live_max_utterance_seconds", int64_t(15));
  knobs.set("live_stall_seconds", 12.5);
  Result<LiveSettings> s = LiveSettings::from_knobs(knobs);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  EXPECT_EQ(s->tick_ms, 20);
  EXPECT_EQ(s->partial_ms, 300);
  EXPECT_DOUBLE_EQ(s->window_seconds, 8.0);
  EXPECT_DOUBLE_EQ(s->max_utterance_seconds, 15.0);
  EXPECT_DOUBLE_EQ(s->stall_seconds, 12.5);
  EXPECT_TRUE(s->validate().ok());
  EXPECT_EQ(LiveSettings::knob_names().size(), 5u);

  for (auto [name, value] :
       std::vector<std::pair<std::string, serving::KnobValue>>{{"live_tick_ms", int64_t(0)},
                                                               {"live_partial_ms", 0.5},
                                                               {"live_window_seconds", 31.0},
                                                               {"live_max_utterance_seconds", int64_t(0)},
                                                               {"live_stall_seconds", std::string("long")}}) {
    serving::Knobs k;
    k.set(name, value);
    Result<LiveSettings> r = LiveSettings::from_knobs(k);
    ASSERT_FALSE(r.has_value()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
  }
  LiveSettings bad;
  bad.window_seconds = 0;
  EXPECT_EQ(bad.validate().code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace prism::pipelines::transcribe
