// Jinja lexer for chat templates, with the whitespace rules Hugging Face renders them with.
//
// HF compiles chat templates with trim_blocks=True and lstrip_blocks=True, and jinja2 drops one trailing
// newline of the source. Those rules decide most of the whitespace in a rendered prompt, so this lexer follows
// jinja2's own lexer step by step rather than a simplified reading of the docs:
//  - `{%-`/`{{-`/`{#-` strip all whitespace before the tag; `-%}`/`-}}`/`-#}` all whitespace after it;
//  - trim_blocks: one newline right after `%}` or `#}` is dropped (`+%}` keeps it);
//  - lstrip_blocks: spaces and tabs between the start of a line and `{%`/`{#` are dropped (`{%+` keeps them),
//    where "start of a line" also covers text that follows a tag whose match ended in a newline;
//  - inside a tag, an end marker only counts while brackets are balanced (`{{ {'a': {'b': 1}} }}`).
// The output is one flat token stream: data, tag delimiters and expression tokens, each with line:col.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ga::chat {

// A template that cannot be parsed. `unsupported`: valid Jinja this interpreter does not implement.
struct ParseError : std::runtime_error {
  ParseError(int line_, int col_, const std::string& message, bool unsupported_ = false)
      : std::runtime_error(message), line(line_), col(col_), unsupported(unsupported_) {}
  int line, col;
  bool unsupported;
};

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type = Tok::Eof;
  std::string text;  // Data/Name/Op text; String: the decoded value
  int64_t int_value = 0;
  double float_value = 0;
  int line = 0, col = 0;
};

std::vector<Token> lex_template(std::string_view source);

}  // namespace ga::chat
