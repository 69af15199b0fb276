// FlashAttention backward for Hopper (sm_90a), FlashAttention-3's design (arXiv 2407.08608, its hopper/ backward)
// written on the tile layer (kernels/tile/hopper.cuh): TMA loads on mbarriers by a producer thread, two consumer
// warpgroups doing every GEMM with wgmma, dK/dV accumulated in registers, dQ reduced into an f32 workspace by the
// copy engine (cp.reduce.async.bulk) instead of per-element atomics. Head dim 128, bf16/fp16 (flash_bwd_sm90_hd128.cu).
//
// Three launches (as the mma.sync fallback, flash_bwd_sm80.cuh, whose workspace layout differs):
//  1. preprocess: per query row (padded to whole 64-row blocks) D = rowsum(dO * O), LSE * log2(e) (+inf for rows
//     past seqlen_q and rows that see no key, so P = exp2(s - lse) is exactly 0 there without a mask), and zeroes
//     the row's share of the dQ accumulator (in the same launch: no memset pass). preprocess_wide, 8 threads per
//     row with 16-byte accesses, is 12-20% faster than one warp per row with 4-byte ones (H200; the backward
//     +1.4-3.7% at 512 tokens, within the harness's noise from 2k). (One CTA per 64-row tile, measured together
//     with a changed convert, was slower.)
//  2. main: one CTA per (128-key block, KV head, batch); K and V of the block stay in shared memory. It walks every
//     query head of the GQA group and every 64-row query block that can see its keys (causal: from the first that
//     reaches key n0). Warpgroup 0 is the producer (setmaxnreg 24): one thread loads K/V once, then per step Q and
//     dO (TMA boxes) into a 2-stage ring; each consumer warpgroup prefetches the step's LSE/D (64 floats each)
//     itself, a step ahead, into its own small buffer. Warpgroups 1 and 2 own keys [64w, 64w + 64) of the block
//     (setmaxnreg 240) and per step:
//       S^T = K_w Q^T, dP^T = V_w dO^T   (SS wgmma m64n64, K-major operands: [64 keys][64 queries] f32 each);
//       P^T = exp2(S^T * scale log2 e - LSE log2 e), masked by select; dS^T = P^T (dP^T - D) (f32 P^T);
//       dV_w += P^T dO                   (RS wgmma m64n128: P^T in registers as A, dO read N-major with the
//                                         transpose bit; the accumulators live across the whole CTA);
//       dS^T -> shared memory (16-bit, 128-byte swizzle, [128 keys][64 queries]; both warpgroups' halves);
//       dQ[:, 64w..64w+63] = dS K        (SS wgmma m64n64 over all 128 keys, dS read M-major (transpose-A bit),
//                                         K read N-major) -> shared memory -> one bulk add-reduce of 16 KB;
//       dK_w += dS^T Q                   (RS wgmma as dV, issued behind dQ: FA3's order, so the dQ staging runs
//                                         while the tensor cores do dK; schedule 1 of consumer_main).
//     Computing S^T (keys as rows) rather than S is what lets P^T and dS^T feed the dV/dK GEMMs straight from the
//     accumulator registers (the A-fragment layout of a k16 step is two accumulator n8 blocks), so only dS makes
//     the round trip through shared memory, which dQ needs anyway (it sums over both warpgroups' keys).
//  3. convert: dq = scale * accumulator in the caller's dtype and strides, one warp per row pair (r, r + 8) of a tile
//     so every accumulator sector read is used whole (convert_dq_pairs; H200: the convert 32% faster
//     than one row per warp, the whole backward +3-5% at 512-1k tokens, within noise from 4k).
//
// dQ accumulator layout: per (batch, head, 64-row query block) a contiguous 32 KB tile, [warpgroup w][n8 block j]
// [thread t][4] f32, i.e. the wgmma accumulator fragments as they lie (float4 j of thread t = its acc[4j..4j+3]):
// conflict-free 16-byte shared stores, one bulk reduce per warpgroup and step; only the convert kernel decodes it.
//
// Synchronisation per step: q_full[stage] (TMA bytes) -> consumers; both warpgroups meet at named barrier 1 after
// writing their dS^T half (fence.proxy.async first: wgmma reads shared memory through the async proxy); dS^T is
// double-buffered so the next step's write never races the other warpgroup's dQ GEMM; the dQ staging buffer is
// single (each warpgroup's reducing thread waits for the previous bulk read before the barrier of the next step);
// q_empty[stage] gets one arrival per consumer warp once the step's GEMMs (dK last) are waited for; the warpgroup's
// 128-thread named barrier that ends the step also publishes the next step's LSE/D (shared-memory vectors ordered
// only by mbarriers were correct but flagged by compute-sanitizer's racecheck, and an L2 read of them in the step's
// critical path was slower).
//
// The default is schedule 26: schedule 19 below with dK and dV staged in the freed Q/dO ring and written by TMA
// stores (store_dk_dv_tma): the 4-byte register stores of store_dk_dv (half-used sectors, 64 per thread) cost
// ~3.5 us of a ~29 us CTA at 512 tokens (the main kernel 567 -> 510 us per backward there).
// Schedule 19 (flash_bwd_sm90_pingpong.cuh, consumer_pingpong_shared_dq) is the step above, but the two warpgroups
// no longer meet at a dS barrier; they issue their GEMM groups (S^T + dP^T; dV + dQ + dK) in alternating turns (named
// barriers), so one's exp / dS phase runs under the other's GEMMs, and warpgroup 0 adds its dQ columns a step late
// (when warpgroup 1's dS^T half exists): 1.02-1.13x schedule 1 at every length 512-16k (0.87-0.99x cuDNN).
// consumer_main below is schedule 1 and the older schedules.
// Measured on an H200: schedule 1 with preprocess_wide 0.85-0.89x cuDNN's backward at head dim 128 (schedule 0, v4,
// 0.74-0.83x), 1.6-2.4x the mma.sync kernel. Converting dQ inside the main kernel (a dQ writer warp counting each
// tile's finished contributions, the last CTA converting it from L2) was 8-30% slower at every length: not kept
// (docs/performance.md, "Tried, measured, not kept").
// Numerics as the sm80 path: f32 accumulation, P and dS rounded to the input dtype for the tensor cores, dK and dQ
// scaled by softmax_scale at the end. Keys past seqlen_k arrive as zeros from TMA and are masked; query rows past
// seqlen_q arrive as zeros and have LSE = +inf (P = 0).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernels/flash/flash_bwd_sm80.cuh"
#include "backends/cuda/kernels/flash/flash_common.h"
#include "backends/cuda/kernels/flash/flash_fwd_sm90.cuh"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/tile/hopper.cuh"

