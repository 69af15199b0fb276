// See json_fast.h. A recursive-descent reader over the subset; every return of false declines the whole body.
#include "server/json_fast.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ga::server {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;            // deeper bodies go to nlohmann (its parser keeps its stack on the heap)
constexpr long kMaxIntegerDigits = 18;   // < 10^18: fits int64 and uint64, no overflow rule to copy
constexpr long kMaxNumberChars = 64;     // longer numbers (lots of digits) go to nlohmann

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class FastJsonReader {
 public:
  FastJsonReader(std::string_view text, FastIntegerField* integers)
      : p_(text.data()), end_(text.data() + text.size()), integers_(integers) {}

  bool document(json& out) {
    skip_whitespace();
    if (p_ == end_ || *p_ != '{') return false;
    if (!object(out, 1)) return false;
    skip_whitespace();
    return p_ == end_;  // nothing but whitespace may follow, as for nlohmann
  }

 private:
  void skip_whitespace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool value(json& out, int depth) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '{': return object(out, depth + 1);
      case '[': return array(out, depth + 1);
      case '"': {
        std::string s;
        if (!string(s)) return false;
        out = std::move(s);
        return true;
      }
      case 't': return literal("true", json(true), out);
      case 'f': return literal("false", json(false), out);
      case 'n': return literal("null", json(nullptr), out);
      default: return number(out);
    }
  }

  // What follows an object's or an array's opening byte: `close` at once, or elements separated by ',' up to
  // `close`, each read by `element` from its first non-blank byte (one loop for both, so they cannot drift apart).
  template <class Element>
  bool separated(char close, Element&& element) {
    ++p_;  // '{' or '['
    skip_whitespace();
    if (p_ < end_ && *p_ == close) {
      ++p_;
      return true;
    }
    while (true) {
      skip_whitespace();
      if (!element()) return false;
      skip_whitespace();
      if (p_ == end_) return false;
      if (*p_ == close) {
        ++p_;
        return true;
      }
      if (*p_++ != ',') return false;
    }
  }

  bool object(json& out, int depth) {
    if (depth > kMaxDepth) return false;
    out = json::object();
    return separated('}', [&] {
      std::string key;
      if (p_ == end_ || *p_ != '"' || !string(key)) return false;
      skip_whitespace();
      if (p_ == end_ || *p_ != ':') return false;
      ++p_;
      skip_whitespace();
      const bool watched = depth == 1 && integers_ != nullptr && key == integers_->key;
      const char* value_start = p_;
      if (watched && integer_array(integers_->values)) {
        integers_->present = true;
        out.erase(key);  // an earlier value of the same key: the last one wins, as in nlohmann's DOM
        return true;
      }
      if (watched) {
        integers_->present = false;  // a later value of the key replaces an earlier array of integers
        p_ = value_start;            // not an array of integers after all: read it into the DOM
      }
      json item;
      if (!value(item, depth)) return false;
      out[key] = std::move(item);  // a key given twice keeps its last value, as nlohmann's DOM
      return true;
    });
  }

  bool array(json& out, int depth) {
    if (depth > kMaxDepth) return false;
    out = json::array();
    return separated(']', [&] {
      json item;
      if (!value(item, depth)) return false;
      out.push_back(std::move(item));
      return true;
    });
  }

  // A non-empty array of integers (the subset's: at most 18 digits, no fraction or exponent) into `values`; false
  // (p_ left anywhere) for anything else, including an empty array and a malformed one.
  bool integer_array(std::vector<int64_t>& values) {
    if (p_ == end_ || *p_ != '[') return false;
    ++p_;
    values.clear();
    values.reserve(static_cast<size_t>(end_ - p_) / 2);  // at most one id per 2 bytes ("1,")
    while (true) {
      skip_whitespace();
      int64_t v = 0;
      if (!integer(v)) return false;
      values.push_back(v);
      skip_whitespace();
      if (p_ == end_) return false;
      if (*p_ == ']') {
        ++p_;
        return true;
      }
      if (*p_++ != ',') return false;
    }
  }

  // -?(0|[1-9][0-9]*) not followed by a fraction or an exponent (those are numbers of another type in the DOM).
  bool integer(int64_t& out) {
    const bool negative = p_ < end_ && *p_ == '-';
    if (negative) ++p_;
    const char* digits = p_;
    if (p_ == end_ || !is_digit(*p_)) return false;
    if (*p_ == '0') {
      ++p_;  // a leading zero stands alone, as in number()
    } else {
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (p_ - digits > kMaxIntegerDigits) return false;
    if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
    uint64_t v = 0;
    for (const char* d = digits; d < p_; ++d) v = v * 10 + static_cast<uint64_t>(*d - '0');
    out = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
    return true;
  }

  // Printable ASCII and the simple escapes; \u and bytes >= 0x80 (UTF-8 to validate) are declined.
  bool string(std::string& out) {
    ++p_;  // '"'
    const char* run = p_;
    while (p_ < end_) {
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        out.append(run, p_);
        ++p_;
        return true;
      }
      if (c == '\\') {
        out.append(run, p_);
        if (++p_ == end_) return false;
        switch (*p_) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          default: return false;
        }
        run = ++p_;
        continue;
      }
      if (c < 0x20 || c >= 0x80) return false;  // control characters are invalid JSON; UTF-8 goes to nlohmann
      ++p_;
    }
    return false;
  }

  bool literal(std::string_view word, json value, json& out) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    p_ += word.size();
    out = std::move(value);
    return true;
  }

  // JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number(json& out) {
    const char* start = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    if (p_ == end_ || !is_digit(*p_)) return false;
    if (*p_ == '0') {
      ++p_;  // a leading zero stands alone ("01" leaves '1' behind, which the caller refuses)
    } else {
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    const char* integer_end = p_;
    bool integral = true;
    if (p_ < end_ && *p_ == '.') {
      integral = false;
      ++p_;
      if (p_ == end_ || !is_digit(*p_)) return false;
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) return false;
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (integral) {
      const char* digits = start + (negative ? 1 : 0);
      if (integer_end - digits > kMaxIntegerDigits) return false;
      uint64_t v = 0;
      for (const char* d = digits; d < integer_end; ++d) v = v * 10 + static_cast<uint64_t>(*d - '0');
      // nlohmann's types: a number without a sign is unsigned, one with a minus is signed ("-0" too).
      if (negative) {
        out = json(-static_cast<int64_t>(v));
      } else {
        out = json(v);
      }
      return true;
    }
    const long n = p_ - start;
    if (n > kMaxNumberChars) return false;
    char text[kMaxNumberChars + 1];
    std::memcpy(text, start, static_cast<size_t>(n));
    text[n] = '\0';
    char* parsed_end = nullptr;
    const double d = std::strtod(text, &parsed_end);  // nlohmann converts with strtod too
    if (parsed_end != text + n || !std::isfinite(d)) return false;  // overflow: nlohmann's error
    out = json(d);
    return true;
  }

  const char* p_;
  const char* end_;
  FastIntegerField* integers_;  // nullptr: every value goes into the DOM
};

}  // namespace

std::optional<nlohmann::json> parse_json_object_fast(std::string_view text, FastIntegerField* integers) {
  if (integers != nullptr) {
    integers->present = false;
    integers->values.clear();
  }
  json out;
  if (!FastJsonReader(text, integers).document(out)) {
    if (integers != nullptr) integers->present = false;
    return std::nullopt;
  }
  return out;
}

}  // namespace ga::server
