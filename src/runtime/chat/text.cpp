// Python string semantics over UTF-8 (see text.h for why these live apart from the interpreter).
#include "runtime/chat/text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ga::chat {

namespace {

constexpr char32_t kReplacementChar = 0xFFFD;

bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char to_upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }
char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Characters Python's repr() escapes although they are not control characters (str.isprintable() is false
// for separators other than ' ' and for format characters).
bool repr_escapes(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return true;
  if (is_python_space(cp)) return cp != ' ';
  return (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x2064) ||
         cp == 0xFEFF || (cp >= 0xD800 && cp <= 0xDFFF);
}

}  // namespace

std::u32string utf8_to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + static_cast<size_t>(len) > s.size()) {
      out.push_back(kReplacementChar);
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 0x2) ok = false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (!ok) {
      out.push_back(kReplacementChar);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string u32_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(out, cp);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_python_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::u32string cps = utf8_to_u32(s);
  const std::u32string set = chars ? utf8_to_u32(*chars) : std::u32string();
  auto strippable = [&](char32_t cp) { return chars ? set.find(cp) != std::u32string::npos : is_python_space(cp); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strippable(cps[b])) ++b;
  if (right)
    while (e > b && strippable(cps[e - 1])) --e;
  return u32_to_utf8(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    parts.emplace_back(s.substr(pos));
    return parts;
  }
  const std::u32string cps = utf8_to_u32(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_python_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t e = cps.size();  // the rest, with trailing whitespace removed as Python does
      while (e > i && is_python_space(cps[e - 1])) --e;
      parts.push_back(u32_to_utf8(std::u32string_view(cps).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !is_python_space(cps[j])) ++j;
    parts.push_back(u32_to_utf8(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.emplace_back(s.substr(start, i - start));
      i += (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
      start = i;
    } else {
      ++i;
    }
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` between every character and at both ends
    const std::u32string cps = utf8_to_u32(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) append_utf8(out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = to_upper(c);
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = to_lower(c);
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = to_upper(out[0]);
  return out;
}

std::string py_str_title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    const bool non_ascii = (static_cast<unsigned char>(c) & 0x80) != 0;  // treated as a cased letter
    if (is_ascii_alpha(c)) {
      c = previous_cased ? to_lower(c) : to_upper(c);
      previous_cased = true;
    } else {
      previous_cased = non_ascii;
    }
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // Jinja: "".join(item[0].upper() + item[1:].lower() for item in re.split(r"([-\s({\[<]+)", s) if item)
  auto separator = [](char32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_python_space(cp);
  };
  const std::u32string cps = utf8_to_u32(s);
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    const bool sep = separator(cps[i]);
    size_t j = i;
    while (j < cps.size() && separator(cps[j]) == sep) ++j;
    const std::string item = u32_to_utf8(std::u32string_view(cps).substr(i, j - i));
    out += ascii_upper(item.substr(0, 1)) + ascii_lower(item.substr(1));
    i = j;
  }
  return out;
}

std::string py_repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8_to_u32(s)) {
    char buf[16];
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (repr_escapes(cp)) {
      std::snprintf(buf, sizeof buf, cp <= 0xFF ? "\\x%02x" : "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      append_utf8(out, cp);
    }
  }
  out.push_back(quote);
  return out;
}

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  for (char32_t cp : utf8_to_u32(s)) {
    char buf[16];
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {  // a surrogate pair, as Python's json writes it
            const char32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                          static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          }
          out += buf;
        } else {
          append_utf8(out, cp);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form ("d.ddde±x"), then laid out the way Python's repr does.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  const int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += std::string(".") + digits.substr(1);
    std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += buf;
  } else if (decpt <= 0) {
    out += std::string("0.") + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

bool unescape_string_literal(std::string_view body, std::string& out, std::string& error) {
  out.clear();
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          const int h = i + 1 + k < body.size() ? text::hex_digit_value(body[i + 1 + k]) : -1;
          if (h < 0) {
            error = std::string("truncated \\") + e + " escape in string literal";
            return false;
          }
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10FFFF) {
          error = "\\U escape beyond U+10FFFF in string literal";
          return false;
        }
        i += n;
        append_utf8(out, cp);
        break;
      }
      case 'N':
        error = "\\N{...} escapes are not supported in string literals";
        return false;
      default:
        if (e >= '0' && e <= '7') {  // up to three octal digits
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          append_utf8(out, cp);
        } else {  // unknown escapes stay as written, as in Python
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return true;
}

}  // namespace ga::chat
