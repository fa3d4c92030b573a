// api/routes/embeddings.cpp: POST /v1/embeddings. The handler parses and tokenizes on the I/O
// thread, prepares images on a media worker, queues checked token ids and pixel views on the
// deployment, and
// formats the vectors when the engine completes. Vectors are written by hand rather than through nlohmann::json, which
// would print each float widened to a double with 17 digits.
#include "api/routes/embeddings.h"

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>

#include "api/base64.h"
#include "api/errors.h"
#include "api/json_fields.h"
#include "api/routes/deployment_call.h"
#include "base/log.h"
#include "frontends/embed_payload.h"

namespace prism::api {

namespace {

constexpr std::string_view kTask = "embed";

std::string element(std::size_t i) { return "input[" + std::to_string(i) + "]"; }

// The accepted forms, for messages about elements that fit none.
std::string input_forms() {
  return "input must be a string, an array of strings, an array of token ids, or an array of arrays of token ids; "
         "image inputs (CLIP and SigLIP models) are objects among strings: {\"type\": \"image_url\", "
         "\"image_url\": {\"url\": URL}} or {\"image\": URL}";
}

// An image URL field: a non-empty string, or (image_url) an object {"url": string}.
Result<std::string> read_url(const nlohmann::json& v, const std::string& name, std::string_view field) {
  const nlohmann::json* url = &v;
  if (v.is_object()) {
    const auto it = v.find("url");
    if (it == v.end()) return invalid_argument(name + "." + std::string(field) + " has no \"url\".");
    url = &*it;
  }
  if (!url->is_string())
    return invalid_argument(name + "." + std::string(field) + " is " + json_type_name(*url) + ", not a URL string.");
  if (url->get_ref<const std::string&>().empty()) return invalid_argument(name + " has an empty image URL.");
  return url->get<std::string>();
}

// One object element: {"type": "image_url", "image_url": {"url"} | URL}, {"type": "image",
// "image": URL}, {"image": URL}, {"image_url": ...} → an image (is_image); {"type": "text",
// "text": ...} → a text.
Status read_object(const nlohmann::json& v, const std::string& name, std::string& out, bool& is_image) {
  const auto type = v.find("type");
  std::string kind;
  if (type != v.end()) {
    if (!type->is_string()) return invalid_argument(name + ".type is " + json_type_name(*type) + ", not a string.");
    kind = type->get<std::string>();
    if (kind != "image_url" && kind != "image" && kind != "text")
      return invalid_argument(name + " has type '" + kind + "'; an input object's type is \"image_url\" or \"text\".");
  } else if (v.contains("image_url")) {
    kind = "image_url";
  } else if (v.contains("image")) {
    kind = "image";
  } else {
    return invalid_argument(name + " is an object that is not an image input: " + input_forms() + ".");
  }
  if (kind == "text") {
    const auto text = v.find("text");
    if (text == v.end() || !text->is_string())
      return invalid_argument(name + " of type \"text\" needs a string \"text\".");
    if (text->get_ref<const std::string&>().empty()) return invalid_argument(name + ".text is an empty string.");
    out = text->get<std::string>();
    is_image = false;
    return {};
  }
  const auto field = v.find(kind);
  if (field == v.end()) return invalid_argument(name + " of type \"" + kind + "\" has no \"" + kind + "\".");
  PRISM_ASSIGN_OR_RETURN(out, read_url(*field, name, kind));
  is_image = true;
  return {};
}

// An array holding objects (or one object): strings and input objects, in any order.
Result<EmbeddingInputs> parse_mixed_input(const nlohmann::json& input) {
  EmbeddingInputs out;
  out.field = "input";
  out.scalar = input.is_object();
  const std::size_t n = out.scalar ? 1 : input.size();
  if (n > kMaxEmbeddingInputs)
    return invalid_argument("input has " + std::to_string(n) + " elements; at most " +
                            std::to_string(kMaxEmbeddingInputs) + " inputs are allowed per request.");
  for (std::size_t i = 0; i < n; ++i) {
    const nlohmann::json& v = out.scalar ? input : input[i];
    const std::string name = out.scalar ? "input" : element(i);
    if (v.is_string()) {
      if (v.get_ref<const std::string&>().empty()) return invalid_argument(name + " is an empty string.");
      out.texts.push_back(v.get<std::string>());
      continue;
    }
    if (!v.is_object())
      return invalid_argument(name + " is " + json_type_name(v) +
                              ": an input holding image objects takes strings and image objects besides them (" +
                              input_forms() + ").");
    std::string value;
    bool is_image = false;
    PRISM_RETURN_IF_ERROR(read_object(v, name, value, is_image));
    if (is_image) out.images.push_back({i, std::move(value)});
    else out.texts.push_back(std::move(value));
  }
  return out;
}

}  // namespace

std::vector<std::size_t> EmbeddingInputs::text_positions() const {
  std::vector<std::size_t> positions;
  const std::size_t texts = TextOrTokens::size();
  positions.reserve(texts);
  std::size_t next_image = 0;
  for (std::size_t p = 0; positions.size() < texts; ++p) {
    if (next_image < images.size() && images[next_image].index == p) {
      ++next_image;
      continue;
    }
    positions.push_back(p);
  }
  return positions;
}

Result<EmbeddingInputs> parse_embedding_input(const nlohmann::json& input) {
  bool has_object = input.is_object();
  if (input.is_array())
    for (const nlohmann::json& v : input) has_object = has_object || v.is_object();
  if (has_object) return parse_mixed_input(input);
  PRISM_ASSIGN_OR_RETURN(TextOrTokens parsed, parse_text_or_tokens(input, "input", "inputs", kMaxEmbeddingInputs));
  EmbeddingInputs out;
  static_cast<TextOrTokens&>(out) = std::move(parsed);
  return out;
}

Result<std::vector<std::vector<int32_t>>> tokenize_inputs(const EmbeddingInputs& inputs,
                                                          const frontends::EmbedFrontend& frontend,
                                                          bool truncate) {
  const std::size_t n = inputs.TextOrTokens::size();
  const std::vector<std::size_t> positions = inputs.text_positions();
  std::vector<std::vector<int32_t>> sequences;
  sequences.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    Result<std::vector<int32_t>> ids = inputs.tokens ? frontend.check_ids(inputs.token_ids[i], truncate)
                                                     : frontend.tokenize(inputs.texts[i], truncate);
    if (!ids.has_value())
      return Status(ids.status().code(), inputs.name(positions[i]) + " " + ids.status().message());
    sequences.push_back(std::move(ids).value());
  }
  return sequences;
}

