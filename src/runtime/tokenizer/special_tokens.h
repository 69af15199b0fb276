// Splitting text at special tokens before tokenization, as llama.cpp's tokenizer_st_partition does.
//
// User-defined tokens are always split out (Hugging Face does the same with added tokens); control and
// unknown tokens only when parse_special is on. Tokens are applied longest first, each one splitting
// every remaining text fragment at all of its non-overlapping occurrences. That order decides between
// overlapping candidates, so it is kept exactly rather than replaced by a single leftmost-longest scan.
// To stay fast with thousands of special tokens (DeepSeek lists 2,398 user-defined ones), a byte trie
// first finds which special tokens occur in the text at all; only those run the splitting passes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpu_accel/tokenizer.h"

namespace ga::tok {

// A piece of the input: either raw text [begin, end) or one special token.
struct Fragment {
  int32_t token = -1;  // >= 0: a special token; -1: raw text
  size_t begin = 0, end = 0;
};

class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);

  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Entry {
    int32_t id;
    std::string text;
    bool always;  // user-defined: split out even without parse_special
  };
  // Entries (indices into entries_) that occur somewhere in text.
  std::vector<bool> occurring(std::string_view text, bool parse_special) const;

  std::vector<Entry> entries_;  // longest text first, then lowest id
  // Byte trie over the entries' texts: node 0 is the root; edges keyed by (node << 8) | byte.
  std::unordered_map<uint64_t, int32_t> trie_edges_;
  std::vector<std::vector<int32_t>> trie_entries_;  // per node: entries whose text ends here
  bool first_byte_[256] = {};
};

}  // namespace ga::tok
