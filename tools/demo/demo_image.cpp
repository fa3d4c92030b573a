// tools/demo/demo_image.cpp: writing the demo Z-Image pipeline. Every component is written in
// its real folder, config keys and tensor names (those tests/reference/z_image_transformer.py,
// vae_decoder.py and llama_family.py --layout qwen3 --base-model write), so the demo loads
// through exactly the path a downloaded Z-Image takes. Weights come from DemoRandom (the same
// bytes everywhere).
#include "tools/demo/demo_image.h"

#include <algorithm>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "formats/safetensors.h"
#include "tools/demo/demo_chat.h"
#include "tools/demo/demo_clip.h"

namespace prism::tools::demo {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr uint32_t kSeed = 20251202;

// Transformer: Z-Image's shape in miniature (the real one: dim 3840, 30 heads, 30 layers).
constexpr int64_t kDim = 64;
constexpr int64_t kHeads = 2;
constexpr int64_t kLayers = 2;
constexpr int64_t kRefinerLayers = 1;
constexpr int64_t kLatentChannels = 16;
constexpr int64_t kPatch = 2;
constexpr int64_t kTimeMid = 1024;  // the timestep MLP's fixed width (diffusers' mid_size)
constexpr int64_t kTimeFreqs = 256;
// VAE: four blocks (factor 8, as FLUX's), narrow.
constexpr int64_t kVaeChannels[] = {16, 16, 32, 32};
constexpr int64_t kVaeGroups = 8;
constexpr int64_t kVaeLayersPerBlock = 1;

// Qwen3's template for what the pipeline renders: user turns and the generation prompt; an
// empty thinking block only when enable_thinking is false (the pipeline passes true).
constexpr const char* kChatTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}";

// Names as std::string from the start: emplacing a string literal into the pair trips GCC 12's
// -Warray-bounds (a false positive in the inlined pair constructor).
void add(NamedTensors& w, std::string name, Tensor t) { w.emplace_back(std::move(name), std::move(t)); }

Status write_json(const fs::path& path, const ordered_json& j) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return internal_error("cannot create " + path.parent_path().string() + ": " + ec.message());
  return write_file(path.string(), j.dump(2) + "\n");
}

Status write_weights(const fs::path& path, NamedTensors tensors) {
  // Largest element size first keeps reads zero-copy; all f32 here, so any order works.
  return formats::write_safetensors(path.string(), tensors, {{"format", "pt"}});
}

