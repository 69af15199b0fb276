// NFC stability check (see nfc.h for the reasoning).
#include "runtime/tokenizer/nfc.h"

#include <algorithm>

#include "gpu_accel/error.h"
#include "runtime/tokenizer/nfc_data.h"
#include "runtime/tokenizer/pre_tokenizer.h"

namespace ga::tok {
namespace {

// Hangul syllables compose algorithmically: L + V -> LV, LV + T -> LVT (Unicode ch. 3.12).
constexpr char32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161, kHangulTBase = 0x11A7;
constexpr char32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr char32_t kHangulSCount = kHangulLCount * kHangulVCount * kHangulTCount;

bool is_hangul_syllable(char32_t cp) { return cp >= kHangulSBase && cp < kHangulSBase + kHangulSCount; }
bool is_hangul_l(char32_t cp) { return cp >= kHangulLBase && cp < kHangulLBase + kHangulLCount; }
bool is_hangul_v(char32_t cp) { return cp >= kHangulVBase && cp < kHangulVBase + kHangulVCount; }
bool is_hangul_t(char32_t cp) { return cp > kHangulTBase && cp < kHangulTBase + kHangulTCount; }

uint8_t ccc(char32_t cp) {
  const auto runs = nfc_data::ccc_runs();
  const auto it = std::upper_bound(runs.begin(), runs.end(), cp,
                                   [](char32_t c, const nfc_data::CccRun& r) { return c < r.first; });
  if (it == runs.begin()) return 0;
  const auto& run = *(it - 1);
  return cp <= run.last ? run.ccc : 0;
}

bool in_ranges(std::span<const nfc_data::CpRange> ranges, char32_t cp) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                                   [](char32_t c, const nfc_data::CpRange& r) { return c < r.first; });
  return it != ranges.begin() && cp <= (it - 1)->last;
}

bool composes(char32_t first, char32_t second) {
  if (is_hangul_l(first) && is_hangul_v(second)) return true;
  if (is_hangul_syllable(first) && (first - kHangulSBase) % kHangulTCount == 0 && is_hangul_t(second)) return true;
  const auto table = nfc_data::compositions();
  const auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(first, second),
                                   [](const nfc_data::Composition& c, const std::pair<char32_t, char32_t>& key) {
                                     return c.first < key.first || (c.first == key.first && c.second < key.second);
                                   });
  return it != table.end() && it->first == first && it->second == second;
}

// A starter with a canonical decomposition: NFC would decompose it and might recompose differently
// with a following mark, which this check does not model.
bool is_composite(char32_t cp) {
  if (is_hangul_syllable(cp)) return true;
  const auto table = nfc_data::compositions();
  return std::any_of(table.begin(), table.end(), [cp](const nfc_data::Composition& c) { return c.composite == cp; });
}

// Index of the first code point where NFC stability cannot be proven, or npos.
size_t first_unstable(const std::u32string& cps) {
  size_t last_starter = std::u32string::npos;
  uint8_t last_ccc = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    if (cp < 0x300) {  // fast path: nothing below U+0300 combines, reorders or changes under NFC
      last_starter = i, last_ccc = 0;
      continue;
    }
    const uint8_t c = ccc(cp);
    if (in_ranges(nfc_data::nfc_quick_check_no(), cp)) return i;
    if (c != 0 && last_ccc > c) return i;  // canonical reordering would move it
    const bool may_compose = in_ranges(nfc_data::composition_seconds(), cp) || is_hangul_v(cp) || is_hangul_t(cp);
    if (may_compose && last_starter != std::u32string::npos) {
      // Blocked when some character in between is a starter or has a class >= this one.
      bool blocked = false;
      for (size_t k = last_starter + 1; k < i && !blocked; ++k) {
        const uint8_t ck = ccc(cps[k]);
        blocked = ck == 0 || ck >= c || c == 0;
      }
      if (!blocked && (composes(cps[last_starter], cp) || is_composite(cps[last_starter]))) return i;
    }
    last_ccc = c;
    if (c == 0) last_starter = i;
  }
  return std::u32string::npos;
}

}  // namespace

bool is_nfc_stable(std::string_view text) { return first_unstable(decode_utf8(text).cps) == std::u32string::npos; }

void require_nfc(std::string_view text) {
  const DecodedText decoded = decode_utf8(text);
  const size_t at = first_unstable(decoded.cps);
  GA_CHECK(at == std::u32string::npos, Unsupported, "this tokenizer needs NFC-normalized text, and the text is not ",
           "(or may not be) in NFC at byte ", decoded.byte_offsets[at], " (U+", std::hex, std::uppercase,
           static_cast<uint32_t>(decoded.cps[at]), "); gpu_accel does not compose Unicode: normalize it first");
}

}  // namespace ga::tok
