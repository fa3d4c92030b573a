// What the image-embedding tests share: tiny CLIP and SigLIP dual-encoder directories as a
// deployment sees them, and images as clients send them. The model (random weights, HF names,
// reference outputs) comes from tests/reference/vision_family.py; this adds what the
// reference does not write and serving needs: a tokenizer.json in the family's real layout
// over a small vocabulary (CLIP: byte-level BPE with "</w>" word ends and
// <|startoftext|> ... <|endoftext|>, the end token the largest id as in the real vocabulary;
// SigLIP: a SentencePiece-style Unigram with </s> appended, pad "</s>" as the real
// tokenizer_config.json says) and a preprocessor_config.json (CLIPImageProcessor /
// SiglipImageProcessor at the tiny towers' 32 px).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <boost/beast/core/detail/base64.hpp>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "media/image.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism::test {

// The tiny configs of vision_family.py: both text towers have 99 ids and 16 positions.
inline constexpr int32_t kDualVocab = 99;
// CLIP ids: a..z = 0..25, "a</w>".."z</w>" = 26..51, then merged words; the two specials last.
inline constexpr int32_t kClipA = 26;  // "a</w>"
inline constexpr int32_t kClipCat = 53, kClipDog = 55, kClipPhoto = 59, kClipOf = 60;
inline constexpr int32_t kClipStart = 97, kClipEnd = 98;
// SigLIP ids.
inline constexpr int32_t kSiglipPad = 0, kSiglipEos = 1, kSiglipUnk = 2;
inline constexpr int32_t kSiglipA = 3, kSiglipCat = 4, kSiglipDog = 5, kSiglipPhoto = 6, kSiglipOf = 7;

inline nlohmann::json added_special(int32_t id, const std::string& content) {
  return {{"id", id},         {"content", content},   {"single_word", false}, {"lstrip", false},
          {"rstrip", false},  {"normalized", false},  {"special", true}};
}

// openai/clip-vit-base-patch32's tokenizer.json layout over a 99-id vocabulary.
inline nlohmann::json clip_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  int32_t id = 0;
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = id++;
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c) + "</w>"] = id++;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"c", "a"}, {"ca", "t</w>"}, {"d", "o"}, {"do", "g</w>"}, {"p", "h"}, {"ph", "o"}, {"pho", "t"},
      {"phot", "o</w>"}, {"o", "f</w>"}};
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [l, r] : merges) {
    vocab[l + r] = id++;  // ca 52, cat</w> 53, do 54, dog</w> 55, ph 56, pho 57, phot 58, photo</w> 59, of</w> 60
    merge_list.push_back(l + " " + r);
  }
  vocab["<|startoftext|>"] = kClipStart;
  vocab["<|endoftext|>"] = kClipEnd;
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {added_special(kClipStart, "<|startoftext|>"), added_special(kClipEnd, "<|endoftext|>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "NFC"}},
          {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
          {{"type", "Lowercase"}}}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+"}}},
           {"behavior", "Removed"},
           {"invert", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "RobertaProcessing"},
        {"sep", {"<|endoftext|>", kClipEnd}},
        {"cls", {"<|startoftext|>", kClipStart}},
        {"trim_offsets", false},
        {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<|endoftext|>"},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", "</w>"},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
}

// A SentencePiece Unigram tokenizer.json (as transformers converts T5-style models) with
// SigLIP's specials: <pad> 0, </s> 1, <unk> 2, and </s> after every text.
inline nlohmann::json siglip_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::array();
  vocab.push_back({"<pad>", 0.0});
  vocab.push_back({"</s>", 0.0});
  vocab.push_back({"<unk>", 0.0});
  for (const char* w : {"\xe2\x96\x81" "a", "\xe2\x96\x81" "cat", "\xe2\x96\x81" "dog", "\xe2\x96\x81" "photo",
                        "\xe2\x96\x81" "of", "\xe2\x96\x81"})
    vocab.push_back({w, -2.0});
  for (char c = 'a'; c <= 'z'; ++c) vocab.push_back({std::string(1, c), -5.0});
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", {added_special(0, "<pad>"), added_special(1, "</s>"), added_special(2, "<unk>")}},
          {"normalizer", {{"type", "Lowercase"}}},
          {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}, {"prepend_scheme", "always"},
                             {"split", true}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
            {"pair",
             {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "B"}, {"type_id", 0}}}},
              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}}},
          {"decoder", {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}, {"prepend_scheme", "always"},
                       {"split", true}}},
          {"model", {{"type", "Unigram"}, {"unk_id", 2}, {"vocab", vocab}, {"byte_fallback", false}}}};
}

