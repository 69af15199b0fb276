// Typed Unicode queries for the tokenizer: general category, White_Space, script, case mappings.
//
// The data comes from the generated run tables in unicode_data.cpp (Unicode Character Database, see
// tools/gen_unicode_tables.py). Categories are asked for once per code point per regex step, so the
// Basic Multilingual Plane gets a 64 KiB lookup table built on first use; other planes binary-search the
// runs. Categories are also exposed as bit masks so a regex class like [^\s\p{L}\p{N}] tests one AND.
#pragma once

#include <cstdint>
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

}  // namespace ga::text
