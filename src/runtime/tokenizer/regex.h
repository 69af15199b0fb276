// A small regex engine over Unicode code points, for pre-tokenizer split patterns.
//
// It supports the syntax that Hugging Face tokenizers' Split pre-tokenizers and llama.cpp's
// pre-tokenizer table use: literals and escapes (\r \n \t \s \S \d \D \w \W \\ ...), classes
// ([...], negated, ranges, \p{L} \p{N} \p{Lu} ... \P{..} and \p{Han}-style scripts inside and
// outside classes), groups ((...), (?:...), (?i:...) case-insensitive), alternation, quantifiers
// (? * + {n} {n,} {n,m}, lazy and possessive forms), lookahead (?=...) (?!...), anchors ^ $ and \A \z.
// Unsupported syntax throws ga::Error(Unsupported) naming the construct, never misbehaves silently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ga::text {

// Decodes UTF-8; each invalid byte becomes U+FFFD (as llama.cpp's unicode_cpts_from_utf8 does for
// the tokenizer's purposes, the original bytes are kept by the caller through offsets).
std::u32string utf8_to_codepoints(std::string_view text);
// Same, and fills byte_offsets (if not null) with the byte offset of each code point plus a final entry
// text.size(), so code-point spans from find_all map back to the exact original bytes.
std::u32string utf8_to_codepoints(std::string_view text, std::vector<size_t>* byte_offsets);
std::string codepoint_to_utf8(char32_t cp);
std::string codepoints_to_utf8(std::u32string_view cps);

class Regex {
 public:
  explicit Regex(std::string_view pattern);  // throws ga::Error(Unsupported/InvalidArgument)
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Leftmost-first (Perl/Oniguruma semantics) non-overlapping matches in text, as [begin, end)
  // code-point offsets. An empty match is reported as [p, p) and the search resumes at p + 1.
  // As in Oniguruma, ^ and $ are line anchors (next to '\n') and '.' does not match '\n'.
  // Thread-safe: a Regex can be shared by threads calling find_all concurrently.
  std::vector<std::pair<size_t, size_t>> find_all(std::u32string_view text) const;

  const std::string& pattern() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Unicode general-category queries (data generated from the Unicode Character Database).
bool is_letter(char32_t cp);       // \p{L}
bool is_number(char32_t cp);       // \p{N}
bool is_whitespace(char32_t cp);   // \s (White_Space property)
bool is_punctuation(char32_t cp);  // \p{P}
bool is_symbol(char32_t cp);       // \p{S}
bool is_mark(char32_t cp);         // \p{M}
char32_t to_lower(char32_t cp);    // simple lowercase mapping

}  // namespace ga::text
