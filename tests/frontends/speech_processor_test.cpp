// SpeechProcessor over Whisper-shaped directories (tests/test_util/whisper_tokenizer.h: the
// real GPT-2 tokenizer with Whisper's special tokens at the real ids, in the multilingual,
// English-only and large-v3 / older-file layouts): ids, languages, prompts, the logit rules
// against tests/reference/whisper_rules.py (openai/whisper's filters re-written in torch) on
// seeded random rows, hand cases for each rule, and segment parsing.
#include "frontends/speech_processor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"
#include "test_util/whisper_tokenizer.h"

namespace prism::frontends {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::WhisperFilesOptions;
using test::WhisperLayout;
using test::WhisperTokenIds;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct WhisperDir {
  std::string dir;
  WhisperTokenIds ids;
  std::shared_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<const SpeechProcessor> speech;
};

WhisperDir make_dir(const std::string& name, const WhisperFilesOptions& options = {}) {
  WhisperDir d;
  d.dir = test::scratch_dir("speech_" + name);
  auto ids = test::write_whisper_files(d.dir, options);
  EXPECT_TRUE(ids.has_value()) << ids.status().to_string();
  d.ids = *ids;
  auto tok = text::Tokenizer::load(d.dir);
  EXPECT_TRUE(tok.has_value()) << tok.status().to_string();
  d.tokenizer = std::make_shared<text::Tokenizer>(*tok);
  auto speech = SpeechProcessor::load(d.dir, *d.tokenizer);
  EXPECT_TRUE(speech.has_value()) << speech.status().to_string();
  if (speech) d.speech = std::move(*speech);
  return d;
}

const WhisperDir& multilingual() {
  static const WhisperDir d = make_dir("multilingual");
  return d;
}
const WhisperDir& english() {
  static const WhisperDir d = make_dir("english", {.layout = WhisperLayout::english});
  return d;
}
// large-v3's 100 languages with the older files: no timestamp tokens in the tokenizer,
// <|nocaptions|>, no generation_config.json.
const WhisperDir& v3_old_files() {
  static const WhisperDir d = make_dir("v3_old", {.num_languages = 100, .timestamp_tokens = false,
                                                  .nocaptions = true, .generation_config = false, .num_mel_bins = 128});
  return d;
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

std::vector<float> random_row(int64_t vocab, uint32_t seed) {
  std::vector<float> row(static_cast<size_t>(vocab));
  uint32_t s = seed * 2654435761u + 1;
  for (float& v : row) {
    s = s * 1664525u + 1013904223u;
    v = float(int(s >> 9) % 2000 - 1000) / 500.0f;  // [-2, 2)
  }
  return row;
}

std::vector<int32_t> finite_ids(std::span<const float> row) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < row.size(); ++i)
    if (std::isfinite(row[i])) ids.push_back(int32_t(i));
  return ids;
}

// Runs choice 0's processor on `row` after `generated`.
std::vector<float> apply(const SpeechProcessor& sp, const SpeechDecodeOptions& o, std::vector<float> row,
                         std::span<const int32_t> generated, SpeechObservation* observed = nullptr) {
  auto observations = std::make_shared<std::vector<SpeechObservation>>(1);
  auto processor = sp.rules(o, observations)(0);
  processor->process(row, generated);
  if (observed) *observed = (*observations)[0];
  return row;
}

// ---- the tokenizer files ----------------------------------------------------------------