namespace ga::cuda::flash_bwd_sm90 {

using tile::ElemKind;

template <int HD>
struct Traits {
  static_assert(HD == 128, "the Hopper backward is built for head dim 128 (the dQ split is 2 x 64 columns)");
  static constexpr int kBlockN = 128;  // keys per CTA: 2 consumer warpgroups x 64
  static constexpr int kBlockM = 64;   // query rows per step
  static constexpr int kStages = 2;    // Q/dO/LSE/D ring
  static constexpr int kColBlocks = HD / 64;
  static constexpr int kThreads = 384;
  static constexpr uint32_t kKvBytes = kBlockN * HD * 2;    // K or V of the block
  static constexpr uint32_t kQBytes = kBlockM * HD * 2;     // Q or dO of one step
  static constexpr uint32_t kVecBytes = 2 * kBlockM * 4;    // LSE * log2 e and D of one step (one buffer)
  static constexpr uint32_t kDsBytes = kBlockN * kBlockM * 2;  // dS^T [128 keys][64 queries]
  static constexpr uint32_t kDqHalfBytes = kBlockM * (HD / 2) * 4;  // one warpgroup's dQ columns, f32
  static constexpr int kDqTileFloats = kBlockM * HD;
  // Shared memory (from a 1024-byte aligned base): K, V, Q[2], dO[2], dS^T[2], dQ staging[2 warpgroups],
  // per consumer warpgroup 2 buffers of (LSE, D), barriers (kv_full, q_full[2], q_empty[2]).
  static constexpr uint32_t kOffV = kKvBytes;
  static constexpr uint32_t kOffQ = 2 * kKvBytes;
  static constexpr uint32_t kOffDo = kOffQ + kStages * kQBytes;
  static constexpr uint32_t kOffDs = kOffDo + kStages * kQBytes;
  static constexpr uint32_t kOffDq = kOffDs + 2 * kDsBytes;
  static constexpr uint32_t kOffVec = kOffDq + 2 * kDqHalfBytes;
  static constexpr uint32_t kOffBars = kOffVec + 2 * 2 * kVecBytes;
  static constexpr int kBarriers = 6;  // kv_full, q_full[2], q_empty[2], kv_empty (Bars)
  static constexpr size_t kSmemBytes = 1024 + kOffBars + 8 * kBarriers;
  // The ping-pong schedules (flash_bwd_sm90_pingpong.cuh) keep K, V, Q, dO, the LSE/D buffers and the barriers where
  // they are; each warpgroup's 32 KB dQ partial is staged over the dS^T and dQ regions above ([kOffDs, kOffVec),
  // 64 KB) and its own dS^T tile [64 keys][64 queries] (8 KB) lies past the barriers, 1024-byte aligned.
  static constexpr uint32_t kPpDqBytes = kBlockM * HD * 4;
  static constexpr uint32_t kPpDsBytes = 64 * kBlockM * 2;
  static constexpr uint32_t kOffPpDq = kOffDs;
  static constexpr uint32_t kOffPpDs = (kOffBars + 8 * kBarriers + 1023) / 1024 * 1024;
  static constexpr size_t kSmemBytesPp = 1024 + kOffPpDs + 2 * kPpDsBytes;
  static_assert(kOffPpDq + 2 * kPpDqBytes <= kOffVec, "the ping-pong dQ staging overlays the dS^T and dQ regions");
};

struct Args {
  CUtensorMap tm_q, tm_k, tm_v, tm_do;  // 4-D [batch][head][seq][HD] views, boxes {64, rows, 1, 1}
  CUtensorMap tm_dk, tm_dv;             // the same over dK and dV (KV heads), boxes {64, 64, 1, 1}: schedule 26
  const float* lse_log2;                // workspace [batch][n_head][m_blocks * 64]
  const float* dsum;                    // workspace, same shape
  float* dq_accum;                      // workspace [batch][n_head][m_blocks][64 * HD], fragment order
  uint16_t *dk, *dv;
  flash_bwd::Strides dk_st, dv_st;
  int seqlen_q, seqlen_k, n_head, group, m_blocks, causal;
  float scale, scale_log2;
  int rotate_m;  // 1: each CTA walks its query blocks from a different one (Work::m0; schedule 20), 0: from the first
  // > 0: the CTAs take their (key block, KV head, batch) in causal work order (Work; schedules 22, 24): groups of
  // `lpt_heads` (batch, KV head) pairs, inside a group every pair's first key block (the most query blocks) before
  // any pair's second, and so on. 0: the grid's order (key block fastest). Schedule 25 too.
  int lpt_heads;
  int tiles;  // persistent CTAs (schedule 25): key blocks x n_head_kv x batch, walked from blockIdx.x by gridDim.x
  int tma_dkdv;  // 1 (schedule 26, when both maps encoded): dK and dV leave through shared memory and TMA stores
};

// Position of dQ element (row r < 64, column d < HD) of a query block inside its accumulator tile (layout above).
__host__ __device__ constexpr int dq_tile_offset(int r, int d) {
  const int w = d / 64, dd = d % 64, j = dd / 8, c = (dd % 8) / 2;
  const int thread = (r / 16) * 32 + (r % 8) * 4 + c;
  return w * 4096 + j * 512 + thread * 4 + ((r % 16) / 8) * 2 + dd % 2;
}

// ---- 1. preprocess: D, LSE * log2 e (padded), zero the dQ accumulator ----

// A row of the preprocess's padded [batch][n_head][m_blocks * 64] order: its query position i, head h and batch b.
struct PaddedRow {
  int i, h, b;
};
__device__ __forceinline__ PaddedRow padded_row(const flash_bwd::BwdArgs& a, int64_t row, int m_blocks) {
  const int seq_pad = m_blocks * 64;
  return {static_cast<int>(row % seq_pad), static_cast<int>((row / seq_pad) % a.n_head),
          static_cast<int>(row / (int64_t{seq_pad} * a.n_head))};
}

// The preprocess's per-row outputs: D = rowsum(dO * O) (`sum`) and LSE * log2 e, +inf for padding rows and rows that
// see no key (lse = -inf): P = 0 there.
__device__ __forceinline__ void store_row_stats(const flash_bwd::BwdArgs& a, float* lse_log2, int64_t row,
                                                PaddedRow r, float sum) {
  a.dsum[row] = sum;
  float l = INFINITY;
  if (r.i < a.seqlen_q) {
    const float lse = a.lse[(int64_t{r.b} * a.n_head + r.h) * a.seqlen_q + r.i];
    if (lse != -INFINITY) l = lse * detail::kLog2e;
  }
  lse_log2[row] = l;
}

template <bool kBf16, int HD>
__global__ void __launch_bounds__(256) preprocess(flash_bwd::BwdArgs a, float* lse_log2, int m_blocks) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;  // [batch][n_head][m_blocks * 64]
  const int lane = threadIdx.x % 32;
  if (row >= int64_t{a.batch} * a.n_head * m_blocks * 64) return;
  const PaddedRow r = padded_row(a, row, m_blocks);
  const int i = r.i, h = r.h, b = r.b;
  float* acc = a.dq_accum + row * HD;  // any HD floats of the row's block: the tile is zeroed as a whole
  float sum = 0.0f;
#pragma unroll
  for (int t = 0; t < HD / 64; ++t) {
    const int d = 2 * lane + 64 * t;
    if (i < a.seqlen_q) {
      const uint16_t* o = a.o + b * a.o_st.batch + i * a.o_st.seq + h * a.o_st.head;
      const uint16_t* dout = a.dout + b * a.do_st.batch + i * a.do_st.seq + h * a.do_st.head;
      const float2 ov = flash_bwd::unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(o + d));
      const float2 gv = flash_bwd::unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(dout + d));
      sum += ov.x * gv.x + ov.y * gv.y;
    }
    *reinterpret_cast<float2*>(acc + d) = make_float2(0.0f, 0.0f);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) store_row_stats(a, lse_log2, row, r, sum);
}

