// Special-token splitting (see special_tokens.h for the design).
#include "runtime/tokenizer/special_tokens.h"

#include <algorithm>

namespace ga::tok {

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) {
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const TokenType type = vocab.token_types.empty() ? TokenType::Normal : vocab.token_types[id];
    if (type != TokenType::Control && type != TokenType::UserDefined && type != TokenType::Unknown) continue;
    if (vocab.tokens[id].empty()) continue;
    entries_.push_back({static_cast<int32_t>(id), vocab.tokens[id], type == TokenType::UserDefined});
  }
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.text.size() > b.text.size(); });

  trie_entries_.emplace_back();
  for (size_t e = 0; e < entries_.size(); ++e) {
    int32_t node = 0;
    for (const char c : entries_[e].text) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
      auto it = trie_edges_.find(key);
      if (it == trie_edges_.end()) {
        it = trie_edges_.emplace(key, static_cast<int32_t>(trie_entries_.size())).first;
        trie_entries_.emplace_back();
      }
      node = it->second;
    }
    trie_entries_[static_cast<size_t>(node)].push_back(static_cast<int32_t>(e));
    first_byte_[static_cast<uint8_t>(entries_[e].text[0])] = true;
  }
}

std::vector<bool> SpecialTokenSplitter::occurring(std::string_view text, bool parse_special) const {
  std::vector<bool> found(entries_.size(), false);
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) continue;
    int32_t node = 0;
    for (size_t k = pos; k < text.size(); ++k) {
      const auto it = trie_edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[k]));
      if (it == trie_edges_.end()) break;
      node = it->second;
      for (int32_t e : trie_entries_[static_cast<size_t>(node)]) {
        if (parse_special || entries_[static_cast<size_t>(e)].always) found[static_cast<size_t>(e)] = true;
      }
    }
  }
  return found;
}

std::vector<Fragment> SpecialTokenSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  if (entries_.empty()) return fragments;

  const std::vector<bool> found = occurring(text, parse_special);
  std::vector<Fragment> next;
  for (size_t e = 0; e < entries_.size(); ++e) {
    if (!found[e]) continue;
    const Entry& entry = entries_[e];
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      while (pos < f.end) {
        const size_t match = text.substr(0, f.end).find(entry.text, pos);
        if (match == std::string_view::npos) break;
        if (match > pos) next.push_back({-1, pos, match});
        next.push_back({entry.id, match, match + entry.text.size()});
        pos = match + entry.text.size();
      }
      if (pos < f.end) next.push_back({-1, pos, f.end});
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace ga::tok
