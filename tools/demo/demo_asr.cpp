// tools/demo/demo_asr.cpp: writing the demo Whisper. The vocabulary is demo-chat's
// (tools/demo/demo_chat.h) grown by Whisper's tokens; the weights come from one seeded stream
// (tools/demo/demo_clip.h's DemoRandom), so the checkpoint is the same bytes everywhere.
//
// NOTE: random weights babble; the babble is shaped into words the way demo-chat's is, with a
// LayerNorm in place of the RMSNorm:
// - Dimension kReadable (0) of embed_tokens holds a per-token "readability" value, and the
//   decoder's final layer_norm has weight 0 and bias kReadableLogit there: that output is a
//   constant, so the tied LM head adds kReadableLogit * readability to every token's logit,
//   whatever the context. Words get the most, then pieces, then specials (demo-chat's
//   classes, read off its embedding's readability column).
// - No layer writes dimension kReadable (its rows of every out_proj and fc2 are zero, its
//   positions 0) and the layer norms give it weight 0, so it does not swamp attention.
// - The final layer_norm's other weights have random signs (the tied head's pull toward
//   repeating the input token averages out) and a size (kWordSpread) that spreads the word
//   logits enough for greedy decodes to be confident: mean logprob above -1, so they pass
//   Whisper's checks and are not re-run.
// - Timestamps: their readability falls with their time (kTimestampSlope per second), so the
//   timestamp rules pick times a few seconds apart instead of jumping to the chunk's end;
//   their level (kTimestampReadability) makes a timestamp win now and then, closing a segment.
// - <|en|> reads better than the other languages: detection picks English.
// - Unprintable bytes, demo-chat's specials and Whisper's specials are in suppress_tokens;
//   nothing stops a decode (<|endoftext|> never wins): a chunk decodes its 32 tokens.
#include "tools/demo/demo_asr.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/demo/demo_chat.h"
#include "tools/demo/demo_clip.h"
#include "base/check.h"
#include "base/file.h"
#include "formats/safetensors.h"
#include "runtime/tensor.h"

namespace prism::tools::demo {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

// Shape: a whisper-tiny in miniature.
constexpr int64_t kDModel = 64;
constexpr int kEncoderLayers = 2;
constexpr int kDecoderLayers = 2;
constexpr int64_t kHeads = 4;
constexpr int64_t kFfnDim = 256;
constexpr int64_t kMelBins = 80;
constexpr int64_t kSourcePositions = 1500;  // 30 s of audio after the stride-2 convolution
constexpr int64_t kTargetPositions = 64;    // prompt + generated: at most 32 new tokens a chunk
constexpr int kNumTimestamps = 1501;        // <|0.00|> .. <|30.00|>, every 0.02 s
constexpr uint32_t kSeed = 20240901;

// openai/whisper's LANGUAGES, in token order (99: the multilingual checkpoints before large-v3).
constexpr const char* kLanguages[] = {
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id",
    "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg",
    "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br",
    "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so",
    "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt",
    "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su"};

// The babble's shape (see top).
constexpr int64_t kReadable = 0;
constexpr float kReadableLogit = 6.0f;          // decoder.layer_norm.bias[kReadable]
constexpr float kWordSpread = 2.2f;             // |decoder.layer_norm.weight| elsewhere
constexpr float kTextSpread = 0.5f;             // |embed_tokens| of text tokens outside kReadable
constexpr float kPositionSpread = 2.0f;         // |decoder.embed_positions|: steps differ, words vary
constexpr float kWordReadability = 2.0f;
constexpr float kPieceReadability = 1.0f;
constexpr float kSpecialReadability = 0.3f;
constexpr float kEnglishReadability = 1.0f;     // <|en|>: detected
constexpr float kTimestampReadability = 1.9f;   // <|0.00|>
constexpr float kTimestampSlope = 0.05f;        // readability lost per second of timestamp
constexpr float kTimestampSpread = 0.5f;        // |embed_tokens| of timestamps outside kReadable
// demo-chat's readability classes (its embedding's column 0): words 2, pieces 1, unprintable
// bytes 0.6, specials 0.3 (<|im_end|> 2.2, a special too).
constexpr float kChatWordAtLeast = 1.5f;
constexpr float kChatPieceAtLeast = 0.8f;
constexpr int32_t kChatSpecials = 3;  // <|endoftext|>, <|im_start|>, <|im_end|>: ids 0..2

// demo-chat's id 0 is its <|endoftext|>; Whisper's comes after the BPE vocabulary, so that id
// is renamed (an inert special token, suppressed).
constexpr const char* kChatEndOfText = "<|endoftext|>";
constexpr const char* kRenamedChatEndOfText = "<|filler|>";

enum class Kind : uint8_t { word, piece, suppressed, special, english, timestamp };

struct Token {
  Kind kind;
  float readability;
};

std::string timestamp_text(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "<|%.2f|>", i * 0.02);
  return buf;
}