TEST(WhisperTokenizerFiles, MultilingualIdsAreTheRealOnes) {
  const WhisperDir& d = multilingual();
  EXPECT_EQ(d.ids.eot, 50257);
  EXPECT_EQ(d.ids.sot, 50258);
  EXPECT_EQ(d.ids.first_language, 50259);
  EXPECT_EQ(d.ids.translate, 50358);
  EXPECT_EQ(d.ids.transcribe, 50359);
  EXPECT_EQ(d.ids.startoflm, 50360);
  EXPECT_EQ(d.ids.startofprev, 50361);
  EXPECT_EQ(d.ids.nospeech, 50362);
  EXPECT_EQ(d.ids.notimestamps, 50363);
  EXPECT_EQ(d.ids.timestamp_begin, 50364);
  EXPECT_EQ(d.ids.vocab_size, 51865);
  EXPECT_EQ(d.ids.space, 220);
  const text::Tokenizer& t = *d.tokenizer;
  EXPECT_EQ(t.vocab_size(), 51865);
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 50257);
  EXPECT_EQ(t.token_to_id("<|en|>"), 50259);
  EXPECT_EQ(t.token_to_id("<|af|>"), 50327);
  EXPECT_EQ(t.token_to_id("<|su|>"), 50357);
  EXPECT_EQ(t.token_to_id("<|30.00|>"), 51864);
  EXPECT_EQ(t.id_to_token(50256), "<|filler|>");
  EXPECT_EQ(t.encode("<|startoftranscript|>", false).ids, std::vector<int32_t>{50258});
  const json config = read_json(fs::path(d.dir) / "config.json");
  EXPECT_EQ(config["model_type"], "whisper");
  EXPECT_EQ(config["vocab_size"], 51865);
  const json gen = read_json(fs::path(d.dir) / "generation_config.json");
  EXPECT_EQ(gen["lang_to_id"]["<|fr|>"], 50265);
  EXPECT_EQ(gen["begin_suppress_tokens"], json({220, 50257}));
  EXPECT_EQ(gen["suppress_tokens"].back(), 50362);
  EXPECT_TRUE(gen["forced_decoder_ids"].is_null());
}

TEST(WhisperTokenizerFiles, EnglishOnlyIdsAreOneLower) {
  const WhisperDir& d = english();
  EXPECT_EQ(d.ids.eot, 50256);
  EXPECT_EQ(d.ids.sot, 50257);
  EXPECT_EQ(d.ids.translate, 50357);
  EXPECT_EQ(d.ids.transcribe, 50358);
  EXPECT_EQ(d.ids.startofprev, 50360);
  EXPECT_EQ(d.ids.nospeech, 50361);
  EXPECT_EQ(d.ids.notimestamps, 50362);
  EXPECT_EQ(d.ids.timestamp_begin, 50363);
  EXPECT_EQ(d.ids.vocab_size, 51864);
  EXPECT_EQ(d.tokenizer->token_to_id("<|endoftext|>"), 50256);
  const json gen = read_json(fs::path(d.dir) / "generation_config.json");
  EXPECT_FALSE(gen.contains("lang_to_id"));
  EXPECT_EQ(gen["is_multilingual"], false);
}

TEST(WhisperTokenizerFiles, ConfigKeysAlreadyThereAreKept) {
  const std::string dir = test::scratch_dir("speech_merge");
  write(fs::path(dir) / "config.json", R"({"model_type": "whisper", "d_model": 64, "num_mel_bins": 128})");
  ASSERT_TRUE(test::write_whisper_files(dir).has_value());
  const json config = read_json(fs::path(dir) / "config.json");
  EXPECT_EQ(config["d_model"], 64);
  EXPECT_EQ(config["num_mel_bins"], 128);
  EXPECT_EQ(config["max_target_positions"], 448);
}

// ---- load --------------------------------------------------------------------------------

TEST(SpeechProcessor, LoadsTheMultilingualLayout) {
  const SpeechProcessor& sp = *multilingual().speech;
  EXPECT_TRUE(sp.multilingual());
  EXPECT_EQ(sp.num_mel_bins(), 80);
  EXPECT_EQ(sp.max_target_positions(), 448);
  EXPECT_EQ(sp.max_new_tokens(), 224);
  EXPECT_EQ(sp.eot(), 50257);
  EXPECT_EQ(sp.sot(), 50258);
  EXPECT_EQ(sp.no_timestamps(), 50363);
  EXPECT_EQ(sp.timestamp_begin(), 50364);
  EXPECT_EQ(sp.no_speech(), 50362);
  ASSERT_EQ(sp.languages().size(), 99u);
  EXPECT_EQ(sp.languages().front(), (std::pair<std::string, int32_t>{"en", 50259}));
  EXPECT_EQ(sp.languages().back(), (std::pair<std::string, int32_t>{"su", 50357}));
  EXPECT_EQ(sp.language_token("fr"), 50265);
  EXPECT_EQ(sp.language_token("yue"), std::nullopt);
}

