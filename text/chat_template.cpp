// ChatTemplate: tokenizer_config.json -> jinja::Template, and requests -> the variables
// transformers passes to it (see chat_template.h).
#include "text/chat_template.h"


#include "base/file.h"
#include "text/jinja/interpreter.h"

namespace prism::text {
namespace {

using json = nlohmann::ordered_json;

// A special token in tokenizer_config.json: "<s>", or an AddedToken {"content": "<s>", ...}.
std::optional<std::string> token_text(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_string(const std::string& source, std::string bos_token,
                                               std::string eos_token) {
  PRISM_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(source));
  ChatTemplate ct;
  ct.source_ = source;
  ct.template_ = std::make_shared<const jinja::Template>(std::move(t));
  ct.special_tokens_["bos_token"] = std::move(bos_token);
  ct.special_tokens_["eos_token"] = std::move(eos_token);
  return ct;
}

Result<ChatTemplate> ChatTemplate::load(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer_config.json";
  PRISM_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  json config;
  try {
    config = json::parse(text);
  } catch (const json::exception& e) {
    return invalid_argument(path + ": " + e.what());
  }
  if (!config.is_object()) return invalid_argument(path + ": not a JSON object");
  std::string source;
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return not_found(path + " has no chat_template");
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    for (const json& named : *it)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        source = named["template"].get<std::string>();
    if (source.empty()) return not_found(path + ": chat_template list has no \"default\" template");
  } else {
    return invalid_argument(path + ": chat_template is neither a string nor a list");
  }
  auto parsed = from_string(source);
  if (!parsed) return Status(parsed.status().code(), path + ": " + parsed.status().message());
  ChatTemplate ct = std::move(parsed).value();
  ct.special_tokens_ = json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"})
    if (auto tok = token_text(config, key)) ct.special_tokens_[key] = *tok;
  return ct;
}

Result<std::string> ChatTemplate::render(const ChatRequest& request) const {
  if (!request.messages.is_array()) return invalid_argument("chat template: messages must be a list");
  if (!request.extra.is_null() && !request.extra.is_object())
    return invalid_argument("chat template: extra variables must be an object");
  using jinja::Value;
  // The variables of transformers' render(): messages, tools, documents,
  // add_generation_prompt, the special tokens map, then the caller's extra kwargs.
  jinja::Entries vars;
  auto put = [&](const std::string& key, Value v) {
    for (auto& [k, old] : vars)
      if (k == key) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(key, std::move(v));
  };
  put("messages", Value::from_json(request.messages));
  put("tools", request.tools ? Value::from_json(*request.tools) : Value::none());
  put("documents", Value::none());
  put("add_generation_prompt", Value::boolean(request.add_generation_prompt));
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) put(it.key(), Value::from_json(it.value()));
  if (request.extra.is_object())
    for (auto it = request.extra.begin(); it != request.extra.end(); ++it) put(it.key(), Value::from_json(it.value()));
  return template_->render(vars);
}

}  // namespace prism::text
