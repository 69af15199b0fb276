// Tree-walking evaluator for parsed chat templates.
//
// Scoping follows jinja2, checked against it: `set` writes to the current scope; `if` has no scope of its own;
// every for-loop iteration starts a fresh scope over the enclosing one (so assignments inside a loop vanish at
// the end of each iteration, which is why templates use namespace()); macros run in a scope over their
// defining one. Everything a hostile template could blow up is bounded (Limits): output and string sizes,
// list sizes, evaluation steps (so `range(100000)` nested in itself stops with an error instead of hanging),
// and recursion depth (nested evaluation and macro calls), so a bad template costs an error, not the server.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/chat/ast.h"
#include "runtime/chat/value.h"

namespace ga::chat {

struct Limits {
  size_t max_output_bytes = size_t{1} << 20;  // the rendered prompt, and any captured block or macro output
  size_t max_string_bytes = size_t{1} << 20;  // any string value built by the template
  size_t max_list_items = size_t{1} << 20;    // any list built by the template
  uint64_t max_steps = 5'000'000;             // statements + expression nodes + loop iterations (~1 s)
  int max_depth = 400;                        // nested evaluation frames (expressions, blocks, macro calls)
};

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  explicit Scope(std::shared_ptr<Scope> p = nullptr) : parent(std::move(p)) {}
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v);
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  explicit Interpreter(const Limits& limits) : limits_(limits) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Runs a whole template; `globals` holds the render variables and builtins.
  std::string render(const std::vector<StmtPtr>& program, const ScopePtr& globals);

  Value eval(const Expr& e, const ScopePtr& scope);
  Value call(const Value& callee, CallArgs& args);
  Value call_block(const Stmt& def, const std::string& name, const std::weak_ptr<Scope>& closure, CallArgs& args);

  // Objects that can form reference cycles (a namespace holding itself, a macro stored in its own scope) are
  // registered here and broken up when the render ends, so a hostile template cannot leak memory.
  void track_namespace(const std::shared_ptr<Dict>& d) { namespaces_.push_back(d); }
  void keep_scope_alive(const ScopePtr& scope) { macro_scopes_.push_back(scope); }

  void step();                                  // charges one evaluation step
  void check_string_size(size_t bytes) const;   // any string the template builds
  void check_list_size(size_t items) const;     // any list the template builds
  const Limits& limits() const { return limits_; }

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec(const std::vector<StmtPtr>& body, const ScopePtr& scope, std::string& out);
  Flow exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  void assign(const std::vector<std::string>& targets, const Value& v, Scope& scope);
  void append_output(std::string& out, const std::string& text) const;
  Value eval_node(const Expr& e, const ScopePtr& scope);
  Value eval_filter_chain(const Expr& e, const ScopePtr& scope, const Value& input);
  void eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& args);

  struct DepthGuard {
    explicit DepthGuard(Interpreter& in);
    ~DepthGuard() { --interp.depth_; }
    Interpreter& interp;
  };

  Limits limits_;
  std::vector<std::weak_ptr<Dict>> namespaces_;
  std::vector<ScopePtr> macro_scopes_;  // scopes that macros close over (macros hold them weakly)
  uint64_t steps_ = 0;
  int depth_ = 0;
};

// Operators and comparisons with Python's semantics (builtins.cpp).
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
bool compare_op(const std::string& op, const Value& a, const Value& b);

// jinja2's getattr (attribute, then item) and getitem (item, then attribute) on sandboxed values.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step);

Value apply_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);

// range, dict, namespace, raise_exception, strftime_now.
void add_builtin_globals(Scope& scope);

}  // namespace ga::chat
