// NFC normalization (see nfc.h for the design): quick-check scan, then the UAX #15 algorithm on the spans
// that need it. Code points are handled as char32_t; an invalid UTF-8 byte b travels as kRawByteBase + b,
// a value above U+10FFFF that no table knows, so it is a starter that never decomposes or composes and is
// written back as the same byte.
#include "runtime/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/tokenizer/nfc_data.h"
#include "runtime/tokenizer/unicode.h"

namespace ga::tok {
namespace {

using nfc_data::QuickCheck;

constexpr char32_t kRawByteBase = 0x110000;

// Hangul syllables decompose and compose algorithmically: LV = L + V, LVT = LV + T (Unicode ch. 3.12).
constexpr char32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161, kHangulTBase = 0x11A7;
constexpr char32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr char32_t kHangulNCount = kHangulVCount * kHangulTCount;
constexpr char32_t kHangulSCount = kHangulLCount * kHangulNCount;

bool is_hangul_syllable(char32_t cp) { return cp >= kHangulSBase && cp < kHangulSBase + kHangulSCount; }

struct NormProps {
  uint8_t ccc = 0;
  QuickCheck quick_check = QuickCheck::Yes;
};

NormProps norm_props(char32_t cp) {
  const auto runs = nfc_data::norm_runs();
  if (cp < runs.front().first) return {};  // all of ASCII and Latin-1: class 0, NFC_QC=Yes
  const auto it = std::upper_bound(runs.begin(), runs.end(), cp,
                                   [](char32_t c, const nfc_data::NormRun& r) { return c < r.first; });
  const auto& run = *(it - 1);
  if (cp > run.last) return {};
  return {run.ccc, static_cast<QuickCheck>(run.quick_check)};
}

// A code point nothing after it can reach back across: it neither reorders nor composes with what precedes.
bool is_boundary(NormProps p) { return p.ccc == 0 && p.quick_check == QuickCheck::Yes; }

// The quick check asks about every non-ASCII code point, and a binary search over ~2000 runs costs more
// than the rest of the scan. Planes 0 and 1 (all living scripts and the emoji) get a bitmap of the code
// points that are not boundaries: 16 KiB, built once from the runs.
constexpr char32_t kBitmapLimit = 0x20000;
class NonBoundaryBitmap {
 public:
  NonBoundaryBitmap() {
    for (const auto& run : nfc_data::norm_runs()) {
      if (run.ccc == 0 && run.quick_check == static_cast<uint8_t>(QuickCheck::Yes)) continue;
      for (char32_t cp = run.first; cp <= run.last && cp < kBitmapLimit; ++cp) {
        words_[cp / 64] |= uint64_t{1} << (cp % 64);
      }
    }
  }
  bool is_boundary(char32_t cp) const {
    if (cp >= kBitmapLimit) return cp >= kRawByteBase || ::ga::tok::is_boundary(norm_props(cp));
    return (words_[cp / 64] >> (cp % 64) & 1) == 0;
  }

