// Quantized GEMV for decode: the kernel template behind gemv() (gemv.h). Device code only; the
// launch templates are in gemv_impl.cuh, instantiated once per weight type in gemv_instances/
// (one .cu each, so the 5-arch CI build compiles them in parallel).
//
// Design. Decode is bound by the bytes of the weight matrix: for one token every weight is used
// once, so the kernel must stream W at the memory's bandwidth and hide everything else.
//  * Work split: a warp owns R consecutive rows (R = 4 for quantized types, 2 for F32/F16/BF16)
//    and walks them left to right in segments of about 1 KB per row; 4 warps per block, no
//    cross-warp reduction. Neighbouring warps read neighbouring rows, so DRAM pages stay open.
//  * Loads: each segment of each row is fetched as aligned 16-byte chunks, chunk k by lane k % 32
//    (ld.global.nc.L1::no_allocate.v4): one fully coalesced 512-byte request per warp instruction,
//    2-3 of them per row and R rows in flight per lane before the first use. Blocks of 18, 22 or 210
//    bytes are not 16-byte aligned, so the chunks are staged raw in shared memory and the lanes
//    decode their blocks from there (load_u32_any); the only over-read is the up-to-15 bytes
//    shared with the neighbouring segment, which is in L2 already, so every weight byte comes from
//    DRAM once. The next segment's loads are issued before the current one is decoded (register
//    double buffering), so memory latency overlaps the decode.
//  * Activations: x stays float32 (parity with the CPU reference, no requantization) and is read
//    with float4 __ldg loads through L1, where it stays resident (16-44 KB) while W bypasses L1.
//    A lane's decoded weights are multiplied with the same x registers for all R rows, so L1
//    traffic for x is 4/R bytes per weight, below the 2 x (bytes per weight) of the staging.
//  * Math: weights are decoded as small integers q (magic-number conversion, no I2F), the dot is
//    scale * sum(q x) + min * sum(x) per scale group, accumulated in float; a final warp-shuffle
//    reduction gives each output. For n_tokens 2..8 the decoded weights of R rows are kept in
//    registers and applied to each token's x, so W is still read once per call.
// Expected: the kernel moves W (+ x + y, negligible) once, so for the large Llama-7B matrices
// (>= 9 MB) it should reach 75-90% of the device-to-device copy bandwidth on H100/H200 for every
// type; the 4096x4096 Q4 matrices (9.4 MB, ~3 us) lose ~10-20% to launch ramp-up and tail, which
// only a persistent fused decode kernel can hide. The shared-memory round trip costs ~2 bytes of
// SMEM traffic per weight byte, well under the SM's SMEM bandwidth at HBM speed.
//
// Template parameters: the decoder D (weight_decode.cuh), rows per warp R and the token count
// bound NT (1, 2, 4 or 8; runtime n_tokens <= NT is masked with warp-uniform branches).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/weight_decode.cuh"

namespace ga::cuda::detail {

inline constexpr int kGemvWarps = 4;  // warps per block
inline constexpr int kChunkBytes = 16;

struct GemvArgs {
  const uint8_t* w;
  const uint8_t* w_end;  // one past the last byte of the last row: no chunk is read beyond it
  int64_t rows;
  int64_t row_stride;
  int64_t row_bytes;
  int64_t blocks_per_row;
  const float* x;
  int64_t ldx;
  float* y;
  int64_t ldy;
  int n_tokens;
};

// Segment geometry of decoder D: a segment is kIters iterations of (32 / kLanesPerBlock) blocks and
// must fit the staging buffer of kChunksPerLane * 32 chunks with up to 15 bytes of misalignment.
template <class D>
struct GemvGeometry {
  static constexpr int kBlocksPerIter = 32 / D::kLanesPerBlock;
  static constexpr int kIterBytes = kBlocksPerIter * D::kBlockBytes;
  static constexpr int kStageBytes = D::kChunksPerLane * 32 * kChunkBytes;
  static constexpr int kIters = (kStageBytes - kChunkBytes) / kIterBytes;
  static constexpr int kBlocksPerSeg = kIters * kBlocksPerIter;
  static constexpr int kSegBytes = kBlocksPerSeg * D::kBlockBytes;
  static constexpr int kRuns = D::kElems / 4;
  static_assert(kIters >= 1, "a segment must hold one iteration");
  static_assert(kSegBytes + kChunkBytes - 1 <= kStageBytes, "segment + misalignment must fit the stage");
  static_assert(D::kElems % 4 == 0 && kRuns % D::kGroups == 0, "runs of 4 weights, whole runs per group");
};

// Loads this lane's chunks of segment `seg` of R rows into registers (not yet to shared memory).
template <class D, int R>
__device__ __forceinline__ void gemv_fetch(const GemvArgs& a, const uint8_t* const (&row_ptr)[R], int seg, int lane,
                                           uint4 (&chunks)[R][D::kChunksPerLane]) {
  using G = GemvGeometry<D>;
  const int64_t start = static_cast<int64_t>(seg) * G::kSegBytes;
  const int64_t bytes = min(static_cast<int64_t>(G::kSegBytes), a.row_bytes - start);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (row_ptr[i] == nullptr) continue;
    const uint8_t* first = row_ptr[i] + start;
    const uint8_t* base = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(first) & ~uintptr_t{15});
    const int n_chunks = static_cast<int>((first - base + bytes + kChunkBytes - 1) / kChunkBytes);
#pragma unroll
    for (int c = 0; c < D::kChunksPerLane; ++c) {
      const int chunk = lane + 32 * c;
      if (chunk < n_chunks) chunks[i][c] = load_chunk_16(base + kChunkBytes * chunk, a.w_end);
    }
  }
}

