// The demo ASR checkpoint: same bytes twice; Whisper's config keys, tensor names and token
// layout; files the speech processor and the Whisper loaders accept; and a greedy decode of
// jfk.flac through models/whisper under the speech processor's rules (the engine's path
// without the engine): English detected, 32 tokens of printable words with timestamps inside
// the audio, and Whisper's quality checks passed, so the orchestrator does not re-run chunks.
#include "tools/demo/demo_asr.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "configs/hf_config.h"
#include "pipelines/transcribe/quality.h"
#include "formats/safetensors.h"
#include "frontends/speech_processor.h"
#include "media/audio.h"
#include "media/log_mel.h"
#include "models/whisper/whisper.h"
#include "test_util/paths.h"
#include "text/tokenizer.h"

namespace prism::tools::demo {
namespace {

namespace fs = std::filesystem;
using frontends::SpeechDecodeOptions;
using frontends::SpeechObservation;
using frontends::SpeechProcessor;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Written once for the whole file (each test only reads it).
const std::string& demo_dir() {
  static const std::string dir = [] {
    std::string d = test::scratch_dir("demo_asr");
    Status s = write_demo_asr(d);
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }();
  return dir;
}

// jfk.flac at 16 kHz mono (11.0 s).
const std::vector<float>& jfk() {
  static const std::vector<float> samples = [] {
    const std::string bytes = read_file(fs::path(test::testdata_dir()) / "audio" / "jfk.flac");
    auto audio = media::decode_audio({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
    EXPECT_TRUE(audio.has_value()) << audio.status().message();
    return audio.has_value() ? audio->samples : std::vector<float>{};
  }();
  return samples;
}

TEST(DemoAsr, SameBytesEveryRun) {
  const std::string again = test::scratch_dir("demo_asr_again");
  ASSERT_TRUE(write_demo_asr(again).ok());
  int files = 0;
  for (const auto& entry : fs::directory_iterator(demo_dir())) {
    const fs::path other = fs::path(again) / entry.path().filename();
    ASSERT_TRUE(fs::exists(other)) << other;
    EXPECT_EQ(read_file(entry.path()), read_file(other)) << entry.path().filename();
    ++files;
  }
  // config, generation_config, weights, tokenizer, tokenizer_config, preprocessor_config, README
  EXPECT_EQ(files, 7);
}

TEST(DemoAsr, WhisperConfigAndWeightNames) {
  auto hf = configs::HfConfig::load(demo_dir());
  ASSERT_TRUE(hf.has_value()) << hf.status().message();
  EXPECT_EQ(hf->get_strings("architectures").value(), std::vector<std::string>{"WhisperForConditionalGeneration"});
  ASSERT_TRUE(configs::is_whisper_model(demo_dir()));
  auto c = configs::WhisperConfig::load(demo_dir());
  ASSERT_TRUE(c.has_value()) << c.status().message();
  EXPECT_EQ(c->d_model, 64);
  EXPECT_EQ(c->encoder_layers, 2);
  EXPECT_EQ(c->decoder_layers, 2);
  EXPECT_EQ(c->encoder_heads, 4);
  EXPECT_EQ(c->decoder_heads, 4);
  EXPECT_EQ(c->num_mel_bins, 80);
  EXPECT_EQ(c->max_source_positions, 1500);
  EXPECT_EQ(c->max_target_positions, 64);
  const int64_t vocab = c->vocab_size;

  auto w = formats::WeightSource::open(demo_dir());
  ASSERT_TRUE(w.has_value()) << w.status().message();
  EXPECT_TRUE(w->get("model.encoder.conv1.weight", {64, 80, 3}).has_value());
  EXPECT_TRUE(w->get("model.encoder.conv2.weight", {64, 64, 3}).has_value());
  EXPECT_TRUE(w->get("model.encoder.conv2.bias", {64}).has_value());
  EXPECT_TRUE(w->get("model.encoder.embed_positions.weight", {1500, 64}).has_value());
  EXPECT_TRUE(w->get("model.encoder.layers.1.self_attn.q_proj.bias", {64}).has_value());
  EXPECT_TRUE(w->get("model.encoder.layers.1.fc1.weight", {256, 64}).has_value());
  EXPECT_TRUE(w->get("model.encoder.layer_norm.bias", {64}).has_value());
  EXPECT_TRUE(w->get("model.decoder.embed_tokens.weight", {vocab, 64}).has_value());
  EXPECT_TRUE(w->get("model.decoder.embed_positions.weight", {64, 64}).has_value());
  EXPECT_TRUE(w->get("model.decoder.layers.0.encoder_attn.v_proj.bias", {64}).has_value());
  EXPECT_TRUE(w->get("model.decoder.layers.1.encoder_attn_layer_norm.weight", {64}).has_value());
  EXPECT_TRUE(w->get("model.decoder.layers.1.fc2.weight", {64, 256}).has_value());
  EXPECT_TRUE(w->get("model.decoder.layer_norm.weight", {64}).has_value());
  EXPECT_FALSE(w->contains("model.decoder.layers.0.self_attn.k_proj.bias"));  // as in the checkpoints
  EXPECT_FALSE(w->contains("proj_out.weight"));                               // tied
  // Encoder: 2 convs (4) + positions + 2 x 15 + layer_norm (2); decoder: 2 tables + 2 x 24 + 2.
  EXPECT_EQ(w->names().size(), 5u + 30u + 2u + 2u + 48u + 2u);
  // The sinusoids openai/whisper stores: sin(0) = 0 in the first half, cos(0) = 1 in the second.
  const Tensor positions = w->get("model.encoder.embed_positions.weight", {1500, 64}).value();
  EXPECT_FLOAT_EQ(positions.data<float>()[0], 0.0f);
  EXPECT_FLOAT_EQ(positions.data<float>()[32], 1.0f);
  EXPECT_NEAR(positions.data<float>()[64 + 0], std::sin(1.0f), 1e-6);
}

TEST(DemoAsr, TokenizerHasWhisperTokensAfterDemoChatText) {
  auto tok = text::Tokenizer::load(demo_dir());
  ASSERT_TRUE(tok.has_value()) << tok.status().message();
  auto c = configs::WhisperConfig::load(demo_dir());
  EXPECT_EQ(tok->vocab_size(), c->vocab_size);
  // demo-chat's words are single tokens, as in demo-chat.
  EXPECT_EQ(tok->encode(" the river", false).ids.size(), 2u);
  // Whisper's tokens in the real order, after every text id; timestamps last.
  const int32_t eot = tok->token_to_id("<|endoftext|>").value();
  std::vector<std::string> order = {"<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|zh|>"};
  EXPECT_EQ(tok->token_to_id("<|su|>"), eot + 1 + 99);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(tok->token_to_id(order[i]), eot + int32_t(i)) << order[i];
  const std::vector<std::string> after = {"<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
                                          "<|nospeech|>", "<|notimestamps|>", "<|0.00|>", "<|0.02|>"};
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(tok->token_to_id(after[i]), eot + 101 + int32_t(i)) << after[i];
  EXPECT_EQ(tok->token_to_id("<|30.00|>"), tok->vocab_size() - 1);
  EXPECT_EQ(tok->token_to_id("<|0.00|>").value() + 1500, tok->vocab_size() - 1);
  // demo-chat's <|endoftext|> (id 0) is renamed: one <|endoftext|>.
  EXPECT_EQ(tok->token_to_id("<|filler|>"), 0);
  EXPECT_EQ(tok->encode("<|endoftext|>", false).ids, std::vector<int32_t>{eot});
}

TEST(DemoAsr, GenerationAndPreprocessorConfigs) {
  const auto gen = nlohmann::json::parse(read_file(fs::path(demo_dir()) / "generation_config.json"));
  auto tok = text::Tokenizer::load(demo_dir()).value();
  EXPECT_TRUE(gen["is_multilingual"].get<bool>());
  EXPECT_EQ(gen["lang_to_id"].size(), 99u);
  EXPECT_EQ(gen["lang_to_id"]["<|en|>"], tok.token_to_id("<|en|>").value());
  EXPECT_EQ(gen["task_to_id"]["translate"], tok.token_to_id("<|translate|>").value());
  EXPECT_EQ(gen["no_timestamps_token_id"], tok.token_to_id("<|notimestamps|>").value());
  EXPECT_EQ(gen["max_initial_timestamp_index"], 50);
  EXPECT_EQ(gen["begin_suppress_tokens"],
            nlohmann::json::array({tok.token_to_id("\u0120").value(), tok.token_to_id("<|endoftext|>").value()}));
  const auto suppress = gen["suppress_tokens"].get<std::vector<int32_t>>();
  EXPECT_TRUE(std::is_sorted(suppress.begin(), suppress.end()));
  for (const char* s : {"<|filler|>", "<|im_start|>", "<|im_end|>", "\u010a", "<|startoftranscript|>", "<|nospeech|>"})
    EXPECT_NE(std::find(suppress.begin(), suppress.end(), tok.token_to_id(s).value()), suppress.end()) << s;
  for (const char* s : {"<|endoftext|>", "<|notimestamps|>", "\u0120the", "\u0120"})
    EXPECT_EQ(std::find(suppress.begin(), suppress.end(), tok.token_to_id(s).value()), suppress.end()) << s;

  const auto pre = nlohmann::json::parse(read_file(fs::path(demo_dir()) / "preprocessor_config.json"));
  EXPECT_EQ(pre["feature_extractor_type"], "WhisperFeatureExtractor");
  EXPECT_EQ(pre["feature_size"], 80);
  EXPECT_EQ(pre["sampling_rate"], 16000);
  EXPECT_EQ(pre["hop_length"], 160);
  EXPECT_EQ(pre["chunk_length"], 30);
  EXPECT_EQ(pre["n_fft"], 400);
}

TEST(DemoAsr, SpeechProcessorAcceptsIt) {
  auto tok = text::Tokenizer::load(demo_dir());
  ASSERT_TRUE(tok.has_value());
  auto sp = SpeechProcessor::load(demo_dir(), *tok);
  ASSERT_TRUE(sp.has_value()) << sp.status().message();
  EXPECT_TRUE((*sp)->multilingual());
  EXPECT_EQ((*sp)->languages().size(), 99u);
  EXPECT_EQ((*sp)->num_mel_bins(), 80);
  EXPECT_EQ((*sp)->max_new_tokens(), 32);
  EXPECT_EQ((*sp)->eot(), tok->token_to_id("<|endoftext|>").value());
  EXPECT_EQ((*sp)->timestamp_begin(), tok->token_to_id("<|0.00|>").value());
  EXPECT_EQ((*sp)->check_language("English").value(), "en");
  SpeechDecodeOptions o;
  o.language = "en";
  o.timestamps = false;
  EXPECT_EQ((*sp)->prompt(o), (std::vector<int32_t>{(*sp)->sot(), tok->token_to_id("<|en|>").value(),
                                                     tok->token_to_id("<|transcribe|>").value(), (*sp)->no_timestamps()}));
}

TEST(DemoAsr, TomlKnobs) {
  const std::string toml = kDemoAsrToml;
  EXPECT_NE(toml.find("kv_cache_bytes = "), std::string::npos);
  EXPECT_NE(toml.find("vad = \"energy\""), std::string::npos);
}

struct Decoded {
  std::vector<int32_t> generated;  // forced language / task tokens included
  std::vector<float> logprobs;     // of each generated token, on the processed row
  SpeechObservation observation;
};

// Greedy decoding of one segment through the Whisper decoder (a contiguous f32 paged cache)
// under the speech processor's rules, as the engine runs it.
Decoded greedy(models::Decoder& decoder, const models::CrossKv& cross, const SpeechProcessor& sp,
               const SpeechDecodeOptions& options) {
  constexpr int kBlockSize = 16;
  const std::vector<int32_t> prompt = sp.prompt(options);
  const int num_new = sp.max_new_tokens(prompt.size());
  const models::KvSpec spec = decoder.kv_spec();
  const int num_blocks = (int(prompt.size()) + num_new + kBlockSize - 1) / kBlockSize;
  std::vector<models::KvLayer> kv(size_t(spec.num_layers));
  for (auto& layer : kv) {
    layer.k = Tensor::zeros({num_blocks, kBlockSize, spec.num_kv_heads, spec.head_dim}, DType::f32);
    layer.v = Tensor::zeros({num_blocks, kBlockSize, spec.num_kv_heads, spec.head_dim}, DType::f32);
  }
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  for (int b = 0; b < num_blocks; ++b) table[size_t(b)] = b;

  auto observations = std::make_shared<std::vector<SpeechObservation>>(1);
  std::unique_ptr<frontends::LogitsProcessor> rules = sp.rules(options, observations)(0);
  const int64_t probe = rules->probe_position();
  Decoded out;
  std::vector<int32_t> step = prompt;
  int cached = 0;
  while (int(out.generated.size()) < num_new) {
    const int t = int(step.size());
    std::vector<int32_t> positions(static_cast<size_t>(t)), rows;
    for (int i = 0; i < t; ++i) positions[size_t(i)] = cached + i;
    const bool probing = cached == 0 && probe >= 0;  // the row at <|startoftranscript|>, raw
    if (probing && probe != t - 1) rows.push_back(int32_t(probe));
    rows.push_back(t - 1);
    models::DecoderBatch batch;
    batch.token_ids = Tensor::from<int32_t>(step, {t});
    batch.positions = Tensor::from<int32_t>(positions, {t});
    batch.slot_mapping = Tensor::from<int32_t>(positions, {t});
    batch.cu_seqlens_q = Tensor::from<int32_t>({0, t}, {2});
    batch.block_tables = Tensor::from<int32_t>(table, {1, num_blocks});
    batch.context_lens = Tensor::from<int32_t>({cached + t}, {1});
    batch.logits_rows = Tensor::from<int32_t>(rows, {int64_t(rows.size())});
    batch.cross = {&cross};
    const Tensor logits = decoder.forward(batch, kv);
    const int64_t vocab = decoder.vocab_size();
    if (probing) rules->probe({logits.data<float>(), size_t(vocab)});
    std::vector<float> row(logits.data<float>() + (rows.size() - 1) * vocab, logits.data<float>() + rows.size() * vocab);
    rules->process(row, out.generated);
    const int32_t best = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    double sum = 0;
    for (float v : row) sum += std::exp(double(v) - row[size_t(best)]);
    out.logprobs.push_back(float(-std::log(sum)));
    out.generated.push_back(best);
    if (best == sp.eot()) break;
    cached += t;
    step = {best};
  }
  out.observation = (*observations)[0];
  return out;
}

struct Model {
  std::unique_ptr<text::Tokenizer> tok;
  std::unique_ptr<const SpeechProcessor> sp;
  std::unique_ptr<models::SpeechEncoder> encoder;
  std::unique_ptr<models::Decoder> decoder;
};

Model load_model() {
  Model m;
  auto tok = text::Tokenizer::load(demo_dir());
  EXPECT_TRUE(tok.has_value()) << tok.status().message();
  m.tok = std::make_unique<text::Tokenizer>(std::move(tok.value()));
  auto sp = SpeechProcessor::load(demo_dir(), *m.tok);
  EXPECT_TRUE(sp.has_value()) << sp.status().message();
  m.sp = std::move(sp.value());
  auto encoder = models::load_whisper_encoder(demo_dir(), ops::Precision::f32);
  EXPECT_TRUE(encoder.has_value()) << encoder.status().message();
  m.encoder = std::move(encoder.value());
  auto decoder = models::load_whisper_decoder(demo_dir(), ops::Precision::f32);
  EXPECT_TRUE(decoder.has_value()) << decoder.status().message();
  m.decoder = std::move(decoder.value());
  return m;
}

std::shared_ptr<const models::CrossKv> encode(const models::SpeechEncoder& encoder, std::span<const float> samples) {
  const media::LogMel mel = media::log_mel_spectrogram(samples, 80);
  const Tensor features = Tensor::from<float>(mel.values, {1, 80, mel.frames});
  return encoder.encode(features).at(0);
}

TEST(DemoAsr, TranscribesJfkAsEnglishWordsWithTimestampsThatPassTheChecks) {
  ASSERT_FALSE(jfk().empty());
  Model m = load_model();
  ASSERT_TRUE(m.decoder && m.encoder && m.sp);
  EXPECT_EQ(m.decoder->max_context(), 64);
  EXPECT_EQ(m.encoder->output_frames(), 1500);
  const auto cross = encode(*m.encoder, jfk());
  ASSERT_EQ(cross->frames, 1500);

  const double seconds = double(jfk().size()) / media::kSpeechSampleRate;
  SpeechDecodeOptions o;  // language detected, timestamps
  o.segment_seconds = seconds;
  const Decoded d = greedy(*m.decoder, *cross, *m.sp, o);
  EXPECT_EQ(d.observation.language, "en");
  EXPECT_GT(d.observation.language_prob, 0.2f);
  EXPECT_LT(d.observation.no_speech_prob, 0.01f);
  // Nothing stops it: 32 tokens, the language and task first, then a timestamp within 1 s.
  ASSERT_EQ(d.generated.size(), 32u);
  EXPECT_EQ(std::count(d.generated.begin(), d.generated.end(), m.sp->eot()), 0);
  EXPECT_EQ(d.generated[0], m.sp->language_token("en").value());
  EXPECT_EQ(d.generated[1], m.tok->token_to_id("<|transcribe|>").value());
  EXPECT_GE(d.generated[2], m.sp->timestamp_begin());
  EXPECT_LE(d.generated[2], m.sp->timestamp_begin() + 50);

  const std::string text = m.sp->text(d.generated);
  for (unsigned char ch : text) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << "byte " << int(ch) << " in " << text;
  EXPECT_GE(std::count(text.begin(), text.end(), ' '), 12) << text;  // words, not letters
  const auto segments = m.sp->segments(d.generated, seconds);
  ASSERT_GE(segments.size(), 1u) << text;
  double last = 0;
  for (const auto& s : segments) {
    EXPECT_GE(s.start, last) << text;
    EXPECT_LE(s.start, s.end);
    EXPECT_LE(s.end, seconds + 1e-9);
    last = s.start;
  }

  // The quality checks: fine, so no re-run at a higher temperature.
  float sum = 0;
  for (size_t i = 2; i < d.logprobs.size(); ++i) sum += d.logprobs[i];
  const float avg_logprob = sum / float(d.logprobs.size() - 2);
  const float ratio = pipelines::transcribe::compression_ratio(text);
  EXPECT_GT(avg_logprob, -1.0f) << text;
  EXPECT_LT(ratio, 2.4f) << text;
  EXPECT_EQ(pipelines::transcribe::judge(ratio, avg_logprob, d.observation.no_speech_prob),
            pipelines::transcribe::Verdict::ok);

  // Other audio (jfk's first 3 s), other text; translation, other text.
  const auto short_cross = encode(*m.encoder, std::span<const float>(jfk()).first(3 * 16000));
  SpeechDecodeOptions short_options = o;
  short_options.segment_seconds = 3.0;
  EXPECT_NE(m.sp->text(greedy(*m.decoder, *short_cross, *m.sp, short_options).generated), text);
  SpeechDecodeOptions translate = o;
  translate.task = frontends::SpeechTask::translate;
  translate.language = "en";
  EXPECT_NE(m.sp->text(greedy(*m.decoder, *cross, *m.sp, translate).generated), text);
}

}  // namespace
}  // namespace prism::tools::demo