inline nlohmann::json preprocessor_json(const std::string& family) {
  if (family == "clip")
    return {{"image_processor_type", "CLIPImageProcessor"},
            {"do_resize", true},
            {"size", {{"shortest_edge", 32}}},
            {"resample", 3},
            {"do_center_crop", true},
            {"crop_size", {{"height", 32}, {"width", 32}}},
            {"do_rescale", true},
            {"rescale_factor", 0.00392156862745098},
            {"do_normalize", true},
            {"image_mean", {0.48145466, 0.4578275, 0.40821073}},
            {"image_std", {0.26862954, 0.26130258, 0.27577711}},
            {"do_convert_rgb", true}};
  return {{"image_processor_type", "SiglipImageProcessor"},
          {"do_resize", true},
          {"size", {{"height", 32}, {"width", 32}}},
          {"resample", 3},
          {"do_rescale", true},
          {"rescale_factor", 0.00392156862745098},
          {"do_normalize", true},
          {"image_mean", {0.5, 0.5, 0.5}},
          {"image_std", {0.5, 0.5, 0.5}}};
}

inline void write_serving_files(const std::string& dir, const std::string& family) {
  std::ofstream(dir + "/tokenizer.json") << (family == "clip" ? clip_tokenizer_json() : siglip_tokenizer_json()).dump(1);
  std::ofstream(dir + "/preprocessor_config.json") << preprocessor_json(family).dump(1);
  if (family == "siglip") std::ofstream(dir + "/tokenizer_config.json") << R"({"pad_token": "</s>", "eos_token": "</s>"})";
}

// The directory of a tiny "clip" or "siglip" dual encoder, generated once per test process.
inline Result<std::string> dual_encoder_dir(const std::string& family) {
  PRISM_ASSIGN_OR_RETURN(std::string dir,
                         generate_reference("vision_family.py", "dual_" + family, "write --family " + family));
  write_serving_files(dir, family);
  return dir;
}

// What the frontend reads of that directory, without running Python: vision_family.py's
// tiny config.json (the keys the frontend reads) and stand-in weight bytes (the frontend
// only hashes them). For tests that load no model.
inline std::string dual_encoder_frontend_dir(const std::string& family, const std::string& name) {
  const std::string dir = scratch_dir(name);
  nlohmann::json config;
  if (family == "clip")
    config = {{"model_type", "clip"},
              {"projection_dim", 48},
              {"text_config",
               {{"hidden_size", 48}, {"max_position_embeddings", 16}, {"vocab_size", kDualVocab}, {"pad_token_id", 1},
                {"eos_token_id", 2}, {"model_type", "clip_text_model"}}},
              {"vision_config", {{"hidden_size", 64}, {"image_size", 32}, {"patch_size", 8}, {"model_type", "clip_vision_model"}}}};
  else
    config = {{"model_type", "siglip"},
              {"text_config",
               {{"hidden_size", 64}, {"max_position_embeddings", 16}, {"vocab_size", kDualVocab}, {"pad_token_id", 1},
                {"model_type", "siglip_text_model"}}},
              {"vision_config", {{"hidden_size", 64}, {"image_size", 32}, {"patch_size", 8}, {"model_type", "siglip_vision_model"}}}};
  std::ofstream(dir + "/config.json") << config.dump(1);
  std::ofstream(dir + "/model.safetensors", std::ios::binary) << "stand-in weights of " << family;
  write_serving_files(dir, family);
  return dir;
}

// A w × h image whose pixels follow `seed` (distinct seeds: distinct images).
inline media::Image test_image(int w, int h, int seed) {
  media::Image im;
  im.width = w;
  im.height = h;
  im.pixels.resize(size_t(w) * size_t(h) * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        im.pixels[(size_t(y) * size_t(w) + size_t(x)) * 3 + size_t(c)] =
            uint8_t((x * (7 + seed) + y * (13 + 3 * c) + seed * 31 + c * 50) % 256);
  return im;
}

inline std::string base64(const std::vector<uint8_t>& bytes) {
  std::string out(boost::beast::detail::base64::encoded_size(bytes.size()), '\0');
  out.resize(boost::beast::detail::base64::encode(out.data(), bytes.data(), bytes.size()));
  return out;
}

// The image as a client sends it: a PNG data URL.
inline std::string png_data_url(const media::Image& image) {
  return "data:image/png;base64," + base64(media::encode_png(image));
}

}  // namespace prism::test
