// Pre-tokenization for byte-level BPE: the split-regex table per `tokenizer.ggml.pre` name, the
// "Split, behavior Isolated" semantics of Hugging Face tokenizers, and the GPT-2 byte <-> unicode map.
//
// Why this shape: every BPE family differs only in its list of split regexes, so the families are
// data (a table from pre name to regex list), not code. Splitting works on code-point offsets into
// one decoded copy of the text and hands back byte ranges of the original text, so invalid UTF-8
// bytes (decoded as U+FFFD for matching) keep their exact bytes for the byte-level BPE and a round
// trip stays lossless.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/tokenizer/regex.h"

namespace ga::tok {

// Text decoded to code points, with the byte offset where each code point starts.
// Invalid UTF-8: each byte that does not start a well-formed sequence becomes one U+FFFD of one byte.
struct DecodedText {
  std::u32string cps;
  std::vector<uint32_t> byte_offsets;  // [cps.size() + 1]; the last entry is the text size
};
DecodedText decode_utf8(std::string_view text);
// Length in bytes of the UTF-8 sequence at text[pos] under decode_utf8's rule (1 for invalid bytes).
size_t utf8_sequence_length(std::string_view text, size_t pos);

// The split regexes llama.cpp uses for a `tokenizer.ggml.pre` name ("none": no splitting). Throws Unsupported naming the
// pre-tokenizer when it is not known.
std::vector<std::string> pre_regexes_for(const std::string& pre_name);
// The GPT-2 pattern (Hugging Face ByteLevel pre-tokenizer with use_regex = true).
const std::string& gpt2_regex();

class PreTokenizer {
 public:
  explicit PreTokenizer(const std::vector<std::string>& patterns);  // compiles each (throws on bad syntax)

  // Byte ranges [begin, end) of `text`'s pieces. Each regex in turn splits every current piece into its
  // matches and the unmatched gaps between them (both kept, in order); empty pieces are dropped.
  // With no regexes the whole text is one piece.
  std::vector<std::pair<size_t, size_t>> split(std::string_view text) const;

 private:
  std::vector<text::Regex> regexes_;
};

// GPT-2's reversible map from bytes to printable code points (byte-level BPE token text).
const std::string& byte_to_unicode_utf8(uint8_t byte);  // the UTF-8 of the code point standing for `byte`
// The byte a byte-level code point stands for, or -1 when `cp` is not one of the 256.
int unicode_to_byte(char32_t cp);

}  // namespace ga::tok
