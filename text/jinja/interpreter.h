// Template: a parsed jinja2 template rendered against variables, the way transformers renders
// chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
// its tojson / raise_exception / strftime_now). Render is const and keeps its state on the
// stack, so one Template serves many threads.
//
// NOTE: inside the interpreter an error unwinds as a RenderError exception (a template can
// fail at any depth of any expression, and threading Result through every evaluation would
// double the code); render() is the one place that catches it and returns a Status, so no
// exception leaves this module.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace prism::text::jinja {

// What a failed render carries. from_template: raised by the template's raise_exception(),
// whose message is the template author's, shown as is.
struct RenderError {
  std::string message;
  bool from_template = false;
};

class Template {
 public:
  static Result<Template> parse(std::string_view source);

  // variables: the template's globals (messages, add_generation_prompt, bos_token, ...).
  // A raise_exception() in the template gives invalid_argument with its message verbatim;
  // other failures give invalid_argument "chat template: <what> at line N".
  Result<std::string> render(const Entries& variables) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace prism::text::jinja
