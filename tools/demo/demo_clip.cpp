// tools/demo/demo_clip.cpp: writing the demo CLIP dual encoder. The tokenizer is shaped like CLIP's
// own tokenizer.json (NFC + whitespace + lowercase normaliser, CLIP's split regex then
// byte-level, BPE with "</w>" word ends, RobertaProcessing adding <|startoftext|> and
// <|endoftext|>, the two specials the last ids, so HF's argmax-of-ids pooling and
// last-token pooling agree).
#include "tools/demo/demo_clip.h"

#include <cmath>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "formats/safetensors.h"
#include "text/pre_tokenizers.h"

namespace prism::tools::demo {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

Tensor DemoRandom::tensor(const Dims& shape, float center, float scale) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = center + scale * (2.0f * uniform() - 1.0f);
  return t;
}

Tensor DemoRandom::linear(const Dims& shape) {
  int64_t fan_in = 1;
  for (int i = 1; i < shape.size(); ++i) fan_in *= shape[i];
  return tensor(shape, 0.0f, std::sqrt(3.0f / static_cast<float>(fan_in)));  // uniform: std = scale / sqrt(3)
}

void append_encoder_layers(const std::string& prefix, int64_t hidden, int64_t intermediate, int num_layers,
                           DemoRandom& r, NamedTensors& out) {
  for (int l = 0; l < num_layers; ++l) {
    const std::string p = prefix + "layers." + std::to_string(l) + ".";
    for (const char* proj : {"k_proj", "v_proj", "q_proj", "out_proj"}) {
      out.emplace_back(p + "self_attn." + proj + ".weight", r.linear({hidden, hidden}));
      out.emplace_back(p + "self_attn." + proj + ".bias", r.bias(hidden));
    }
    out.emplace_back(p + "layer_norm1.weight", r.norm_weight(hidden));
    out.emplace_back(p + "layer_norm1.bias", r.bias(hidden));
    out.emplace_back(p + "mlp.fc1.weight", r.linear({intermediate, hidden}));
    out.emplace_back(p + "mlp.fc1.bias", r.bias(intermediate));
    out.emplace_back(p + "mlp.fc2.weight", r.linear({hidden, intermediate}));
    out.emplace_back(p + "mlp.fc2.bias", r.bias(hidden));
    out.emplace_back(p + "layer_norm2.weight", r.norm_weight(hidden));
    out.emplace_back(p + "layer_norm2.bias", r.bias(hidden));
  }
}

namespace {

// Shapes: a CLIP ViT-B/32 in miniature.
constexpr int64_t kTextHidden = 32;
constexpr int64_t kTextIntermediate = 64;
constexpr int kTextLayers = 2;
constexpr int kTextHeads = 2;
constexpr int64_t kTextPositions = 77;  // CLIP's context
constexpr int64_t kVisionHidden = 32;
constexpr int64_t kVisionIntermediate = 64;
constexpr int kVisionLayers = 2;
constexpr int kVisionHeads = 2;
constexpr int64_t kImageSize = 32;
constexpr int64_t kPatchSize = 8;
constexpr int64_t kProjectionDim = 32;
constexpr double kLayerNormEps = 1e-5;
constexpr double kLogitScale = 2.6592;  // log(1 / 0.07), CLIP's initial value
constexpr uint32_t kSeed = 20240701;

constexpr const char* kStartOfText = "<|startoftext|>";
constexpr const char* kEndOfText = "<|endoftext|>";
constexpr const char* kEndOfWord = "</w>";

// Words a caption might use: each becomes one token ("cat</w>") through a chain of merges.
constexpr std::string_view kWords = R"(
a an the of on in with and photo picture image drawing painting photograph close view of
cat dog bird fish horse cow sheep fox bear lion tiger rabbit mouse person man woman child
car bus train plane boat bicycle road street city house building bridge tower room table
chair window door tree flower garden forest field mountain river lake sea beach sky cloud
sun moon night day snow rain red green blue yellow black white orange purple brown gray
pink dark bright small large big little old new one two three many square circle stripe
)";

struct Vocabulary {
  std::vector<std::string> tokens;  // in id order, byte-level alphabet
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
};

