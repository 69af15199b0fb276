// Recursive-descent parser for the Jinja subset chat templates use.
//
// The grammar and operator precedence follow jinja2's parser.py function by function (parse_condexpr ->
// parse_or -> parse_and -> parse_not -> parse_compare -> parse_math1 -> parse_concat -> parse_math2 -> parse_pow
// -> parse_unary -> primary/postfix/filters), because precedence quirks are behaviour: `not x is defined` is
// `not (x is defined)`, `a ~ b | trim` trims only b, `-x | abs` applies abs to -x. Nesting is bounded
// (kMaxDepth) so a hostile template gets an error instead of a stack overflow.
#include <cstring>

#include "runtime/chat/ast.h"
#include "runtime/chat/lexer.h"
#include "runtime/chat/text.h"

namespace ga::chat {

namespace {

// Nested expressions plus nested blocks. Real chat templates stay under ~20; the bound keeps the parser's and
// the interpreter's recursion (and so their stack use) small.
constexpr int kMaxDepth = 100;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  std::vector<StmtPtr> parse_all() {
    std::vector<StmtPtr> body = subparse({});
    if (cur().type != Tok::Eof) error(cur(), "unexpected tag");
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& advance() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Eof: return "end of template";
      case Tok::VarEnd: return "end of print statement '}}'";
      case Tok::BlockEnd: return "end of statement block '%}'";
      case Tok::VarBegin: return "'{{'";
      case Tok::BlockBegin: return "'{%'";
      case Tok::String: return "string literal";
      case Tok::Data: return "template text";
      default: return std::string("'") + t.text + "'";
    }
  }

