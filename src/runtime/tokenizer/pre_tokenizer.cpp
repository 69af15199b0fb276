// Pre-tokenizer table and Split-Isolated semantics (see pre_tokenizer.h for the design).
//
// The regex lists are the ones llama.cpp's llama-vocab.cpp registers per pre-tokenizer name; they are
// the Hugging Face tokenizer.json patterns of those model families, with `(?i:'s|...)` spelled out as
// case classes. Non-ASCII characters inside classes are written as \u escapes so that no editor or tool
// can silently normalize them (several are NFC singletons, e.g. U+2126 OHM SIGN, which would turn into
// U+03A9 and break a class range).
#include "runtime/tokenizer/pre_tokenizer.h"

#include <array>

#include "gpu_accel/error.h"
#include "runtime/tokenizer/unicode.h"

namespace ga::tok {
namespace {

// "'s|'t|...| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)": the GPT-2 pattern as llama.cpp keeps it.
const char* const kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

const char* const kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek LLM: letters of the cased scripts (Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, ...).
const char* const kDeepseekLlmLetters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE"
    "\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"
    "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06"
    "\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3"
    "\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"
    "\U0001E900-\U0001E943]+";
// ASCII punctuation, full-width punctuation, curly quotes and the CJK space/comma/full stop.
const char* const kDeepseekLlmPunct = "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+";
// CJK unified ideographs, the blocks from Samaritan to CJK, and Hangul syllables.
const char* const kDeepseekCjk = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";

const char* const kDefaultTail = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

}  // namespace

size_t utf8_sequence_length(std::string_view text, size_t pos) {
  char32_t cp = 0;
  const size_t len = text::decode_utf8_at(text, pos, &cp);
  return len == 0 ? 1 : len;
}

DecodedText decode_utf8(std::string_view text) {
  DecodedText out;
  out.cps.reserve(text.size());
  out.byte_offsets.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp = 0;
    size_t len = text::decode_utf8_at(text, pos, &cp);
    if (len == 0) len = 1, cp = 0xFFFD;  // invalid byte: matched as U+FFFD, its byte is kept by offset
    out.cps.push_back(cp);
    out.byte_offsets.push_back(static_cast<uint32_t>(pos));
    pos += len;
  }
  out.byte_offsets.push_back(static_cast<uint32_t>(text.size()));
  return out;
}

const std::string& gpt2_regex() {
  // Hugging Face's ByteLevel pattern ends with `|\s+`; it changes nothing under Isolated splitting
  // (whitespace that `\s+(?!\S)` leaves unmatched becomes a gap piece of its own anyway), but keep it.
  static const std::string pattern = std::string(kGpt2) + "|\\s+";
  return pattern;
}

std::vector<std::string> pre_regexes_for(const std::string& pre) {
  if (pre == "none") return {};  // no splitting (a tokenizer.json without split patterns)
  if (pre == "default") {
    return {R"([\p{P}\$\+<=>\^~\|]+)", kDefaultTail, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  }
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" || pre == "dbrx" ||
      pre == "smaug-bpe" || pre == "chatglm-bpe") {
    return {kLlama3};
  }
  if (pre == "deepseek-llm") {
    return {"[\\r\\n]", kDeepseekLlmLetters, kDeepseekLlmPunct, "\\s+$", kDeepseekCjk, "\\p{N}+"};
  }
  if (pre == "deepseek-coder") {
    return {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kDeepseekCjk, "\\p{N}"};
  }
  if (pre == "falcon") {
    return {R"([\p{P}\$\+<=>\^~\|`]+)", kDefaultTail, "[0-9][0-9][0-9]"};
  }
  if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm" || pre == "codeshell" ||
      pre == "exaone" || pre == "minerva-7b") {
    return {"\\p{N}", kDefaultTail};
  }
  if (pre == "gpt-2" || pre == "mpt" || pre == "olmo" || pre == "jais" || pre == "phi-2" || pre == "jina-es" ||
      pre == "jina-de" || pre == "gigachat" || pre == "jina-v1-en" || pre == "jina-v2-es" || pre == "jina-v2-de" ||
      pre == "jina-v2-code" || pre == "roberta-bpe") {
    return {kGpt2};
  }
  if (pre == "qwen2" || pre == "stablelm2" || pre == "megrez") return {kQwen2};
  if (pre == "poro-chat" || pre == "bloom" || pre == "gpt3-finnish") {
    return {" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+"};
  }
  if (pre == "viking") return {" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+", "\\p{N}"};
  GA_THROW(Unsupported, "unsupported BPE pre-tokenizer '", pre, "' (tokenizer.ggml.pre)");
}

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
  regexes_.reserve(patterns.size());
  for (const auto& p : patterns) regexes_.emplace_back(p);
}

std::vector<std::pair<size_t, size_t>> PreTokenizer::split(std::string_view text) const {
  if (text.empty()) return {};
  if (regexes_.empty()) return {{0, text.size()}};
  const DecodedText decoded = decode_utf8(text);
  // Pieces as code-point ranges; each regex refines them. A regex sees one piece at a time, so its
  // lookaheads and anchors stop at the piece's ends (as in Hugging Face's Split on each sub-string).
  std::vector<std::pair<size_t, size_t>> pieces{{0, decoded.cps.size()}};
  std::vector<std::pair<size_t, size_t>> next;
  const std::u32string_view all(decoded.cps);
  for (const auto& re : regexes_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const auto& [begin, end] : pieces) {
      size_t pos = begin;
      for (const auto& [mb, me] : re.find_all(all.substr(begin, end - begin))) {
        if (mb == me) continue;  // an empty match splits nothing
        if (begin + mb > pos) next.emplace_back(pos, begin + mb);
        next.emplace_back(begin + mb, begin + me);
        pos = begin + me;
      }
      if (pos < end) next.emplace_back(pos, end);
    }
    pieces.swap(next);
  }
  for (auto& [b, e] : pieces) b = decoded.byte_offsets[b], e = decoded.byte_offsets[e];
  return pieces;
}

namespace {

// GPT-2's table: printable Latin-1 bytes stand for themselves, the other 68 bytes are shifted to
// U+0100.. in byte order, so every byte maps to a visible, non-space code point.
struct ByteLevelTable {
  static constexpr size_t kCodePoints = 256 + 68;  // every byte-level code point is below this
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, kCodePoints> cp_to_byte{};
  ByteLevelTable() {
    cp_to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      byte_to_utf8[b] = text::codepoint_to_utf8(cp);
      cp_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable table;
  return table;
}

}  // namespace

const std::string& byte_to_unicode_utf8(uint8_t byte) { return byte_level_table().byte_to_utf8[byte]; }

int unicode_to_byte(char32_t cp) {
  return cp < ByteLevelTable::kCodePoints ? byte_level_table().cp_to_byte[cp] : -1;
}

}  // namespace ga::tok