TEST(SpeechProcessor, LoadsTheEnglishOnlyLayout) {
  const SpeechProcessor& sp = *english().speech;
  EXPECT_FALSE(sp.multilingual());
  EXPECT_EQ(sp.eot(), 50256);
  EXPECT_EQ(sp.sot(), 50257);
  EXPECT_EQ(sp.no_timestamps(), 50362);
  EXPECT_EQ(sp.timestamp_begin(), 50363);
  EXPECT_EQ(sp.no_speech(), 50361);
  EXPECT_TRUE(sp.languages().empty());
}

TEST(SpeechProcessor, OlderFilesCountTimestampsFromNoTimestamps) {
  const SpeechProcessor& sp = *v3_old_files().speech;
  EXPECT_TRUE(sp.multilingual());  // vocab_size 51866 >= 51865, as openai decides
  EXPECT_EQ(sp.num_mel_bins(), 128);
  EXPECT_EQ(sp.languages().size(), 100u);
  EXPECT_EQ(sp.language_token("yue"), 50358);
  EXPECT_EQ(sp.no_speech(), 50363);  // <|nocaptions|>
  EXPECT_EQ(sp.no_timestamps(), 50364);
  EXPECT_EQ(sp.timestamp_begin(), 50365);
}

TEST(SpeechProcessor, LoadErrorsNameWhatIsWrong) {
  const std::string dir = test::scratch_dir("speech_errors");
  ASSERT_TRUE(test::write_whisper_files(dir).has_value());
  auto tok = text::Tokenizer::load(dir);
  ASSERT_TRUE(tok.has_value());

  write(fs::path(dir) / "config.json", R"({"model_type": "llama"})");
  auto r = SpeechProcessor::load(dir, *tok);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("model_type 'llama' is not whisper"), std::string::npos) << r.status().message();

  write(fs::path(dir) / "config.json", R"({"model_type": "whisper", "vocab_size": 51865})");
  auto gpt2 = text::Tokenizer::load(test::testdata_dir() + "/tokenizers/gpt2");
  ASSERT_TRUE(gpt2.has_value());
  fs::remove(fs::path(dir) / "generation_config.json");
  r = SpeechProcessor::load(dir, *gpt2);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("<|startoftranscript|>"), std::string::npos) << r.status().message();

  write(fs::path(dir) / "generation_config.json", R"({"no_timestamps_token_id": 50000})");
  r = SpeechProcessor::load(dir, *tok);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("no_timestamps_token_id"), std::string::npos) << r.status().message();

  write(fs::path(dir) / "generation_config.json", R"({"suppress_tokens": [1, "two"]})");
  r = SpeechProcessor::load(dir, *tok);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("suppress_tokens"), std::string::npos) << r.status().message();

  write(fs::path(dir) / "generation_config.json", "{not json");
  r = SpeechProcessor::load(dir, *tok);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("not a JSON object"), std::string::npos) << r.status().message();
}

// ---- languages and prompts ---------------------------------------------------------------

TEST(SpeechProcessor, ChecksLanguagesByCodeNameAndAlias) {
  const SpeechProcessor& sp = *multilingual().speech;
  EXPECT_EQ(sp.check_language("en").value(), "en");
  EXPECT_EQ(sp.check_language(" English ").value(), "en");
  EXPECT_EQ(sp.check_language("castilian").value(), "es");
  EXPECT_EQ(sp.check_language("Haitian Creole").value(), "ht");
  EXPECT_EQ(sp.check_language("en-US").value(), "en");
  EXPECT_EQ(sp.check_language("pt_BR").value(), "pt");
  EXPECT_EQ(sp.check_language("haw").value(), "haw");
  auto bad = sp.check_language("xx");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(bad.status().message().find("'xx'"), std::string::npos);
  EXPECT_FALSE(sp.check_language("").has_value());
  auto yue = sp.check_language("cantonese");  // large-v3 only
  ASSERT_FALSE(yue.has_value());
  EXPECT_NE(yue.status().message().find("not one this model has"), std::string::npos);
  EXPECT_EQ(v3_old_files().speech->check_language("cantonese").value(), "yue");

  const SpeechProcessor& en = *english().speech;
  EXPECT_EQ(en.check_language("english").value(), "en");
  auto fr = en.check_language("fr");
  ASSERT_FALSE(fr.has_value());
  EXPECT_NE(fr.status().message().find("English-only"), std::string::npos);
}

