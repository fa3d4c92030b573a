#include "api/routes/images.h"

#include <charconv>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "api/base64.h"
#include "api/json_fields.h"
#include "api/routes/deployment_call.h"
#include "api/sse.h"
#include "media/image.h"

namespace prism::api {
namespace {

using frontends::ImageParams;
using frontends::PreviewDecoder;
using frontends::Sampler;
using nlohmann::json;

constexpr std::string_view kTask = "image";

std::string_view format_name(ImageFileFormat f) {
  switch (f) {
    case ImageFileFormat::png: return "png";
    case ImageFileFormat::jpeg: return "jpeg";
    case ImageFileFormat::webp: return "webp";
  }
  return "png";
}

// "WxH" with both parts positive decimal integers; nullopt otherwise.
std::optional<std::pair<int, int>> parse_size(std::string_view s) {
  const size_t x = s.find('x');
  if (x == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view part) -> std::optional<int> {
    int v = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || v <= 0) return std::nullopt;
    return v;
  };
  const auto w = number(s.substr(0, x)), h = number(s.substr(x + 1));
  if (!w || !h) return std::nullopt;
  return std::make_pair(*w, *h);
}

// The prism object's fields (prefix "prism.").
std::optional<ApiError> read_prism_fields(const json& object, ImageFields& out) {
  if (!object.is_object()) return invalid_field("prism", std::string("expected an object, got ") + json_type_name(object) + ".");
  static const std::vector<std::string_view> kKnown = {
      "seed", "steps", "guidance_scale", "negative_prompt", "sampler", "shift", "cfg_interval", "cfg_truncation",
      "cfg_normalization", "cfg_zero_star", "zero_init_steps", "guidance_rescale", "preview"};
  for (const auto& [key, value] : object.items())
    if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end())
      return invalid_field("prism." + key, "is not a Prism option of this route (known: seed, steps, guidance_scale, "
                                      "negative_prompt, sampler, shift, cfg_interval, cfg_truncation, "
                                      "cfg_normalization, cfg_zero_star, zero_init_steps, guidance_rescale, preview).");
  JsonFields f(object, "prism.");
  if (f.has("seed")) out.seed = uint64_t(f.required_int("seed", 0, std::numeric_limits<int64_t>::max()));
  if (f.has("steps")) out.steps = int(f.required_int("steps", 1, 1000));
  if (f.has("zero_init_steps")) out.zero_init_steps = int(f.required_int("zero_init_steps", 0, 1000));
  auto number = [&](const char* name, double lo, double hi, std::optional<float>& slot) {
    if (f.has(name)) slot = float(f.optional_number(name, 0, lo, hi));
  };
  number("guidance_scale", 0, 100, out.guidance_scale);
  number("shift", 0.01, 100, out.shift);
  number("cfg_truncation", 0, 1, out.cfg_truncation);
  number("guidance_rescale", 0, 1, out.guidance_rescale);
  if (f.has("cfg_normalization")) out.cfg_normalization = f.optional_bool("cfg_normalization", false);
  if (f.has("cfg_zero_star")) out.cfg_zero_star = f.optional_bool("cfg_zero_star", false);
  out.negative_prompt = f.optional_string("negative_prompt");
  if (f.has("sampler"))
    out.sampler = f.optional_enum("sampler", {"euler", "unipc"}, "euler") == "unipc" ? Sampler::unipc : Sampler::euler;
  if (f.has("preview"))
    out.preview = f.optional_enum("preview", {"latent_rgb", "tiny"}, "latent_rgb") == "tiny" ? PreviewDecoder::tiny
                                                                                          : PreviewDecoder::latent_rgb;
  if (f.ok() && f.has("cfg_interval")) {
    const json& v = object["cfg_interval"];
    if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number() || v[0].get<double>() < 0 ||
        v[1].get<double>() > 1 || v[0].get<double>() > v[1].get<double>())
      f.fail("cfg_interval", "must be [start, stop], fractions of the steps with 0 <= start <= stop <= 1.");
    else
      out.cfg_start = v[0].get<float>(), out.cfg_stop = v[1].get<float>();
  }
  if (!f.ok()) return f.error();
  return std::nullopt;
}