ordered_json added_token(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// The vocabulary: demo-chat's BPE (its <|endoftext|> renamed) and Whisper's added tokens.
struct WhisperVocabulary {
  ordered_json tokenizer;
  std::vector<Token> tokens;  // by id
  int32_t eot = -1, sot = -1, first_language = -1, translate = -1, transcribe = -1, startoflm = -1,
          startofprev = -1, nospeech = -1, notimestamps = -1, timestamp_begin = -1, space = -1;
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

WhisperVocabulary whisper_vocabulary() {
  DemoLanguageModel chat = demo_language_model({}, "model.");
  WhisperVocabulary v;
  v.tokenizer = std::move(chat.tokenizer);
  const Tensor* embedding = nullptr;
  for (const auto& [name, t] : chat.weights)
    if (name == "model.embed_tokens.weight") embedding = &t;
  PRISM_CHECK(embedding != nullptr);
  const int64_t chat_hidden = embedding->shape()[1];
  for (int64_t id = 0; id < chat.vocab_size; ++id) {
    const float r = embedding->data<float>()[id * chat_hidden];  // demo-chat's readability
    const bool special = id < kChatSpecials;
    if (!special && r >= kChatWordAtLeast) v.tokens.push_back({Kind::word, kWordReadability});
    else if (!special && r >= kChatPieceAtLeast) v.tokens.push_back({Kind::piece, kPieceReadability});
    else v.tokens.push_back({Kind::suppressed, kSpecialReadability});
  }
  // "\n" is printable for chat, not in a transcript.
  ordered_json& vocab = v.tokenizer["model"]["vocab"];
  v.tokens[vocab.at("\u010a").get<size_t>()] = {Kind::suppressed, kSpecialReadability};
  v.space = vocab.at("\u0120").get<int32_t>();
  vocab.erase(kChatEndOfText);
  vocab[kRenamedChatEndOfText] = 0;
  ordered_json& added = v.tokenizer["added_tokens"];
  for (ordered_json& t : added)
    if (t["content"] == kChatEndOfText) t["content"] = kRenamedChatEndOfText;

  auto add = [&](const std::string& content, Kind kind, float readability, bool special = true) {
    const auto id = static_cast<int32_t>(v.tokens.size());
    added.push_back(added_token(id, content, special));
    v.tokens.push_back({kind, readability});
    return id;
  };
  v.eot = add("<|endoftext|>", Kind::special, kSpecialReadability);
  v.sot = add("<|startoftranscript|>", Kind::special, kSpecialReadability);
  v.first_language = static_cast<int32_t>(v.tokens.size());
  for (const char* code : kLanguages) {
    const bool english = std::string(code) == "en";
    add(std::string("<|") + code + "|>", english ? Kind::english : Kind::special,
        english ? kEnglishReadability : kSpecialReadability);
  }
  v.translate = add("<|translate|>", Kind::special, kSpecialReadability);
  v.transcribe = add("<|transcribe|>", Kind::special, kSpecialReadability);
  v.startoflm = add("<|startoflm|>", Kind::special, kSpecialReadability);
  v.startofprev = add("<|startofprev|>", Kind::special, kSpecialReadability);
  v.nospeech = add("<|nospeech|>", Kind::special, kSpecialReadability);
  v.notimestamps = add("<|notimestamps|>", Kind::special, kSpecialReadability);
  v.timestamp_begin = static_cast<int32_t>(v.tokens.size());
  // NOTE: the Hub's newer Whisper files list the timestamps as non-special added tokens.
  for (int i = 0; i < kNumTimestamps; ++i)
    add(timestamp_text(i), Kind::timestamp, kTimestampReadability - kTimestampSlope * (i * 0.02f), false);
  return v;
}

ordered_json whisper_config(const WhisperVocabulary& v) {
  return {{"activation_dropout", 0.0},
          {"activation_function", "gelu"},
          {"apply_spec_augment", false},
          {"architectures", {"WhisperForConditionalGeneration"}},
          {"attention_dropout", 0.0},
          {"begin_suppress_tokens", {v.space, v.eot}},
          {"bos_token_id", v.eot},
          {"classifier_proj_size", 256},
          {"d_model", kDModel},
          {"decoder_attention_heads", kHeads},
          {"decoder_ffn_dim", kFfnDim},
          {"decoder_layerdrop", 0.0},
          {"decoder_layers", kDecoderLayers},
          {"decoder_start_token_id", v.sot},
          {"dropout", 0.0},
          {"encoder_attention_heads", kHeads},
          {"encoder_ffn_dim", kFfnDim},
          {"encoder_layerdrop", 0.0},
          {"encoder_layers", kEncoderLayers},
          {"eos_token_id", v.eot},
          {"init_std", 0.02},
          {"is_encoder_decoder", true},
          {"max_length", kTargetPositions},
          {"max_source_positions", kSourcePositions},
          {"max_target_positions", kTargetPositions},
          {"median_filter_width", 7},
          {"model_type", "whisper"},
          {"num_hidden_layers", kEncoderLayers},
          {"num_mel_bins", kMelBins},
          {"pad_token_id", v.eot},
          {"scale_embedding", false},
          {"torch_dtype", "float32"},
          {"transformers_version", "4.40.0"},
          {"use_cache", true},
          {"use_weighted_layer_sum", false},
          {"vocab_size", v.size()}};
}

// suppress_tokens: what the real files list (non-speech symbols; here demo-chat's specials,
// unprintable bytes and "\n") and Whisper's specials but <|endoftext|> and <|notimestamps|>.
std::vector<int32_t> suppress_tokens(const WhisperVocabulary& v) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < v.first_language; ++id)
    if (v.tokens[size_t(id)].kind == Kind::suppressed) ids.push_back(id);
  for (int32_t id : {v.sot, v.translate, v.transcribe, v.startoflm, v.startofprev, v.nospeech}) ids.push_back(id);
  return ids;  // ascending: every group above is
}