TEST(SpeechProcessor, PromptsInEachMode) {
  const SpeechProcessor& sp = *multilingual().speech;
  SpeechDecodeOptions o;
  EXPECT_EQ(sp.prompt(o), (std::vector<int32_t>{50258}));  // language detected by the rules
  o.language = "fr";
  EXPECT_EQ(sp.prompt(o), (std::vector<int32_t>{50258, 50265, 50359}));
  o.task = SpeechTask::translate;
  o.timestamps = false;
  EXPECT_EQ(sp.prompt(o), (std::vector<int32_t>{50258, 50265, 50358, 50363}));
  o.language = "French";
  EXPECT_EQ(sp.prompt(o), (std::vector<int32_t>{50258, 50265, 50358, 50363}));

  // The previous text: <|startofprev|> + its last 223 tokens; specials other than timestamps go.
  SpeechDecodeOptions p;
  p.language = "en";
  for (int i = 0; i < 300; ++i) p.previous.push_back(1000 + i);
  p.previous.push_back(50257);  // <|endoftext|>
  p.previous.push_back(50364 + 7);  // <|0.14|>
  const std::vector<int32_t> tokens = sp.prompt(p);
  ASSERT_EQ(tokens.size(), 1u + 223u + 3u);
  EXPECT_EQ(tokens[0], 50361);
  EXPECT_EQ(tokens[1], 1000 + 300 - 222);
  EXPECT_EQ(tokens[222], 1299);
  EXPECT_EQ(tokens[223], 50371);
  EXPECT_EQ(tokens[224], 50258);
  EXPECT_EQ(sp.max_new_tokens(tokens.size()), 448 - 227);
  EXPECT_EQ(sp.max_new_tokens(size_t(3)), 224);

  const SpeechProcessor& en = *english().speech;
  SpeechDecodeOptions e;
  EXPECT_EQ(en.prompt(e), (std::vector<int32_t>{50257}));
  e.language = "en";
  e.timestamps = false;
  EXPECT_EQ(en.prompt(e), (std::vector<int32_t>{50257, 50362}));
}

TEST(SpeechProcessor, EncodesPromptTextAsWhisperDoes) {
  const WhisperDir& d = multilingual();
  EXPECT_EQ(d.speech->encode_text("  hello world \n"), d.tokenizer->encode(" hello world", false).ids);
  EXPECT_TRUE(d.speech->encode_text(" \t").empty());
  // Special tokens typed in the text are not kept.
  for (int32_t id : d.speech->encode_text("hi <|endoftext|><|en|> there")) EXPECT_LT(id, d.speech->eot());
}

TEST(SpeechProcessor, KnobNamesAreTheOrchestrators) {
  const auto names = SpeechProcessor::knob_names();
  EXPECT_EQ(names.size(), 15u);
  for (std::string_view k : {"vad", "vad_model", "vad_deployment", "vad_threshold", "vad_min_speech_ms", "vad_min_silence_ms",
                             "vad_speech_pad_ms", "asr_chunk_seconds", "asr_parallel_chunks", "max_audio_seconds",
                             "live_tick_ms", "live_partial_ms", "live_window_seconds",
                             "live_max_utterance_seconds", "live_stall_seconds"})
    EXPECT_NE(std::find(names.begin(), names.end(), k), names.end()) << k;
}

// ---- the rules against the reference ------------------------------------------------------

SpeechDecodeOptions options_from(const json& j) {
  SpeechDecodeOptions o;
  if (!j["language"].is_null()) o.language = j["language"].get<std::string>();
  o.task = j["task"] == "translate" ? SpeechTask::translate : SpeechTask::transcribe;
  o.timestamps = j["timestamps"];
  o.segment_seconds = j["segment_seconds"];
  o.previous = j["previous"].get<std::vector<int32_t>>();
  return o;
}

