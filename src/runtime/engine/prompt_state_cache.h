// The Scheduler's prompt-state cache for recurrent models (RWKV): a recurrent state is the whole prefix's, not a
// block's, so the KV prefix cache cannot share it. Instead the state after a prompt's first n - 1 tokens is
// copied out of the backend (BatchBackend::save_recurrent_state) and kept here under those tokens; a later
// prompt that starts with them (the same prompt again, or the next turn of a chat) gets the state put back
// and computes only the rest. The last prompt token is always computed, as with the KV prefix cache: its
// logits choose the first generated token.
//
// Bounded by bytes (the snapshots are the model's whole per-sequence state: ~13 MB for a 1.5B RWKV-7);
// the entry used longest ago goes first. Scheduler thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "backends/step_ops.h"

namespace ga::engine {

class PromptStateCache {
 public:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::vector<int32_t> tokens;  // the state has read exactly these
    step::RecurrentSnapshot state;
    Clock::time_point used;
  };

  // Entries of fewer than min_tokens tokens are never looked up (see SchedulerOptions::prompt_state_min_tokens).
  PromptStateCache(uint64_t max_bytes, int64_t min_tokens) : max_bytes_(max_bytes), min_tokens_(min_tokens) {}
  bool enabled() const { return max_bytes_ > 0; }

  // The entry with the most tokens that are a prefix of `tokens` and number at most max_tokens (and at least
  // min_tokens()); nullptr when none. Marks it used.
  const Entry* longest_prefix(std::span<const int32_t> tokens, int64_t max_tokens);
  bool contains(std::span<const int32_t> tokens) const;
  // Keeps the snapshot under `tokens` (replacing an entry of the same tokens), then drops the entries used
  // longest ago until the bytes fit; a snapshot larger than the whole budget is not kept.
  void insert(std::span<const int32_t> tokens, step::RecurrentSnapshot state);
  // Drops the entries unused for at least idle (housekeeping); returns how many.
  int64_t drop_idle(Clock::duration idle, Clock::time_point now = Clock::now());

  int64_t entries() const { return static_cast<int64_t>(entries_.size()); }
  uint64_t bytes() const { return bytes_; }
  uint64_t hits() const { return hits_; }
  int64_t min_tokens() const { return min_tokens_; }

 private:
  static uint64_t entry_bytes(const Entry& e);
  std::vector<Entry>::const_iterator find(std::span<const int32_t> tokens) const;  // the entry of exactly these
  uint64_t max_bytes_ = 0;
  int64_t min_tokens_ = 1;
  uint64_t bytes_ = 0;
  uint64_t hits_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace ga::engine
