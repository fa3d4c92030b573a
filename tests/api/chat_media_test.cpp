// tests/api/chat_media_test.cpp: the chat route's content parts with images and videos:
// reading image_url / video_url parts (every error a 400 naming the element), the prompt a
// text-only model and a VLM get (media refused by the first; read, prepared, budgeted by the
// second, with errors naming the part), and usage.prompt_tokens_details. The models are tiny
// directories written here with GPT-2's real tokenizer (placeholder tokens added).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/routes/chat_completions.h"
#include "api/routes/chat_media.h"
#include "api/routes/generate_response.h"
#include "media/image.h"
#include "test_util/paths.h"
#include "test_util/video_writer.h"

namespace prism::api {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

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

std::string png_data_url(int width, int height) {
  media::Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width) * height * 3);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = uint8_t(i * 13 % 251);
  return "data:image/png;base64," + base64(media::encode_png(image));
}

// A text-only Llama-layout model with a ChatML template.
std::string text_model_dir() {
  const fs::path dir = test::scratch_dir("chat_media_text");
  write(dir / "config.json",
        json{{"model_type", "llama"}, {"vocab_size", 50304}, {"max_position_embeddings", 2048}}.dump());
  write(dir / "tokenizer_config.json", json{{"chat_template", kChatMl}, {"eos_token", "<|endoftext|>"}}.dump());
  fs::copy_file(fs::path(test::testdata_dir()) / "tokenizers" / "gpt2" / "tokenizer.json", dir / "tokenizer.json");
  return dir.string();
}

