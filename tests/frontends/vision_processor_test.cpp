// VisionProcessor over tiny model directories written here in the llava-hf and Idefics3
// (SmolVLM) layouts: config.json, preprocessor_config.json, processor_config.json, and GPT-2's
// real tokenizer.json with the families' placeholder tokens added. Rows, the exact prompt
// text of each layout, expansion, budget overrides and their errors, content keys; then the
// GenerateFrontend that loads it for a VLM and renders a SmolVLM chat.
#include "frontends/vision_processor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "frontends/generate_frontend.h"
#include "test_util/paths.h"
#include "test_util/video_writer.h"

namespace prism::frontends {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kImage = "<image>";
constexpr const char* kFake = "<fake_token_around_image>";
constexpr const char* kGlobal = "<global-img>";

// SmolVLM-256M-Instruct's chat template.
constexpr const char* kSmolVlmTemplate =
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] == "
    "'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' "
    "%}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% "
    "endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string row_col(int r, int c) { return "<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">"; }

// GPT-2's tokenizer.json with `tokens` added as special tokens after its vocabulary; returns
// the id of each in order.
std::vector<int32_t> write_tokenizer(const fs::path& dir, const std::vector<std::string>& tokens) {
  std::ifstream in(fs::path(test::testdata_dir()) / "tokenizers" / "gpt2" / "tokenizer.json");
  json t = json::parse(in);
  std::vector<int32_t> ids;
  int32_t next = 50257;
  for (const std::string& token : tokens) {
    t["added_tokens"].push_back({{"id", next}, {"content", token}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
    ids.push_back(next++);
  }
  write(dir / "tokenizer.json", t.dump());
  return ids;
}

std::vector<std::string> idefics3_tokens(int markers = 6) {
  std::vector<std::string> tokens = {kImage, kFake, kGlobal, "<end_of_utterance>"};
  for (int r = 1; r <= markers; ++r)
    for (int c = 1; c <= markers; ++c) tokens.push_back(row_col(r, c));
  return tokens;
}

// A LLaVA-1.5 directory: CLIP tower 28 / 7 → a 4 × 4 grid (16 rows an image).
struct LlavaDir {
  std::string name;
  json config = {{"model_type", "llava"},
                 {"image_token_index", 50257},
                 {"vision_feature_select_strategy", "default"},
                 {"vision_feature_layer", -2},
                 {"vision_config", {{"model_type", "clip_vision_model"}, {"image_size", 28}, {"patch_size", 7}}},
                 {"text_config", {{"model_type", "llama"}, {"vocab_size", 50304}, {"max_position_embeddings", 512}}}};
  json preprocessor = {{"image_processor_type", "CLIPImageProcessor"}, {"size", {{"shortest_edge", 28}}},
                       {"crop_size", {{"height", 28}, {"width", 28}}}, {"do_center_crop", true}, {"resample", 3}};
  std::vector<std::string> tokens = {kImage};

  std::string write_out() const {
    const fs::path dir = test::scratch_dir("vision_processor_" + name);
    write(dir / "config.json", config.dump());
    write(dir / "preprocessor_config.json", preprocessor.dump());
    write_tokenizer(dir, tokens);
    return dir.string();
  }
};

// An Idefics3 (SmolVLM) directory: SigLIP tower 32 / 4 = 8 patches a side, scale_factor 2 →
// a 4 × 4 grid (16 rows a view); tiles of 32 from a longest edge of 64 (at most 2 × 2).
struct Idefics3Dir {
  std::string name;
  json config = {{"model_type", "idefics3"},
                 {"image_token_id", 50257},
                 {"scale_factor", 2},
                 {"vocab_size", 50400},
                 {"vision_config", {{"model_type", "idefics3_vision"}, {"image_size", 32}, {"patch_size", 4}}},
                 {"text_config", {{"model_type", "llama"}, {"vocab_size", 50400}, {"max_position_embeddings", 2048}}}};
  json preprocessor = {{"image_processor_type", "Idefics3ImageProcessor"}, {"size", {{"longest_edge", 64}}},
                       {"max_image_size", {{"longest_edge", 32}}}, {"do_image_splitting", true}, {"resample", 1}};
  std::optional<json> processor = json{{"image_seq_len", 16}, {"processor_class", "Idefics3Processor"}};
  std::vector<std::string> tokens = idefics3_tokens();
  bool with_template = false;

  std::string write_out() const {
    const fs::path dir = test::scratch_dir("vision_processor_" + name);
    write(dir / "config.json", config.dump());
    write(dir / "preprocessor_config.json", preprocessor.dump());
    if (processor) write(dir / "processor_config.json", processor->dump());
    write_tokenizer(dir, tokens);
    if (with_template) {
      write(dir / "chat_template.json", json{{"chat_template", kSmolVlmTemplate}}.dump());
      write(dir / "tokenizer_config.json", json{{"eos_token", "<end_of_utterance>"}}.dump());
    }
    return dir.string();
  }
};

Result<std::unique_ptr<const VisionProcessor>> load(const std::string& dir, const serving::Knobs& knobs = {}) {
  auto tokenizer = text::Tokenizer::load(dir);
  if (!tokenizer) return tokenizer.status();
  return VisionProcessor::load(dir, knobs, *tokenizer);
}

// A deterministic test picture: a gradient plus `seed`.
media::Image picture(int width, int height, int seed = 0) {
  media::Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c)
        image.pixels[(size_t(y) * width + x) * 3 + c] = uint8_t((x * 7 + y * 3 + c * 50 + seed * 11) & 0xff);
  return image;
}

std::string base64(const std::vector<uint8_t>& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = uint32_t(bytes[i]) << 16 | (i + 1 < bytes.size() ? uint32_t(bytes[i + 1]) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(bytes[i + 2]) : 0);
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

void expect_error(const Status& s, const std::string& part) {
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  EXPECT_NE(s.message().find(part), std::string::npos) << s.message() << "\n  lacks: " << part;
}

TEST(VisionProcessor, LlavaRowsPromptAndPooling) {
  LlavaDir d;
  d.name = "llava";
  auto vp = load(d.write_out());
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  EXPECT_EQ((*vp)->grid_side(), 4);
  EXPECT_EQ((*vp)->image_token_id(), 50257);
  EXPECT_EQ((*vp)->placeholder(), "<image>");

  VisualBudget b = (*vp)->default_budget();
  EXPECT_EQ(b.spatial_pool, 1);
  EXPECT_EQ(b.video_spatial_pool, 2);
  EXPECT_EQ(b.video.max_frames, 16);
  EXPECT_DOUBLE_EQ(b.video.fps, 1.0);
  auto p = (*vp)->prepare_image(picture(40, 30), b);
  ASSERT_TRUE(p.has_value()) << p.status().to_string();
  EXPECT_EQ(p->item.kind, MediaItem::Kind::image);
  EXPECT_EQ(p->item.num_rows, 16);
  EXPECT_EQ(p->item.spatial_pool, 1);
  EXPECT_EQ(p->item.temporal_pool, 1);
  ASSERT_NE(p->item.views, nullptr);
  EXPECT_EQ(p->item.views->num_views, 1);
  EXPECT_EQ(p->item.views->side, 28);
  EXPECT_EQ(p->prompt_text, repeat(kImage, 16));

  b.spatial_pool = 2;  // 4 × 4 → 2 × 2
  auto pooled = (*vp)->prepare_image(picture(40, 30), b);
  ASSERT_TRUE(pooled.has_value()) << pooled.status().to_string();
  EXPECT_EQ(pooled->item.num_rows, 4);
  EXPECT_EQ(pooled->item.spatial_pool, 2);
  EXPECT_EQ(pooled->prompt_text, repeat(kImage, 4));
  EXPECT_EQ(pooled->item.key, p->item.key);  // pooling acts after the encoder: same encoder input
}

TEST(VisionProcessor, Idefics3SplitLayoutIsExact) {
  Idefics3Dir d;
  d.name = "idefics3_split";
  auto vp = load(d.write_out());
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  EXPECT_EQ((*vp)->grid_side(), 4);

  // 64 × 64 → 2 × 2 tiles of 32 plus the global view.
  auto p = (*vp)->prepare_image(picture(64, 64), (*vp)->default_budget());
  ASSERT_TRUE(p.has_value()) << p.status().to_string();
  ASSERT_EQ(p->item.views->rows, 2);
  ASSERT_EQ(p->item.views->cols, 2);
  EXPECT_EQ(p->item.views->num_views, 5);
  EXPECT_EQ(p->item.num_rows, 5 * 16);
  auto split_2x2 = [](int rows) {
    const std::string r = repeat(kImage, rows);
    return std::string(kFake) + "<row_1_col_1>" + r + kFake + "<row_1_col_2>" + r + "\n" + kFake + "<row_2_col_1>" +
           r + kFake + "<row_2_col_2>" + r + "\n" + "\n" + kFake + kGlobal + r + kFake;
  };
  EXPECT_EQ(p->prompt_text, split_2x2(16));
  const std::string rows16 = repeat(kImage, 16);

  // 2 × 2 pooling: 4 rows a view, same layout.
  VisualBudget pooled = (*vp)->default_budget();
  pooled.spatial_pool = 2;
  auto q = (*vp)->prepare_image(picture(64, 64), pooled);
  ASSERT_TRUE(q.has_value()) << q.status().to_string();
  EXPECT_EQ(q->item.num_rows, 5 * 4);
  EXPECT_EQ(q->prompt_text, split_2x2(4));

  // A 2:1 image: one row of two tiles.
  auto wide = (*vp)->prepare_image(picture(64, 32), (*vp)->default_budget());
  ASSERT_TRUE(wide.has_value()) << wide.status().to_string();
  EXPECT_EQ(wide->item.views->rows, 1);
  EXPECT_EQ(wide->item.views->cols, 2);
  EXPECT_EQ(wide->prompt_text, std::string(kFake) + "<row_1_col_1>" + rows16 + kFake + "<row_1_col_2>" + rows16 +
                                   "\n\n" + kFake + kGlobal + rows16 + kFake);
}

TEST(VisionProcessor, Idefics3WithoutSplittingIsTheGlobalBlock) {
  Idefics3Dir d;
  d.name = "idefics3_single";
  auto vp = load(d.write_out());
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  VisualBudget b = (*vp)->default_budget();
  b.image.max_tiles = 0;
  auto p = (*vp)->prepare_image(picture(64, 64), b);
  ASSERT_TRUE(p.has_value()) << p.status().to_string();
  EXPECT_EQ(p->item.views->num_views, 1);
  EXPECT_EQ(p->item.num_rows, 16);
  EXPECT_EQ(p->prompt_text, std::string(kFake) + kGlobal + repeat(kImage, 16) + kFake);

  // max_image_side at one tile leaves nothing to split.
  b = (*vp)->default_budget();
  b.image.max_side = 32;
  auto capped = (*vp)->prepare_image(picture(64, 40), b);
  ASSERT_TRUE(capped.has_value()) << capped.status().to_string();
  EXPECT_EQ(capped->item.views->num_views, 1);
  EXPECT_EQ(capped->prompt_text, p->prompt_text);
}

TEST(VisionProcessor, KeysFollowTheEncoderInput) {
  Idefics3Dir d;
  d.name = "keys";
  auto vp = load(d.write_out());
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  const VisualBudget b = (*vp)->default_budget();
  auto a = (*vp)->prepare_image(picture(64, 64), b);
  auto same = (*vp)->prepare_image(picture(64, 64), b);
  auto other = (*vp)->prepare_image(picture(64, 64, /*seed=*/1), b);
  VisualBudget no_tiles = b;
  no_tiles.image.max_tiles = 0;
  auto global_only = (*vp)->prepare_image(picture(64, 64), no_tiles);
  ASSERT_TRUE(a && same && other && global_only);
  EXPECT_EQ(a->item.key, same->item.key);
  EXPECT_NE(a->item.key, other->item.key);        // different pixels
  EXPECT_NE(a->item.key, global_only->item.key);  // different tiles
  EXPECT_EQ(a->item.key.hex().size(), 32u);
}

TEST(VisionProcessor, ExpandReplacesEachPlaceholderInOrder) {
  LlavaDir d;
  d.name = "expand";
  auto vp = load(d.write_out());
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  std::vector<PreparedMedia> items(2);
  items[0].prompt_text = "[A]";
  items[1].prompt_text = "[B]";
  auto out = (*vp)->expand("USER: <image>\nx <image> y ASSISTANT:", items);
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  EXPECT_EQ(*out, "USER: [A]\nx [B] y ASSISTANT:");
  auto none = (*vp)->expand("plain", {});
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(*none, "plain");
  expect_error((*vp)->expand("one <image> only", items).status(), "holds 1 \"<image>\" placeholders for 2");
  expect_error((*vp)->expand("<image><image>", std::span<const PreparedMedia>(items).first(1)).status(),
               "must not contain \"<image>\"");
}

TEST(VisionProcessor, VideoRowsPoolingAndPromptText) {
  std::vector<media::Image> frames;
  for (int i = 0; i < 5; ++i) frames.push_back(picture(48, 36, i));
  media::VideoFrames video;
  video.frames = frames;
  video.timestamps = {0, 1, 2, 3, 4};
  video.duration = 5;

  LlavaDir l;
  l.name = "video_llava";
  auto llava = load(l.write_out());
  ASSERT_TRUE(llava.has_value()) << llava.status().to_string();
  VisualBudget b = (*llava)->default_budget();  // video_spatial_pool 2
  b.temporal_pool = 2;
  auto v = (*llava)->prepare_video(video, b);
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->item.kind, MediaItem::Kind::video);
  EXPECT_EQ(v->frames, 5);
  EXPECT_EQ(v->item.views->num_views, 5);
  EXPECT_EQ(v->item.spatial_pool, 2);
  EXPECT_EQ(v->item.temporal_pool, 2);
  EXPECT_EQ(v->item.num_rows, 3 * 4);  // ceil(5 / 2) groups × (4 / 2)²
  EXPECT_EQ(v->prompt_text, repeat(kImage, 12));

  Idefics3Dir i;
  i.name = "video_idefics3";
  auto idefics3 = load(i.write_out());
  ASSERT_TRUE(idefics3.has_value()) << idefics3.status().to_string();
  b = (*idefics3)->default_budget();
  auto w = (*idefics3)->prepare_video(video, b);
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_EQ(w->item.views->num_views, 5);  // one global view a frame, never tiles
  EXPECT_EQ(w->item.num_rows, 5 * 4);
  EXPECT_EQ(w->prompt_text, repeat(std::string(kFake) + kGlobal + repeat(kImage, 4) + kFake, 5));
  b.temporal_pool = 4;
  b.video_spatial_pool = 1;
  w = (*idefics3)->prepare_video(video, b);
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_EQ(w->item.num_rows, 2 * 16);
  EXPECT_EQ(w->prompt_text, repeat(std::string(kFake) + kGlobal + repeat(kImage, 16) + kFake, 2));

  expect_error((*idefics3)->prepare_video(media::VideoFrames{}, b).status(), "has no frames");
}

TEST(VisionProcessor, BudgetOverridesAndTheirErrors) {
  LlavaDir d;
  d.name = "budget";
  auto vp = load(d.write_out());
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  auto b = (*vp)->budget(json{{"spatial_pool", 2}, {"max_image_tiles", 0}, {"video_fps", 2.5},
                              {"video_num_frames", 8}, {"video_max_frames", 12}, {"video_max_side", 320},
                              {"video_spatial_pool", 4}, {"temporal_pool", 3}, {"max_image_side", 512}});
  ASSERT_TRUE(b.has_value()) << b.status().to_string();
  EXPECT_EQ(b->spatial_pool, 2);
  EXPECT_EQ(b->image.max_tiles, 0);
  EXPECT_EQ(b->image.max_side, 512);
  EXPECT_DOUBLE_EQ(b->video.fps, 2.5);
  EXPECT_EQ(b->video.num_frames, 8);
  EXPECT_EQ(b->video.max_frames, 12);
  EXPECT_EQ(b->video.max_side, 320);
  EXPECT_EQ(b->video_spatial_pool, 4);
  EXPECT_EQ(b->temporal_pool, 3);
  // null or absent: the deployment's budget
  auto none = (*vp)->budget(json());
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->spatial_pool, 1);
  EXPECT_EQ(none->video_spatial_pool, 2);

  expect_error((*vp)->budget(json{{"spatial_pol", 2}}).status(), "prism.spatial_pol is not a known option");
  expect_error((*vp)->budget(json{{"allowed_local_media_dir", "/"}}).status(),
               "prism.allowed_local_media_dir is not a known option");
  expect_error((*vp)->budget(json{{"spatial_pool", 3}}).status(),
               "prism.spatial_pool must divide the encoder's grid side of 4 (one of 1, 2, 4), got 3");
  expect_error((*vp)->budget(json{{"spatial_pool", "2"}}).status(), "prism.spatial_pool must be an integer");
  expect_error((*vp)->budget(json{{"temporal_pool", 1.5}}).status(), "prism.temporal_pool must be an integer in [1, 4]");
  expect_error((*vp)->budget(json{{"temporal_pool", 9}}).status(), "got 9");
  expect_error((*vp)->budget(json{{"video_fps", 0}}).status(), "prism.video_fps must be a number");
  expect_error((*vp)->budget(json{{"max_image_tiles", -2}}).status(), "prism.max_image_tiles");
  expect_error((*vp)->budget(json::array()).status(), "prism must be an object");
}

