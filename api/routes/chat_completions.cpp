// api/routes/chat_completions.cpp: POST /v1/chat/completions. The handler reads the fields,
// renders and tokenizes the conversation with the deployment's GenerateFrontend (a VLM's
// images and videos prepared on the way, on a media worker: chat_media.h), and hands one
// request (n choices) to a GenerateCall, which answers or streams.
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
#include "frontends/generate_frontend.h"

namespace prism::api {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kTask = "chat";

}  // namespace

Result<text::ChatRequest> read_chat_request(const ojson& body, ApiError& error) {
  return read_conversation(body, error, /*media=*/nullptr);
}

namespace {

// What the I/O thread read from a request, for the rest of its preparation.
struct ChatJob {
  std::string model;
  std::string request_id;
  GenerateFields fields;
  ojson body;
  text::ChatRequest chat;
  std::vector<MediaPart> media;
  serving::Deployment* deployment = nullptr;  // not owned; outlives the server
  std::shared_ptr<const frontends::GenerateFrontend> frontend;
};

// Renders and tokenizes the conversation (fetching, decoding and preprocessing its media), then
// hands the request to a GenerateCall. On a media worker when the request has media, else on
// the I/O thread.
void prepare_and_run(ChatJob job, Responder responder) {
  ApiError error;
  Result<ChatPrompt> prompt = build_chat_prompt(*job.frontend, job.model, job.body, job.chat, job.media, error);
  if (!prompt.has_value()) {
    if (error.status >= 500)
      PRISM_LOG_ERROR("request {}: preparing the prompt failed: {}", job.request_id, prompt.status().message());
    return (void)responder.send(error_response(error));
  }
  const int64_t prompt_tokens = static_cast<int64_t>(prompt->ids.size());
  Result<std::unique_ptr<frontends::GenerateInput>> input =
      build_generate_input(*job.frontend, std::move(prompt->ids), job.fields, "messages", error);
  if (!input.has_value()) return (void)responder.send(error_response(error));
  input.value()->media = std::move(prompt->media);

  const GenerateFields& fields = job.fields;
  GenerateCallSpec spec;
  spec.header = make_reply_header(GenerateApi::chat, job.model, *job.deployment, job.request_id, fields.include_usage);
  spec.n = fields.n;
  spec.stream = fields.stream;
  spec.logprobs = fields.logprobs;
  spec.echo = {""};
  spec.prompt_tokens = {prompt_tokens};
  spec.image_tokens = prompt->image_tokens;
  spec.video_tokens = prompt->video_tokens;
  spec.token_text = [frontend = job.frontend](int32_t token) { return frontend->token_text(token); };
  spec.lane = fields.lane;
  spec.request_id = job.request_id;
  std::vector<std::unique_ptr<frontends::GenerateInput>> inputs;
  inputs.push_back(std::move(input).value());
  GenerateCall::run(*job.deployment, std::move(responder), std::move(spec), std::move(inputs));
}

void post_chat_completions(serving::DeploymentSet& deployments, serving::WorkPool& media_pool, const Request& request,
                           Responder responder) {
  JsonFields f(request.body);
  ChatJob job;
  job.model = f.required_string("model");
  if (f.ok() && !f.has("messages")) f.fail_missing("messages");
  job.fields = read_generate_fields(f, GenerateApi::chat);
  if (!f.ok()) return (void)responder.send(error_response(f.error()));
  // A second parse that keeps key order: the template's tojson prints tools as sent.
  job.body = ojson::parse(request.body, nullptr, /*allow_exceptions=*/false);
  ApiError error;
  Result<text::ChatRequest> chat = read_conversation(job.body, error, &job.media);
  if (!chat.has_value()) return (void)responder.send(error_response(error));
  job.chat = std::move(chat).value();

  Result<serving::Deployment*> d = find_deployment(deployments, job.model, kTask, error);
  if (!d.has_value()) return (void)responder.send(error_response(error));
  job.deployment = d.value();
  Result<std::shared_ptr<const frontends::GenerateFrontend>> frontend =
      frontend_of<frontends::GenerateFrontend>(*job.deployment, job.model);
  if (!frontend.has_value()) return (void)responder.send(error_response(completion_error(frontend.status())));
  job.frontend = std::move(frontend).value();
  job.request_id = request.request_id;

  // NOTE: media are fetched (a remote host may answer slowly), decoded and preprocessed on a
  // media worker, never on the I/O thread; a full worker queue is a 429.
  if (job.media.empty()) return prepare_and_run(std::move(job), std::move(responder));
  auto shared_job = std::make_shared<ChatJob>(std::move(job));
  post_or_refuse(media_pool, std::move(responder), "media preparation",
                 [shared_job](Responder r) { prepare_and_run(std::move(*shared_job), std::move(r)); });
}

}  // namespace

void add_chat_completions_routes(Router& router, serving::DeploymentSet& deployments, serving::WorkPool& media_pool) {
  serving::DeploymentSet* set = &deployments;
  serving::WorkPool* pool = &media_pool;
  router.add("POST", "/v1/chat/completions", [set, pool](const Request& request, Responder responder) {
    post_chat_completions(*set, *pool, request, std::move(responder));
  });
}

}  // namespace prism::api