// The same work with 8 threads per row and 16-byte accesses (4 rows per warp): each thread has 64 bytes of O and dO
// in flight (the one-warp-per-row kernel above 16), and the CTA zeroes its 32 rows' 16 KB of the accumulator with
// float4 stores, 512 contiguous bytes per warp store. On the H200: 12-20% faster alone (schedule 10 vs 8, three runs),
// the whole backward +1.4-3.7% at 512 tokens, within the harness's +-4% noise from 2k; hence the default. Head dim 128.
template <bool kBf16, int HD>
__global__ void __launch_bounds__(256) preprocess_wide(flash_bwd::BwdArgs a, float* lse_log2, int m_blocks) {
  static_assert(HD == 128, "8 threads x 16 elements per row");
  // Padded rows are a multiple of 64 and a CTA takes 32: every thread has a row, so the shuffles see whole groups.
  detail::pdl_allow_dependents();  // the main kernel's loads of Q, K, V, dO may start (launch_instance)
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 8;  // [batch][n_head][m_blocks * 64]
  const int sub = threadIdx.x % 8;
  const PaddedRow r = padded_row(a, row, m_blocks);
  const int i = r.i, h = r.h, b = r.b;
  float sum = 0.0f;
  if (i < a.seqlen_q) {
    const uint16_t* o = a.o + b * a.o_st.batch + i * a.o_st.seq + h * a.o_st.head + 8 * sub;
    const uint16_t* dout = a.dout + b * a.do_st.batch + i * a.do_st.seq + h * a.do_st.head + 8 * sub;
    const uint4 o0 = *reinterpret_cast<const uint4*>(o), o1 = *reinterpret_cast<const uint4*>(o + 64);
    const uint4 g0 = *reinterpret_cast<const uint4*>(dout), g1 = *reinterpret_cast<const uint4*>(dout + 64);
    const uint32_t ov[8] = {o0.x, o0.y, o0.z, o0.w, o1.x, o1.y, o1.z, o1.w};
    const uint32_t gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float2 x = flash_bwd::unpack2<kBf16>(ov[e]), y = flash_bwd::unpack2<kBf16>(gv[e]);
      sum += x.x * y.x + x.y * y.y;
    }
  }
  float4* acc = reinterpret_cast<float4*>(a.dq_accum + int64_t{blockIdx.x} * 32 * HD);  // the CTA's 32 rows
#pragma unroll
  for (int k = 0; k < 32 * HD / 4 / 256; ++k) acc[threadIdx.x + 256 * k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int off = 4; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (sub == 0) store_row_stats(a, lse_log2, row, r, sum);
}

// ---- 3. dq = scale * accumulator ----

// One warp per pair of rows (r, r + 8) of a 64-row accumulator tile (r % 16 < 8): in the fragment order the two
// rows' values share each float4 (thread t's accumulators 4j..4j+3 = rows r, r + 8 x columns 8j + 2c, +1), so lane
// (j, c) reads whole float4s, 4 lanes 64 contiguous bytes (every sector fully used), and stores 4 bytes of each row:
// 128 contiguous bytes per row and warp store. Warps walk [batch][n_head][m_blocks][32 pairs], the tile's order.
// (convert_dq below, one warp per row with float2 loads, uses half of each sector it reads.)
template <bool kBf16, int HD>
__global__ void __launch_bounds__(256) convert_dq_pairs(flash_bwd::BwdArgs a, int m_blocks) {
  detail::pdl_wait_prior_grid();  // launched behind the main kernel (launch_instance): its reductions are done here
  const int64_t pair = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32, j = lane / 4, c = lane % 4;
  if (pair >= int64_t{a.batch} * a.n_head * m_blocks * 32) return;
  const int64_t tile_index = pair / 32;
  const int k = static_cast<int>(pair % 32), r = (k / 8) * 16 + k % 8;
  const int mb = static_cast<int>(tile_index % m_blocks);
  const int h = static_cast<int>((tile_index / m_blocks) % a.n_head);
  const int b = static_cast<int>(tile_index / (int64_t{m_blocks} * a.n_head));
  const int i = mb * 64 + r;
  if (i >= a.seqlen_q) return;
  const bool second = i + 8 < a.seqlen_q;
  const float* tile = a.dq_accum + tile_index * (64 * HD);
  uint16_t* dq = a.dq + b * a.dq_st.batch + int64_t{i} * a.dq_st.seq + h * a.dq_st.head;
  const int thread = (r / 16) * 32 + (r % 8) * 4 + c;
#pragma unroll
  for (int w = 0; w < HD / 64; ++w) {
    const float4 g = *reinterpret_cast<const float4*>(tile + w * 4096 + j * 512 + thread * 4);
    const int d = 64 * w + 8 * j + 2 * c;
    *reinterpret_cast<uint32_t*>(dq + d) = flash_bwd::pack2<kBf16>(g.x * a.scale, g.y * a.scale);
    if (second) *reinterpret_cast<uint32_t*>(dq + 8 * a.dq_st.seq + d) = flash_bwd::pack2<kBf16>(g.z * a.scale,
                                                                                                  g.w * a.scale);
  }
}

template <bool kBf16, int HD>
__global__ void __launch_bounds__(256) convert_dq(flash_bwd::BwdArgs a, int m_blocks) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;  // [batch][seqlen_q][n_head]
  const int lane = threadIdx.x % 32;
  if (row >= int64_t{a.batch} * a.seqlen_q * a.n_head) return;
  const flash_bwd::RowIndex x = flash_bwd::row_index(row, a.n_head, a.seqlen_q);
  const float* tile = a.dq_accum + ((int64_t{x.b} * a.n_head + x.h) * m_blocks + x.i / 64) * (64 * HD);
  uint16_t* dq = a.dq + x.b * a.dq_st.batch + x.i * a.dq_st.seq + x.h * a.dq_st.head;
#pragma unroll
  for (int t = 0; t < HD / 64; ++t) {
    const int d = 2 * lane + 64 * t;
    const float2 g = *reinterpret_cast<const float2*>(tile + dq_tile_offset(x.i % 64, d));
    *reinterpret_cast<uint32_t*>(dq + d) = flash_bwd::pack2<kBf16>(g.x * a.scale, g.y * a.scale);
  }
}

// ---- 2. the main kernel ----

struct Bars {
  uint64_t* base;
  __device__ uint64_t* kv_full() const { return base; }
  __device__ uint64_t* q_full(int s) const { return base + 1 + s; }
  __device__ uint64_t* q_empty(int s) const { return base + 3 + s; }
  __device__ uint64_t* kv_empty() const { return base + 5; }  // persistent CTAs: the tile's K/V were read (8 warps)
};

