// Parser: recursive descent over the lexer's tokens, one function per jinja2 precedence level
// (condexpr > or > and > not > compare > + - > ~ > * / // % > ** > unary > postfix/filters).
// NOTE: errors travel as a ParseError exception inside this file only; parse() catches it
// and returns a Status, so nothing throws past the API.
#include "text/jinja/parser.h"

#include <algorithm>
#include <cstdlib>

#include "text/jinja/lexer.h"

namespace prism::text::jinja {
namespace {

struct ParseError {
  std::string message;
};

using T = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_template() {
    Body body = parse_body({});
    return body;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == T::op && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == T::name && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ParseError{"chat template: " + what + " at line " + std::to_string(cur().line)};
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::eof: return "end of template";
      case T::block_end: return "end of statement block";
      case T::var_end: return "end of print statement";
      case T::text: return "template text";
      default: return "'" + t.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != T::name) fail("expected a name, got " + describe(cur()));
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != T::block_end) fail("expected end of statement block, got " + describe(cur()));
    next();
  }

  // Parses nodes until a {% <one of ends> %} tag (left unconsumed) or the end of the template.
  Body parse_body(std::initializer_list<const char*> ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::eof) {
        if (ends.size() == 0) return body;
        fail(std::string("missing '{% ") + *(ends.end() - 1) + " %}'");
      }
      if (t.type == T::text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::text;
        n->line = t.line;
        n->text = t.value;
        body.push_back(std::move(n));
        next();
      } else if (t.type == T::var_begin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::output;
        n->line = t.line;
        next();
        n->expr = parse_tuple(true);
        if (cur().type != T::var_end) fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(n));
      } else if (t.type == T::block_begin) {
        const Token& kw = peek();
        if (kw.type == T::name)
          for (const char* e : ends)
            if (kw.value == e) return body;
        next();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  void expect_end_tag(const char* name) {
    next();  // block_begin
    if (!skip_name(name)) fail(std::string("expected '") + name + "'");
    expect_block_end();
  }

  NodePtr parse_statement() {
    if (cur().type != T::name) fail("expected a statement name, got " + describe(cur()));
    const std::string kw = cur().value;
    const int line = cur().line;
    auto n = std::make_unique<Node>();
    n->line = line;
    next();
    if (kw == "if") {
      n->kind = Node::Kind::if_;
      ExprPtr cond = parse_tuple(true);
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(b));
        next();  // block_begin
        const std::string which = cur().value;
        next();
        if (which == "elif") {
          cond = parse_tuple(true);
          expect_block_end();
          continue;
        }
        if (which == "else") {
          expect_block_end();
          n->else_body = parse_body({"endif"});
          expect_end_tag("endif");
        } else {
          expect_block_end();
        }
        break;
      }
    } else if (kw == "for") {
      n->kind = Node::Kind::for_;
      n->targets = parse_targets();
      if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
      n->expr = parse_tuple(false);
      if (skip_name("if")) n->filter = parse_expression();
      if (is_name("recursive")) fail("unsupported loop modifier 'recursive'");
      expect_block_end();
      n->body = parse_body({"else", "endfor"});
      if (peek().value == "else") {
        expect_end_tag("else");
        n->else_body = parse_body({"endfor"});
      }
      expect_end_tag("endfor");
    } else if (kw == "set") {
      std::string first = expect_name();
      if (skip_op(".")) {
        n->kind = Node::Kind::set;
        n->targets = {first};
        n->attr = expect_name();
        expect_op("=");
        n->expr = parse_tuple(true);
        expect_block_end();
      } else if (cur().type == T::block_end) {
        n->kind = Node::Kind::set_block;
        n->text = first;
        next();
        n->body = parse_body({"endset"});
        expect_end_tag("endset");
      } else {
        n->kind = Node::Kind::set;
        n->targets = {first};
        while (skip_op(",")) n->targets.push_back(expect_name());
        if (is_op("|")) fail("unsupported filtered block set");
        expect_op("=");
        n->expr = parse_tuple(true);
        expect_block_end();
      }
    } else if (kw == "macro") {
      n->kind = Node::Kind::macro;
      n->text = expect_name();
      n->params = parse_params();
      expect_block_end();
      n->body = parse_body({"endmacro"});
      expect_end_tag("endmacro");
    } else if (kw == "call") {
      n->kind = Node::Kind::call_block;
      if (is_op("(")) n->params = parse_params();
      n->expr = parse_expression();
      if (n->expr->kind != Expr::Kind::call) fail("expected a call after 'call'");
      expect_block_end();
      n->body = parse_body({"endcall"});
      expect_end_tag("endcall");
    } else if (kw == "break" || kw == "continue") {
      n->kind = kw == "break" ? Node::Kind::break_ : Node::Kind::continue_;
      expect_block_end();
    } else if (kw == "generation") {
      n->kind = Node::Kind::scope;
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      expect_end_tag("endgeneration");
    } else {
      static const char* const kKnown[] = {"extends", "block",   "include", "import", "from", "with",
                                           "filter",  "autoescape", "do",  "trans",  "pluralize"};
      for (const char* k : kKnown)
        if (kw == k) {
          pos_--;
          fail("unsupported tag '" + kw + "'");
        }
      pos_--;
      fail("unknown or unexpected tag '" + kw + "'");
    }
    return n;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    names.push_back(expect_name());
    while (skip_op(",")) {
      if (paren && is_op(")")) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  std::vector<std::pair<std::string, ExprPtr>> parse_params() {
    std::vector<std::pair<std::string, ExprPtr>> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression();
      params.emplace_back(std::move(name), std::move(def));
    }
    next();
    return params;
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Comma-separated expressions; a comma makes a tuple. with_cond=false leaves a trailing
  // "if" alone (the for-loop filter).
  ExprPtr parse_tuple(bool with_cond) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
      }
      if (cur().type == T::block_end || cur().type == T::var_end || is_op(")") ||
          (!with_cond && is_name("if")))
        break;
      items.push_back(with_cond ? parse_expression() : parse_or());
    }
    if (!comma) {
      if (items.empty()) fail("expected an expression, got " + describe(cur()));
      return std::move(items[0]);
    }
    auto t = make(Expr::Kind::tuple, line);
    t->args = std::move(items);
    return t;
  }

  ExprPtr parse_expression() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      next();
      auto c = make(Expr::Kind::cond, line);
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (skip_name("else")) other = parse_expression();
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(Expr::Kind kind, std::string op, ExprPtr l, ExprPtr r, int line) {
    auto e = make(kind, line);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::logic_or, "or", std::move(e), parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::logic_and, "and", std::move(e), parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = make(Expr::Kind::logic_not, cur().line);
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> rest;
    while (true) {
      std::string op;
      if (cur().type == T::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                  cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == T::name && peek().value == "in") {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      ops.push_back(op);
      rest.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make(Expr::Kind::compare, line);
    e->args.push_back(std::move(first));
    for (auto& r : rest) e->args.push_back(std::move(r));
    e->ops = std::move(ops);
    return e;
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().value;
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::binary, op, std::move(e), parse_concat(), line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::binary, "~", std::move(e), parse_math2(), line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().value;
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::binary, op, std::move(e), parse_pow(), line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::binary, "**", std::move(e), parse_unary(true), line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(Expr::Kind::unary, cur().line);
      e->name = cur().value;
      next();
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    if (t.type == T::name) {
      const std::string& v = t.value;
      auto lit = [&](Value value) {
        auto e = make(Expr::Kind::literal, line);
        e->value = std::move(value);
        next();
        return e;
      };
      if (v == "true" || v == "True") return lit(Value::boolean(true));
      if (v == "false" || v == "False") return lit(Value::boolean(false));
      if (v == "none" || v == "None") return lit(Value::none());
      auto e = make(Expr::Kind::name, line);
      e->name = v;
      next();
      return e;
    }
    if (t.type == T::string) {
      std::string s;
      while (cur().type == T::string) {  // adjacent literals concatenate, as in Python
        s += cur().value;
        next();
      }
      auto e = make(Expr::Kind::literal, line);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == T::integer || t.type == T::floating) {
      auto e = make(Expr::Kind::literal, line);
      e->value = t.type == T::integer ? Value::integer(std::strtoll(t.value.c_str(), nullptr, 10))
                                      : Value::floating(std::strtod(t.value.c_str(), nullptr));
      next();
      return e;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return make(Expr::Kind::tuple, line);
      ExprPtr e = parse_tuple(true);
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = make(Expr::Kind::list, line);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    if (skip_op("{")) {
      auto e = make(Expr::Kind::dict, line);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == T::integer) {
        auto e = make(Expr::Kind::item, line);
        e->args.push_back(std::move(obj));
        auto idx = make(Expr::Kind::literal, line);
        idx->value = Value::integer(std::strtoll(cur().value.c_str(), nullptr, 10));
        e->args.push_back(std::move(idx));
        next();
        return e;
      }
      auto e = make(Expr::Kind::attr, line);
      e->args.push_back(std::move(obj));
      e->name = expect_name();
      return e;
    }
    expect_op("[");
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (skip_op(":")) {
        if (++colons > 2) fail("too many ':' in subscript");
        continue;
      }
      if (parts[colons]) fail("unsupported subscript (tuple index)");
      parts[colons] = parse_expression();
      if (is_op(",")) fail("unsupported subscript (tuple index)");
    }
    next();
    if (colons == 0) {
      if (!parts[0]) fail("empty subscript");
      auto e = make(Expr::Kind::item, line);
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(Expr::Kind::slice, line);
    e->args.push_back(std::move(obj));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  void parse_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("unsupported *args/**kwargs in call");
      if (cur().type == T::name && peek().type == T::op && peek().value == "=") {
        std::string name = cur().value;
        next();
        next();
        e.kwargs.emplace_back(std::move(name), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail("positional argument after keyword argument");
        e.args.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::call, cur().line);
    e->args.push_back(std::move(callee));
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr input) {
    const int line = cur().line;
    next();  // |
    auto e = make(Expr::Kind::filter, line);
    e->name = expect_name();
    while (skip_op(".")) {
      e->name += '.';
      e->name.append(expect_name());
    }
    e->args.push_back(std::move(input));
    if (is_op("(")) parse_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr input) {
    const int line = cur().line;
    next();  // is
    auto e = make(Expr::Kind::test, line);
    e->negated = skip_name("not");
    e->name = expect_name();
    while (skip_op(".")) {
      e->name += '.';
      e->name.append(expect_name());
    }
    e->args.push_back(std::move(input));
    if (is_op("(")) {
      parse_args(*e);
    } else if ((cur().type == T::name || cur().type == T::string || cur().type == T::integer ||
                cur().type == T::floating || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      // "x is divisibleby 3", "x is sameas none": one argument without parentheses.
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
};

}  // namespace

Result<Body> parse(std::string_view source) {
  PRISM_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  try {
    return Parser(std::move(tokens)).parse_template();
  } catch (const ParseError& e) {
    return invalid_argument(e.message);
  }
}

}  // namespace prism::text::jinja
