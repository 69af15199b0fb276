// GEMV with int8 activations and __dp4a for the classic 32-weight types (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0) and Q4_K: the fast path behind gemv() when the rows are 16-byte aligned (gemv_int8_eligible).
// Q4_K fits the same scheme because each of its sub-blocks of 32 is w = (d sc) q - dmin m: one scale
// and one offset per 32 weights, like Q4_1 (Q6_K's 210-byte super-blocks make no 16-byte unit).
//
// Design (why, not how llama.cpp names it; the scheme is the one its mmvq uses):
//  * The float path spends ~5.3 instructions per weight (SASS of the H200 build, 2026-11-22):
//    every weight becomes a float and meets a float x. Here x is quantized once per CTA per block of
//    32 into two int8 digits, x ~ d_x * (q1 + q2 / 254) (d_x = amax / 127; q2 rounds q1's residual),
//    plus the float sum of the block, kept in shared memory; a weight block's dot is two integer dots
//    of 8 packed words (16 DP4A for 32 weights), then one float FMA pair per block:
//    y += d_w * d_x * (idot1 + idot2 / 254) + offset_w * sum(x) (offset_w = -bias * d_w or the min).
//  * Why two digits: one int8 digit (llama.cpp's q8_1) leaves x with ~0.5 % relative error, and the
//    fixture models' logits then differed from the float CPU session by 1.1-4.2e-2 rel L2 (measured,
//    test_cuda_forward allows 1e-2); the residual digit cuts the error 254x for 8 more DP4A per block.
//  * Work split: a CTA owns kInt8Rows = 8 rows per tile and walks tiles grid-stride (a persistent grid
//    sized by the occupancy), so x is quantized once per CTA, not per tile. A row is cut into units
//    of kUnitBlocks blocks whose bytes are a multiple of 16 (Q4_0: 8 blocks = 144 bytes = 9 chunks);
//    thread (warp w, lane l) owns row l % 8 and unit 4 * (pass * 4 + w) + l / 8 of the tile.
//  * Loads: the warp's 8 rows x 4 units are read with fully coalesced 16-byte loads
//    (ld.global.nc.L1::no_allocate, C per lane, all issued before any use), written to a per-warp
//    shared stage and read back unit-wise (the transpose that makes a lane own whole blocks). The
//    stage's row pitch is 4C + 1 chunks (odd), so the 8 lanes of a quarter-warp, which read the same
//    chunk of 8 different rows, hit 8 different bank groups; x reads are broadcasts (those 8 lanes
//    share the unit). Fields are then extracted from registers at compile-time byte offsets.
//  * Numerics: x is rounded per block (error <= d_x / 508 per element); the parity test checks against
//    a CPU reference that quantizes x the same way, and against the float reference within that bound.
//  * Latency: the first pass's weight loads are issued before x is quantized, and (types with at most
//    9 chunks per lane) each pass's loads are issued before the previous pass is computed.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/gemv_kernel.cuh"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/weight_decode.cuh"
#include "backends/cuda/kernels/x_int8.cuh"

namespace ga::cuda::detail {

inline constexpr int kInt8Rows = 8;          // rows per CTA tile (= the lanes of a quarter-warp)
inline constexpr int kInt8UnitsPerWarp = 4;  // units per warp and pass (32 lanes / 8 rows)
inline constexpr int kInt8UnitsPerPass = kInt8UnitsPerWarp * kGemvWarps;
inline constexpr int64_t kInt8MaxSmem = 120 * 1024;  // beyond this (long rows x 8 tokens) the float path wins

// An int of magnitude < 2^22 as float, exactly, with an integer add and a float subtract (no I2F).
__device__ __forceinline__ float small_int_to_float(int v) {
  return __fsub_rn(__int_as_float(v + kRoundMagicBits), kRoundMagic);
}

// The unit's word at byte offset `off` (a compile-time constant after unrolling).
__device__ __forceinline__ uint32_t unit_word(const uint32_t* u, int off) {
  const int w = off >> 2;
  const int s = off & 3;
  if (s == 0) return u[w];
  return __funnelshift_r(u[w], u[w + 1], 8 * s);
}

// The fp16 at even byte offset `off`, as float.
__device__ __forceinline__ float unit_half(const uint32_t* u, int off) {
  const uint32_t v = (off & 2) ? (u[off >> 2] >> 16) : (u[off >> 2] & 0xFFFFu);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(v)));
}

