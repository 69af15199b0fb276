// Bookkeeping of the paged KV cache: which block belongs to whom, and which blocks hold a known
// prompt prefix (automatic prefix caching, as vLLM does it). The K/V memory itself is the model
// backend's pool (cpu::KvPool, the CUDA engine's); this class only hands out block ids.
//
// Blocks have reference counts. A sequence holds one reference on every block of its block table.
// A FULL block of prompt tokens whose K/V has been written can be published to the prefix cache:
// its identity is (parent entry, its tokens), where the parent entry is the cached block holding the
// previous block_size tokens (kRootKey for the first block). Later sequences with the same prefix
// find the chain block by block and take references on the same blocks instead of recomputing them.
// When the last reference goes away, a cached block is not freed: it moves to an LRU list of
// evictable blocks, still findable, and is reclaimed (least recently used first) only when no free
// block is left. An uncached block goes straight back to the free list.
//
// Lookups hash (parent key, tokens) to find candidates, then compare the parent key and every
// token, so a hash collision can never return the wrong block. Parent keys are serial numbers that
// are never reused, so a chain through an evicted (and re-used) block cannot be mistaken for a live
// one either. The hash function is a parameter so tests can force collisions.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "gpu_accel/model.h"

namespace ga::engine {

// The context size a Session or Scheduler uses: `requested`, or (0) the model's training context
// capped at kDefaultMaxContext. Warns when a request exceeds the training context.
int64_t resolve_n_ctx(const ModelConfig& config, int64_t requested);
inline constexpr int64_t kDefaultMaxContext = 4096;  // cap for the default (KV memory grows with it)

using BlockHasher = uint64_t (*)(uint64_t parent_key, std::span<const int32_t> tokens);
uint64_t default_block_hash(uint64_t parent_key, std::span<const int32_t> tokens);

class KvBlockManager {
 public:
  static constexpr uint64_t kRootKey = 0;  // the parent of a sequence's first block

  KvBlockManager(int64_t n_blocks, int64_t block_size, BlockHasher hasher = default_block_hash);

  int64_t n_blocks() const { return static_cast<int64_t>(ref_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t n_used() const { return n_used_; }                                // blocks with references
  int64_t n_cached() const { return static_cast<int64_t>(lru_.size()); }   // unreferenced, still cached
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }    // unreferenced, not cached
  int64_t n_available() const { return n_free() + n_cached(); }            // what allocate() can hand out
  int refcount(int32_t block) const;
  bool is_cached(int32_t block) const;  // published and not evicted

  // A private block with one reference: a free one, else the least recently used cached block
  // (evicted from the cache). -1 when every block is referenced.
  int32_t allocate();
  void retain(int32_t block);
  void release(int32_t block);
  // Releases a whole block table, last block first (so a sequence's tail blocks are evicted before
  // its head, which more sequences share), and clears it.
  void release_table(std::vector<int32_t>& table);

  struct PrefixMatch {
    std::vector<int32_t> blocks;  // retained, in position order
    uint64_t key = kRootKey;      // the cache key of the last matched block (kRootKey: none)
  };
  // The longest chain of cached blocks equal to the first full blocks of `tokens`, at most
  // max_blocks of them. Every returned block gets one reference.
  PrefixMatch match_prefix(std::span<const int32_t> tokens, int64_t max_blocks);

  // Publishes `block` (referenced, K/V written) as the block after `parent_key` holding `tokens`
  // (exactly block_size of them). Returns the cache key of that content: the block's new key, or the
  // key of an identical entry published earlier (then `block` stays private: two copies of the same
  // prefix computed concurrently).
  uint64_t publish(int32_t block, uint64_t parent_key, std::span<const int32_t> tokens);

  // Housekeeping (Scheduler::housekeep). A cached block nobody references still pins its cache entry
  // until allocate() needs it; an idle server would keep yesterday's prefixes forever. This frees the
  // unreferenced cached blocks whose last reference went away at or before `cutoff` (least recently
  // used first: the LRU list is in release order) and returns how many it freed.
  using Clock = std::chrono::steady_clock;
  int64_t evict_cached_released_before(Clock::time_point cutoff);
  // Puts the free list back in ascending order, so that allocate() hands out the lowest free ids first
  // again and the blocks in use stay packed at the start of the pool (after many sequences came and went
  // the stack is in release order); rebuilds the prefix index's buckets for its current size. Returns
  // whether the free list's order changed.
  bool compact();

 private:
  struct Entry {
    uint64_t key = kRootKey;  // kRootKey: not in the cache
    uint64_t parent = kRootKey;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;
  };

  void check_block(int32_t block) const;
  int32_t find(uint64_t parent_key, std::span<const int32_t> tokens, uint64_t hash) const;
  void evict(int32_t block);  // drops the block's cache entry

  int64_t block_size_;
  BlockHasher hasher_;
  std::vector<int> ref_;
  std::vector<Entry> entries_;                          // [n_blocks]
  std::vector<int32_t> free_;                           // stack: lowest ids on top
  std::list<int32_t> lru_;                              // cached, unreferenced; least recently used first
  std::vector<std::list<int32_t>::iterator> lru_pos_;   // [n_blocks]; valid while in lru_
  std::vector<Clock::time_point> released_at_;          // [n_blocks]; when it entered lru_
  std::unordered_multimap<uint64_t, int32_t> index_;    // hash -> cached block
  uint64_t next_key_ = kRootKey + 1;
  int64_t n_used_ = 0;
};

}  // namespace ga::engine
