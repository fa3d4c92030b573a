// `prism transcribe` in-process: jfk.flac through a tiny random Whisper
// (tests/reference/whisper_family.py with the test tokenizer files) into each format, on
// stdout and into --output, agreeing with each other (greedy, --no-fallback); the translate
// task, sequential chunks and the Silero VAD; every bad file, model or option exits 1 saying
// why; the deployment the flags make; the progress line.
#include "app/transcribe.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "api/routes/transcript_format.h"
#include "base/file.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"
#include "test_util/whisper_tokenizer.h"
#include "tools/demo/demo.h"

namespace prism::app {
namespace {

using nlohmann::json;

std::string jfk_path() { return test::testdata_dir() + "/audio/jfk.flac"; }

// A tiny random Whisper with real special ids: multilingual (51865) or English-only (51864).
Result<std::string> tiny_whisper(bool english = false) {
  const std::string vocab = english ? "51864" : "51865";
  PRISM_ASSIGN_OR_RETURN(std::string dir, test::generate_reference("whisper_family.py", "transcribe_cli_" + vocab,
                                                                   "write --no-reference --vocab " + vocab));
  test::WhisperFilesOptions o;
  o.layout = english ? test::WhisperLayout::english : test::WhisperLayout::multilingual;
  PRISM_RETURN_IF_ERROR(test::write_whisper_files(dir, o).status());
  return dir;
}

class TranscribeCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::string> dir = tiny_whisper();
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    model_ = *dir;
    out_dir_ = test::scratch_dir("transcribe_cli_out");
  }
  // Greedy without fallback, English, no progress: the same words every run.
  TranscribeCommandOptions options(const std::string& format) const {
    TranscribeCommandOptions o;
    o.file = jfk_path();
    o.model = model_;
    o.format = format;
    o.language = "en";
    o.temperature_fallback = false;
    o.progress = false;
    return o;
  }
  // Runs into --output; returns the file's text ("" and a failure when the exit code is not 0).
  std::string run_to_file(TranscribeCommandOptions o, const std::string& name) const {
    o.output = out_dir_ + "/" + name;
    const int code = run_transcribe(o);
    EXPECT_EQ(code, 0) << name;
    Result<std::string> text = read_file(o.output);
    EXPECT_TRUE(text.has_value()) << text.status().to_string();
    return code == 0 && text.has_value() ? *text : std::string();
  }
  // Runs expecting exit code 1; returns what it said on stderr.
  static std::string run_failing(const TranscribeCommandOptions& o) {
    testing::internal::CaptureStderr();
    const int code = run_transcribe(o);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, 1) << err;
    return err;
  }

  std::string model_, out_dir_;
};

// One process (ctest runs each TEST alone) for every successful run: a load each.
TEST_F(TranscribeCommand, EveryFormatOfOneTranscript) {
  const json j = json::parse(run_to_file(options("json"), "jfk.json"));
  ASSERT_TRUE(j["text"].is_string()) << j.dump();
  EXPECT_EQ(j["usage"], json::parse(R"({"type": "duration", "seconds": 11})"));
  const std::string text = j["text"];

  const json v = json::parse(run_to_file(options("verbose_json"), "jfk.verbose.json"));
  EXPECT_EQ(v["task"], "transcribe");
  EXPECT_EQ(v["language"], "english");
  EXPECT_DOUBLE_EQ(v["duration"].get<double>(), 11.0);
  EXPECT_EQ(v["text"], text);
  pipelines::transcribe::Transcript t;
  for (const json& s : v["segments"]) {
    pipelines::transcribe::Segment seg;
    seg.start = s["start"];
    seg.end = s["end"];
    seg.text = s["text"];
    t.segments.push_back(seg);
  }
  EXPECT_EQ(run_to_file(options("srt"), "jfk.srt"), api::transcript_srt(t));

  // stdout when there is no --output (and nothing else on it).
  testing::internal::CaptureStdout();
  EXPECT_EQ(run_transcribe(options("text")), 0);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), text + "\n");

  // One chunk: sequential decoding reads the same; so does the Silero VAD's single span.
  TranscribeCommandOptions sequential = options("text");
  sequential.sequential = true;
  EXPECT_EQ(run_to_file(sequential, "jfk.sequential.txt"), text + "\n");
  TranscribeCommandOptions silero = options("verbose_json");
  silero.vad = "silero";
  silero.vad_model = test::testdata_dir() + "/vad/silero_vad.onnx";
  const json sv = json::parse(run_to_file(silero, "jfk.silero.json"));
  EXPECT_EQ(sv["prism"]["chunks"], 1);
  EXPECT_GT(sv["prism"]["speech_seconds"].get<double>(), 5.0);

  // The translate task (the language is detected).
  TranscribeCommandOptions translate = options("verbose_json");
  translate.language.clear();
  translate.task = "translate";
  const json tv = json::parse(run_to_file(translate, "jfk.translated.json"));
  EXPECT_EQ(tv["task"], "translate");
  EXPECT_EQ(tv["language"], "english");
  EXPECT_TRUE(tv["text"].is_string());
}