std::string image_event(std::string_view type, const std::string& b64, const ImageFields& fields,
                        const ImageParams& params, std::optional<int> partial_index, const json& usage,
                        int image_index) {
  json e = {{"type", type},
            {"b64_json", b64},
            {"created_at", std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count()},
            {"size", std::to_string(params.width) + "x" + std::to_string(params.height)},
            {"quality", fields.quality},
            {"background", "opaque"},
            {"output_format", format_name(fields.format)}};
  if (partial_index) e["partial_image_index"] = *partial_index;
  if (!usage.is_null()) e["usage"] = usage;
  e["prism"] = {{"image_index", image_index}};
  return e.dump();
}

// One client call: its request's previews and result, turned into the reply.
// Thread-safe: partials and the completion arrive on the replica thread, cancellation on I/O threads.
class ImageCall {
 public:
  ImageCall(Responder responder, ImageFields fields, ImageParams params, int64_t prompt_tokens, int64_t image_tokens)
      : responder_(std::move(responder)),
        fields_(std::move(fields)),
        params_(params),
        prompt_tokens_(prompt_tokens),
        image_tokens_(image_tokens) {}

  void on_partial(serving::PayloadPtr chunk) {
    auto* preview = dynamic_cast<frontends::ImagePreview*>(chunk.get());
    if (preview == nullptr || !fields_.stream) return;
    const std::string b64 = encode_image_b64(preview->image, fields_.format, fields_.compression);
    std::lock_guard lock(mu_);
    start_stream_locked();
    stream_.write(sse_event(image_event("image_generation.partial_image", b64, fields_, params_,
                                        preview->partial_index, json(), preview->image_index),
                            "image_generation.partial_image"));
  }

  void on_complete(Result<serving::PayloadPtr> result) {
    if (!result.has_value()) {
      if (result.status().code() == StatusCode::cancelled) return;  // nobody is left to answer
      std::lock_guard lock(mu_);
      if (!started_) return (void)responder_.send(error_response(completion_error(result.status())));
      stream_.write(sse_event(error_json(completion_error(result.status())), "error"));
      return stream_.close();
    }
    auto* output = dynamic_cast<frontends::ImageOutput*>(result->get());
    if (output == nullptr)
      return (void)responder_.send(error_response(from_status(internal_error("image engine returned no images"))));
    std::vector<std::string> images;
    for (const media::Image& image : output->images)
      images.push_back(encode_image_b64(image, fields_.format, fields_.compression));
    const json usage = {{"input_tokens", prompt_tokens_},
                        {"input_tokens_details", {{"text_tokens", prompt_tokens_}, {"image_tokens", 0}}},
                        {"output_tokens", image_tokens_ * int64_t(images.size())},
                        {"total_tokens", prompt_tokens_ + image_tokens_ * int64_t(images.size())}};
    json prism = image_params_json(params_, fields_.negative_prompt);
    prism["model_passes"] = {{"cond", output->cond_passes}, {"uncond", output->uncond_passes}};
    std::lock_guard lock(mu_);
    if (fields_.stream) {
      start_stream_locked();
      for (size_t i = 0; i < images.size(); ++i)
        stream_.write(sse_event(image_event("image_generation.completed", images[i], fields_, params_, std::nullopt,
                                            usage, int(i)),
                                "image_generation.completed"));
      return stream_.close();
    }
    json body = {{"created", std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count()},
                 {"data", json::array()},
                 {"background", "opaque"},
                 {"output_format", format_name(fields_.format)},
                 {"quality", fields_.quality},
                 {"size", std::to_string(params_.width) + "x" + std::to_string(params_.height)},
                 {"usage", usage},
                 {"prism", prism}};
    for (std::string& b64 : images) body["data"].push_back({{"b64_json", std::move(b64)}});
    responder_.send(Response::json(200, body.dump()));
  }

 private:
  void start_stream_locked() {
    if (started_) return;
    started_ = true;
    stream_ = start_sse(responder_);
  }

  Responder responder_;
  const ImageFields fields_;
  const ImageParams params_;
  const int64_t prompt_tokens_;
  const int64_t image_tokens_;  // latent tokens of one image (usage's output_tokens)
  std::mutex mu_;
  bool started_ = false;  // guarded by mu_
  StreamWriter stream_;   // guarded by mu_
};