  [[noreturn]] void error(const Token& t, const std::string& message, bool unsupported = false) const {
    throw ParseError(t.line, t.col, message, unsupported);
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(cur(), std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) error(cur(), std::string("expected a name, got ") + describe(cur()));
    return advance().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) error(cur(), std::string("expected end of statement block '%}', got ") + describe(cur()));
    advance();
  }

  struct DepthGuard {
    DepthGuard(Parser& p, const Token& at) : parser(p) {
      if (++parser.depth_ > kMaxDepth)
        parser.error(at, std::string("template nesting too deep (more than ") + std::to_string(kMaxDepth) + " levels)");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // ---- statements ----
  // Parses until EOF or a `{% name %}` with a name in `end_tags`; then the cursor is on that name.
  std::vector<StmtPtr> subparse(const std::vector<const char*>& end_tags) {
    std::vector<StmtPtr> body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (!end_tags.empty()) {
          std::string names;
          for (const char* n : end_tags) names += std::string(names.empty() ? "" : " or ") + "'" + n + "'";
          error(t, std::string("unexpected end of template, expected ") + names);
        }
        return body;
      }
      if (t.type == Tok::Data) {
        auto s = stmt(StmtKind::Data, t);
        s->text = advance().text;
        body.push_back(std::move(s));
      } else if (t.type == Tok::VarBegin) {
        auto s = stmt(StmtKind::Output, advance());
        s->expr = parse_tuple(true, {});
        if (cur().type != Tok::VarEnd) error(cur(), std::string("expected end of print statement '}}', got ") + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        const Token& name = peek();
        if (name.type != Tok::Name) error(name, std::string("expected a statement name after '{%', got ") + describe(name));
        for (const char* end : end_tags) {
          if (name.text == end) {
            advance();  // '{%'; the caller reads the name
            return body;
          }
        }
        advance();
        body.push_back(parse_statement());
      } else {
        error(t, std::string("unexpected ") + describe(t));
      }
    }
  }

  StmtPtr stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  StmtPtr parse_statement() {
    const Token& tag = cur();
    DepthGuard guard(*this, tag);
    const std::string name = tag.text;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "generation") {
      auto s = stmt(StmtKind::Block, advance());
      expect_block_end();
      s->body = subparse({"endgeneration"});
      advance();
      expect_block_end();
      return s;
    }
    if (name == "break" || name == "continue") {
      auto s = stmt(name == "break" ? StmtKind::Break : StmtKind::Continue, advance());
      if (loop_depth_ == 0) error(tag, std::string("'") + name + "' outside of a for loop");
      expect_block_end();
      return s;
    }
    if (name.rfind("end", 0) == 0 || name == "else" || name == "elif")
      error(tag, "unexpected '" + name + "' without a matching opening statement");
    static const char* const kKnownUnsupported[] = {"include", "import", "from",  "extends",    "block", "with",
                                                    "filter",  "raw",    "print", "autoescape", "do"};
    for (const char* n : kKnownUnsupported)
      if (name == n) error(tag, std::string("the '") + name + "' statement is not supported in chat templates", true);
    error(tag, std::string("unknown statement '") + name + "'", true);
  }

  StmtPtr parse_if() {
    auto s = stmt(StmtKind::If, advance());
    s->expr = parse_tuple(false, {});
    expect_block_end();
    s->body = subparse({"elif", "else", "endif"});
    const Token& t = cur();
    if (t.text == "elif") {
      s->else_body.push_back(parse_if());  // an elif chain is a nested if; it consumes the final endif
      return s;
    }
    advance();
    if (t.text == "else") {
      expect_block_end();
      s->else_body = subparse({"endif"});
      advance();
    }
    expect_block_end();
    return s;
  }

  std::vector<std::string> parse_targets(bool allow_namespace_attr, std::string* attr) {
    std::vector<std::string> names;
    const bool parens = skip_op("(");
    while (true) {
      names.push_back(expect_name());
      if (allow_namespace_attr && names.size() == 1 && !parens && is_op(".")) {
        advance();
        *attr = expect_name();
        return names;
      }
      if (!skip_op(",")) break;
      if (cur().type != Tok::Name) break;  // trailing comma
    }
    if (parens) expect_op(")");
    return names;
  }

  StmtPtr parse_for() {
    auto s = stmt(StmtKind::For, advance());
    s->targets = parse_targets(false, nullptr);
    if (!skip_name("in")) error(cur(), std::string("expected 'in' in for loop, got ") + describe(cur()));
    s->expr = parse_tuple(false, {"recursive"});
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) error(cur(), "recursive for loops are not supported in chat templates", true);
    expect_block_end();
    ++loop_depth_;
    s->body = subparse({"else", "endfor"});
    --loop_depth_;
    if (advance().text == "else") {
      expect_block_end();
      s->else_body = subparse({"endfor"});
      advance();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const Token& at = advance();
    std::string attr;
    std::vector<std::string> targets = parse_targets(true, &attr);
    if (skip_op("=")) {
      auto s = stmt(attr.empty() ? StmtKind::Set : StmtKind::SetAttr, at);
      s->targets = std::move(targets);
      if (!attr.empty()) s->targets.push_back(attr);
      s->expr = parse_tuple(true, {});
      expect_block_end();
      return s;
    }
    if (!attr.empty() || targets.size() != 1) error(cur(), "expected '=' in set statement");
    auto s = stmt(StmtKind::SetBlock, at);
    s->targets = std::move(targets);
    if (is_op("|")) {  // {% set x | filter %}: the filters apply to the captured text (a Literal placeholder)
      ExprPtr input = node(ExprKind::Literal, cur());
      s->expr = parse_filter_expr(std::move(input));
    }
    expect_block_end();
    s->body = subparse({"endset"});
    advance();
    expect_block_end();
    return s;
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      s.params.push_back(expect_name());
      s.defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
    }
    advance();
  }

  StmtPtr parse_macro() {
    auto s = stmt(StmtKind::Macro, advance());
    s->targets.push_back(expect_name());
    parse_params(*s);
    expect_block_end();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;  // break/continue do not cross a macro boundary
    s->body = subparse({"endmacro"});
    loop_depth_ = saved_loops;
    advance();
    if (cur().type == Tok::Name) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = stmt(StmtKind::CallBlock, advance());
    if (is_op("(")) parse_params(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) error(cur(), "expected a call after 'call'");
    expect_block_end();
    s->body = subparse({"endcall"});
    advance();
    expect_block_end();
    return s;
  }

  // ---- expressions ----
  bool is_tuple_end(const std::vector<const char*>& extra_end) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
    if (t.type == Tok::Op && t.text == ")") return true;
    for (const char* n : extra_end)
      if (t.type == Tok::Name && t.text == n) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::vector<const char*>& extra_end, bool explicit_parens = false) {
    const Token& start = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) error(start, std::string("expected an expression, got ") + describe(start));
    }
    auto e = node(ExprKind::Tuple, start);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this, cur());
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      auto e = node(ExprKind::CondExpr, advance());
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      e->args.push_back(std::move(test));
      e->args.push_back(std::move(expr));
      e->args.push_back(std::move(otherwise));
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, const Token& at, ExprPtr left, ExprPtr right, std::string op = {}) {
    auto e = node(kind, at);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& at = advance();
      left = binary(ExprKind::Or, at, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& at = advance();
      left = binary(ExprKind::And, at, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this, cur());
      auto e = node(ExprKind::Not, advance());
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        ops.push_back(advance().text);
      } else if (is_name("in")) {
        advance();
        ops.push_back("in");
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        advance();
        advance();
        ops.push_back("not in");
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = node(ExprKind::Compare, at);
    e->args.push_back(std::move(first));
    for (auto& x : operands) e->args.push_back(std::move(x));
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = advance();
      left = binary(ExprKind::Binary, at, std::move(left), parse_concat(), at.text);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& at = advance();
      left = binary(ExprKind::Binary, at, std::move(left), parse_math2(), "~");
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = advance();
      left = binary(ExprKind::Binary, at, std::move(left), parse_pow(), at.text);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = advance();
      left = binary(ExprKind::Binary, at, std::move(left), parse_unary(true), "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this, cur());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const ExprKind kind = is_op("-") ? ExprKind::Neg : ExprKind::Pos;
      e = node(kind, advance());
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
    switch (t.type) {
      case Tok::Name: {
        advance();
        auto e = node(ExprKind::Literal, t);
        if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else {
          e->kind = ExprKind::Name;
          e->name = t.text;
        }
        return e;
      }
      case Tok::String: {
        auto e = node(ExprKind::Literal, t);
        std::string s;
        while (cur().type == Tok::String) s += advance().text;  // adjacent literals concatenate
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Tok::Int:
      case Tok::Float: {
        advance();
        auto e = node(ExprKind::Literal, t);
        e->literal = t.type == Tok::Int ? Value::integer(t.int_value) : Value::number(t.float_value);
        return e;
      }
      case Tok::Op:
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto e = node(ExprKind::List, advance());
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          advance();
          return e;
        }
        if (t.text == "{") {
          auto e = node(ExprKind::Dict, advance());
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
          }
          advance();
          return e;
        }
        break;
      default: break;
    }
    error(t, std::string("unexpected ") + describe(t) + " in expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& at = advance();
        if (cur().type == Tok::Name) {
          auto g = node(ExprKind::GetAttr, at);
          g->name = advance().text;
          g->args.push_back(std::move(e));
          e = std::move(g);
        } else if (cur().type == Tok::Int) {
          auto g = node(ExprKind::GetItem, at);
          auto index = node(ExprKind::Literal, cur());
          index->literal = Value::integer(advance().int_value);
          g->args.push_back(std::move(e));
          g->args.push_back(std::move(index));
          e = std::move(g);
        } else {
          error(cur(), std::string("expected an attribute name after '.', got ") + describe(cur()));
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token& at = advance();  // '['
    DepthGuard guard(*this, at);
    ExprPtr parts[3];
    bool is_slice = false;
    int part = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        advance();
        is_slice = true;
        if (++part > 2) error(cur(), "too many ':' in subscript");
        continue;
      }
      if (parts[part]) error(cur(), std::string("expected ':' or ']' in subscript, got ") + describe(cur()));
      parts[part] = parse_expression(true);
      if (is_op(",")) error(cur(), "tuple subscripts are not supported in chat templates", true);
    }
    advance();
    if (!is_slice && !parts[0]) error(at, "empty subscript");
    auto e = node(is_slice ? ExprKind::Slice : ExprKind::GetItem, at);
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(parts[0]));
    if (is_slice) {
      e->args.push_back(std::move(parts[1]));
      e->args.push_back(std::move(parts[2]));
    }
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;  // e.args may already hold the callee or the filtered value
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) error(cur(), "*args and **kwargs in calls are not supported", true);
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string key = advance().text;
        advance();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) error(cur(), "positional argument after keyword argument");
        e.args.push_back(parse_expression(true));
      }
      first = false;
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::Call, cur());
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      advance();
      name += '.';
      name += expect_name();
    }
    return name;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        advance();
        const Token& at = cur();
        auto f = node(ExprKind::Filter, at);
        f->name = parse_dotted_name();
        if (!is_known_filter(f->name)) error(at, std::string("unknown filter '") + f->name + "'", true);
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        advance();
        const bool negated = skip_name("not");
        const Token& at = cur();
        auto t = node(ExprKind::Test, at);
        t->negated = negated;
        t->name = parse_dotted_name();
        if (!is_known_test(t->name)) error(at, std::string("unknown test '") + t->name + "'", true);
        t->args.push_back(std::move(e));
        const Token& next = cur();
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((next.type == Tok::Name || next.type == Tok::String || next.type == Tok::Int ||
                    next.type == Tok::Float || (next.type == Tok::Op && (next.text == "[" || next.text == "{"))) &&
                   !(next.type == Tok::Name && (next.text == "else" || next.text == "or" || next.text == "and"))) {
          // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses
          ExprPtr arg = parse_postfix(parse_primary());
          t->args.push_back(std::move(arg));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::vector<StmtPtr> parse_template(std::string_view source) { return Parser(lex_template(source)).parse_all(); }

}  // namespace ga::chat