// A SmolVLM-layout (idefics3) model: a 4 × 4 grid (16 rows a view), tiles of 32 from a longest
// edge of 64, with SmolVLM's chat template; `max_positions` is the context.
std::string vlm_dir(const std::string& name, int max_positions = 2048) {
  const fs::path dir = test::scratch_dir("chat_media_" + name);
  write(dir / "config.json",
        json{{"model_type", "idefics3"},
             {"image_token_id", 50257},
             {"scale_factor", 2},
             {"vision_config", {{"image_size", 32}, {"patch_size", 4}}},
             {"text_config", {{"model_type", "llama"}, {"vocab_size", 50400}, {"max_position_embeddings", max_positions}}}}
            .dump());
  write(dir / "preprocessor_config.json",
        json{{"image_processor_type", "Idefics3ImageProcessor"}, {"size", {{"longest_edge", 64}}},
             {"max_image_size", {{"longest_edge", 32}}}, {"do_image_splitting", true}}
            .dump());
  write(dir / "chat_template.json", json{{"chat_template", kSmolVlmTemplate}}.dump());
  write(dir / "tokenizer_config.json", json{{"eos_token", "<end_of_utterance>"}}.dump());
  std::ifstream in(fs::path(test::testdata_dir()) / "tokenizers" / "gpt2" / "tokenizer.json");
  json t = json::parse(in);
  std::vector<std::string> tokens = {"<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"};
  for (int r = 1; r <= 6; ++r)
    for (int c = 1; c <= 6; ++c) tokens.push_back("<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">");
  int id = 50257;
  for (const std::string& token : tokens)
    t["added_tokens"].push_back(
        {{"id", id++}, {"content", token}, {"normalized", false}, {"special", true}, {"lstrip", false}, {"rstrip", false}});
  write(dir / "tokenizer.json", t.dump());
  return dir.string();
}

std::shared_ptr<const frontends::GenerateFrontend> load_frontend(const std::string& dir, serving::Knobs knobs = {}) {
  serving::DeploymentConfig c;
  c.name = "tiny";
  c.task = "chat";
  c.model = dir;
  c.knobs = std::move(knobs);
  auto fe = frontends::GenerateFrontend::load(c);
  EXPECT_TRUE(fe.has_value()) << fe.status().to_string();
  return fe.has_value() ? *fe : nullptr;
}

struct Read {
  Result<text::ChatRequest> chat = Status();
  std::vector<MediaPart> media;
  ApiError error;
};

Read read_with_media(const std::string& body) {
  Read r;
  r.chat = read_conversation(ojson::parse(body), r.error, &r.media);
  return r;
}

void expect_read_error(const std::string& body, const std::string& param, const std::string& part) {
  Read r = read_with_media(body);
  ASSERT_FALSE(r.chat.has_value()) << body;
  EXPECT_EQ(r.error.status, 400) << body;
  EXPECT_EQ(r.error.param, param) << body;
  EXPECT_NE(r.error.message.find(part), std::string::npos) << r.error.message << "\n  lacks: " << part;
}

std::string user_parts(const std::string& parts) {
  return R"({"messages": [{"role": "user", "content": [)" + parts + "]}]}";
}

TEST(ChatMedia, ReadsImageAndVideoPartsInOrder) {
  Read r = read_with_media(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Compare"},
                                                    {"type": "image_url", "image_url": {"url": "data:a", "detail": "low"}},
                                                    {"type": "image_url", "image_url": "data:b"},
                                                    {"type": "video_url", "video_url": {"url": "file:///v.mp4"}}]},
                       {"role": "assistant", "content": null, "tool_calls": []}]})");
  ASSERT_TRUE(r.chat.has_value()) << r.error.message;
  ASSERT_EQ(r.media.size(), 3u);
  EXPECT_EQ(r.media[0].kind, frontends::MediaItem::Kind::image);
  EXPECT_EQ(r.media[0].url, "data:a");
  EXPECT_EQ(r.media[0].detail, "low");
  EXPECT_EQ(r.media[0].name, "messages[1].content[1]");
  EXPECT_EQ(r.media[1].url, "data:b");
  EXPECT_EQ(r.media[1].detail, "auto");
  EXPECT_EQ(r.media[2].kind, frontends::MediaItem::Kind::video);
  EXPECT_EQ(r.media[2].name, "messages[1].content[3]");
  const ojson& m = r.chat->messages;
  // Every content is a list of parts; both media kinds are {"type": "image"} for the template.
  EXPECT_EQ(m[0]["content"], ojson::parse(R"([{"type": "text", "text": "Be brief."}])"));
  EXPECT_EQ(m[1]["content"], ojson::parse(R"([{"type": "text", "text": "Compare"}, {"type": "image"},
                                               {"type": "image"}, {"type": "image"}])"));
  EXPECT_EQ(m[2]["content"], ojson::parse(R"([{"type": "text", "text": ""}])"));
  EXPECT_TRUE(m[2].contains("tool_calls"));

  // Without media the text reading is as read_chat_request's.
  ApiError error;
  auto text = read_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": [
      {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})"),
                                error);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(text->messages[0]["content"], "a\nb");
}

TEST(ChatMedia, PartErrorsNameTheElement) {
  expect_read_error(user_parts(R"({"type": "input_audio", "input_audio": {}})"), "messages",
                    "messages[0].content[0] has type 'input_audio': content parts are of type 'text', 'image_url' "
                    "or 'video_url'.");
  expect_read_error(user_parts(R"({"type": "image_url"})"), "messages",
                    "messages[0].content[0].image_url is required");
  expect_read_error(user_parts(R"({"type": "image_url", "image_url": {}})"), "messages",
                    "messages[0].content[0].image_url.url is required: a string.");
  expect_read_error(user_parts(R"({"type": "image_url", "image_url": {"url": 5}})"), "messages",
                    "messages[0].content[0].image_url.url is required");
  expect_read_error(user_parts(R"({"type": "image_url", "image_url": 5})"), "messages",
                    "messages[0].content[0].image_url is an integer");
  expect_read_error(user_parts(R"({"type": "image_url", "image_url": {"url": ""}})"), "messages",
                    "image_url.url is an empty string");
  expect_read_error(user_parts(R"({"type": "image_url", "image_url": {"url": "data:x", "detail": "ultra"}})"),
                    "messages", "messages[0].content[0].image_url.detail \"ultra\" is not one of 'auto', 'low', 'high'.");
  expect_read_error(user_parts(R"({"type": "text", "text": "a"}, {"type": "video_url", "video_url": {"uri": "x"}})"),
                    "messages", "messages[0].content[1].video_url.url is required");
  expect_read_error(user_parts(R"({"type": "text", "text": "a"}, {"type": "video_url", "video_url": {"url": "x", "detail": "low"}})"),
                    "messages", "video_url.detail");
  expect_read_error(user_parts(R"({"image_url": {"url": "x"}})"), "messages", "messages[0].content[0].type is required");
}

