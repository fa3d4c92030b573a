// tests/api/embeddings_images_test.cpp: image inputs of POST /v1/embeddings. The pure steps:
// reading image objects among strings (OpenAI's image_url part, TEI's {"image": URL}, typed
// text parts) with errors naming the element, and preparing images through a real CLIP
// frontend (a corrupt image or a refused file is a 400 naming input[i]). Then the route over
// HTTP on loopback, with a tiny CLIP deployment and a text-only one: mixed inputs come back
// in order as unit vectors of one length, usage counts text tokens and prism.images the
// images; an image for the text-only model is a 400 naming the model.
#include "api/routes/embeddings.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/errors.h"
#include "api/http_server.h"
#include "engines/encode/embed_dual_encoder_dir.h"
#include "engines/encode/embed_engine.h"
#include "engines/encode/media_cache.h"
#include "engines/encode/fake_encoder.h"
#include "serving/deployment_set.h"
#include "test_util/paths.h"

namespace prism::api {
namespace {

using frontends::EmbedFrontend;
using nlohmann::json;

Result<EmbeddingInputs> parse(std::string_view text) { return parse_embedding_input(json::parse(text)); }

std::string error_of(std::string_view text) {
  Result<EmbeddingInputs> r = parse(text);
  EXPECT_FALSE(r.has_value()) << text;
  if (r.has_value()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  return r.status().message();
}

// A CLIP frontend over the tiny model's config (no model runs in these tests).
std::shared_ptr<const EmbedFrontend> clip_frontend(const serving::Knobs& knobs = {}) {
  const std::string dir = test::dual_encoder_frontend_dir("clip", "embeddings_images_clip");
  Result<std::shared_ptr<const EmbedFrontend>> fe = EmbedFrontend::load(dir, knobs);
  EXPECT_TRUE(fe.has_value()) << fe.status().to_string();
  return fe.has_value() ? fe.value() : nullptr;
}

TEST(EmbeddingsImageInput, ObjectsAmongStringsKeepTheirPositions) {
  Result<EmbeddingInputs> r = parse(R"(["a cat",
      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
      {"type": "text", "text": "a dog"},
      {"image": "file:///srv/media/x.png"},
      {"type": "image_url", "image_url": "data:,B"}])");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_FALSE(r->tokens);
  EXPECT_FALSE(r->scalar);
  EXPECT_EQ(r->size(), 5u);
  EXPECT_EQ(r->texts, (std::vector<std::string>{"a cat", "a dog"}));
  ASSERT_EQ(r->images.size(), 3u);
  EXPECT_EQ(r->images[0].index, 1u);
  EXPECT_EQ(r->images[0].url, "data:image/png;base64,AAAA");
  EXPECT_EQ(r->images[1].index, 3u);
  EXPECT_EQ(r->images[1].url, "file:///srv/media/x.png");
  EXPECT_EQ(r->images[2].index, 4u);
  EXPECT_EQ(r->text_positions(), (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(r->name(3), "input[3]");

  Result<EmbeddingInputs> one = parse(R"({"image": "data:,x"})");
  ASSERT_TRUE(one.has_value()) << one.status().message();
  EXPECT_TRUE(one->scalar);
  ASSERT_EQ(one->images.size(), 1u);
  EXPECT_EQ(one->name(0), "input");
  EXPECT_TRUE(one->text_positions().empty());

  // Without objects nothing changes: the four forms parse as before.
  Result<EmbeddingInputs> plain = parse(R"(["a", "b"])");
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE(plain->images.empty());
  EXPECT_EQ(plain->text_positions(), (std::vector<std::size_t>{0, 1}));
}

TEST(EmbeddingsImageInput, BadObjectsNameTheElement) {
  EXPECT_EQ(error_of(R"(["a", {"type": "image_url", "image_url": {"url": ""}}])"), "input[1] has an empty image URL.");
  EXPECT_EQ(error_of(R"(["a", "b", {"type": "image_url", "image_url": {}}])"), "input[2].image_url has no \"url\".");
  EXPECT_EQ(error_of(R"([{"type": "image_url", "image_url": {"url": 3}}])"),
            "input[0].image_url is an integer, not a URL string.");
  EXPECT_EQ(error_of(R"([{"type": "video_url", "video_url": {"url": "x"}}])"),
            "input[0] has type 'video_url'; an input object's type is \"image_url\" or \"text\".");
  EXPECT_EQ(error_of(R"([{"type": "text", "text": ""}])"), "input[0].text is an empty string.");
  EXPECT_EQ(error_of(R"(["", {"image": "data:,x"}])"), "input[0] is an empty string.");
  std::string m = error_of(R"([{"image": "data:,x"}, [1, 2]])");
  EXPECT_EQ(m.rfind("input[1] is an array: an input holding image objects takes strings", 0), 0u) << m;
  m = error_of(R"([{"colour": "red"}])");
  EXPECT_NE(m.find("input[0] is an object that is not an image input"), std::string::npos) << m;
  EXPECT_NE(m.find("{\"image\": URL}"), std::string::npos) << m;
  json many = json::array();
  for (int i = 0; i < 2049; ++i) many.push_back(json{{"image", "data:,x"}});
  Result<EmbeddingInputs> r = parse_embedding_input(many);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().message(), "input has 2049 elements; at most 2048 inputs are allowed per request.");
}

TEST(EmbeddingsImageInput, PreparedImagesAndTextsNameTheirPositions) {
  auto fe = clip_frontend();
  ASSERT_TRUE(fe);
  const std::string png = test::png_data_url(test::test_image(40, 30, 1));
  Result<EmbeddingInputs> in = parse_embedding_input(json{"a cat", json{{"image", png}}, "a dog"});
  ASSERT_TRUE(in.has_value()) << in.status().message();
  Result<std::vector<frontends::EmbedImage>> images = prepare_images(in.value(), *fe);
  ASSERT_TRUE(images.has_value()) << images.status().message();
  ASSERT_EQ(images->size(), 1u);
  EXPECT_EQ((*images)[0].index, 1u);
  EXPECT_TRUE(fe->check_image((*images)[0]).ok());
  Result<std::vector<std::vector<int32_t>>> ids = tokenize_inputs(in.value(), *fe, false);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(ids->size(), 2u);

  std::string many;
  for (int i = 0; i < 30; ++i) many += "cat ";
  Result<EmbeddingInputs> long_text = parse_embedding_input(json{json{{"image", png}}, "a", many});
  ASSERT_TRUE(long_text.has_value());
  Result<std::vector<std::vector<int32_t>>> refused = tokenize_inputs(long_text.value(), *fe, false);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.status().message().rfind("input[2] has 32 tokens", 0), 0u) << refused.status().message();
}

TEST(EmbeddingsImageInput, BadImagesAre400sNamingTheElement) {
  const std::string allowed = test::scratch_dir("embeddings_images_allowed");
  serving::Knobs knobs;
  knobs.set("allowed_local_media_dir", allowed);
  auto fe = clip_frontend(knobs);
  ASSERT_TRUE(fe);
  const std::string png = test::png_data_url(test::test_image(40, 30, 1));
  const std::vector<uint8_t> bytes = media::encode_png(test::test_image(20, 20, 2));
  std::ofstream(allowed + "/ok.png", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                             std::streamsize(bytes.size()));
  const std::string outside = test::scratch_dir("embeddings_images_outside") + "/secret.png";
  std::ofstream(outside, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                 std::streamsize(bytes.size()));

  const auto failure = [&](const json& input) {
    Result<EmbeddingInputs> in = parse_embedding_input(input);
    EXPECT_TRUE(in.has_value()) << in.status().message();
    if (!in.has_value()) return Status();
    Result<std::vector<frontends::EmbedImage>> images = prepare_images(in.value(), *fe);
    EXPECT_FALSE(images.has_value()) << input.dump();
    return images.status();
  };
  const std::string corrupt = "data:image/png;base64," + test::base64(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 40));
  Status s = failure(json{"a", json{{"image", png}}, "b", json{{"image", corrupt}}});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message().rfind("input[3] ", 0), 0u) << s.message();
  EXPECT_EQ(from_status(s, "input").status, 400);
  EXPECT_EQ(from_status(s, "input").param, "input");

