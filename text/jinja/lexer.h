// Lexer: template source -> tokens, applying jinja2's whitespace rules on the way, with the
// settings transformers renders chat templates under: trim_blocks (the first newline after
// a block or comment tag is dropped), lstrip_blocks (spaces and tabs before a block or
// comment tag at the start of a line are dropped), "-" / "+" tag modifiers, one trailing
// newline of the template dropped (keep_trailing_newline=False), {% raw %} kept verbatim.
// It knows no statements: the parser gives tags their meaning.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace prism::text::jinja {

struct Token {
  enum class Type { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };
  Type type;
  std::string value;  // text, name, decoded string, number digits or operator
  int line = 1;
};

Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace prism::text::jinja
