// The demo VLM and demo CLIP checkpoints: same bytes twice, the Idefics3 / CLIP config keys
// and tensor names, tokenizers and a chat template Prism loads, and each directory through the
// real loaders (models/vlm, models/vision, media/ and the generate engine's VisionProcessor):
// the image path's shapes end to end, and demo-chat's readable babble kept by the VLM's LM.
#include "tools/demo/demo_clip.h"
#include "tools/demo/demo_vlm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "configs/hf_config.h"
#include "formats/safetensors.h"
#include "frontends/vision_processor.h"
#include "media/image.h"
#include "media/image_preprocess.h"
#include "models/vision/dual_encoder.h"
#include "models/vlm/vision_language.h"
#include "test_util/paths.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace prism::tools::demo {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Written once per test program (each test only reads them).
const std::string& vlm_dir() {
  static const std::string dir = [] {
    std::string d = test::scratch_dir("demo_vlm");
    Status s = write_demo_vlm(d);
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }();
  return dir;
}

const std::string& clip_dir() {
  static const std::string dir = [] {
    std::string d = test::scratch_dir("demo_clip");
    Status s = write_demo_clip(d);
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }();
  return dir;
}

void expect_same_files(const std::string& a, const std::string& b, int num_files) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(a)) {
    const fs::path other = fs::path(b) / entry.path().filename();
    ASSERT_TRUE(fs::exists(other)) << other;
    EXPECT_EQ(read_file(entry.path()), read_file(other)) << entry.path().filename();
    ++files;
  }
  EXPECT_EQ(files, num_files);
}