// The work of one CTA: key block n0, KV head hk, batch b; `steps` = (query head, query block) pairs. With
// a.rotate_m the CTA of key block x starts at its query block x (mod its count), so the CTAs of one head add into
// different dQ tiles at a time instead of all into the same one.
//
// Causal work order (a.lpt_heads > 0): under a causal mask key block x has (m_blocks - 2x) query blocks, so in the
// grid's order (key block fastest) the last (batch, KV head) pairs' first key blocks, the longest CTAs, start last
// and the SMs idle behind them (1k tokens: 16 steps for a pair's first block, 140 per SM in all). The linear block
// index is therefore read as [group of lpt_heads pairs][key block][pair in the group]: inside a group the longest
// CTAs start first and the last ones the hardware starts are the shortest (longest-processing-time-first), while a
// group (sized by the host to ~2 waves of CTAs) keeps the dQ tiles and Q/dO blocks in flight few enough for L2.
//
// Persistent CTAs (schedule 25) decode the same way a tile counter of the same linear order (Work(a, tile, ...)).
struct Work {
  int n0, hk, b, m_begin, per_head, steps, rot;
  // The CTA's own tile: grid key blocks x KV heads x batch.
  __device__ explicit Work(const Args& a)
      : Work(a, static_cast<int>(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)),
             static_cast<int>(gridDim.x), static_cast<int>(gridDim.y), static_cast<int>(gridDim.y * gridDim.z)) {}
  // Tile `linear` of `blocks` key blocks x `heads_kv` KV heads x (pairs / heads_kv) batches.
  __device__ Work(const Args& a, int linear, int blocks, int heads_kv, int pairs) {
    int x, pair;
    if (a.lpt_heads > 0) {
      const int group = linear / (a.lpt_heads * blocks), first = group * a.lpt_heads;
      const int in_group = min(a.lpt_heads, pairs - first);  // the last group may be smaller
      const int r = linear - first * blocks;
      x = r / in_group;
      pair = first + r % in_group;
    } else {
      x = linear % blocks;
      pair = linear / blocks;
    }
    hk = pair % heads_kv;
    b = pair / heads_kv;
    n0 = x * 128;
    const int diag = a.seqlen_k - a.seqlen_q;  // query i sees key j iff j <= i + diag (causal)
    m_begin = a.causal ? max(0, n0 - diag) / 64 : 0;
    per_head = max(0, a.m_blocks - m_begin);
    steps = per_head * a.group;
    rot = a.rotate_m && per_head > 0 ? x % per_head : 0;
  }
  __device__ int head(const Args& a, int s) const { return hk * a.group + s / per_head; }
  __device__ int m0(int s) const {
    int r = s % per_head + rot;
    if (r >= per_head) r -= per_head;
    return (m_begin + r) * 64;
  }
};

// The work tile a persistent CTA (schedule 25) takes at its tile count j: every gridDim.x-th from blockIdx.x.
__device__ __forceinline__ int persistent_tile(int j) { return static_cast<int>(blockIdx.x + j * gridDim.x); }
__device__ __forceinline__ Work persistent_work(const Args& a, int tile) {
  const int heads_kv = a.n_head / a.group, blocks = (a.seqlen_k + 127) / 128;
  return Work(a, tile, blocks, heads_kv, a.tiles / blocks);
}

// One thread: K/V once, then Q and dO of every step into the ring. Persistent CTAs (kPersistent, schedule 25) do so
// per tile, the ring's steps running on across tiles (step g of the CTA: stage g % 2); from the second tile on the
// first two steps' Q/dO go into the ring as soon as it has room, before the tile's K/V wait for the consumers to
// release the last ones (kv_empty), so those loads overlap the consumers' last steps and their dK/dV stores.
template <int HD, bool kPersistent>
__device__ __forceinline__ void producer_main(const Args& a, unsigned char* smem, Bars bars) {
  using T = Traits<HD>;
  tile::tma_prefetch_map(&a.tm_q);
  tile::tma_prefetch_map(&a.tm_k);
  tile::tma_prefetch_map(&a.tm_v);
  tile::tma_prefetch_map(&a.tm_do);
  const auto load_kv = [&](const Work& w) {
    tile::mbar_arrive_expect_tx(bars.kv_full(), 2 * T::kKvBytes);
#pragma unroll
    for (int cb = 0; cb < T::kColBlocks; ++cb) {
      tile::tma_load_4d(smem + cb * (T::kBlockN * 128), &a.tm_k, bars.kv_full(), cb * 64, w.n0, w.hk, w.b);
      tile::tma_load_4d(smem + T::kOffV + cb * (T::kBlockN * 128), &a.tm_v, bars.kv_full(), cb * 64, w.n0, w.hk,
                        w.b);
    }
  };
  const auto load_step = [&](const Work& w, int s, int g) {  // step s of tile w, the CTA's step g
    const int stage = g % T::kStages;
    if (g >= T::kStages) tile::mbar_wait(bars.q_empty(stage), ((g / T::kStages) + 1) & 1);
    const int h = w.head(a, s), m0 = w.m0(s);
    uint64_t* full = bars.q_full(stage);
    tile::mbar_arrive_expect_tx(full, 2 * T::kQBytes);
#pragma unroll
    for (int cb = 0; cb < T::kColBlocks; ++cb) {
      tile::tma_load_4d(smem + T::kOffQ + stage * T::kQBytes + cb * (T::kBlockM * 128), &a.tm_q, full, cb * 64, m0,
                        h, w.b);
      tile::tma_load_4d(smem + T::kOffDo + stage * T::kQBytes + cb * (T::kBlockM * 128), &a.tm_do, full, cb * 64, m0,
                        h, w.b);
    }
  };
  if constexpr (!kPersistent) {
    const Work w(a);
    load_kv(w);
    for (int s = 0; s < w.steps; ++s) load_step(w, s, s);
  } else {
    int g = 0;  // the CTA's ring steps so far
    for (int j = 0; persistent_tile(j) < a.tiles; ++j) {
      const Work w = persistent_work(a, persistent_tile(j));
      const int early = j == 0 ? 0 : min(w.steps, T::kStages);
      for (int s = 0; s < early; ++s) load_step(w, s, g + s);
      if (j > 0) tile::mbar_wait(bars.kv_empty(), (j - 1) & 1);
      load_kv(w);
      for (int s = early; s < w.steps; ++s) load_step(w, s, g + s);
      g += w.steps;
    }
  }
}