Result<std::vector<frontends::EmbedImage>> prepare_images(const EmbeddingInputs& inputs,
                                                                const frontends::EmbedFrontend& frontend) {
  std::vector<frontends::EmbedImage> images;
  if (inputs.images.empty()) return images;
  if (!frontend.accepts_images())
    return failed_precondition("This model does not accept image input (" + inputs.name(inputs.images[0].index) +
                               " is an image); image inputs need a CLIP or SigLIP model.");
  images.reserve(inputs.images.size());
  for (const EmbeddingImage& in : inputs.images) {
    Result<frontends::EmbedImage> image = frontend.prepare_image_url(in.url);
    if (!image.has_value()) {
      // NOTE: a missing file, a refused host or a failed download is the request's fault
      // here (a 400 naming the element), not a missing model (404) or a busy server (503).
      const StatusCode code =
          image.status().code() == StatusCode::internal ? StatusCode::internal : StatusCode::invalid_argument;
      return Status(code, inputs.name(in.index) + " " + image.status().message());
    }
    image->index = in.index;
    images.push_back(std::move(image).value());
  }
  return images;
}

void append_json_float(std::string& out, float value) {
  if (!std::isfinite(value)) {  // JSON has no NaN or infinity
    out += "null";
    return;
  }
  std::array<char, 32> buf;
  // NOTE: to_chars without a precision is the shortest text that parses back to this float.
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  out.append(buf.data(), ec == std::errc() ? end : buf.data());
}

std::string base64_float32(std::span<const float> values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(values[i]);
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<uint8_t>((bits >> (8 * b)) & 0xff);  // little-endian
  }
  return base64_encode(bytes);
}