TEST(ChatMedia, TextModelRefusesMediaAndKeepsItsTextPrompt) {
  auto fe = load_frontend(text_model_dir());
  ASSERT_NE(fe, nullptr);
  ASSERT_EQ(fe->vision(), nullptr);
  const ojson body = ojson::parse(user_parts(
      R"({"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}})"));
  Read r = read_with_media(body.dump());
  ASSERT_TRUE(r.chat.has_value());
  ApiError error;
  auto prompt = build_chat_prompt(*fe, "tiny", body, *r.chat, r.media, error);
  ASSERT_FALSE(prompt.has_value());
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.param, "messages");
  EXPECT_EQ(error.message, "messages[0].content[1] has type 'image_url': the model 'tiny' does not accept image input.");

  const ojson video = ojson::parse(user_parts(R"({"type": "video_url", "video_url": "data:video/mp4;base64,AAAA"})"));
  r = read_with_media(video.dump());
  ASSERT_TRUE(r.chat.has_value());
  prompt = build_chat_prompt(*fe, "tiny", video, *r.chat, r.media, error);
  ASSERT_FALSE(prompt.has_value());
  EXPECT_NE(error.message.find("does not accept video input"), std::string::npos) << error.message;

  // Text parts only: the template gets the joined string, as before.
  const ojson text = ojson::parse(user_parts(R"({"type": "text", "text": "Hi"}, {"type": "text", "text": "there"})"));
  r = read_with_media(text.dump());
  ASSERT_TRUE(r.chat.has_value());
  prompt = build_chat_prompt(*fe, "tiny", text, *r.chat, r.media, error);
  ASSERT_TRUE(prompt.has_value()) << error.message;
  EXPECT_EQ(*fe->tokenizer().decode(prompt->ids), "<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(prompt->media.empty());
  EXPECT_EQ(prompt->image_tokens, 0);
}

struct VlmCall {
  Result<ChatPrompt> prompt = Status();
  ApiError error;
};

VlmCall call(const frontends::GenerateFrontend& fe, const std::string& body_text) {
  VlmCall c;
  const ojson body = ojson::parse(body_text);
  std::vector<MediaPart> media;
  auto chat = read_conversation(body, c.error, &media);
  if (!chat.has_value()) {
    c.prompt = chat.status();
    return c;
  }
  c.prompt = build_chat_prompt(fe, "vlm", body, *chat, media, c.error);
  return c;
}