  s = failure(json{json{{"image", "file://" + outside}}});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message().rfind("input[0] is a file outside the allowed directory", 0), 0u) << s.message();
  s = failure(json{{"image", "file://" + allowed + "/missing.png"}});  // one object: "input"
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message().rfind("input ", 0), 0u) << s.message();
  s = failure(json{"x", json{{"image", "http://example.com/cat.png"}}});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message().rfind("input[1] ", 0), 0u) << s.message();
  s = failure(json{"x", json{{"image", "data:image/png;base64,@@@"}}});
  EXPECT_EQ(s.message().rfind("input[1] ", 0), 0u) << s.message();

  Result<EmbeddingInputs> inside = parse_embedding_input(json{json{{"image", "file://" + allowed + "/ok.png"}}});
  ASSERT_TRUE(inside.has_value());
  EXPECT_TRUE(prepare_images(inside.value(), *fe).has_value());
}

// ---- the route over HTTP ----

struct Reply {
  int status = 0;
  json body;
};

Reply post(int port, const json& body) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
  http::request<http::string_body> req(http::verb::post, "/v1/embeddings", 11);
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.body() = body.dump();
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  beast::error_code ec;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  return {int(res.result_int()), json::parse(res.body(), nullptr, false)};
}

class EmbeddingsImageRoute : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::string> clip = test::dual_encoder_dir("clip");
    ASSERT_TRUE(clip.has_value()) << clip.status().to_string();
    serving::DeploymentConfig c;
    c.name = "clip";
    c.task = "embed";
    c.model = clip.value();
    ASSERT_TRUE(deployments_.add(c, serving::EngineKind(engines::encode::embed_engine_factory(),
                                                        engines::encode::embed_frontend_factory()))
                    .ok());
    serving::DeploymentConfig t;
    t.name = "text";
    t.task = "embed";
    t.model = test::FakeModelDir{}.write("embeddings_images_text");
    engines::encode::EncoderLoader fake = [](const EmbedFrontend& fe,
                                             ops::Precision) -> Result<std::unique_ptr<models::Encoder>> {
      return std::unique_ptr<models::Encoder>(std::make_unique<test::FakeEncoder>(16, fe.max_tokens()));
    };
    ASSERT_TRUE(deployments_
                    .add(t, serving::EngineKind(engines::encode::embed_engine_factory(fake),
                                                engines::encode::embed_frontend_factory()))
                    .ok());
    deployments_.start_all();
    ASSERT_TRUE(deployments_.wait_ready().ok());
    Router router;
    add_embeddings_routes(router, deployments_, media_pool_);
    HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.num_io_threads = 2;
    server_ = std::make_unique<HttpServer>(o, std::move(router));
    ASSERT_TRUE(server_->start().ok());
  }
  void TearDown() override {
    server_.reset();
    deployments_.stop_all();
  }
  int port() const { return server_->port(); }

  serving::MetricsRegistry metrics_;
  serving::DeploymentSet deployments_{metrics_};
  serving::WorkPool media_pool_{"media", 2, 16};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(EmbeddingsImageRoute, MixedInputsComeBackInOrderInOneSpace) {
  engines::encode::MediaCache::shared().clear();
  const std::string png = test::png_data_url(test::test_image(40, 30, 5));
  const json body = {{"model", "clip"},
                     {"input", {"a photo of a cat", {{"type", "image_url"}, {"image_url", {{"url", png}}}}, "a dog",
                                {{"image", png}}}}};
  const Reply r = post(port(), body);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  ASSERT_EQ(r.body["data"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const json& item = r.body["data"][i];
    EXPECT_EQ(item["index"], i);
    ASSERT_EQ(item["embedding"].size(), 48u);
    double n = 0;
    for (const json& x : item["embedding"]) n += x.get<double>() * x.get<double>();
    EXPECT_NEAR(n, 1.0, 1e-4) << i;
  }
  EXPECT_EQ(r.body["data"][1]["embedding"], r.body["data"][3]["embedding"]);  // the same image
  EXPECT_NE(r.body["data"][0]["embedding"], r.body["data"][2]["embedding"]);
  // <|startoftext|> a photo of a cat <|endoftext|>: 7 tokens; <|startoftext|> a dog <|endoftext|>: 4.
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 11);
  EXPECT_EQ(r.body["usage"]["total_tokens"], 11);
  EXPECT_EQ(r.body["prism"]["images"], 2);
  EXPECT_EQ(r.body["prism"]["dims"], 48);
  EXPECT_EQ(r.body["prism"]["normalized"], true);

  // Texts only: no "images" in the prism object.
  const Reply texts = post(port(), {{"model", "clip"}, {"input", "a cat"}});
  ASSERT_EQ(texts.status, 200) << texts.body.dump();
  EXPECT_FALSE(texts.body["prism"].contains("images"));
}

TEST_F(EmbeddingsImageRoute, ErrorsAre400sNamingTheInput) {
  const std::string png = test::png_data_url(test::test_image(20, 20, 6));
  Reply r = post(port(), {{"model", "clip"}, {"input", {"a", "b", "c", {{"image", "data:image/png;base64,AAAAAAAA"}}}}});
  ASSERT_EQ(r.status, 400) << r.body.dump();
  EXPECT_EQ(r.body["error"]["param"], "input");
  EXPECT_EQ(r.body["error"]["message"].get<std::string>().rfind("input[3] ", 0), 0u) << r.body.dump();

  r = post(port(), {{"model", "text"}, {"input", {"a", {{"image", png}}}}});
  ASSERT_EQ(r.status, 400) << r.body.dump();
  EXPECT_EQ(r.body["error"]["param"], "input");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("model 'text' does not accept image input"),
            std::string::npos)
      << r.body.dump();

  r = post(port(), {{"model", "clip"}, {"input", {{{"image", png}}}}, {"dimensions", 16}});
  ASSERT_EQ(r.status, 400) << r.body.dump();
  EXPECT_EQ(r.body["error"]["param"], "dimensions");
}

}  // namespace
}  // namespace prism::api
