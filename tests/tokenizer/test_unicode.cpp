// Tests of the Unicode tables (unicode.h) and the UTF-8 helpers of regex.h.
//
// Two kinds of reference: hand-picked code points whose properties are stated in the Unicode standard
// (one per general category, the White_Space list, a few scripts and case pairs), and, where the Debian
// unicode-data package is installed, a full comparison of every code point against an independent parse
// of UnicodeData.txt / PropList.txt / Scripts.txt / CaseFolding.txt (skipped with a reason if absent).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/tokenizer/regex.h"
#include "runtime/tokenizer/unicode.h"

namespace ga::text {
namespace {

using GC = GeneralCategory;

TEST(Unicode, GeneralCategorySamples) {
  const std::pair<char32_t, GC> samples[] = {
      {U'A', GC::Lu},    {U'a', GC::Ll},   {0x00B5, GC::Ll},   {0x01C5, GC::Lt},   {0x02B0, GC::Lm},
      {0x4E00, GC::Lo},  {0x9FA5, GC::Lo}, {0xAC00, GC::Lo},   {0xD7A3, GC::Lo},   {0x20000, GC::Lo},
      {0x0301, GC::Mn},  {0x0903, GC::Mc}, {0x20DD, GC::Me},   {U'0', GC::Nd},     {0x0663, GC::Nd},
      {0x2160, GC::Nl},  {0x00BD, GC::No}, {U'_', GC::Pc},     {U'-', GC::Pd},     {U'(', GC::Ps},
      {U')', GC::Pe},    {0x00AB, GC::Pi}, {0x00BB, GC::Pf},   {U'!', GC::Po},     {U'+', GC::Sm},
      {U'$', GC::Sc},    {U'^', GC::Sk},   {U'`', GC::Sk},     {0x00A9, GC::So},   {0x1F600, GC::So},
      {U' ', GC::Zs},    {0x3000, GC::Zs}, {0x2028, GC::Zl},   {0x2029, GC::Zp},   {0x0000, GC::Cc},
      {U'\n', GC::Cc},   {0x200B, GC::Cf}, {0xE0001, GC::Cf},  {0xD800, GC::Cs},   {0xE000, GC::Co},
      {0xF0000, GC::Co}, {0x0378, GC::Cn}, {0x10FFFF, GC::Cn}, {0x110000, GC::Cn}, {0xFFFFFFFF, GC::Cn},
  };
  for (const auto& [cp, cat] : samples) {
    EXPECT_EQ(static_cast<int>(general_category(cp)), static_cast<int>(cat))
        << std::hex << "U+" << static_cast<uint32_t>(cp);
  }
}

TEST(Unicode, PublicCategoryPredicates) {
  EXPECT_TRUE(is_letter(U'é'));
  EXPECT_TRUE(is_letter(0x3042));  // あ
  EXPECT_FALSE(is_letter(U'1'));
  EXPECT_TRUE(is_number(U'7'));
  EXPECT_TRUE(is_number(0x2160));  // Ⅰ (Nl)
  EXPECT_TRUE(is_number(0x00B2));  // ² (No)
  EXPECT_TRUE(is_punctuation(U','));
  EXPECT_TRUE(is_punctuation(0x3002));  // 。
  EXPECT_FALSE(is_punctuation(U'+'));
  EXPECT_TRUE(is_symbol(U'+'));
  EXPECT_TRUE(is_symbol(0x20AC));  // €
  EXPECT_TRUE(is_mark(0x0301));
  EXPECT_FALSE(is_mark(U'a'));
}

TEST(Unicode, WhiteSpaceProperty) {
  const char32_t spaces[] = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,   0xA0,  0x1680,
                             0x2000, 0x2005, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
  for (char32_t cp : spaces) EXPECT_TRUE(is_whitespace(cp)) << std::hex << "U+" << static_cast<uint32_t>(cp);
  // U+180E (Mongolian vowel separator) left White_Space in Unicode 6.3; U+200B was never in it.
  const char32_t not_spaces[] = {U'a', 0x08, 0x0E, 0x1C, 0x180E, 0x200B, 0x2060, 0xFEFF, 0x1F600};
  for (char32_t cp : not_spaces) EXPECT_FALSE(is_whitespace(cp)) << std::hex << "U+" << static_cast<uint32_t>(cp);
}

TEST(Unicode, Scripts) {
  EXPECT_STREQ(script_name(script_of(0x4E00)), "Han");
  EXPECT_STREQ(script_name(script_of(0x3042)), "Hiragana");
  EXPECT_STREQ(script_name(script_of(0x30A2)), "Katakana");
  EXPECT_STREQ(script_name(script_of(0xAC00)), "Hangul");
  EXPECT_STREQ(script_name(script_of(0x1100)), "Hangul");
  EXPECT_STREQ(script_name(script_of(U'a')), "Latin");
  EXPECT_STREQ(script_name(script_of(U'1')), "Common");
  EXPECT_STREQ(script_name(script_of(0x0378)), "Unknown");
  EXPECT_EQ(script_by_name("Han"), script_by_name("Hani"));
  EXPECT_EQ(script_by_name("hiragana"), script_of(0x3042));
  EXPECT_EQ(script_by_name("Not_A_Script"), -1);
}

TEST(Unicode, CaseMappings) {
  const std::pair<char32_t, char32_t> lower[] = {
      {U'A', U'a'},     {U'a', U'a'},       {U'1', U'1'},     {0x0130, 0x0069}, {0x01C5, 0x01C6},
      {0x0410, 0x0430}, {0x10400, 0x10428}, {0x1E9E, 0x00DF}, {0x2126, 0x03C9}, {0x212A, U'k'},
      {0x0100, 0x0101}, {0x0101, 0x0101},   {0x03A3, 0x03C3}};
  for (const auto& [cp, lo] : lower) EXPECT_EQ(to_lower(cp), lo) << std::hex << "U+" << static_cast<uint32_t>(cp);
  EXPECT_EQ(simple_case_fold(U'K'), U'k');
  EXPECT_EQ(simple_case_fold(0x212A), U'k');    // KELVIN SIGN
  EXPECT_EQ(simple_case_fold(0x03C2), 0x03C3);  // final sigma folds to sigma
  EXPECT_EQ(simple_case_fold(0x00DF), 0x00DF);  // ß has only a full folding ("ss")
  EXPECT_EQ(simple_case_fold(0x1E9E), 0x00DF);  // ẞ: status S
  const std::vector<char32_t>& to_k = case_fold_sources(U'k');
  EXPECT_NE(std::find(to_k.begin(), to_k.end(), U'K'), to_k.end());
  EXPECT_NE(std::find(to_k.begin(), to_k.end(), char32_t{0x212A}), to_k.end());
}

TEST(Unicode, CategoryNames) {
  CategoryMask mask = 0;
  ASSERT_TRUE(category_mask_by_name("L", &mask));
  EXPECT_EQ(mask, category_masks::kLetter);
  ASSERT_TRUE(category_mask_by_name("Uppercase_Letter", &mask));
  EXPECT_EQ(mask, category_bit(GC::Lu));
  ASSERT_TRUE(category_mask_by_name("uppercase letter", &mask));  // loose matching
  EXPECT_EQ(mask, category_bit(GC::Lu));
  ASSERT_TRUE(category_mask_by_name("Nd", &mask));
  EXPECT_EQ(mask, category_bit(GC::Nd));
  EXPECT_FALSE(category_mask_by_name("Han", &mask));
}

TEST(Utf8, DecodeAndEncode) {
  const std::string text = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀
  std::vector<size_t> offsets;
  EXPECT_EQ(utf8_to_codepoints(text, &offsets), (std::u32string{U'a', 0xE9, 0x4E2D, 0x1F600}));
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 1, 3, 6, 10}));
  EXPECT_EQ(codepoints_to_utf8(utf8_to_codepoints(text)), text);
  EXPECT_EQ(codepoint_to_utf8(0x7F), "\x7F");
  EXPECT_EQ(codepoint_to_utf8(0x80), "\xC2\x80");
  EXPECT_EQ(codepoint_to_utf8(0x10FFFF), "\xF4\x8F\xBF\xBF");
}

