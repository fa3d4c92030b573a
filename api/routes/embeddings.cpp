// api/routes/embeddings.cpp: POST /v1/embeddings. The handler parses and tokenizes on the
// I/O thread, queues checked token ids on the deployment, and formats the vectors when the
// engine completes. Vectors are written by hand rather than through nlohmann::json, which
// would print each float widened to a double with 17 digits.
#include "api/routes/embeddings.h"

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>

#include "api/errors.h"
#include "api/json_fields.h"
#include "api/routes/deployment_call.h"
#include "base/log.h"
#include "engines/encode/embed_payload.h"

namespace prism::api {

namespace {

constexpr std::string_view kTask = "embed";

}  // namespace

Result<EmbeddingInputs> parse_embedding_input(const nlohmann::json& input) {
  return parse_text_or_tokens(input, "input", "inputs", kMaxEmbeddingInputs);
}

Result<std::vector<std::vector<int32_t>>> tokenize_inputs(const EmbeddingInputs& inputs,
                                                          const engines::encode::EmbedFrontend& frontend,
                                                          bool truncate) {
  std::vector<std::vector<int32_t>> sequences;
  sequences.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Result<std::vector<int32_t>> ids = inputs.tokens ? frontend.check_ids(inputs.token_ids[i], truncate)
                                                     : frontend.tokenize(inputs.texts[i], truncate);
    if (!ids.has_value())
      return Status(ids.status().code(), inputs.name(i) + " " + ids.status().message());
    sequences.push_back(std::move(ids).value());
  }
  return sequences;
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
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(values.size() * 4, '\0');
  for (std::size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = std::bit_cast<uint32_t>(values[i]);
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>((bits >> (8 * b)) & 0xff);  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t n = static_cast<uint8_t>(bytes[i]) << 16 | static_cast<uint8_t>(bytes[i + 1]) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(n >> s) & 63];
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
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
         R"(,"normalized":)" + (reply.normalized ? "true" : "false") + "}}";
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
};

void answer(Responder& responder, const ReplyShape& shape, Result<serving::PayloadPtr>& result) {
  if (!result.has_value()) {
    if (result.status().code() == StatusCode::cancelled) return;  // nobody is listening
    if (result.status().code() == StatusCode::internal)
      PRISM_LOG_ERROR("request {}: embeddings failed: {}", responder.request_id(), result.status().message());
    responder.send(error_response(completion_error(result.status())));
    return;
  }
  const auto* output = dynamic_cast<const engines::encode::EmbedOutput*>(result.value().get());
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
  Response response = Response::json(200, embeddings_json(reply));
  response.headers.emplace_back("X-Prism-Embedding-Space", shape.space_id);
  responder.send(std::move(response));
}

void post_embeddings(serving::DeploymentSet& deployments, const Request& request, Responder responder) {
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
  auto frontend = std::dynamic_pointer_cast<const engines::encode::EmbedFrontend>(d.value()->frontend());
  if (frontend == nullptr)
    return (void)responder.send(error_response(not_ready("The model '" + shape.model + "' is not ready yet.")));
  if (Status s = frontend->check_dimensions(dims); !s.ok())
    return (void)responder.send(error_response(from_status(s, "dimensions")));
  Result<std::vector<std::vector<int32_t>>> sequences = tokenize_inputs(inputs.value(), *frontend, truncate);
  if (!sequences.has_value())
    return (void)responder.send(error_response(from_status(sequences.status(), "input")));

  for (const std::vector<int32_t>& s : sequences.value()) shape.prompt_tokens += static_cast<int64_t>(s.size());
  shape.space_id = frontend->space_id();
  shape.normalized = frontend->normalize();
  auto payload = std::make_unique<engines::encode::EmbedInput>();
  payload->sequences = std::move(sequences).value();
  payload->dims = dims;
  const int64_t cost = shape.prompt_tokens;
  submit_or_refuse(
      *d.value(), std::move(payload),
      [responder, shape = std::move(shape)](Result<serving::PayloadPtr> result) mutable {
        answer(responder, shape, result);
      },
      cost, lane, request, responder);
}

}  // namespace

void add_embeddings_routes(Router& router, serving::DeploymentSet& deployments) {
  serving::DeploymentSet* set = &deployments;
  router.add("POST", "/v1/embeddings", [set](const Request& request, Responder responder) {
    post_embeddings(*set, request, std::move(responder));
  });
}

}  // namespace prism::api
