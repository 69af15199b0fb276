// The Hopper forward's tile order (kernels/flash/flash_tile_order.h: decode_tile's index math and the causal
// sections' size), checked on the host: it runs in CI, which has no GPU, while test_cuda_flash_attention's
// CausalSectionsCoverEveryTileOnce checks the kernels' results with it on a GPU. Every tile must come out exactly
// once (a tile handed out twice is computed twice; one never handed out leaves its rows of O unwritten), and within
// a section the ranks must never go back (heaviest first when causal: the longest-processing-time-first order).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <utility>

#include "backends/cuda/kernels/flash/flash_tile_order.h"

namespace {

using ::ga::cuda::flash_detail::causal_section_pairs;
using ::ga::cuda::flash_detail::tile_order;
using ::ga::cuda::flash_detail::TileOrder;

TEST(FlashTileOrder, EveryTileExactlyOnceInEveryOrder) {
  for (int m_blocks : {1, 2, 5, 32, 129})
    for (int n_bh : {1, 3, 16, 17, 64})
      for (int section : {0, 1, 2, 3, 5, 16, 64, 100}) {
        std::set<std::pair<int, int>> seen;
        for (int t = 0; t < m_blocks * n_bh; ++t) {
          const TileOrder o = tile_order(t, m_blocks, n_bh, section);
          ASSERT_GE(o.bh, 0);
          ASSERT_LT(o.bh, n_bh) << "tile " << t << " section " << section;
          ASSERT_GE(o.rank, 0);
          ASSERT_LT(o.rank, m_blocks) << "tile " << t << " section " << section;
          ASSERT_TRUE(seen.insert({o.bh, o.rank}).second)
              << "tile " << t << " repeats pair " << o.bh << " rank " << o.rank << " (m_blocks " << m_blocks
              << ", pairs " << n_bh << ", section " << section << ")";
        }
        EXPECT_EQ(seen.size(), size_t(m_blocks) * n_bh);
      }
}

TEST(FlashTileOrder, SectionsGoHeaviestFirstAcrossTheirPairs) {
  const int m_blocks = 32, n_bh = 17, section = 5;  // sections of 5, 5, 5 and 2 pairs
  int prev_section_end = -1;
  for (int t = 0; t < m_blocks * n_bh; ++t) {
    const TileOrder o = tile_order(t, m_blocks, n_bh, section);
    const int first = o.bh / section * section, n_here = first + section <= n_bh ? section : n_bh - first;
    // inside a section the tiles walk rank by rank, each rank over the section's pairs in order
    const int r = t - first * m_blocks;
    EXPECT_EQ(o.rank, r / n_here) << "tile " << t;
    EXPECT_EQ(o.bh, first + r % n_here) << "tile " << t;
    if (o.bh == first && o.rank == 0) {  // a new section starts only after the previous one has ended
      EXPECT_EQ(t, prev_section_end + 1);
    }
    if (o.bh == first + n_here - 1 && o.rank == m_blocks - 1) prev_section_end = t;
  }
  EXPECT_EQ(prev_section_end, m_blocks * n_bh - 1);
  // one pair at a time (section 0 or 1): each pair's ranks in order, the pairs one after another
  for (int s : {0, 1})
    for (int t = 0; t < m_blocks * n_bh; ++t) {
      const TileOrder o = tile_order(t, m_blocks, n_bh, s);
      EXPECT_EQ(o.bh, t / m_blocks);
      EXPECT_EQ(o.rank, t % m_blocks);
    }
}

TEST(FlashTileOrder, SectionSizeCoversWholeKvHeadsWithinTheL2Budget) {
  constexpr int64_t kMiB = int64_t{1} << 20, kBudget = 32 * kMiB;
  // bf16 hd 128, 4k keys: K + V of a head = 2 MiB -> 16 heads; FP8: 1 MiB -> 32 (at most all 64 pairs)
  EXPECT_EQ(causal_section_pairs(16, 16, 4, 4096, 128, 2, -1, kBudget), 16);
  EXPECT_EQ(causal_section_pairs(16, 16, 4, 4096, 128, 1, -1, kBudget), 32);
  // hd 256, 16k keys, bf16: 16 MiB per head -> 2
  EXPECT_EQ(causal_section_pairs(8, 8, 1, 16384, 256, 2, -1, kBudget), 2);
  // GQA 32 / 8 (groups of 4), bf16 hd 128, 16k keys: 8 MiB per KV head -> 4 KV heads = 16 query heads
  EXPECT_EQ(causal_section_pairs(32, 8, 1, 16384, 128, 2, -1, kBudget), 16);
  // a KV head larger than the budget still makes a section of one whole group
  EXPECT_EQ(causal_section_pairs(32, 8, 1, 1 << 20, 128, 2, -1, kBudget), 4);
  // short sequences: one section of all pairs
  EXPECT_EQ(causal_section_pairs(16, 4, 5, 300, 128, 2, -1, kBudget), 80);
  // an explicit size, capped at all pairs; 0 = one head at a time; any negative = automatic
  EXPECT_EQ(causal_section_pairs(16, 16, 4, 4096, 128, 2, 3, kBudget), 3);
  EXPECT_EQ(causal_section_pairs(16, 16, 4, 4096, 128, 2, 1000, kBudget), 64);
  EXPECT_EQ(causal_section_pairs(16, 16, 4, 4096, 128, 2, 0, kBudget), 0);
  EXPECT_EQ(causal_section_pairs(16, 16, 4, 4096, 128, 2, -7, kBudget), 16);
}

}  // namespace