// An F16 row as f32 (exact).
std::vector<float> row_of(const formats::SafetensorsFile& file, const std::string& name) {
  auto t = file.get(name);
  EXPECT_TRUE(t.has_value()) << name;
  std::vector<float> row(static_cast<size_t>(t->numel()));
  const f16* p = t->data<f16>();
  for (size_t i = 0; i < row.size(); ++i) row[i] = f16_to_f32(p[i]);
  return row;
}

std::vector<uint8_t> mask_of(const formats::SafetensorsFile& file, const std::string& name) {
  auto t = file.get(name);
  EXPECT_TRUE(t.has_value()) << name;
  const uint8_t* p = t->data<uint8_t>();
  return std::vector<uint8_t>(p, p + t->numel());
}

// One run of the generator for the three layouts (torch's import is most of its time).
Result<std::string> reference_cases() {
  return test::generate_reference("whisper_rules.py", "whisper_rules",
                                  "--model-dir multilingual=" + multilingual().dir + " --model-dir english=" +
                                      english().dir + " --model-dir v3_old=" + v3_old_files().dir);
}

void check_against_reference(const WhisperDir& d, const std::string& name) {
  ASSERT_TRUE(d.speech);
  auto out = reference_cases();
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  auto file = formats::SafetensorsFile::open(*out + "/cases_" + name + ".safetensors");
  ASSERT_TRUE(file.has_value()) << file.status().to_string();
  const json cases = json::parse((*file)->metadata().at("cases"));
  const json probes = json::parse((*file)->metadata().at("probes"));
  ASSERT_GT(cases.size(), 30u);
  int detections = 0, forced_timestamps = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.dump().substr(0, 300));
    const SpeechDecodeOptions o = options_from(c["options"]);
    EXPECT_EQ(d.speech->prompt(o), c["prompt"].get<std::vector<int32_t>>());
    const std::vector<int32_t> generated = c["generated"].get<std::vector<int32_t>>();
    const std::vector<float> in = row_of(**file, "case." + std::to_string(i) + ".logits_in");
    // The reference's output row: the input where finite_out, -inf elsewhere.
    const std::vector<uint8_t> want_finite = mask_of(**file, "case." + std::to_string(i) + ".finite_out");
    SpeechObservation observed;
    const std::vector<float> got = apply(*d.speech, o, in, generated, &observed);
    ASSERT_EQ(got.size(), want_finite.size());
    int mask_diffs = 0, value_diffs = 0;
    for (size_t v = 0; v < got.size(); ++v) {
      if (std::isfinite(got[v]) != bool(want_finite[v])) ++mask_diffs;
      else if (want_finite[v] && std::abs(got[v] - in[v]) > 1e-5f) ++value_diffs;
    }
    EXPECT_EQ(mask_diffs, 0);
    EXPECT_EQ(value_diffs, 0);
    if (c.contains("language")) {
      ++detections;
      EXPECT_EQ(observed.language, c["language"].get<std::string>());
      EXPECT_NEAR(observed.language_prob, c["language_prob"].get<double>(), 1e-5);
    }
    const int64_t tb = d.speech->timestamp_begin();
    bool text_finite = false, ts_finite = false;
    for (int64_t v = 0; v < int64_t(got.size()); ++v) (v < tb ? text_finite : ts_finite) |= std::isfinite(got[v]);
    forced_timestamps += ts_finite && !text_finite;
  }
  if (d.speech->multilingual()) {
    EXPECT_GT(detections, 0);
  }
  EXPECT_GT(forced_timestamps, 0);
  for (size_t j = 0; j < probes.size(); ++j) {
    SCOPED_TRACE("probe " + std::to_string(j));
    const SpeechDecodeOptions o = options_from(probes[j]["options"]);
    auto observations = std::make_shared<std::vector<SpeechObservation>>(1);
    auto processor = d.speech->rules(o, observations)(0);
    const std::vector<int32_t> prompt = d.speech->prompt(o);
    ASSERT_GE(processor->probe_position(), 0);
    EXPECT_EQ(prompt[size_t(processor->probe_position())], d.speech->sot());
    processor->probe(row_of(**file, "probe." + std::to_string(j) + ".logits"));
    EXPECT_NEAR((*observations)[0].no_speech_prob, probes[j]["no_speech_prob"].get<double>(), 1e-5);
  }
}

