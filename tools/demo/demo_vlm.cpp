// tools/demo/demo_vlm.cpp: writing the demo VLM. The language model is demo-chat's
// (tools/demo/demo_chat.h: same shapes and readable babble, its vocabulary grown by the image
// tokens); the tower is drawn from its own seeded stream (tools/demo/demo_clip.h's DemoRandom),
// so the checkpoint is the same bytes everywhere.
#include "tools/demo/demo_vlm.h"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/demo/demo_chat.h"
#include "tools/demo/demo_clip.h"
#include "base/file.h"
#include "formats/safetensors.h"

namespace prism::tools::demo {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

// The SigLIP tower and the connector.
constexpr int64_t kVisionHidden = 32;
constexpr int64_t kVisionIntermediate = 64;
constexpr int kVisionLayers = 2;
constexpr int kVisionHeads = 2;
constexpr int64_t kImageSize = 32;  // = the processor's tile side (max_image_size.longest_edge)
constexpr int64_t kPatchSize = 8;
constexpr int64_t kScaleFactor = 2;  // pixel shuffle: (32 / 8 / 2)² = 4 rows per view
constexpr int64_t kLongestEdge = 64;  // size.longest_edge: at most 2 x 2 tiles of 32
constexpr uint32_t kSeed = 20240801;

constexpr const char* kImage = "<image>";
constexpr const char* kFakeAroundImage = "<fake_token_around_image>";
constexpr const char* kGlobalImage = "<global-img>";

// SmolVLM's image tokens, added after demo-chat's vocabulary in this order.
std::vector<std::string> image_tokens() {
  std::vector<std::string> t = {kFakeAroundImage, kImage, kGlobalImage};
  for (int r = 1; r <= 6; ++r)
    for (int c = 1; c <= 6; ++c) t.push_back("<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">");
  return t;
}

// ChatML (demo-chat's format) over content that is a string or a list of parts: text parts
// as their text, image and video parts as "<image>" (the processor expands each into the
// item's tile markers and image tokens).
constexpr const char* kChatTemplate =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' or part['type'] == 'video' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

ordered_json tokenizer_config(const ordered_json& tokenizer, int64_t max_positions) {
  ordered_json decoder = ordered_json::object();
  for (const ordered_json& t : tokenizer["added_tokens"]) {
    ordered_json entry = t;
    entry.erase("id");
    decoder[std::to_string(t["id"].get<int>())] = entry;
  }
  return {{"add_prefix_space", false},
          {"added_tokens_decoder", decoder},
          {"additional_special_tokens", {kFakeAroundImage, kImage, "<|im_start|>", "<|im_end|>"}},
          {"bos_token", nullptr},
          {"chat_template", kChatTemplate},
          {"clean_up_tokenization_spaces", false},
          {"eos_token", "<|im_end|>"},
          {"fake_image_token", kFakeAroundImage},
          {"global_image_token", kGlobalImage},
          {"image_token", kImage},
          {"model_max_length", max_positions},
          {"pad_token", "<|endoftext|>"},
          {"processor_class", "Idefics3Processor"},
          {"tokenizer_class", "GPT2Tokenizer"},
          {"unk_token", nullptr}};
}

ordered_json vision_config() {
  return {{"hidden_act", "gelu_pytorch_tanh"},
          {"hidden_size", kVisionHidden},
          {"image_size", kImageSize},
          {"intermediate_size", kVisionIntermediate},
          {"layer_norm_eps", 1e-6},
          {"model_type", "idefics3_vision"},
          {"num_attention_heads", kVisionHeads},
          {"num_channels", 3},
          {"num_hidden_layers", kVisionLayers},
          {"patch_size", kPatchSize}};
}

// Idefics3Config: the LM untied (lm_head.weight written, as SmolVLM's checkpoints have it).
ordered_json idefics3_config(ordered_json text_config, int64_t vocab_size, int32_t image_token_id) {
  text_config["tie_word_embeddings"] = false;
  return {{"architectures", {"Idefics3ForConditionalGeneration"}},
          {"image_token_id", image_token_id},
          {"model_type", "idefics3"},
          {"pad_token_id", text_config["pad_token_id"]},
          {"scale_factor", kScaleFactor},
          {"text_config", text_config},
          {"tie_word_embeddings", false},
          {"torch_dtype", "float32"},
          {"transformers_version", "4.46.0"},
          {"use_cache", true},
          {"vision_config", vision_config()},
          {"vocab_size", vocab_size}};
}

// Idefics3ImageProcessor as SmolVLM configures it, at a 64-pixel longest edge and 32-pixel tiles.
ordered_json preprocessor_config() {
  return {{"do_convert_rgb", true},
          {"do_image_splitting", true},
          {"do_normalize", true},
          {"do_pad", true},
          {"do_rescale", true},
          {"do_resize", true},
          {"image_mean", {0.5, 0.5, 0.5}},
          {"image_processor_type", "Idefics3ImageProcessor"},
          {"image_std", {0.5, 0.5, 0.5}},
          {"max_image_size", {{"longest_edge", kImageSize}}},
          {"processor_class", "Idefics3Processor"},
          {"resample", 1},
          {"rescale_factor", 1.0 / 255.0},
          {"size", {{"longest_edge", kLongestEdge}}}};
}

// The SigLIP tower (Idefics3VisionTransformer) and the connector, under their HF names.
void append_vision_weights(int64_t text_hidden, NamedTensors& t) {
  DemoRandom r(kSeed);
  const std::string p = "model.vision_model.";
  const int64_t patches = (kImageSize / kPatchSize) * (kImageSize / kPatchSize);
  t.emplace_back(p + "embeddings.patch_embedding.weight", r.linear({kVisionHidden, 3, kPatchSize, kPatchSize}));
  t.emplace_back(p + "embeddings.patch_embedding.bias", r.bias(kVisionHidden));
  t.emplace_back(p + "embeddings.position_embedding.weight", r.tensor({patches, kVisionHidden}, 0.0f, 0.2f));
  append_encoder_layers(p + "encoder.", kVisionHidden, kVisionIntermediate, kVisionLayers, r, t);
  t.emplace_back(p + "post_layernorm.weight", r.norm_weight(kVisionHidden));
  t.emplace_back(p + "post_layernorm.bias", r.bias(kVisionHidden));
  t.emplace_back("model.connector.modality_projection.proj.weight",
                 r.linear({text_hidden, kVisionHidden * kScaleFactor * kScaleFactor}));
}

Status write_json(const fs::path& path, const ordered_json& j) { return write_file(path.string(), j.dump(2) + "\n"); }

}  // namespace

Status write_demo_vlm(const fs::path& dir) {
  DemoLanguageModel lm = demo_language_model(image_tokens(), "model.text_model.");
  int32_t image_token_id = -1;
  for (const ordered_json& t : lm.tokenizer["added_tokens"])
    if (t["content"] == kImage) image_token_id = t["id"].get<int32_t>();
  const int64_t text_hidden = lm.config["hidden_size"].get<int64_t>();
  const int64_t max_positions = lm.config["max_position_embeddings"].get<int64_t>();

  NamedTensors weights = std::move(lm.weights);
  for (const auto& [name, tensor] : weights)
    if (name == "model.text_model.embed_tokens.weight") {
      weights.emplace_back("lm_head.weight", tensor.clone());  // untied, same values: demo-chat's tied head
      break;
    }
  append_vision_weights(text_hidden, weights);

  PRISM_RETURN_IF_ERROR(write_json(dir / "config.json", idefics3_config(lm.config, lm.vocab_size, image_token_id)));
  PRISM_RETURN_IF_ERROR(write_json(dir / "generation_config.json", {{"_from_model_config", true},
                                                                    {"bos_token_id", nullptr},
                                                                    {"eos_token_id", lm.config["eos_token_id"]},
                                                                    {"pad_token_id", lm.config["pad_token_id"]},
                                                                    {"transformers_version", "4.46.0"}}));
  PRISM_RETURN_IF_ERROR(formats::write_safetensors((dir / "model.safetensors").string(), weights, {{"format", "pt"}}));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer.json", lm.tokenizer));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer_config.json", tokenizer_config(lm.tokenizer, max_positions)));
  PRISM_RETURN_IF_ERROR(write_json(dir / "preprocessor_config.json", preprocessor_config()));
  PRISM_RETURN_IF_ERROR(write_json(dir / "processor_config.json",
                                   {{"image_seq_len", 4}, {"processor_class", "Idefics3Processor"}}));
  return write_file((dir / "README.txt").string(),
                    "Prism demo deployment 'demo-vlm': a tiny Idefics3 / SmolVLM (SigLIP tower of hidden 32, 2\n"
                    "layers, 32x32 tiles in 8x8 patches; pixel shuffle 2 -> 4 image tokens per view; demo-chat's\n"
                    "Llama as the language model) with random weights. Images are split into at most 2x2 tiles\n"
                    "plus a global view. It serves POST /v1/chat/completions with image_url and video_url parts;\n"
                    "its replies are readable babble, whatever the image.\n");
}

}  // namespace prism::tools::demo