TEST(VisionProcessor, KnobsSetTheDefaultsAndThePolicy) {
  LlavaDir d;
  d.name = "knobs";
  const std::string dir = d.write_out();
  serving::Knobs k;
  k.set("spatial_pool", int64_t(2), "prism.toml:3");
  k.set("video_fps", 0.5);
  k.set("video_max_frames", int64_t(8));
  k.set("temporal_pool", int64_t(2));
  k.set("max_image_pixels", int64_t(1000));
  k.set("max_media_bytes", int64_t(4096));
  k.set("max_video_seconds", 30.0);
  k.set("allowed_local_media_dir", dir);
  k.set("allowed_media_hosts", std::string(" images.example.com, *.cdn.example.org ,"));
  auto vp = load(dir, k);
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  const VisualBudget& b = (*vp)->default_budget();
  EXPECT_EQ(b.spatial_pool, 2);
  EXPECT_DOUBLE_EQ(b.video.fps, 0.5);
  EXPECT_EQ(b.video.max_frames, 8);
  EXPECT_EQ(b.temporal_pool, 2);
  const media::MediaSourcePolicy& policy = (*vp)->source_policy();
  EXPECT_EQ(policy.max_bytes, 4096);
  EXPECT_EQ(policy.allowed_local_dir, dir);
  EXPECT_EQ(policy.allowed_hosts, (std::vector<std::string>{"images.example.com", "*.cdn.example.org"}));
  // A request's override starts from the deployment's budget.
  auto r = (*vp)->budget(json{{"temporal_pool", 1}});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->spatial_pool, 2);
  EXPECT_EQ(r->temporal_pool, 1);

  // Every processor knob is known to the deployment's check.
  for (const auto& [name, value] : k.values()) {
    const auto names = VisionProcessor::knob_names();
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }

  auto bad = [&](const char* name, serving::KnobValue value, const std::string& part) {
    serving::Knobs knobs;
    knobs.set(name, value, "prism.toml:9");
    expect_error(load(dir, knobs).status(), part);
  };
  bad("spatial_pool", int64_t(3), "prism.toml:9: knob 'spatial_pool' must divide the encoder's grid side of 4");
  bad("video_spatial_pool", int64_t(8), "knob 'video_spatial_pool' must divide");
  bad("video_fps", 0.0, "knob 'video_fps' must be a number in [0.01, 60], got 0");
  bad("temporal_pool", int64_t(5), "knob 'temporal_pool' must be an integer in [1, 4], got 5");
  bad("max_image_tiles", std::string("4"), "knob 'max_image_tiles' must be an integer");
  bad("max_image_pixels", int64_t(0), "knob 'max_image_pixels' must be at least 1");
  bad("max_video_seconds", -1.0, "knob 'max_video_seconds' must be positive");
  bad("allowed_local_media_dir", std::string("/no/such/dir"), "'/no/such/dir', which is not a directory");
}