TEST_F(TranscribeCommand, BadInputExitsOneSayingWhy) {
  TranscribeCommandOptions o = options("text");
  o.file = out_dir_ + "/missing.flac";
  EXPECT_NE(run_failing(o).find("missing.flac"), std::string::npos);

  const std::string not_audio = out_dir_ + "/notes.wav";
  ASSERT_TRUE(write_file(not_audio, "these are notes, not audio").ok());
  o.file = not_audio;
  EXPECT_NE(run_failing(o).find("notes.wav is not audio that can be decoded"), std::string::npos);

  o = options("text");
  o.model = out_dir_ + "/no-such-model";
  EXPECT_NE(run_failing(o).find("no such model directory"), std::string::npos);

  o = options("text");
  o.model = out_dir_;  // a directory, but no model in it
  EXPECT_NE(run_failing(o).find("cannot load the model"), std::string::npos);

  o = options("text");
  o.language = "xx";
  EXPECT_NE(run_failing(o).find("--language: language 'xx' is not a language Whisper knows"), std::string::npos);

  o = options("text");
  o.vad = "silero";  // without --vad-model
  EXPECT_NE(run_failing(o).find("vad_model"), std::string::npos);

  o = options("text");
  o.vad_model = out_dir_ + "/missing.onnx";
  EXPECT_NE(run_failing(o).find("missing.onnx"), std::string::npos);

  o = options("text");
  o.task = "translate";  // with --language
  EXPECT_NE(run_failing(o).find("--language applies to --task transcribe only"), std::string::npos);

  o = options("srt");
  o.format = "docx";
  EXPECT_NE(run_failing(o).find("--format"), std::string::npos);

  Result<std::string> english = tiny_whisper(/*english=*/true);
  ASSERT_TRUE(english.has_value()) << english.status().to_string();
  o = options("text");
  o.model = *english;
  o.language.clear();
  o.task = "translate";
  EXPECT_NE(run_failing(o).find("is English-only: it cannot translate"), std::string::npos);
}

TEST(TranscribeDeployment, FlagsBecomeKnobs) {
  TranscribeCommandOptions o;
  o.model = test::scratch_dir("transcribe_cli_flags") + "/";
  o.vad_model = "/models/silero_vad.onnx";
  o.sequential = true;
  Result<serving::DeploymentConfig> d = transcribe_deployment(o);
  ASSERT_TRUE(d.has_value()) << d.status().to_string();
  EXPECT_EQ(d->name.rfind("transcribe_cli_flags", 0), 0u) << d->name;  // the directory's name
  EXPECT_EQ(d->task, "transcribe");
  EXPECT_EQ(d->timeout_ms, 0);
  EXPECT_EQ(d->knobs.get_string("vad", "").value(), "silero");  // implied by --vad-model
  EXPECT_EQ(d->knobs.get_string("vad_model", "").value(), "/models/silero_vad.onnx");
  EXPECT_EQ(d->knobs.get_bool("asr_parallel_chunks", true).value(), false);
  EXPECT_EQ(d->knobs.origin("vad_model"), "--vad-model");

  // Without --model: the demo set's demo-asr when this build's demo set has one.
  o = TranscribeCommandOptions{};
  o.demo_dir = test::scratch_dir("transcribe_cli_demo");
  const auto models = tools::demo::demo_models();
  const bool has_demo_asr = std::any_of(models.begin(), models.end(), [](const tools::demo::DemoModel& m) {
    return std::string_view(m.name) == "demo-asr";
  });
  d = transcribe_deployment(o);
  if (has_demo_asr) {
    ASSERT_TRUE(d.has_value()) << d.status().to_string();
    EXPECT_EQ(d->name, "demo-asr");
    EXPECT_EQ(d->task, "transcribe");
  } else {
    ASSERT_FALSE(d.has_value());
    EXPECT_NE(d.status().message().find("pass --model DIR"), std::string::npos) << d.status().message();
  }
}

TEST(TranscribeDeployment, CommandLine) {
  CLI::App app;
  TranscribeCommandOptions o;
  CLI::App* cmd = add_transcribe_command(app, o);
  app.parse("transcribe a.mp3 --format srt --task translate --temperature 0.2 --sequential --no-progress", false);
  EXPECT_TRUE(cmd->parsed());
  EXPECT_EQ(o.file, "a.mp3");
  EXPECT_EQ(o.format, "srt");
  EXPECT_EQ(o.task, "translate");
  EXPECT_DOUBLE_EQ(o.temperature, 0.2);
  EXPECT_TRUE(o.sequential);
  EXPECT_FALSE(o.progress);
  EXPECT_TRUE(o.temperature_fallback);

  CLI::App bad;
  TranscribeCommandOptions b;
  add_transcribe_command(bad, b);
  EXPECT_THROW(bad.parse("transcribe a.mp3 --format docx", false), CLI::ValidationError);
  CLI::App bad_temperature;
  add_transcribe_command(bad_temperature, b);
  EXPECT_THROW(bad_temperature.parse("transcribe a.mp3 --temperature 1.5", false), CLI::ValidationError);
}

TEST(TranscribeProgressLine, Formats) {
  TranscribeProgress p{3, 10, 110.0, 2.64};
  EXPECT_EQ(format_transcribe_progress(p, 10), "[###.......]  3/10 chunks  33.0 of 110.0 s  12.5 s/s  ETA 6s");
  EXPECT_EQ(format_transcribe_progress(p, 0), "3/10 chunks (30.0%), 33.0 of 110.0 s of audio, 12.5 audio s/s, ETA 6s");
  p = {0, 4, 60.0, 1.0};
  EXPECT_EQ(format_transcribe_progress(p, 0), "0/4 chunks (0.0%), 0.0 of 60.0 s of audio, - audio s/s, ETA -");
  p = {4, 4, 60.0, 2.0};
  EXPECT_EQ(format_transcribe_progress(p, 4), "[####]  4/4 chunks  60.0 of 60.0 s  30.0 s/s  ETA 0s");
}

}  // namespace
}  // namespace prism::app