// A w x h RGB image with a colour gradient.
media::Image gradient(int w, int h) {
  media::Image im{w, h, std::vector<uint8_t>(size_t(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = im.pixels.data() + (size_t(y) * w + x) * 3;
      p[0] = uint8_t(x * 255 / std::max(1, w - 1));
      p[1] = uint8_t(y * 255 / std::max(1, h - 1));
      p[2] = uint8_t((x + y) % 256);
    }
  return im;
}

// ---- demo-vlm --------------------------------------------------------------------------------

TEST(DemoVlm, SameBytesEveryRun) {
  const std::string again = test::scratch_dir("demo_vlm_again");
  ASSERT_TRUE(write_demo_vlm(again).ok());
  // config, generation_config, weights, tokenizer, tokenizer_config, preprocessor_config,
  // processor_config, README
  expect_same_files(vlm_dir(), again, 8);
}

TEST(DemoVlm, Idefics3ConfigAndWeightNames) {
  auto config = configs::HfConfig::load(vlm_dir());
  ASSERT_TRUE(config.has_value()) << config.status().message();
  EXPECT_EQ(config->get_string("model_type").value(), "idefics3");
  EXPECT_EQ(config->get_strings("architectures").value(), std::vector<std::string>{"Idefics3ForConditionalGeneration"});
  EXPECT_EQ(config->get_int("scale_factor").value(), 2);
  EXPECT_FALSE(config->get_bool("tie_word_embeddings").value());
  const configs::HfConfig vision = config->get_object("vision_config").value();
  EXPECT_EQ(vision.get_int("image_size").value(), 32);
  EXPECT_EQ(vision.get_int("patch_size").value(), 8);
  EXPECT_EQ(vision.get_int("hidden_size").value(), 32);
  EXPECT_EQ(vision.get_int("num_hidden_layers").value(), 2);
  const configs::HfConfig text = config->get_object("text_config").value();
  EXPECT_EQ(text.get_string("model_type").value(), "llama");
  EXPECT_EQ(text.get_int("hidden_size").value(), 64);
  const int64_t vocab = text.get_int("vocab_size").value();
  EXPECT_EQ(config->get_int("vocab_size").value(), vocab);

  auto tok = text::Tokenizer::load(vlm_dir());
  ASSERT_TRUE(tok.has_value()) << tok.status().message();
  EXPECT_EQ(tok->vocab_size(), vocab);
  EXPECT_EQ(tok->token_to_id("<image>"), config->get_int("image_token_id").value());

  auto weights = formats::WeightSource::open(vlm_dir());
  ASSERT_TRUE(weights.has_value()) << weights.status().message();
  EXPECT_TRUE(weights->get("model.text_model.embed_tokens.weight", {vocab, 64}).has_value());
  EXPECT_TRUE(weights->get("lm_head.weight", {vocab, 64}).has_value());
  EXPECT_TRUE(weights->get("model.text_model.layers.1.self_attn.k_proj.weight", {32, 64}).has_value());
  EXPECT_TRUE(weights->get("model.text_model.norm.weight", {64}).has_value());
  EXPECT_TRUE(weights->get("model.vision_model.embeddings.patch_embedding.weight", {32, 3, 8, 8}).has_value());
  EXPECT_TRUE(weights->get("model.vision_model.embeddings.patch_embedding.bias", {32}).has_value());
  EXPECT_TRUE(weights->get("model.vision_model.embeddings.position_embedding.weight", {16, 32}).has_value());
  EXPECT_TRUE(weights->get("model.vision_model.encoder.layers.1.self_attn.out_proj.bias", {32}).has_value());
  EXPECT_TRUE(weights->get("model.vision_model.encoder.layers.0.mlp.fc1.weight", {64, 32}).has_value());
  EXPECT_TRUE(weights->get("model.vision_model.post_layernorm.weight", {32}).has_value());
  EXPECT_TRUE(weights->get("model.connector.modality_projection.proj.weight", {64, 32 * 4}).has_value());
  // LM: embed + 2 x 9 + norm + lm_head; tower: 3 + 2 x 16 + 2; connector 1.
  EXPECT_EQ(weights->names().size(), 21u + 37u + 1u);
}

TEST(DemoVlm, TokenizerKeepsDemoChatTextAndAddsImageTokens) {
  auto tok = text::Tokenizer::load(vlm_dir());
  ASSERT_TRUE(tok.has_value()) << tok.status().message();
  // demo-chat's vocabulary first: the same ids for text and ChatML tokens.
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), 0);
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), 1);
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), 2);
  EXPECT_EQ(tok->encode("The water of the river is very near today.", false).ids.size(), 10u);
  // Every image token is one special id, after the BPE vocabulary, in order.
  std::vector<std::string> specials = {"<fake_token_around_image>", "<image>", "<global-img>"};
  for (int r = 1; r <= 6; ++r)
    for (int c = 1; c <= 6; ++c) specials.push_back("<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">");
  const int32_t first = tok->token_to_id(specials[0]).value();
  for (size_t i = 0; i < specials.size(); ++i) {
    EXPECT_EQ(tok->token_to_id(specials[i]), first + int32_t(i)) << specials[i];
    const std::vector<int32_t> id = {first + int32_t(i)};
    EXPECT_EQ(tok->decode(id, /*skip_special_tokens=*/true).value(), "") << specials[i];  // special
  }
  EXPECT_EQ(first + int32_t(specials.size()), tok->vocab_size());
  const text::Encoding e = tok->encode("<fake_token_around_image><row_2_col_1><image><image>\n", false);
  ASSERT_EQ(e.ids.size(), 5u);
  EXPECT_EQ(e.ids[0], first);
  EXPECT_EQ(e.ids[1], tok->token_to_id("<row_2_col_1>").value());
  EXPECT_EQ(e.ids[2], first + 1);
  EXPECT_EQ(e.ids[3], first + 1);
}