// The 8 code words of a Q4_x / Q5_x block: word k holds weights 4k..4k+3 (k < 4, low nibbles) and
// 16 + 4(k-4).. (k >= 4, high nibbles), matching x's natural order; qh (Q5) adds bit 4 per weight.
template <bool kFiveBits>
__device__ __forceinline__ void nibble_codes(const uint32_t* u, int qs_off, uint32_t qh, uint32_t* codes) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t v = unit_word(u, qs_off + 4 * k);
    codes[k] = v & kLowNibbles;
    codes[k + 4] = (v >> 4) & kLowNibbles;
    if constexpr (kFiveBits) {
      codes[k] |= spread_bits_to_bytes((qh >> (4 * k)) & 0xFu) << 4;
      codes[k + 4] |= spread_bits_to_bytes((qh >> (16 + 4 * k)) & 0xFu) << 4;
    }
  }
}

// Per-type block readers: codes (unsigned or signed bytes, < 128 in magnitude), scale d and the
// offset that multiplies sum(x) (kHasOffset false: none).
//
// Routing limits (kMinRows, kMaxTokens): where the float kernel measured faster, gemv() keeps it. Q8_0's
// int8 path spills (17 chunks per lane) and runs 3 CTAs per SM: on 4096-row matrices it measured 32-34 %
// of copy against the float kernel's 39-44 % (n_tokens 1) and 24 % vs 28 % (n_tokens 2, 4096x4096), and
// at n_tokens 8 it is no faster (H200, 2026-11-22); it only wins from ~8k rows.
template <class D>
struct Int8Traits {
  static constexpr bool kEnabled = false;
};

// Defaults of the routing limits; a type's traits override them by declaring their own.
struct Int8RoutingDefaults {
  static constexpr int kSubBlocks = 1;    // blocks of 32 weights per weight block
  static constexpr int64_t kMinRows = 0;  // int8 path from this many rows on
  static constexpr int kMaxTokens = 8;    // and up to this many tokens
  // Whether the kernel is also instantiated to read a pre-quantized x (GemvParams::x_int8) instead of
  // building it per CTA: only the types whose models the forward runs through this kernel (7B Q4_0 and
  // Q4_K_M), to keep the instantiations few; the others ignore x_int8 and quantize x themselves.
  static constexpr bool kPreQuantX = false;
};

template <>
struct Int8Traits<DecodeQ4_0> : Int8RoutingDefaults {
  using Block = layout::BlockQ4_0;
  static constexpr bool kEnabled = true;
  static constexpr bool kPreQuantX = true;
  static constexpr int kUnitBlocks = 8;  // 144 bytes
  static constexpr bool kHasOffset = true;
  static __device__ __forceinline__ void block(const uint32_t* u, int b, uint32_t* codes, float& d, float& o) {
    const int off = b * static_cast<int>(sizeof(Block));
    d = unit_half(u, off + static_cast<int>(offsetof(Block, d)));
    o = -8.0f * d;
    nibble_codes<false>(u, off + static_cast<int>(offsetof(Block, qs)), 0u, codes);
  }
};

template <>
struct Int8Traits<DecodeQ4_1> : Int8RoutingDefaults {
  using Block = layout::BlockQ4_1;
  static constexpr bool kEnabled = true;
  static constexpr int kUnitBlocks = 4;  // 80 bytes
  static constexpr bool kHasOffset = true;
  static __device__ __forceinline__ void block(const uint32_t* u, int b, uint32_t* codes, float& d, float& o) {
    const int off = b * static_cast<int>(sizeof(Block));
    d = unit_half(u, off + static_cast<int>(offsetof(Block, d)));
    o = unit_half(u, off + static_cast<int>(offsetof(Block, m)));
    nibble_codes<false>(u, off + static_cast<int>(offsetof(Block, qs)), 0u, codes);
  }
};

