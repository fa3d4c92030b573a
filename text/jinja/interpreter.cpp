// Interpreter: walks the parsed tree with Python/jinja2 semantics (see interpreter.h).
// NOTE: scoping follows jinja2: a for-loop iteration and a macro call open a fresh scope
// whose assignments vanish at its end (a new iteration does not see the previous one's
// `set`), `if` opens none, and namespace() objects are the one thing a loop can mutate.
#include "text/jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "text/jinja/builtins.h"
#include "text/jinja/parser.h"

namespace prism::text::jinja {
namespace {

using Frame = std::unordered_map<std::string, Value>;
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { normal, break_loop, continue_loop };

class Interp {
 public:
  explicit Interp(const Entries& variables) {
    frames_.push_back(std::make_shared<Frame>(global_functions()));
    auto vars = std::make_shared<Frame>();
    for (const auto& [k, v] : variables) (*vars)[k] = v;
    frames_.push_back(vars);
  }

  std::string run(const Body& body) {
    render(body);
    return std::move(out_);
  }
  int line() const { return line_; }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

 private:
  void assign(const std::string& name, Value v) { (*frames_.back())[name] = std::move(v); }

  void bind_targets(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      assign(targets[0], v);
      return;
    }
    std::vector<Value> items = iterate(v);
    if (items.size() < targets.size())
      fail("not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
           std::to_string(items.size()) + ")");
    if (items.size() > targets.size())
      fail("too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
  }