ordered_json generation_config(const WhisperVocabulary& v) {
  ordered_json langs = ordered_json::object();
  for (size_t i = 0; i < std::size(kLanguages); ++i)
    langs[std::string("<|") + kLanguages[i] + "|>"] = v.first_language + static_cast<int32_t>(i);
  return {{"begin_suppress_tokens", {v.space, v.eot}},
          {"bos_token_id", v.eot},
          {"decoder_start_token_id", v.sot},
          {"eos_token_id", v.eot},
          {"forced_decoder_ids", {{1, nullptr}, {2, v.transcribe}}},
          {"is_multilingual", true},
          {"lang_to_id", langs},
          {"max_initial_timestamp_index", 50},
          {"max_length", kTargetPositions},
          {"no_timestamps_token_id", v.notimestamps},
          {"pad_token_id", v.eot},
          {"prev_sot_token_id", v.startofprev},
          {"return_timestamps", false},
          {"suppress_tokens", suppress_tokens(v)},
          {"task_to_id", {{"transcribe", v.transcribe}, {"translate", v.translate}}},
          {"transformers_version", "4.40.0"}};
}

ordered_json tokenizer_config(const WhisperVocabulary& v) {
  ordered_json decoder = ordered_json::object();
  for (const ordered_json& t : v.tokenizer["added_tokens"]) {
    ordered_json entry = t;
    entry.erase("id");
    decoder[std::to_string(t["id"].get<int>())] = entry;
  }
  return {{"add_prefix_space", false},
          {"added_tokens_decoder", decoder},
          {"bos_token", "<|endoftext|>"},
          {"clean_up_tokenization_spaces", true},
          {"eos_token", "<|endoftext|>"},
          {"errors", "replace"},
          {"model_max_length", 1024},
          {"pad_token", "<|endoftext|>"},
          {"processor_class", "WhisperProcessor"},
          {"return_attention_mask", false},
          {"tokenizer_class", "WhisperTokenizer"},
          {"unk_token", "<|endoftext|>"}};
}

// WhisperFeatureExtractor's file as transformers writes it for the 80-bin checkpoints (without
// the 80 x 201 mel_filters table older files embed: media/log_mel computes Slaney's).
ordered_json preprocessor_config() {
  return {{"chunk_length", 30},
          {"feature_extractor_type", "WhisperFeatureExtractor"},
          {"feature_size", kMelBins},
          {"hop_length", 160},
          {"n_fft", 400},
          {"n_samples", 480000},
          {"nb_max_frames", 3000},
          {"padding_side", "right"},
          {"padding_value", 0.0},
          {"processor_class", "WhisperProcessor"},
          {"return_attention_mask", false},
          {"sampling_rate", 16000}};
}