// One test, so that ctest (a process per test) runs the generator once.
TEST(SpeechRulesReference, EveryLayoutMatchesOpenaiFilters) {
  {
    SCOPED_TRACE("multilingual");
    check_against_reference(multilingual(), "multilingual");
  }
  {
    SCOPED_TRACE("english-only");
    check_against_reference(english(), "english");
  }
  {
    SCOPED_TRACE("large-v3, older files");
    check_against_reference(v3_old_files(), "v3_old");
  }
}

// ---- the rules by hand ---------------------------------------------------------------------

TEST(SpeechRules, LanguageDetectionThenForcedTaskAndNoTimestamps) {
  const SpeechProcessor& sp = *multilingual().speech;
  SpeechDecodeOptions o;
  o.task = SpeechTask::translate;
  o.timestamps = false;
  auto observations = std::make_shared<std::vector<SpeechObservation>>(2);
  auto factory = sp.rules(o, observations);
  auto p = factory(1);
  std::vector<float> row(51865, 0.0f);
  row[100] = 50.0f;    // a text token is the overall best: ignored at the detection step
  row[50265] = 3.0f;   // <|fr|>
  row[50259] = 1.0f;   // <|en|>
  p->process(row, {});
  EXPECT_EQ(finite_ids(row), std::vector<int32_t>{50265});
  EXPECT_EQ(row[50265], 3.0f);
  EXPECT_EQ((*observations)[1].language, "fr");
  // softmax over the 99 language logits: e^3 / (e^3 + e^1 + 97)
  EXPECT_NEAR((*observations)[1].language_prob, std::exp(3.0) / (std::exp(3.0) + std::exp(1.0) + 97), 1e-6);
  EXPECT_EQ((*observations)[0].language, "");  // choice 0 untouched

  std::vector<int32_t> generated = {50265};
  row.assign(51865, 0.0f);
  p->process(row, generated);
  EXPECT_EQ(finite_ids(row), std::vector<int32_t>{50358});  // <|translate|>
  generated.push_back(50358);
  row.assign(51865, 0.0f);
  p->process(row, generated);
  EXPECT_EQ(finite_ids(row), std::vector<int32_t>{50363});  // <|notimestamps|>
  generated.push_back(50363);
  // The first text position: blank and end-of-text suppressed, no timestamps at all.
  row.assign(51865, 0.0f);
  p->process(row, generated);
  EXPECT_FALSE(std::isfinite(row[220]));
  EXPECT_FALSE(std::isfinite(row[50257]));
  EXPECT_FALSE(std::isfinite(row[50364]));
  EXPECT_TRUE(std::isfinite(row[100]));
  // Later positions: end-of-text allowed again; specials and language tokens never.
  generated.push_back(100);
  row.assign(51865, 0.0f);
  p->process(row, generated);
  EXPECT_TRUE(std::isfinite(row[220]));
  EXPECT_TRUE(std::isfinite(row[50257]));
  for (int32_t id : {50258, 50259, 50300, 50357, 50358, 50359, 50360, 50361, 50362, 50364, 51864})
    EXPECT_FALSE(std::isfinite(row[size_t(id)])) << id;
  EXPECT_TRUE(std::isfinite(row[50363]));  // openai leaves <|notimestamps|> alone without timestamps
  for (int32_t id : {1, 2, 7, 359, 50254}) EXPECT_FALSE(std::isfinite(row[size_t(id)])) << id;  // suppress_tokens
}

TEST(SpeechRules, KnownLanguageRecordsItAndReadsNoSpeechAtSot) {
  const SpeechProcessor& sp = *multilingual().speech;
  SpeechDecodeOptions o;
  o.language = "de";
  o.previous = {1000, 1001, 1002};
  auto observations = std::make_shared<std::vector<SpeechObservation>>(1);
  auto p = sp.rules(o, observations)(0);
  EXPECT_EQ(p->probe_position(), 4);  // <|startofprev|> a b c <|startoftranscript|>
  EXPECT_EQ((*observations)[0].language, "de");
  std::vector<float> row(51865, 0.0f);
  row[50362] = std::log(51864.0f);  // <|nospeech|> as likely as all the others together
  p->probe(row);
  EXPECT_NEAR((*observations)[0].no_speech_prob, 0.5, 1e-5);
  // A null observation vector records nothing and does not fail.
  auto q = sp.rules(o, nullptr)(0);
  q->probe(row);
  std::vector<float> r2(51865, 0.0f);
  q->process(r2, {});
}