TEST(ChatMedia, VlmPromptCarriesTheImagesRows) {
  auto fe = load_frontend(vlm_dir("vlm"));
  ASSERT_NE(fe, nullptr);
  ASSERT_NE(fe->vision(), nullptr);
  const std::string image = png_data_url(64, 64);  // 2 × 2 tiles + the global view
  VlmCall c = call(*fe, user_parts(R"({"type": "image_url", "image_url": {"url": ")" + image +
                                   R"("}}, {"type": "text", "text": "What is this?"})"));
  ASSERT_TRUE(c.prompt.has_value()) << c.error.message;
  ASSERT_EQ(c.prompt->media.size(), 1u);
  EXPECT_EQ(c.prompt->media[0].num_rows, 5 * 16);
  EXPECT_EQ(c.prompt->image_tokens, 5 * 16);
  EXPECT_EQ(c.prompt->video_tokens, 0);
  EXPECT_EQ(std::count(c.prompt->ids.begin(), c.prompt->ids.end(), fe->vision()->image_token_id()), 80);
  const std::string text = *fe->tokenizer().decode(c.prompt->ids);
  EXPECT_TRUE(text.starts_with("<|im_start|>User:<fake_token_around_image><row_1_col_1><image>")) << text;
  EXPECT_TRUE(text.ends_with("<fake_token_around_image>What is this?<end_of_utterance>\nAssistant:")) << text;

  // detail "low": the global view only.
  c = call(*fe, user_parts(R"({"type": "image_url", "image_url": {"url": ")" + image + R"(", "detail": "low"}})"));
  ASSERT_TRUE(c.prompt.has_value()) << c.error.message;
  EXPECT_EQ(c.prompt->image_tokens, 16);

  // The prism object overrides the budget for this request.
  c = call(*fe, R"({"prism": {"spatial_pool": 2, "max_image_tiles": 0}, "messages": [{"role": "user", "content": [
                   {"type": "image_url", "image_url": ")" + image + R"("}, {"type": "text", "text": "a"},
                   {"type": "image_url", "image_url": ")" + image + R"("}]}]})");
  ASSERT_TRUE(c.prompt.has_value()) << c.error.message;
  ASSERT_EQ(c.prompt->media.size(), 2u);
  EXPECT_EQ(c.prompt->media[1].spatial_pool, 2);
  EXPECT_EQ(c.prompt->image_tokens, 2 * 4);
  EXPECT_EQ(c.prompt->media[0].key, c.prompt->media[1].key);  // the same image, the same encoder input
}

TEST(ChatMedia, VlmErrorsNameThePartOrTheOption) {
  auto fe = load_frontend(vlm_dir("vlm_errors"));
  ASSERT_NE(fe, nullptr);
  auto expect = [&](const std::string& body, const std::string& param, const std::string& part) {
    VlmCall c = call(*fe, body);
    ASSERT_FALSE(c.prompt.has_value()) << body;
    EXPECT_EQ(c.error.status, 400) << c.error.message;
    EXPECT_EQ(c.error.param, param) << c.error.message;
    EXPECT_NE(c.error.message.find(part), std::string::npos) << c.error.message << "\n  lacks: " << part;
  };
  const std::string text = R"({"type": "text", "text": "a"}, )";
  // A bad data URL, bytes that are no image, a file outside any allowed directory, a host not allowed.
  expect(user_parts(text + R"({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}})"),
         "messages[0].content[1]", "messages[0].content[1] has invalid base64 data");
  expect(user_parts(text + R"({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAECAwQFBgc="}})"),
         "messages[0].content[1]", "messages[0].content[1] is not a PNG, JPEG, WebP or GIF image");
  expect(user_parts(text + R"({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}})"),
         "messages[0].content[1]", "messages[0].content[1] is a local file, and local files are not enabled");
  expect(user_parts(text + R"({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}})"),
         "messages[0].content[1]", "messages[0].content[1] is a remote URL, and remote media is not enabled");
  expect(user_parts(text + R"({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAECAwQFBgc="}})"),
         "messages[0].content[1]", "messages[0].content[1] is not a video");
  // Budget options.
  const std::string ok = user_parts(R"({"type": "text", "text": "a"})");
  expect(R"({"prism": {"tiles": 2}, )" + ok.substr(1), "prism.tiles", "prism.tiles is not a known option");
  expect(R"({"prism": {"spatial_pool": 3}, )" + ok.substr(1), "prism.spatial_pool",
         "prism.spatial_pool must divide the encoder's grid side of 4");
  expect(R"({"prism": 1, )" + ok.substr(1), "prism", "prism must be an object");
  // A text part holding the placeholder.
  expect(user_parts(R"({"type": "text", "text": "look: <image>"})"), "messages", "placeholders for 0 images");
}

