// The Realtime transcription session and the binary live stream (api/routes/realtime.h) over a
// fake LiveScheduler: event parsing and validation (each bad event an error event naming its
// field and echoing the client's event_id, the session going on), session updates in the
// beta and GA shapes, PCM16 conversion, commit / clear, the stream's events turned into
// Realtime events (deltas by the documented rule, completed, failed, errors closing 1008),
// the binary protocol; and the delta rule itself.
#include "api/routes/realtime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

namespace prism::api::realtime {
namespace {

using pipelines::transcribe::LivePartial;
using pipelines::transcribe::LiveScheduler;
using pipelines::transcribe::LiveSettings;
using pipelines::transcribe::LiveStream;
using pipelines::transcribe::LiveStreamEvents;
using pipelines::transcribe::LiveStreamOptions;
using pipelines::transcribe::Segment;
using pipelines::transcribe::Transcript;
using nlohmann::json;

// ---- fakes ---------------------------------------------------------------------------------------

class FakeStream final : public LiveStream {
 public:
  FakeStream(LiveStreamOptions o, LiveStreamEvents e) : options(std::move(o)), events(std::move(e)) {}
  Status append(std::span<const float> s) override {
    std::lock_guard lock(mu);
    samples.insert(samples.end(), s.begin(), s.end());
    return Status();
  }
  Status commit() override {
    ++commits;
    return samples.empty()
               ? invalid_argument("buffer too small: expected at least 100 ms of audio, but the buffer has 0 ms")
               : Status();
  }
  void clear() override { ++clears; }
  Status update(LiveStreamOptions o) override {
    if (o.language == "xx") return invalid_argument("unknown language 'xx'");
    updates.push_back(std::move(o));
    return Status();
  }
  void close() override { is_closed = true; }
  bool closed() const override { return is_closed; }

  std::mutex mu;
  std::vector<float> samples;
  int commits = 0, clears = 0;
  std::vector<LiveStreamOptions> updates;
  bool is_closed = false;
  LiveStreamOptions options;
  LiveStreamEvents events;
};

class FakeScheduler final : public LiveScheduler {
 public:
  Result<std::shared_ptr<LiveStream>> open(LiveStreamOptions o, LiveStreamEvents e) override {
    if (o.language == "xx") return invalid_argument("unknown language 'xx'");
    streams.push_back(std::make_shared<FakeStream>(std::move(o), std::move(e)));
    return std::shared_ptr<LiveStream>(streams.back());
  }
  int open_streams() const override { return int(streams.size()); }
  media::VadParams vad_params() const override { return media::VadParams{}; }  // 0.5, pad 30, silence 100
  const LiveSettings& settings() const override { return settings_; }
  void tick() override {}
  void stop() override {}

  std::vector<std::shared_ptr<FakeStream>> streams;
  LiveSettings settings_;
};

struct Harness {
  std::shared_ptr<FakeScheduler> scheduler = std::make_shared<FakeScheduler>();
  std::vector<std::string> lookups;
  std::mutex mu;
  std::vector<json> sent;
  std::vector<uint16_t> closes;
  std::shared_ptr<Session> session;