// The staged bytes of block `blk` of the current segment of one row.
template <class D>
__device__ __forceinline__ const uint8_t* staged_block(const uint4* row_stage, int shift, int blk) {
  return reinterpret_cast<const uint8_t*>(row_stage) + shift + blk * D::kBlockBytes;
}

// This lane's activations for one block (float4 per run) and, for types with a min, their sums per group.
template <class D>
__device__ __forceinline__ void gemv_load_x(const float* x_block, int part, float* xv, float* x_sum) {
  constexpr int kRuns = D::kElems / 4;
  constexpr int kRunsPerGroup = kRuns / D::kGroups;
#pragma unroll
  for (int r = 0; r < kRuns; ++r) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(x_block + D::run_offset(part, r)));
    xv[4 * r] = v.x;
    xv[4 * r + 1] = v.y;
    xv[4 * r + 2] = v.z;
    xv[4 * r + 3] = v.w;
  }
  if constexpr (D::kHasMin) {
#pragma unroll
    for (int g = 0; g < D::kGroups; ++g) {
      x_sum[g] = 0.0f;
#pragma unroll
      for (int e = g * kRunsPerGroup * 4; e < (g + 1) * kRunsPerGroup * 4; ++e) x_sum[g] += xv[e];
    }
  }
}

// acc + sum over groups of (scale * sum(q x) + min * sum(x)) for one lane's part of a block.
template <class D>
__device__ __forceinline__ float gemv_block_dot(const float* q, const float* scale, const float* min_v,
                                                const float* xv, const float* x_sum, float acc) {
  constexpr int kPerGroup = D::kElems / D::kGroups;
#pragma unroll
  for (int g = 0; g < D::kGroups; ++g) {
    float dot = 0.0f;
#pragma unroll
    for (int e = g * kPerGroup; e < (g + 1) * kPerGroup; ++e) dot = fmaf(q[e], xv[e], dot);
    if constexpr (D::kUnitScale) {
      acc += dot;
    } else if constexpr (D::kHasMin) {
      acc = fmaf(scale[g], dot, fmaf(min_v[g], x_sum[g], acc));
    } else {
      acc = fmaf(scale[g], dot, acc);
    }
  }
  return acc;
}

template <class D, int R, int NT>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const GemvArgs a) {
  using G = GemvGeometry<D>;
  constexpr int kE = D::kElems;
  constexpr int kG = D::kGroups;
  constexpr int kStageChunks = D::kChunksPerLane * 32 + 1;  // +1: load_u32_any may read 4 bytes past the end
  __shared__ uint4 stage[kGemvWarps][R][kStageChunks];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp) * R;
  if (row0 >= a.rows) return;  // whole warp: no barrier below spans warps

  const uint8_t* row_ptr[R];
