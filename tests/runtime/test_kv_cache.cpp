// The KV block manager and its prefix cache, on hand-made token sequences: reference counts,
// free/cached/used accounting, LRU eviction order (tails before heads, least recently used first),
// chain identity (a block matches only after the same parent), and hash collisions (a hasher that
// sends every block to one bucket must still never return a block with other tokens).
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "gpu_accel/error.h"
#include "runtime/engine/kv_cache.h"

namespace ga::engine {
namespace {

std::vector<int32_t> iota_tokens(int32_t first, size_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

uint64_t constant_hash(uint64_t, std::span<const int32_t>) { return 42; }

// Allocates a table for `tokens` and publishes its full blocks, as the scheduler does after a prefill.
std::vector<int32_t> prefill(KvBlockManager& m, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> table;
  const int64_t bs = m.block_size();
  const size_t n_blocks = (tokens.size() + static_cast<size_t>(bs) - 1) / static_cast<size_t>(bs);
  for (size_t i = 0; i < n_blocks; ++i) {
    const int32_t b = m.allocate();
    EXPECT_GE(b, 0);
    table.push_back(b);
  }
  uint64_t key = KvBlockManager::kRootKey;
  for (size_t i = 0; (i + 1) * static_cast<size_t>(bs) <= tokens.size(); ++i) {
    key = m.publish(table[i], key, std::span<const int32_t>(tokens).subspan(i * bs, static_cast<size_t>(bs)));
  }
  return table;
}

TEST(KvBlockManager, AllocateReleaseAndRefcounts) {
  KvBlockManager m(4, 16);
  EXPECT_EQ(m.n_free(), 4);
  const int32_t a = m.allocate(), b = m.allocate();
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(m.n_used(), 2);
  m.retain(a);
  EXPECT_EQ(m.refcount(a), 2);
  m.release(a);
  EXPECT_EQ(m.refcount(a), 1);
  EXPECT_EQ(m.n_used(), 2);
  m.release(a);
  m.release(b);
  EXPECT_EQ(m.n_used(), 0);
  EXPECT_EQ(m.n_free(), 4);
  EXPECT_EQ(m.n_cached(), 0);  // never published: straight back to the free list
  EXPECT_THROW(m.release(a), Error);  // no reference left
  EXPECT_THROW(m.retain(a), Error);   // free blocks cannot be retained
  for (int i = 0; i < 4; ++i) EXPECT_GE(m.allocate(), 0);
  EXPECT_EQ(m.allocate(), -1);  // everything referenced
  EXPECT_THROW(KvBlockManager(0, 16), Error);
  EXPECT_THROW(KvBlockManager(4, 0), Error);
}

TEST(KvBlockManager, SharedPrefixIsReusedAndCachedAfterRelease) {
  KvBlockManager m(8, 4);
  const std::vector<int32_t> prompt = iota_tokens(100, 10);  // 2 full blocks + 2 tokens
  std::vector<int32_t> first = prefill(m, prompt);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_TRUE(m.is_cached(first[0]));
  EXPECT_TRUE(m.is_cached(first[1]));
  EXPECT_FALSE(m.is_cached(first[2]));  // the partial block stays private

  // Same prefix, different tail: both full blocks are shared.
  std::vector<int32_t> other = prompt;
  other[9] = 7;
  KvBlockManager::PrefixMatch match = m.match_prefix(other, 100);
  ASSERT_EQ(match.blocks.size(), 2u);
  EXPECT_EQ(match.blocks[0], first[0]);
  EXPECT_EQ(match.blocks[1], first[1]);
  EXPECT_EQ(m.refcount(first[0]), 2);
  // max_blocks caps the match (the scheduler always recomputes the last prompt token).
  KvBlockManager::PrefixMatch capped = m.match_prefix(other, 1);
  EXPECT_EQ(capped.blocks.size(), 1u);
  m.release_table(capped.blocks);

  // After both sequences finish, the published blocks stay cached (evictable), the tail is freed.
  m.release_table(first);
  m.release_table(match.blocks);
  EXPECT_EQ(m.n_used(), 0);
  EXPECT_EQ(m.n_cached(), 2);
  EXPECT_EQ(m.n_free(), 6);
  EXPECT_EQ(m.n_available(), 8);
  KvBlockManager::PrefixMatch again = m.match_prefix(prompt, 100);
  EXPECT_EQ(again.blocks.size(), 2u);
  EXPECT_EQ(m.n_cached(), 0);
  m.release_table(again.blocks);
}

TEST(KvBlockManager, ChainIdentityNeedsTheSameParent) {
  KvBlockManager m(8, 4);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> table = prefill(m, a);
  // Block 2 of `b` equals block 2 of `a`, but after a different first block: no match at all.
  const std::vector<int32_t> b = {9, 9, 9, 9, 5, 6, 7, 8};
  EXPECT_TRUE(m.match_prefix(b, 100).blocks.empty());
  // Publishing identical contents twice keeps the first entry; the second block stays private.
  std::vector<int32_t> dup = prefill(m, a);
  EXPECT_FALSE(m.is_cached(dup[0]));
  EXPECT_FALSE(m.is_cached(dup[1]));
  m.release_table(dup);
  EXPECT_EQ(m.n_cached(), 0);
  m.release_table(table);
  EXPECT_EQ(m.n_cached(), 2);
}

TEST(KvBlockManager, HashCollisionsNeverConfuseBlocks) {
  KvBlockManager m(8, 2, constant_hash);  // every block lands in the same bucket
  const std::vector<int32_t> a = {1, 2, 3, 4};
  const std::vector<int32_t> b = {1, 2, 4, 3};
  const std::vector<int32_t> c = {2, 1, 3, 4};
  std::vector<int32_t> ta = prefill(m, a), tb = prefill(m, b), tc = prefill(m, c);
  KvBlockManager::PrefixMatch mb = m.match_prefix(b, 100);
  ASSERT_EQ(mb.blocks.size(), 2u);
  EXPECT_EQ(mb.blocks[0], ta[0]);  // {1, 2} was published first, by `a`
  EXPECT_EQ(mb.blocks[1], tb[1]);  // {4, 3} after {1, 2}: b's own block, not a's {3, 4}
  KvBlockManager::PrefixMatch mc = m.match_prefix(c, 100);
  ASSERT_EQ(mc.blocks.size(), 2u);
  EXPECT_EQ(mc.blocks[0], tc[0]);
  EXPECT_EQ(mc.blocks[1], tc[1]);  // {3, 4} after {2, 1}, not a's {3, 4} after {1, 2}
  const std::vector<int32_t> d = {1, 2, 9, 9};
  EXPECT_EQ(m.match_prefix(d, 100).blocks.size(), 1u);
}

TEST(KvBlockManager, EvictsLeastRecentlyUsedTailsFirst) {
  KvBlockManager m(4, 2);
  const std::vector<int32_t> a = {1, 2, 3, 4};  // blocks 0, 1
  const std::vector<int32_t> b = {5, 6, 7, 8};  // blocks 2, 3
  std::vector<int32_t> ta = prefill(m, a);
  std::vector<int32_t> tb = prefill(m, b);
  m.release_table(ta);  // LRU order: a's tail, a's head
  m.release_table(tb);  // then b's tail, b's head
  EXPECT_EQ(m.n_cached(), 4);
  EXPECT_EQ(m.n_free(), 0);
  // Re-using `a` refreshes it: b is now the least recently used.
  KvBlockManager::PrefixMatch ma = m.match_prefix(a, 100);
  ASSERT_EQ(ma.blocks.size(), 2u);
  m.release_table(ma.blocks);
  const int32_t x = m.allocate();
  EXPECT_EQ(x, tb[1]);  // b's tail goes first
  EXPECT_FALSE(m.is_cached(x));
  EXPECT_EQ(m.match_prefix(b, 100).blocks.size(), 1u);  // b's head is still there...
  const int32_t y = m.allocate();                     // ...and held now, so a's tail is next
  EXPECT_EQ(y, ta[1]);
  KvBlockManager::PrefixMatch left = m.match_prefix(a, 100);
  EXPECT_EQ(left.blocks.size(), 1u);  // only a's head survives
  EXPECT_EQ(m.allocate(), -1);  // every block is referenced now
}

// Housekeeping: blocks released at or before the cutoff are freed and forgotten, later ones and
// referenced ones stay cached; compact() puts the free list back so the lowest ids come out first.
TEST(KvBlockManager, EvictsCachedBlocksReleasedBeforeTheCutoff) {
  KvBlockManager m(8, 2);
  const std::vector<int32_t> old_prompt = {1, 2, 3, 4};   // blocks 0, 1
  const std::vector<int32_t> held_prompt = {5, 6, 7, 8};  // blocks 2, 3: still referenced
  const std::vector<int32_t> new_prompt = {9, 10};        // block 4
  const std::vector<int32_t> late_prompt = {11, 12};      // block 5: released after the cutoff
  std::vector<int32_t> t_old = prefill(m, old_prompt);
  std::vector<int32_t> t_held = prefill(m, held_prompt);
  std::vector<int32_t> t_new = prefill(m, new_prompt);
  std::vector<int32_t> t_late = prefill(m, late_prompt);
  m.release_table(t_old);
  m.release_table(t_new);
  const KvBlockManager::Clock::time_point cutoff = KvBlockManager::Clock::now();
  while (KvBlockManager::Clock::now() == cutoff) {
  }
  m.release_table(t_late);
  ASSERT_EQ(m.n_cached(), 4);
  EXPECT_EQ(m.evict_cached_released_before(cutoff - std::chrono::hours(1)), 0);  // nothing that old
  EXPECT_EQ(m.evict_cached_released_before(cutoff), 3);
  EXPECT_EQ(m.n_cached(), 1);
  EXPECT_EQ(m.n_free(), 5);  // blocks 6, 7 (never used) and the three freed
  EXPECT_EQ(m.n_used(), 2);
  EXPECT_TRUE(m.match_prefix(old_prompt, 100).blocks.empty());  // forgotten
  EXPECT_TRUE(m.match_prefix(new_prompt, 100).blocks.empty());
  KvBlockManager::PrefixMatch late = m.match_prefix(late_prompt, 100);
  EXPECT_EQ(late.blocks.size(), 1u);  // released after the cutoff: still cached
  m.release_table(late.blocks);
  KvBlockManager::PrefixMatch held = m.match_prefix(held_prompt, 100);
  EXPECT_EQ(held.blocks.size(), 2u);  // referenced blocks are never touched
  m.release_table(held.blocks);
  // The freed blocks went onto the stack in LRU order (1, 0, then 4 on top): compact sorts it again.
  EXPECT_TRUE(m.compact());
  EXPECT_FALSE(m.compact());  // already in order
  EXPECT_EQ(m.allocate(), 0);
  EXPECT_EQ(m.allocate(), 1);
  EXPECT_EQ(m.allocate(), 4);
  EXPECT_EQ(m.allocate(), 6);
}

TEST(KvBlockManager, ResolveNCtx) {
  ModelConfig c;
  c.n_ctx_train = 2048;
  EXPECT_EQ(resolve_n_ctx(c, 0), 2048);
  c.n_ctx_train = 1 << 20;
  EXPECT_EQ(resolve_n_ctx(c, 0), kDefaultMaxContext);
  EXPECT_EQ(resolve_n_ctx(c, 100), 100);
  EXPECT_THROW(resolve_n_ctx(c, -1), Error);
}

}  // namespace
}  // namespace ga::engine
