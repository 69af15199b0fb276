// NFC normalization against the Unicode conformance file NormalizationTest.txt (Unicode 15, from Debian's
// unicode-data, decompressed by tools/fetch_test_data.sh), and through the Qwen2 tokenizer.
//
// Why these checks: the conformance file is the independent reference for NFC itself (every listed line,
// and every code point it does not list must be stable). The fast path (quick check, spans between
// boundaries) is then checked against the plain algorithm on whole texts built from the file's strings,
// invalid UTF-8 bytes against the file's own answers with the bytes spliced in, and the tokenizer against
// its own ids for the precomposed text.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/tokenizer.h"
#include "runtime/tokenizer/nfc.h"
#include "runtime/tokenizer/nfc_data.h"

namespace ga {
namespace {

// UTF-8 of one code point, written here independently of the library's encoder.
std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// One line of the conformance file: columns source; NFC; NFD; NFKC; NFKD as UTF-8.
struct ConformanceLine {
  int line_number;
  int part;
  std::string c[5];
  std::vector<char32_t> c1_cps;  // the source's code points (Part 1 lists single code points)
};

struct ConformanceFile {
  std::string version;  // from the header "# NormalizationTest-15.0.0.txt"
  std::vector<ConformanceLine> lines;
};

ConformanceFile read_conformance_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  ConformanceFile file;
  std::string line;
  int part = -1;
  for (int number = 1; std::getline(in, line); ++number) {
    if (number == 1 && line.rfind("# NormalizationTest-", 0) == 0) {
      file.version = line.substr(20, line.find(".txt") - 20);
    }
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '@') {
      part = line[5] - '0';  // "@Part1 # ..."
      continue;
    }
    ConformanceLine entry{number, part, {}, {}};
    std::istringstream columns(line.substr(0, line.find('#')));
    for (int column = 0; column < 5; ++column) {
      std::string field;
      std::getline(columns, field, ';');
      std::istringstream hex(field);
      unsigned cp = 0;
      while (hex >> std::hex >> cp) {
        entry.c[column] += utf8(cp);
        if (column == 0) entry.c1_cps.push_back(cp);
      }
      EXPECT_FALSE(entry.c[column].empty()) << "line " << number << " column " << column + 1;
    }
    file.lines.push_back(std::move(entry));
  }
  return file;
}

const ConformanceFile& conformance_file(const std::string& path) {
  static const ConformanceFile file = read_conformance_file(path);
  return file;
}

std::string hex_dump(const std::string& s) {
  std::string out;
  char buf[4];
  for (const char ch : s) {
    std::snprintf(buf, sizeof buf, "%02X", static_cast<unsigned>(static_cast<uint8_t>(ch)));
    out += out.empty() ? "" : " ";
    out += buf;
  }
  return out;
}

