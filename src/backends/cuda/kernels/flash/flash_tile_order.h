// The order in which the Hopper forward hands out its query tiles (decode_tile, flash_fwd_sm90.cuh) and the size of
// the causal order's sections (set_fwd_problem, flash_fwd_launch.h): plain integer functions for host and device, so
// that a CPU test (tests/cuda/test_flash_tile_order.cpp) checks them where CI has no GPU: every tile exactly once,
// heaviest first within a section, sections of whole KV heads.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GA_TILE_ORDER_HD __host__ __device__
#else
#define GA_TILE_ORDER_HD
#endif

namespace ga::cuda::flash_detail {

// Tile t's (batch, head) pair and the place of its query block in that pair's order (the kernel turns rank r into
// query block m_blocks - 1 - r when causal: rank 0 is the heaviest block, and r itself otherwise).
struct TileOrder {
  int bh, rank;
};

// section_bh > 1: sections of section_bh consecutive pairs (the last one may be smaller); within a section, rank 0 of
// every pair, then rank 1 of every pair, ... section_bh <= 1: one pair at a time, its ranks in order.
GA_TILE_ORDER_HD constexpr TileOrder tile_order(int t, int m_blocks, int n_bh, int section_bh) {
  if (section_bh > 1) {
    const int per_section = section_bh * m_blocks;
    const int section = t / per_section, first_bh = section * section_bh;
    const int rest = n_bh - first_bh;
    const int n_here = section_bh < rest ? section_bh : rest;
    const int r = t - section * per_section;
    return {first_bh + r % n_here, r / n_here};
  }
  return {t / m_blocks, t % m_blocks};
}

// (batch, head) pairs per causal section: override_heads >= 0 as given (at most all pairs); otherwise as many KV heads
// as l2_bytes of K and V hold (at least one), times the GQA group, so a section's query heads read whole KV heads.
constexpr int causal_section_pairs(int n_head, int n_head_kv, int batch, int seqlen_k, int head_dim, int elem_bytes,
                                   int override_heads, int64_t l2_bytes) {
  const int64_t pairs = int64_t{n_head} * batch;
  if (override_heads >= 0) return static_cast<int>(override_heads < pairs ? override_heads : pairs);
  int64_t kv_head_bytes = int64_t{seqlen_k} * head_dim * 2 * elem_bytes;
  if (kv_head_bytes < 1) kv_head_bytes = 1;
  int64_t kv_heads = l2_bytes / kv_head_bytes;
  if (kv_heads < 1) kv_heads = 1;
  const int64_t section = kv_heads * (n_head / n_head_kv);
  return static_cast<int>(section < pairs ? section : pairs);
}

}  // namespace ga::cuda::flash_detail