template <>
struct Int8Traits<DecodeQ5_0> : Int8RoutingDefaults {
  using Block = layout::BlockQ5_0;
  static constexpr bool kEnabled = true;
  static constexpr int kUnitBlocks = 8;  // 176 bytes
  static constexpr bool kHasOffset = true;
  static __device__ __forceinline__ void block(const uint32_t* u, int b, uint32_t* codes, float& d, float& o) {
    const int off = b * static_cast<int>(sizeof(Block));
    d = unit_half(u, off + static_cast<int>(offsetof(Block, d)));
    o = -16.0f * d;
    const uint32_t qh = unit_word(u, off + static_cast<int>(offsetof(Block, qh)));
    nibble_codes<true>(u, off + static_cast<int>(offsetof(Block, qs)), qh, codes);
  }
};

template <>
struct Int8Traits<DecodeQ5_1> : Int8RoutingDefaults {
  using Block = layout::BlockQ5_1;
  static constexpr bool kEnabled = true;
  static constexpr int kUnitBlocks = 2;  // 48 bytes
  static constexpr bool kHasOffset = true;
  static __device__ __forceinline__ void block(const uint32_t* u, int b, uint32_t* codes, float& d, float& o) {
    const int off = b * static_cast<int>(sizeof(Block));
    d = unit_half(u, off + static_cast<int>(offsetof(Block, d)));
    o = unit_half(u, off + static_cast<int>(offsetof(Block, m)));
    const uint32_t qh = unit_word(u, off + static_cast<int>(offsetof(Block, qh)));
    nibble_codes<true>(u, off + static_cast<int>(offsetof(Block, qs)), qh, codes);
  }
};

template <>
struct Int8Traits<DecodeQ8_0> : Int8RoutingDefaults {
  using Block = layout::BlockQ8_0;
  static constexpr bool kEnabled = true;
  static constexpr int kUnitBlocks = 8;  // 272 bytes
  static constexpr bool kHasOffset = false;
  static constexpr int64_t kMinRows = 4097;  // the 4096-row matrices (attn_o, ffn_down) stay on the float path
  static constexpr int kMaxTokens = 4;       // n_tokens 8: the float path is as fast
  static __device__ __forceinline__ void block(const uint32_t* u, int b, uint32_t* codes, float& d, float& o) {
    const int off = b * static_cast<int>(sizeof(Block));
    d = unit_half(u, off + static_cast<int>(offsetof(Block, d)));
    o = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) codes[k] = unit_word(u, off + static_cast<int>(offsetof(Block, qs)) + 4 * k);
  }
};

// Sub-block b (0..7) of a Q4_K super-block: head[0] holds d and dmin, head[1..3] the 12 scale bytes, qs the 8 words
// of qs[32 (b >> 1) .. + 32) (sub-block b is their low (b even) or high nibbles); d = d_super * sc and
// o = -(dmin * m) are the CPU's float products (quant_blocks.h). The per-op kernel calls it with b a constant (every
// selection folds away), the persistent decode kernel with a lane's own b.
__device__ __forceinline__ void q4k_sub_block(const uint32_t (&head)[4], const uint32_t* qs, int b, uint32_t* codes,
                                              float& d, float& o) {
  const auto scale_byte = [&](int i) -> int {
    const uint32_t w = i < 4 ? head[1] : (i < 8 ? head[2] : head[3]);
    return static_cast<int>((w >> (8 * (i & 3))) & 0xFFu);
  };
  int sc = 0, m = 0;
  if (b < 4) {
    sc = scale_byte(b) & 63;
    m = scale_byte(b + 4) & 63;
  } else {
    sc = (scale_byte(b + 4) & 0xF) | ((scale_byte(b - 4) >> 6) << 4);
    m = (scale_byte(b + 4) >> 4) | ((scale_byte(b) >> 6) << 4);
  }
  d = __fmul_rn(__half2float(__ushort_as_half(static_cast<unsigned short>(head[0] & 0xFFFFu))), static_cast<float>(sc));
  o = -__fmul_rn(__half2float(__ushort_as_half(static_cast<unsigned short>(head[0] >> 16))), static_cast<float>(m));
#pragma unroll
  for (int k = 0; k < 8; ++k) codes[k] = (qs[k] >> (4 * (b & 1))) & kLowNibbles;
}