TEST(VisionProcessor, OddGridFallsBackToNoVideoPooling) {
  LlavaDir d;
  d.name = "odd";
  d.config["vision_config"]["image_size"] = 21;  // 3 × 3
  d.preprocessor["size"]["shortest_edge"] = 21;
  d.preprocessor["crop_size"] = {{"height", 21}, {"width", 21}};
  auto vp = load(d.write_out());
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  EXPECT_EQ((*vp)->grid_side(), 3);
  EXPECT_EQ((*vp)->default_budget().video_spatial_pool, 1);
}

TEST(VisionProcessor, LoadErrorsNameWhatIsWrong) {
  {
    LlavaDir d;
    d.name = "no_image_token";
    d.tokens = {"<img>"};
    expect_error(load(d.write_out()).status(), "the tokenizer has no single token \"<image>\"");
  }
  {
    LlavaDir d;
    d.name = "wrong_index";
    d.config["image_token_index"] = 32000;
    expect_error(load(d.write_out()).status(), "\"image_token_index\" is 32000 but the tokenizer's \"<image>\" is token 50257");
  }
  {
    LlavaDir d;
    d.name = "full_strategy";
    d.config["vision_feature_select_strategy"] = "full";
    expect_error(load(d.write_out()).status(), "vision_feature_select_strategy 'full' is not supported");
  }
  {
    LlavaDir d;
    d.name = "not_vlm";
    d.config["model_type"] = "llama";
    expect_error(load(d.write_out()).status(), "model_type 'llama' is not a vision-language family");
  }
  {
    Idefics3Dir d;
    d.name = "missing_marker";
    d.tokens = idefics3_tokens(6);
    d.tokens.erase(std::find(d.tokens.begin(), d.tokens.end(), row_col(3, 4)));
    expect_error(load(d.write_out()).status(), "no single token \"<row_3_col_4>\"");
  }
  {
    Idefics3Dir d;
    d.name = "missing_global";
    d.tokens.erase(std::find(d.tokens.begin(), d.tokens.end(), kGlobal));
    expect_error(load(d.write_out()).status(), "no single token \"<global-img>\"");
  }
  {
    Idefics3Dir d;
    d.name = "seq_len";
    d.processor = json{{"image_seq_len", 64}};
    expect_error(load(d.write_out()).status(), "image_seq_len 64 differs from the 16 rows per view");
  }
  {
    Idefics3Dir d;
    d.name = "no_processor_config";  // derived: ((32 / 4) / 2)² = 16
    d.processor.reset();
    auto vp = load(d.write_out());
    ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
    EXPECT_EQ((*vp)->rows_per_view(1), 16);
    EXPECT_EQ((*vp)->rows_per_view(2), 4);
  }
  {
    Idefics3Dir d;
    d.name = "scale";
    d.config["scale_factor"] = 3;
    expect_error(load(d.write_out()).status(), "scale_factor 3 does not divide the vision grid side of 8");
  }
  {
    Idefics3Dir d;
    d.name = "tile_mismatch";
    d.preprocessor["max_image_size"]["longest_edge"] = 64;
    expect_error(load(d.write_out()).status(), "max_image_size.longest_edge 64 differs from the vision tower's");
  }
  {
    Idefics3Dir d;
    d.name = "wrong_processor";
    d.preprocessor = {{"image_processor_type", "CLIPImageProcessor"}};
    expect_error(load(d.write_out()).status(), "an idefics3 model needs Idefics3ImageProcessor");
  }
}