ordered_json model_index() {
  return {{"_class_name", "ZImagePipeline"},
          {"_diffusers_version", "0.36.0.dev0"},
          {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
          {"text_encoder", {"transformers", "Qwen3Model"}},
          {"tokenizer", {"transformers", "Qwen2Tokenizer"}},
          {"transformer", {"diffusers", "ZImageTransformer2DModel"}},
          {"vae", {"diffusers", "AutoencoderKL"}}};
}

// Z-Image-Turbo's scheduler_config.json.
ordered_json scheduler_config() {
  return {{"_class_name", "FlowMatchEulerDiscreteScheduler"},
          {"_diffusers_version", "0.36.0.dev0"},
          {"num_train_timesteps", 1000},
          {"shift", 3.0},
          {"use_dynamic_shifting", false}};
}

ordered_json tokenizer_config() {
  return {{"add_bos_token", false},       {"add_prefix_space", false}, {"bos_token", nullptr},
          {"chat_template", kChatTemplate}, {"eos_token", "<|im_end|>"}, {"model_max_length", 2048},
          {"pad_token", "<|endoftext|>"},  {"tokenizer_class", "Qwen2Tokenizer"}};
}

// demo-chat's Llama as Qwen3's base model: model_type qwen3, Qwen3Model, and the per-head
// q_norm / k_norm weights Qwen3 adds.
Status write_text_encoder(const fs::path& dir, const DemoLanguageModel& lm, DemoRandom& r) {
  ordered_json c = lm.config;
  c["architectures"] = {"Qwen3Model"};
  c["model_type"] = "qwen3";
  c.erase("mlp_bias");
  c.erase("pretraining_tp");
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  c["max_window_layers"] = c["num_hidden_layers"];
  const int64_t head_dim = c["head_dim"].get<int64_t>();
  NamedTensors w = lm.weights;
  for (int64_t l = 0; l < c["num_hidden_layers"].get<int64_t>(); ++l) {
    const std::string p = "layers." + std::to_string(l) + ".self_attn.";
    add(w, p + "q_norm.weight", r.norm_weight(head_dim));
    add(w, p + "k_norm.weight", r.norm_weight(head_dim));
  }
  PRISM_RETURN_IF_ERROR(write_json(dir / "config.json", c));
  return write_weights(dir / "model.safetensors", std::move(w));
}

ordered_json transformer_config(int64_t cap_feat_dim) {
  return {{"_class_name", "ZImageTransformer2DModel"},
          {"_diffusers_version", "0.36.0.dev0"},
          {"all_f_patch_size", {1}},
          {"all_patch_size", {kPatch}},
          {"axes_dims", {8, 12, 12}},  // head_dim 32
          {"axes_lens", {1536, 512, 512}},
          {"cap_feat_dim", cap_feat_dim},
          {"dim", kDim},
          {"in_channels", kLatentChannels},
          {"n_heads", kHeads},
          {"n_kv_heads", kHeads},
          {"n_layers", kLayers},
          {"n_refiner_layers", kRefinerLayers},
          {"norm_eps", 1e-5},
          {"qk_norm", true},
          {"rope_theta", 256.0},
          {"t_scale", 1000.0}};
}

void append_block(const std::string& p, bool modulation, DemoRandom& r, NamedTensors& w) {
  const int64_t ffn = kDim * 8 / 3, head_dim = kDim / kHeads, adaln = std::min<int64_t>(kDim, 256);
  for (const char* proj : {"to_q", "to_k", "to_v", "to_out.0"})
    add(w, p + "attention." + proj + ".weight", r.linear({kDim, kDim}));
  add(w, p + "attention.norm_q.weight", r.norm_weight(head_dim));
  add(w, p + "attention.norm_k.weight", r.norm_weight(head_dim));
  add(w, p + "feed_forward.w1.weight", r.linear({ffn, kDim}));
  add(w, p + "feed_forward.w2.weight", r.linear({kDim, ffn}));
  add(w, p + "feed_forward.w3.weight", r.linear({ffn, kDim}));
  for (const char* norm : {"attention_norm1", "ffn_norm1", "attention_norm2", "ffn_norm2"})
    add(w, p + norm + ".weight", r.norm_weight(kDim));
  if (modulation) {
    add(w, p + "adaLN_modulation.0.weight", r.linear({4 * kDim, adaln}));
    add(w, p + "adaLN_modulation.0.bias", r.bias(4 * kDim));
  }
}

Status write_transformer(const fs::path& dir, int64_t cap_feat_dim, DemoRandom& r) {
  const int64_t patch_in = kPatch * kPatch * kLatentChannels, adaln = std::min<int64_t>(kDim, 256);
  const std::string key = std::to_string(kPatch) + "-1";
  NamedTensors w;
  add(w, "all_x_embedder." + key + ".weight", r.linear({kDim, patch_in}));
  add(w, "all_x_embedder." + key + ".bias", r.bias(kDim));
  add(w, "all_final_layer." + key + ".linear.weight", r.linear({patch_in, kDim}));
  add(w, "all_final_layer." + key + ".linear.bias", r.bias(patch_in));
  add(w, "all_final_layer." + key + ".adaLN_modulation.1.weight", r.linear({kDim, adaln}));
  add(w, "all_final_layer." + key + ".adaLN_modulation.1.bias", r.bias(kDim));
  add(w, "t_embedder.mlp.0.weight", r.linear({kTimeMid, kTimeFreqs}));
  add(w, "t_embedder.mlp.0.bias", r.bias(kTimeMid));
  add(w, "t_embedder.mlp.2.weight", r.linear({adaln, kTimeMid}));
  add(w, "t_embedder.mlp.2.bias", r.bias(adaln));
  add(w, "cap_embedder.0.weight", r.norm_weight(cap_feat_dim));
  add(w, "cap_embedder.1.weight", r.linear({kDim, cap_feat_dim}));
  add(w, "cap_embedder.1.bias", r.bias(kDim));
  add(w, "x_pad_token", r.tensor({1, kDim}, 0.0f, 1.0f));
  add(w, "cap_pad_token", r.tensor({1, kDim}, 0.0f, 1.0f));
  for (int64_t i = 0; i < kRefinerLayers; ++i) {
    append_block("noise_refiner." + std::to_string(i) + ".", true, r, w);
    append_block("context_refiner." + std::to_string(i) + ".", false, r, w);
  }
  for (int64_t i = 0; i < kLayers; ++i) append_block("layers." + std::to_string(i) + ".", true, r, w);
  PRISM_RETURN_IF_ERROR(write_json(dir / "config.json", transformer_config(cap_feat_dim)));
  return write_weights(dir / "diffusion_pytorch_model.safetensors", std::move(w));
}

ordered_json vae_config() {
  const size_t n = std::size(kVaeChannels);
  return {{"_class_name", "AutoencoderKL"},
          {"_diffusers_version", "0.36.0.dev0"},
          {"act_fn", "silu"},
          {"block_out_channels", kVaeChannels},
          {"down_block_types", std::vector<std::string>(n, "DownEncoderBlock2D")},
          {"force_upcast", true},
          {"in_channels", 3},
          {"latent_channels", kLatentChannels},
          {"latents_mean", nullptr},
          {"latents_std", nullptr},
          {"layers_per_block", kVaeLayersPerBlock},
          {"mid_block_add_attention", true},
          {"norm_num_groups", kVaeGroups},
          {"out_channels", 3},
          {"sample_size", 1024},  // 128-cell tiles: a demo image (512 at most) decodes whole
          {"scaling_factor", 0.3611},
          {"shift_factor", 0.1159},
          {"up_block_types", std::vector<std::string>(n, "UpDecoderBlock2D")},
          {"use_post_quant_conv", false},
          {"use_quant_conv", false}};
}

void append_resnet(const std::string& p, int64_t cin, int64_t cout, DemoRandom& r, NamedTensors& w) {
  add(w, p + "norm1.weight", r.norm_weight(cin));
  add(w, p + "norm1.bias", r.bias(cin));
  add(w, p + "conv1.weight", r.linear({cout, cin, 3, 3}));
  add(w, p + "conv1.bias", r.bias(cout));
  add(w, p + "norm2.weight", r.norm_weight(cout));
  add(w, p + "norm2.bias", r.bias(cout));
  add(w, p + "conv2.weight", r.linear({cout, cout, 3, 3}));
  add(w, p + "conv2.bias", r.bias(cout));
  if (cin != cout) {
    add(w, p + "conv_shortcut.weight", r.linear({cout, cin, 1, 1}));
    add(w, p + "conv_shortcut.bias", r.bias(cout));
  }
}

Status write_vae(const fs::path& dir, DemoRandom& r) {
  const int64_t n = int64_t(std::size(kVaeChannels)), top = kVaeChannels[n - 1];
  NamedTensors w;
  add(w, "decoder.conv_in.weight", r.linear({top, kLatentChannels, 3, 3}));
  add(w, "decoder.conv_in.bias", r.bias(top));
  append_resnet("decoder.mid_block.resnets.0.", top, top, r, w);
  const std::string a = "decoder.mid_block.attentions.0.";
  add(w, a + "group_norm.weight", r.norm_weight(top));
  add(w, a + "group_norm.bias", r.bias(top));
  for (const char* proj : {"to_q", "to_k", "to_v", "to_out.0"}) {
    add(w, a + proj + ".weight", r.linear({top, top}));
    add(w, a + proj + ".bias", r.bias(top));
  }
  append_resnet("decoder.mid_block.resnets.1.", top, top, r, w);
  int64_t prev = top;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t out = kVaeChannels[n - 1 - i];
    for (int64_t j = 0; j <= kVaeLayersPerBlock; ++j)
      append_resnet("decoder.up_blocks." + std::to_string(i) + ".resnets." + std::to_string(j) + ".",
                    j == 0 ? prev : out, out, r, w);
    if (i != n - 1) {
      const std::string up = "decoder.up_blocks." + std::to_string(i) + ".upsamplers.0.conv.";
      add(w, up + "weight", r.linear({out, out, 3, 3}));
      add(w, up + "bias", r.bias(out));
    }
    prev = out;
  }
  add(w, "decoder.conv_norm_out.weight", r.norm_weight(kVaeChannels[0]));
  add(w, "decoder.conv_norm_out.bias", r.bias(kVaeChannels[0]));
  add(w, "decoder.conv_out.weight", r.linear({3, kVaeChannels[0], 3, 3}));
  add(w, "decoder.conv_out.bias", r.bias(3));
  PRISM_RETURN_IF_ERROR(write_json(dir / "config.json", vae_config()));
  return write_weights(dir / "diffusion_pytorch_model.safetensors", std::move(w));
}

}  // namespace