// Checks c2 == NFC(c1) == NFC(c2) == NFC(c3) and c4 == NFC(c4) == NFC(c5) for every line with `nfc`.
template <typename Nfc>
void check_invariants(const ConformanceFile& file, Nfc nfc) {
  ASSERT_GT(file.lines.size(), 10000u);
  int failures = 0;
  for (const ConformanceLine& l : file.lines) {
    const std::pair<int, int> checks[] = {{0, 1}, {1, 1}, {2, 1}, {3, 3}, {4, 3}};  // (input, expected) columns
    for (const auto& [input, expected] : checks) {
      const std::string got = nfc(l.c[input]);
      if (got != l.c[expected] && ++failures <= 20) {
        ADD_FAILURE() << "line " << l.line_number << ": NFC(c" << input + 1 << ") = " << hex_dump(got)
                      << ", expected c" << expected + 1 << " = " << hex_dump(l.c[expected]);
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(NfcConformance, FileMatchesTableVersion) {
  GA_REQUIRE_FETCHED(path, "unicode/NormalizationTest.txt");
  EXPECT_EQ(conformance_file(path).version, tok::nfc_data::unicode_version())
      << "NormalizationTest.txt and nfc_data.cpp come from different Unicode versions: rerun tools/gen_nfc_tables.py";
}

TEST(NfcConformance, EveryLine) {
  GA_REQUIRE_FETCHED(path, "unicode/NormalizationTest.txt");
  check_invariants(conformance_file(path), [](const std::string& s) { return tok::to_nfc(s); });
}

TEST(NfcConformance, EveryLineUnsegmented) {
  GA_REQUIRE_FETCHED(path, "unicode/NormalizationTest.txt");
  check_invariants(conformance_file(path), [](const std::string& s) { return tok::to_nfc_unsegmented(s); });
}

// Part 1 lists every code point NFC (or another form) changes; every other one must be stable. All of
// them are checked (1.1 million, fast through the quick check), not a sample.
TEST(NfcConformance, UnlistedCodePointsAreStable) {
  GA_REQUIRE_FETCHED(path, "unicode/NormalizationTest.txt");
  std::set<char32_t> listed;
  for (const auto& l : conformance_file(path).lines) {
    if (l.part == 1 && l.c1_cps.size() == 1) listed.insert(l.c1_cps[0]);
  }
  ASSERT_GT(listed.size(), 10000u);
  int checked = 0, failures = 0;
  std::string storage;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || listed.count(cp)) continue;
    const std::string s = utf8(cp);
    ++checked;
    if (tok::to_nfc(s, storage) != s && ++failures <= 20) ADD_FAILURE() << "U+" << std::hex << uint32_t(cp);
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(checked, 1000000);
}

// The quick check and the splitting into spans must not change the result: whole texts made of many
// lines' sources (so marks meet starters of neighbouring strings) equal the plain algorithm's result.
TEST(NfcFastPath, ConcatenationsEqualUnsegmentedAlgorithm) {
  GA_REQUIRE_FETCHED(path, "unicode/NormalizationTest.txt");
  const auto& lines = conformance_file(path).lines;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<size_t> pick(0, lines.size() - 1);
  const char* const joiners[] = {"", "", "", " ", "a", "\xCC\x81" /* U+0301 */, "\xE1\x84\x80" /* U+1100 */};
  int failures = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    for (int k = 0; k < 6; ++k) text += lines[pick(rng)].c[rng() % 5] + joiners[rng() % std::size(joiners)];
    const std::string expected = tok::to_nfc_unsegmented(text);
    if (tok::to_nfc(text) != expected && ++failures <= 10) ADD_FAILURE() << "text " << hex_dump(text);
    EXPECT_TRUE(tok::is_nfc_stable(expected));
  }
  EXPECT_EQ(failures, 0);
}

// An invalid byte passes through and separates: NFC(a + bad + b) == NFC(a) + bad + NFC(b), with NFC(a)
// and NFC(b) taken from the file (column 2 of the lines whose sources are a and b).
TEST(NfcInvalidUtf8, BytesPassThroughAndSeparate) {
  GA_REQUIRE_FETCHED(path, "unicode/NormalizationTest.txt");
  const auto& lines = conformance_file(path).lines;
  const std::string bad_bytes[] = {"\xFF", "\x80", "\xC3", "\xED\xA0\x80" /* a surrogate */, "\xF0\x9F",
                                   "\xC0\xAF" /* overlong '/' */, "\xF4\x90\x80\x80" /* above U+10FFFF */};
  std::mt19937 rng(99);
  std::uniform_int_distribution<size_t> pick(0, lines.size() - 1);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto& a = lines[pick(rng)];
    const auto& b = lines[pick(rng)];
    const std::string& bad = bad_bytes[rng() % std::size(bad_bytes)];
    const std::string got = tok::to_nfc(a.c[0] + bad + b.c[0]);
    ASSERT_EQ(hex_dump(got), hex_dump(a.c[1] + bad + b.c[1])) << "lines " << a.line_number << ", " << b.line_number;
  }
  for (const std::string& bad : bad_bytes) EXPECT_EQ(tok::to_nfc(bad), bad);
}

// ---- the quick-check fast path: no copy, and fast ----

// A megabyte of NFC text: ASCII, or words of several scripts (Latin with accents, Cyrillic, CJK, Hangul
// syllables, emoji), none of which NFC changes.
std::string megabyte_of(bool ascii_only) {
  const std::vector<std::vector<char32_t>> scripts = {
      {'a', 'e', 'l', 'o', 'r', 's', 't'}, {'c', 'a', 'f', 0xE9, 0xFC, 0xEF}, {0x430, 0x436, 0x44F, 0x43E},
      {0x4E2D, 0x6587, 0x5B57, 0x8A9E}, {0xD55C, 0xAE00, 0xC5B4}, {0x1F600, 0x1F680}};
  std::string text;
  std::mt19937 rng(7);
  while (text.size() < (1u << 20)) {
    const auto& script = scripts[ascii_only ? 0 : rng() % scripts.size()];
    for (int k = 2 + static_cast<int>(rng() % 6); k > 0; --k) text += utf8(script[rng() % script.size()]);
    text += ' ';
  }
  return text;
}

double best_seconds(const std::string& text, std::string_view* result, std::string& storage) {
  double best = 1e9;
  for (int run = 0; run < 3; ++run) {  // best of three: the CI machine is shared
    const auto t0 = std::chrono::steady_clock::now();
    *result = tok::to_nfc(text, storage);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

TEST(NfcFastPath, StableTextIsReturnedWithoutCopyInMilliseconds) {
  for (const bool ascii_only : {true, false}) {
    const std::string text = megabyte_of(ascii_only);
    std::string storage;
    std::string_view result;
    const double s = best_seconds(text, &result, storage);
    std::printf("[ speed    ] %s: %.2f MB already NFC in %.2f ms\n", ascii_only ? "ASCII" : "mixed scripts",
                text.size() / 1e6, s * 1e3);
    EXPECT_EQ(result.data(), text.data()) << "the quick check should return the text itself";
    // Idle: under 1 ms (ASCII) and ~3 ms (mixed). The bound only guards against losing the fast
    // path (a full normalization of 1 MB takes ~100x longer); it is not a benchmark.
    EXPECT_LT(s, 0.25);
  }
}

// Decomposed letters sprinkled through a megabyte: only the spans around them are rebuilt.
TEST(NfcFastPath, SparseDecomposedTextIsFast) {
  const std::string base = megabyte_of(false);
  std::string text, expected;
  for (size_t pos = 0; pos < base.size(); pos += 1000) {
    text += base.substr(pos, 1000) + " e\xCC\x81";  // e + U+0301
    expected += base.substr(pos, 1000) + " \xC3\xA9";
  }
  std::string storage;
  std::string_view result;
  const double s = best_seconds(text, &result, storage);
  std::printf("[ speed    ] %.2f MB with %zu decomposed letters in %.2f ms\n", text.size() / 1e6,
              base.size() / 1000 + 1, s * 1e3);
  EXPECT_TRUE(result == expected);
  EXPECT_TRUE(result == tok::to_nfc_unsegmented(text));
  EXPECT_LT(s, 0.5);  // idle: 3-5 ms; a guard against re-normalizing the whole text, not a benchmark
}

// ---- the Qwen2 tokenizer (normalizer NFC) ----

TEST(NfcTokenizer, Qwen2EncodesDecomposedTextLikeComposedText) {
  GA_REQUIRE_FETCHED(path, "qwen2/tokenizer.json");
  Vocab vocab = Vocab::from_hf_json(path);
  ASSERT_TRUE(vocab.requires_nfc);
  const Tokenizer tok(vocab);
  const std::string composed = "Caf\xC3\xA9 na\xC3\xAFve";           // "Café naïve" with U+00E9, U+00EF
  const std::string decomposed = "Cafe\xCC\x81 na\xC3\xAFve";        // e + U+0301
  const std::string both_decomposed = "Cafe\xCC\x81 nai\xCC\x88ve";  // and i + U+0308
  const auto ids = tok.encode(composed, false);
  EXPECT_EQ(tok.encode(decomposed, false), ids);
  EXPECT_EQ(tok.encode(both_decomposed, false), ids);
  EXPECT_EQ(tok.decode(tok.encode(decomposed, false)), composed);

  // Without the normalizer the decomposed text tokenizes differently, so the equality above is NFC's doing.
  vocab.requires_nfc = false;
  const Tokenizer raw_tok(vocab);
  EXPECT_NE(raw_tok.encode(decomposed, false), ids);
  EXPECT_EQ(raw_tok.encode(composed, false), ids);
}

TEST(NfcTokenizer, Qwen2NormalizesBetweenSpecialTokensAndKeepsInvalidBytes) {
  GA_REQUIRE_FETCHED(path, "qwen2/tokenizer.json");
  const Tokenizer tok(Vocab::from_hf_json(path));
  const std::string im_start = "<|im_start|>", im_end = "<|im_end|>";
  EXPECT_EQ(tok.encode(im_start + "Cafe\xCC\x81" + im_end, false, true),
            tok.encode(im_start + "Caf\xC3\xA9" + im_end, false, true));
  // Invalid bytes are encoded byte by byte and come back unchanged; the mark after 0xFF has nothing to join.
  const std::string with_invalid = "e\xFF\xCC\x81 x\xC3";
  EXPECT_EQ(tok.decode(tok.encode(with_invalid, false)), with_invalid);
}

}  // namespace
}  // namespace ga