  Flow render(const Body& body) {
    for (const NodePtr& n : body) {
      const Flow f = render_node(*n);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow render_node(const Node& n) {
    line_ = n.line;
    switch (n.kind) {
      case Node::Kind::text: out_ += n.text; break;
      case Node::Kind::output: out_ += eval(*n.expr).to_str(); break;
      case Node::Kind::if_:
        for (const auto& [cond, body] : n.branches)
          if (eval(*cond).truthy()) return render(body);
        return render(n.else_body);
      case Node::Kind::for_: return render_for(n);
      case Node::Kind::set: {
        Value v = eval(*n.expr);
        if (!n.attr.empty()) {
          Value ns = lookup(n.targets[0]);
          if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object");
          Entries& e = ns.mutable_entries();
          auto it = std::find_if(e.begin(), e.end(), [&](const auto& kv) { return kv.first == n.attr; });
          if (it != e.end()) it->second = std::move(v);
          else e.emplace_back(n.attr, std::move(v));
        } else {
          bind_targets(n.targets, v);
        }
        break;
      }
      case Node::Kind::set_block: assign(n.text, Value::string(capture(n.body))); break;
      case Node::Kind::macro: assign(n.text, make_macro(n)); break;
      case Node::Kind::call_block: {
        const Expr& call = *n.expr;
        Value callee = eval(*call.args[0]);
        CallArgs args = eval_args(call);
        args.keyword.emplace_back("caller", make_caller(n));
        out_ += call_value(callee, args).to_str();
        break;
      }
      case Node::Kind::break_: return Flow::break_loop;
      case Node::Kind::continue_: return Flow::continue_loop;
      case Node::Kind::scope: return render(n.body);
    }
    return Flow::normal;
  }

  std::string capture(const Body& body) {
    std::string saved;
    std::swap(saved, out_);
    render(body);
    std::swap(saved, out_);
    return saved;
  }

  Flow render_for(const Node& n) {
    std::vector<Value> items = iterate(eval(*n.expr));
    if (n.filter) {
      std::vector<Value> kept;
      for (Value& item : items) {
        frames_.push_back(std::make_shared<Frame>());
        bind_targets(n.targets, item);
        const bool keep = eval(*n.filter).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return render(n.else_body);
    const int64_t length = static_cast<int64_t>(items.size());
    auto shared_items = std::make_shared<std::vector<Value>>(items);
    for (int64_t i = 0; i < length; ++i) {
      frames_.push_back(std::make_shared<Frame>());
      bind_targets(n.targets, items[i]);
      Entries loop = {
          {"index", Value::integer(i + 1)},
          {"index0", Value::integer(i)},
          {"revindex", Value::integer(length - i)},
          {"revindex0", Value::integer(length - i - 1)},
          {"first", Value::boolean(i == 0)},
          {"last", Value::boolean(i == length - 1)},
          {"length", Value::integer(length)},
          {"depth", Value::integer(1)},
          {"depth0", Value::integer(0)},
          {"cycle", Value::function("cycle", [i](CallArgs& a) {
             if (a.positional.empty()) fail("no items for cycling given");
             return a.positional[static_cast<size_t>(i) % a.positional.size()];
           })},
      };
      if (i > 0) loop.emplace_back("previtem", items[i - 1]);
      if (i + 1 < length) loop.emplace_back("nextitem", items[i + 1]);
      assign("loop", Value::dict(std::move(loop)));
      const Flow f = render(n.body);
      frames_.pop_back();
      if (f == Flow::break_loop) break;
    }
    return Flow::normal;
  }

  // Runs body with its own scope on top of `scope`, returning what it printed.
  std::string run_in_scope(const std::vector<FramePtr>& scope, FramePtr frame, const Body& body) {
    std::vector<FramePtr> saved = scope;
    saved.push_back(std::move(frame));
    std::swap(saved, frames_);
    const std::string text = capture(body);
    std::swap(saved, frames_);
    return text;
  }

  Value make_macro(const Node& n) {
    // Macros see the globals and the template's top level, not the caller's loop scopes.
    // NOTE: those two frames are looked up at call time (every scope starts with them), not
    // captured: the macro is stored in the top-level frame, and capturing that frame would
    // make a shared_ptr cycle that outlives the render.
    return Value::function(n.text, [this, &n](CallArgs& a) {
      const std::vector<FramePtr> scope = {frames_[0], frames_[1]};
      auto frame = std::make_shared<Frame>();
      if (a.positional.size() > n.params.size())
        fail("macro '" + n.text + "' takes not more than " + std::to_string(n.params.size()) + " argument(s)");
      for (const auto& [k, v] : a.keyword) {
        const bool known = k == "caller" || std::any_of(n.params.begin(), n.params.end(),
                                                           [&](const auto& p) { return p.first == k; });
        if (!known) fail("macro '" + n.text + "' takes no keyword argument '" + k + "'");
        (*frame)[k] = v;
      }
      std::vector<FramePtr> saved = scope;
      saved.push_back(frame);
      std::swap(saved, frames_);
      for (size_t i = 0; i < n.params.size(); ++i) {
        const auto& [name, def] = n.params[i];
        if (i < a.positional.size()) (*frame)[name] = a.positional[i];
        else if (frame->count(name)) continue;
        else if (def) (*frame)[name] = eval(*def);
        else (*frame)[name] = Value::undefined("parameter '" + name + "' was not provided");
      }
      const std::string text = capture(n.body);
      std::swap(saved, frames_);
      return Value::string(text);
    });
  }

  Value make_caller(const Node& n) {
    std::vector<FramePtr> scope = frames_;
    return Value::function("caller", [this, &n, scope](CallArgs& a) {
      auto frame = std::make_shared<Frame>();
      for (size_t i = 0; i < n.params.size(); ++i) {
        const auto& [name, def] = n.params[i];
        if (i < a.positional.size()) (*frame)[name] = a.positional[i];
        else (*frame)[name] = Value::undefined("parameter '" + name + "' was not provided");
      }
      for (const auto& [k, v] : a.keyword) (*frame)[k] = v;
      return Value::string(run_in_scope(scope, frame, n.body));
    });
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs args;
    for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
    return args;
  }

  Value eval(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: return lookup(e.name);
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        std::vector<Value> items;
        for (const ExprPtr& a : e.args) items.push_back(eval(*a));
        return e.kind == Expr::Kind::list ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case Expr::Kind::dict: {
        Entries entries;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i]);
          if (!k.is_string()) fail("unsupported dict literal key of type " + k.type_name() + " (only strings)");
          Value v = eval(*e.args[i + 1]);
          auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& kv) { return kv.first == k.str(); });
          if (it != entries.end()) it->second = std::move(v);
          else entries.emplace_back(k.str(), std::move(v));
        }
        return Value::dict(std::move(entries));
      }
      case Expr::Kind::attr: return get_attr(eval(*e.args[0]), e.name);
      case Expr::Kind::item: {
        Value obj = eval(*e.args[0]);
        return get_item(obj, eval(*e.args[1]));
      }
      case Expr::Kind::slice: {
        Value obj = eval(*e.args[0]);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.args[i + 1]) parts[i] = eval(*e.args[i + 1]);
        return slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::call: {
        Value callee = eval(*e.args[0]);
        CallArgs args = eval_args(e);
        line_ = e.line;
        return call_value(callee, args);
      }
      case Expr::Kind::filter:
      case Expr::Kind::test: {
        Value input = eval(*e.args[0]);
        CallArgs args = eval_args(e);
        line_ = e.line;
        if (e.kind == Expr::Kind::filter) return apply_filter(e.name, input, args);
        return Value::boolean(apply_test(e.name, input, args) != e.negated);
      }
      case Expr::Kind::unary: {
        Value v = eval(*e.args[0]);
        require_defined(v);
        if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v.is_float() ? v : Value::integer(v.as_int());
        return v.is_float() ? Value::floating(-v.as_double()) : Value::integer(-v.as_int());
      }
      case Expr::Kind::binary: {
        Value l = eval(*e.args[0]);
        Value r = eval(*e.args[1]);
        line_ = e.line;
        return binary_op(e.name, l, r);
      }
      case Expr::Kind::logic_and: {
        Value l = eval(*e.args[0]);
        return l.truthy() ? eval(*e.args[1]) : l;
      }
      case Expr::Kind::logic_or: {
        Value l = eval(*e.args[0]);
        return l.truthy() ? l : eval(*e.args[1]);
      }
      case Expr::Kind::logic_not: return Value::boolean(!eval(*e.args[0]).truthy());
      case Expr::Kind::compare: {
        Value l = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value r = eval(*e.args[i + 1]);
          line_ = e.line;
          if (!compare(e.ops[i], l, r)) return Value::boolean(false);
          l = std::move(r);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::cond:
        if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    return Value();
  }

