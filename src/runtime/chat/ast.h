// Syntax tree of a parsed chat template.
//
// Two node types (expressions and statements), each a tagged struct with child vectors rather than a class per
// construct: the interpreter is one switch per node type, and the ~20 constructs chat templates use stay easy
// to see in one place. Every node keeps its line:col so runtime errors can point into the template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/chat/value.h"

namespace ga::chat {

enum class ExprKind : uint8_t {
  Literal,   // literal
  Name,      // name
  GetAttr,   // args[0].name
  GetItem,   // args[0][args[1]]
  Slice,     // args[0][args[1]:args[2]:args[3]], missing parts are null
  Call,      // args[0](args[1:], kwargs)
  Filter,    // args[0] | name(args[1:], kwargs)
  Test,      // args[0] is [not] name(args[1:], kwargs)
  Not,       // not args[0]
  Neg,       // -args[0]
  Pos,       // +args[0]
  Binary,    // args[0] name args[1] for + - * / // % ** ~
  Compare,   // args[0] ops[0] args[1] ops[1] args[2] ... (Python chains)
  And,       // args[0] and args[1]
  Or,        // args[0] or args[1]
  CondExpr,  // args[1] if args[0] else args[2] (args[2] null: undefined)
  List,      // [args...]
  Tuple,     // (args...)
  Dict,      // {args[0]: args[1], args[2]: args[3], ...}
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::Literal;
  int line = 0, col = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

enum class StmtKind : uint8_t {
  Data,       // text
  Output,     // {{ expr }}
  If,         // if expr: body else else_body (elif is a nested If in else_body)
  For,        // for targets in expr [if cond]: body else else_body
  Set,        // set targets = expr (several targets unpack a sequence)
  SetAttr,    // set targets[0].targets[1] = expr (namespace attribute)
  SetBlock,   // set targets[0] %}body{% endset, through the filter chain in expr if any
  Macro,      // macro targets[0](params = defaults): body
  CallBlock,  // call(params) expr: body, passed to the call as `caller`
  Block,      // body in the enclosing scope ({% generation %})
  Break,
  Continue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Stmt {
  StmtKind kind = StmtKind::Data;
  int line = 0, col = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::vector<StmtPtr> body, else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when it has none
};

// Parses a template into statements; throws ParseError with line:col. Filter and test names are checked here,
// as jinja2 checks them when it compiles the template.
std::vector<StmtPtr> parse_template(std::string_view source);

// Known filter and test names (builtins.cpp).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace ga::chat
