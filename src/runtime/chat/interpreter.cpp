// Tree-walking evaluator for parsed chat templates (scoping rules and limits: see interpreter.h).
#include "runtime/chat/interpreter.h"

namespace ga::chat {

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    for (const auto& [k, v] : s->vars)
      if (k == name) return &v;
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& [k, x] : vars) {
    if (k == name) {
      x = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

namespace {

// A macro or a call block's body, invoked like a function. It holds its defining scope weakly: the scope
// usually holds the macro, and a strong reference would make a cycle (the interpreter keeps the scope alive).
class BlockCallable : public Callable {
 public:
  BlockCallable(const Stmt* def, std::string name, const ScopePtr& closure)
      : def_(def), name_(std::move(name)), closure_(closure) {}
  Value call(Interpreter& interp, CallArgs& args) override { return interp.call_block(*def_, name_, closure_, args); }
  std::string name() const override { return name_; }

 private:
  const Stmt* def_;  // owned by the parsed template, which outlives every render
  std::string name_;
  std::weak_ptr<Scope> closure_;
};

}  // namespace

Interpreter::~Interpreter() {
  for (const auto& weak : namespaces_)
    if (auto d = weak.lock()) d->entries.clear();
  for (const ScopePtr& scope : macro_scopes_) scope->vars.clear();
}

Interpreter::DepthGuard::DepthGuard(Interpreter& in) : interp(in) {
  if (++interp.depth_ > interp.limits_.max_depth) {
    --interp.depth_;
    throw LimitError(std::string("template recursion too deep (more than ") + std::to_string(interp.limits_.max_depth) +
                     " nested evaluations)");
  }
}

void Interpreter::step() {
  if (++steps_ > limits_.max_steps)
    throw LimitError(std::string("template evaluation exceeded ") + std::to_string(limits_.max_steps) + " steps");
}

void Interpreter::check_string_size(size_t bytes) const {
  if (bytes > limits_.max_string_bytes)
    throw LimitError(std::string("template built a string of ") + std::to_string(bytes) + " bytes (limit " +
                     std::to_string(limits_.max_string_bytes) + ")");
}

void Interpreter::check_list_size(size_t items) const {
  if (items > limits_.max_list_items)
    throw LimitError(std::string("template built a list of ") + std::to_string(items) + " items (limit " +
                     std::to_string(limits_.max_list_items) + ")");
}

void Interpreter::append_output(std::string& out, const std::string& text) const {
  if (out.size() + text.size() > limits_.max_output_bytes)
    throw LimitError(std::string("template output exceeds ") + std::to_string(limits_.max_output_bytes) + " bytes");
  out += text;
}

std::string Interpreter::render(const std::vector<StmtPtr>& program, const ScopePtr& globals) {
  std::string out;
  exec(program, globals, out);
  return out;
}

Interpreter::Flow Interpreter::exec(const std::vector<StmtPtr>& body, const ScopePtr& scope, std::string& out) {
  DepthGuard guard(*this);
  for (const StmtPtr& s : body) {
    Flow f;
    try {
      f = exec_stmt(*s, scope, out);
    } catch (RuntimeError& err) {
      if (err.line == 0) {
        err.line = s->line;
        err.col = s->col;
      }
      throw;
    }
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

void Interpreter::assign(const std::vector<std::string>& targets, const Value& v, Scope& scope) {
  if (targets.size() == 1) {
    scope.set(targets[0], v);
    return;
  }
  if (v.kind != Kind::List && v.kind != Kind::String)
    fail(std::string("cannot unpack non-iterable ") + type_name(v) + " object");
  const std::vector<Value> items = iterate(v);
  if (items.size() > targets.size())
    fail(std::string("too many values to unpack (expected ") + std::to_string(targets.size()) + ")");
  if (items.size() < targets.size())
    fail(std::string("not enough values to unpack (expected ") + std::to_string(targets.size()) + ", got " +
         std::to_string(items.size()) + ")");
  for (size_t k = 0; k < targets.size(); ++k) scope.set(targets[k], items[k]);
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out) {
  step();
  switch (s.kind) {
    case StmtKind::Data: append_output(out, s.text); return Flow::Normal;
    case StmtKind::Output: append_output(out, to_str(eval(*s.expr, scope))); return Flow::Normal;
    case StmtKind::If:
      return exec(eval(*s.expr, scope).truthy() ? s.body : s.else_body, scope, out);
    case StmtKind::For: return exec_for(s, scope, out);
    case StmtKind::Set: assign(s.targets, eval(*s.expr, scope), *scope); return Flow::Normal;
    case StmtKind::SetAttr: {
      const Value* obj = scope->find(s.targets[0]);
      if (!obj || obj->kind != Kind::Namespace)
        fail(std::string("cannot assign attribute on non-namespace object '") + s.targets[0] + "'");
      Value v = eval(*s.expr, scope);
      obj->dict->set(s.targets[1], std::move(v));
      return Flow::Normal;
    }
    case StmtKind::SetBlock: {
      std::string captured;
      exec(s.body, scope, captured);
      Value v = Value::string(std::move(captured));
      if (s.expr) v = eval_filter_chain(*s.expr, scope, v);
      scope->set(s.targets[0], std::move(v));
      return Flow::Normal;
    }
    case StmtKind::Macro:
      keep_scope_alive(scope);
      scope->set(s.targets[0], Value::callable(std::make_shared<BlockCallable>(&s, s.targets[0], scope)));
      return Flow::Normal;
    case StmtKind::CallBlock: {
      const Expr& call = *s.expr;
      Value callee = eval(*call.args[0], scope);
      CallArgs args;
      eval_args(call, 1, scope, args);
      keep_scope_alive(scope);
      args.keyword.emplace_back("caller", Value::callable(std::make_shared<BlockCallable>(&s, "caller", scope)));
      if (callee.is_undefined()) fail(callee.s);
      append_output(out, to_str(this->call(callee, args)));
      return Flow::Normal;
    }
    case StmtKind::Block: return exec(s.body, scope, out);
    case StmtKind::Break: return Flow::Break;
    case StmtKind::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr, scope));
  if (s.cond) {  // `for x in xs if cond`: filtered before the loop, so loop.index/length count kept items only
    std::vector<Value> kept;
    for (Value& item : items) {
      step();
      auto probe = std::make_shared<Scope>(scope);
      assign(s.targets, item, *probe);
      if (eval(*s.cond, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  // The else block runs outside the loop: a break or continue in it belongs to an enclosing loop.
  if (items.empty()) return exec(s.else_body, std::make_shared<Scope>(scope), out);
  const auto n = static_cast<int64_t>(items.size());
  // One loop object for the whole loop, updated in place each iteration (jinja2's LoopContext is one object too).
  static const char* const kLoopKeys[] = {"index", "index0", "revindex", "revindex0", "first", "last",
                                          "length", "depth", "depth0", "previtem", "nextitem"};
  Dict loop_fields;
  for (const char* key : kLoopKeys) loop_fields.entries.emplace_back(key, Value::none());
  const Value loop = Value::namespace_of(std::move(loop_fields));
  track_namespace(loop.dict);
  auto& fields = loop.dict->entries;
  for (int64_t k = 0; k < n; ++k) {
    // A loop iteration costs several steps' worth of work (a scope, the loop object), so it is charged as such.
    for (int c = 0; c < 4; ++c) step();
    auto iteration = std::make_shared<Scope>(scope);
    assign(s.targets, items[static_cast<size_t>(k)], *iteration);
    fields[0].second = Value::integer(k + 1);
    fields[1].second = Value::integer(k);
    fields[2].second = Value::integer(n - k);
    fields[3].second = Value::integer(n - k - 1);
    fields[4].second = Value::boolean(k == 0);
    fields[5].second = Value::boolean(k == n - 1);
    fields[6].second = Value::integer(n);
    fields[7].second = Value::integer(1);
    fields[8].second = Value::integer(0);
    fields[9].second = k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item");
    fields[10].second = k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item");
    iteration->set("loop", loop);
    const Flow f = exec(s.body, iteration, out);
    if (f == Flow::Break) break;
  }
  return Flow::Normal;
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail(callee.s);
  if (callee.kind != Kind::Callable) fail(std::string("'") + type_name(callee) + "' object is not callable");
  return callee.fn->call(*this, args);
}

Value Interpreter::call_block(const Stmt& def, const std::string& name, const std::weak_ptr<Scope>& closure,
                              CallArgs& args) {
  DepthGuard guard(*this);
  ScopePtr parent = closure.lock();
  if (!parent) fail("macro '" + name + "' called after the scope it was defined in ended");
  auto scope = std::make_shared<Scope>(std::move(parent));
  if (args.positional.size() > def.params.size())
    fail(std::string("macro '") + name + "' takes not more than " + std::to_string(def.params.size()) + " argument(s)");
  std::vector<bool> bound(def.params.size(), false);
  for (size_t k = 0; k < args.positional.size(); ++k) {
    scope->set(def.params[k], args.positional[k]);
    bound[k] = true;
  }
  for (auto& [key, v] : args.keyword) {
    size_t k = 0;
    while (k < def.params.size() && def.params[k] != key) ++k;
    if (k < def.params.size()) {
      if (bound[k]) fail(std::string("macro '") + name + "' got multiple values for argument '" + key + "'");
      bound[k] = true;
      scope->set(key, v);
    } else if (key == "caller") {
      scope->set(key, v);
    } else {
      fail(std::string("macro '") + name + "' takes no keyword argument '" + key + "'");
    }
  }
  for (size_t k = 0; k < def.params.size(); ++k) {
    if (bound[k]) continue;
    scope->set(def.params[k], def.defaults[k] ? eval(*def.defaults[k], scope)
                                              : Value::undefined(std::string("parameter '") + def.params[k] + "' was not provided"));
  }
  std::string out;
  exec(def.body, scope, out);
  return Value::string(std::move(out));
}

void Interpreter::eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& args) {
  for (size_t k = first; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k], scope));
  for (const auto& [key, x] : e.kwargs) args.keyword.emplace_back(key, eval(*x, scope));
}

Value Interpreter::eval_filter_chain(const Expr& e, const ScopePtr& scope, const Value& input) {
  if (e.kind != ExprKind::Filter) return input;  // the placeholder at the bottom of the chain
  Value base = eval_filter_chain(*e.args[0], scope, input);
  CallArgs args;
  eval_args(e, 1, scope, args);
  return apply_filter(*this, e.name, base, args);
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard guard(*this);
  step();
  try {
    return eval_node(e, scope);
  } catch (RuntimeError& err) {
    if (err.line == 0) {
      err.line = e.line;
      err.col = e.col;
    }
    throw;
  }
}

Value Interpreter::eval_node(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::Literal: return e.literal;
    case ExprKind::Name: {
      const Value* v = scope->find(e.name);
      return v ? *v : Value::undefined(std::string("'") + e.name + "' is undefined");
    }
    case ExprKind::GetAttr: {
      Value obj = eval(*e.args[0], scope);
      if (obj.is_undefined()) fail(obj.s);
      return get_attr(obj, e.name);
    }
    case ExprKind::GetItem: {
      Value obj = eval(*e.args[0], scope);
      Value key = eval(*e.args[1], scope);
      if (obj.is_undefined()) fail(obj.s);
      return get_item(obj, key);
    }
    case ExprKind::Slice: {
      Value obj = eval(*e.args[0], scope);
      Value parts[3];
      for (int k = 0; k < 3; ++k) parts[k] = e.args[1 + k] ? eval(*e.args[1 + k], scope) : Value::none();
      if (obj.is_undefined()) fail(obj.s);
      return get_slice(*this, obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::Call: {
      Value callee = eval(*e.args[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, args);
      return call(callee, args);
    }
    case ExprKind::Filter: {
      Value input = eval(*e.args[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, args);
      return apply_filter(*this, e.name, input, args);
    }
    case ExprKind::Test: {
      Value v = eval(*e.args[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, args);
      return Value::boolean(apply_test(*this, e.name, v, args) != e.negated);
    }
    case ExprKind::Not: return Value::boolean(!eval(*e.args[0], scope).truthy());
    case ExprKind::Neg:
    case ExprKind::Pos: {
      Value v = eval(*e.args[0], scope);
      if (v.is_undefined()) fail(v.s);
      if (!v.is_number())
        fail(std::string("bad operand type for unary ") + (e.kind == ExprKind::Neg ? "-" : "+") + ": '" +
             type_name(v) + "'");
      if (e.kind == ExprKind::Pos) return v.kind == Kind::Float ? v : Value::integer(v.as_int());
      if (v.kind == Kind::Float) return Value::number(-v.f);
      if (v.as_int() == INT64_MIN) fail("integer overflow");
      return Value::integer(-v.as_int());
    }
    case ExprKind::Binary: {
      Value a = eval(*e.args[0], scope);
      Value b = eval(*e.args[1], scope);
      return binary_op(*this, e.name, a, b);
    }
    case ExprKind::Compare: {
      Value left = eval(*e.args[0], scope);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1], scope);
        if (!compare_op(e.ops[k], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::And: {
      Value left = eval(*e.args[0], scope);
      return left.truthy() ? eval(*e.args[1], scope) : left;
    }
    case ExprKind::Or: {
      Value left = eval(*e.args[0], scope);
      return left.truthy() ? left : eval(*e.args[1], scope);
    }
    case ExprKind::CondExpr:
      if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined(std::string("the inline if-expression on line ") + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const ExprPtr& x : e.args) items.push_back(eval(*x, scope));
      return Value::list_of(std::move(items), e.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], scope);
        if (!key.is_string()) fail(std::string("dict keys must be strings in chat templates, got ") + type_name(key));
        d.set(key.s, eval(*e.args[k + 1], scope));
      }
      return Value::dict_of(std::move(d));
    }
  }
  return Value::none();
}

}  // namespace ga::chat