TEST(DemoVlm, ChatTemplateWritesImageAndVideoPartsAsPlaceholders) {
  auto tmpl = text::ChatTemplate::load(vlm_dir());
  ASSERT_TRUE(tmpl.has_value()) << tmpl.status().message();
  text::ChatRequest req;
  req.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]},
    {"role": "assistant", "content": "A cat."},
    {"role": "user", "content": [{"type": "text", "text": "And these?"}, {"type": "video"}, {"type": "image"}]}])");
  req.add_generation_prompt = true;
  EXPECT_EQ(tmpl->render(req).value(),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\n<image>What is this?<|im_end|>\n"
            "<|im_start|>assistant\nA cat.<|im_end|>\n"
            "<|im_start|>user\nAnd these?<image><image><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(DemoVlm, Idefics3ImageProcessorConfig) {
  auto c = media::ImageProcessorConfig::load(vlm_dir());
  ASSERT_TRUE(c.has_value()) << c.status().message();
  EXPECT_EQ(c->kind, media::ProcessorKind::idefics3);
  EXPECT_EQ(c->resample, media::Resample::lanczos);
  EXPECT_EQ(c->longest_edge, 64);
  EXPECT_EQ(c->tile_size, 32);
  EXPECT_TRUE(c->do_image_splitting);
  EXPECT_FLOAT_EQ(c->image_mean[1], 0.5f);
  EXPECT_FLOAT_EQ(c->image_std[2], 0.5f);
  // A 64 x 48 image: 2 x 2 tiles of 32 and the global view.
  const media::PixelViews v = media::preprocess_image(gradient(64, 48), *c);
  EXPECT_EQ(v.side, 32);
  EXPECT_EQ(v.rows, 2);
  EXPECT_EQ(v.cols, 2);
  EXPECT_EQ(v.num_views, 5);
  EXPECT_EQ(v.values.size(), size_t(5) * 3 * 32 * 32);
}

TEST(DemoVlm, LoadsThroughTheVlmLoaders) {
  ASSERT_TRUE(models::is_vision_language_model(vlm_dir()));
  auto encoder = models::load_vlm_media_encoder(vlm_dir(), ops::Precision::f32);
  ASSERT_TRUE(encoder.has_value()) << encoder.status().message();
  EXPECT_EQ((*encoder)->image_size(), 32);
  EXPECT_EQ((*encoder)->grid_side(), 2);
  EXPECT_EQ((*encoder)->output_size(), 64);
  const media::PixelViews v =
      media::preprocess_image(gradient(64, 48), media::ImageProcessorConfig::load(vlm_dir()).value());
  const Tensor pixels = Tensor::from<float>(v.values, {v.num_views, 3, 32, 32});
  const Tensor rows = (*encoder)->encode(pixels);
  ASSERT_EQ(rows.shape(), (Dims{5 * 4, 64}));
  double sum_sq = 0;
  for (int64_t i = 0; i < rows.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(rows.data<float>()[i]));
    sum_sq += double(rows.data<float>()[i]) * rows.data<float>()[i];
  }
  // Rows the size of text embeddings (demo-chat's are uniform in (-1, 1)), not 0, not huge.
  const double rms = std::sqrt(sum_sq / double(rows.numel()));
  EXPECT_GT(rms, 0.2);
  EXPECT_LT(rms, 5.0);

  auto lm = models::load_vlm_language_model(vlm_dir(), ops::Precision::f32);
  ASSERT_TRUE(lm.has_value()) << lm.status().message();
  auto tok = text::Tokenizer::load(vlm_dir());
  EXPECT_EQ((*lm)->vocab_size(), tok->vocab_size());
  EXPECT_EQ((*lm)->kv_spec().num_layers, 2);
  EXPECT_EQ((*lm)->max_context(), 2048);
}