void post_images(serving::DeploymentSet& deployments, const Request& request, Responder responder) {
  ImageFields fields;
  if (auto error = read_image_fields(request.body, fields)) return (void)responder.send(error_response(*error));

  ApiError error;
  Result<serving::Deployment*> d = find_deployment(deployments, fields.model, kTask, error);
  if (!d.has_value()) return (void)responder.send(error_response(error));
  auto typed = frontend_of<frontends::ImageFrontend>(*d.value(), fields.model);
  if (!typed.has_value()) return (void)responder.send(error_response(completion_error(typed.status())));
  const frontends::ImageFrontend& frontend = **typed;

  auto input = std::make_unique<frontends::ImageInput>();
  if (auto bad = resolve_image_params(fields, frontend, input->params)) return (void)responder.send(error_response(*bad));
  Result<std::vector<int32_t>> prompt = frontend.prompt_tokens(fields.prompt);
  if (!prompt.has_value()) return (void)responder.send(error_response(from_status(prompt.status(), "prompt")));
  Result<std::vector<int32_t>> negative = frontend.prompt_tokens(fields.negative_prompt);
  if (!negative.has_value())
    return (void)responder.send(error_response(from_status(negative.status(), "prism.negative_prompt")));
  input->prompt_tokens = std::move(prompt).value();
  input->negative_tokens = std::move(negative).value();
  const int64_t prompt_tokens = int64_t(input->prompt_tokens.size());
  const int m = frontend.size_multiple();
  const int64_t image_tokens = int64_t(input->params.width / m) * (input->params.height / m);
  const int64_t cost = image_tokens * input->params.n;  // batching cost: the latent tokens of a pass

  auto call = std::make_shared<ImageCall>(responder, fields, input->params, prompt_tokens, image_tokens);
  serving::RequestPtr r = serving::make_request(std::move(input), [call](Result<serving::PayloadPtr> result) {
    call->on_complete(std::move(result));
  });
  if (fields.stream) r->on_partial = [call](serving::PayloadPtr chunk) { call->on_partial(std::move(chunk)); };
  r->cost_tokens = std::max<int64_t>(1, cost);
  r->lane = fields.lane;
  r->request_id = responder.request_id();
  if (auto refused = submit_to(*d.value(), r)) return (void)responder.send(error_response(*refused));
  cancel_on_disconnect(responder, r);
}

}  // namespace

std::optional<ApiError> read_image_fields(std::string_view body, ImageFields& out) {
  out = ImageFields{};
  JsonFields f(body);
  out.model = f.required_string("model");
  if (f.ok() && !f.has("prompt")) f.fail_missing("prompt");
  out.prompt = f.required_string("prompt");
  if (f.ok() && out.prompt.empty()) f.fail("prompt", "must not be empty.");
  if (f.has("n")) out.n = int(f.required_int("n", 1, 10));
  const std::string size = f.optional_string("size", "auto");
  if (f.ok() && size != "auto") {
    if (auto wh = parse_size(size)) {
      out.width = wh->first;
      out.height = wh->second;
    } else {
      f.fail("size", "must be \"auto\" or \"WIDTHxHEIGHT\" in pixels, such as \"1024x1024\" (got \"" + size + "\").");
    }
  }
  if (f.ok() && f.has("response_format") && f.optional_string("response_format") == "url")
    f.fail("response_format", "\"url\" is not supported: Prism keeps no image files to link to. Use \"b64_json\".");
  (void)f.optional_enum("response_format", {"b64_json"}, "b64_json");
  const std::string format = f.optional_enum("output_format", {"png", "jpeg", "webp"}, "png");
  out.format = format == "jpeg" ? ImageFileFormat::jpeg : format == "webp" ? ImageFileFormat::webp : ImageFileFormat::png;
  out.compression = int(f.optional_int("output_compression", 100, 0, 100));
  if (f.ok() && f.has("output_compression") && out.format == ImageFileFormat::png)
    f.fail("output_compression", "applies to output_format \"jpeg\" or \"webp\" only.");
  out.quality = f.optional_enum("quality", {"auto", "low", "medium", "high", "standard", "hd"}, "auto");
  out.background = f.optional_enum("background", {"auto", "opaque", "transparent"}, "auto");
  if (f.ok() && out.background == "transparent")
    f.fail("background", "\"transparent\" is not supported: the model generates opaque RGB images.");
  (void)f.optional_string("user");  // accepted, as OpenAI does; Prism keeps no per-user state
  (void)f.optional_enum("moderation", {"auto", "low"}, "auto");
  (void)f.optional_enum("style", {"vivid", "natural"}, "vivid");
  out.lane = read_priority(f);
  out.stream = f.optional_bool("stream", false);
  out.partial_images = int(f.optional_int("partial_images", 0, 0, 3));
  if (f.ok() && out.partial_images > 0 && !out.stream)
    f.fail("partial_images", "previews are streamed: set \"stream\": true to receive them.");
  if (!f.ok()) return f.error();
  if (f.has("prism")) return read_prism_fields(f.json()["prism"], out);
  return std::nullopt;
}

