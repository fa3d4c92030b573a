// ChatTemplate: a model's chat template (the Jinja2 `chat_template` of its Hugging Face
// tokenizer_config.json) turned into prompts the way transformers' apply_chat_template(...,
// tokenize=False) does: same variables (messages, tools, documents, add_generation_prompt,
// the special tokens), same whitespace rules, same tojson, byte-identical output. It renders
// text only; tokenizing the prompt is the tokenizer's job (text/tokenizer.h).
//
// Thread-safe: render() is const and shares nothing mutable, so handler threads may render
// concurrently with one ChatTemplate.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace prism::text {

namespace jinja {
class Template;
}

struct ChatRequest {
  // [{"role": ..., "content": ...}, ...]; content may be a string or a list of parts
  // ({"type": "text", "text": ...}), passed to the template as is. ordered_json keeps key
  // order, which tojson prints (parse requests with nlohmann::ordered_json to keep it).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // OpenAI-style tool schemas; absent renders with tools = none, as transformers passes None.
  std::optional<nlohmann::ordered_json> tools;
  bool add_generation_prompt = false;
  // Further template variables (e.g. date_string, builtin_tools); an object, or null.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Reads <model_dir>/tokenizer_config.json: chat_template (a string, or a list of
  // {"name", "template"} from which "default" is used) and the special tokens (bos, eos, unk,
  // pad: strings or {"content": ...}). not_found when there is no chat template.
  static Result<ChatTemplate> load(const std::string& model_dir);
  // Parses source now, so a template Prism cannot render fails here, not per request.
  static Result<ChatTemplate> from_string(const std::string& source, std::string bos_token = "",
                                          std::string eos_token = "");

  // The prompt text; invalid_argument when the template rejects the conversation (its
  // raise_exception message, verbatim) or fails while rendering.
  Result<std::string> render(const ChatRequest& request) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();  // bos_token, ...
};

}  // namespace prism::text