TEST(DemoVlm, VisionProcessorExpandsAnImageIntoTilesAndGlobalView) {
  auto tok = text::Tokenizer::load(vlm_dir());
  ASSERT_TRUE(tok.has_value());
  auto vp = frontends::VisionProcessor::load(vlm_dir(), serving::Knobs{}, *tok);
  ASSERT_TRUE(vp.has_value()) << vp.status().message();
  EXPECT_EQ((*vp)->placeholder(), "<image>");
  EXPECT_EQ((*vp)->image_token_id(), tok->token_to_id("<image>").value());
  auto prepared = (*vp)->prepare_image(gradient(64, 48), (*vp)->default_budget());
  ASSERT_TRUE(prepared.has_value()) << prepared.status().message();
  EXPECT_EQ(prepared->item.num_rows, 20);  // 4 tiles + the global view, 4 rows each
  const std::string image4 = "<image><image><image><image>";
  const std::string f = "<fake_token_around_image>";
  EXPECT_EQ(prepared->prompt_text, f + "<row_1_col_1>" + image4 + f + "<row_1_col_2>" + image4 + "\n" + f +
                                       "<row_2_col_1>" + image4 + f + "<row_2_col_2>" + image4 + "\n\n" + f +
                                       "<global-img>" + image4 + f);
  const text::Encoding ids = tok->encode(prepared->prompt_text, false);
  EXPECT_EQ(std::count(ids.ids.begin(), ids.ids.end(), (*vp)->image_token_id()), 20);
  // Idefics3 scales any image to the longest edge first: a 20 x 20 one is split too, unless
  // the budget allows no tiles (the global view only).
  EXPECT_EQ((*vp)->prepare_image(gradient(20, 20), (*vp)->default_budget())->item.num_rows, 20);
  frontends::VisualBudget global_only = (*vp)->default_budget();
  global_only.image.max_tiles = 0;
  auto small = (*vp)->prepare_image(gradient(20, 20), global_only);
  ASSERT_TRUE(small.has_value()) << small.status().message();
  EXPECT_EQ(small->item.num_rows, 4);
  EXPECT_EQ(small->prompt_text, f + "<global-img>" + image4 + f);
}

TEST(DemoVlm, TomlKnobs) {
  const std::string toml = kDemoVlmToml;
  EXPECT_NE(toml.find("kv_cache_bytes = 16777216"), std::string::npos);
  EXPECT_NE(toml.find("prefix_caching = true"), std::string::npos);
}

// ---- demo-clip -------------------------------------------------------------------------------

TEST(DemoClip, SameBytesEveryRun) {
  const std::string again = test::scratch_dir("demo_clip_again");
  ASSERT_TRUE(write_demo_clip(again).ok());
  // config, weights, tokenizer, tokenizer_config, preprocessor_config, README
  expect_same_files(clip_dir(), again, 6);
}

TEST(DemoClip, ClipConfigAndWeightNames) {
  auto config = configs::HfConfig::load(clip_dir());
  ASSERT_TRUE(config.has_value()) << config.status().message();
  EXPECT_EQ(config->get_string("model_type").value(), "clip");
  EXPECT_EQ(config->get_int("projection_dim").value(), 32);
  const configs::HfConfig text = config->get_object("text_config").value();
  const configs::HfConfig vision = config->get_object("vision_config").value();
  EXPECT_EQ(vision.get_int("image_size").value(), 32);
  EXPECT_EQ(vision.get_int("patch_size").value(), 8);
  EXPECT_EQ(text.get_int("max_position_embeddings").value(), 77);
  const int64_t vocab = text.get_int("vocab_size").value();
  EXPECT_EQ(text.get_int("eos_token_id").value(), vocab - 1);

  auto weights = formats::WeightSource::open(clip_dir());
  ASSERT_TRUE(weights.has_value()) << weights.status().message();
  EXPECT_TRUE(weights->get("text_model.embeddings.token_embedding.weight", {vocab, 32}).has_value());
  EXPECT_TRUE(weights->get("text_model.embeddings.position_embedding.weight", {77, 32}).has_value());
  EXPECT_TRUE(weights->get("text_model.encoder.layers.1.self_attn.q_proj.weight", {32, 32}).has_value());
  EXPECT_TRUE(weights->get("text_model.final_layer_norm.bias", {32}).has_value());
  EXPECT_TRUE(weights->get("vision_model.embeddings.class_embedding", {32}).has_value());
  EXPECT_TRUE(weights->get("vision_model.embeddings.patch_embedding.weight", {32, 3, 8, 8}).has_value());
  EXPECT_FALSE(weights->contains("vision_model.embeddings.patch_embedding.bias"));
  EXPECT_TRUE(weights->get("vision_model.embeddings.position_embedding.weight", {17, 32}).has_value());
  EXPECT_TRUE(weights->get("vision_model.pre_layrnorm.weight", {32}).has_value());
  EXPECT_TRUE(weights->get("vision_model.post_layernorm.bias", {32}).has_value());
  EXPECT_TRUE(weights->get("visual_projection.weight", {32, 32}).has_value());
  EXPECT_TRUE(weights->get("text_projection.weight", {32, 32}).has_value());
  EXPECT_TRUE(weights->contains("logit_scale"));
}