// 16-bit A fragments of a k16 step from accumulators [64][64] (k = the accumulator's columns): n8 blocks 2kk, 2kk+1.
template <ElemKind E>
__device__ __forceinline__ void to_a_fragments(const float (&s)[32], uint32_t (&f)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    f[kk][0] = flash_detail::pack2<E>(s[8 * kk + 0], s[8 * kk + 1]);
    f[kk][1] = flash_detail::pack2<E>(s[8 * kk + 2], s[8 * kk + 3]);
    f[kk][2] = flash_detail::pack2<E>(s[8 * kk + 4], s[8 * kk + 5]);
    f[kk][3] = flash_detail::pack2<E>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// P^T = exp2(S^T * scale log2 e - LSE log2 e) (masked by select) into `st` once the S^T group is done (dP^T still
// running), then dS^T = P^T (dP^T - D) into `dpt` once dP^T is done. Accumulator i of both: key n0 + key_lo + 8
// ((i / 2) % 2), query m0 + 8 (i / 4) + 2c + i % 2; lse / dsum: the step's 64 LSE * log2 e and D values. kKeys:
// the CTA's keys (a mask is needed only for blocks that reach past seqlen_k or the causal diagonal).
template <int kKeys>
__device__ __forceinline__ void softmax_grad(const Args& a, const Work& w, int m0, int key_lo, int c, const float* lse,
                                             const float* dsum, float (&st)[32], float (&dpt)[32]) {
  const int diag = a.seqlen_k - a.seqlen_q;
  tile::wgmma_wait<1>();
  tile::fence_regs(st);
  const bool need_mask = w.n0 + kKeys > a.seqlen_k || (a.causal && w.n0 + kKeys - 1 > m0 + diag);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 l = *reinterpret_cast<const float2*>(lse + 8 * j + 2 * c);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 4 * j + e;
      float p = flash_detail::fast_exp2(fmaf(st[i], a.scale_log2, -(e % 2 ? l.y : l.x)));
      if (need_mask) {
        const int key = w.n0 + key_lo + 8 * (e / 2), query = m0 + 8 * j + 2 * c + e % 2;
        if (key >= a.seqlen_k || (a.causal && key > query + diag)) p = 0.0f;
      }
      st[i] = p;
    }
  }
  tile::wgmma_wait<0>();
  tile::fence_regs(dpt);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 d = *reinterpret_cast<const float2*>(dsum + 8 * j + 2 * c);
#pragma unroll
    for (int e = 0; e < 4; ++e) dpt[4 * j + e] = st[4 * j + e] * (dpt[4 * j + e] - (e % 2 ? d.y : d.x));
  }
}

// dK = scale * sum dS^T Q, dV = sum P^T dO: accumulator i = key n0 + key_lo + 8 ((i / 2) % 2), dim 8 (i / 4) + 2c +
// i % 2; keys past seqlen_k are not written.
template <ElemKind E, int HD>
__device__ __forceinline__ void store_dk_dv(const Args& a, const Work& w, int key_lo, int c, const float (&dk)[64],
                                            const float (&dv)[64]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = w.n0 + key_lo + 8 * half;
    if (key >= a.seqlen_k) continue;
    uint16_t* dk_row = a.dk + w.b * a.dk_st.batch + int64_t{key} * a.dk_st.seq + w.hk * a.dk_st.head;
    uint16_t* dv_row = a.dv + w.b * a.dv_st.batch + int64_t{key} * a.dv_st.seq + w.hk * a.dv_st.head;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      const int d = 8 * j + 2 * c, i = 4 * j + 2 * half;
      *reinterpret_cast<uint32_t*>(dk_row + d) = flash_detail::pack2<E>(dk[i] * a.scale, dk[i + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(dv_row + d) = flash_detail::pack2<E>(dv[i], dv[i + 1]);
    }
  }
}

// ---- Step pieces the consumers share (consumer_main here; consumer_pingpong and consumer_pingpong_shared_dq in
// flash_bwd_sm90_pingpong.cuh): the GEMM issues and the shared-memory traffic of one step, in the order each
// consumer's schedule calls them. Fences, commits, waits and barriers stay with the callers: where they go is what
// tells the schedules apart.

// A step's place in the shared memory: ring step g (the CTA's steps so far: its Q / dO stage and that stage's fill
// count) and local step s (the warpgroup's [LSE 64][D 64] buffer s % 2 of `vecs`, filled a step ahead).
template <int HD>
struct StepTiles {
  int stage;
  uint32_t q_addr, do_addr;
  const float* lse;
  const float* dsum;
  int g;
  __device__ __forceinline__ StepTiles(uint32_t base, const float* vecs, int ring_step, int s) : g(ring_step) {
    using T = Traits<HD>;
    stage = g % T::kStages;
    q_addr = base + T::kOffQ + stage * T::kQBytes;
    do_addr = base + T::kOffDo + stage * T::kQBytes;
    lse = vecs + (s % 2) * (2 * T::kBlockM);
    dsum = lse + T::kBlockM;
  }
  // The phase of the stage's q_full barrier this step waits for.
  __device__ __forceinline__ uint32_t full_parity() const { return (g / Traits<HD>::kStages) & 1; }
};

// Element `wtid` of step `step`'s [LSE * log2 e 64][D 64] vector (thread wtid < 128 of a warpgroup).
__device__ __forceinline__ float load_step_vec(const Args& a, const Work& w, int step, int wtid) {
  const int64_t row0 = (int64_t{w.b} * a.n_head + w.head(a, step)) * (int64_t{a.m_blocks} * 64) + w.m0(step);
  return wtid < 64 ? a.lse_log2[row0 + wtid] : a.dsum[row0 + wtid - 64];
}

// acc[64 keys][64 queries] = X_w Y^T over the head dim (X = K or V: this warpgroup's 64 rows of the CTA's key tile;
// Y = Q or dO of the step): S^T = K_w Q^T and dP^T = V_w dO^T. Issued, not committed.
template <ElemKind E, int HD>
__device__ __forceinline__ void issue_keys_by_queries(float (&acc)[32], uint32_t x_addr, uint32_t y_addr, int cwg) {
  using T = Traits<HD>;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const int cb = kk / 4, kin = kk % 4;
    const uint64_t da = tile::desc_k_major(x_addr + cb * (T::kBlockN * 128) + cwg * (64 * 128) + kin * 32);
    const uint64_t db = tile::desc_k_major(y_addr + cb * (T::kBlockM * 128) + kin * 32);
    tile::Wgmma<64, E>::template ss<0>(acc, da, db, kk > 0 ? 1 : 0);
  }
}

// dV += P^T dO: k = the step's 64 queries (16 per wgmma = two 8-row groups of dO). Issued, not committed.
template <ElemKind E, int HD>
__device__ __forceinline__ void issue_dv(float (&dv)[64], const uint32_t (&pa)[4][4], uint32_t do_addr) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    tile::Wgmma<128, E>::template rs<1>(dv, pa[kk], tile::desc_mn_major(do_addr + kk * 2048, Traits<HD>::kBlockM * 128),
                                        1);
}

// dQ[64 queries][64 cwg .. + 64] = dS[64][128 keys] K[128 keys][64 cwg ..], dS read M-major from the [128 keys][64
// queries] dS^T tile at ds_addr (schedule 1's shared dQ). Issued, not committed.
template <ElemKind E, int HD>
__device__ __forceinline__ void issue_dq_shared(float (&dq)[32], uint32_t ds_addr, uint32_t k_addr, int cwg) {
  using T = Traits<HD>;
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
    const uint64_t da = tile::desc_mn_major(ds_addr + kk * 2048, T::kDsBytes);
    const uint64_t db = tile::desc_mn_major(k_addr + cwg * (T::kBlockN * 128) + kk * 2048, T::kBlockN * 128);
    tile::Wgmma<64, E>::template ss<1, 1>(dq, da, db, kk > 0 ? 1 : 0);
  }
}

