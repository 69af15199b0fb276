// Block allocator with reference counts and the prefix cache (see kv_cache.h).
//
// Every operation is O(1) expected except match_prefix/publish, which hash and compare one block
// of tokens per step. The free list is a stack so a fresh manager hands out blocks 0, 1, 2, ...
// (deterministic layouts make test failures reproducible).
#include "runtime/engine/kv_cache.h"

#include <algorithm>
#include <functional>

#include "core/log.h"
#include "gpu_accel/error.h"

namespace ga::engine {

int64_t resolve_n_ctx(const ModelConfig& config, int64_t requested) {
  GA_CHECK(requested >= 0, InvalidArgument, "n_ctx must be >= 0 (0: the model's default), got ", requested);
  if (requested > 0) {
    if (config.n_ctx_train > 0 && requested > config.n_ctx_train) {
      GA_LOG(Warn, "n_ctx ", requested, " exceeds the model's training context ", config.n_ctx_train);
    }
    return requested;
  }
  return config.n_ctx_train > 0 ? std::min(config.n_ctx_train, kDefaultMaxContext) : kDefaultMaxContext;
}

uint64_t default_block_hash(uint64_t parent_key, std::span<const int32_t> tokens) {
  // splitmix64's finalizer over (parent, tokens...): cheap and well mixed. Collisions are harmless
  // (lookups compare the tokens), they only cost a comparison.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(parent_key + 0x9E3779B97F4A7C15ull);
  for (const int32_t t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9E3779B97F4A7C15ull));
  return h;
}

KvBlockManager::KvBlockManager(int64_t n_blocks, int64_t block_size, BlockHasher hasher)
    : block_size_(block_size), hasher_(hasher) {
  GA_CHECK(n_blocks > 0 && n_blocks <= INT32_MAX, InvalidArgument, "KV block count ", n_blocks,
           " is outside [1, 2^31)");
  GA_CHECK(block_size > 0, InvalidArgument, "KV block size must be positive, got ", block_size);
  GA_CHECK(hasher != nullptr, InvalidArgument, "KV block manager needs a hash function");
  ref_.assign(static_cast<size_t>(n_blocks), 0);
  entries_.resize(static_cast<size_t>(n_blocks));
  lru_pos_.resize(static_cast<size_t>(n_blocks), lru_.end());
  released_at_.resize(static_cast<size_t>(n_blocks));
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

void KvBlockManager::check_block(int32_t block) const {
  GA_CHECK(block >= 0 && block < n_blocks(), Internal, "KV block ", block, " is outside the pool of ", n_blocks());
}

int KvBlockManager::refcount(int32_t block) const {
  check_block(block);
  return ref_[static_cast<size_t>(block)];
}

bool KvBlockManager::is_cached(int32_t block) const {
  check_block(block);
  return entries_[static_cast<size_t>(block)].key != kRootKey;
}

int32_t KvBlockManager::allocate() {
  int32_t block = -1;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    block = lru_.front();
    lru_.pop_front();
    lru_pos_[static_cast<size_t>(block)] = lru_.end();
    evict(block);
  } else {
    return -1;
  }
  ref_[static_cast<size_t>(block)] = 1;
  ++n_used_;
  return block;
}

void KvBlockManager::retain(int32_t block) {
  check_block(block);
  int& r = ref_[static_cast<size_t>(block)];
  if (r == 0) {
    // Only a cached block can be unreferenced and still in someone's hands (a prefix match).
    GA_CHECK(is_cached(block), Internal, "retain of free KV block ", block);
    lru_.erase(lru_pos_[static_cast<size_t>(block)]);
    lru_pos_[static_cast<size_t>(block)] = lru_.end();
    ++n_used_;
  }
  ++r;
}

void KvBlockManager::release(int32_t block) {
  check_block(block);
  int& r = ref_[static_cast<size_t>(block)];
  GA_CHECK(r > 0, Internal, "release of unreferenced KV block ", block);
  if (--r > 0) return;
  --n_used_;
  if (is_cached(block)) {
    lru_pos_[static_cast<size_t>(block)] = lru_.insert(lru_.end(), block);  // most recently used
    released_at_[static_cast<size_t>(block)] = Clock::now();
  } else {
    free_.push_back(block);
  }
}

void KvBlockManager::release_table(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) release(*it);
  table.clear();
}

int32_t KvBlockManager::find(uint64_t parent_key, std::span<const int32_t> tokens, uint64_t hash) const {
  const auto [first, last] = index_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    const Entry& e = entries_[static_cast<size_t>(it->second)];
    if (e.parent == parent_key && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) {
      return it->second;
    }
  }
  return -1;
}

void KvBlockManager::evict(int32_t block) {
  Entry& e = entries_[static_cast<size_t>(block)];
  if (e.key == kRootKey) return;
  const auto [first, last] = index_.equal_range(e.hash);
  for (auto it = first; it != last; ++it) {
    if (it->second == block) {
      index_.erase(it);
      break;
    }
  }
  e = Entry{};
}

KvBlockManager::PrefixMatch KvBlockManager::match_prefix(std::span<const int32_t> tokens, int64_t max_blocks) {
  PrefixMatch match;
  const int64_t n_full = std::min(max_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
  for (int64_t i = 0; i < n_full; ++i) {
    const std::span<const int32_t> chunk = tokens.subspan(static_cast<size_t>(i * block_size_),
                                                          static_cast<size_t>(block_size_));
    const int32_t block = find(match.key, chunk, hasher_(match.key, chunk));
    if (block < 0) break;
    retain(block);
    match.blocks.push_back(block);
    match.key = entries_[static_cast<size_t>(block)].key;
  }
  return match;
}

uint64_t KvBlockManager::publish(int32_t block, uint64_t parent_key, std::span<const int32_t> tokens) {
  check_block(block);
  GA_CHECK(static_cast<int64_t>(tokens.size()) == block_size_, Internal, "publish of a KV block with ",
           tokens.size(), " tokens (block size ", block_size_, ")");
  GA_CHECK(ref_[static_cast<size_t>(block)] > 0, Internal, "publish of unreferenced KV block ", block);
  const uint64_t hash = hasher_(parent_key, tokens);
  const int32_t existing = find(parent_key, tokens, hash);
  if (existing >= 0) return entries_[static_cast<size_t>(existing)].key;
  Entry& e = entries_[static_cast<size_t>(block)];
  GA_CHECK(e.key == kRootKey, Internal, "KV block ", block, " is already published with other contents");
  e.key = next_key_++;
  e.parent = parent_key;
  e.hash = hash;
  e.tokens.assign(tokens.begin(), tokens.end());
  index_.emplace(hash, block);
  return e.key;
}

int64_t KvBlockManager::evict_cached_released_before(Clock::time_point cutoff) {
  int64_t freed = 0;
  while (!lru_.empty() && released_at_[static_cast<size_t>(lru_.front())] <= cutoff) {
    const int32_t block = lru_.front();
    lru_.pop_front();
    lru_pos_[static_cast<size_t>(block)] = lru_.end();
    evict(block);
    free_.push_back(block);
    ++freed;
  }
  return freed;
}

bool KvBlockManager::compact() {
  // The stack's top is its back: descending order hands out the lowest id first.
  const bool sorted = std::is_sorted(free_.begin(), free_.end(), std::greater<int32_t>());
  if (!sorted) std::sort(free_.begin(), free_.end(), std::greater<int32_t>());
  index_.rehash(0);  // the smallest bucket count for its current size
  return !sorted;
}

}  // namespace ga::engine