TEST(DemoClip, ClipShapedTokenizer) {
  auto tok = text::Tokenizer::load(clip_dir());
  ASSERT_TRUE(tok.has_value()) << tok.status().message();
  const int32_t eot = tok->vocab_size() - 1;
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), eot);
  EXPECT_EQ(tok->token_to_id("<|startoftext|>"), eot - 1);
  // <|startoftext|> words... <|endoftext|>: caption words are one token each, case and
  // spacing normalised away.
  const text::Encoding e = tok->encode("a photo of a cat", true);
  ASSERT_EQ(e.ids.size(), 7u);
  EXPECT_EQ(e.ids.front(), eot - 1);
  EXPECT_EQ(e.ids.back(), eot);
  EXPECT_EQ(e.ids[2], tok->token_to_id("photo</w>").value());
  EXPECT_EQ(tok->encode("A  Photo of a CAT", true).ids, e.ids);
  // Anything else splits into bytes without failing.
  EXPECT_GE(tok->encode("Zürich 2024!", true).ids.size(), 5u);
}

TEST(DemoClip, ClipImageProcessorConfig) {
  auto c = media::ImageProcessorConfig::load(clip_dir());
  ASSERT_TRUE(c.has_value()) << c.status().message();
  EXPECT_EQ(c->kind, media::ProcessorKind::clip);
  EXPECT_EQ(c->resample, media::Resample::bicubic);
  EXPECT_EQ(c->shortest_edge, 32);
  EXPECT_EQ(c->height, 32);
  EXPECT_TRUE(c->do_center_crop);
  const media::PixelViews v = media::preprocess_image(gradient(48, 40), *c);
  EXPECT_EQ(v.num_views, 1);
  EXPECT_EQ(v.side, 32);
}

TEST(DemoClip, LoadsThroughTheDualEncoderLoader) {
  ASSERT_TRUE(models::is_dual_encoder(clip_dir()));
  auto model = models::load_dual_encoder(clip_dir(), ops::Precision::f32);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  EXPECT_EQ(model->text->hidden_size(), 32);
  EXPECT_EQ(model->text->max_tokens(), 77);
  EXPECT_EQ(model->image->image_size(), 32);
  EXPECT_EQ(model->image->embedding_size(), 32);

  auto c = media::ImageProcessorConfig::load(clip_dir()).value();
  std::vector<float> values = media::preprocess_image(gradient(48, 40), c).values;
  const std::vector<float> second = media::preprocess_image(gradient(20, 30), c).values;
  values.insert(values.end(), second.begin(), second.end());
  const Tensor images = model->image->embed_images(Tensor::from<float>(values, {2, 3, 32, 32}));
  ASSERT_EQ(images.shape(), (Dims{2, 32}));
  // Two different images: two different, finite, non-zero vectors.
  const float* a = images.data<float>();
  double diff = 0, norm = 0;
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(a[32 + i]));
    diff += std::abs(a[i] - a[32 + i]);
    norm += std::abs(a[i]);
  }
  EXPECT_GT(norm, 1e-3);
  EXPECT_GT(diff, 1e-3);

  auto tok = text::Tokenizer::load(clip_dir());
  const text::Encoding e = tok->encode("a photo of a cat", true);
  models::EncoderBatch batch;
  const auto n = static_cast<int32_t>(e.ids.size());
  batch.token_ids = Tensor::from<int32_t>(e.ids, {n});
  batch.cu_seqlens = Tensor::from<int32_t>({0, n}, {2});
  const Tensor text_rows = model->text->encode(batch);
  ASSERT_EQ(text_rows.shape(), (Dims{n, 32}));
}

}  // namespace
}  // namespace prism::tools::demo