  std::vector<FramePtr> frames_;
  std::string out_;
  int line_ = 0;
};

// Filter and test names a template may use; checked at parse time, as jinja2 does when it
// compiles, so an unsupported one fails at load, not mid-request.
void validate(const Body& body);

void validate_expr(const Expr& e) {
  if (e.kind == Expr::Kind::filter && !is_known_filter(e.name))
    throw RenderError{"chat template: unsupported filter '" + e.name + "' at line " + std::to_string(e.line)};
  if (e.kind == Expr::Kind::test && !is_known_test(e.name))
    throw RenderError{"chat template: unsupported test '" + e.name + "' at line " + std::to_string(e.line)};
  for (const ExprPtr& a : e.args)
    if (a) validate_expr(*a);
  for (const auto& [k, v] : e.kwargs) validate_expr(*v);
}

void validate(const Body& body) {
  for (const NodePtr& n : body) {
    if (n->expr) validate_expr(*n->expr);
    if (n->filter) validate_expr(*n->filter);
    for (const auto& [cond, b] : n->branches) {
      validate_expr(*cond);
      validate(b);
    }
    for (const auto& [k, v] : n->params)
      if (v) validate_expr(*v);
    validate(n->body);
    validate(n->else_body);
  }
}

}  // namespace

Result<Template> Template::parse(std::string_view source) {
  PRISM_ASSIGN_OR_RETURN(Body body, jinja::parse(source));
  try {
    validate(body);
  } catch (const RenderError& e) {
    return invalid_argument(e.message);
  }
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

Result<std::string> Template::render(const Entries& variables) const {
  Interp interp(variables);
  try {
    return interp.run(*body_);
  } catch (const RenderError& e) {
    if (e.from_template) return invalid_argument(e.message);
    return invalid_argument("chat template: " + e.message + " at line " + std::to_string(interp.line()));
  }
}

}  // namespace prism::text::jinja