std::optional<ApiError> resolve_image_params(const ImageFields& fields, const frontends::ImageFrontend& frontend,
                                             ImageParams& out) {
  out = frontend.defaults();
  if (fields.width) {
    out.width = *fields.width;
    out.height = *fields.height;
  }
  if (Status s = frontend.check_size(out.width, out.height); !s.ok()) return invalid_field("size", s.message());
  out.n = fields.n.value_or(1);
  if (out.n > frontend.max_images())
    return invalid_field("n", "must be at most " + std::to_string(frontend.max_images()) + " for this deployment.");
  out.steps = fields.steps.value_or(out.steps);
  out.guidance_scale = fields.guidance_scale.value_or(out.guidance_scale);
  out.cfg_start = fields.cfg_start.value_or(out.cfg_start);
  out.cfg_stop = fields.cfg_stop.value_or(out.cfg_stop);
  out.cfg_truncation = fields.cfg_truncation.value_or(out.cfg_truncation);
  out.cfg_normalization = fields.cfg_normalization.value_or(out.cfg_normalization);
  out.cfg_zero_star = fields.cfg_zero_star.value_or(out.cfg_zero_star);
  out.zero_init_steps = fields.zero_init_steps.value_or(out.zero_init_steps);
  if (out.zero_init_steps > out.steps)
    return invalid_field("prism.zero_init_steps", "must be at most the number of steps (" + std::to_string(out.steps) + ").");
  out.guidance_rescale = fields.guidance_rescale.value_or(out.guidance_rescale);
  out.sampler = fields.sampler.value_or(out.sampler);
  out.shift = fields.shift.value_or(out.shift);
  out.preview = fields.preview.value_or(out.preview);
  if (out.preview == PreviewDecoder::tiny && frontend.tiny_autoencoder().empty())
    return invalid_field("prism.preview", "\"tiny\" needs a tiny autoencoder for this model's latents (the "
                                          "deployment's tiny_autoencoder knob); use \"latent_rgb\".");
  out.partial_images = fields.partial_images;
  if (fields.seed) {
    out.seed = *fields.seed;
  } else {
    std::random_device rd;
    out.seed = (uint64_t(rd()) << 31 ^ rd()) & uint64_t(std::numeric_limits<int64_t>::max());
  }
  return std::nullopt;
}

json image_params_json(const ImageParams& p, std::string_view negative_prompt) {
  return {{"seed", p.seed},
          {"steps", p.steps},
          {"guidance_scale", p.guidance_scale},
          {"negative_prompt", negative_prompt},
          {"sampler", p.sampler == Sampler::unipc ? "unipc" : "euler"},
          {"shift", p.shift == 0.0f ? json(nullptr) : json(p.shift)},
          {"cfg_interval", {p.cfg_start, p.cfg_stop}},
          {"cfg_truncation", p.cfg_truncation},
          {"cfg_normalization", p.cfg_normalization},
          {"cfg_zero_star", p.cfg_zero_star},
          {"zero_init_steps", p.zero_init_steps},
          {"guidance_rescale", p.guidance_rescale},
          {"preview", p.preview == PreviewDecoder::latent_rgb ? "latent_rgb" : "tiny"}};
}

std::string encode_image_b64(const media::Image& image, ImageFileFormat format, int compression) {
  switch (format) {
    case ImageFileFormat::jpeg: return base64_encode(media::encode_jpeg(image, compression));
    case ImageFileFormat::webp: return base64_encode(media::encode_webp(image, compression));
    case ImageFileFormat::png: break;
  }
  return base64_encode(media::encode_png(image));
}

void add_images_routes(Router& router, serving::DeploymentSet& deployments) {
  serving::DeploymentSet* set = &deployments;
  router.add("POST", "/v1/images/generations", [set](const Request& request, Responder responder) {
    post_images(*set, request, std::move(responder));
  });
}

}  // namespace prism::api