TEST(VisionProcessor, PreparesDataUrlsAndRefusesBadOnes) {
  LlavaDir d;
  d.name = "urls";
  auto vp = load(d.write_out());
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  const VisualBudget& b = (*vp)->default_budget();
  const media::Image image = picture(30, 20);
  auto p = (*vp)->prepare_image_url("data:image/png;base64," + base64(media::encode_png(image)), b);
  ASSERT_TRUE(p.has_value()) << p.status().to_string();
  EXPECT_EQ(p->item.num_rows, 16);
  auto direct = (*vp)->prepare_image(image, b);
  ASSERT_TRUE(direct.has_value());
  EXPECT_EQ(p->item.key, direct->item.key);  // PNG is lossless: the same pixels, the same key

  EXPECT_FALSE((*vp)->prepare_image_url("data:image/png;base64,!!!!", b).has_value());
  EXPECT_FALSE((*vp)->prepare_image_url("data:image/png;base64," + base64({1, 2, 3, 4, 5, 6, 7, 8}), b).has_value());
  // Local files and remote hosts are refused unless configured.
  EXPECT_FALSE((*vp)->prepare_image_url("file:///etc/hostname", b).has_value());
  EXPECT_FALSE((*vp)->prepare_image_url("https://example.com/cat.png", b).has_value());
}