#pragma unroll
  for (int i = 0; i < R; ++i) row_ptr[i] = row0 + i < a.rows ? a.w + (row0 + i) * a.row_stride : nullptr;

  const int part = lane % D::kLanesPerBlock;
  const int64_t n_seg = (a.blocks_per_row + G::kBlocksPerSeg - 1) / G::kBlocksPerSeg;

  float acc[R][NT];
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[i][t] = 0.0f;
  }

  uint4 chunks[R][D::kChunksPerLane];
  gemv_fetch<D, R>(a, row_ptr, 0, lane, chunks);
  for (int seg = 0; seg < n_seg; ++seg) {
    const int64_t start = static_cast<int64_t>(seg) * G::kSegBytes;
    const int64_t blocks_left = a.blocks_per_row - static_cast<int64_t>(seg) * G::kBlocksPerSeg;
    const int n_blocks = static_cast<int>(min(static_cast<int64_t>(G::kBlocksPerSeg), blocks_left));
    __syncwarp();  // the previous segment's decode is done with the stage
#pragma unroll
    for (int i = 0; i < R; ++i) {
#pragma unroll
      for (int c = 0; c < D::kChunksPerLane; ++c) stage[warp][i][lane + 32 * c] = chunks[i][c];
    }
    __syncwarp();
    if (seg + 1 < n_seg) gemv_fetch<D, R>(a, row_ptr, seg + 1, lane, chunks);  // in flight during the decode

    // byte offset of this segment's first block inside each row's stage (the chunk misalignment)
    int shift[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      shift[i] = row_ptr[i] == nullptr ? 0 : static_cast<int>(reinterpret_cast<uintptr_t>(row_ptr[i] + start) & 15);
    }

    // not unrolled: the segment's global loads are already in flight; unrolling would only add registers
#pragma unroll 1
    for (int it = 0; it < G::kIters; ++it) {
      const int blk = it * G::kBlocksPerIter + lane / D::kLanesPerBlock;
      if (blk >= n_blocks) continue;
      const int64_t elem0 = (static_cast<int64_t>(seg) * G::kBlocksPerSeg + blk) * D::kBlockElems;

      if constexpr (NT == 1) {
        // one token: x first, then each row is decoded and consumed at once (few live registers)
        float xv[kE];
        float x_sum[kG];
        gemv_load_x<D>(a.x + elem0, part, xv, x_sum);
#pragma unroll
        for (int i = 0; i < R; ++i) {
          if (row_ptr[i] == nullptr) continue;
          float q[kE], scale[kG], min_v[kG];
          D::decode(staged_block<D>(stage[warp][i], shift[i], blk), part, q, scale, min_v);
          acc[i][0] = gemv_block_dot<D>(q, scale, min_v, xv, x_sum, acc[i][0]);
        }
      } else {
        // several tokens: the decoded weights of all R rows stay in registers across the tokens
        float q[R][kE], scale[R][kG], min_v[R][kG];
#pragma unroll
        for (int i = 0; i < R; ++i) {
          if (row_ptr[i] != nullptr) D::decode(staged_block<D>(stage[warp][i], shift[i], blk), part, q[i], scale[i], min_v[i]);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= a.n_tokens) break;
          float xv[kE];
          float x_sum[kG];
          gemv_load_x<D>(a.x + t * a.ldx + elem0, part, xv, x_sum);
#pragma unroll
          for (int i = 0; i < R; ++i) {
            if (row_ptr[i] != nullptr) acc[i][t] = gemv_block_dot<D>(q[i], scale[i], min_v[i], xv, x_sum, acc[i][t]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float sum = warp_sum(acc[i][t]);
      if (lane == 0 && row_ptr[i] != nullptr && t < a.n_tokens) a.y[t * a.ldy + row0 + i] = sum;
    }
  }
}

// Rows per warp: R for one token; for several, the decoded weights of all R rows stay live across
// the tokens, so R is cut to keep them near 32 registers (16 from 4 tokens on, where the
// accumulators grow; 4 rows of a classic type at 4 tokens spilled on sm_80..89), but at least 2 so
// each x load still serves two rows.
template <class D, int NT>
__host__ __device__ constexpr int gemv_rows_per_warp() {
  if constexpr (NT == 1) return D::kRows;
  constexpr int budget = (NT >= 4 ? 16 : 32) / D::kElems;
  constexpr int rows = budget < 2 ? 2 : budget;
  return rows < D::kRows ? rows : D::kRows;
}

}  // namespace ga::cuda::detail
