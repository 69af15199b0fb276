#include "runtime/engine/prompt_state_cache.h"

#include <algorithm>
#include <utility>

namespace ga::engine {

uint64_t PromptStateCache::entry_bytes(const Entry& e) {
  return e.tokens.size() * sizeof(int32_t) + e.state.floats.size() * sizeof(float);
}

const PromptStateCache::Entry* PromptStateCache::longest_prefix(std::span<const int32_t> tokens, int64_t max_tokens) {
  Entry* best = nullptr;
  const size_t limit = static_cast<size_t>(std::clamp<int64_t>(max_tokens, 0, static_cast<int64_t>(tokens.size())));
  for (Entry& e : entries_) {
    if (e.tokens.size() > limit || static_cast<int64_t>(e.tokens.size()) < min_tokens_) continue;
    if (best != nullptr && e.tokens.size() <= best->tokens.size()) continue;
    if (std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin())) best = &e;
  }
  if (best != nullptr) {
    best->used = Clock::now();
    ++hits_;
  }
  return best;
}

std::vector<PromptStateCache::Entry>::const_iterator PromptStateCache::find(std::span<const int32_t> tokens) const {
  return std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end());
  });
}

bool PromptStateCache::contains(std::span<const int32_t> tokens) const { return find(tokens) != entries_.end(); }

void PromptStateCache::insert(std::span<const int32_t> tokens, step::RecurrentSnapshot state) {
  Entry fresh{std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(state), Clock::now()};
  const uint64_t need = entry_bytes(fresh);
  if (need > max_bytes_) return;
  if (const auto same = find(tokens); same != entries_.end()) {
    bytes_ -= entry_bytes(*same);
    entries_.erase(same);
  }
  while (bytes_ + need > max_bytes_ && !entries_.empty()) {
    const auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                         [](const Entry& a, const Entry& b) { return a.used < b.used; });
    bytes_ -= entry_bytes(*oldest);
    entries_.erase(oldest);
  }
  bytes_ += need;
  entries_.push_back(std::move(fresh));
}

int64_t PromptStateCache::drop_idle(Clock::duration idle, Clock::time_point now) {
  int64_t dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (now - it->used >= idle) {
      bytes_ -= entry_bytes(*it);
      it = entries_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

}  // namespace ga::engine
