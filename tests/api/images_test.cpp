// tests/api/images_test.cpp: POST /v1/images/generations. The pure steps: every field read and
// checked with errors naming the field (size, n, response_format url, output_compression on a
// PNG, partial_images without stream, a transparent background, the prism object's values and
// unknown keys), and the request resolved over the model's defaults. Then the route over HTTP
// on loopback against a fake image engine (no model: it paints each image one grey level from
// its seed and sends previews): n images of the asked size and format in seed order, the prism
// echo, and the stream's partial_image then completed events.
#include "api/routes/images.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/http_server.h"
#include "frontends/image_frontend.h"
#include "media/image.h"
#include "serving/deployment_set.h"
#include "test_util/image_model_dir.h"
#include "text/precompiled.h"

namespace prism::api {
namespace {

using frontends::ImageFrontend;
using frontends::ImageParams;
using nlohmann::json;

std::shared_ptr<const ImageFrontend> frontend() {
  static const std::shared_ptr<const ImageFrontend> fe = [] {
    serving::DeploymentConfig c;
    c.name = "image";
    c.task = "image";
    c.model = test::ImageModelDir{}.write("images_route_model");
    c.knobs.set("default_steps", int64_t(8));
    c.knobs.set("default_guidance_scale", 0.0);
    c.knobs.set("max_image_side", int64_t(256));
    auto loaded = ImageFrontend::load(c);
    EXPECT_TRUE(loaded.has_value()) << loaded.status().to_string();
    return loaded.value();
  }();
  return fe;
}

// The field an invalid body is refused for, and its message.
std::pair<std::string, std::string> refusal(const json& body) {
  ImageFields fields;
  std::optional<ApiError> e = read_image_fields(body.dump(), fields);
  if (!e) {
    ImageParams params;
    e = resolve_image_params(fields, *frontend(), params);
  }
  EXPECT_TRUE(e.has_value()) << body.dump();
  if (!e) return {};
  EXPECT_EQ(e->status, 400);
  return {e->param, e->message};
}

json base() { return {{"model", "image"}, {"prompt", "a red fox"}}; }
json with(json b, const std::string& key, json value) {
  b[key] = std::move(value);
  return b;
}
json prism(json options) { return with(base(), "prism", std::move(options)); }

TEST(ImagesFields, BadFieldsAreRefusedByName) {
  EXPECT_EQ(refusal({{"model", "image"}}).first, "prompt");
  EXPECT_EQ(refusal(with(base(), "prompt", "")).first, "prompt");
  EXPECT_EQ(refusal(with(base(), "size", "big")).first, "size");
  EXPECT_EQ(refusal(with(base(), "size", "100x-3")).first, "size");
  const auto [param, message] = refusal(with(base(), "size", "250x256"));
  EXPECT_EQ(param, "size");
  EXPECT_NE(message.find("multiples of 16"), std::string::npos) << message;
  EXPECT_NE(refusal(with(base(), "size", "512x512")).second.find("at most 256"), std::string::npos);
  EXPECT_EQ(refusal(with(base(), "n", 0)).first, "n");
  EXPECT_EQ(refusal(with(base(), "n", 5)).first, "n");  // the deployment's max_images: 4
  const auto url = refusal(with(base(), "response_format", "url"));
  EXPECT_EQ(url.first, "response_format");
  EXPECT_NE(url.second.find("b64_json"), std::string::npos);
  EXPECT_EQ(refusal(with(base(), "output_format", "gif")).first, "output_format");
  EXPECT_EQ(refusal(with(base(), "output_compression", 50)).first, "output_compression");  // a PNG
  EXPECT_EQ(refusal(with(base(), "partial_images", 2)).first, "partial_images");            // without stream
  EXPECT_EQ(refusal(with(with(base(), "stream", true), "partial_images", 4)).first, "partial_images");
  EXPECT_EQ(refusal(with(base(), "background", "transparent")).first, "background");
  EXPECT_EQ(refusal(prism({{"sampler", "ddim"}})).first, "prism.sampler");
  EXPECT_EQ(refusal(prism({{"steps", 0}})).first, "prism.steps");
  EXPECT_EQ(refusal(prism({{"seed", -1}})).first, "prism.seed");
  EXPECT_EQ(refusal(prism({{"cfg_interval", {0.7, 0.2}}})).first, "prism.cfg_interval");
  EXPECT_EQ(refusal(prism({{"cfg_interval", {0.0}}})).first, "prism.cfg_interval");
  EXPECT_EQ(refusal(prism({{"zero_init_steps", 9}})).first, "prism.zero_init_steps");  // more than the 8 steps
  EXPECT_EQ(refusal(prism({{"stepz", 3}})).first, "prism.stepz");
  EXPECT_EQ(refusal(prism({{"preview", "tiny"}})).first, "prism.preview");  // no tiny autoencoder configured
  EXPECT_EQ(refusal(with(base(), "prism", "fast")).first, "prism");
}

TEST(ImagesFields, AbsentFieldsTakeTheModelsDefaults) {
  ImageFields fields;
  ASSERT_FALSE(read_image_fields(base().dump(), fields));
  ImageParams p;
  ASSERT_FALSE(resolve_image_params(fields, *frontend(), p));
  EXPECT_EQ(p.width, 256);
  EXPECT_EQ(p.height, 256);
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.steps, 8);
  EXPECT_FLOAT_EQ(p.guidance_scale, 0.0f);
  EXPECT_FLOAT_EQ(p.cfg_start, 0.0f);
  EXPECT_FLOAT_EQ(p.cfg_stop, 1.0f);
  EXPECT_EQ(p.sampler, frontends::Sampler::euler);

