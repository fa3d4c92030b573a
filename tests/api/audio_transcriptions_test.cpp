// /v1/audio/transcriptions and /v1/audio/translations over a real HttpServer on a loopback
// port: jfk.flac through a tiny random Whisper (tests/reference/whisper_family.py, Whisper's
// real vocabulary and the test tokenizer files) in every response format, the event stream,
// translations, and every error the route answers (each with its param). The form reading
// is tested alone too. Random weights make the words meaningless; decoding greedily without
// the temperature fallback (the prism extension) makes them the same in every request, so
// the formats are compared with each other. A client's disconnect is checked against a
// gated fake engine: the chunk's request ends cancelled.
#include "api/routes/audio_transcriptions.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "api/http_server.h"
#include "base/file.h"
#include "engines/generate/fake_decoder.h"
#include "engines/generate/generate_engine.h"
#include "engines/generate/generate_engine_factory.h"
#include "media/audio.h"
#include "serving/deployment_set.h"
#include "serving/echo_engine.h"
#include "test_util/audio_writer.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"
#include "test_util/whisper_tokenizer.h"

namespace prism::api {
namespace {

using nlohmann::json;
using frontends::SpeechTask;

constexpr int64_t kWhisperVocab = 51865;

// ---- multipart requests over HTTP ----

struct Field {
  Field(std::string n, std::string v, std::string f = {})
      : name(std::move(n)), value(std::move(v)), filename(std::move(f)) {}
  std::string name, value;
  std::string filename;  // non-empty: a file part
};

const std::string kBoundary = "----prism-test-boundary-7MA4YWxkTrZu0gW";

std::string multipart_body(const std::vector<Field>& fields) {
  std::string body;
  for (const Field& f : fields) {
    body += "--" + kBoundary + "\r\nContent-Disposition: form-data; name=\"" + f.name + "\"";
    if (!f.filename.empty()) body += "; filename=\"" + f.filename + "\"\r\nContent-Type: application/octet-stream";
    body += "\r\n\r\n" + f.value + "\r\n";
  }
  return body + "--" + kBoundary + "--\r\n";
}

struct Reply {
  int status = 0;
  std::string content_type;
  std::string body;
  json json_body() const { return json::parse(body, nullptr, false); }
};

Reply post(int port, const std::string& path, const std::string& content_type, const std::string& body) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
  http::request<http::string_body> req(http::verb::post, path, 11);
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, content_type);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  http::read(stream, buffer, parser);
  beast::error_code ec;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  const auto& res = parser.get();
  return {int(res.result_int()), std::string(res[http::field::content_type]), res.body()};
}

Reply post_form(int port, const std::vector<Field>& fields, const std::string& path = "/v1/audio/transcriptions") {
  return post(port, path, "multipart/form-data; boundary=" + kBoundary, multipart_body(fields));
}

const std::string& jfk_flac() {
  static const std::string bytes = [] {
    Result<std::string> b = read_file(test::testdata_dir() + "/audio/jfk.flac");
    EXPECT_TRUE(b.has_value()) << b.status().to_string();
    return b.has_value() ? b.value() : std::string();
  }();
  return bytes;
}

Field jfk() { return {"file", jfk_flac(), "jfk.flac"}; }

// jfk.flac, 20 s of silence, jfk.flac again (42 s: two chunks), as a 16 kHz WAV.
const std::string& two_chunks_wav() {
  static const std::string bytes = [] {
    const std::string& flac = jfk_flac();
    Result<media::Audio> audio =
        media::decode_audio(std::span(reinterpret_cast<const uint8_t*>(flac.data()), flac.size()));
    EXPECT_TRUE(audio.has_value()) << audio.status().to_string();
    if (!audio.has_value()) return std::string();
    std::vector<float> samples = audio->samples;
    samples.insert(samples.end(), size_t(20 * media::kSpeechSampleRate), 0.0f);
    samples.insert(samples.end(), audio->samples.begin(), audio->samples.end());
    Result<std::vector<uint8_t>> wav = test::write_audio(samples, {});
    EXPECT_TRUE(wav.has_value()) << wav.status().to_string();
    return wav.has_value() ? std::string(wav->begin(), wav->end()) : std::string();
  }();
  return bytes;
}
// Greedy, one decode per chunk: the same words in every request.
Field reproducible() { return {"prism", R"({"temperature_fallback": false})"}; }

