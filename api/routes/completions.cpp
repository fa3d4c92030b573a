// api/routes/completions.cpp: POST /v1/completions. The handler reads the fields and the
// prompts, tokenizes them with the deployment's GenerateFrontend, and hands one request per
// prompt to a GenerateCall, which answers or streams.
#include "api/routes/completions.h"

#include <limits>
#include <memory>
#include <utility>

#include "api/errors.h"
#include "api/json_fields.h"
#include "api/routes/deployment_call.h"
#include "api/routes/generate_call.h"
#include "api/routes/generate_request.h"
#include "engines/generate/generate_frontend.h"

namespace prism::api {

namespace {

namespace gen = engines::generate;

constexpr std::string_view kTask = "chat";
constexpr std::string_view kForms =
    "prompt must be a string, an array of strings, an array of token ids, or an array of arrays of token ids";

std::string at(std::string_view base, std::size_t i) { return std::string(base) + "[" + std::to_string(i) + "]"; }

Result<std::vector<int64_t>> read_token_array(const nlohmann::json& array, const std::string& name) {
  if (array.empty()) return invalid_argument(name + " is an empty token array.");
  std::vector<int64_t> ids(array.size());
  for (std::size_t j = 0; j < array.size(); ++j) {
    const nlohmann::json& v = array[j];
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return invalid_argument(at(name, j) + " is not a token id: " + v.dump() + " is out of range.");
    if (!v.is_number_integer())
      return invalid_argument(at(name, j) + " is " + (v.is_number() ? v.dump() : std::string(json_type_name(v))) +
                              ", not an integer token id.");
    ids[j] = v.get<int64_t>();
  }
  return ids;
}

Status mixed_forms(const nlohmann::json& prompt, std::size_t i) {
  return invalid_argument(at("prompt", i) + " is " + json_type_name(prompt[i]) + " but prompt[0] is " +
                          json_type_name(prompt[0]) + ": every element of prompt must have the same form (" +
                          std::string(kForms) + ").");
}

}  // namespace

std::string CompletionPrompts::name(std::size_t i) const { return scalar ? std::string("prompt") : at("prompt", i); }

Result<CompletionPrompts> parse_completion_prompt(const nlohmann::json& prompt) {
  CompletionPrompts out;
  if (prompt.is_string()) {
    if (prompt.get_ref<const std::string&>().empty()) return invalid_argument("prompt is an empty string.");
    out.scalar = true;
    out.texts.push_back(prompt.get<std::string>());
    return out;
  }
  if (!prompt.is_array()) return invalid_argument(std::string(kForms) + "; got " + json_type_name(prompt) + ".");
  if (prompt.empty()) return invalid_argument("prompt is an empty array.");
  const nlohmann::json& first = prompt[0];
  if (first.is_number()) {
    out.tokens = true;
    out.scalar = true;
    PRISM_ASSIGN_OR_RETURN(std::vector<int64_t> ids, read_token_array(prompt, "prompt"));
    out.token_ids.push_back(std::move(ids));
    return out;
  }
  if (prompt.size() > kMaxPrompts)
    return invalid_argument("prompt has " + std::to_string(prompt.size()) + " elements; at most " +
                            std::to_string(kMaxPrompts) + " prompts are allowed per request.");
  if (first.is_string()) {
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      if (!prompt[i].is_string()) return mixed_forms(prompt, i);
      if (prompt[i].get_ref<const std::string&>().empty())
        return invalid_argument(at("prompt", i) + " is an empty string.");
      out.texts.push_back(prompt[i].get<std::string>());
    }
    return out;
  }
  if (first.is_array()) {
    out.tokens = true;
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      if (!prompt[i].is_array()) return mixed_forms(prompt, i);
      PRISM_ASSIGN_OR_RETURN(std::vector<int64_t> ids, read_token_array(prompt[i], at("prompt", i)));
      out.token_ids.push_back(std::move(ids));
    }
    return out;
  }
  return invalid_argument("prompt[0] is " + std::string(json_type_name(first)) + ": " + std::string(kForms) + ".");
}

namespace {

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
  auto frontend = std::dynamic_pointer_cast<const gen::GenerateFrontend>(d.value()->frontend());
  if (frontend == nullptr)
    return (void)responder.send(error_response(not_ready("The model '" + model + "' is not ready yet.")));

  GenerateCallSpec spec;
  std::vector<std::unique_ptr<gen::GenerateInput>> inputs;
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
    const std::string param = prompts->scalar ? "prompt" : prompts->name(i);
    Result<std::unique_ptr<gen::GenerateInput>> input =
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