  const json full = with(with(with(prism({{"seed", 42},
                                          {"steps", 20},
                                          {"guidance_scale", 4.5},
                                          {"negative_prompt", "blurry"},
                                          {"sampler", "unipc"},
                                          {"shift", 3.0},
                                          {"cfg_interval", {0.1, 0.6}},
                                          {"cfg_zero_star", true},
                                          {"zero_init_steps", 1},
                                          {"preview", "latent_rgb"}}),
                                    "size", "128x64"),
                               "n", 2),
                          "output_format", "webp");
  ASSERT_FALSE(read_image_fields(full.dump(), fields));
  ASSERT_FALSE(resolve_image_params(fields, *frontend(), p));
  EXPECT_EQ(p.width, 128);
  EXPECT_EQ(p.height, 64);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.seed, 42u);
  EXPECT_EQ(p.steps, 20);
  EXPECT_FLOAT_EQ(p.guidance_scale, 4.5f);
  EXPECT_EQ(p.sampler, frontends::Sampler::unipc);
  EXPECT_FLOAT_EQ(p.shift, 3.0f);
  EXPECT_FLOAT_EQ(p.cfg_start, 0.1f);
  EXPECT_FLOAT_EQ(p.cfg_stop, 0.6f);
  EXPECT_TRUE(p.cfg_zero_star);
  EXPECT_EQ(p.zero_init_steps, 1);
  EXPECT_EQ(p.preview, frontends::PreviewDecoder::latent_rgb);
  EXPECT_EQ(fields.format, ImageFileFormat::webp);
  EXPECT_EQ(fields.negative_prompt, "blurry");
  const json echo = image_params_json(p, fields.negative_prompt);
  EXPECT_EQ(echo["seed"], 42);
  EXPECT_EQ(echo["sampler"], "unipc");
  EXPECT_EQ(echo["negative_prompt"], "blurry");
  EXPECT_EQ(echo["cfg_interval"][1].get<float>(), 0.6f);
}

// ---- the route over HTTP, against a fake engine ----

// Grey level of image i of a request with seed s: what the fake engine paints.
uint8_t grey(uint64_t seed, int image) { return uint8_t((seed + uint64_t(image) * 40) % 256); }

media::Image painted(int width, int height, uint8_t level) {
  media::Image image{width, height, std::vector<uint8_t>(size_t(width) * height * 3, level)};
  return image;
}

class FakeImageEngine final : public serving::Engine {
 public:
  Status load() override { return Status(); }
  void run_batch(std::span<const serving::RequestPtr> batch) override {
    for (const serving::RequestPtr& r : batch) {
      auto* in = dynamic_cast<frontends::ImageInput*>(r->input.get());
      if (in == nullptr) {
        r->complete(invalid_argument("not an image request"));
        continue;
      }
      const ImageParams& p = in->params;
      for (int i = 0; i < p.n; ++i)
        for (int k = 0; k < p.partial_images; ++k) {
          auto preview = std::make_unique<frontends::ImagePreview>();
          preview->image_index = i;
          preview->partial_index = k;
          preview->step = (k + 1) * p.steps / (p.partial_images + 1);
          preview->image = painted(p.width, p.height, uint8_t(10 * (k + 1)));
          r->emit(std::move(preview));
        }
      auto out = std::make_unique<frontends::ImageOutput>();
      for (int i = 0; i < p.n; ++i) out->images.push_back(painted(p.width, p.height, grey(p.seed, i)));
      out->steps = p.steps;
      out->cond_passes = int64_t(p.steps) * p.n;
      r->complete(serving::PayloadPtr(std::move(out)));
    }
  }
};

struct Reply {
  int status = 0;
  std::string content_type, body;
  json json_body() const { return json::parse(body, nullptr, false); }
};

Reply post(int port, const json& body) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
  http::request<http::string_body> req(http::verb::post, "/v1/images/generations", 11);
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
  return {int(res.result_int()), std::string(res[http::field::content_type]), res.body()};
}