// 256 byte tokens, the same with "</w>", one merge per new prefix of each word (the word's
// last character carries "</w>", as CLIP's BPE splits words), then the two specials.
Vocabulary clip_vocabulary() {
  Vocabulary v;
  std::set<std::string> seen;
  auto add = [&](const std::string& token) {
    if (!seen.insert(token).second) return false;
    v.tokens.push_back(token);
    return true;
  };
  const auto& alphabet = text::byte_to_unicode();
  for (int b = 0; b < 256; ++b) add(alphabet[b]);
  for (int b = 0; b < 256; ++b) add(alphabet[b] + kEndOfWord);
  std::string word;
  auto add_chain = [&] {
    std::string cur(1, word[0]);
    if (word.size() == 1) return;
    for (size_t i = 1; i < word.size(); ++i) {
      std::string next(1, word[i]);
      if (i + 1 == word.size()) next += kEndOfWord;
      if (add(cur + next)) v.merges.emplace_back(cur, next);
      cur += next;
    }
  };
  for (char c : kWords) {
    if (c >= 'a' && c <= 'z') {
      word += c;
    } else if (!word.empty()) {
      add_chain();
      word.clear();
    }
  }
  add(kStartOfText);
  add(kEndOfText);
  return v;
}

ordered_json special_token(const std::string& content, int id) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// A Hugging Face tokenizer.json as CLIPTokenizerFast saves it.
ordered_json tokenizer_json(const Vocabulary& v) {
  const int eot = static_cast<int>(v.tokens.size()) - 1, sot = eot - 1;
  ordered_json vocab = ordered_json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = static_cast<int>(i);
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
  const ordered_json normalizer = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "NFC"}},
        {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
        {{"type", "Lowercase"}}}}};
  const ordered_json pre_tokenizer = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+"}}},
         {"behavior", "Removed"},
         {"invert", true}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", {special_token(kStartOfText, sot), special_token(kEndOfText, eot)}},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor",
           {{"type", "RobertaProcessing"},
            {"sep", {kEndOfText, eot}},
            {"cls", {kStartOfText, sot}},
            {"trim_offsets", false},
            {"add_prefix_space", false}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", kEndOfText},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", kEndOfWord},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

ordered_json tokenizer_config() {
  return {{"add_prefix_space", false}, {"bos_token", kStartOfText},  {"clean_up_tokenization_spaces", true},
          {"do_lower_case", true},     {"eos_token", kEndOfText},    {"errors", "replace"},
          {"model_max_length", kTextPositions}, {"pad_token", kEndOfText}, {"tokenizer_class", "CLIPTokenizer"},
          {"unk_token", kEndOfText}};
}

ordered_json clip_config(int64_t vocab_size) {
  const ordered_json text = {{"bos_token_id", vocab_size - 2},
                             {"eos_token_id", vocab_size - 1},
                             {"hidden_act", "quick_gelu"},
                             {"hidden_size", kTextHidden},
                             {"intermediate_size", kTextIntermediate},
                             {"layer_norm_eps", kLayerNormEps},
                             {"max_position_embeddings", kTextPositions},
                             {"model_type", "clip_text_model"},
                             {"num_attention_heads", kTextHeads},
                             {"num_hidden_layers", kTextLayers},
                             {"pad_token_id", 1},
                             {"projection_dim", kProjectionDim},
                             {"vocab_size", vocab_size}};
  const ordered_json vision = {{"hidden_act", "quick_gelu"},
                               {"hidden_size", kVisionHidden},
                               {"image_size", kImageSize},
                               {"intermediate_size", kVisionIntermediate},
                               {"layer_norm_eps", kLayerNormEps},
                               {"model_type", "clip_vision_model"},
                               {"num_attention_heads", kVisionHeads},
                               {"num_channels", 3},
                               {"num_hidden_layers", kVisionLayers},
                               {"patch_size", kPatchSize},
                               {"projection_dim", kProjectionDim}};
  return {{"architectures", {"CLIPModel"}},
          {"initializer_factor", 1.0},
          {"logit_scale_init_value", kLogitScale},
          {"model_type", "clip"},
          {"projection_dim", kProjectionDim},
          {"text_config", text},
          {"torch_dtype", "float32"},
          {"transformers_version", "4.46.0"},
          {"vision_config", vision}};
}

