// Unicode queries over the generated tables, plus UTF-8 conversion.
//
// Lookups binary-search sorted run tables (unicode_data.cpp). The regex engine asks for the category of
// nearly every input code point, so the BMP (where almost all text lives) is served from a 64 KiB table
// filled once on first use (thread-safe through a function-local static). Name matching for \p{...}
// follows Unicode loose matching (UAX #44 LM3): case, spaces, hyphens and underscores are ignored.
#include "runtime/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <unordered_map>

#include "runtime/tokenizer/regex.h"
#include "runtime/tokenizer/unicode_data.h"

namespace ga::text {

namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kReplacement = 0xFFFD;
constexpr size_t kBmpSize = 0x10000;

// The value of the run containing cp; runs start at 0 and cover every code point.
uint8_t run_value(const detail::ValueRun* runs, size_t count, char32_t cp) {
  const detail::ValueRun* end = runs + count;
  const detail::ValueRun* it = std::upper_bound(runs, end, static_cast<uint32_t>(cp),
                                                [](uint32_t c, const detail::ValueRun& r) { return c < r.first; });
  return (it - 1)->value;
}

char32_t apply_delta_runs(const detail::DeltaRun* runs, size_t count, char32_t cp) {
  const detail::DeltaRun* end = runs + count;
  const detail::DeltaRun* it = std::upper_bound(runs, end, static_cast<uint32_t>(cp),
                                                [](uint32_t c, const detail::DeltaRun& r) { return c < r.first; });
  if (it == runs) return cp;
  const detail::DeltaRun& run = *(it - 1);
  if (cp > run.last || (cp - run.first) % run.stride != 0) return cp;
  return static_cast<char32_t>(static_cast<int64_t>(cp) + run.delta);
}

const std::array<uint8_t, kBmpSize>& bmp_categories() {
  static const std::array<uint8_t, kBmpSize> table = [] {
    std::array<uint8_t, kBmpSize> t{};
    for (size_t i = 0; i < detail::kCategoryRunCount; ++i) {
      const uint32_t first = detail::kCategoryRuns[i].first;
      if (first >= kBmpSize) break;
      const uint32_t next = i + 1 < detail::kCategoryRunCount ? detail::kCategoryRuns[i + 1].first : kBmpSize;
      std::fill(t.begin() + first, t.begin() + std::min<uint32_t>(next, kBmpSize), detail::kCategoryRuns[i].value);
    }
    return t;
  }();
  return table;
}

// Loose-matching key: lowercase, without spaces, '-' and '_'.
std::string loose_key(std::string_view name) {
  std::string key;
  for (char c : name) {
    if (c == ' ' || c == '-' || c == '_') continue;
    key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return key;
}

const std::unordered_map<std::string, CategoryMask>& category_names() {
  using GC = GeneralCategory;
  namespace m = category_masks;
  static const std::unordered_map<std::string, CategoryMask> names = [] {
    std::unordered_map<std::string, CategoryMask> n;
    const std::pair<const char*, GC> singles[] = {{"Lu", GC::Lu},
                                                  {"Ll", GC::Ll},
                                                  {"Lt", GC::Lt},
                                                  {"Lm", GC::Lm},
                                                  {"Lo", GC::Lo},
                                                  {"Mn", GC::Mn},
                                                  {"Mc", GC::Mc},
                                                  {"Me", GC::Me},
                                                  {"Nd", GC::Nd},
                                                  {"Nl", GC::Nl},
                                                  {"No", GC::No},
                                                  {"Pc", GC::Pc},
                                                  {"Pd", GC::Pd},
                                                  {"Ps", GC::Ps},
                                                  {"Pe", GC::Pe},
                                                  {"Pi", GC::Pi},
                                                  {"Pf", GC::Pf},
                                                  {"Po", GC::Po},
                                                  {"Sm", GC::Sm},
                                                  {"Sc", GC::Sc},
                                                  {"Sk", GC::Sk},
                                                  {"So", GC::So},
                                                  {"Zs", GC::Zs},
                                                  {"Zl", GC::Zl},
                                                  {"Zp", GC::Zp},
                                                  {"Cc", GC::Cc},
                                                  {"Cf", GC::Cf},
                                                  {"Cs", GC::Cs},
                                                  {"Co", GC::Co},
                                                  {"Cn", GC::Cn},
                                                  {"Uppercase_Letter", GC::Lu},
                                                  {"Lowercase_Letter", GC::Ll},
                                                  {"Titlecase_Letter", GC::Lt},
                                                  {"Modifier_Letter", GC::Lm},
                                                  {"Other_Letter", GC::Lo},
                                                  {"Nonspacing_Mark", GC::Mn},
                                                  {"Spacing_Mark", GC::Mc},
                                                  {"Enclosing_Mark", GC::Me},
                                                  {"Decimal_Number", GC::Nd},
                                                  {"Digit", GC::Nd},
                                                  {"Letter_Number", GC::Nl},
                                                  {"Other_Number", GC::No},
                                                  {"Connector_Punctuation", GC::Pc},
                                                  {"Dash_Punctuation", GC::Pd},
                                                  {"Open_Punctuation", GC::Ps},
                                                  {"Close_Punctuation", GC::Pe},
                                                  {"Initial_Punctuation", GC::Pi},
                                                  {"Final_Punctuation", GC::Pf},
                                                  {"Other_Punctuation", GC::Po},
                                                  {"Math_Symbol", GC::Sm},
                                                  {"Currency_Symbol", GC::Sc},
                                                  {"Modifier_Symbol", GC::Sk},
                                                  {"Other_Symbol", GC::So},
                                                  {"Space_Separator", GC::Zs},
                                                  {"Line_Separator", GC::Zl},
                                                  {"Paragraph_Separator", GC::Zp},
                                                  {"Control", GC::Cc},
                                                  {"Format", GC::Cf},
                                                  {"Surrogate", GC::Cs},
                                                  {"Private_Use", GC::Co},
                                                  {"Unassigned", GC::Cn}};
    for (const auto& [name, cat] : singles) n[loose_key(name)] = category_bit(cat);
    const std::pair<const char*, CategoryMask> groups[] = {{"L", m::kLetter},
                                                           {"Letter", m::kLetter},
                                                           {"LC", m::kCasedLetter},
                                                           {"Cased_Letter", m::kCasedLetter},
                                                           {"M", m::kMark},
                                                           {"Mark", m::kMark},
                                                           {"Combining_Mark", m::kMark},
                                                           {"N", m::kNumber},
                                                           {"Number", m::kNumber},
                                                           {"P", m::kPunctuation},
                                                           {"Punctuation", m::kPunctuation},
                                                           {"S", m::kSymbol},
                                                           {"Symbol", m::kSymbol},
                                                           {"Z", m::kSeparator},
                                                           {"Separator", m::kSeparator},
                                                           {"C", m::kOther},
                                                           {"Other", m::kOther},
                                                           {"Any", m::kAll}};
    for (const auto& [name, mask] : groups) n[loose_key(name)] = mask;
    return n;
  }();
  return names;
}

}  // namespace

GeneralCategory general_category(char32_t cp) {
  if (cp < kBmpSize) return static_cast<GeneralCategory>(bmp_categories()[cp]);
  if (cp > kMaxCodePoint) return GeneralCategory::Cn;
  return static_cast<GeneralCategory>(run_value(detail::kCategoryRuns, detail::kCategoryRunCount, cp));
}

bool category_mask_by_name(std::string_view name, CategoryMask* mask) {
  const auto& names = category_names();
  auto it = names.find(loose_key(name));
  if (it == names.end()) return false;
  *mask = it->second;
  return true;
}

bool is_white_space(char32_t cp) {
  if (cp > 0x3000) return false;  // the last White_Space code point is U+3000
  for (size_t i = 0; i < detail::kWhiteSpaceRangeCount; ++i) {
    if (cp < detail::kWhiteSpaceRanges[i].first) return false;
    if (cp <= detail::kWhiteSpaceRanges[i].last) return true;
  }
  return false;
}

int script_of(char32_t cp) {
  if (cp > kMaxCodePoint) return 0;
  return run_value(detail::kScriptRuns, detail::kScriptRunCount, cp);
}

int script_by_name(std::string_view name) {
  const std::string key = loose_key(name);
  for (size_t i = 0; i < detail::kScriptCount; ++i) {
    if (loose_key(detail::kScriptNames[i].name) == key || loose_key(detail::kScriptNames[i].code) == key) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

const char* script_name(int script) {
  if (script < 0 || static_cast<size_t>(script) >= detail::kScriptCount) return "?";
  return detail::kScriptNames[script].name;
}

char32_t simple_lowercase(char32_t cp) {
  return apply_delta_runs(detail::kLowercaseRuns, detail::kLowercaseRunCount, cp);
}

char32_t simple_case_fold(char32_t cp) {
  return apply_delta_runs(detail::kCaseFoldRuns, detail::kCaseFoldRunCount, cp);
}

const std::vector<char32_t>& case_fold_sources(char32_t folded) {
  static const std::unordered_map<char32_t, std::vector<char32_t>> inverse = [] {
    std::unordered_map<char32_t, std::vector<char32_t>> inv;
    for (size_t i = 0; i < detail::kCaseFoldRunCount; ++i) {
      const detail::DeltaRun& run = detail::kCaseFoldRuns[i];
      for (uint32_t cp = run.first; cp <= run.last; cp += run.stride) {
        inv[static_cast<char32_t>(static_cast<int64_t>(cp) + run.delta)].push_back(cp);
      }
    }
    return inv;
  }();
  static const std::vector<char32_t> none;
  auto it = inverse.find(folded);
  return it == inverse.end() ? none : it->second;
}

const char* unicode_version() { return detail::kUnicodeVersion; }

// ---- the public helpers declared in regex.h ----

std::u32string utf8_to_codepoints(std::string_view text) { return utf8_to_codepoints(text, nullptr); }

std::u32string utf8_to_codepoints(std::string_view text, std::vector<size_t>* byte_offsets) {
  std::u32string out;
  out.reserve(text.size());
  if (byte_offsets != nullptr) {
    byte_offsets->clear();
    byte_offsets->reserve(text.size() + 1);
  }
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    size_t len = decode_utf8_at(text, i, &cp);
    if (len == 0) {  // an invalid byte stands alone as U+FFFD
      cp = kReplacement;
      len = 1;
    }
    if (byte_offsets != nullptr) byte_offsets->push_back(i);
    out.push_back(cp);
    i += len;
  }
  if (byte_offsets != nullptr) byte_offsets->push_back(text.size());
  return out;
}

std::string codepoint_to_utf8(char32_t cp) {
  std::string out;
  if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacement;
  append_utf8(out, cp);
  return out;
}

std::string codepoints_to_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) out += codepoint_to_utf8(cp);
  return out;
}

bool is_letter(char32_t cp) { return has_category(cp, category_masks::kLetter); }
bool is_number(char32_t cp) { return has_category(cp, category_masks::kNumber); }
bool is_whitespace(char32_t cp) { return is_white_space(cp); }
bool is_punctuation(char32_t cp) { return has_category(cp, category_masks::kPunctuation); }
bool is_symbol(char32_t cp) { return has_category(cp, category_masks::kSymbol); }
bool is_mark(char32_t cp) { return has_category(cp, category_masks::kMark); }
char32_t to_lower(char32_t cp) { return simple_lowercase(cp); }

}  // namespace ga::text
