// The generate engine serving an encoder-decoder speech model (task "transcribe"), inside a
// real serving::Deployment over fakes: a speech encoder whose memories carry a marker of their
// segment's features and a decoder whose context starts with the marker of the memory each
// sequence is handed (fake_decoder.h), so a sequence decoding against another request's audio
// gives other tokens. Checked: encodes batched across the requests admitted together (one
// call per frame count, max_encoder_segments at most), no prefix-cache sharing between
// identical prompts over different audio, logits processors forcing tokens and seeing their
// probe row (choice 0 only; each fork its own processor), preemption recomputing against the
// kept memory (never re-encoded), speculation skipping requests with a processor, errors, knobs;
// and, through the real models/whisper loaders, a tiny random Whisper whose greedy tokens
// equal the PyTorch reference's (tests/reference/whisper_family.py).
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>

#include "engines/generate/generate_engine_factory.h"
#include "fake_decoder.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "models/whisper/whisper.h"
#include "serving/deployment.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"
#include "test_util/whisper_tokenizer.h"

namespace prism::engines::generate {
namespace {

using serving::Deployment;
using serving::DeploymentConfig;
using serving::MetricsRegistry;
using test::CallGate;
using test::DecodeStats;
using test::FakeDecoder;
using test::FakeSpeechEncoder;
using test::SpeechEncodeLog;

constexpr int kBlockSize = 4;
constexpr int64_t kBytesPerBlock = 2 /*layers*/ * 2 /*K, V*/ * kBlockSize * 4 /*f32*/;
constexpr int64_t kMels = 80, kInputFrames = 20;
constexpr int64_t kWhisperVocab = 51865;
// The multilingual layout's ids (test_util/whisper_tokenizer.h writes the real ones).
constexpr int32_t kEot = 50257, kSot = 50258, kEn = 50259, kTranscribe = 50359, kNoTimestamps = 50363;

struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  frontends::GenerateOutput out;

  bool wait() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(120), [&] { return done; });
  }
  const std::vector<int32_t>& tokens(size_t choice = 0) const { return out.choices.at(choice).tokens; }
};

// A Whisper-shaped model directory: the test tokenizer files (real special ids, vocab 51865)
// and config.json, over whatever a model writer already put there.
std::string write_whisper_dir(const std::string& dir) {
  test::WhisperFilesOptions o;
  o.num_mel_bins = int(kMels);
  auto ids = test::write_whisper_files(dir, o);
  EXPECT_TRUE(ids.has_value()) << ids.status().to_string();
  return dir;
}

struct SpeechSetup {
  int64_t kv_blocks = 64;
  int64_t max_model_len = 64;
  int64_t max_step_tokens = 64;
  int max_batch_size = 16;
  bool prefix_caching = true;
  int64_t max_encoder_segments = 8;
  std::string speculation = "none";
  test::NextTokenFn next = test::hashed_next_token;
  float encoder_poison = 0.0f;
  std::string task = "transcribe";
  std::string model_dir;  // empty: a fresh Whisper-shaped directory
  std::vector<std::pair<std::string, serving::KnobValue>> knobs;  // extra knobs (origin "asr.toml:4")
  bool real = false;  // the models/whisper loaders (model_dir from the reference) instead of the fakes
  bool cross_decoder = true;  // false: a decoder-only fake (a text model's deployment)
};

struct Fixture {
  explicit Fixture(const std::string& name, SpeechSetup s = {}) {
    DeploymentConfig c;
    c.name = "asr";
    c.task = s.task;
    c.model = !s.model_dir.empty() ? s.model_dir : write_whisper_dir(test::scratch_dir(name));
    c.precision = "f32";
    c.batching.max_batch_size = s.max_batch_size;
    c.knobs.set("block_size", int64_t(kBlockSize));
    c.knobs.set("kv_cache_bytes", s.real ? int64_t(4) << 20 : s.kv_blocks * kBytesPerBlock);
    c.knobs.set("max_model_len", s.max_model_len);
    c.knobs.set("max_step_tokens", s.max_step_tokens);
    c.knobs.set("prefix_caching", s.prefix_caching);
    c.knobs.set("speculation", s.speculation);
    if (s.task == "transcribe") c.knobs.set("max_encoder_segments", s.max_encoder_segments, "asr.toml:3");
    for (const auto& [k, v] : s.knobs) c.knobs.set(k, v, "asr.toml:4");
    FakeDecoder::Options o;
    o.max_context = 448;
    o.stats = stats;
    o.gate = gate;
    o.vocab = s.cross_decoder ? kWhisperVocab : test::kFakeVocab;
    o.cross = s.cross_decoder;
    o.next = s.next;
    DecoderLoader loader = [o](const DeploymentConfig&, ops::Precision) -> Result<std::unique_ptr<models::Decoder>> {
      return std::unique_ptr<models::Decoder>(std::make_unique<FakeDecoder>(o));
    };
    FakeSpeechEncoder::Options e;
    e.num_mel_bins = kMels;
    e.input_frames = kInputFrames;
    e.log = log;
    e.poison = s.encoder_poison;
    SpeechEncoderLoader speech_loader = [e](const DeploymentConfig&,
                                            ops::Precision) -> Result<std::unique_ptr<models::SpeechEncoder>> {
      return std::unique_ptr<models::SpeechEncoder>(std::make_unique<FakeSpeechEncoder>(e));
    };
    if (s.real) {
      loader = [](const DeploymentConfig& config, ops::Precision p) {
        return models::load_whisper_decoder(config.model, p);
      };
      speech_loader = [](const DeploymentConfig& config, ops::Precision p) {
        return models::load_whisper_encoder(config.model, p);
      };
    }
    d = std::make_unique<Deployment>(
        c, serving::EngineKind(generate_engine_factory(loader, {}, speech_loader), generate_frontend_factory()),
        metrics);
    d->start();
    load_status = d->wait_ready();
    base_tokens = stats->tokens.load();
    base_calls = log->calls.load();
    base_segments = log->segments.load();
  }
  ~Fixture() {
    gate->open();
    d->stop();
  }