media::Image decoded(const std::string& b64) {
  Result<std::string> bytes = text::base64_decode(b64);
  EXPECT_TRUE(bytes.has_value());
  Result<media::Image> image = media::decode_image(
      std::span(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
  EXPECT_TRUE(image.has_value()) << image.status().to_string();
  return image.has_value() ? image.value() : media::Image{};
}

class ImagesRoute : public ::testing::Test {
 protected:
  void SetUp() override {
    serving::DeploymentConfig c;
    c.name = "image";
    c.task = "image";
    c.model = test::ImageModelDir{}.write("images_route_server");
    c.knobs.set("default_steps", int64_t(8));
    c.knobs.set("max_image_side", int64_t(256));
    serving::EngineKind kind(
        [](const serving::EngineContext&) -> Result<std::unique_ptr<serving::Engine>> {
          return std::unique_ptr<serving::Engine>(std::make_unique<FakeImageEngine>());
        },
        [](const serving::DeploymentConfig& config) -> Result<serving::FrontendPtr> {
          PRISM_ASSIGN_OR_RETURN(auto fe, ImageFrontend::load(config));
          return serving::FrontendPtr(std::move(fe));
        });
    ASSERT_TRUE(deployments_.add(c, kind).ok());
    deployments_.start_all();
    ASSERT_TRUE(deployments_.wait_ready().ok());
    Router router;
    add_images_routes(router, deployments_);
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
  std::unique_ptr<HttpServer> server_;
};

TEST_F(ImagesRoute, ImagesComeBackInSeedOrderWithTheEcho) {
  const Reply r = post(port(), with(with(prism({{"seed", 7}}), "n", 3), "size", "64x32"));
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = r.json_body();
  ASSERT_EQ(body["data"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const media::Image image = decoded(body["data"][i]["b64_json"]);
    EXPECT_EQ(image.width, 64);
    EXPECT_EQ(image.height, 32);
    ASSERT_FALSE(image.pixels.empty());
    EXPECT_EQ(image.pixels[0], grey(7, i));
  }
  EXPECT_EQ(body["size"], "64x32");
  EXPECT_EQ(body["output_format"], "png");
  EXPECT_EQ(body["prism"]["seed"], 7);
  EXPECT_EQ(body["prism"]["steps"], 8);
  EXPECT_EQ(body["prism"]["model_passes"]["cond"], 24);
  EXPECT_GT(body["usage"]["input_tokens"].get<int>(), 3);
  EXPECT_EQ(body["usage"]["output_tokens"], 3 * (64 / 16) * (32 / 16));
  EXPECT_TRUE(body.contains("created"));

  const Reply unseeded = post(port(), base());
  ASSERT_EQ(unseeded.status, 200);
  EXPECT_TRUE(unseeded.json_body()["prism"]["seed"].is_number_unsigned());  // the drawn seed, to reproduce it
}

TEST_F(ImagesRoute, JpegAndWebpAreEncodedAsAsked) {
  for (const char* format : {"jpeg", "webp"}) {
    const Reply r = post(port(), with(with(with(prism({{"seed", 100}}), "output_format", format), "size", "32x32"),
                                      "output_compression", 100));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json_body()["output_format"], format);
    const media::Image image = decoded(r.json_body()["data"][0]["b64_json"]);
    ASSERT_EQ(image.width, 32);
    EXPECT_NEAR(image.pixels[0], 100, 2) << format;
  }
}

TEST_F(ImagesRoute, StreamSendsPreviewsThenTheCompletedImages) {
  const Reply r = post(port(), with(with(with(prism({{"seed", 3}}), "stream", true), "partial_images", 2), "n", 2));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.content_type.find("text/event-stream"), std::string::npos);
  std::vector<json> events;
  std::vector<std::string> names;
  size_t start = 0;
  while (start < r.body.size()) {
    const size_t end = r.body.find("\n\n", start);
    const std::string block = r.body.substr(start, end - start);
    start = end == std::string::npos ? r.body.size() : end + 2;
    for (size_t line = 0; line < block.size();) {
      const size_t nl = std::min(block.find('\n', line), block.size());
      const std::string text = block.substr(line, nl - line);
      if (text.starts_with("event: ")) names.push_back(text.substr(7));
      if (text.starts_with("data: ")) events.push_back(json::parse(text.substr(6)));
      line = nl + 1;
    }
  }
  ASSERT_EQ(events.size(), 6u) << r.body.substr(0, 400);  // 2 previews x 2 images, 2 completed
  ASSERT_EQ(names.size(), 6u);
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(events[e]["type"], "image_generation.partial_image");
    EXPECT_EQ(names[e], "image_generation.partial_image");
    EXPECT_EQ(events[e]["partial_image_index"], e % 2);
    EXPECT_EQ(events[e]["prism"]["image_index"], e / 2);
    EXPECT_EQ(decoded(events[e]["b64_json"]).pixels[0], 10 * (e % 2 + 1));
  }
  for (int i = 0; i < 2; ++i) {
    const json& done = events[4 + i];
    EXPECT_EQ(done["type"], "image_generation.completed");
    EXPECT_EQ(done["size"], "256x256");
    EXPECT_EQ(decoded(done["b64_json"]).pixels[0], grey(3, i));
    EXPECT_GT(done["usage"]["total_tokens"].get<int>(), 0);
  }
}

TEST_F(ImagesRoute, ErrorsAreOpenAiShaped) {
  const Reply bad = post(port(), with(base(), "size", "100x100"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json_body()["error"]["param"], "size");
  const Reply unknown = post(port(), with(base(), "model", "nope"));
  EXPECT_EQ(unknown.status, 404);
}

}  // namespace
}  // namespace prism::api