std::string embeddings_json(const EmbeddingsReply& reply) {
  const std::size_t dims = static_cast<std::size_t>(reply.dims);
  const std::size_t rows = dims == 0 ? 0 : reply.vectors.size() / dims;
  std::string out;
  out.reserve(128 + rows * (48 + (reply.base64 ? dims * 16 / 3 : dims * 12)));
  out += R"({"object":"list","data":[)";
  for (std::size_t r = 0; r < rows; ++r) {
    const std::span<const float> v = reply.vectors.subspan(r * dims, dims);
    out += r == 0 ? R"({"object":"embedding","index":)" : R"(,{"object":"embedding","index":)";
    out += std::to_string(r);
    out += R"(,"embedding":)";
    if (reply.base64) {
      out += '"';
      out += base64_float32(v);
      out += '"';
    } else {
      out += '[';
      for (std::size_t k = 0; k < dims; ++k) {
        if (k > 0) out += ',';
        append_json_float(out, v[k]);
      }
      out += ']';
    }
    out += '}';
  }
  const auto text = [](std::string_view s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  const std::string tokens = std::to_string(reply.prompt_tokens);
  out += R"(],"model":)" + text(reply.model);
  out += R"(,"usage":{"prompt_tokens":)" + tokens + R"(,"total_tokens":)" + tokens + "}";
  out += R"(,"prism":{"embedding_space":)" + text(reply.space_id) + R"(,"dims":)" + std::to_string(reply.dims) +
         R"(,"normalized":)" + (reply.normalized ? "true" : "false");
  if (reply.images > 0) out += R"(,"images":)" + std::to_string(reply.images);
  out += "}}";
  return out;
}

namespace {

// What the completion needs to answer, copied off the request.
struct ReplyShape {
  std::string model;
  bool base64 = false;
  int64_t prompt_tokens = 0;
  std::string space_id;
  bool normalized = false;
  int64_t images = 0;
};

void answer(Responder& responder, const ReplyShape& shape, Result<serving::PayloadPtr>& result) {
  if (!result.has_value()) {
    if (result.status().code() == StatusCode::cancelled) return;  // nobody is listening
    if (result.status().code() == StatusCode::internal)
      PRISM_LOG_ERROR("request {}: embeddings failed: {}", responder.request_id(), result.status().message());
    responder.send(error_response(completion_error(result.status())));
    return;
  }
  const auto* output = dynamic_cast<const frontends::EmbedOutput*>(result.value().get());
  if (output == nullptr) {
    PRISM_LOG_ERROR("request {}: the embed engine returned another payload type", responder.request_id());
    responder.send(error_response(server_error()));
    return;
  }
  EmbeddingsReply reply;
  reply.model = shape.model;
  reply.dims = output->dims;
  reply.vectors = output->vectors;
  reply.base64 = shape.base64;
  reply.prompt_tokens = shape.prompt_tokens;
  reply.space_id = shape.space_id;
  reply.normalized = shape.normalized;
  reply.images = shape.images;
  Response response = Response::json(200, embeddings_json(reply));
  response.headers.emplace_back("X-Prism-Embedding-Space", shape.space_id);
  responder.send(std::move(response));
}

// Prepares the request's images (fetch, decode, preprocess) into payload and submits it.
// On a media worker when the request has images, else on the I/O thread.
void submit_embeddings(serving::Deployment& deployment, std::unique_ptr<frontends::EmbedInput> payload,
                       const frontends::EmbedFrontend& frontend, const EmbeddingInputs& inputs, ReplyShape shape,
                       serving::Lane lane, Responder responder) {
  Result<std::vector<frontends::EmbedImage>> images = prepare_images(inputs, frontend);
  if (!images.has_value()) {
    if (images.status().code() == StatusCode::internal)
      PRISM_LOG_ERROR("request {}: preparing an image failed: {}", responder.request_id(), images.status().message());
    return (void)responder.send(error_response(from_status(images.status(), "input")));
  }
  shape.images = static_cast<int64_t>(images->size());
  payload->images = std::move(images).value();
  // An image costs the positions its tower runs, as a text costs its tokens.
  const int64_t cost = shape.prompt_tokens + shape.images * frontend.image_tokens();
  submit_or_refuse(
      deployment, std::move(payload),
      [responder, shape = std::move(shape)](Result<serving::PayloadPtr> result) mutable {
        answer(responder, shape, result);
      },
      cost, lane, responder);
}

// What the I/O thread read from a request with images, for a media worker.
struct EmbedJob {
  serving::Deployment* deployment;  // not owned; outlives the server
  std::shared_ptr<const frontends::EmbedFrontend> frontend;
  EmbeddingInputs inputs;
  std::unique_ptr<frontends::EmbedInput> payload;  // the texts' token ids
  ReplyShape shape;
  serving::Lane lane;
};

void post_embeddings(serving::DeploymentSet& deployments, serving::WorkPool& media_pool, const Request& request,
                     Responder responder) {
  JsonFields f(request.body);
  ReplyShape shape;
  shape.model = f.required_string("model");
  if (f.ok() && !f.has("input")) f.fail_missing("input");
  shape.base64 = f.optional_enum("encoding_format", {"float", "base64"}, "float") == "base64";
  const int64_t dims = f.optional_int("dimensions", 0, 1);
  (void)f.optional_string("user");  // accepted, as OpenAI does; Prism keeps no per-user state
  const bool truncate = f.optional_bool("truncate", false);
  const serving::Lane lane = read_priority(f);
  if (!f.ok()) return (void)responder.send(error_response(f.error()));
  Result<EmbeddingInputs> inputs = parse_embedding_input(f.json()["input"]);
  if (!inputs.has_value()) return (void)responder.send(error_response(from_status(inputs.status(), "input")));

  ApiError error;
  Result<serving::Deployment*> d = find_deployment(deployments, shape.model, kTask, error);
  if (!d.has_value()) return (void)responder.send(error_response(error));
  Result<std::shared_ptr<const frontends::EmbedFrontend>> typed =
      frontend_of<frontends::EmbedFrontend>(*d.value(), shape.model);
  if (!typed.has_value()) return (void)responder.send(error_response(completion_error(typed.status())));
  std::shared_ptr<const frontends::EmbedFrontend> frontend = std::move(typed).value();
  if (Status s = frontend->check_dimensions(dims); !s.ok())
    return (void)responder.send(error_response(from_status(s, "dimensions")));
  if (!inputs->images.empty() && !frontend->accepts_images())
    return (void)responder.send(error_response(
        invalid_field("input", "the model '" + shape.model + "' does not accept image input (" +
                                   inputs->name(inputs->images[0].index) +
                                   " is an image); image inputs need a CLIP or SigLIP model")));
  Result<std::vector<std::vector<int32_t>>> sequences = tokenize_inputs(inputs.value(), *frontend, truncate);
  if (!sequences.has_value())
    return (void)responder.send(error_response(from_status(sequences.status(), "input")));
  for (const std::vector<int32_t>& seq : sequences.value()) shape.prompt_tokens += static_cast<int64_t>(seq.size());
  shape.space_id = frontend->space_id();
  shape.normalized = frontend->normalize();
  auto payload = std::make_unique<frontends::EmbedInput>();
  payload->sequences = std::move(sequences).value();
  payload->dims = dims;
  // NOTE: image URLs are fetched (a remote host may answer slowly) and decoded on a media
  // worker, never on the I/O thread; a full worker queue is a 429.
  if (inputs->images.empty())
    return submit_embeddings(*d.value(), std::move(payload), *frontend, inputs.value(), std::move(shape), lane,
                             std::move(responder));
  auto job = std::make_shared<EmbedJob>(EmbedJob{d.value(), std::move(frontend), std::move(inputs).value(),
                                                 std::move(payload), std::move(shape), lane});
  post_or_refuse(media_pool, std::move(responder), "media preparation", [job](Responder r) {
    submit_embeddings(*job->deployment, std::move(job->payload), *job->frontend, job->inputs, std::move(job->shape),
                      job->lane, std::move(r));
  });
}

}  // namespace

void add_embeddings_routes(Router& router, serving::DeploymentSet& deployments, serving::WorkPool& media_pool) {
  serving::DeploymentSet* set = &deployments;
  serving::WorkPool* pool = &media_pool;
  router.add("POST", "/v1/embeddings", [set, pool](const Request& request, Responder responder) {
    post_embeddings(*set, *pool, request, std::move(responder));
  });
}

}  // namespace prism::api