// Q4_K: a unit is one super-block (144 bytes, 8 sub-blocks of 32); q4k_sub_block reads sub-block b.
template <>
struct Int8Traits<DecodeQ4_K> : Int8RoutingDefaults {
  using Block = layout::BlockQ4_K;
  static constexpr bool kEnabled = true;
  static constexpr bool kPreQuantX = true;
  static constexpr int kSubBlocks = 8;
  static constexpr int kUnitBlocks = 8;  // 32-weight blocks per unit: one super-block, 144 bytes
  static constexpr bool kHasOffset = true;
  static_assert(offsetof(Block, d) == 0 && offsetof(Block, dmin) == 2 && offsetof(Block, scales) == 4 &&
                    offsetof(Block, qs) == 16,
                "q4k_sub_block reads the head as four words and qs from byte 16");
  static __device__ __forceinline__ void block(const uint32_t* u, int b, uint32_t* codes, float& d, float& o) {
    const uint32_t head[4] = {u[0], u[1], u[2], u[3]};
    q4k_sub_block(head, u + 4 + 8 * (b >> 1), b, codes, d, o);
  }
};

template <class D>
struct Int8Geometry {
  static constexpr int kUnitBlocks = Int8Traits<D>::kUnitBlocks;  // blocks of 32 weights (x blocks) per unit
  static constexpr int kUnitBytes = kUnitBlocks / Int8Traits<D>::kSubBlocks * D::kBlockBytes;
  static constexpr int kUnitChunks = kUnitBytes / kChunkBytes;  // chunks per lane and pass
  static constexpr int kPitch = kInt8UnitsPerWarp * kUnitChunks + 1;  // stage row pitch in chunks (odd)
  static_assert(kUnitBytes % kChunkBytes == 0, "a unit is whole 16-byte chunks");
  static constexpr int64_t kStageBytes = int64_t{kGemvWarps} * kInt8Rows * kPitch * kChunkBytes;
};

// Dynamic shared memory of the int8 kernel: quantized x ([n_tokens][blocks][q1 32 | q2 32] int8), the
// per-block (d_x, sum x) pairs ([n_tokens][blocks] float2), then the warps' stages.
template <class D>
__host__ __device__ constexpr int64_t gemv_int8_smem(int64_t x_blocks_per_row, int n_tokens) {
  return n_tokens * x_blocks_per_row * (kXBlockBytes + 8) + Int8Geometry<D>::kStageBytes;
}

// Blocks of 32 activations per row (a K-quant weight block spans 8).
template <class D>
__host__ __device__ constexpr int64_t gemv_int8_x_blocks(int64_t blocks_per_row) {
  return blocks_per_row * Int8Traits<D>::kSubBlocks;
}

// Whether this launch reads the caller's pre-quantized x (a.x_int8, x_int8.cuh layout) instead of
// quantizing a.x into shared memory in every CTA.
template <class D>
bool gemv_int8_reads_x_int8(const GemvArgs& a) {
  if constexpr (!Int8Traits<D>::kEnabled) {
    return false;
  } else {
    return Int8Traits<D>::kPreQuantX && a.x_int8 != nullptr;
  }
}

// Whether the int8 kernel can run these arguments at all: rows 16-byte aligned, whole units, the shared
// memory within kInt8MaxSmem (with x pre-quantized only the stages live there).
template <class D>
bool gemv_int8_possible(const GemvArgs& a) {
  if constexpr (!Int8Traits<D>::kEnabled) {
    return false;
  } else {
    const int64_t x_blocks = gemv_int8_x_blocks<D>(a.blocks_per_row);
    return !a.split_rows && a.row_stride % kChunkBytes == 0 && x_blocks % Int8Traits<D>::kUnitBlocks == 0 &&
           (gemv_int8_reads_x_int8<D>(a) || gemv_int8_smem<D>(x_blocks, a.n_tokens) <= kInt8MaxSmem);
  }
}

// Whether gemv() takes the int8 path for these arguments: possible, and within the type's routing limits;
// otherwise the float kernels run.
template <class D>
bool gemv_int8_eligible(const GemvArgs& a) {
  if constexpr (!Int8Traits<D>::kEnabled) {
    return false;
  } else {
    return a.rows >= Int8Traits<D>::kMinRows && a.n_tokens <= Int8Traits<D>::kMaxTokens && gemv_int8_possible<D>(a);
  }
}

