// api/routes/completions.cpp: POST /v1/completions. The handler reads the fields and the
// prompts, tokenizes them with the deployment's GenerateFrontend, and hands one request per
// prompt to a GenerateCall, which answers or streams.
#include "api/routes/completions.h"

#include <memory>
#include <utility>

#include "api/errors.h"
#include "api/json_fields.h"
#include "api/routes/deployment_call.h"
#include "api/routes/generate_call.h"
#include "api/routes/generate_request.h"
#include "frontends/generate_frontend.h"

namespace prism::api {

Result<CompletionPrompts> parse_completion_prompt(const nlohmann::json& prompt) {
  return parse_text_or_tokens(prompt, "prompt", "prompts", kMaxPrompts);
}

namespace {


constexpr std::string_view kTask = "chat";

// The fields only completions has: echo, best_of (== n), suffix (unsupported).
bool read_completion_fields(JsonFields& f, const GenerateFields& fields) {
  const bool echo = f.optional_bool("echo", false);
  const int64_t best_of = f.optional_int("best_of", fields.n, 1, kMaxChoices);
  if (f.ok() && f.has("best_of") && best_of != fields.n)
    f.fail("best_of", "must equal n (" + std::to_string(fields.n) + "): Prism returns every choice it generates.");
  const std::string suffix = f.optional_string("suffix");
  if (f.ok() && !suffix.empty()) f.fail("suffix", "is not supported: Prism does not fill in the middle.");
  return echo;
}

void post_completions(serving::DeploymentSet& deployments, const Request& request, Responder responder) {
  JsonFields f(request.body);
  const std::string model = f.required_string("model");
  if (f.ok() && !f.has("prompt")) f.fail_missing("prompt");
  const GenerateFields fields = read_generate_fields(f, GenerateApi::completions);
  const bool echo = read_completion_fields(f, fields);
  if (!f.ok()) return (void)responder.send(error_response(f.error()));
  Result<CompletionPrompts> prompts = parse_completion_prompt(f.json()["prompt"]);
  if (!prompts.has_value()) return (void)responder.send(error_response(from_status(prompts.status(), "prompt")));

  ApiError error;
  Result<serving::Deployment*> d = find_deployment(deployments, model, kTask, error);
  if (!d.has_value()) return (void)responder.send(error_response(error));
  Result<std::shared_ptr<const frontends::GenerateFrontend>> typed = frontend_of<frontends::GenerateFrontend>(*d.value(), model);
  if (!typed.has_value()) return (void)responder.send(error_response(completion_error(typed.status())));
  const std::shared_ptr<const frontends::GenerateFrontend> frontend = std::move(typed).value();

  GenerateCallSpec spec;
  std::vector<std::unique_ptr<frontends::GenerateInput>> inputs;
  for (std::size_t i = 0; i < prompts->size(); ++i) {
    std::vector<int32_t> ids;
    if (prompts->tokens) {
      Result<std::vector<int32_t>> checked = frontend->check_ids(prompts->token_ids[i]);
      if (!checked.has_value())
        return (void)responder.send(error_response(from_status(
            Status(checked.status().code(), prompts->name(i) + ": " + checked.status().message()), "prompt")));
      ids = std::move(checked).value();
    } else {
      ids = frontend->text_prompt(prompts->texts[i]);
    }
    std::string echo_text;
    if (echo) {
      if (!prompts->tokens) {
        echo_text = prompts->texts[i];
      } else if (Result<std::string> text = frontend->tokenizer().decode(ids); text.has_value()) {
        echo_text = std::move(text).value();
      }
    }
    spec.echo.push_back(std::move(echo_text));
    spec.prompt_tokens.push_back(static_cast<int64_t>(ids.size()));
    const std::string param = prompts->name(i);
    Result<std::unique_ptr<frontends::GenerateInput>> input =
        build_generate_input(*frontend, std::move(ids), fields, "prompt", error);
    if (!input.has_value()) {
      if (!prompts->scalar && error.code == "context_length_exceeded") error.message = param + ": " + error.message;
      return (void)responder.send(error_response(error));
    }
    inputs.push_back(std::move(input).value());
  }

  spec.header =
      make_reply_header(GenerateApi::completions, model, *d.value(), request.request_id, fields.include_usage);
  spec.n = fields.n;
  spec.stream = fields.stream;
  spec.logprobs = fields.logprobs;
  spec.token_text = [frontend](int32_t token) { return frontend->token_text(token); };
  spec.lane = fields.lane;
  spec.request_id = request.request_id;
  GenerateCall::run(*d.value(), std::move(responder), std::move(spec), std::move(inputs));
}

}  // namespace

void add_completions_routes(Router& router, serving::DeploymentSet& deployments) {
  serving::DeploymentSet* set = &deployments;
  router.add("POST", "/v1/completions", [set](const Request& request, Responder responder) {
    post_completions(*set, request, std::move(responder));
  });
}

}  // namespace prism::api
