// Score-based (SentencePiece) and rank-based (BPE) merge loops; see merge.h for the design.
#include "runtime/tokenizer/merge.h"

#include <queue>

#include "gpu_accel/error.h"
#include "runtime/tokenizer/pre_tokenizer.h"

namespace ga::tok {
namespace {

// A symbol in the doubly linked list the merge loops work on. A merged-away symbol has begin == end.
struct Node {
  size_t begin, end;
  int32_t id;
  int32_t prev, next;  // -1 at the ends
};

std::vector<Node> link(const std::vector<MergedSymbol>& symbols) {
  std::vector<Node> nodes(symbols.size());
  for (size_t i = 0; i < symbols.size(); ++i) {
    nodes[i] = {symbols[i].begin, symbols[i].end, symbols[i].id, static_cast<int32_t>(i) - 1,
                i + 1 < symbols.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  return nodes;
}

std::vector<MergedSymbol> live_symbols(const std::vector<Node>& nodes) {
  std::vector<MergedSymbol> out;
  for (int32_t i = nodes.empty() ? -1 : 0; i != -1; i = nodes[static_cast<size_t>(i)].next) {
    const Node& n = nodes[static_cast<size_t>(i)];
    out.push_back({n.begin, n.end, n.id});
  }
  return out;
}

// Absorbs right into left and unlinks right.
void absorb(std::vector<Node>& nodes, int32_t left, int32_t right) {
  Node& l = nodes[static_cast<size_t>(left)];
  Node& r = nodes[static_cast<size_t>(right)];
  l.end = r.end;
  r.begin = r.end;
  l.next = r.next;
  if (r.next >= 0) nodes[static_cast<size_t>(r.next)].prev = left;
}

}  // namespace

void JoinablePairs::add(std::string_view text) {
  const DecodedText decoded = decode_utf8(text);
  for (size_t i = 1; i < decoded.cps.size(); ++i) pairs_.insert(key(decoded.cps[i - 1], decoded.cps[i]));
}

std::vector<MergedSymbol> merge_by_score(std::string_view text, const TokenMap& token_ids,
                                         const std::vector<float>& scores) {
  std::vector<MergedSymbol> initial;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = utf8_sequence_length(text, pos);
    initial.push_back({pos, pos + len, -1});
    pos += len;
  }
  std::vector<Node> nodes = link(initial);

  struct Bigram {
    float score;
    int32_t left, right;
    size_t size;  // bytes of the pair when queued: a mismatch later means one side has changed
  };
  // Highest score first; among equal scores the leftmost pair.
  const auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Node& l = nodes[static_cast<size_t>(left)];
    const Node& r = nodes[static_cast<size_t>(right)];
    const auto it = token_ids.find(text.substr(l.begin, r.end - l.begin));
    if (it == token_ids.end()) return;
    const float score = scores.empty() ? 0.0f : scores[static_cast<size_t>(it->second)];
    queue.push({score, left, right, r.end - l.begin});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(nodes.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    const Node& l = nodes[static_cast<size_t>(b.left)];
    const Node& r = nodes[static_cast<size_t>(b.right)];
    if (l.begin == l.end || r.begin == r.end || (l.end - l.begin) + (r.end - r.begin) != b.size) continue;
    absorb(nodes, b.left, b.right);
    try_add(nodes[static_cast<size_t>(b.left)].prev, b.left);
    try_add(b.left, nodes[static_cast<size_t>(b.left)].next);
  }

  std::vector<MergedSymbol> out = live_symbols(nodes);
  for (auto& s : out) {
    const auto it = token_ids.find(text.substr(s.begin, s.end - s.begin));
    s.id = it == token_ids.end() ? -1 : it->second;
  }
  return out;
}

RankMerger::RankMerger(const std::vector<std::string>& merges, const TokenMap& token_ids, size_t n_tokens)
    : n_tokens_(n_tokens) {
  merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t sep = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    GA_CHECK(sep != std::string::npos, InvalidFormat, "BPE merge ", rank, " '", m, "' has no separator");
    const std::string left = m.substr(0, sep), right = m.substr(sep + 1);
    const int32_t l = intern(left, token_ids), r = intern(right, token_ids);
    const int32_t result = intern(left + right, token_ids);
    // A pair listed twice keeps its first (best) rank, as a lookup in a rank table built in order would.
    merges_.emplace(pair_key(l, r), Merge{static_cast<int32_t>(rank), result});
  }
}

int32_t RankMerger::intern(const std::string& text, const TokenMap& token_ids) {
  if (const auto it = token_ids.find(text); it != token_ids.end()) return it->second;
  const auto [it, inserted] =
      merge_only_ids_.emplace(text, static_cast<int32_t>(n_tokens_ + merge_only_ids_.size()));
  return it->second;
}

int32_t RankMerger::symbol_id(std::string_view text, const TokenMap& token_ids) const {
  if (const auto it = token_ids.find(text); it != token_ids.end()) return it->second;
  const auto it = merge_only_ids_.find(text);
  return it == merge_only_ids_.end() ? -1 : it->second;
}

void RankMerger::merge(std::vector<MergedSymbol>& symbols) const {
  if (symbols.size() < 2) return;
  std::vector<Node> nodes = link(symbols);

  struct Candidate {
    int32_t rank;
    int32_t left, right;
    int32_t left_id, right_id;  // ids when queued: a mismatch later means one side has changed
    int32_t result;
  };
  // Lowest rank first; among equal ranks the leftmost pair.
  const auto worse = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t l = nodes[static_cast<size_t>(left)].id, r = nodes[static_cast<size_t>(right)].id;
    if (l < 0 || r < 0) return;
    const auto it = merges_.find(pair_key(l, r));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, left, right, l, r, it->second.result});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(nodes.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Node& l = nodes[static_cast<size_t>(c.left)];
    const Node& r = nodes[static_cast<size_t>(c.right)];
    if (l.begin == l.end || r.begin == r.end || l.id != c.left_id || r.id != c.right_id || l.next != c.right) {
      continue;
    }
    l.id = c.result;
    absorb(nodes, c.left, c.right);
    try_add(nodes[static_cast<size_t>(c.left)].prev, c.left);
    try_add(c.left, nodes[static_cast<size_t>(c.left)].next);
  }
  symbols = live_symbols(nodes);
}

}  // namespace ga::tok