TEST(Utf8, InvalidBytesBecomeReplacementCharacters) {
  const char32_t r = 0xFFFD;
  EXPECT_EQ(utf8_to_codepoints("\xFF"), (std::u32string{r}));
  EXPECT_EQ(utf8_to_codepoints("a\x80"
                               "b"),
            (std::u32string{U'a', r, U'b'}));
  EXPECT_EQ(utf8_to_codepoints("\xC0\xAF"), (std::u32string{r, r}));                // overlong '/'
  EXPECT_EQ(utf8_to_codepoints("\xE2\x82"), (std::u32string{r, r}));                // truncated
  EXPECT_EQ(utf8_to_codepoints("\xED\xA0\x80"), (std::u32string{r, r, r}));         // surrogate
  EXPECT_EQ(utf8_to_codepoints("\xF4\x90\x80\x80"), (std::u32string{r, r, r, r}));  // above U+10FFFF
  std::vector<size_t> offsets;
  utf8_to_codepoints("\xE2\x82x", &offsets);
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 1, 2, 3}));
}

// ---- full comparison with the UCD files, when the unicode-data package is installed ----

const char* kUcdDir = "/usr/share/unicode";

std::vector<std::vector<std::string>> read_ucd(const std::string& file) {
  std::ifstream in(std::string(kUcdDir) + "/" + file);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    if (line.find(';') == std::string::npos) continue;
    std::vector<std::string> fields;
    std::stringstream ss(line);
    std::string field;
    while (std::getline(ss, field, ';')) {
      const size_t a = field.find_first_not_of(' '), b = field.find_last_not_of(' ');
      fields.push_back(a == std::string::npos ? "" : field.substr(a, b - a + 1));
    }
    rows.push_back(fields);
  }
  return rows;
}