// dS^T (16-bit) from the dP^T accumulators into a tile of 128-byte rows (row = key, 64 queries), 16-byte chunk
// j ^ (row % 8): rows row_lo and row_lo + 8 of this thread.
template <ElemKind E>
__device__ __forceinline__ void store_ds_t(unsigned char* ds_tile, int row_lo, int c, const float (&dpt)[32]) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row_lo + 8 * half;
      *reinterpret_cast<uint32_t*>(ds_tile + r * 128 + ((j ^ (r % 8)) * 16) + 4 * c) =
          flash_detail::pack2<E>(dpt[4 * j + 2 * half], dpt[4 * j + 2 * half + 1]);
    }
}

// dQ fragments -> the staging buffer in the workspace tile's order (float4 j of thread wtid = accumulators 4j..4j+3),
// then the fence that lets the copy engine's bulk reduce read them.
template <int kFloats>
__device__ __forceinline__ void stage_dq_fragments(float* stage, int wtid, const float (&dq)[kFloats]) {
#pragma unroll
  for (int j = 0; j < kFloats / 4; ++j)
    *reinterpret_cast<float4*>(stage + (j * 128 + wtid) * 4) = make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2],
                                                                          dq[4 * j + 3]);
  tile::fence_async_shared();
}

// kSched: 0 = v4 (dV and dK issued together before the dS^T barrier, everything waited for before the dQ staging);
// 1 = FA3's order (dV before the barrier, then dQ, then dK, the dQ staging under dK); 2 = 1 with dK waited for only
// behind the next step's S^T and dP^T (the tensor cores get the next step's work before this one's dK ends).
// 3 and 4 drop the dQ staging (shared-memory traffic per step is the bound): 3 = 1 with dQ
// added into the workspace by red.global.add.v4.f32 straight from the accumulator registers once dK is done (no
// 16 KB staging write and bulk read per warpgroup and step, no bulk bookkeeping); 4 = 3 with the reductions issued
// while dK runs (as 1's staging). Measured on the H200: 3 5-9% and 4 2-3% slower than 1 at every size (both
// spill 40 bytes; the L2 takes register vector reductions more slowly than the copy engine's bulk add), kept in the
// variants build only. (K_w held in registers as the S^T GEMM's A operand, 32 more registers, made ptxas spill 100
// bytes and serialize the wgmmas: not run.)
template <int kSched>
struct Sched {
  static constexpr bool kFa3Order = kSched == 1 || kSched >= 3;  // dK issued behind dQ, waited for in the step
  static constexpr bool kRedDq = kSched == 3 || kSched == 4;
  static constexpr bool kRedUnderDk = kSched == 4;
};

// dst[0..3] += v (16-byte aligned global f32): one vector reduction at L2, no return value (sm_90).
__device__ __forceinline__ void red_add_v4(float* dst, float x, float y, float z, float w) {
#if GA_SM90A_DEVICE
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "f"(x), "f"(y), "f"(z), "f"(w)
);
#else
  (void)dst, (void)x, (void)y, (void)z, (void)w;
#endif
}

