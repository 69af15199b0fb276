// Python string semantics over UTF-8, for the chat-template interpreter.
//
// Chat templates are Jinja, whose strings are Python strings: lengths, indexes and slices count code points,
// strip()/split() know Unicode whitespace, and string literals follow Python's escape rules. Values here stay
// UTF-8 (what the rest of the engine uses); the helpers decode to code points only where Python would count
// them. Case mapping covers ASCII only: templates apply upper/lower/title to role names and keywords, and a
// full Unicode case table is not worth its size here (documented in chat.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/unicode.h"

namespace ga::chat {

// Concatenates strings by appending (g++ 12's -Wrestrict misfires on `"literal" + f()` at -O3).
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  ((out += parts), ...);
  return out;
}

std::u32string utf8_to_u32(std::string_view s);  // invalid bytes become U+FFFD, like Python's "replace"
std::string u32_to_utf8(std::u32string_view s);
using ga::text::append_utf8;  // the tokenizer's encoder (runtime/tokenizer/unicode.h)
size_t utf8_length(std::string_view s);  // number of code points

bool is_python_space(char32_t cp);  // str.isspace()

// str.strip/lstrip/rstrip; `chars` is nullptr for whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1): sep nullptr splits on whitespace runs and drops empty parts.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);

std::string ascii_upper(std::string_view s);
std::string ascii_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // first character upper, the rest lower
std::string py_str_title(std::string_view s);   // str.title(): each run of letters starts upper-case
std::string jinja_title(std::string_view s);    // the |title filter: words split at [-\s({\[<]+

// Python repr() of a string ('...' or "..." as Python picks, with its escapes).
std::string py_repr_string(std::string_view s);
// JSON string literal as json.dumps(ensure_ascii=False) writes it.
std::string json_quote(std::string_view s, bool ensure_ascii);

// Python repr() of a float (shortest round-trip digits, 'e' notation outside 1e-4 <= |x| < 1e16).
std::string py_float_repr(double v);

// Decodes the body of a Jinja string literal (between the quotes) like Python's unicode-escape.
// Returns false with `error` set for a malformed escape (truncated \x, \u, \U, or \N{...}).
bool unescape_string_literal(std::string_view body, std::string& out, std::string& error);

}  // namespace ga::chat
