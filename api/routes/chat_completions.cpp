// api/routes/chat_completions.cpp: POST /v1/chat/completions. The handler reads the fields,
// renders and tokenizes the conversation with the deployment's GenerateFrontend, and hands one
// request (n choices) to a GenerateCall, which answers or streams.
#include "api/routes/chat_completions.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/json_fields.h"
#include "api/routes/deployment_call.h"
#include "api/routes/generate_call.h"
#include "api/routes/generate_request.h"
#include "engines/generate/generate_frontend.h"

namespace prism::api {

namespace {

namespace gen = engines::generate;
using ojson = nlohmann::ordered_json;

constexpr std::string_view kTask = "chat";

Status fail(ApiError& error, std::string_view param, std::string message) {
  error = from_status(invalid_argument(message), std::string(param));
  return invalid_argument(std::move(message));
}

// json_type_name for ordered_json: an empty value of the same type names it.
std::string type_of(const ojson& v) { return json_type_name(nlohmann::json(v.type())); }

// A message's content as the template gets it: a string. Text parts are joined with "\n".
Result<std::string> read_content(const ojson& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    return invalid_argument(name + " is " + type_of(content) + ": expected a string or an array of content parts.");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string part_name = name + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return invalid_argument(part_name + " is " + type_of(part) + ", not a content part object.");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return invalid_argument(part_name + ".type is required: a string.");
    if (*type != "text")
      return invalid_argument(part_name + " has type '" + type->get<std::string>() +
                              "': this model takes only text parts ({\"type\": \"text\", \"text\": ...}).");
    auto part_text = part.find("text");
    if (part_text == part.end() || !part_text->is_string())
      return invalid_argument(part_name + ".text is required: a string.");
    if (i > 0) text += '\n';
    text += part_text->get<std::string>();
  }
  return text;
}

Result<ojson> read_message(const ojson& m, size_t index) {
  const std::string name = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) return invalid_argument(name + " is " + type_of(m) + ", not a message object.");
  auto role = m.find("role");
  if (role == m.end() || !role->is_string()) return invalid_argument(name + ".role is required: a string.");
  const std::string r = role->get<std::string>();
  if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
    return invalid_argument(name + ".role '" + r +
                            "' is not one of 'system', 'developer', 'user', 'assistant', 'tool'.");
  ojson out = m;  // other keys (name, tool_calls, tool_call_id) go to the template as sent
  // NOTE: OpenAI's "developer" is the system prompt of newer models; templates know "system".
  if (r == "developer") out["role"] = "system";
  auto content = m.find("content");
  if (content == m.end() || content->is_null()) {
    if (r != "assistant") return invalid_argument(name + ".content is required for role '" + r + "'.");
    out["content"] = "";  // an assistant turn of tool calls only
    return out;
  }
  PRISM_ASSIGN_OR_RETURN(std::string text, read_content(*content, name + ".content"));
  out["content"] = std::move(text);
  return out;
}

}  // namespace

Result<text::ChatRequest> read_chat_request(const ojson& body, ApiError& error) {
  text::ChatRequest chat;
  chat.add_generation_prompt = true;
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) {
    error = invalid_field("messages", "this field is required.");
    error.message = "Missing required parameter: 'messages'.";
    error.code = "missing_required_parameter";
    return invalid_argument(error.message);
  }
  if (!messages->is_array())
    return fail(error, "messages", "messages is " + type_of(*messages) + ": expected an array of messages.");
  if (messages->empty())
    return fail(error, "messages", "messages is an empty array: at least one message is required.");
  for (size_t i = 0; i < messages->size(); ++i) {
    Result<ojson> m = read_message((*messages)[i], i);
    if (!m.has_value()) return fail(error, "messages", m.status().message());
    chat.messages.push_back(std::move(m).value());
  }

  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array())
      return fail(error, "tools", "tools is " + type_of(*tools) + ": expected an array of tools.");
    for (size_t i = 0; i < tools->size(); ++i)
      if (!(*tools)[i].is_object())
        return fail(error, "tools",
                    "tools[" + std::to_string(i) + "] is " + type_of((*tools)[i]) + ", not a tool object.");
    if (!tools->empty()) chat.tools = *tools;
  }
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    if (*choice == "none") {
      chat.tools.reset();
    } else if (*choice != "auto") {
      return fail(error, "tool_choice",
                  "tool_choice " + choice->dump() +
                      " is not supported: Prism passes tools to the chat template but does not parse or force tool "
                      "calls; use \"auto\" or \"none\".");
    }
  }
  if (auto format = body.find("response_format"); format != body.end() && !format->is_null()) {
    const bool text = format->is_object() && format->contains("type") && (*format)["type"] == "text";
    if (!text)
      return fail(error, "response_format",
                  "response_format " + format->dump() + " is not supported: only {\"type\": \"text\"} is.");
  }
  if (auto kwargs = body.find("chat_template_kwargs"); kwargs != body.end() && !kwargs->is_null()) {
    if (!kwargs->is_object())
      return fail(error, "chat_template_kwargs",
                  "chat_template_kwargs is " + type_of(*kwargs) + ": expected an object.");
    chat.extra = *kwargs;
  }
  return chat;
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
  Result<text::ChatRequest> chat = read_chat_request(body, error);
  if (!chat.has_value()) return (void)responder.send(error_response(error));

  Result<serving::Deployment*> d = find_deployment(deployments, model, kTask, error);
  if (!d.has_value()) return (void)responder.send(error_response(error));
  auto frontend = std::dynamic_pointer_cast<const gen::GenerateFrontend>(d.value()->frontend());
  if (frontend == nullptr)
    return (void)responder.send(error_response(not_ready("The model '" + model + "' is not ready yet.")));

  Result<std::vector<int32_t>> prompt = frontend->chat_prompt(chat.value());
  if (!prompt.has_value()) {
    const Status& s = prompt.status();
    if (s.code() == StatusCode::failed_precondition)  // no chat template
      return (void)responder.send(error_response(invalid_field(
          "model", "the model '" + model + "' has no chat template: send its prompts to /v1/completions.")));
    return (void)responder.send(error_response(from_status(s, "messages")));
  }
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.value().size());
  Result<std::unique_ptr<gen::GenerateInput>> input =
      build_generate_input(*frontend, std::move(prompt).value(), fields, "messages", error);
  if (!input.has_value()) return (void)responder.send(error_response(error));

  GenerateCallSpec spec;
  spec.header = make_reply_header(GenerateApi::chat, model, *d.value(), request.request_id, fields.include_usage);
  spec.n = fields.n;
  spec.stream = fields.stream;
  spec.logprobs = fields.logprobs;
  spec.echo = {""};
  spec.prompt_tokens = {prompt_tokens};
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