std::pair<char32_t, char32_t> parse_cp_range(const std::string& s) {
  const size_t dots = s.find("..");
  if (dots == std::string::npos) return {std::stoul(s, nullptr, 16), std::stoul(s, nullptr, 16)};
  return {std::stoul(s.substr(0, dots), nullptr, 16), std::stoul(s.substr(dots + 2), nullptr, 16)};
}

#define GA_REQUIRE_UCD()                                                                  \
  if (!std::ifstream(std::string(kUcdDir) + "/UnicodeData.txt")) {                        \
    GTEST_SKIP() << "no " << kUcdDir << "/UnicodeData.txt (Debian package unicode-data)"; \
  }

TEST(UnicodeVsUcd, EveryCodePointCategoryAndLowercase) {
  GA_REQUIRE_UCD();
  const char* names[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
                         "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
  std::vector<uint8_t> expected(0x110000, 0);
  std::map<char32_t, char32_t> lower;
  char32_t range_first = 0;
  for (const auto& f : read_ucd("UnicodeData.txt")) {
    const char32_t cp = std::stoul(f[0], nullptr, 16);
    const uint8_t cat = static_cast<uint8_t>(std::find(std::begin(names), std::end(names), f[2]) - std::begin(names));
    ASSERT_LT(cat, 30) << f[2];
    if (f[1].find(", First>") != std::string::npos) {
      range_first = cp;
      continue;
    }
    const char32_t first = f[1].find(", Last>") != std::string::npos ? range_first : cp;
    for (char32_t c = first; c <= cp; ++c) expected[c] = cat;
    if (f.size() > 13 && !f[13].empty()) lower[cp] = std::stoul(f[13], nullptr, 16);
  }
  size_t mismatches = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (static_cast<uint8_t>(general_category(cp)) != expected[cp] && ++mismatches < 10) {
      ADD_FAILURE() << std::hex << "U+" << static_cast<uint32_t>(cp) << " category " << int(general_category(cp))
                    << " != " << int(expected[cp]);
    }
    const auto it = lower.find(cp);
    const char32_t want = it == lower.end() ? cp : it->second;
    if (to_lower(cp) != want && ++mismatches < 10)
      ADD_FAILURE() << std::hex << "U+" << static_cast<uint32_t>(cp) << " lowercase";
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(UnicodeVsUcd, WhiteSpaceScriptsAndFolding) {
  GA_REQUIRE_UCD();
  std::vector<bool> white(0x110000, false);
  for (const auto& f : read_ucd("PropList.txt")) {
    if (f[1] != "White_Space") continue;
    const auto [a, b] = parse_cp_range(f[0]);
    for (char32_t c = a; c <= b; ++c) white[c] = true;
  }
  std::vector<std::string> script(0x110000, "Unknown");
  for (const auto& f : read_ucd("Scripts.txt")) {
    const auto [a, b] = parse_cp_range(f[0]);
    for (char32_t c = a; c <= b; ++c) script[c] = f[1];
  }
  std::map<char32_t, char32_t> fold;
  for (const auto& f : read_ucd("CaseFolding.txt")) {
    if (f[1] == "C" || f[1] == "S") fold[std::stoul(f[0], nullptr, 16)] = std::stoul(f[2], nullptr, 16);
  }
  size_t mismatches = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (is_whitespace(cp) != white[cp] && ++mismatches < 10)
      ADD_FAILURE() << std::hex << "U+" << static_cast<uint32_t>(cp) << " White_Space";
    if (script[cp] != script_name(script_of(cp)) && ++mismatches < 10) {
      ADD_FAILURE() << std::hex << "U+" << static_cast<uint32_t>(cp) << " script " << script_name(script_of(cp))
                    << " != " << script[cp];
    }
    const auto it = fold.find(cp);
    if (simple_case_fold(cp) != (it == fold.end() ? cp : it->second) && ++mismatches < 10) {
      ADD_FAILURE() << std::hex << "U+" << static_cast<uint32_t>(cp) << " case fold";
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
}  // namespace ga::text