TEST(VisionProcessor, PreparesAVideoUrl) {
  if (!test::has_encoder("mpeg4")) GTEST_SKIP() << "this libavcodec has no mpeg4 encoder";
  Idefics3Dir d;
  d.name = "video_url";
  auto vp = load(d.write_out());
  ASSERT_TRUE(vp.has_value()) << vp.status().to_string();
  test::VideoSpec spec;
  spec.fps = 10;
  spec.num_frames = 40;  // 4 s
  auto bytes = test::write_video(spec);
  ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
  auto v = (*vp)->prepare_video_url("data:video/mp4;base64," + base64(*bytes), (*vp)->default_budget());
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->frames, 4);  // the defaults: 1 frame a second
  EXPECT_EQ(v->item.num_rows, 4 * 4);
}

// ---- the GenerateFrontend of a VLM ----

TEST(VisionFrontend, LoadsTheProcessorAndRendersContentParts) {
  Idefics3Dir d;
  d.name = "frontend";
  d.with_template = true;
  serving::DeploymentConfig c;
  c.name = "vlm";
  c.task = "chat";
  c.model = d.write_out();
  c.knobs.set("max_image_tiles", int64_t(0));
  auto fe = GenerateFrontend::load(c);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  const VisionProcessor* vp = (*fe)->vision();
  ASSERT_NE(vp, nullptr);
  EXPECT_EQ((*fe)->max_context(), 2048);  // text_config's
  EXPECT_EQ((*fe)->vocab_size(), 50400);
  EXPECT_EQ(vp->default_budget().image.max_tiles, 0);

  auto image = vp->prepare_image(picture(64, 64), vp->default_budget());
  ASSERT_TRUE(image.has_value()) << image.status().to_string();
  text::ChatRequest chat;
  chat.messages = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", {{{"type", "image"}}, {{"type", "text"}, {"text", "What is this?"}}}}}});
  std::vector<PreparedMedia> media = {*image};
  auto ids = (*fe)->chat_prompt(chat, media);
  ASSERT_TRUE(ids.has_value()) << ids.status().to_string();
  auto text = (*fe)->tokenizer().decode(*ids);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, "<|im_start|>User:" + std::string(kFake) + kGlobal + repeat(kImage, 16) + kFake +
                       "What is this?<end_of_utterance>\nAssistant:");
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 50257), 16);

  // A text part holding the placeholder would shift the rows: refused.
  chat.messages[0]["content"][1]["text"] = "What is <image>?";
  expect_error((*fe)->chat_prompt(chat, media).status(), "placeholders for 1 images and videos");
  // No media, no placeholder: a text-only turn of the VLM.
  chat.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}}}}}});
  ids = (*fe)->chat_prompt(chat, {});
  ASSERT_TRUE(ids.has_value()) << ids.status().to_string();
  EXPECT_EQ(*(*fe)->tokenizer().decode(*ids), "<|im_start|>User: Hi<end_of_utterance>\nAssistant:");
}