Status write_demo_image(const fs::path& dir) {
  DemoRandom r(kSeed);
  const DemoLanguageModel lm = demo_language_model({}, "");
  const int64_t cap_feat_dim = lm.config["hidden_size"].get<int64_t>();
  PRISM_RETURN_IF_ERROR(write_json(dir / "model_index.json", model_index()));
  PRISM_RETURN_IF_ERROR(write_json(dir / "scheduler" / "scheduler_config.json", scheduler_config()));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer" / "tokenizer.json", lm.tokenizer));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer" / "tokenizer_config.json", tokenizer_config()));
  PRISM_RETURN_IF_ERROR(write_text_encoder(dir / "text_encoder", lm, r));
  PRISM_RETURN_IF_ERROR(write_transformer(dir / "transformer", cap_feat_dim, r));
  PRISM_RETURN_IF_ERROR(write_vae(dir / "vae", r));
  return write_file((dir / "README.txt").string(),
                    "Prism demo deployment 'demo-image': a tiny Z-Image pipeline (diffusers layout: a Qwen3 text\n"
                    "encoder of hidden 64, a Z-Image transformer of dim 64, an AutoencoderKL decoder of factor 8,\n"
                    "Z-Image-Turbo's scheduler) with random weights. It serves POST /v1/images/generations and\n"
                    "`prism generate-image`; its images are coloured noise, 512 x 512 in 8 steps by default.\n");
}

}  // namespace prism::tools::demo
