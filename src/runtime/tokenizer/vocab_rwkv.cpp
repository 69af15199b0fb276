// The RWKV World vocabulary (rwkv_vocab_v20230424.txt, BlinkDL's ChatRWKV tokenizer, as rwkv.cpp ships it).
//
// One token per line: `<id> <Python literal> <byte length>`, the literal a str ('...' or "...": its UTF-8
// bytes) or a bytes b'...' (raw bytes, for tokens that are not valid UTF-8 on their own), with Python's
// repr escapes (\\ \' \" \n \r \t \xHH \uHHHH \UHHHHHHHH). Id 0 is not in the file: it is the end of text.
// Encoding is a greedy longest match over the text's bytes (Tokenizer, VocabType::RwkvWorld).
#include <cstdio>
#include <string>

#include "core/mapped_file.h"
#include "gpu_accel/error.h"
#include "gpu_accel/tokenizer.h"
#include "runtime/tokenizer/unicode.h"

namespace ga {
namespace {

// The bytes of a Python str or bytes literal (the whole of `lit`); InvalidFormat naming the line otherwise.
std::string parse_literal(std::string_view lit, const std::string& where) {
  const bool is_bytes = !lit.empty() && lit[0] == 'b';
  if (is_bytes) lit.remove_prefix(1);
  GA_CHECK(lit.size() >= 2 && (lit[0] == '\'' || lit[0] == '"') && lit.back() == lit[0], InvalidFormat, where,
           ": not a quoted literal");
  const std::string_view body = lit.substr(1, lit.size() - 2);
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    GA_CHECK(i + 1 < body.size(), InvalidFormat, where, ": a literal ends in a backslash");
    const char e = body[++i];
    const auto hex = [&](size_t digits) {
      GA_CHECK(i + digits < body.size(), InvalidFormat, where, ": a short \\", e, " escape");
      uint32_t v = 0;
      for (size_t k = 1; k <= digits; ++k) {
        const int d = text::hex_digit_value(body[i + k]);
        GA_CHECK(d >= 0, InvalidFormat, where, ": a bad \\", e, " escape");
        v = v * 16 + static_cast<uint32_t>(d);
      }
      i += digits;
      return v;
    };
    switch (e) {
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'x': {
        const uint32_t v = hex(2);
        if (is_bytes) {
          out += static_cast<char>(v);
        } else {
          text::append_utf8(out, v);  // in a str, \xHH is the code point U+00HH
        }
        break;
      }
      case 'u':
      case 'U': {
        GA_CHECK(!is_bytes, InvalidFormat, where, ": \\", e, " in a bytes literal");
        const uint32_t v = hex(e == 'u' ? 4 : 8);
        GA_CHECK(v <= 0x10FFFF, InvalidFormat, where, ": code point out of range");
        text::append_utf8(out, v);
        break;
      }
      default: GA_THROW(InvalidFormat, where, ": unknown escape \\", e);
    }
  }
  return out;
}

}  // namespace

Vocab Vocab::from_rwkv_world(const std::string& path) {
  const std::shared_ptr<MappedFile> file = MappedFile::open(path);
  const std::span<const uint8_t> bytes = file->bytes();
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  Vocab v;
  v.type = VocabType::RwkvWorld;
  v.add_space_prefix = false;
  v.tokens.assign(1, "<|endoftext|>");
  v.token_types.assign(1, TokenType::Control);
  v.eos_id = 0;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const size_t first = line.find(' ');
    const size_t last = line.rfind(' ');
    GA_CHECK(first != std::string_view::npos && last > first, InvalidFormat, where, ": expected '<id> <literal> <length>'");
    int64_t id = 0, length = 0;
    try {
      id = std::stoll(std::string(line.substr(0, first)));
      length = std::stoll(std::string(line.substr(last + 1)));
    } catch (const std::exception&) {
      GA_THROW(InvalidFormat, where, ": the id or the length is not a number");
    }
    const std::string token = parse_literal(line.substr(first + 1, last - first - 1), where);
    GA_CHECK(static_cast<int64_t>(token.size()) == length, InvalidFormat, where, ": the token has ", token.size(),
             " bytes, the line says ", length);
    GA_CHECK(id == static_cast<int64_t>(v.tokens.size()), InvalidFormat, where, ": id ", id, " out of order (expected ",
             v.tokens.size(), ")");
    GA_CHECK(!token.empty(), InvalidFormat, where, ": an empty token");
    v.tokens.push_back(token);
    v.token_types.push_back(TokenType::Normal);
  }
  GA_CHECK(v.tokens.size() > 256, InvalidFormat, path, ": ", v.tokens.size() - 1, " tokens; a World vocabulary has",
           " every byte and more");
  return v;
}

}  // namespace ga