// llava-hf/llava-1.5-7b-hf's chat template: images first, then the texts, per message.
constexpr const char* kLlavaTemplate =
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif "
    "%}{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') "
    "%}{{ '<image>\n' }}{% endfor %}{# Render all text next #}{% if message['role'] != 'assistant' %}{% for content "
    "in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}{% endfor %}{% else "
    "%}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{% generation %}{{ "
    "content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ "
    "'ASSISTANT:' }}{% endif %}";

TEST(VisionFrontend, LlavaTemplateExpandsToTheImageRows) {
  LlavaDir d;
  d.name = "llava_frontend";
  const fs::path dir = d.write_out();
  write(dir / "chat_template.json", json{{"chat_template", kLlavaTemplate}}.dump());
  serving::DeploymentConfig c;
  c.task = "chat";
  c.model = dir.string();
  auto fe = GenerateFrontend::load(c);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  ASSERT_NE((*fe)->vision(), nullptr);
  EXPECT_EQ((*fe)->max_context(), 512);
  const VisionProcessor& vp = *(*fe)->vision();
  auto image = vp.prepare_image(picture(40, 30), vp.default_budget());
  ASSERT_TRUE(image.has_value()) << image.status().to_string();
  text::ChatRequest chat;
  chat.messages = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "What is this?"}}, {{"type", "image"}}}}}});
  std::vector<PreparedMedia> media = {*image};
  auto ids = (*fe)->chat_prompt(chat, media);
  ASSERT_TRUE(ids.has_value()) << ids.status().to_string();
  EXPECT_EQ(*(*fe)->tokenizer().decode(*ids), "USER: " + repeat(kImage, 16) + "\nWhat is this? ASSISTANT:");
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 50257), 16);
}

TEST(VisionFrontend, ProcessorErrorsFailTheLoad) {
  Idefics3Dir d;
  d.name = "frontend_bad_knob";
  d.with_template = true;
  serving::DeploymentConfig c;
  c.task = "chat";
  c.model = d.write_out();
  c.knobs.set("spatial_pool", int64_t(3));
  expect_error(GenerateFrontend::load(c).status(), "knob 'spatial_pool' must divide");
}

}  // namespace
}  // namespace prism::frontends