  std::shared_ptr<Outcome> submit(std::unique_ptr<frontends::GenerateInput> in) {
    auto outcome = std::make_shared<Outcome>();
    const int64_t cost = int64_t(in->prompt.size());
    serving::RequestPtr r = serving::make_request(std::move(in), [outcome](Result<serving::PayloadPtr> res) {
      std::lock_guard lock(outcome->mu);
      outcome->status = res.status();
      if (res.has_value())
        if (auto* o = dynamic_cast<frontends::GenerateOutput*>(res.value().get())) outcome->out = std::move(*o);
      outcome->done = true;
      outcome->cv.notify_all();
    });
    r->cost_tokens = std::max<int64_t>(cost, 1);
    const Status st = d->submit(r);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return outcome;
  }
  std::shared_ptr<Outcome> submit(std::vector<int32_t> prompt, std::optional<frontends::AudioSegment> audio, int max_tokens,
                                  frontends::LogitsProcessorFactory processor = {}, int n = 1) {
    auto in = std::make_unique<frontends::GenerateInput>();
    in->prompt = std::move(prompt);
    in->audio = std::move(audio);
    in->logits_processor = std::move(processor);
    in->sampling.temperature = 0.0f;
    in->sampling.max_tokens = max_tokens;
    in->sampling.ignore_eos = true;
    in->sampling.n = n;
    in->sampling.logprobs = true;
    return submit(std::move(in));
  }

  double metric(const std::string& name) const {
    std::istringstream text(metrics.render());
    for (std::string line; std::getline(text, line);)
      if (line.starts_with(name + "{")) return std::stod(line.substr(line.rfind(' ') + 1));
    ADD_FAILURE() << "no metric " << name;
    return -1;
  }
  int64_t encoder_calls() const { return log->calls.load() - base_calls; }
  int64_t encoded_segments() const { return log->segments.load() - base_segments; }
  int64_t computed_tokens() const { return stats->tokens.load() - base_tokens; }
  std::vector<std::pair<int64_t, int64_t>> call_shapes() const {
    std::lock_guard lock(log->mu);
    return {log->call_shapes.begin() + ptrdiff_t(base_calls), log->call_shapes.end()};
  }

  std::shared_ptr<DecodeStats> stats = std::make_shared<DecodeStats>();
  std::shared_ptr<CallGate> gate = std::make_shared<CallGate>();
  std::shared_ptr<SpeechEncodeLog> log = std::make_shared<SpeechEncodeLog>();
  MetricsRegistry metrics;
  std::unique_ptr<Deployment> d;
  Status load_status;
  int64_t base_tokens = 0, base_calls = 0, base_segments = 0;
};

// A segment of `frames` frames of features drawn from `seed`.
frontends::AudioSegment segment(uint32_t seed, int64_t frames = kInputFrames) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto features = std::make_shared<std::vector<float>>(size_t(kMels * frames));
  for (float& x : *features) x = u(rng);
  frontends::AudioSegment a;
  a.features = std::move(features);
  a.frames = frames;
  return a;
}

// A speech prompt: SOT, language, task, no-timestamps, then `extra` text ids from `seed`.
std::vector<int32_t> speech_prompt(int extra = 0, uint32_t seed = 1) {
  std::vector<int32_t> p = {kSot, kEn, kTranscribe, kNoTimestamps};
  std::mt19937 rng(seed);
  for (int i = 0; i < extra; ++i) p.push_back(int32_t(300 + rng() % 1000));
  return p;
}

// What the fake decoder's context is for `prompt` over `audio`, and its greedy continuation.
std::vector<int32_t> fake_context(const std::vector<int32_t>& prompt, const frontends::AudioSegment& audio) {
  std::vector<int32_t> context = {test::cross_context_code(test::cross_marker(*audio.features))};
  context.insert(context.end(), prompt.begin(), prompt.end());
  return context;
}
std::vector<int32_t> expected_output(const std::vector<int32_t>& prompt, const frontends::AudioSegment& audio, int max_tokens,
                                     const test::NextTokenFn& next = test::hashed_next_token) {
  return test::expected_continuation(fake_context(prompt, audio), max_tokens, next);
}