template <ElemKind E, int HD, int kSched>
__device__ __forceinline__ void consumer_main(const Args& a, unsigned char* smem, Bars bars) {
  using T = Traits<HD>;
  using S = Sched<kSched>;
  const Work w(a);
  const int cwg = static_cast<int>(threadIdx.x) / 128 - 1;  // consumer warpgroup: keys [64 cwg, 64 cwg + 64)
  const int wtid = static_cast<int>(threadIdx.x) % 128;
  const int warp = wtid / 32, lane = wtid % 32, g = lane / 4, c = lane % 4;
  const uint32_t base = tile::smem_u32(smem);
  const uint32_t k_addr = base, v_addr = base + T::kOffV;
  // This thread's accumulator rows: keys n0 + key_lo and n0 + key_lo + 8 (S^T, dP^T, dK, dV).
  const int key_lo = cwg * 64 + warp * 16 + g;

  // LSE * log2 e and D of a step: this warpgroup's own copy, buffer s % 2 of [LSE 64][D 64] floats. Thread wtid
  // loads element wtid of step s + 1 from L2 at the start of step s and stores it just before the named barrier that
  // ends step s, so the load's latency hides behind a whole step and the barrier (which compute-sanitizer's racecheck
  // models, unlike mbarrier waits) orders the store before step s + 1's reads and after step s - 1's.
  float* const vecs = reinterpret_cast<float*>(smem + T::kOffVec + cwg * 2 * T::kVecBytes);
  if (w.steps > 0) vecs[wtid] = load_step_vec(a, w, 0, wtid);
  tile::named_barrier_sync(2 + cwg, 128);

  float dv[64], dk[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) dv[i] = dk[i] = 0.0f;
  // P^T and dS^T as 16-bit A fragments, declared outside the loop: release_after_dk pins dS^T until dK is done.
  uint32_t pa[4][4], dsa[4][4];
  // Once a step's dK GEMM (the last reader of its Q and dO) has been waited for: pin its registers and free the stage.
  const auto release_after_dk = [&](int stage) {
    if constexpr (S::kFa3Order) tile::wgmma_wait<0>();
    tile::fence_regs(dk);
    if constexpr (kSched != 2) tile::fence_regs(dsa);
    __syncwarp();
    if (lane == 0) tile::mbar_arrive(bars.q_empty(stage));  // Q and dO of this stage are free
  };
  tile::mbar_wait(bars.kv_full(), 0);

  for (int s = 0; s < w.steps; ++s) {
    const StepTiles<HD> st_tiles(base, vecs, s, s);
    const int stage = st_tiles.stage;
    const uint32_t q_addr = st_tiles.q_addr, do_addr = st_tiles.do_addr;
    const int h = w.head(a, s), m0 = w.m0(s);
    const float vec_next = s + 1 < w.steps ? load_step_vec(a, w, s + 1, wtid) : 0.0f;
    tile::mbar_wait(bars.q_full(stage), st_tiles.full_parity());

    // S^T = K_w Q^T and dP^T = V_w dO^T, [64 keys][64 queries]: two commit groups.
    float st[32], dpt[32];
    tile::fence_regs(st);
    tile::fence_regs(dpt);
    tile::wgmma_fence();
    issue_keys_by_queries<E, HD>(st, k_addr, q_addr, cwg);
    tile::wgmma_commit();
    if constexpr (kSched == 2) {  // the previous step's dK ran under this S^T; dP^T's registers only after it
      if (s > 0) {
        tile::wgmma_wait<1>();
        release_after_dk((s - 1) % T::kStages);
      }
    }
    issue_keys_by_queries<E, HD>(dpt, v_addr, do_addr, cwg);
    tile::wgmma_commit();

    softmax_grad<T::kBlockN>(a, w, m0, key_lo, c, st_tiles.lse, st_tiles.dsum, st, dpt);
    to_a_fragments<E>(st, pa);
    if constexpr (kSched != 2) to_a_fragments<E>(dpt, dsa);

    // dV_w += P^T dO, dK_w += dS^T Q: k = the step's 64 queries (16 per wgmma = two 8-row groups of dO / Q). (Issuing
    // dV before dS^T exists, computing dS from the 16-bit P to stay inside the registers, was 3-8% slower and
    // tripled the error against FA2: run 2.)
    // kSched 2 reads dS^T for dK from shared memory (this warpgroup's 64 rows of the tile the dQ GEMM reads), so no
    // A fragments stay live across the loop's back edge (with them ptxas serialized the wgmmas: too few registers).
    const auto issue_dk = [&](uint32_t ds_addr) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t db = tile::desc_mn_major(q_addr + kk * 2048, T::kBlockM * 128);
        if constexpr (kSched == 2) {
          tile::Wgmma<128, E>::template ss<1>(dk, tile::desc_k_major(ds_addr + cwg * (64 * 128) + kk * 32), db, 1);
        } else {
          tile::Wgmma<128, E>::template rs<1>(dk, dsa[kk], db, 1);
        }
      }
    };
    tile::fence_regs(dv);
    tile::fence_regs(dk);
    tile::wgmma_fence();
    issue_dv<E, HD>(dv, pa, do_addr);
    if constexpr (kSched == 0) issue_dk(0);
    tile::wgmma_commit();

    // dS^T (16-bit) into buffer s % 2 (both warpgroups' halves: rows = the CTA's 128 keys).
    unsigned char* ds_tile = smem + T::kOffDs + (s % 2) * T::kDsBytes;
    store_ds_t<E>(ds_tile, key_lo, c, dpt);
    tile::fence_async_shared();
    if (!S::kRedDq && wtid == 0 && s > 0) tile::bulk_wait_read<0>();  // the previous step's dQ staging was read
    tile::named_barrier_sync(1, 256);  // both halves of dS^T written

    // dQ[64 queries][64 cwg .. +64] = dS[64][128 keys] K[128 keys][64 cwg .. +64]. (Splitting by keys instead, each
    // warpgroup over its own 64 keys and all columns with no meeting, was 3-6% slower: run 3.)
    float dq[32];
    tile::fence_regs(dq);
    tile::wgmma_fence();
    const uint32_t ds_addr = tile::smem_u32(ds_tile);
    issue_dq_shared<E, HD>(dq, ds_addr, k_addr, cwg);
    tile::wgmma_commit();
    if constexpr (kSched == 0) {
      tile::wgmma_wait<0>();
      tile::fence_regs(dq);
      tile::fence_regs(pa);
      tile::fence_regs(dsa);
      tile::fence_regs(dv);
      tile::fence_regs(dk);
      __syncwarp();
      if (lane == 0) tile::mbar_arrive(bars.q_empty(stage));  // Q and dO of this stage are free
    } else {
      // FA3's order: dK behind dQ, so the dQ staging below runs while the tensor cores do dK.
      issue_dk(ds_addr);
      tile::wgmma_commit();
      tile::wgmma_wait<1>();  // dV and dQ done, dK running
      tile::fence_regs(dq);
      tile::fence_regs(pa);
      tile::fence_regs(dv);
    }

    // dQ fragments -> the tile (float4 j of thread wtid = its accumulators 4j..4j+3): schedules 3, 4 add them from
    // the registers (a warp's vector reduction covers 512 contiguous bytes); the others stage them in shared memory
    // for one bulk add per warpgroup.
    float* const dq_tile =
        a.dq_accum + ((int64_t{w.b} * a.n_head + h) * a.m_blocks + m0 / 64) * T::kDqTileFloats + cwg * 4096;
    float* stage_dq = reinterpret_cast<float*>(smem + T::kOffDq + cwg * T::kDqHalfBytes);
    const auto reduce_dq_from_registers = [&] {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        red_add_v4(dq_tile + (j * 128 + wtid) * 4, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
    };
    if constexpr (S::kRedUnderDk) {
      reduce_dq_from_registers();
    } else if constexpr (!S::kRedDq) {
      stage_dq_fragments(stage_dq, wtid, dq);
    }
    if constexpr (S::kFa3Order) release_after_dk(stage);  // kSched 2: at the next step, behind its S^T and dP^T
    if constexpr (S::kRedDq && !S::kRedUnderDk) reduce_dq_from_registers();
    if (s + 1 < w.steps) vecs[((s + 1) % 2) * (2 * T::kBlockM) + wtid] = vec_next;
    tile::named_barrier_sync(2 + cwg, 128);
    if (!S::kRedDq && wtid == 0) {
      tile::bulk_reduce_add_f32(dq_tile, stage_dq, T::kDqHalfBytes);
      tile::bulk_commit();
    }
  }
  if constexpr (kSched == 2) {  // the last step's dK
    tile::wgmma_wait<0>();
    if (w.steps > 0) release_after_dk((w.steps - 1) % T::kStages);
  }
  if (!S::kRedDq && wtid == 0) tile::bulk_wait<0>();  // the reductions end before the shared memory goes away

  store_dk_dv<E, HD>(a, w, key_lo, c, dk, dv);
}

}  // namespace ga::cuda::flash_bwd_sm90

#include "backends/cuda/kernels/flash/flash_bwd_sm90_pingpong.cuh"  // schedules 16, 17 (uses the pieces above)

