// The split tail of the persistent 16-bit forward (kSchedSplitTail, variant kSplitTailVariant): fills the last,
// partial round of tiles by splitting its tiles' key ranges between CTAs (stream-K on the last round only).
//
// Why: non-causal tiles are all the same work, and the static persistent schedule deals them in rounds of
// gridDim.x (G) tiles. FA3's methodology (16k tokens per batch, hidden 2048) gives 2048 tiles of 128 queries at
// head dim 128 = 15.5 rounds on 132 SMs: in the 16th round 68 CTAs work and 64 idle, about 3% of the SM time.
// Splitting whole tiles does not help (68 x 2 = 136 halves > 132 CTAs: still one full tile time), so the last
// round is cut in key blocks instead: its rem = tiles % G tiles hold U = rem * n key blocks (n = key tiles per
// query tile), and CTA b takes the contiguous units [b U / G, (b + 1) U / G) (about 0.52 n each here instead of
// n), i.e. at most a tail piece of one tile and a head piece of the next. The earlier rounds are unchanged
// (same tiles, same snake order, same L2 locality: the tail tiles are the last query blocks of the last heads).
//
// Merge (log-sum-exp, as the decode path merges its splits): a piece that starts inside a tile (key block jb > 0)
// is always the FIRST piece of its CTA's range, so each CTA has at most one: it writes its unnormalized O, row
// max and partial row sums (f32, each consumer thread its own fragment: no layout change) to its workspace slot,
// then sets its flag (release). The piece that starts the tile (jb == 0) is the LAST piece of its CTA's range, so
// the pieces it waits for were each their CTA's first work of the tail and are usually done: its CTA waits on the
// flags of CTAs b + 1, b + 2, ... whose ranges start inside the tile (acquire), folds their partials into its
// registers and stores O and the LSE as usual. The waits only point to higher CTA indices and to work that waits
// on nothing, so there is no cycle; the grid is at most one CTA per SM and is launched cooperatively
// (launch_fwd_instance), so all of it is resident or the launch runs unsplit.
//
// Workspace (flash_plan, 16-byte aligned): flags [G] int (zeroed by flash_forward before each launch, in the
// stream), padded to 256 bytes, then G slots of (HD / 8 + 1) x 256 float4: 256 consumer threads x (HD / 2 O values
// + m[2], l[2]) in thread-fastest order, so the stores and loads coalesce.
#pragma once

#include <cstdint>

namespace ga::cuda::flash_detail {

// One unit of a CTA's work: tile t, key blocks [jb, je) of it (je < 0: the whole tile).
struct WorkItem {
  int t, jb, je;
};

// float4 per slot of a head dim: HD / 8 O chunks + one (m0, m1, l0, l1) chunk, each 256 threads wide.
__host__ __device__ constexpr int split_slot_float4s(int hd) { return (hd / 8 + 1) * 256; }
constexpr size_t split_flag_bytes(int grid) { return (size_t(grid) * 4 + 255) / 256 * 256; }

__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// CTA b's first unit of the tail: floor(b U / G). 32-bit (the host keeps U * G within int32): a 64-bit division
// needs more registers than the producer warp keeps (setmaxnreg 24).
__device__ __forceinline__ int split_range_start(int b, int units, int grid) { return b * units / grid; }

// The k-th piece of this CTA's tail range (k counted from the tail's start), or t = -1 when none is left.
template <class Args>
__device__ __forceinline__ WorkItem split_tail_piece(const Args& a, int k) {
  const int b = static_cast<int>(blockIdx.x), g = static_cast<int>(gridDim.x), n = a.kv_blocks;
  const int u0 = split_range_start(b, a.tail_units, g), u1 = split_range_start(b + 1, a.tail_units, g);
  const int start = k == 0 ? u0 : (u0 / n + k) * n;
  if (start >= u1) return {-1, 0, 0};
  const int end = min(u1, (start / n + 1) * n);
  return {a.tail_first_tile + start / n, start % n, start % n + (end - start)};
}

}  // namespace ga::cuda::flash_detail