TEST(SpeechRules, TimestampPairingAndMonotonicity) {
  const SpeechProcessor& sp = *multilingual().speech;
  SpeechDecodeOptions o;
  o.language = "en";
  const int32_t tb = 50364;
  // First step: a timestamp no later than max_initial_timestamp (index 50).
  std::vector<float> row = apply(sp, o, random_row(51865, 1), {});
  std::vector<int32_t> allowed = finite_ids(row);
  ASSERT_FALSE(allowed.empty());
  EXPECT_GE(allowed.front(), tb);
  EXPECT_LE(allowed.back(), tb + 50);
  // After <|0.00|> text <|2.00|>: no text (timestamps >= 2.00, or end-of-text).
  std::vector<int32_t> g = {tb, 400, 401, tb + 100};
  std::vector<float> flat(51865, 0.0f);
  std::vector<float> eot_likely = flat;
  eot_likely[50257] = 20.0f;  // beats the timestamps' mass, so text stays finite where allowed
  row = apply(sp, o, eot_likely, g);
  allowed = finite_ids(row);
  EXPECT_EQ(allowed.front(), 50257);  // end-of-text
  EXPECT_EQ(allowed[1], tb + 100);    // the next segment may start where this one ended
  EXPECT_EQ(allowed.back(), tb + 1500);
  // After a pair: text only (no timestamp).
  g.push_back(tb + 100);
  row = apply(sp, o, flat, g);
  allowed = finite_ids(row);
  EXPECT_LT(allowed.back(), tb);
  EXPECT_TRUE(std::isfinite(row[400]));
  // After text following a timestamp: text, or a later timestamp (not an equal one).
  g.push_back(402);
  row = apply(sp, o, random_row(51865, 2), g);
  EXPECT_FALSE(std::isfinite(row[size_t(tb + 100)]));
  // On a flat row the timestamps' total mass (1401 of them) beats any one text token: forced.
  row = apply(sp, o, flat, g);
  allowed = finite_ids(row);
  EXPECT_EQ(allowed.front(), tb + 101);
  EXPECT_EQ(allowed.back(), tb + 1500);
  // A strong text token wins instead.
  std::vector<float> peaked(51865, 0.0f);
  peaked[403] = 20.0f;
  row = apply(sp, o, peaked, g);
  EXPECT_TRUE(std::isfinite(row[403]));
  EXPECT_TRUE(std::isfinite(row[size_t(tb + 200)]));
}

TEST(SpeechRules, NoTimestampBeyondTheChunksAudio) {
  const SpeechProcessor& sp = *multilingual().speech;
  SpeechDecodeOptions o;
  o.language = "en";
  o.segment_seconds = 0.5;  // index 25
  std::vector<float> flat(51865, 0.0f);
  std::vector<int32_t> allowed = finite_ids(apply(sp, o, flat, {}));
  EXPECT_EQ(allowed.front(), 50364);
  EXPECT_EQ(allowed.back(), 50364 + 25);
  o.segment_seconds = 7.3;  // index 365
  allowed = finite_ids(apply(sp, o, flat, std::vector<int32_t>{50364, 400, 401}));
  EXPECT_EQ(allowed.back(), 50364 + 365);
}

TEST(SpeechRules, EnglishOnlyHasNoDetectionStep) {
  const SpeechProcessor& sp = *english().speech;
  SpeechDecodeOptions o;
  auto observations = std::make_shared<std::vector<SpeechObservation>>(1);
  auto p = sp.rules(o, observations)(0);
  EXPECT_EQ(p->probe_position(), 0);
  EXPECT_EQ((*observations)[0].language, "en");
  std::vector<float> flat(51864, 0.0f);
  p->process(flat, {});
  const std::vector<int32_t> allowed = finite_ids(flat);
  EXPECT_EQ(allowed.front(), 50363);  // timestamps only
  EXPECT_EQ(allowed.back(), 50363 + 50);
}

