// Jinja lexer for chat templates (see lexer.h for the whitespace rules it replicates and why).
#include "runtime/chat/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "runtime/chat/text.h"

namespace ga::chat {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // jinja2 splits the source at \r\n, \r and \n, drops a final empty line (keep_trailing_newline=False) and
    // joins with \n: line endings are normalized everywhere, and one trailing newline disappears.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_.push_back(source[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;  // jinja2: did the previous match end with a newline (or is this the start)?
    while (pos < src_.size()) {
      const size_t tag = find_tag_start(pos);
      if (tag == std::string::npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[tag + 1];
      size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];

      std::string text = src_.substr(pos, tag - pos);
      if (sign == '-') {
        text = py_strip(text, nullptr, false, true);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: not for {{ }}
        const size_t nl = text.rfind('\n');
        const size_t line_begin = nl == std::string::npos ? 0 : nl + 1;
        if ((line_begin > 0 || line_starting) && line_begin < text.size() &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_begin), text.end(),
                        [](char c) { return is_ascii_space(c) && c != '\n'; }))
          text.resize(line_begin);
      }
      emit_data(pos, std::move(text));

      size_t end = kind == '#' ? skip_comment(tag, after) : lex_tag(tag, after, kind);
      line_starting = end > 0 && src_[end - 1] == '\n';
      pos = end;
    }
    Token eof;
    eof.type = Tok::Eof;
    set_pos(eof, src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void set_pos(Token& t, size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    t.line = static_cast<int>(line_index + 1);
    t.col = static_cast<int>(offset - line_starts_[line_index] + 1);
  }

  [[noreturn]] void error(size_t offset, const std::string& message) const {
    Token t;
    set_pos(t, offset);
    throw ParseError(t.line, t.col, message);
  }

  void emit_data(size_t offset, std::string text) {
    if (text.empty()) return;
    Token t;
    t.type = Tok::Data;
    t.text = std::move(text);
    set_pos(t, offset);
    tokens_.push_back(std::move(t));
  }

  void emit(Tok type, size_t offset, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    set_pos(t, offset);
    tokens_.push_back(std::move(t));
  }

  size_t skip_whitespace(size_t p) const {
    while (p < src_.size() && is_ascii_space(src_[p])) ++p;
    return p;
  }

  // Returns the offset after the comment and its trailing whitespace handling.
  size_t skip_comment(size_t tag, size_t after) const {
    const size_t close = src_.find("#}", after);
    if (close == std::string::npos) error(tag, "missing end of comment tag '#}'");
    size_t end = close + 2;
    const char before = close > after ? src_[close - 1] : 0;
    if (before == '-') return skip_whitespace(end);
    if (before != '+' && end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
    return end;
  }

  // Lexes `{{ ... }}` or `{% ... %}` from the opening delimiter at `tag`; returns the offset after it.
  size_t lex_tag(size_t tag, size_t after, char kind) {
    emit(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, tag);
    std::string brackets;  // expected closing brackets
    size_t p = after;
    while (true) {
      if (p >= src_.size()) error(tag, kind == '{' ? "unexpected end of template: '{{' is never closed with '}}'"
                                                    : "unexpected end of template: '{%' is never closed with '%}'");
      if (brackets.empty()) {
        const std::string_view rest = std::string_view(src_).substr(p);
        if (kind == '%') {
          if (rest.substr(0, 3) == "+%}") return close_tag(Tok::BlockEnd, p, p + 3);
          if (rest.substr(0, 3) == "-%}") return close_tag(Tok::BlockEnd, p, skip_whitespace(p + 3));
          if (rest.substr(0, 2) == "%}") {
            size_t end = p + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
            return close_tag(Tok::BlockEnd, p, end);
          }
        } else {
          if (rest.substr(0, 3) == "-}}") return close_tag(Tok::VarEnd, p, skip_whitespace(p + 3));
          if (rest.substr(0, 2) == "}}") return close_tag(Tok::VarEnd, p, p + 2);
        }
      }
      const char c = src_[p];
      if (is_ascii_space(c)) {
        ++p;
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (is_name_start(c)) {
        size_t e = p;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        emit(Tok::Name, p, src_.substr(p, e - p));
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        p = lex_operator(p, brackets);
      }
    }
  }

  size_t close_tag(Tok type, size_t at, size_t end) {
    emit(type, at);
    return end;
  }

  size_t lex_number(size_t p) {
    auto digits = [&](size_t q) {  // digits with single underscores between them, as Python allows
      while (q < src_.size() && (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1]))))
        ++q;
      return q;
    };
    size_t e = digits(p);
    bool is_float = false;
    // jinja2's float rule does not apply right after a '.', so `x.0.1` stays attribute access.
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string text = src_.substr(p, e - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t;
    set_pos(t, p);
    t.text = text;
    errno = 0;
    if (is_float) {
      t.type = Tok::Float;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = Tok::Int;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) error(p, std::string("integer literal ") + text + " does not fit in 64 bits");
    }
    tokens_.push_back(std::move(t));
    return e;
  }

  size_t lex_string(size_t p) {
    const char quote = src_[p];
    size_t e = p + 1;
    while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) error(p, std::string("unterminated string literal starting with ") + quote);
    Token t;
    t.type = Tok::String;
    set_pos(t, p);
    std::string message;
    if (!unescape_string_literal(std::string_view(src_).substr(p + 1, e - p - 1), t.text, message)) error(p, message);
    tokens_.push_back(std::move(t));
    return e + 1;
  }

  size_t lex_operator(size_t p, std::string& brackets) {
    static const char* const kTwoChar[] = {"//", "**", "==", "!=", ">=", "<=std::string("};
    for (const char* op : kTwoChar) {
      if (src_.compare(p, 2, op) == 0) {
        emit(Tok::Op, p, op);
        return p + 2;
      }
    }
    const char c = src_[p];
    if (std::string_view(")+-/*%~[](){}=<>.:|,;").find(c) == std::string_view::npos)
      error(p, std::string("unexpected character '") + c + "' in tag");
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty() || brackets.back() != c) error(p, std::string("unexpected '") + c + "'");
      brackets.pop_back();
    }
    emit(Tok::Op, p, std::string(1, c));
    return p + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source) { return Lexer(source).run(); }

}  // namespace ga::chat