// openai/whisper's sinusoids(length, channels), stored as model.encoder.embed_positions.
Tensor sinusoids(int64_t length, int64_t channels) {
  Tensor t = Tensor::empty({length, channels}, DType::f32);
  float* p = t.data<float>();
  const int64_t half = channels / 2;
  const double increment = std::log(10000.0) / double(half - 1);
  for (int64_t pos = 0; pos < length; ++pos)
    for (int64_t i = 0; i < half; ++i) {
      const double scaled = double(pos) * std::exp(-increment * double(i));
      p[pos * channels + i] = float(std::sin(scaled));
      p[pos * channels + half + i] = float(std::cos(scaled));
    }
  return t;
}

void zero_row(Tensor& w, int64_t row) {
  float* p = w.data<float>() + row * (w.numel() / w.shape()[0]);
  for (int64_t i = 0; i < w.numel() / w.shape()[0]; ++i) p[i] = 0.0f;
}

void zero_at(Tensor& v, int64_t i) { v.data<float>()[i] = 0.0f; }

// Weights and layer-norm parameters of one model half, drawn in name order.
class Weights {
 public:
  explicit Weights(uint32_t seed) : r_(seed) {}

  // A LayerNorm scattered around identity as trained ones are; kReadable ignored (decoder).
  void layer_norm(const std::string& name, bool decoder) {
    Tensor w = r_.norm_weight(kDModel), b = r_.tensor({kDModel}, 0.0f, 0.1f);
    if (decoder) {
      zero_at(w, kReadable);
      zero_at(b, kReadable);
    }
    add(name + ".weight", std::move(w));
    add(name + ".bias", std::move(b));
  }
  void linear(const std::string& name, int64_t out, int64_t in, bool bias = true) {
    add(name + ".weight", r_.linear({out, in}));
    if (bias) add(name + ".bias", r_.tensor({out}, 0.0f, 0.1f));
  }
  // q and k drawn larger (attention logits of std ~q_k_scale), as whisper_family.py does: a
  // trained model's peaked softmax; k_proj has no bias. The decoder's out_proj never writes
  // kReadable.
  void attention(const std::string& name, float q_k_scale, bool decoder) {
    const float bound = q_k_scale / std::sqrt(float(kDModel));
    add(name + ".k_proj.weight", r_.tensor({kDModel, kDModel}, 0.0f, bound));
    linear(name + ".v_proj", kDModel, kDModel);
    add(name + ".q_proj.weight", r_.tensor({kDModel, kDModel}, 0.0f, bound));
    add(name + ".q_proj.bias", r_.tensor({kDModel}, 0.0f, 0.1f));
    linear(name + ".out_proj", kDModel, kDModel);
    if (decoder) {
      zero_row(last(1), kReadable);
      zero_at(last(0), kReadable);
    }
  }
  void mlp(const std::string& prefix, bool decoder) {
    linear(prefix + "fc1", kFfnDim, kDModel);
    linear(prefix + "fc2", kDModel, kFfnDim);
    if (decoder) {
      zero_row(last(1), kReadable);
      zero_at(last(0), kReadable);
    }
  }

  DemoRandom& random() { return r_; }
  void add(std::string name, Tensor t) { out_.emplace_back(std::move(name), std::move(t)); }
  Tensor& last(size_t back) { return out_[out_.size() - 1 - back].second; }
  NamedTensors take() { return std::move(out_); }

 private:
  DemoRandom r_;
  NamedTensors out_;
};

void append_encoder(NamedTensors& out) {
  Weights w(kSeed);
  const std::string p = "model.encoder.";
  w.add(p + "conv1.weight", w.random().linear({kDModel, kMelBins, 3}));
  w.add(p + "conv1.bias", w.random().tensor({kDModel}, 0.0f, 0.1f));
  w.add(p + "conv2.weight", w.random().linear({kDModel, kDModel, 3}));
  w.add(p + "conv2.bias", w.random().tensor({kDModel}, 0.0f, 0.1f));
  w.add(p + "embed_positions.weight", sinusoids(kSourcePositions, kDModel));
  for (int l = 0; l < kEncoderLayers; ++l) {
    const std::string q = p + "layers." + std::to_string(l) + ".";
    w.attention(q + "self_attn", 2.5f, false);
    w.layer_norm(q + "self_attn_layer_norm", false);
    w.mlp(q, false);
    w.layer_norm(q + "final_layer_norm", false);
  }
  w.layer_norm(p + "layer_norm", false);
  for (auto& t : w.take()) out.push_back(std::move(t));
}