int32_t argmax(std::span<const float> row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

// What the scripted processors saw, per choice.
struct ProcessorLog {
  std::mutex mu;
  std::vector<int> made;                            // choices whose processor was made, in order
  std::vector<std::vector<int32_t>> probes;         // per choice: argmax of each probed row
  std::vector<std::vector<std::vector<int32_t>>> generated;  // per choice: `generated` at each call
  std::vector<std::vector<int32_t>> raw_argmax;     // per choice: argmax of each row before processing
};

// Forces its choice's script (every other logit -inf) while it lasts, then passes rows through;
// probes `probe_position`.
class ScriptedProcessor final : public frontends::LogitsProcessor {
 public:
  ScriptedProcessor(int choice, std::vector<int32_t> script, int64_t probe_position, std::shared_ptr<ProcessorLog> log)
      : choice_(size_t(choice)), script_(std::move(script)), probe_position_(probe_position), log_(std::move(log)) {}
  void process(std::span<float> logits, std::span<const int32_t> generated) override {
    {
      std::lock_guard lock(log_->mu);
      log_->generated[choice_].emplace_back(generated.begin(), generated.end());
      log_->raw_argmax[choice_].push_back(argmax(logits));
    }
    if (generated.size() >= script_.size()) return;
    const int32_t forced = script_[generated.size()];
    const float keep = logits[size_t(forced)];
    std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
    logits[size_t(forced)] = keep;
  }
  int64_t probe_position() const override { return probe_position_; }
  void probe(std::span<const float> logits) override {
    std::lock_guard lock(log_->mu);
    log_->probes[choice_].push_back(argmax(logits));
  }

 private:
  size_t choice_;
  std::vector<int32_t> script_;
  int64_t probe_position_;
  std::shared_ptr<ProcessorLog> log_;
};

frontends::LogitsProcessorFactory scripted(std::shared_ptr<ProcessorLog> log, std::vector<std::vector<int32_t>> scripts,
                                int64_t probe_position) {
  {
    std::lock_guard lock(log->mu);
    log->probes.resize(scripts.size());
    log->generated.resize(scripts.size());
    log->raw_argmax.resize(scripts.size());
  }
  return [log, scripts, probe_position](int choice) -> std::unique_ptr<frontends::LogitsProcessor> {
    {
      std::lock_guard lock(log->mu);
      log->made.push_back(choice);
    }
    return std::make_unique<ScriptedProcessor>(choice, scripts.at(size_t(choice)), probe_position, log);
  };
}

TEST(GenerateSpeech, TheFrontendLoadsTheSpeechProcessorOfAWhisperDirectory) {
  DeploymentConfig c;
  c.name = "asr";
  c.task = "transcribe";
  c.model = write_whisper_dir(test::scratch_dir("speech_frontend"));
  auto fe = frontends::GenerateFrontend::load(c);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  const frontends::GenerateFrontend& f = **fe;
  ASSERT_NE(f.speech(), nullptr);
  EXPECT_EQ(f.vision(), nullptr);
  EXPECT_EQ(f.chat_template(), nullptr);
  EXPECT_EQ(f.max_context(), 448);  // max_target_positions
  EXPECT_EQ(f.vocab_size(), kWhisperVocab);
  EXPECT_EQ(f.eos_token_ids(), std::vector<int32_t>{kEot});
  EXPECT_EQ(f.speech()->sot(), kSot);
  EXPECT_EQ(f.speech()->num_mel_bins(), kMels);

  c.knobs.set("max_model_len", int64_t(100));
  auto lowered = frontends::GenerateFrontend::load(c);
  ASSERT_TRUE(lowered.has_value()) << lowered.status().to_string();
  EXPECT_EQ((*lowered)->max_context(), 100);

  // A text-only model has none.
  DeploymentConfig t;
  t.name = "chat";
  t.task = "chat";
  t.model = test::write_fake_generate_model("speech_frontend_text");
  auto text = frontends::GenerateFrontend::load(t);
  ASSERT_TRUE(text.has_value()) << text.status().to_string();
  EXPECT_EQ((*text)->speech(), nullptr);
}

TEST(GenerateSpeech, EachRequestDecodesAgainstItsOwnSegment) {
  Fixture f("speech_basic");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  EXPECT_EQ(f.d->info().engine["speech"]["num_mel_bins"], kMels);
  EXPECT_EQ(f.d->info().engine["speech"]["input_frames"], kInputFrames);
  EXPECT_EQ(f.d->info().engine["speech"]["max_encoder_segments"], 8);
  const auto prompt = speech_prompt(3);
  const frontends::AudioSegment a = segment(1), b = segment(2);
  auto oa = f.submit(prompt, a, 8);
  ASSERT_TRUE(oa->wait());
  ASSERT_TRUE(oa->status.ok()) << oa->status.to_string();
  EXPECT_EQ(oa->tokens(), expected_output(prompt, a, 8));
  auto ob = f.submit(prompt, b, 8);
  ASSERT_TRUE(ob->wait());
  ASSERT_TRUE(ob->status.ok()) << ob->status.to_string();
  EXPECT_EQ(ob->tokens(), expected_output(prompt, b, 8));
  EXPECT_NE(oa->tokens(), ob->tokens());
  EXPECT_EQ(f.encoder_calls(), 2);
  // The warm-up's encode is not counted.
  EXPECT_EQ(f.metric("prism_asr_segments_encoded_total"), 2.0);
  EXPECT_EQ(f.metric("prism_asr_encoder_seconds_count"), 2.0);
  EXPECT_EQ(f.metric("prism_generate_prompt_tokens_total"), 2.0 * double(prompt.size()));
}

// NOTE: a request holds the engine's first step (its forward is gated), so the next five queue
// and are admitted together: one encode per frame count, max_encoder_segments at most.
TEST(GenerateSpeech, EncodesTheSegmentsOfRequestsAdmittedTogetherInBatchesPerFrameCount) {
  SpeechSetup s;
  s.max_encoder_segments = 2;
  s.max_step_tokens = 128;
  Fixture f("speech_batching", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  f.gate->pause();
  const frontends::AudioSegment first = segment(50);
  auto blocker = f.submit(speech_prompt(1), first, 2);
  ASSERT_TRUE(f.gate->wait_entered(2));  // warm-up + the blocker's step
  const std::vector<int64_t> frames = {20, 20, 12, 20, 12};
  std::vector<frontends::AudioSegment> audio;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<Outcome>> outs;
  for (size_t r = 0; r < frames.size(); ++r) {
    audio.push_back(segment(100 + uint32_t(r), frames[r]));
    prompts.push_back(speech_prompt(int(r), uint32_t(r)));
    outs.push_back(f.submit(prompts.back(), audio.back(), 5));
  }
  f.gate->open();
  ASSERT_TRUE(blocker->wait());
  ASSERT_TRUE(blocker->status.ok()) << blocker->status.to_string();
  EXPECT_EQ(blocker->tokens(), expected_output(speech_prompt(1), first, 2));
  for (size_t r = 0; r < outs.size(); ++r) {
    ASSERT_TRUE(outs[r]->wait());
    ASSERT_TRUE(outs[r]->status.ok()) << outs[r]->status.to_string();
    EXPECT_EQ(outs[r]->tokens(), expected_output(prompts[r], audio[r], 5)) << "request " << r;
  }
  // The blocker alone, then the five: frames 20 in calls of 2 and 1, frames 12 in one of 2.
  EXPECT_EQ(f.call_shapes(), (std::vector<std::pair<int64_t, int64_t>>{{1, 20}, {2, 20}, {1, 20}, {2, 12}}));
  EXPECT_EQ(f.encoded_segments(), 6);
  EXPECT_EQ(f.metric("prism_asr_segments_encoded_total"), 6.0);
  EXPECT_EQ(f.metric("prism_asr_encoder_seconds_count"), 4.0);
  EXPECT_GE(f.stats->max_seqs.load(), 5);  // decoded side by side, each with its own memory
}

// Identical prompt ids over different audio are different contexts: never a prefix hit, and
// the same audio again is recomputed too (speech blocks are never published).
TEST(GenerateSpeech, IdenticalPromptsOverDifferentAudioShareNoKvBlocks) {
  Fixture f("speech_prefix");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const auto prompt = speech_prompt(12);  // 16 tokens: 4 whole blocks
  const frontends::AudioSegment a = segment(7), b = segment(8);
  std::vector<std::vector<int32_t>> outputs;
  for (const frontends::AudioSegment* audio : {&a, &b, &a}) {
    const int64_t before = f.computed_tokens();
    auto o = f.submit(prompt, *audio, 6);
    ASSERT_TRUE(o->wait());
    ASSERT_TRUE(o->status.ok()) << o->status.to_string();
    EXPECT_EQ(o->tokens(), expected_output(prompt, *audio, 6));
    EXPECT_EQ(o->out.cached_prompt_tokens, 0);
    EXPECT_EQ(f.computed_tokens() - before, int64_t(prompt.size()) + 5);  // the whole prompt, every time
    outputs.push_back(o->tokens());
  }
  EXPECT_NE(outputs[0], outputs[1]);
  EXPECT_EQ(outputs[0], outputs[2]);
  EXPECT_EQ(f.metric("prism_prefix_cache_hit_tokens_total"), 0.0);
  EXPECT_EQ(f.metric("prism_prefix_cache_queried_tokens_total"), 0.0);
  EXPECT_EQ(f.encoded_segments(), 3);
}

// Two requests with identical prompts and different audio running at the same time: each
// equals its own reference (the decoder got each sequence's own memory).
TEST(GenerateSpeech, ConcurrentIdenticalPromptsKeepTheirOwnMemories) {
  Fixture f("speech_concurrent");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const auto prompt = speech_prompt(9);
  std::vector<frontends::AudioSegment> audio;
  std::vector<std::shared_ptr<Outcome>> outs;
  for (uint32_t r = 0; r < 4; ++r) {
    audio.push_back(segment(200 + r));
    outs.push_back(f.submit(prompt, audio.back(), 10));
  }
  for (size_t r = 0; r < outs.size(); ++r) {
    ASSERT_TRUE(outs[r]->wait());
    ASSERT_TRUE(outs[r]->status.ok()) << outs[r]->status.to_string();
    EXPECT_EQ(outs[r]->tokens(), expected_output(prompt, audio[r], 10)) << "request " << r;
    EXPECT_EQ(outs[r]->out.cached_prompt_tokens, 0);
  }
}

TEST(GenerateSpeech, AProcessorForcesTokensOnTheProcessedRowAndSeesItsProbeRow) {
  Fixture f("speech_processor");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const auto prompt = speech_prompt(4);  // 8 tokens
  const frontends::AudioSegment a = segment(3);
  const std::vector<int32_t> script = {1000, 1001, 1002};
  // Probe position 0 (<|startoftranscript|>, an extra row) and the prompt's last position (the
  // row that is also sampled).
  for (const int64_t probe : {int64_t(0), int64_t(prompt.size()) - 1}) {
    auto log = std::make_shared<ProcessorLog>();
    auto o = f.submit(prompt, a, 6, scripted(log, {script}, probe));
    ASSERT_TRUE(o->wait());
    ASSERT_TRUE(o->status.ok()) << o->status.to_string();
    // The script, then the model's own greedy continuation of the forced context.
    std::vector<int32_t> expected = script;
    std::vector<int32_t> context = fake_context(prompt, a);
    context.insert(context.end(), script.begin(), script.end());
    for (int32_t t : test::expected_continuation(context, 3, test::hashed_next_token)) expected.push_back(t);
    EXPECT_EQ(o->tokens(), expected) << "probe " << probe;
    // A forced token is the only finite logit: log-probability 0 (logprobs are the processed row's).
    for (size_t k = 0; k < script.size(); ++k) EXPECT_EQ(o->out.choices[0].logprobs.at(k).chosen.logprob, 0.0f);
    EXPECT_LT(o->out.choices[0].logprobs.at(3).chosen.logprob, 0.0f);
    std::lock_guard lock(log->mu);
    EXPECT_EQ(log->made, std::vector<int>{0});
    // The probe row is the model's row at that prompt position (raw: before any processing).
    std::vector<int32_t> upto(context.begin(), context.begin() + 1 + probe + 1);
    EXPECT_EQ(log->probes[0], std::vector<int32_t>{test::hashed_next_token(upto)}) << "probe " << probe;
    // process() saw the raw rows and the tokens generated before each.
    ASSERT_EQ(log->generated[0].size(), 6u);
    for (size_t k = 0; k < 6; ++k) {
      EXPECT_EQ(log->generated[0][k], std::vector<int32_t>(expected.begin(), expected.begin() + ptrdiff_t(k)));
      std::vector<int32_t> before = fake_context(prompt, a);
      before.insert(before.end(), expected.begin(), expected.begin() + ptrdiff_t(k));
      EXPECT_EQ(log->raw_argmax[0][k], test::hashed_next_token(before));
    }
  }
}

// A probe row inside a prefill chunk that does not reach the prompt's end (a step without
// sampling rows) is still computed and handed over once.
TEST(GenerateSpeech, AProbeRowInAnEarlyPrefillChunkIsComputed) {
  SpeechSetup s;
  s.max_step_tokens = 8;
  s.max_batch_size = 8;
  Fixture f("speech_probe_chunk", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const auto prompt = speech_prompt(20);  // 24 tokens: three chunks of 8
  const frontends::AudioSegment a = segment(4);
  auto log = std::make_shared<ProcessorLog>();
  auto o = f.submit(prompt, a, 4, scripted(log, {{}}, 10));
  ASSERT_TRUE(o->wait());
  ASSERT_TRUE(o->status.ok()) << o->status.to_string();
  EXPECT_EQ(o->tokens(), expected_output(prompt, a, 4));  // an empty script passes rows through
  const std::vector<int32_t> context = fake_context(prompt, a);
  std::lock_guard lock(log->mu);
  EXPECT_EQ(log->probes[0], std::vector<int32_t>{test::hashed_next_token(std::span(context).first(1 + 11))});
}

// n > 1: every choice gets its own processor (forks made after choice 0's prefill), each
// forcing its own script; only choice 0 is probed.
TEST(GenerateSpeech, ForksGetTheirOwnProcessorsAndOnlyChoiceZeroIsProbed) {
  Fixture f("speech_forks");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const auto prompt = speech_prompt(2);
  const frontends::AudioSegment a = segment(5);
  auto log = std::make_shared<ProcessorLog>();
  const std::vector<std::vector<int32_t>> scripts = {{700, 701}, {800}, {900, 901, 902}};
  auto o = f.submit(prompt, a, 4, scripted(log, scripts, 0), 3);
  ASSERT_TRUE(o->wait());
  ASSERT_TRUE(o->status.ok()) << o->status.to_string();
  ASSERT_EQ(o->out.choices.size(), 3u);
  for (size_t c = 0; c < 3; ++c) {
    std::vector<int32_t> context = fake_context(prompt, a);
    context.insert(context.end(), scripts[c].begin(), scripts[c].end());
    std::vector<int32_t> expected = scripts[c];
    for (int32_t t : test::expected_continuation(context, 4 - int(scripts[c].size()), test::hashed_next_token))
      expected.push_back(t);
    EXPECT_EQ(o->tokens(c), expected) << "choice " << c;
  }
  EXPECT_EQ(f.encoded_segments(), 1);  // choices share the request's memory
  std::lock_guard lock(log->mu);
  EXPECT_EQ(log->made, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(log->probes[0].size(), 1u);
  EXPECT_TRUE(log->probes[1].empty());
  EXPECT_TRUE(log->probes[2].empty());
}

// A tiny pool: running requests are preempted and recomputed against the memory they kept;
// nothing is encoded twice and every output equals its reference.
TEST(GenerateSpeech, PreemptionKeepsTheMemoryAndRecomputesExactly) {
  SpeechSetup s;
  s.kv_blocks = 20;
  s.max_model_len = 40;  // one full sequence: 10 blocks
  s.max_step_tokens = 64;
  Fixture f("speech_preempt", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  std::vector<frontends::AudioSegment> audio;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<Outcome>> outs;
  std::vector<std::shared_ptr<ProcessorLog>> logs;
  for (uint32_t r = 0; r < 4; ++r) {
    audio.push_back(segment(300 + r));
    prompts.push_back(speech_prompt(6, r));
    logs.push_back(std::make_shared<ProcessorLog>());
    // An empty script: rows pass through; the probe is re-delivered after a preemption.
    outs.push_back(f.submit(prompts.back(), audio.back(), 24, scripted(logs.back(), {{}}, 0)));
  }
  for (size_t r = 0; r < outs.size(); ++r) {
    ASSERT_TRUE(outs[r]->wait());
    ASSERT_TRUE(outs[r]->status.ok()) << outs[r]->status.to_string();
    EXPECT_EQ(outs[r]->tokens(), expected_output(prompts[r], audio[r], 24)) << "request " << r;
    std::lock_guard lock(logs[r]->mu);
    ASSERT_FALSE(logs[r]->probes[0].empty());
    const std::vector<int32_t> context = fake_context(prompts[r], audio[r]);
    for (int32_t p : logs[r]->probes[0]) EXPECT_EQ(p, test::hashed_next_token(std::span(context).first(2)));
  }
  EXPECT_GT(f.metric("prism_generate_preemptions_total"), 0.0);
  EXPECT_EQ(f.encoded_segments(), 4);
  EXPECT_EQ(f.metric("prism_asr_segments_encoded_total"), 4.0);
}

TEST(GenerateSpeech, RequestsWithAProcessorAreNotSpeculated) {
  SpeechSetup s;
  s.speculation = "ngram";
  s.next = test::cyclic_next_token;
  Fixture f("speech_spec", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const auto prompt = speech_prompt(6);
  const frontends::AudioSegment a = segment(9);
  auto log = std::make_shared<ProcessorLog>();
  auto with = f.submit(prompt, a, 16, scripted(log, {{}}, -1));
  ASSERT_TRUE(with->wait());
  ASSERT_TRUE(with->status.ok()) << with->status.to_string();
  EXPECT_EQ(with->tokens(), expected_output(prompt, a, 16, test::cyclic_next_token));
  EXPECT_EQ(f.metric("prism_spec_draft_tokens_total"), 0.0);
  // Without a processor the same request is speculated (and still exact).
  auto without = f.submit(prompt, a, 16);
  ASSERT_TRUE(without->wait());
  ASSERT_TRUE(without->status.ok()) << without->status.to_string();
  EXPECT_EQ(without->tokens(), with->tokens());
  EXPECT_GT(f.metric("prism_spec_draft_tokens_total"), 0.0);
}

TEST(GenerateSpeech, BadAudioFailsAloneWithClearErrors) {
  Fixture f("speech_bad");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const auto prompt = speech_prompt(2);
  auto expect_error = [&](std::optional<frontends::AudioSegment> audio, const std::string& message,
                          frontends::LogitsProcessorFactory processor = {}) {
    auto o = f.submit(prompt, std::move(audio), 4, std::move(processor));
    ASSERT_TRUE(o->wait());
    EXPECT_EQ(o->status.code(), StatusCode::invalid_argument) << o->status.to_string();
    EXPECT_NE(o->status.message().find(message), std::string::npos) << o->status.message();
  };
  expect_error(std::nullopt, "a request to a speech model needs an audio segment");
  frontends::AudioSegment odd = segment(1, 12);
  odd.frames = 11;
  expect_error(odd, "the audio segment has 11 frames; the speech encoder takes an even count in [2, 20]");
  expect_error(segment(1, 22), "the audio segment has 22 frames");
  frontends::AudioSegment short_features = segment(1, 12);
  short_features.frames = 10;
  expect_error(short_features, "the audio segment holds 960 values, not num_mel_bins × frames = 80 × 10");
  frontends::AudioSegment none;
  none.features = nullptr;
  none.frames = 10;
  expect_error(none, "the audio segment holds 0 values");
  auto log = std::make_shared<ProcessorLog>();
  expect_error(segment(1), "the logits processor probes prompt position 6 of a 6-token prompt",
               scripted(log, {{}}, 6));
  EXPECT_EQ(f.encoder_calls(), 0);
  // The engine goes on.
  const frontends::AudioSegment good = segment(2);
  auto o = f.submit(prompt, good, 4);
  ASSERT_TRUE(o->wait());
  ASSERT_TRUE(o->status.ok()) << o->status.to_string();
  EXPECT_EQ(o->tokens(), expected_output(prompt, good, 4));
}

TEST(GenerateSpeech, AudioSentToATextModelIsInvalid) {
  SpeechSetup s;
  s.task = "chat";
  s.cross_decoder = false;
  s.model_dir = test::write_fake_generate_model("speech_audio_to_text_model");
  Fixture f("speech_audio_to_text_model", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const std::vector<int32_t> prompt = {300, 301, 302};
  auto o = f.submit(prompt, segment(1), 4);
  ASSERT_TRUE(o->wait());
  EXPECT_EQ(o->status.code(), StatusCode::invalid_argument) << o->status.to_string();
  EXPECT_NE(o->status.message().find("this model does not take audio (deployment 'asr' serves a model without a "
                                     "speech encoder)"),
            std::string::npos)
      << o->status.message();
  auto text = f.submit(prompt, std::nullopt, 4);
  ASSERT_TRUE(text->wait());
  ASSERT_TRUE(text->status.ok()) << text->status.to_string();
  EXPECT_EQ(text->tokens(), test::expected_continuation(prompt, 4, test::hashed_next_token));
  EXPECT_EQ(f.encoder_calls(), 0);
}

TEST(GenerateSpeech, AnEncoderFailureFailsItsRequestsAndTheEngineGoesOn) {
  SpeechSetup s;
  s.encoder_poison = 42.0f;
  Fixture f("speech_encoder_failure", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  frontends::AudioSegment bad = segment(1);
  auto features = std::make_shared<std::vector<float>>(*bad.features);
  (*features)[0] = 42.0f;
  bad.features = features;
  auto o = f.submit(speech_prompt(2), bad, 4);
  ASSERT_TRUE(o->wait());
  EXPECT_EQ(o->status.code(), StatusCode::internal) << o->status.to_string();
  EXPECT_NE(o->status.message().find("speech encoding failed: fake speech encoder: poisoned segment"),
            std::string::npos)
      << o->status.message();
  const frontends::AudioSegment good = segment(2);
  auto ok = f.submit(speech_prompt(2), good, 4);
  ASSERT_TRUE(ok->wait());
  ASSERT_TRUE(ok->status.ok()) << ok->status.to_string();
  EXPECT_EQ(ok->tokens(), expected_output(speech_prompt(2), good, 4));
  EXPECT_EQ(f.metric("prism_asr_encoder_seconds_count"), 2.0);
  EXPECT_EQ(f.metric("prism_asr_segments_encoded_total"), 1.0);
}

TEST(GenerateSpeech, TranscribeKnobsAndTasksAreChecked) {
  {
    // The orchestration's knobs are accepted (pipelines/transcribe reads them).
    SpeechSetup s;
    s.knobs = {{"vad", std::string("energy")}, {"asr_chunk_seconds", 20.0}, {"live_tick_ms", int64_t(10)}};
    Fixture f("speech_knobs_ok", s);
    EXPECT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  }
  {
    SpeechSetup s;
    s.knobs = {{"max_encoder_view", int64_t(2)}};
    Fixture f("speech_knobs_unknown", s);
    EXPECT_EQ(f.load_status.code(), StatusCode::invalid_argument);
    EXPECT_NE(f.load_status.message().find("asr.toml:4: unknown knob 'max_encoder_view' for a transcribe deployment"),
              std::string::npos)
        << f.load_status.message();
  }
  {
    SpeechSetup s;
    s.max_encoder_segments = 0;
    Fixture f("speech_knobs_bad", s);
    EXPECT_NE(f.load_status.message().find("asr.toml:3: knob 'max_encoder_segments' must be in [1, 4096] (got 0)"),
              std::string::npos)
        << f.load_status.message();
  }
  {
    SpeechSetup s;
    s.task = "chat";
    Fixture f("speech_as_chat", s);
    EXPECT_NE(f.load_status.message().find("is a speech model (Whisper): serve it with task \"transcribe\""),
              std::string::npos)
        << f.load_status.message();
  }
  {
    SpeechSetup s;
    s.model_dir = test::write_fake_generate_model("speech_llama_as_transcribe");
    Fixture f("speech_llama_as_transcribe", s);
    EXPECT_NE(f.load_status.message().find("task \"transcribe\" needs an encoder-decoder speech model"),
              std::string::npos)
        << f.load_status.message();
  }
}

// ------------------------------------------------------------------------------------------
// A real tiny Whisper (models/whisper) through the engine, against the PyTorch reference.

struct WhisperReference {
  std::string model_dir;
  std::vector<int32_t> prompt;
  std::vector<frontends::AudioSegment> audio;              // the two 30-s segments, then the reduced (10 s) one
  std::vector<std::vector<int32_t>> generated;  // the reference's greedy tokens of each
};

std::vector<int32_t> int_values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {c.data<int32_t>(), c.data<int32_t>() + c.numel()};
}

// The tiny checkpoint with the real multilingual vocabulary (so the test tokenizer's special
// ids exist), then the tokenizer files over it (the checkpoint's config keys win).
Result<WhisperReference> whisper_reference() {
  PRISM_ASSIGN_OR_RETURN(std::string dir, test::generate_reference("whisper_family.py", "speech_tiny_whisper",
                                                                   "write --vocab " + std::to_string(kWhisperVocab)));
  PRISM_ASSIGN_OR_RETURN(auto file, test::open_reference(dir));
  PRISM_ASSIGN_OR_RETURN(Tensor features, file->get("features"));
  PRISM_ASSIGN_OR_RETURN(Tensor reduced, file->get("features_reduced"));
  PRISM_ASSIGN_OR_RETURN(Tensor prompt, file->get("prompt"));
  PRISM_ASSIGN_OR_RETURN(Tensor generated, file->get("generated"));
  PRISM_ASSIGN_OR_RETURN(Tensor generated_reduced, file->get("generated_reduced"));
  test::WhisperFilesOptions o;
  o.num_mel_bins = int(features.size(1));
  PRISM_RETURN_IF_ERROR(test::write_whisper_files(dir, o).status());
  WhisperReference r;
  r.model_dir = dir;
  r.prompt = int_values(prompt);
  for (const Tensor* t : {&features, &reduced}) {
    const Tensor c = t->contiguous();
    const int64_t per = c.size(1) * c.size(2);
    for (int64_t s = 0; s < c.size(0); ++s) {
      frontends::AudioSegment a;
      a.features = std::make_shared<std::vector<float>>(c.data<float>() + s * per, c.data<float>() + (s + 1) * per);
      a.frames = c.size(2);
      r.audio.push_back(std::move(a));
    }
  }
  const std::vector<int32_t> both = int_values(generated);
  const size_t n = both.size() / 2;
  r.generated = {std::vector<int32_t>(both.begin(), both.begin() + ptrdiff_t(n)),
                 std::vector<int32_t>(both.begin() + ptrdiff_t(n), both.end()), int_values(generated_reduced)};
  return r;
}

// Greedy decoding through the engine equals the reference's for each segment: alone, then the
// three at once (two frame counts: two encoder calls, decodes side by side, each sequence
// attending its own memory). Then the model's own speech rules (SpeechProcessor::rules:
// language detection at the first step, the probe at <|startoftranscript|>, timestamp rules):
// every decode finishes, records its observation, obeys the rules' shape, and a request
// decoded among others (its processor running beside theirs) equals the same request alone.
// NOTE: one test, so that the reference generator and the model load run once.
TEST(GenerateSpeech, RealTinyWhisperThroughTheEngine) {
  Result<WhisperReference> ref = whisper_reference();
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  SpeechSetup s;
  s.real = true;
  s.model_dir = ref->model_dir;
  s.max_step_tokens = 128;
  Fixture f("speech_tiny_whisper_engine", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  EXPECT_EQ(f.d->info().engine["speech"]["input_frames"], 3000);
  const int n = int(ref->generated[0].size());
  auto alone = f.submit(ref->prompt, ref->audio[0], n);
  ASSERT_TRUE(alone->wait());
  ASSERT_TRUE(alone->status.ok()) << alone->status.to_string();
  EXPECT_EQ(alone->tokens(), ref->generated[0]);

  std::vector<std::shared_ptr<Outcome>> outs;
  for (size_t k = 0; k < ref->audio.size(); ++k) outs.push_back(f.submit(ref->prompt, ref->audio[k], n));
  for (size_t k = 0; k < outs.size(); ++k) {
    ASSERT_TRUE(outs[k]->wait());
    ASSERT_TRUE(outs[k]->status.ok()) << outs[k]->status.to_string();
    EXPECT_EQ(outs[k]->tokens(), ref->generated[k]) << "segment " << k;
    EXPECT_EQ(outs[k]->out.cached_prompt_tokens, 0);
  }
  EXPECT_NE(ref->generated[0], ref->generated[1]);
  EXPECT_EQ(f.metric("prism_asr_segments_encoded_total"), 4.0);

  auto frontend = std::dynamic_pointer_cast<const frontends::GenerateFrontend>(f.d->frontend());
  ASSERT_NE(frontend, nullptr);
  const frontends::SpeechProcessor& speech = *frontend->speech();
  frontends::SpeechDecodeOptions options;  // language detected, timestamps on
  const std::vector<int32_t> prompt = speech.prompt(options);
  ASSERT_EQ(prompt, std::vector<int32_t>{kSot});

  struct Decode {
    std::shared_ptr<std::vector<frontends::SpeechObservation>> observations;
    std::shared_ptr<Outcome> outcome;
  };
  auto decode = [&](const frontends::AudioSegment& audio) {
    Decode d;
    d.observations = std::make_shared<std::vector<frontends::SpeechObservation>>(1);
    auto in = std::make_unique<frontends::GenerateInput>();
    in->prompt = prompt;
    in->audio = audio;
    in->logits_processor = speech.rules(options, d.observations);
    in->sampling.temperature = 0.0f;
    in->sampling.max_tokens = 40;
    in->sampling.logprobs = true;
    d.outcome = f.submit(std::move(in));
    return d;
  };
  Decode single = decode(ref->audio[1]);
  ASSERT_TRUE(single.outcome->wait());
  ASSERT_TRUE(single.outcome->status.ok()) << single.outcome->status.to_string();
  std::vector<Decode> together;
  for (const frontends::AudioSegment& audio : ref->audio) together.push_back(decode(audio));
  for (Decode& d : together) {
    ASSERT_TRUE(d.outcome->wait());
    ASSERT_TRUE(d.outcome->status.ok()) << d.outcome->status.to_string();
  }
  const frontends::GenerateOutput& a = single.outcome->out;
  const frontends::GenerateOutput& b = together[1].outcome->out;
  EXPECT_EQ(a.choices[0].tokens, b.choices[0].tokens);
  EXPECT_EQ((*single.observations)[0].language, (*together[1].observations)[0].language);
  // NOTE: equal to rounding, not bit for bit: alone, the segment's encoder GEMM has 1500 rows,
  // batched 3000, and on some tiers (avx2) oneDNN blocks the two differently.
  const float single_no_speech = (*single.observations)[0].no_speech_prob;
  EXPECT_NEAR((*together[1].observations)[0].no_speech_prob, single_no_speech, 1e-4f * single_no_speech);
  for (const Decode& d : together) {
    const frontends::SpeechObservation& o = (*d.observations)[0];
    const std::vector<int32_t>& tokens = d.outcome->out.choices[0].tokens;
    // The probe ran: a probability read at <|startoftranscript|>.
    EXPECT_GT(o.no_speech_prob, 0.0f);
    EXPECT_LT(o.no_speech_prob, 1.0f);
    // The first step detected a language among the language tokens.
    EXPECT_FALSE(o.language.empty());
    ASSERT_GE(tokens.size(), 2u);
    EXPECT_EQ(speech.language_token(o.language), tokens[0]);
    EXPECT_EQ(tokens[1], kTranscribe);  // forced
    // Timestamp mode: the text opens with a timestamp no later than max_initial_timestamp.
    if (tokens.size() > 2) {
      EXPECT_GE(tokens[2], speech.timestamp_begin());
      EXPECT_LE(tokens[2], speech.timestamp_begin() + 50);
    }
    for (int32_t t : tokens) EXPECT_NE(t, kSot);
    // Forced tokens have probability 1 in the processed row.
    EXPECT_EQ(d.outcome->out.choices[0].logprobs.at(1).chosen.logprob, 0.0f);
  }
}

}  // namespace
}  // namespace prism::engines::generate