namespace ga::cuda::flash_bwd_sm90 {

template <ElemKind E, int HD, int kSched>
__global__ void __launch_bounds__(384, 1) main_kernel(const __grid_constant__ Args a) {
#if GA_SM90A_DEVICE
  using T = Traits<HD>;
  extern __shared__ unsigned char flash_bwd_smem_raw[];
  unsigned char* smem = flash_bwd_smem_raw + ((1024 - (tile::smem_u32(flash_bwd_smem_raw) & 1023)) & 1023);
  const Bars bars{reinterpret_cast<uint64_t*>(smem + T::kOffBars)};
  if (threadIdx.x == 0) {
    tile::mbar_init(bars.kv_full(), 1);
    for (int s = 0; s < T::kStages; ++s) {
      tile::mbar_init(bars.q_full(s), 1);
      tile::mbar_init(bars.q_empty(s), 8);  // 8 consumer warps
    }
    tile::mbar_init(bars.kv_empty(), 8);
    tile::mbar_fence_init();
  }
  __syncthreads();
  detail::pdl_allow_dependents();  // the convert may be scheduled; it waits for this grid's end itself
  if (threadIdx.x < 128) {
    tile::regs_release<24>();
    if (threadIdx.x == 0) producer_main<HD, kSched == kPersistentSched>(a, smem, bars);
  } else {
    tile::regs_acquire<240>();
    if constexpr (is_split_dq_sched(kSched)) {
      consumer_pingpong<E, HD, kSched>(a, smem, bars);
    } else if constexpr (is_shared_dq_pingpong_sched(kSched)) {
      consumer_pingpong_shared_dq<E, HD, kSched == kPingPongEarlyDvSched, kSched == kPersistentSched>(a, smem, bars);
    } else {
      consumer_main<E, HD, kSched>(a, smem, bars);
    }
  }
#else
  (void)a;
  __trap();
#endif
}

// The schedule flash_backward runs (see consumer_main); -DGA_FLASH_ALL_VARIANTS=ON compiles the others too, for
// benchmarks (flash_backward_hopper_variant in flash_bwd_variants.h). kPrePostOnly runs the preprocess and convert
// kernels alone (wrong gradients; a benchmark's measure of their share of the time). Every schedule but kPreOnly,
// kRowPre and kPreRowConvertOnly runs preprocess_wide.
// 26 (19's kernel, dK/dV written by TMA stores; docs/results/2026-11-28-h200-attention.md): the main kernel 7-10%
// faster than 19 at 512-1k tokens, 2-3% at 4k (torch.profiler, same run), 0.91-0.97x cuDNN at 512-1k where 19 was
// 0.84-0.88x. 19 (flash_bwd_sm90_pingpong.cuh): 1.02-1.10x schedule 1 at every length 512-16k, causal and full;
// schedule 1 was 3.5-7% faster than 0 at every size, 2 in between.
constexpr int kDefaultSched = kTmaDkDvSched;
constexpr int kFa3OrderSched = 1;  // FA3's order, both warpgroups in lockstep (consumer_main): variants build
constexpr int kPrePostOnly = 9;
constexpr int kPreOnly = 8;  // the preprocess kernel alone (its share; s9 - s8 = the convert's)
constexpr int kPreRowConvertOnly = 6;  // as 9 with the one-row-per-warp convert_dq (the A/B of convert_dq_pairs)
constexpr int kRowConvert = 7;         // schedule 1 with the one-row-per-warp convert_dq (same A/B, whole backward)
constexpr int kWidePreOnly = 10;       // preprocess_wide alone (kPreOnly times the one-warp-per-row preprocess)
constexpr int kRowPre = 12;            // schedule 1 with the one-warp-per-row preprocess (the A/B of preprocess_wide)

// The main kernel a schedule runs: schedules that differ only in their launch (22-24) or in the preprocess or
// convert kernels (7, 12) share another's.
constexpr int main_kernel_sched(int sched) {
  if (sched == kRowConvert || sched == kRowPre) return kFa3OrderSched;
  if (sched == kLptSched || sched == kPdlSched || sched == kLptPdlSched || sched == kTmaDkDvSched) {
    return kPingPongSharedDqSched;
  }
  return sched;
}

// The SMs the backward's work order and persistent grid are sized for: the device's, or an H100/H200's 132 when the
// count cannot be read (only the schedule's speed depends on it, never its result).
inline int sm_count_for_order() {
  const int sms = flash_detail::current_sm_count();
  return sms > 0 ? sms : 132;
}

// (batch, KV head) pairs per group of the causal work order (Work): enough that a group's CTAs fill about two waves
// of the device's SMs (one CTA per SM), so that the last wave of the whole grid holds the groups' shortest CTAs.
inline int causal_order_group(int key_blocks, int sms) { return std::max(1, (2 * sms + key_blocks - 1) / key_blocks); }

// Runs the three kernels (flash_bwd_sm90_hd*.cu instantiate it); `args` carries the pointers and strides the
// preprocess and convert kernels read (its dq_accum/dsum point into the Hopper workspace layout), `m` the rest.
// cudaErrorNotSupported for a schedule this build did not compile.
template <int HD>
cudaError_t launch(const flash_bwd::BwdArgs& args, const Args& m, float* lse_log2, bool bf16, int sched,
                   cudaStream_t stream);

template <bool kBf16, int HD, int kSched>
cudaError_t launch_instance(const flash_bwd::BwdArgs& args, const Args& m, float* lse_log2, cudaStream_t stream) {
  using T = Traits<HD>;
  static_assert(T::kSmemBytes <= 227 * 1024, "shared memory per CTA");
  constexpr ElemKind E = kBf16 ? ElemKind::kBf16 : ElemKind::kF16;
  const int64_t pad_rows = int64_t{args.batch} * args.n_head * m.m_blocks * 64;
  if constexpr (kSched == kPreOnly || kSched == kRowPre || kSched == kPreRowConvertOnly) {
    preprocess<kBf16, HD><<<static_cast<unsigned>((pad_rows + 7) / 8), 256, 0, stream>>>(args, lse_log2, m.m_blocks);
  } else {  // 32 rows per CTA; pad_rows is a multiple of 64
    preprocess_wide<kBf16, HD><<<static_cast<unsigned>(pad_rows / 32), 256, 0, stream>>>(args, lse_log2, m.m_blocks);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  constexpr bool kMain =
      kSched != kPrePostOnly && kSched != kPreOnly && kSched != kPreRowConvertOnly && kSched != kWidePreOnly;
  constexpr bool kPdl = kSched == kPdlSched || kSched == kLptPdlSched;
  if constexpr (kMain) {
    const auto kernel = main_kernel<E, HD, main_kernel_sched(kSched)>;
    constexpr size_t kSmem = is_split_dq_sched(kSched) ? T::kSmemBytesPp : T::kSmemBytes;
    static_assert(kSmem <= 227 * 1024, "shared memory per CTA");
    static const cudaError_t attr_status =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
    if (attr_status != cudaSuccess) return attr_status;
    dim3 grid(static_cast<unsigned>((args.seqlen_k + T::kBlockN - 1) / T::kBlockN),
              static_cast<unsigned>(args.n_head_kv), static_cast<unsigned>(args.batch));
    Args mk = m;
    mk.rotate_m = kSched == kPingPongRotatedSched ? 1 : 0;
    constexpr bool kCausalOrder = kSched == kLptSched || kSched == kLptPdlSched || kSched == kPersistentSched;
    const int sms = kCausalOrder ? sm_count_for_order() : 0;
    mk.lpt_heads = kCausalOrder && m.causal ? causal_order_group(static_cast<int>(grid.x), sms) : 0;
    mk.tiles = static_cast<int>(grid.x * grid.y * grid.z);
    mk.tma_dkdv = kSched == kTmaDkDvSched ? m.tma_dkdv : 0;  // m's: whether the host encoded the two maps
    if constexpr (kSched == kPersistentSched) {  // one CTA per SM, each taking every gridDim.x-th tile
      grid = dim3(static_cast<unsigned>(std::min(mk.tiles, sms)));
    }
    if constexpr (kPdl) {
      e = detail::launch_after_prior(kernel, grid, dim3(T::kThreads), kSmem, stream, mk);
    } else {
      kernel<<<grid, T::kThreads, kSmem, stream>>>(mk);
      e = cudaGetLastError();
    }
    if (e != cudaSuccess) return e;
  }
  if constexpr (kSched == kPreOnly || kSched == kWidePreOnly) return cudaSuccess;
  if constexpr (kSched == kRowConvert || kSched == kPreRowConvertOnly) {
    const int64_t rows = int64_t{args.batch} * args.seqlen_q * args.n_head;
    convert_dq<kBf16, HD><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(args, m.m_blocks);
  } else {
    const int64_t pairs = int64_t{args.batch} * args.n_head * m.m_blocks * 32;
    const dim3 grid(static_cast<unsigned>((pairs + 7) / 8));
    if constexpr (kPdl) return detail::launch_after_prior(convert_dq_pairs<kBf16, HD>, grid, dim3(256), 0, stream,
                                                          args, m.m_blocks);
    convert_dq_pairs<kBf16, HD><<<grid, 256, 0, stream>>>(args, m.m_blocks);
  }
  return cudaGetLastError();
}

}  // namespace ga::cuda::flash_bwd_sm90
