// The parsed template: expression and statement trees the interpreter walks. Plain data;
// nodes are immutable once parsed, so one tree serves concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace prism::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // name
    list,       // args = items
    tuple,      // args = items
    dict,       // args = key0, value0, key1, value1, ...
    attr,       // args[0].name
    item,       // args[0][args[1]]
    slice,      // args[0][args[1]:args[2]:args[3]], any of 1..3 may be null
    call,       // args[0](args[1..], kwargs)
    filter,     // args[0] | name(args[1..], kwargs)
    test,       // args[0] is [not] name(args[1..])
    unary,      // name ("-", "+") args[0]
    binary,     // args[0] name args[1]: + - * / // % ** ~
    logic_and,  // args[0] and args[1]
    logic_or,   // args[0] or args[1]
    logic_not,  // not args[0]
    compare,    // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in "not in"
    cond,       // args[0] if args[1] else args[2] (args[2] may be null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    text,        // text
    output,      // {{ expr }}
    if_,         // branches, else_body
    for_,        // for targets in expr [if filter]: body [else: else_body]
    set,         // set targets = expr, or set name.attr = expr
    set_block,   // set name: body captured as a string
    macro,       // macro name(params): body
    call_block,  // call(params) expr: body is caller()
    break_,
    continue_,
    scope,       // a body rendered as is ({% generation %} from transformers)
  };
  Kind kind;
  int line = 0;
  std::string text;                  // text; macro name; set_block name
  std::string attr;                  // set ns.attr
  ExprPtr expr;
  ExprPtr filter;                    // for ... if filter
  std::vector<std::string> targets;  // loop / set targets
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
};

}  // namespace prism::text::jinja
