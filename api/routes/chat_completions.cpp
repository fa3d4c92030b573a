// api/routes/chat_completions.cpp: POST /v1/chat/completions. The handler reads the fields,
// renders and tokenizes the conversation with the deployment's GenerateFrontend (a VLM's
// images and videos prepared on the way: chat_media.h), and hands one request (n choices) to
// a GenerateCall, which answers or streams.
#include "api/routes/chat_completions.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/json_fields.h"
#include "api/routes/chat_media.h"
#include "api/routes/deployment_call.h"
#include "api/routes/generate_call.h"
#include "api/routes/generate_request.h"
#include "base/log.h"
#include "engines/generate/generate_frontend.h"

namespace prism::api {

namespace {

namespace gen = engines::generate;
using ojson = nlohmann::ordered_json;

constexpr std::string_view kTask = "chat";

}  // namespace

Result<text::ChatRequest> read_chat_request(const ojson& body, ApiError& error) {
  return read_conversation(body, error, /*media=*/nullptr);
}

namespace {

void post_chat_completions(serving::DeploymentSet& deployments, const Request& request, Responder responder) {
  JsonFields f(request.body);
  const std::string model = f.required_string("model");
  if (f.ok() && !f.has("messages")) f.fail_missing("messages");
  const GenerateFields fields = read_generate_fields(f, GenerateApi::chat);
  if (!f.ok()) return (void)responder.send(error_response(f.error()));
  // A second parse that keeps key order: the template's tojson prints tools as sent.
  const ojson body = ojson::parse(request.body, nullptr, /*allow_exceptions=*/false);
  ApiError error;
  std::vector<MediaPart> media;
  Result<text::ChatRequest> chat = read_conversation(body, error, &media);
  if (!chat.has_value()) return (void)responder.send(error_response(error));

  Result<serving::Deployment*> d = find_deployment(deployments, model, kTask, error);
  if (!d.has_value()) return (void)responder.send(error_response(error));
  auto frontend = std::dynamic_pointer_cast<const gen::GenerateFrontend>(d.value()->frontend());
  if (frontend == nullptr)
    return (void)responder.send(error_response(not_ready("The model '" + model + "' is not ready yet.")));

  // NOTE: a VLM's media are fetched, decoded and preprocessed here, on the I/O thread.
  Result<ChatPrompt> prompt = build_chat_prompt(*frontend, model, body, chat.value(), media, error);
  if (!prompt.has_value()) {
    if (error.status >= 500)
      PRISM_LOG_ERROR("request {}: preparing the prompt failed: {}", request.request_id, prompt.status().message());
    return (void)responder.send(error_response(error));
  }
  const int64_t prompt_tokens = static_cast<int64_t>(prompt->ids.size());
  Result<std::unique_ptr<gen::GenerateInput>> input =
      build_generate_input(*frontend, std::move(prompt->ids), fields, "messages", error);
  if (!input.has_value()) return (void)responder.send(error_response(error));
  input.value()->media = std::move(prompt->media);

  GenerateCallSpec spec;
  spec.header = make_reply_header(GenerateApi::chat, model, *d.value(), request.request_id, fields.include_usage);
  spec.n = fields.n;
  spec.stream = fields.stream;
  spec.logprobs = fields.logprobs;
  spec.echo = {""};
  spec.prompt_tokens = {prompt_tokens};
  spec.image_tokens = prompt->image_tokens;
  spec.video_tokens = prompt->video_tokens;
  spec.token_text = [frontend](int32_t token) { return frontend->token_text(token); };
  spec.lane = fields.lane;
  spec.request_id = request.request_id;
  std::vector<std::unique_ptr<gen::GenerateInput>> inputs;
  inputs.push_back(std::move(input).value());
  GenerateCall::run(*d.value(), std::move(responder), std::move(spec), std::move(inputs));
}

}  // namespace

void add_chat_completions_routes(Router& router, serving::DeploymentSet& deployments) {
  serving::DeploymentSet* set = &deployments;
  router.add("POST", "/v1/chat/completions", [set](const Request& request, Responder responder) {
    post_chat_completions(*set, request, std::move(responder));
  });
}

}  // namespace prism::api