// [vocab, d_model]: readability in kReadable; the rest uniform for text, tiny for specials,
// kTimestampSpread for timestamps.
Tensor embed_tokens(const WhisperVocabulary& v, DemoRandom& r) {
  Tensor t = Tensor::empty({v.size(), kDModel}, DType::f32);
  float* p = t.data<float>();
  for (int64_t id = 0; id < v.size(); ++id) {
    const Token& token = v.tokens[size_t(id)];
    const float spread = token.kind == Kind::word || token.kind == Kind::piece ? kTextSpread
                         : token.kind == Kind::timestamp                       ? kTimestampSpread
                                                                               : 0.02f;
    float* row = p + id * kDModel;
    for (int64_t d = 0; d < kDModel; ++d) row[d] = spread * (2.0f * r.uniform() - 1.0f);
    row[kReadable] = token.readability;
  }
  return t;
}

void append_decoder(const WhisperVocabulary& v, NamedTensors& out) {
  Weights w(kSeed + 1);
  const std::string p = "model.decoder.";
  w.add(p + "embed_tokens.weight", embed_tokens(v, w.random()));
  Tensor positions = w.random().tensor({kTargetPositions, kDModel}, 0.0f, kPositionSpread);
  for (int64_t i = 0; i < kTargetPositions; ++i) positions.data<float>()[i * kDModel + kReadable] = 0.0f;
  w.add(p + "embed_positions.weight", std::move(positions));
  for (int l = 0; l < kDecoderLayers; ++l) {
    const std::string q = p + "layers." + std::to_string(l) + ".";
    w.attention(q + "self_attn", 2.5f, true);
    w.layer_norm(q + "self_attn_layer_norm", true);
    w.attention(q + "encoder_attn", 6.0f, true);
    w.layer_norm(q + "encoder_attn_layer_norm", true);
    w.mlp(q, true);
    w.layer_norm(q + "final_layer_norm", true);
  }
  // Final norm: random signs, a constant kReadableLogit on kReadable (see top).
  Tensor weight = Tensor::empty({kDModel}, DType::f32), bias = Tensor::empty({kDModel}, DType::f32);
  for (int64_t d = 0; d < kDModel; ++d) {
    weight.data<float>()[d] = w.random().uniform() < 0.5f ? -kWordSpread : kWordSpread;
    bias.data<float>()[d] = 0.0f;
  }
  weight.data<float>()[kReadable] = 0.0f;
  bias.data<float>()[kReadable] = kReadableLogit;
  w.add(p + "layer_norm.weight", std::move(weight));
  w.add(p + "layer_norm.bias", std::move(bias));
  for (auto& t : w.take()) out.push_back(std::move(t));
}

Status write_json(const fs::path& path, const ordered_json& j) { return write_file(path.string(), j.dump(2) + "\n"); }

}  // namespace

Status write_demo_asr(const fs::path& dir) {
  const WhisperVocabulary v = whisper_vocabulary();
  NamedTensors weights;
  append_encoder(weights);
  append_decoder(v, weights);  // proj_out is tied: no proj_out.weight, as save_pretrained writes
  PRISM_RETURN_IF_ERROR(write_json(dir / "config.json", whisper_config(v)));
  PRISM_RETURN_IF_ERROR(write_json(dir / "generation_config.json", generation_config(v)));
  PRISM_RETURN_IF_ERROR(formats::write_safetensors((dir / "model.safetensors").string(), weights, {{"format", "pt"}}));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer.json", v.tokenizer));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer_config.json", tokenizer_config(v)));
  PRISM_RETURN_IF_ERROR(write_json(dir / "preprocessor_config.json", preprocessor_config()));
  return write_file((dir / "README.txt").string(),
                    "Prism demo deployment 'demo-asr': a tiny Whisper (d_model 64, 2 encoder and 2 decoder layers,\n"
                    "4 heads, 80 mel bins, at most 32 tokens per 30-s chunk) with random weights, demo-chat's\n"
                    "byte-level BPE and Whisper's special and timestamp tokens. It serves POST\n"
                    "/v1/audio/transcriptions and /v1/audio/translations and the Realtime WebSocket\n"
                    "(/v1/realtime?intent=transcription); its transcripts are English-looking babble with\n"
                    "timestamps, whatever the audio says.\n");
}

}  // namespace prism::tools::demo