  SchedulerLookup lookup() {
    return [this](std::string_view model) -> Result<std::shared_ptr<LiveScheduler>> {
      lookups.emplace_back(model);
      if (model == "chat") return invalid_argument("model 'chat' is not a speech recognition model");
      if (model == "loading") return unavailable("model 'loading' is not ready");
      if (model != "asr") return not_found("no model " + std::string(model));
      return std::shared_ptr<LiveScheduler>(scheduler);
    };
  }
  Output output() {
    Output o;
    o.send_text = [this](std::string text) {
      std::lock_guard lock(mu);
      sent.push_back(json::parse(text));
    };
    o.close = [this](uint16_t code, std::string) {
      std::lock_guard lock(mu);
      closes.push_back(code);
    };
    return o;
  }
  void start(Protocol protocol = Protocol::realtime, std::string model = "", int rate = 24000, bool vad = true) {
    SessionParams p;
    p.protocol = protocol;
    p.model = std::move(model);
    p.sample_rate = rate;
    p.server_vad = vad;
    session = Session::start(std::move(p), lookup(), output());
  }
  void send(const json& event) { session->on_message(event.dump(), false); }
  json last() {
    std::lock_guard lock(mu);
    return sent.empty() ? json() : sent.back();
  }
  size_t count() {
    std::lock_guard lock(mu);
    return sent.size();
  }
  FakeStream& stream() { return *scheduler->streams.back(); }
};

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += k[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// PCM16 LE of the given sample values.
std::string pcm16(const std::vector<int16_t>& v) {
  std::string out;
  for (int16_t s : v) {
    out += char(uint16_t(s) & 0xff);
    out += char(uint16_t(s) >> 8);
  }
  return out;
}

// ---- the session ---------------------------------------------------------------------------------

TEST(RealtimeSession, CreatedWithTheQueryModel) {
  Harness h;
  h.start(Protocol::realtime, "asr");
  EXPECT_EQ(h.lookups, std::vector<std::string>{"asr"});
  ASSERT_EQ(h.count(), 1u);
  const json created = h.last();
  EXPECT_EQ(created["type"], "transcription_session.created");
  EXPECT_EQ(created["event_id"], "event_1");
  const json& s = created["session"];
  EXPECT_EQ(s["object"], "realtime.transcription_session");
  EXPECT_TRUE(s["id"].get<std::string>().starts_with("sess_"));
  EXPECT_EQ(s["input_audio_format"], "pcm16");
  EXPECT_EQ(s["input_audio_transcription"]["model"], "asr");
  EXPECT_TRUE(s["input_audio_transcription"]["language"].is_null());
  EXPECT_EQ(s["turn_detection"]["type"], "server_vad");
  EXPECT_DOUBLE_EQ(s["turn_detection"]["threshold"].get<double>(), 0.5);
  EXPECT_EQ(s["turn_detection"]["prefix_padding_ms"], 30);
  EXPECT_EQ(s["turn_detection"]["silence_duration_ms"], 100);
  EXPECT_EQ(s["prism"]["sample_rate"], 24000);
  ASSERT_EQ(h.scheduler->streams.size(), 1u);
  EXPECT_TRUE(h.stream().options.server_vad);
  EXPECT_FALSE(h.stream().options.vad.has_value());  // the deployment's
  EXPECT_TRUE(h.closes.empty());
}

TEST(RealtimeSession, BadQueryModelsCloseTheConnection) {
  for (auto [model, code, close] : std::vector<std::tuple<std::string, std::string, uint16_t>>{
           {"nope", "model_not_found", 1008}, {"chat", "invalid_value", 1008}, {"loading", "", 1013}}) {
    Harness h;
    h.start(Protocol::realtime, model);
    ASSERT_EQ(h.count(), 1u) << model;
    const json e = h.last();
    EXPECT_EQ(e["type"], "error");
    if (!code.empty()) {
      EXPECT_EQ(e["error"]["code"], code) << e.dump();
      EXPECT_EQ(e["error"]["param"], "model") << e.dump();
    }
    EXPECT_EQ(h.closes, std::vector<uint16_t>{close}) << model;
    h.send({{"type", "input_audio_buffer.commit"}});
    EXPECT_EQ(h.count(), 1u);  // closed: nothing more
  }
}

TEST(RealtimeSession, SessionUpdateChoosesTheModelAndSettings) {
  Harness h;
  h.start();
  EXPECT_TRUE(h.lookups.empty());
  EXPECT_TRUE(h.last()["session"]["input_audio_transcription"]["model"].is_null());

  // Audio before any model: an error naming where the model goes.
  h.send({{"type", "input_audio_buffer.append"}, {"event_id", "c1"}, {"audio", base64(pcm16({1, 2}))}});
  EXPECT_EQ(h.last()["type"], "error");
  EXPECT_EQ(h.last()["error"]["param"], "session.input_audio_transcription.model");
  EXPECT_EQ(h.last()["error"]["event_id"], "c1");

  h.send({{"type", "transcription_session.update"},
          {"session",
           {{"input_audio_format", "pcm16"},
            {"input_audio_transcription", {{"model", "asr"}, {"language", "fr"}, {"prompt", "Bonjour"}}},
            {"turn_detection",
             {{"type", "server_vad"}, {"threshold", 0.6}, {"prefix_padding_ms", 200}, {"silence_duration_ms", 400}}},
            {"input_audio_noise_reduction", nullptr},
            {"include", json::array()}}}});
  const json updated = h.last();
  ASSERT_EQ(updated["type"], "transcription_session.updated") << updated.dump();
  EXPECT_EQ(updated["session"]["input_audio_transcription"]["model"], "asr");
  EXPECT_EQ(updated["session"]["input_audio_transcription"]["language"], "fr");
  EXPECT_EQ(updated["session"]["input_audio_transcription"]["prompt"], "Bonjour");
  EXPECT_DOUBLE_EQ(updated["session"]["turn_detection"]["threshold"].get<double>(), 0.6);
  EXPECT_EQ(updated["session"]["turn_detection"]["prefix_padding_ms"], 200);
  EXPECT_EQ(updated["session"]["turn_detection"]["silence_duration_ms"], 400);
  ASSERT_EQ(h.scheduler->streams.size(), 1u);
  const LiveStreamOptions& o = h.stream().options;
  EXPECT_EQ(o.language, "fr");
  EXPECT_EQ(o.prompt, "Bonjour");
  ASSERT_TRUE(o.vad.has_value());
  EXPECT_FLOAT_EQ(o.vad->threshold, 0.6f);
  EXPECT_EQ(o.vad->speech_pad_ms, 200);
  EXPECT_EQ(o.vad->min_silence_ms, 400);
  EXPECT_EQ(o.vad->min_speech_ms, media::VadParams{}.min_speech_ms);

  // turn_detection null: commit-only; the same stream gets the new options.
  h.send({{"type", "transcription_session.update"}, {"session", {{"turn_detection", nullptr}}}});
  EXPECT_TRUE(h.last()["session"]["turn_detection"].is_null());
  ASSERT_EQ(h.stream().updates.size(), 1u);
  EXPECT_FALSE(h.stream().updates[0].server_vad);
  EXPECT_EQ(h.stream().updates[0].language, "fr");  // unchanged fields stay

  // Once audio was sent the model may not change.
  h.send({{"type", "input_audio_buffer.append"}, {"audio", base64(pcm16({1, 2, 3, 4}))}});
  h.send({{"type", "transcription_session.update"},
          {"event_id", "c9"},
          {"session", {{"input_audio_transcription", {{"model", "other"}}}}}});
  EXPECT_EQ(h.last()["type"], "error");
  EXPECT_EQ(h.last()["error"]["param"], "session.input_audio_transcription.model");
  EXPECT_EQ(h.last()["error"]["event_id"], "c9");
  EXPECT_TRUE(h.closes.empty());
}

TEST(RealtimeSession, GaSessionUpdateShapeAnd16kHzAudio) {
  Harness h;
  h.start();
  h.send({{"type", "session.update"},
          {"session",
           {{"type", "transcription"},
            {"audio",
             {{"input",
               {{"format", {{"type", "audio/pcm"}, {"rate", 16000}}},
                {"transcription", {{"model", "asr"}, {"language", "en"}}},
                {"turn_detection", {{"type", "server_vad"}, {"silence_duration_ms", 500}}}}}}}}}});
  const json updated = h.last();
  ASSERT_EQ(updated["type"], "session.updated") << updated.dump();
  EXPECT_EQ(updated["session"]["type"], "transcription");
  EXPECT_EQ(updated["session"]["audio"]["input"]["format"]["rate"], 16000);
  EXPECT_EQ(updated["session"]["audio"]["input"]["transcription"]["model"], "asr");
  EXPECT_EQ(updated["session"]["audio"]["input"]["turn_detection"]["silence_duration_ms"], 500);
  // 16 kHz: samples arrive unchanged, PCM16 / 32768.
  h.send({{"type", "input_audio_buffer.append"}, {"audio", base64(pcm16({16384, -32768, 0, 8192}))}});
  ASSERT_EQ(h.stream().samples.size(), 4u);
  EXPECT_FLOAT_EQ(h.stream().samples[0], 0.5f);
  EXPECT_FLOAT_EQ(h.stream().samples[1], -1.0f);
  EXPECT_FLOAT_EQ(h.stream().samples[3], 0.25f);
}

TEST(RealtimeSession, TwentyFourKilohertzIsResampled) {
  Harness h;
  h.start(Protocol::realtime, "asr");
  std::vector<int16_t> tone(2400);  // 100 ms at 24 kHz
  for (size_t i = 0; i < tone.size(); ++i) tone[i] = int16_t(8000 * std::sin(double(i) * 0.05));
  h.send({{"type", "input_audio_buffer.append"}, {"audio", base64(pcm16(tone))}});
  EXPECT_NEAR(double(h.stream().samples.size()), 1600.0, 2.0);
}

TEST(RealtimeSession, BadEventsGetErrorEventsAndTheSessionGoesOn) {
  Harness h;
  h.start(Protocol::realtime, "asr");
  struct Case {
    std::string message;
    bool binary;
    std::string code, param;
  };
  const std::vector<Case> cases = {
      {"{not json", false, "invalid_json", ""},
      {"[1, 2]", false, "invalid_json", ""},
      {R"({"event_id": "e1"})", false, "missing_required_parameter", "type"},
      {R"({"type": "input_audio_buffer.sing", "event_id": "e2"})", false, "invalid_value", "type"},
      {R"({"type": "response.create", "event_id": "e3"})", false, "unsupported_event", "type"},
      {R"({"type": "input_audio_buffer.append", "event_id": "e4"})", false, "missing_required_parameter", "audio"},
      {R"({"type": "input_audio_buffer.append", "audio": "!!!!", "event_id": "e5"})", false, "invalid_base64", "audio"},
      {R"({"type": "input_audio_buffer.append", "audio": "AAEC", "event_id": "e6"})", false, "invalid_value", "audio"},
      {"\x01\x02", true, "invalid_message", ""},
      {R"({"type": "transcription_session.update", "session": {"input_audio_format": "g711_ulaw"}})", false,
       "unsupported_format", "session.input_audio_format"},
      {R"({"type": "transcription_session.update", "session": {"input_audio_format": "mp3"}})", false, "invalid_value",
       "session.input_audio_format"},
      {R"({"type": "transcription_session.update", "session": {"turn_detection": {"type": "semantic_vad"}}})", false,
       "invalid_value", "session.turn_detection.type"},
      {R"({"type": "transcription_session.update", "session": {"turn_detection": {"threshold": 2}}})", false,
       "invalid_value", "session.turn_detection.threshold"},
      {R"({"type": "transcription_session.update", "session": {"turn_detection": {"silence_duration_ms": -1}}})", false,
       "invalid_value", "session.turn_detection.silence_duration_ms"},
      {R"({"type": "transcription_session.update", "session": {"input_audio_transcription": {"language": "xx"}}})",
       false, "invalid_value", "session.input_audio_transcription.language"},
      {R"({"type": "transcription_session.update", "session": {"prism": {"sample_rate": 100}}})", false,
       "invalid_value", "session.prism.sample_rate"},
      {R"({"type": "session.update", "session": {"type": "realtime"}})", false, "invalid_value", "session.type"},
      {R"({"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcmu"}}}}})", false,
       "unsupported_format", "session.audio.input.format.type"},
      {R"({"type": "session.update", "session": 3})", false, "invalid_value", "session"},
  };
  for (const Case& c : cases) {
    const size_t before = h.count();
    h.session->on_message(c.message, c.binary);
    ASSERT_EQ(h.count(), before + 1) << c.message;
    const json e = h.last();
    EXPECT_EQ(e["type"], "error") << c.message;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << c.message;
    EXPECT_EQ(e["error"]["code"], c.code) << c.message << " → " << e.dump();
    if (c.param.empty()) {
      EXPECT_TRUE(e["error"]["param"].is_null()) << e.dump();
    } else {
      EXPECT_EQ(e["error"]["param"], c.param) << c.message << " → " << e.dump();
    }
    const json parsed = json::parse(c.message, nullptr, false);
    if (!c.binary && parsed.is_object() && parsed.contains("event_id")) {
      EXPECT_EQ(e["error"]["event_id"], parsed["event_id"]);
    }
    EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
  }
  // The odd byte count is named; nothing reached the stream; the session is still open.
  EXPECT_TRUE(h.stream().samples.empty());
  EXPECT_TRUE(h.closes.empty());
  h.send({{"type", "input_audio_buffer.append"}, {"audio", base64(pcm16(std::vector<int16_t>(480, 100)))}});
  EXPECT_FALSE(h.stream().samples.empty());
}

TEST(RealtimeSession, CommitAndClear) {
  Harness h;
  h.start(Protocol::realtime, "asr");
  h.send({{"type", "input_audio_buffer.commit"}, {"event_id", "k1"}});
  EXPECT_EQ(h.stream().commits, 1);
  EXPECT_EQ(h.last()["type"], "error");
  EXPECT_EQ(h.last()["error"]["code"], "input_audio_buffer_commit_empty");
  EXPECT_EQ(h.last()["error"]["event_id"], "k1");
  h.send({{"type", "input_audio_buffer.append"}, {"audio", base64(pcm16(std::vector<int16_t>(480, 100)))}});
  ASSERT_FALSE(h.stream().samples.empty());
  const size_t before = h.count();
  h.send({{"type", "input_audio_buffer.commit"}});
  EXPECT_EQ(h.stream().commits, 2);
  EXPECT_EQ(h.count(), before);  // committed comes with the item
  h.send({{"type", "input_audio_buffer.clear"}});
  EXPECT_EQ(h.stream().clears, 1);
  EXPECT_EQ(h.last()["type"], "input_audio_buffer.cleared");
}

TEST(RealtimeSession, StreamEventsBecomeRealtimeEvents) {
  Harness h;
  h.start(Protocol::realtime, "asr");
  LiveStreamEvents& ev = h.stream().events;

  ev.on_speech_started(0, 1.25);
  json e = h.last();
  EXPECT_EQ(e["type"], "input_audio_buffer.speech_started");
  EXPECT_EQ(e["audio_start_ms"], 1250);
  const std::string item0 = e["item_id"];
  EXPECT_TRUE(item0.starts_with("item_"));

  ev.on_partial(LivePartial{0, 1.25, 2.0, " And so my fellow"});
  e = h.last();
  EXPECT_EQ(e["type"], "conversation.item.input_audio_transcription.delta");
  EXPECT_EQ(e["item_id"], item0);
  EXPECT_EQ(e["content_index"], 0);
  EXPECT_EQ(e["delta"], "And so my");
  ev.on_partial(LivePartial{0, 1.25, 3.0, " And so my fellow Americans, ask"});
  EXPECT_EQ(h.last()["delta"], " fellow Americans,");
  const size_t before = h.count();
  ev.on_partial(LivePartial{0, 1.25, 3.2, " And so, my fellow Americans"});  // nothing new
  EXPECT_EQ(h.count(), before);

  ev.on_speech_stopped(0, 4.5);
  EXPECT_EQ(h.last()["type"], "input_audio_buffer.speech_stopped");
  EXPECT_EQ(h.last()["audio_end_ms"], 4500);
  ev.on_committed(0, 1.25, 4.5);
  {
    std::lock_guard lock(h.mu);
    const json& committed = h.sent[h.sent.size() - 2];
    EXPECT_EQ(committed["type"], "input_audio_buffer.committed");
    EXPECT_TRUE(committed["previous_item_id"].is_null());
    EXPECT_EQ(committed["item_id"], item0);
  }
  EXPECT_EQ(h.last()["type"], "conversation.item.created");
  EXPECT_EQ(h.last()["item"]["id"], item0);
  EXPECT_EQ(h.last()["item"]["role"], "user");

  Transcript t;
  t.language = "en";
  t.duration = 3.25;
  t.text = " And so my fellow Americans, ask not.";
  Segment s;
  s.start = 1.25;
  s.end = 4.5;
  s.text = t.text;
  t.segments.push_back(s);
  ev.on_final(0, t);
  e = h.last();
  EXPECT_EQ(e["type"], "conversation.item.input_audio_transcription.completed");
  EXPECT_EQ(e["item_id"], item0);
  EXPECT_EQ(e["content_index"], 0);
  EXPECT_EQ(e["transcript"], "And so my fellow Americans, ask not.");
  EXPECT_DOUBLE_EQ(e["usage"]["seconds"].get<double>(), 3.25);
  EXPECT_EQ(e["prism"]["language"], "en");
  EXPECT_DOUBLE_EQ(e["prism"]["segments"][0]["start"].get<double>(), 1.25);

  ev.on_speech_started(1, 6.0);
  const std::string item1 = h.last()["item_id"];
  EXPECT_NE(item1, item0);
  ev.on_speech_stopped(1, 7.0);
  ev.on_committed(1, 6.0, 7.0);
  EXPECT_EQ(h.last()["previous_item_id"], item0);
  ev.on_final_failed(1, resource_exhausted("queue full"));
  e = h.last();
  EXPECT_EQ(e["type"], "conversation.item.input_audio_transcription.failed");
  EXPECT_EQ(e["item_id"], item1);
  EXPECT_EQ(e["error"]["code"], "rate_limit_exceeded");
  EXPECT_TRUE(h.closes.empty());

  // Event ids are unique and increasing.
  {
    std::lock_guard lock(h.mu);
    for (size_t i = 0; i < h.sent.size(); ++i) EXPECT_EQ(h.sent[i]["event_id"], "event_" + std::to_string(i + 1));
  }

  ev.on_error(deadline_exceeded_error("no audio for 30 s: the live stream stalled and was closed"));
  e = h.last();
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["code"], "input_audio_stalled");
  EXPECT_EQ(h.closes, std::vector<uint16_t>{1008});
  const size_t after = h.count();
  h.send({{"type", "input_audio_buffer.clear"}});
  EXPECT_EQ(h.count(), after);  // closed
}

TEST(RealtimeSession, FloodAndInternalErrorsClose) {
  Harness h1;
  h1.start(Protocol::realtime, "asr");
  h1.stream().events.on_error(resource_exhausted("audio arrives faster than it can be transcribed"));
  EXPECT_EQ(h1.last()["error"]["code"], "input_audio_flood");
  EXPECT_EQ(h1.closes, std::vector<uint16_t>{1008});
  Harness h2;
  h2.start(Protocol::realtime, "asr");
  h2.stream().events.on_error(internal_error("boom /secret/path"));
  EXPECT_EQ(h2.last()["error"]["type"], "server_error");
  EXPECT_EQ(h2.last()["error"]["message"].get<std::string>().find("secret"), std::string::npos);
  EXPECT_EQ(h2.closes, std::vector<uint16_t>{1011});
}

TEST(RealtimeSession, ClosingTheConnectionClosesTheStream) {
  Harness h;
  h.start(Protocol::realtime, "asr");
  h.session->on_close();
  EXPECT_TRUE(h.stream().is_closed);
  const size_t n = h.count();
  h.stream().events.on_speech_started(0, 1.0);
  EXPECT_EQ(h.count(), n);
}

// ---- the binary protocol ----------------------------------------------------------------------------

TEST(BinaryStream, NeedsAModel) {
  Harness h;
  h.start(Protocol::binary, "", 16000);
  EXPECT_EQ(h.last()["type"], "error");
  EXPECT_EQ(h.last()["error"]["param"], "model");
  EXPECT_EQ(h.closes, std::vector<uint16_t>{1008});
  EXPECT_FALSE(h.last().contains("event_id"));
}

TEST(BinaryStream, RawPcmInJsonOut) {
  Harness h;
  h.start(Protocol::binary, "asr", 16000, /*vad=*/false);
  EXPECT_EQ(h.count(), 0u);  // no created event
  EXPECT_FALSE(h.stream().options.server_vad);
  h.session->on_message(pcm16({16384, 0}), true);
  ASSERT_EQ(h.stream().samples.size(), 2u);
  EXPECT_FLOAT_EQ(h.stream().samples[0], 0.5f);
  h.session->on_message(std::string("\x01\x02\x03", 3), true);
  EXPECT_EQ(h.last()["type"], "error");
  EXPECT_EQ(h.last()["error"]["code"], "invalid_audio");
  EXPECT_TRUE(h.closes.empty());
  h.session->on_message(R"({"type": "commit"})", false);
  EXPECT_EQ(h.stream().commits, 1);
  h.session->on_message(R"({"type": "dance"})", false);
  EXPECT_EQ(h.last()["error"]["code"], "invalid_message");

  LiveStreamEvents& ev = h.stream().events;
  const size_t before = h.count();
  ev.on_speech_started(0, 0.5);  // not part of the binary protocol
  EXPECT_EQ(h.count(), before);
  ev.on_partial(LivePartial{0, 0.5, 1.5, " hello there"});
  json e = h.last();
  EXPECT_EQ(e, json({{"type", "partial"}, {"item", 0}, {"text", "hello there"}, {"start", 0.5}, {"end", 1.5}}));
  ev.on_committed(0, 0.5, 2.0);
  EXPECT_EQ(h.count(), before + 1);  // no committed event either
  Transcript t;
  t.language = "en";
  t.text = " hello there.";
  Segment s;
  s.start = 0.5;
  s.end = 2.0;
  s.text = " hello there.";
  t.segments.push_back(s);
  ev.on_final(0, t);
  e = h.last();
  EXPECT_EQ(e["type"], "final");
  EXPECT_EQ(e["item"], 0);
  EXPECT_EQ(e["text"], "hello there.");
  EXPECT_DOUBLE_EQ(e["start"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(e["end"].get<double>(), 2.0);
  EXPECT_EQ(e["segments"], json::array({{{"start", 0.5}, {"end", 2.0}, {"text", "hello there."}}}));
  ev.on_final_failed(1, unavailable("stopping"));
  EXPECT_EQ(h.last()["type"], "error");
  EXPECT_EQ(h.last()["item"], 1);
  EXPECT_TRUE(h.closes.empty());
}

// ---- the delta rule ---------------------------------------------------------------------------------

TEST(DeltaTracker, WholeUtterancePartialsExtend) {
  DeltaTracker d;
  EXPECT_EQ(d.next(" And"), "");  // one word: it may be cut
  EXPECT_EQ(d.next(" And so my"), "And so");
  EXPECT_EQ(d.next(" And so my fellow Americans"), " my fellow");
  EXPECT_EQ(d.next(" And so my fellow Americans"), "");
  EXPECT_EQ(d.next(" and so, my fellow Americans ask not"), " Americans ask");  // case and punctuation
  EXPECT_EQ(d.sent(), "And so my fellow Americans ask");
}

TEST(DeltaTracker, SlidingWindowsAlignOnTheSentTail) {
  DeltaTracker d;
  EXPECT_EQ(d.next(" ask not what your country can"), "ask not what your country");
  // The window slid: it starts inside what was sent.
  EXPECT_EQ(d.next(" your country can do for you"), " can do for");
  EXPECT_EQ(d.next(" do for you ask what you"), " you ask what");
  EXPECT_EQ(d.sent(), "ask not what your country can do for you ask what");
}

TEST(DeltaTracker, RevisionsSendNothingUntilAligned) {
  DeltaTracker d;
  EXPECT_EQ(d.next(" the quick brown fox"), "the quick brown");
  EXPECT_EQ(d.next(" a quick frown box jumps"), "");  // revised: the sent tail is not there
  EXPECT_EQ(d.next(" the quick brown fox jumps over"), " fox jumps");
  EXPECT_EQ(d.next(""), "");
}

TEST(DeltaTracker, RepeatedWordsAlignAtTheEarliestPlace) {
  DeltaTracker d;
  EXPECT_EQ(d.next(" no no no"), "no no");
  EXPECT_EQ(d.next(" no no no no stop"), " no no");
}

}  // namespace
}  // namespace prism::api::realtime
