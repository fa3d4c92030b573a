// Parser: tokens -> statement tree, with jinja2's operator precedence. A tag or construct
// outside the supported subset is an error naming it and its line, never approximated.
#pragma once

#include <string_view>

#include "base/status.h"
#include "text/jinja/ast.h"

namespace prism::text::jinja {

Result<Body> parse(std::string_view source);

}  // namespace prism::text::jinja