// The SSE body's data payloads, in order.
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(at, end - at);
    if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
    at = end + 2;
  }
  return out;
}

void expect_error(const Reply& r, int status, const std::string& param, const std::string& part) {
  EXPECT_EQ(r.status, status) << r.body;
  const json body = r.json_body();
  ASSERT_TRUE(body.contains("error")) << r.body;
  const json& e = body["error"];
  if (param.empty()) EXPECT_TRUE(e["param"].is_null()) << r.body;
  else EXPECT_EQ(e["param"], param) << r.body;
  EXPECT_NE(e["message"].get<std::string>().find(part), std::string::npos) << e["message"] << "\n  lacks: " << part;
}

// ---- the server ----

// A Whisper-shaped directory: the test tokenizer files over whatever the model writer put there.
std::string whisper_files(const std::string& dir, test::WhisperLayout layout = test::WhisperLayout::multilingual) {
  test::WhisperFilesOptions o;
  o.layout = layout;
  Result<test::WhisperTokenIds> ids = test::write_whisper_files(dir, o);
  EXPECT_TRUE(ids.has_value()) << ids.status().to_string();
  return dir;
}

serving::EngineKind fake_speech_engine(std::shared_ptr<test::CallGate> gate, int64_t vocab) {
  test::FakeDecoder::Options d;
  d.max_context = 448;
  d.vocab = vocab;
  d.cross = true;
  d.gate = std::move(gate);
  engines::generate::DecoderLoader decoder = [d](const serving::DeploymentConfig&, ops::Precision)
      -> Result<std::unique_ptr<models::Decoder>> { return std::unique_ptr<models::Decoder>(std::make_unique<test::FakeDecoder>(d)); };
  test::FakeSpeechEncoder::Options e;
  e.input_frames = 3000;
  engines::generate::SpeechEncoderLoader encoder = [e](const serving::DeploymentConfig&, ops::Precision)
      -> Result<std::unique_ptr<models::SpeechEncoder>> {
    return std::unique_ptr<models::SpeechEncoder>(std::make_unique<test::FakeSpeechEncoder>(e));
  };
  return serving::EngineKind(engines::generate::generate_engine_factory(decoder, {}, encoder),
                             engines::generate::generate_frontend_factory());
}

serving::DeploymentConfig transcribe_config(const std::string& name, const std::string& dir) {
  serving::DeploymentConfig c;
  c.name = name;
  c.task = "transcribe";
  c.model = dir;
  c.knobs.set("kv_cache_bytes", int64_t(16) << 20);
  return c;
}

struct Server {
  serving::MetricsRegistry metrics;
  serving::DeploymentSet deployments{metrics};
  std::unique_ptr<pipelines::transcribe::AsrServices> asr;
  std::unique_ptr<pipelines::JobPool> jobs;
  std::unique_ptr<HttpServer> http;
  std::shared_ptr<test::CallGate> gate = std::make_shared<test::CallGate>();
  Status status;

  // real: "whisper" and "whisper-5s" are a tiny random Whisper (the PyTorch generator's);
  // otherwise the fake engine over the tokenizer files (requests that never decode).
  explicit Server(bool real) { status = start(real); }
  ~Server() {
    gate->open();
    http.reset();
    jobs.reset();
    asr.reset();
    deployments.stop_all();
  }