// 8 DP4A: the integer dot of a block's 8 code words with 32 int8 activations (two uint4).
__device__ __forceinline__ int dot_block_words(const uint32_t* codes, uint4 x0, uint4 x1) {
  int dot = __dp4a(static_cast<int>(codes[0]), static_cast<int>(x0.x), 0);
  dot = __dp4a(static_cast<int>(codes[1]), static_cast<int>(x0.y), dot);
  dot = __dp4a(static_cast<int>(codes[2]), static_cast<int>(x0.z), dot);
  dot = __dp4a(static_cast<int>(codes[3]), static_cast<int>(x0.w), dot);
  dot = __dp4a(static_cast<int>(codes[4]), static_cast<int>(x1.x), dot);
  dot = __dp4a(static_cast<int>(codes[5]), static_cast<int>(x1.y), dot);
  dot = __dp4a(static_cast<int>(codes[6]), static_cast<int>(x1.z), dot);
  return __dp4a(static_cast<int>(codes[7]), static_cast<int>(x1.w), dot);
}

// Issues this lane's C chunk loads of pass (tile, unit0): chunk lane + 32 j of the warp's
// [8 rows][4 units] list; chunks of units past the row's end are zeros, rows past the end are
// clamped (read, never stored).
template <class D>
__device__ __forceinline__ void gemv_int8_load(const GemvArgs& a, int64_t tile, int unit0, int units_per_row,
                                               const int* load_row, const int* load_chunk, uint4* c) {
  using G = Int8Geometry<D>;
#pragma unroll
  for (int j = 0; j < G::kUnitChunks; ++j) {
    const int64_t row = min(tile * kInt8Rows + load_row[j], a.rows - 1);
    const int unit = unit0 + load_chunk[j] / G::kUnitChunks;
    c[j] = unit < units_per_row
               ? load_stream_16(a.w + row * a.row_stride + int64_t{unit0} * G::kUnitBytes + kChunkBytes * load_chunk[j])
               : make_uint4(0u, 0u, 0u, 0u);
  }
}

// CTAs per SM the register allocation must allow: unbounded, ptxas hoisted the x loads of all blocks
// of a unit (155 registers for Q4_0, 255 for Q8_0: 3 and 2 CTAs per SM, too few loads in flight).
template <class D>
__host__ __device__ constexpr int gemv_int8_min_ctas() {
  return Int8Geometry<D>::kUnitChunks <= 11 ? 4 : 3;
}