TEST(ChatMedia, ContextCheckCountsVisualTokens) {
  // 80 visual tokens in a context of 64: no room.
  auto fe = load_frontend(vlm_dir("vlm_small_context", 64));
  ASSERT_NE(fe, nullptr);
  VlmCall c = call(*fe, user_parts(R"({"type": "image_url", "image_url": ")" + png_data_url(64, 64) + R"("})"));
  ASSERT_TRUE(c.prompt.has_value()) << c.error.message;
  EXPECT_GT(c.prompt->ids.size(), 80u);
  auto max_tokens = fe->resolve_max_tokens(int64_t(c.prompt->ids.size()), std::nullopt);
  ASSERT_FALSE(max_tokens.has_value());
  EXPECT_NE(max_tokens.status().message().find("maximum context length is 64 tokens"), std::string::npos);
}

TEST(ChatMedia, VideoPartsFillVideoTokens) {
  if (!test::has_encoder("mpeg4")) GTEST_SKIP() << "this libavcodec has no mpeg4 encoder";
  auto fe = load_frontend(vlm_dir("vlm_video"));
  ASSERT_NE(fe, nullptr);
  test::VideoSpec spec;
  spec.num_frames = 30;  // 3 s at 10 fps
  auto bytes = test::write_video(spec);
  ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
  VlmCall c = call(*fe, R"({"prism": {"video_fps": 2}, "messages": [{"role": "user", "content": [
                   {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,)" + base64(*bytes) + R"("}},
                   {"type": "text", "text": "What happens?"}]}]})");
  ASSERT_TRUE(c.prompt.has_value()) << c.error.message;
  ASSERT_EQ(c.prompt->media.size(), 1u);
  EXPECT_EQ(c.prompt->media[0].kind, frontends::MediaItem::Kind::video);
  EXPECT_EQ(c.prompt->frames, 6);
  EXPECT_EQ(c.prompt->video_tokens, 6 * 4);  // video_spatial_pool 2 by default: 4 × 4 → 2 × 2
  EXPECT_EQ(c.prompt->image_tokens, 0);
}

TEST(ChatMedia, UsageReportsImageAndVideoTokens) {
  ReplyHeader h;
  h.api = GenerateApi::chat;
  h.id = "chatcmpl-1";
  h.model = "vlm";
  h.include_usage = true;
  std::vector<FinalChoice> choices(1);
  Usage usage;
  usage.prompt_tokens = 120;
  usage.completion_tokens = 3;
  usage.cached_tokens = 16;
  usage.image_tokens = 80;
  auto token_text = [](int32_t) { return std::string(); };
  json j = json::parse(response_json(h, choices, usage, token_text));
  EXPECT_EQ(j["usage"]["prompt_tokens_details"], json({{"cached_tokens", 16}, {"image_tokens", 80}}));
  usage.video_tokens = 24;
  j = json::parse(usage_chunk_json(h, usage));
  EXPECT_EQ(j["usage"]["prompt_tokens_details"],
            json({{"cached_tokens", 16}, {"image_tokens", 80}, {"video_tokens", 24}}));
  usage.image_tokens = usage.video_tokens = 0;
  j = json::parse(usage_chunk_json(h, usage));
  EXPECT_EQ(j["usage"]["prompt_tokens_details"], json({{"cached_tokens", 16}}));
  // Completions never show them.
  h.api = GenerateApi::completions;
  usage.image_tokens = 80;
  j = json::parse(response_json(h, choices, usage, token_text));
  EXPECT_EQ(j["usage"]["prompt_tokens_details"], json({{"cached_tokens", 16}}));
}

}  // namespace
}  // namespace prism::api