  Status start(bool real) {
    std::string dir = test::scratch_dir("audio_route_whisper");
    if (real) {
      PRISM_ASSIGN_OR_RETURN(dir, test::generate_reference("whisper_family.py", "audio_route_whisper",
                                                           "write --no-reference --vocab " + std::to_string(kWhisperVocab)));
    }
    whisper_files(dir);
    serving::EngineFactories engines;
    serving::register_echo_engine(engines);
    engines::generate::register_generate_engine(engines);
    PRISM_ASSIGN_OR_RETURN(const serving::EngineKind whisper,
                           real ? engines.find("transcribe") : Result<serving::EngineKind>(fake_speech_engine(nullptr, kWhisperVocab)));
    PRISM_RETURN_IF_ERROR(deployments.add(transcribe_config("whisper", dir), whisper));
    serving::DeploymentConfig shorter = transcribe_config("whisper-5s", dir);
    shorter.knobs.set("max_audio_seconds", 5.0);
    PRISM_RETURN_IF_ERROR(deployments.add(shorter, whisper));
    // An English-only Whisper and a gated one: the fake engine (no weights needed) behind the
    // real frontend over Whisper-shaped tokenizer files.
    const std::string english = whisper_files(test::scratch_dir("audio_route_english"), test::WhisperLayout::english);
    PRISM_RETURN_IF_ERROR(deployments.add(transcribe_config("whisper-en", english), fake_speech_engine(nullptr, 51864)));
    const std::string gated = whisper_files(test::scratch_dir("audio_route_gated"));
    PRISM_RETURN_IF_ERROR(deployments.add(transcribe_config("gated", gated), fake_speech_engine(gate, kWhisperVocab)));
    serving::DeploymentConfig echo;
    echo.name = "echo";
    echo.task = "echo";
    PRISM_RETURN_IF_ERROR(deployments.add(echo, engines));
    deployments.start_all();
    PRISM_RETURN_IF_ERROR(deployments.wait_ready());
    asr = std::make_unique<pipelines::transcribe::AsrServices>(deployments);
    Router router;
    jobs = std::make_unique<pipelines::JobPool>(pipelines::JobPoolOptions{}, &metrics);
    add_audio_routes(router, deployments, *asr, *jobs);
    HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.num_io_threads = 2;
    http = std::make_unique<HttpServer>(o, std::move(router));
    return http->start();
  }
  int port() const { return http->port(); }

  double metric(const std::string& name, const std::string& labels) const {
    std::istringstream text(metrics.render());
    for (std::string line; std::getline(text, line);)
      if (line.starts_with(name + "{") && line.find(labels) != std::string::npos)
        return std::stod(line.substr(line.rfind(' ') + 1));
    return 0;
  }
};

// A tiny random Whisper behind the route: what decodes.
class AudioRoute : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new Server(/*real=*/true); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(server_->status.ok()) << server_->status.to_string(); }
  int port() const { return server_->port(); }

  // The json transcript of jfk.flac in English, greedily: what every other format must agree with.
  static const std::string& reference_text() {
    static const std::string text = [] {
      const Reply r = post_form(server_->port(), {jfk(), {"model", "whisper"}, {"language", "en"}, reproducible()});
      EXPECT_EQ(r.status, 200) << r.body;
      return r.json_body().value("text", std::string("<no text>"));
    }();
    return text;
  }

  // One TEST per process under ctest costs a Python run and a load: related checks share one.
  void json_is_the_text_and_the_billed_seconds();
  void every_format_agrees_with_verbose_json();
  void detected_language_is_named();
  void stream_sends_deltas_then_done();
  void longer_audio_is_chunked_and_stitched_in_order();

  static Server* server_;
};

Server* AudioRoute::server_ = nullptr;

// Fakes only (no Python, no weights): requests refused before decoding, and a gated engine.
class AudioRouteFake : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new Server(/*real=*/false); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(server_->status.ok()) << server_->status.to_string(); }
  int port() const { return server_->port(); }

  static Server* server_;
};

Server* AudioRouteFake::server_ = nullptr;

TEST_F(AudioRoute, EveryResponseFormat) {
  json_is_the_text_and_the_billed_seconds();
  every_format_agrees_with_verbose_json();
  detected_language_is_named();
}

TEST_F(AudioRoute, StreamsAndLongerAudio) {
  stream_sends_deltas_then_done();
  longer_audio_is_chunked_and_stitched_in_order();
}