// kPreQuantX: x comes quantized in a.x_int8 (x_int8.cuh layout, written by an earlier kernel: read with
// coherent loads after pdl_wait_prior_grid()), so the CTA has no prologue and its shared memory holds
// only the stages; else each CTA quantizes a.x into shared memory first.
// Batch: DenseBatch or the expert GEMV's policy (gemv_kernel.cuh); a pre-quantized x only for the plain GEMV.
template <class D, int NT, bool kPreQuantX, class Batch = DenseBatch>
__global__ void __launch_bounds__(kGemvWarps * 32, gemv_int8_min_ctas<D>())
    gemv_int8_kernel(const GemvArgs args, int64_t n_tiles, const typename Batch::Extra extra) {
  static_assert(!kPreQuantX || Batch::kDense, "x_int8 is laid out for the plain GEMV's tokens");
  using T = Int8Traits<D>;
  using G = Int8Geometry<D>;
  constexpr int C = G::kUnitChunks;
  constexpr int kWarpChunks = kInt8UnitsPerWarp * C;  // chunks of one row per warp and pass
  constexpr bool kPrefetch = C <= 9;  // Q5_0 (11 chunks), Q8_0 (17) spill with two sets of chunks live
  extern __shared__ uint4 gemv_dynamic_smem[];
  __shared__ float partial[kGemvWarps][kInt8Rows][NT];

  typename Batch::template Cta<NT> cta;
  if constexpr (!Batch::kDense) {
    if (!cta.bind(args, extra)) return;  // no work for this CTA
  }
  const GemvArgs& a = Batch::kDense ? args : cta.a;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nb = static_cast<int>(gemv_int8_x_blocks<D>(a.blocks_per_row));  // x blocks of 32 per row
  // [n_tokens][nb][64] int8, then [n_tokens][nb] float2 (d_x, sum): the caller's buffer or shared memory
  auto* const smem_qx = reinterpret_cast<int8_t*>(gemv_dynamic_smem);
  const int8_t* const qx = kPreQuantX ? static_cast<const int8_t*>(a.x_int8) : smem_qx;
  auto* const smem_ds = reinterpret_cast<float2*>(smem_qx + static_cast<int64_t>(a.n_tokens) * nb * kXBlockBytes);
  const auto* const ds = reinterpret_cast<const float2*>(qx + static_cast<int64_t>(a.n_tokens) * nb * kXBlockBytes);
  uint4* const stages =
      kPreQuantX ? gemv_dynamic_smem : reinterpret_cast<uint4*>(smem_ds + static_cast<int64_t>(a.n_tokens) * nb);
  uint4* stage = stages + warp * kInt8Rows * G::kPitch;  // [8 rows][kPitch] chunks, this warp's

  int load_row[C], load_chunk[C];
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int k = lane + 32 * j;
    load_row[j] = k / kWarpChunks;
    load_chunk[j] = k - load_row[j] * kWarpChunks;
  }
  const int my_row = lane & 7;
  const int my_unit_in_warp = lane >> 3;
  const int units_per_row = nb / G::kUnitBlocks;

  // the first pass's loads fly while x is quantized (and while the kernel before finishes: pdl.cuh)
  pdl_allow_dependents();
  uint4 next[C];
  if (blockIdx.x < n_tiles && warp * kInt8UnitsPerWarp < units_per_row) {
    gemv_int8_load<D>(a, blockIdx.x, warp * kInt8UnitsPerWarp, units_per_row, load_row, load_chunk, next);
  }
  pdl_wait_prior_grid();
  if constexpr (!kPreQuantX) {
    for (int i = static_cast<int>(threadIdx.x); i < a.n_tokens * nb; i += kGemvWarps * 32) {
      const int t = i / nb;
      const int b = i - t * nb;
      gemv_quantize_x_block(a.x + cta.x_any(a, t) + int64_t{32} * b, smem_qx + static_cast<int64_t>(i) * kXBlockBytes,
                            smem_ds + i);
    }
    __syncthreads();
  }

  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;

    for (int unit0 = warp * kInt8UnitsPerWarp; unit0 < units_per_row; unit0 += kInt8UnitsPerPass) {
      uint4 c[C];
#pragma unroll
      for (int j = 0; j < C; ++j) c[j] = next[j];
      // this warp's next pass: the next units of this tile, else its first units of the next tile
      int next_unit0 = unit0 + kInt8UnitsPerPass;
      int64_t next_tile = tile;
      if (next_unit0 >= units_per_row) {
        next_unit0 = warp * kInt8UnitsPerWarp;
        next_tile += gridDim.x;
      }
      const bool has_next = next_tile < n_tiles;
      if (kPrefetch && has_next) {
        gemv_int8_load<D>(a, next_tile, next_unit0, units_per_row, load_row, load_chunk, next);
      }

#pragma unroll
      for (int j = 0; j < C; ++j) stage[load_row[j] * G::kPitch + load_chunk[j]] = c[j];
      __syncwarp();
#pragma unroll
      for (int j = 0; j < C; ++j) c[j] = stage[my_row * G::kPitch + my_unit_in_warp * C + j];
      __syncwarp();  // the stage is refilled by the next pass

      const int unit = unit0 + my_unit_in_warp;
      if (unit < units_per_row) {
        uint32_t u[4 * C + 1];
#pragma unroll
        for (int j = 0; j < C; ++j) {
          u[4 * j] = c[j].x;
          u[4 * j + 1] = c[j].y;
          u[4 * j + 2] = c[j].z;
          u[4 * j + 3] = c[j].w;
        }
        u[4 * C] = 0u;  // never a field's byte; keeps unit_word's u[w + 1] in bounds
#pragma unroll
        for (int b = 0; b < G::kUnitBlocks; ++b) {
          uint32_t codes[8];
          float d, o;
          T::block(u, b, codes, d, o);
          const int blk = unit * G::kUnitBlocks + b;
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            if (t >= a.n_tokens) break;
            const uint4* xq = reinterpret_cast<const uint4*>(qx + (static_cast<int64_t>(t) * nb + blk) * kXBlockBytes);
            const int dot1 = dot_block_words(codes, xq[0], xq[1]);
            const int dot2 = dot_block_words(codes, xq[2], xq[3]);
            const float2 xs = ds[t * nb + blk];
            // |dot| <= 32 * 128 * 127 < 2^22: exact as float either way
            const float dot = fmaf(small_int_to_float(dot2), 1.0f / kResidualSteps, small_int_to_float(dot1));
            float a_t = acc[t];
            if constexpr (T::kHasOffset) a_t = fmaf(o, xs.y, a_t);
            acc[t] = fmaf(d, xs.x * dot, a_t);
          }
        }
      }
      if (!kPrefetch && has_next) {  // other warps' loads cover this warp's compute
        gemv_int8_load<D>(a, next_tile, next_unit0, units_per_row, load_row, load_chunk, next);
      }
    }

    // lanes l, l + 8, l + 16, l + 24 share row l % 8; then the warps meet in shared memory
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float v = acc[t];
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (lane < kInt8Rows) partial[warp][lane][t] = v;
    }
    __syncthreads();
    const int64_t row0 = tile * kInt8Rows;
    if (threadIdx.x < kInt8Rows * NT) {
      const int i = static_cast<int>(threadIdx.x) / NT;
      const int t = static_cast<int>(threadIdx.x) % NT;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kGemvWarps; ++w) sum += partial[w][i][t];
      if (row0 + i < a.rows && t < a.n_tokens) a.y[cta.y(a, t) + row0 + i] = sum;
    }
    __syncthreads();  // partial is rewritten by the next tile
  }
}

