// Typed Unicode queries for the tokenizer: general category, White_Space, script, case mappings.
//
// The data comes from the generated run tables in unicode_data.cpp (Unicode Character Database, see
// tools/gen_unicode_tables.py). Categories are asked for once per code point per regex step, so the
// Basic Multilingual Plane gets a 64 KiB lookup table built on first use; other planes binary-search the
// runs. Categories are also exposed as bit masks so a regex class like [^\s\p{L}\p{N}] tests one AND.
//
// The UTF-8 decoder and encoder every part of the tokenizer shares live here too, inline because the
// regex front end, the pre-tokenizer and the NFC quick check call them once per code point of the text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ga::text {

// Order fixed by tools/gen_unicode_tables.py (CATEGORIES); Cn (unassigned) is 0.
enum class GeneralCategory : uint8_t {
  // clang-format off
  Cn, Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe,
  Pi, Pf, Po, Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Cs, Co, kCount
  // clang-format on
};

using CategoryMask = uint32_t;

constexpr CategoryMask category_bit(GeneralCategory c) { return CategoryMask{1} << static_cast<unsigned>(c); }

template <typename... Cs>
constexpr CategoryMask category_bits(Cs... cs) {
  return (category_bit(cs) | ...);
}

namespace category_masks {
using GC = GeneralCategory;
constexpr CategoryMask kLetter = category_bits(GC::Lu, GC::Ll, GC::Lt, GC::Lm, GC::Lo);
constexpr CategoryMask kCasedLetter = category_bits(GC::Lu, GC::Ll, GC::Lt);
constexpr CategoryMask kMark = category_bits(GC::Mn, GC::Mc, GC::Me);
constexpr CategoryMask kNumber = category_bits(GC::Nd, GC::Nl, GC::No);
constexpr CategoryMask kPunctuation = category_bits(GC::Pc, GC::Pd, GC::Ps, GC::Pe, GC::Pi, GC::Pf, GC::Po);
constexpr CategoryMask kSymbol = category_bits(GC::Sm, GC::Sc, GC::Sk, GC::So);
constexpr CategoryMask kSeparator = category_bits(GC::Zs, GC::Zl, GC::Zp);
constexpr CategoryMask kOther = category_bits(GC::Cc, GC::Cf, GC::Cs, GC::Co, GC::Cn);
constexpr CategoryMask kAll = (CategoryMask{1} << static_cast<unsigned>(GC::kCount)) - 1;
// \w as Oniguruma defines it for Unicode: letters, marks, decimal numbers... we follow the brief of the
// pre-tokenizers (all numbers) plus connector punctuation (the underscore).
constexpr CategoryMask kWord = kLetter | kMark | kNumber | category_bit(GC::Pc);
}  // namespace category_masks

GeneralCategory general_category(char32_t cp);  // Cn for unassigned or out-of-range values
inline bool has_category(char32_t cp, CategoryMask mask) { return (mask & category_bit(general_category(cp))) != 0; }

// Parses a general-category name: a short alias ("L", "Lu", "Nd", "LC") or a long one ("Letter",
// "Uppercase_Letter"); case, spaces, '-' and '_' are ignored like Unicode loose matching. False if unknown.
bool category_mask_by_name(std::string_view name, CategoryMask* mask);

bool is_white_space(char32_t cp);  // the White_Space property

// Scripts (Scripts.txt). Index 0 is Unknown. -1 from script_by_name when the name is not a script.
int script_of(char32_t cp);
int script_by_name(std::string_view name);  // "Han", "Hani", "hiragana", "Old_Italic"...
const char* script_name(int script);

char32_t simple_lowercase(char32_t cp);  // UnicodeData.txt simple lowercase mapping (itself if none)
char32_t simple_case_fold(char32_t cp);  // CaseFolding.txt C+S (itself if none)
// Every code point whose simple case fold is `folded` (not including `folded` itself unless it maps to
// itself through the table); used to match case-insensitive classes.
const std::vector<char32_t>& case_fold_sources(char32_t folded);

const char* unicode_version();

// Decodes the UTF-8 sequence at text[pos] (pos < text.size()) into *cp and returns its length in bytes,
// or 0 when the byte at pos does not start a well-formed sequence. Well-formed is the one rule the whole
// tokenizer follows: shortest form only (no overlong encodings), no surrogates (U+D800..U+DFFF), nothing
// above U+10FFFF, no truncated sequence. Callers choose what an invalid byte becomes (U+FFFD for
// matching, the raw byte for NFC), always one byte long.
inline size_t decode_utf8_at(std::string_view text, size_t pos, char32_t* cp) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t length = 0;
  char32_t value = 0, min_value = 0;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, value = b0 & 0x1F, min_value = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, value = b0 & 0x0F, min_value = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, value = b0 & 0x07, min_value = 0x10000;
  } else {
    return 0;  // a continuation byte or 0xF8..0xFF cannot start a sequence
  }
  if (text.size() - pos < length) return 0;
  for (size_t k = 1; k < length; ++k) {
    const auto b = static_cast<unsigned char>(text[pos + k]);
    if ((b & 0xC0) != 0x80) return 0;
    value = (value << 6) | (b & 0x3Fu);
  }
  if (value < min_value || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *cp = value;
  return length;
}

// Appends the UTF-8 bytes of cp (1 to 4), for any cp below 2^21: surrogates and values above U+10FFFF
// are written as they are, so callers that must produce valid UTF-8 map them first (codepoint_to_utf8 in
// regex.h writes U+FFFD), while the chat templates' lax decoding round-trips through it unchanged.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The value of one hexadecimal digit (0-9, a-f, A-F); -1 for anything else (escape parsers).
inline int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace ga::text