// CLIPImageProcessor as openai/clip-vit-base-patch32 configures it, at image 32.
ordered_json preprocessor_config() {
  return {{"crop_size", {{"height", kImageSize}, {"width", kImageSize}}},
          {"do_center_crop", true},
          {"do_convert_rgb", true},
          {"do_normalize", true},
          {"do_rescale", true},
          {"do_resize", true},
          {"image_mean", {0.48145466, 0.4578275, 0.40821073}},
          {"image_processor_type", "CLIPImageProcessor"},
          {"image_std", {0.26862954, 0.26130258, 0.27577711}},
          {"processor_class", "CLIPProcessor"},
          {"resample", 3},
          {"rescale_factor", 1.0 / 255.0},
          {"size", {{"shortest_edge", kImageSize}}}};
}

// CLIPModel's tensors under their Hugging Face names.
NamedTensors clip_weights(int64_t vocab_size) {
  DemoRandom r(kSeed);
  NamedTensors t;
  t.emplace_back("text_model.embeddings.token_embedding.weight", r.tensor({vocab_size, kTextHidden}, 0.0f, 1.0f));
  t.emplace_back("text_model.embeddings.position_embedding.weight", r.tensor({kTextPositions, kTextHidden}, 0.0f, 0.2f));
  append_encoder_layers("text_model.encoder.", kTextHidden, kTextIntermediate, kTextLayers, r, t);
  t.emplace_back("text_model.final_layer_norm.weight", r.norm_weight(kTextHidden));
  t.emplace_back("text_model.final_layer_norm.bias", r.bias(kTextHidden));
  const int64_t patches = (kImageSize / kPatchSize) * (kImageSize / kPatchSize);
  t.emplace_back("vision_model.embeddings.class_embedding", r.tensor({kVisionHidden}, 0.0f, 1.0f));
  t.emplace_back("vision_model.embeddings.patch_embedding.weight", r.linear({kVisionHidden, 3, kPatchSize, kPatchSize}));
  t.emplace_back("vision_model.embeddings.position_embedding.weight", r.tensor({patches + 1, kVisionHidden}, 0.0f, 0.2f));
  t.emplace_back("vision_model.pre_layrnorm.weight", r.norm_weight(kVisionHidden));
  t.emplace_back("vision_model.pre_layrnorm.bias", r.bias(kVisionHidden));
  append_encoder_layers("vision_model.encoder.", kVisionHidden, kVisionIntermediate, kVisionLayers, r, t);
  t.emplace_back("vision_model.post_layernorm.weight", r.norm_weight(kVisionHidden));
  t.emplace_back("vision_model.post_layernorm.bias", r.bias(kVisionHidden));
  t.emplace_back("visual_projection.weight", r.linear({kProjectionDim, kVisionHidden}));
  t.emplace_back("text_projection.weight", r.linear({kProjectionDim, kTextHidden}));
  Tensor logit_scale = Tensor::empty({}, DType::f32);  // a scalar, as CLIPModel saves it
  *logit_scale.data<float>() = static_cast<float>(kLogitScale);
  t.emplace_back("logit_scale", std::move(logit_scale));
  return t;
}

Status write_json(const fs::path& path, const ordered_json& j) { return write_file(path.string(), j.dump(2) + "\n"); }

}  // namespace

Status write_demo_clip(const fs::path& dir) {
  const Vocabulary v = clip_vocabulary();
  const auto vocab_size = static_cast<int64_t>(v.tokens.size());
  PRISM_RETURN_IF_ERROR(write_json(dir / "config.json", clip_config(vocab_size)));
  PRISM_RETURN_IF_ERROR(
      formats::write_safetensors((dir / "model.safetensors").string(), clip_weights(vocab_size), {{"format", "pt"}}));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer.json", tokenizer_json(v)));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer_config.json", tokenizer_config()));
  PRISM_RETURN_IF_ERROR(write_json(dir / "preprocessor_config.json", preprocessor_config()));
  return write_file((dir / "README.txt").string(),
                    "Prism demo deployment 'demo-clip': a tiny CLIP dual encoder (text and image towers of hidden\n"
                    "32, 2 layers; images 32x32 in 8x8 patches; projection 32) with random weights in the\n"
                    "openai/clip-vit-base-patch32 layout. It serves POST /v1/embeddings for texts and images\n"
                    "(data URLs) in one space; its vectors are meaningless.\n");
}

}  // namespace prism::tools::demo