// Persistent launch: as many CTAs as fit on the device at once (at most one per tile), shared by the
// matrices of a batched launch (Batch::concurrent_matrices: each gets its share of the resident CTAs).
template <class D, int NT, bool kPreQuantX, class Batch = DenseBatch>
cudaError_t launch_gemv_int8_variant(const typename Batch::Args& args, cudaStream_t stream) {
  const GemvArgs& a = Batch::base(args);
  const int64_t n_tiles = (a.rows + kInt8Rows - 1) / kInt8Rows;
  const auto smem = static_cast<int>(kPreQuantX ? Int8Geometry<D>::kStageBytes
                                                : gemv_int8_smem<D>(gemv_int8_x_blocks<D>(a.blocks_per_row), a.n_tokens));
  auto* const kernel = gemv_int8_kernel<D, NT, kPreQuantX, Batch>;
  cudaError_t status = cudaSuccess;
  if (smem > 48 * 1024) {
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (status != cudaSuccess) return status;
  }
  int device = 0, sms = 0, per_sm = 0;
  if ((status = cudaGetDevice(&device)) != cudaSuccess) return status;
  if ((status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return status;
  status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvWarps * 32, smem);
  if (status != cudaSuccess) return status;
  const int64_t resident = int64_t{sms} * (per_sm < 1 ? 1 : per_sm) / Batch::concurrent_matrices(args);
  const int64_t grid = n_tiles < resident ? n_tiles : (resident < 1 ? 1 : resident);
  return launch_after_prior(kernel, Batch::grid(static_cast<unsigned>(grid), args), dim3(kGemvWarps * 32),
                            static_cast<size_t>(smem), stream, a, n_tiles, Batch::extra(args));
}

template <class D, int NT, class Batch = DenseBatch>
cudaError_t launch_gemv_int8(const typename Batch::Args& args, cudaStream_t stream) {
  if constexpr (Int8Traits<D>::kPreQuantX && std::is_same_v<Batch, DenseBatch>) {
    if (args.x_int8 != nullptr) return launch_gemv_int8_variant<D, NT, true>(args, stream);
  }
  return launch_gemv_int8_variant<D, NT, false, Batch>(args, stream);
}

}  // namespace ga::cuda::detail