 private:
  uint64_t words_[kBitmapLimit / 64] = {};
};

const NonBoundaryBitmap& non_boundaries() {
  static const NonBoundaryBitmap bitmap;
  return bitmap;
}

// The code point at text[pos] and its length in bytes, under the tokenizer's one UTF-8 rule
// (text::decode_utf8_at): a byte that does not start a well-formed sequence is one raw byte.
struct Decoded {
  char32_t cp;
  size_t length;
};
inline Decoded decode_at(std::string_view text, size_t pos) {
  char32_t cp = 0;
  const size_t length = ga::text::decode_utf8_at(text, pos, &cp);
  if (length == 0) return {kRawByteBase + static_cast<uint8_t>(text[pos]), 1};
  return {cp, length};
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp >= kRawByteBase) {
    out += static_cast<char>(cp - kRawByteBase);  // an invalid input byte goes back out unchanged
  } else {
    ga::text::append_utf8(out, cp);
  }
}

struct Char {
  char32_t cp;
  uint8_t ccc;
};

void push_char(char32_t cp, std::vector<Char>& out) { out.push_back({cp, norm_props(cp).ccc}); }

// Appends the full canonical decomposition of cp. The table is one level deep, so both halves recurse
// (in practice only the first half ever decomposes further, a few levels at most).
void decompose(char32_t cp, std::vector<Char>& out) {
  if (is_hangul_syllable(cp)) {
    const char32_t s = cp - kHangulSBase;
    push_char(kHangulLBase + s / kHangulNCount, out);
    push_char(kHangulVBase + (s % kHangulNCount) / kHangulTCount, out);
    if (s % kHangulTCount != 0) push_char(kHangulTBase + s % kHangulTCount, out);
    return;
  }
  const auto table = nfc_data::decompositions();
  const auto it = std::lower_bound(table.begin(), table.end(), cp,
                                   [](const nfc_data::Decomposition& d, char32_t c) { return d.cp < c; });
  if (it == table.end() || it->cp != cp) {
    push_char(cp, out);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (first, second), or 0 when they do not compose.
char32_t compose_pair(char32_t first, char32_t second) {
  if (first >= kHangulLBase && first < kHangulLBase + kHangulLCount && second >= kHangulVBase &&
      second < kHangulVBase + kHangulVCount) {
    return kHangulSBase + ((first - kHangulLBase) * kHangulVCount + (second - kHangulVBase)) * kHangulTCount;
  }
  if (is_hangul_syllable(first) && (first - kHangulSBase) % kHangulTCount == 0 && second > kHangulTBase &&
      second < kHangulTBase + kHangulTCount) {
    return first + (second - kHangulTBase);
  }
  const auto table = nfc_data::compositions();
  const auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(first, second),
                                   [](const nfc_data::Composition& c, const std::pair<char32_t, char32_t>& key) {
                                     return c.first < key.first || (c.first == key.first && c.second < key.second);
                                   });
  return it != table.end() && it->first == first && it->second == second ? it->composite : 0;
}

// Canonical ordering: each maximal run of non-starters is stably sorted by combining class.
void order_canonically(std::vector<Char>& chars) {
  const auto by_class = [](const Char& a, const Char& b) { return a.ccc < b.ccc; };
  for (size_t i = 0; i < chars.size();) {
    if (chars[i].ccc == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < chars.size() && chars[end].ccc != 0) ++end;
    std::stable_sort(chars.begin() + static_cast<ptrdiff_t>(i), chars.begin() + static_cast<ptrdiff_t>(end), by_class);
    i = end;
  }
}

// Canonical composition, in place. A character C joins the last starter S when the pair has a primary
// composite and C is not blocked: every character between them has a class lower than C's (and not 0),
// or C directly follows S. Since marks are in canonical order, that means: the last kept character's
// class is below C's, or no character was kept after S.
void compose(std::vector<Char>& chars) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t starter = kNone;  // index in the output of the last starter
  int last_class = -1;     // class of the last kept character after the starter; -1 when there is none
  size_t kept = 0;
  for (size_t i = 0; i < chars.size(); ++i) {
    const Char c = chars[i];
    if (starter != kNone && (last_class < 0 || last_class < c.ccc)) {
      if (const char32_t composite = compose_pair(chars[starter].cp, c.cp); composite != 0) {
        chars[starter].cp = composite;  // a composite of a starter is a starter again
        continue;
      }
    }
    if (c.ccc == 0) {
      starter = kept;
      last_class = -1;
    } else {
      last_class = c.ccc;
    }
    chars[kept++] = c;
  }
  chars.resize(kept);
}

// Appends NFC(span) using the full algorithm.
void normalize_span(std::string_view span, std::string& out) {
  std::vector<Char> chars;
  chars.reserve(span.size() + 8);
  for (size_t pos = 0; pos < span.size();) {
    const Decoded d = decode_at(span, pos);
    decompose(d.cp, chars);
    pos += d.length;
  }
  order_canonically(chars);
  compose(chars);
  for (const Char& c : chars) append_utf8(c.cp, out);
}

}  // namespace

std::string_view to_nfc(std::string_view text, std::string& storage) {
  size_t copied = 0;    // text[0, copied) is already in storage (when `changed`)
  size_t boundary = 0;  // start of the last boundary code point (or of the text)
  uint8_t last_ccc = 0;
  bool changed = false;
  const NonBoundaryBitmap& boundaries = non_boundaries();
  for (size_t pos = 0; pos < text.size();) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {  // ASCII: boundaries, class 0
      while (pos < text.size() && static_cast<uint8_t>(text[pos]) < 0x80) ++pos;
      boundary = pos - 1, last_ccc = 0;
      continue;
    }
    const Decoded d = decode_at(text, pos);
    if (boundaries.is_boundary(d.cp)) {  // the common case: class 0, NFC_QC=Yes (invalid bytes too)
      boundary = pos, last_ccc = 0;
      pos += d.length;
      continue;
    }
    const NormProps p = norm_props(d.cp);
    if (p.quick_check == QuickCheck::Yes && last_ccc <= p.ccc) {  // a mark (class > 0) in canonical order
      last_ccc = p.ccc;
      pos += d.length;
      continue;
    }
    // Normalize from the last boundary to the next one: nothing outside that span can interact with it.
    size_t end = pos + d.length;
    while (end < text.size()) {
      const Decoded next = decode_at(text, end);
      if (boundaries.is_boundary(next.cp)) break;
      end += next.length;
    }
    if (!changed) {
      storage.clear();
      storage.reserve(text.size() + text.size() / 8 + 8);
      changed = true;
    }
    storage.append(text.substr(copied, boundary - copied));
    normalize_span(text.substr(boundary, end - boundary), storage);
    copied = boundary = pos = end;
    last_ccc = 0;
  }
  if (!changed) return text;
  storage.append(text.substr(copied));
  return storage;
}

std::string to_nfc(std::string_view text) {
  std::string storage;
  return std::string(to_nfc(text, storage));
}

bool is_nfc_stable(std::string_view text) {
  std::string storage;
  return to_nfc(text, storage) == text;
}

std::string to_nfc_unsegmented(std::string_view text) {
  std::string out;
  normalize_span(text, out);
  return out;
}

}  // namespace ga::tok