void AudioRoute::json_is_the_text_and_the_billed_seconds() {
  const Reply r = post_form(port(), {jfk(), {"model", "whisper"}, {"language", "en"}, reproducible()});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  const json body = r.json_body();
  ASSERT_TRUE(body["text"].is_string()) << r.body;
  EXPECT_EQ(body["usage"], json::parse(R"({"type": "duration", "seconds": 11})"));
  EXPECT_EQ(body.size(), 2u) << r.body;
  EXPECT_EQ(body["text"], reference_text());
  // It ran as a job of the pool, which ended before the response left.
  EXPECT_GE(server_->metric("prism_jobs_total", "pool=\"jobs\",state=\"succeeded\""), 1.0);
  // Trimmed, as OpenAI's text is.
  const std::string text = body["text"];
  if (!text.empty()) {
    EXPECT_NE(text.front(), ' ');
    EXPECT_NE(text.back(), ' ');
  }
}

void AudioRoute::every_format_agrees_with_verbose_json() {
  Reply r = post_form(port(), {jfk(), {"model", "whisper"}, {"language", "en"}, reproducible(),
                               {"response_format", "verbose_json"}, {"timestamp_granularities[]", "segment"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  const json v = r.json_body();
  EXPECT_EQ(v["task"], "transcribe");
  EXPECT_EQ(v["language"], "english");
  EXPECT_DOUBLE_EQ(v["duration"].get<double>(), 11.0);
  EXPECT_EQ(v["text"], reference_text());
  EXPECT_EQ(v["usage"], json::parse(R"({"type": "duration", "seconds": 11})"));
  EXPECT_EQ(v["prism"]["chunks"], 1);
  EXPECT_EQ(v["prism"]["rerun_chunks"], 0);  // no fallback asked
  ASSERT_TRUE(v["segments"].is_array());

  // Rebuild the transcript from verbose_json: srt and vtt must be its cues, text its text.
  pipelines::transcribe::Transcript t;
  t.text = v["text"];
  t.duration = v["duration"];
  std::string joined;
  int id = 0;
  for (const json& s : v["segments"]) {
    for (const char* key : {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                            "compression_ratio", "no_speech_prob"})
      EXPECT_TRUE(s.contains(key)) << key << " in " << s.dump();
    EXPECT_EQ(s["id"], id++);
    EXPECT_EQ(s["temperature"], 0.0);
    EXPECT_GE(s["start"].get<double>(), 0.0);
    EXPECT_LE(s["start"].get<double>(), s["end"].get<double>());
    EXPECT_LE(s["end"].get<double>(), 11.0);
    pipelines::transcribe::Segment seg;
    seg.start = s["start"];
    seg.end = s["end"];
    seg.text = s["text"];
    joined += seg.text;
    t.segments.push_back(seg);
  }
  // The text is the segments' texts joined, trimmed.
  const size_t b = joined.find_first_not_of(' ');
  const size_t e = joined.find_last_not_of(' ');
  EXPECT_EQ(v["text"], b == std::string::npos ? std::string() : joined.substr(b, e - b + 1));

  r = post_form(port(), {jfk(), {"model", "whisper"}, {"language", "en"}, reproducible(), {"response_format", "text"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(r.body, reference_text() + "\n");

  r = post_form(port(), {jfk(), {"model", "whisper"}, {"language", "en"}, reproducible(), {"response_format", "srt"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(r.body, transcript_srt(t));

  r = post_form(port(), {jfk(), {"model", "whisper"}, {"language", "en"}, reproducible(), {"response_format", "vtt"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(r.body, transcript_vtt(t));
  EXPECT_EQ(r.body.rfind("WEBVTT\n\n", 0), 0u);
}

void AudioRoute::detected_language_is_named() {
  const Reply r = post_form(port(), {jfk(), {"model", "whisper"}, reproducible(), {"response_format", "verbose_json"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string language = r.json_body()["language"];
  // A name from whisper's table (the random model picks any of its languages), never a code.
  EXPECT_GT(language.size(), 2u) << language;
}

void AudioRoute::stream_sends_deltas_then_done() {
  const Reply r = post_form(port(), {jfk(), {"model", "whisper"}, {"language", "en"}, reproducible(), {"stream", "true"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type.rfind("text/event-stream", 0), 0u) << r.content_type;
  const std::vector<std::string> events = sse_data(r.body);
  ASSERT_GE(events.size(), 2u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string deltas;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    EXPECT_EQ(e["type"], "transcript.text.delta") << events[i];
    deltas += e["delta"].get<std::string>();
  }
  const json done = json::parse(events[events.size() - 2]);
  EXPECT_EQ(done["type"], "transcript.text.done");
  EXPECT_EQ(done["text"], reference_text());
  EXPECT_EQ(done["usage"], json::parse(R"({"type": "duration", "seconds": 11})"));
  EXPECT_EQ(deltas, reference_text());

  // text streams too; verbose_json ignores stream (as OpenAI does for whisper-1).
  Reply text = post_form(port(), {jfk(), {"model", "whisper"}, {"language", "en"}, reproducible(), {"stream", "True"},
                                  {"response_format", "text"}});
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(text.content_type.rfind("text/event-stream", 0), 0u);
  EXPECT_EQ(json::parse(sse_data(text.body).end()[-2])["text"], reference_text());
  Reply verbose = post_form(port(), {jfk(), {"model", "whisper"}, {"language", "en"}, reproducible(), {"stream", "true"},
                                     {"response_format", "verbose_json"}});
  ASSERT_EQ(verbose.status, 200) << verbose.body;
  EXPECT_EQ(verbose.content_type, "application/json");
  EXPECT_EQ(verbose.json_body()["text"], reference_text());
}

// Two chunks decoded in parallel: segments at their times in the whole recording, in order,
// streamed in that order.
void AudioRoute::longer_audio_is_chunked_and_stitched_in_order() {
  const Field file{"file", two_chunks_wav(), "two.wav"};
  const Reply r = post_form(port(), {file, {"model", "whisper"}, {"language", "en"}, reproducible(),
                                     {"prompt", "President Kennedy."}, {"response_format", "verbose_json"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json v = r.json_body();
  EXPECT_EQ(v["prism"]["chunks"], 2);
  EXPECT_EQ(v["usage"]["seconds"], 42);
  ASSERT_GE(v["segments"].size(), 2u) << r.body;
  double last_start = -1;
  bool in_second = false;
  for (const json& s : v["segments"]) {
    EXPECT_GE(s["start"].get<double>(), last_start);
    last_start = s["start"];
    in_second = in_second || s["start"].get<double>() >= 31.0;
  }
  EXPECT_TRUE(in_second) << r.body;

  const Reply stream = post_form(port(), {file, {"model", "whisper"}, {"language", "en"}, reproducible(),
                                          {"prompt", "President Kennedy."}, {"stream", "true"}});
  ASSERT_EQ(stream.status, 200) << stream.body;
  const std::vector<std::string> events = sse_data(stream.body);
  ASSERT_GE(events.size(), 4u) << stream.body;  // a delta per chunk at least, done, [DONE]
  std::string deltas;
  for (size_t i = 0; i + 2 < events.size(); ++i) deltas += json::parse(events[i])["delta"].get<std::string>();
  EXPECT_EQ(deltas, v["text"]);
  EXPECT_EQ(json::parse(events[events.size() - 2])["text"], v["text"]);
}

TEST_F(AudioRoute, Translations) {
  Reply r = post_form(port(), {jfk(), {"model", "whisper"}, reproducible(), {"response_format", "verbose_json"}},
                      "/v1/audio/translations");
  ASSERT_EQ(r.status, 200) << r.body;
  const json v = r.json_body();
  EXPECT_EQ(v["task"], "translate");
  EXPECT_EQ(v["language"], "english");
  EXPECT_DOUBLE_EQ(v["duration"].get<double>(), 11.0);
  EXPECT_TRUE(v["text"].is_string());

  r = post_form(port(), {jfk(), {"model", "whisper"}, reproducible()}, "/v1/audio/translations");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json_body()["text"], v["text"]);  // greedy: the same translation
  r = post_form(port(), {jfk(), {"model", "whisper"}, reproducible(), {"stream", "true"}}, "/v1/audio/translations");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(sse_data(r.body).end()[-2])["text"], v["text"]);

  expect_error(post_form(port(), {jfk(), {"model", "whisper"}, {"language", "fr"}}, "/v1/audio/translations"), 400,
               "language", "translations take no language");
  expect_error(post_form(port(), {jfk(), {"model", "whisper-en"}}, "/v1/audio/translations"), 400, "model",
               "English-only: it cannot translate");
}

TEST_F(AudioRouteFake, RequestErrorsNameTheirField) {
  const int p = port();
  expect_error(post_form(p, {{"model", "whisper"}}), 400, "file", "Missing required parameter: 'file'.");
  expect_error(post_form(p, {jfk()}), 400, "model", "Missing required parameter: 'model'.");
  expect_error(post_form(p, {jfk(), {"model", ""}}), 400, "model", "empty");
  expect_error(post_form(p, {{"file", "this is not audio at all", "notes.txt"}, {"model", "whisper"}}), 400, "file",
               "file is not audio that can be decoded");
  expect_error(post_form(p, {{"file", "", "empty.wav"}, {"model", "whisper"}}), 400, "file", "file is empty");
  expect_error(post_form(p, {jfk(), {"model", "whisper-5s"}}), 400, "file", "more than the limit of 5");
  expect_error(post_form(p, {jfk(), {"model", "whisper"}, {"language", "xx"}}), 400, "language",
               "language 'xx' is not a language Whisper knows");
  expect_error(post_form(p, {jfk(), {"model", "whisper-en"}, {"language", "fr"}}), 400, "language",
               "this model is English-only");
  expect_error(post_form(p, {jfk(), {"model", "whisper"}, {"temperature", "1.5"}}), 400, "temperature",
               "between 0 and 1");
  expect_error(post_form(p, {jfk(), {"model", "whisper"}, {"temperature", "warm"}}), 400, "temperature",
               "between 0 and 1");
  expect_error(post_form(p, {jfk(), {"model", "whisper"}, {"response_format", "xml"}}), 400, "response_format",
               "must be one of 'json', 'text', 'srt', 'verbose_json', 'vtt'");
  expect_error(post_form(p, {jfk(), {"model", "whisper"}, {"timestamp_granularities[]", "segment"},
                             {"timestamp_granularities[]", "word"}}),
               400, "timestamp_granularities[]", "word timestamps are not supported");
  expect_error(post_form(p, {jfk(), {"model", "whisper"}, {"stream", "maybe"}}), 400, "stream", "true or false");
  expect_error(post_form(p, {jfk(), {"model", "whisper"}, {"prism", "[1]"}}), 400, "prism", "JSON object");
  expect_error(post_form(p, {jfk(), {"model", "whisper"}, {"prism", R"({"beam": 5})"}}), 400, "prism.beam",
               "not a Prism option");
  expect_error(post_form(p, {jfk(), {"model", "whisper"}, {"prism", R"({"temperature_fallback": 1})"}}), 400,
               "prism.temperature_fallback", "expected a boolean");
  expect_error(post_form(p, {jfk(), {"model", "nope"}}), 404, "model", "The model 'nope' does not exist.");
  expect_error(post_form(p, {jfk(), {"model", "echo"}}), 400, "model", "serves task 'echo', not 'transcribe'");
  expect_error(post(p, "/v1/audio/transcriptions", "application/json", R"({"model": "whisper"})"), 400, "",
               "must be multipart/form-data");
  expect_error(post(p, "/v1/audio/transcriptions", "multipart/form-data; boundary=abc", "garbage"), 400, "",
               "malformed");
}

// The client goes away while its chunk decodes: the chunk's request ends cancelled and the
// engine is free again.
TEST_F(AudioRouteFake, DisconnectCancelsTheTranscription) {
  Server& s = *server_;
  s.gate->pause();
  const int entered = s.gate->entered;
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    boost::asio::ip::tcp::resolver resolver(io);
    boost::asio::connect(socket, resolver.resolve("127.0.0.1", std::to_string(port())));
    const std::string body = multipart_body({jfk(), {"model", "gated"}, reproducible()});
    const std::string head = "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                             "multipart/form-data; boundary=" + kBoundary + "\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n";
    boost::asio::write(socket, boost::asio::buffer(head + body));
    ASSERT_TRUE(s.gate->wait_entered(entered + 1));  // the chunk is in the model
    socket.close();
  }
  s.gate->open();
  const std::string labels = "deployment=\"gated\"";
  for (int i = 0; i < 600 && s.metric("prism_requests_total", "status=\"cancelled\"") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(s.metric("prism_requests_total", labels + ",modality=\"asr\",status=\"cancelled\""), 1.0)
      << s.metrics.render();
  EXPECT_EQ(s.metric("prism_requests_total", labels + ",modality=\"asr\",status=\"ok\""), 0.0);
  // Its job ended cancelled.
  for (int i = 0; i < 600 && s.metric("prism_jobs_total", "state=\"cancelled\"") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(s.metric("prism_jobs_total", "pool=\"jobs\",state=\"cancelled\""), 1.0) << s.metrics.render();
}

// ---- the form alone ----

TEST(AudioRequestForm, ReadsEveryField) {
  AudioRequest r;
  const std::string body = multipart_body({{"file", std::string("RIFF\0\1", 6), "a.wav"},
                                           {"model", " whisper-1 "},
                                           {"language", "en"},
                                           {"prompt", "  Names: Kennedy.  "},
                                           {"temperature", "0.4"},
                                           {"response_format", "srt"},
                                           {"timestamp_granularities[]", "segment"},
                                           {"stream", "false"},
                                           {"user", "ignored"},
                                           {"model", "second-is-ignored"}});
  std::optional<ApiError> e =
      read_audio_request("multipart/form-data; boundary=" + kBoundary, body, SpeechTask::transcribe, r);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(r.task, SpeechTask::transcribe);
  EXPECT_EQ(r.file, std::string("RIFF\0\1", 6));
  EXPECT_EQ(r.file_name, "a.wav");
  EXPECT_EQ(r.model, "whisper-1");
  EXPECT_EQ(r.language, "en");
  EXPECT_EQ(r.prompt, "  Names: Kennedy.  ");
  EXPECT_FLOAT_EQ(r.temperature, 0.4f);
  EXPECT_EQ(r.format, TranscriptFormat::srt);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.temperature_fallback);
  EXPECT_FALSE(r.streams());

  // Defaults; empty fields count as absent; stream only with json and text.
  e = read_audio_request("multipart/form-data; boundary=" + kBoundary,
                         multipart_body({{"file", "x", "a.mp3"}, {"model", "m"}, {"language", ""}, {"temperature", ""},
                                         {"stream", "1"}, {"prism", R"({"temperature_fallback": false})"}}),
                         SpeechTask::translate, r);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(r.task, SpeechTask::translate);
  EXPECT_FALSE(r.language.has_value());
  EXPECT_EQ(r.temperature, 0.0f);
  EXPECT_EQ(r.format, TranscriptFormat::json);
  EXPECT_TRUE(r.streams());
  EXPECT_FALSE(r.temperature_fallback);
  r.format = TranscriptFormat::vtt;
  EXPECT_FALSE(r.streams());
}

TEST(AudioRequestForm, LanguageNames) {
  EXPECT_EQ(response_language_name(SpeechTask::transcribe, "fr", true), "french");
  EXPECT_EQ(response_language_name(SpeechTask::transcribe, "", true), "");
  EXPECT_EQ(response_language_name(SpeechTask::transcribe, "", false), "english");
  EXPECT_EQ(response_language_name(SpeechTask::translate, "de", true), "english");
}

}  // namespace
}  // namespace prism::api