// ---- segments ------------------------------------------------------------------------------

TEST(SpeechSegments, ConsecutiveTimestampsDelimitSegments) {
  const WhisperDir& d = multilingual();
  const SpeechProcessor& sp = *d.speech;
  const int32_t tb = sp.timestamp_begin();
  const std::vector<int32_t> a = d.tokenizer->encode(" And so", false).ids;
  const std::vector<int32_t> b = d.tokenizer->encode(" my fellow Americans", false).ids;
  std::vector<int32_t> g = {50259, 50359};  // forced <|en|> <|transcribe|>: skipped
  g.push_back(tb);
  g.insert(g.end(), a.begin(), a.end());
  g.push_back(tb + 100);
  g.push_back(tb + 100);
  g.insert(g.end(), b.begin(), b.end());
  g.push_back(tb + 275);
  const std::vector<TimedText> segs = sp.segments(g, 11.0);
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_DOUBLE_EQ(segs[0].start, 0.0);
  EXPECT_DOUBLE_EQ(segs[0].end, 2.0);
  EXPECT_EQ(segs[0].text, " And so");
  EXPECT_EQ(segs[0].tokens.front(), tb);
  EXPECT_EQ(segs[0].tokens.back(), tb + 100);
  EXPECT_EQ(segs[0].tokens.size(), a.size() + 2);
  EXPECT_DOUBLE_EQ(segs[1].start, 2.0);
  EXPECT_NEAR(segs[1].end, 5.5, 1e-9);
  EXPECT_EQ(segs[1].text, " my fellow Americans");
  EXPECT_EQ(sp.text(g), " And so my fellow Americans");
}

TEST(SpeechSegments, TrailingTextEndsAtTheSegmentEnd) {
  const WhisperDir& d = multilingual();
  const SpeechProcessor& sp = *d.speech;
  const int32_t tb = sp.timestamp_begin();
  const std::vector<int32_t> a = d.tokenizer->encode(" ask not", false).ids;
  std::vector<int32_t> g = {tb + 10};
  g.insert(g.end(), a.begin(), a.end());
  g.push_back(tb + 60);
  g.push_back(tb + 60);  // opens a segment whose text was cut off
  g.insert(g.end(), a.begin(), a.end());
  std::vector<TimedText> segs = sp.segments(g, 8.0);
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_NEAR(segs[0].start, 0.2, 1e-9);
  EXPECT_NEAR(segs[0].end, 1.2, 1e-9);
  EXPECT_NEAR(segs[1].start, 1.2, 1e-9);
  EXPECT_DOUBLE_EQ(segs[1].end, 8.0);
  // A lone closing timestamp and nothing after it: no empty segment.
  g.resize(g.size() - a.size() - 1);
  segs = sp.segments(g, 8.0);
  ASSERT_EQ(segs.size(), 1u);
  // End-of-text ends parsing.
  g.push_back(sp.eot());
  g.insert(g.end(), a.begin(), a.end());
  EXPECT_EQ(sp.segments(g, 8.0).size(), 1u);
}

TEST(SpeechSegments, WithoutTimestampsOneSegmentCoversTheChunk) {
  const WhisperDir& d = english();
  const SpeechProcessor& sp = *d.speech;
  std::vector<int32_t> g = {sp.no_timestamps()};
  const std::vector<int32_t> a = d.tokenizer->encode(" ask what you can do", false).ids;
  g.insert(g.end(), a.begin(), a.end());
  const std::vector<TimedText> segs = sp.segments(g, 11.0);
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_DOUBLE_EQ(segs[0].start, 0.0);
  EXPECT_DOUBLE_EQ(segs[0].end, 11.0);
  EXPECT_EQ(segs[0].text, " ask what you can do");
  EXPECT_EQ(segs[0].tokens, a);
  EXPECT_TRUE(sp.segments(std::vector<int32_t>{}, 11.0).empty());
  EXPECT_TRUE(sp.segments(std::vector<int32_t>{sp.timestamp_begin()}, 11.0).empty());
}

}  // namespace
}  // namespace prism::frontends
