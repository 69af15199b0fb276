// The two merge loops behind every supported tokenizer.
//
// SentencePiece ("llama" GGUF vocabs): start from UTF-8 characters and repeatedly merge the adjacent
// pair whose concatenation is a token with the highest score (ties: leftmost), as llama.cpp's
// llm_tokenizer_spm does. BPE (byte-level vocabs, and Hugging Face byte_fallback BPE): merge the
// adjacent pair with the lowest merge rank (ties: leftmost).
//
// Both are the classic linked list of symbols plus a priority queue of candidate pairs, so a piece of
// n symbols costs O(n log n) instead of the O(n^2) of rescanning for the best pair after every merge.
// Stale queue entries are detected lazily when popped. For BPE every string that a merge can create or
// consume is interned once at load time, so the loop compares integer ids and looks pairs up in a hash
// map keyed by (left id, right id): no string is built while encoding.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace ga::tok {

// Hash map from token text to id that accepts string_view lookups without building a string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// A symbol produced by a merge loop: a byte range of the input and the symbol's id (see each loop).
struct MergedSymbol {
  size_t begin = 0, end = 0;
  int32_t id = -1;
};

// SentencePiece merging of `text` (spaces already escaped as U+2581). Returns the final symbols in order;
// id is the token of the symbol's text, or -1 when it is not a token (a single character that the
// caller turns into byte tokens).
std::vector<MergedSymbol> merge_by_score(std::string_view text, const TokenMap& token_ids,
                                         const std::vector<float>& scores);

// Adjacent code-point pairs that occur inside some token (or merge). A merge can only ever join two
// characters that are adjacent inside the merged text, so the input can be cut wherever a pair is not
// joinable and each segment merged on its own with exactly the same result. For SentencePiece, which
// has no pre-tokenizer, this turns one huge merge queue over the whole text into many word-sized ones.
class JoinablePairs {
 public:
  void add(std::string_view text);
  bool joinable(char32_t left, char32_t right) const { return pairs_.count(key(left, right)) > 0; }

 private:
  static uint64_t key(char32_t left, char32_t right) { return (static_cast<uint64_t>(left) << 32) | right; }
  std::unordered_set<uint64_t> pairs_;
};

// Rank-based BPE over symbols that are token texts or other strings named by merges.
class RankMerger {
 public:
  // merges: "left right" (rank = index). Symbols that are tokens get their token id; strings that only
  // appear in merges get ids from n_tokens on, so any id >= n_tokens means "not a token".
  RankMerger(const std::vector<std::string>& merges, const TokenMap& token_ids, size_t n_tokens);

  // The symbol id of a string (token id, interned merge-only id, or -1 when the string is unknown).
  // token_ids must be the map the merger was built with.
  int32_t symbol_id(std::string_view text, const TokenMap& token_ids) const;

  // Merges the initial symbols (ids from symbol_id, -1 for unknown ones that never merge) in place,
  // leaving the final symbols in order. Byte ranges are carried along and concatenated.
  void merge(std::vector<MergedSymbol>& symbols) const;

  size_t n_tokens() const { return n_tokens_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  int32_t intern(const std::string& text, const TokenMap& token_ids);

  size_t n_tokens_;
  TokenMap merge_only_ids_;  // strings named by merges that are not tokens
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace ga::tok
