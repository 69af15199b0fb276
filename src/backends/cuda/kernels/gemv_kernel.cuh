// Quantized GEMV for decode: the kernel templates behind gemv() (gemv.h). Device code only; the
// launch side is gemv_impl.cuh, instantiated once per weight type in gemv_instances/.
//
// Design. Decode is bound by the bytes of W: for one token every weight is used once, so the kernel
// must keep enough bytes in flight per SM (Little: ~4.2 TB/s x ~1 us / 132 SMs = ~32 KB) and spend
// few instructions per weight (Q4 streams ~28 weights per SM clock at full bandwidth, against an
// issue rate of 128 thread-instructions per clock).
//  * Work split: a CTA of kGemvWarps warps owns R rows; its warps split the row's columns (warp w
//    takes segments w, w + W, ...) and meet in a shared-memory reduction at the end. The K-split
//    gives a 4096-row matrix 4 x 1024 warps instead of 1024, so every SM has 20-30 warps.
//  * Quant types (gemv_staged_kernel): a segment of each of the R rows is copied raw into a per-warp
//    shared-memory stage with cp.async (16-byte chunks, lane k takes chunk k, fully coalesced; blocks
//    of 18, 22, 34 or 210 bytes are not 16-byte aligned, so lanes then read their block fields from
//    the stage at any byte offset). Stages form a ring of kStages per warp: segments j+1 .. j+kStages-1
//    are in flight while segment j is decoded. Only the <= 15 bytes shared with the neighbouring
//    segment are read twice (from L2).
//  * F32/F16/BF16 rows that are 16-byte aligned (gemv_direct_kernel): no staging; each lane loads
//    U x R chunks with ld.global.nc.L1::no_allocate.v4 before using any, and decodes from registers.
//  * Decode: quant codes are not converted to float; decode_int gives each code as the subnormal
//    float with the code's bit pattern (one PRMT), multiplied by x * 2^80 in an FMA that keeps
//    subnormals (weight_decode.cuh explains the scaling), so a weight costs a PRMT and an FFMA; the
//    block's bias and min are applied once per scale group as offset * sum(x).
//  * Activations stay float32 (parity with the CPU reference, no requantization) and are read as
//    float4 through L1, where x (16-44 KB) stays resident while W bypasses L1; a lane applies the
//    same x registers to all R rows, so L1 traffic for x is 4/R bytes per weight.
//  * Several tokens (NT 2..8): the decoded weights of the R rows stay in registers and are applied
//    to each token's x, so W is still read once per call.
// Template parameters: the decoder D (weight_decode.cuh), the token-count bound NT (1, 2, 4 or 8;
// runtime n_tokens <= NT is masked with uniform branches) and a config (rows, chunks, stages).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/gemv_ptx.cuh"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/weight_decode.cuh"

namespace ga::cuda::detail {

inline constexpr int kGemvWarps = 4;  // warps per CTA; they split the columns of the CTA's rows
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
  bool split_rows;  // WeightLayout::kSplitRows: codes then scales per row (weight_layout.h, gemv_split.cuh)
  const void* x_int8;  // GemvParams::x_int8: x pre-quantized (x_int8.cuh layout) or null
  const void* x_e4m3x2;  // GemvParams::x_e4m3x2: x rounded to two E4M3 digits (gemv.h layout) or null
};

// How a CTA finds its matrix and its tokens: a compile-time policy of the kernels (gemv_staged_kernel,
// gemv_direct_kernel, gemv_int8_kernel). DenseBatch is the plain GEMV: the launch's one matrix, token t's x at
// x + t * ldx and its y at y + t * ldy, a 1-D grid. The grouped expert GEMV (moe_gemv_impl.cuh, ExpertBatch)
// points each CTA at one routed expert's matrix and the rows of the pairs routed to it. A policy gives
//   kDense                  the plain GEMV: the kernels read their GemvArgs parameter itself,
//   Args                    what the host launches with: base(args) the GemvArgs parameter (the shape of one
//                           matrix), extra(args) the Extra parameter (the policy's own fields),
//   Cta<NT>::bind(g, extra) (not kDense) false when the CTA has no work: it returns before any load; else
//   Cta<NT>::a              the GemvArgs of the CTA's matrix and tokens (a.n_tokens <= NT),
//   Cta<NT>::x(a, t), y(a, t)  element offsets of token t's x and y rows from a.x / a.y (x: t a compile-time
//                           index after unrolling; x_any(a, t): any t, for loops that are not unrolled),
//   grid(blocks, args), concurrent_matrices(args), routing(args)  the host side: the grid, the matrices that
//                           share the device at once (the persistent int8 grid), the shape the routing limits see.
// The kernels bind `const GemvArgs& a = kDense ? args : cta.a`: the plain GEMV's PTX is then identical to
// the code before the policy existed (checked; a reference returned by a function, or the body moved into
// an inlined device function, changed the int8 kernel's loops).
struct DenseBatch {
  static constexpr bool kDense = true;
  using Args = GemvArgs;
  struct Extra {};
  template <int NT>
  struct Cta {
    GemvArgs a;  // never set: the kernels read the parameter itself
    __device__ __forceinline__ int64_t x(const GemvArgs& a, int t) const { return t * a.ldx; }
    __device__ __forceinline__ int64_t x_any(const GemvArgs& a, int t) const { return t * a.ldx; }
    __device__ __forceinline__ int64_t y(const GemvArgs& a, int t) const { return t * a.ldy; }
  };
  static const GemvArgs& base(const GemvArgs& a) { return a; }
  static Extra extra(const GemvArgs&) { return {}; }
  static dim3 grid(unsigned blocks, const GemvArgs&) { return dim3(blocks); }
  static int64_t concurrent_matrices(const GemvArgs&) { return 1; }
  static GemvArgs routing(const GemvArgs& a) { return a; }
};

// Tunables of the staged kernel: rows per CTA, 16-byte chunks per lane and row in a stage, ring depth.
template <int Rows, int ChunksPerLane, int Stages>
struct StagedConfig {
  static constexpr int kRows = Rows;
  static constexpr int kChunksPerLane = ChunksPerLane;
  static constexpr int kStages = Stages;
};

// Tunables of the direct kernel: rows per CTA, chunk loads per lane and row issued before any use.
template <int Rows, int Unroll>
struct DirectConfig {
  static constexpr int kRows = Rows;
  static constexpr int kUnroll = Unroll;
};

// Segment geometry: a segment is kIters iterations of (32 / kLanesPerBlock) blocks and must fit a
// stage of CPL * 32 chunks with up to 15 bytes of misalignment.
template <class D, int CPL>
struct GemvGeometry {
  static constexpr int kBlocksPerIter = 32 / D::kLanesPerBlock;
  static constexpr int kIterBytes = kBlocksPerIter * D::kBlockBytes;
  static constexpr int kStageBytes = CPL * 32 * kChunkBytes;
  static constexpr int kStageChunks = CPL * 32 + 1;  // +1: load_u32_any may read 3 bytes past the last used byte
  static constexpr int kIters = (kStageBytes - kChunkBytes) / kIterBytes;
  static constexpr int kBlocksPerSeg = kIters * kBlocksPerIter;
  static constexpr int kSegBytes = kBlocksPerSeg * D::kBlockBytes;
  static_assert(kIters >= 1, "a segment must hold one iteration");
  static_assert(kSegBytes + kChunkBytes - 1 <= kStageBytes, "segment + misalignment must fit the stage");
  static_assert(D::kElems % 4 == 0 && (D::kElems / 4) % D::kGroups == 0, "runs of 4 weights, whole runs per group");
};

template <class D, class Cfg>
__host__ __device__ constexpr int64_t gemv_stage_bytes() {
  return int64_t{kGemvWarps} * Cfg::kStages * Cfg::kRows * GemvGeometry<D, Cfg::kChunksPerLane>::kStageChunks *
         kChunkBytes;
}

// Starts the copies of segment `seg` of the R rows into `stage` ([R][kStageChunks] chunks).
template <class D, class Cfg>
__device__ __forceinline__ void gemv_issue_segment(const GemvArgs& a, const uint8_t* const (&row_ptr)[Cfg::kRows],
                                                   int64_t seg, int lane, uint4* stage) {
  using G = GemvGeometry<D, Cfg::kChunksPerLane>;
  const int64_t start = seg * G::kSegBytes;
  const int bytes = static_cast<int>(min(static_cast<int64_t>(G::kSegBytes), a.row_bytes - start));
#pragma unroll
  for (int i = 0; i < Cfg::kRows; ++i) {
    const uint8_t* first = row_ptr[i] + start;
    const int shift = static_cast<int>(reinterpret_cast<uintptr_t>(first) & 15);
    const uint8_t* base = first - shift;
    const int n_chunks = (shift + bytes + kChunkBytes - 1) / kChunkBytes;
#pragma unroll
    for (int c = 0; c < Cfg::kChunksPerLane; ++c) {
      const int chunk = lane + 32 * c;
      if (chunk < n_chunks) {
        const uint8_t* src = base + kChunkBytes * chunk;
        const int src_bytes = static_cast<int>(min(static_cast<int64_t>(kChunkBytes), a.w_end - src));
        copy_chunk_async(stage + i * G::kStageChunks + chunk, src, src_bytes);
      }
    }
  }
}

// This lane's activations for one block (float4 per run) and their sums per scale group (only where the
// weights have an offset to multiply them: int_decode_has_offset); for the integer decode x is scaled by
// kIntXScale (exact, a power of two) after the sums are taken.
template <class D>
__device__ __forceinline__ void gemv_load_x(const float* x_block, int part, float* xv, float* x_sum) {
  constexpr int kRuns = D::kElems / 4;
  constexpr int kRunsPerGroup = kRuns / D::kGroups;
#pragma unroll
  for (int r = 0; r < kRuns; ++r) {
    const float4 v = load_activations_4(x_block + D::run_offset(part, r));
    xv[4 * r] = v.x;
    xv[4 * r + 1] = v.y;
    xv[4 * r + 2] = v.z;
    xv[4 * r + 3] = v.w;
  }
  if constexpr (D::kIntDecode) {
    if constexpr (int_decode_has_offset<D>()) {
#pragma unroll
      for (int g = 0; g < D::kGroups; ++g) {
        float s = 0.0f;
#pragma unroll
        for (int e = g * kRunsPerGroup * 4; e < (g + 1) * kRunsPerGroup * 4; ++e) s += xv[e];
        x_sum[g] = s;
      }
    }
#pragma unroll
    for (int e = 0; e < D::kElems; ++e) xv[e] *= kIntXScale;
  }
}

// The lane's part of one block staged at byte offset `blk` of the dynamic shared memory: q, scale,
// offset from decode_int (quants, LDS with 32-bit addresses) or decode (float types' unaligned rows).
template <class D>
__device__ __forceinline__ void gemv_decode(uint32_t blk, int part, float* q, float* scale, float* offset) {
  if constexpr (D::kIntDecode) {
    D::template decode_int<StageBytes>(blk, part, q, scale, offset);
  } else {
    D::decode(StageBytes::base() + blk, part, q, scale, offset);
  }
}

// acc + sum over groups of (scale * sum(q x) + offset * sum(x)) for one lane's part of a block.
template <class D>
__device__ __forceinline__ float gemv_block_dot(const float* q, const float* scale, const float* offset,
                                                const float* xv, const float* x_sum, float acc) {
  constexpr int kPerGroup = D::kElems / D::kGroups;
#pragma unroll
  for (int g = 0; g < D::kGroups; ++g) {
    float dot = 0.0f;
    if constexpr (D::kIntDecode) {
#pragma unroll
      for (int e = g * kPerGroup; e < (g + 1) * kPerGroup; ++e) dot = fma_keep_subnormal(q[e], xv[e], dot);
      if constexpr (int_decode_has_offset<D>()) {
        acc = fmaf(scale[g], dot, fmaf(offset[g], x_sum[g], acc));
      } else {
        acc = fmaf(scale[g], dot, acc);  // FP4: signed code floats, no offset
      }
    } else {
      static_assert(!D::kHasMin, "float decoders have no min");
#pragma unroll
      for (int e = g * kPerGroup; e < (g + 1) * kPerGroup; ++e) dot = fmaf(q[e], xv[e], dot);
      if constexpr (D::kUnitScale) {
        acc += dot;
      } else {
        acc = fmaf(scale[g], dot, acc);  // F8_B128: the E4M3 values times the block's scale
      }
    }
  }
  return acc;
}

// The CTA's R rows from row0. Rows past the end are clamped to the last row: read and decoded like the
// others (no per-row branch, so the compiler interleaves the R rows) and never stored.
template <int R>
__device__ __forceinline__ void gemv_clamped_rows(const GemvArgs& a, int64_t row0, const uint8_t* (&row_ptr)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) row_ptr[i] = a.w + min(row0 + i, a.rows - 1) * a.row_stride;
}

template <int R, int NT>
__device__ __forceinline__ void gemv_zero_acc(float (&acc)[R][NT]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[i][t] = 0.0f;
  }
}

// Sums acc over the CTA's warps and writes y (rows row0.., tokens < n_tokens; token t's row at cta.y(a, t)).
template <int R, int NT, class Cta = DenseBatch::Cta<NT>>
__device__ __forceinline__ void gemv_reduce_store(const GemvArgs& a, int64_t row0, float (&acc)[R][NT],
                                                  float (&partial)[kGemvWarps][R][NT], const Cta& cta = Cta{}) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  pdl_wait_prior_grid();  // y may still be read by the kernel before (pdl.cuh); returns at once if waited
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float sum = warp_sum(acc[i][t]);
      if (lane == 0) partial[warp][i][t] = sum;
    }
  }
  __syncthreads();
  if (threadIdx.x < R * NT) {
    const int i = static_cast<int>(threadIdx.x) / NT;
    const int t = static_cast<int>(threadIdx.x) % NT;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) sum += partial[w][i][t];
    if (row0 + i < a.rows && t < a.n_tokens) a.y[cta.y(a, t) + row0 + i] = sum;
  }
}

template <class D, int NT, class Cfg, class Batch = DenseBatch>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_staged_kernel(const GemvArgs args, const typename Batch::Extra extra) {
  using G = GemvGeometry<D, Cfg::kChunksPerLane>;
  constexpr int R = Cfg::kRows;
  constexpr int P = Cfg::kStages;
  constexpr int kE = D::kElems;
  constexpr int kG = D::kGroups;
  extern __shared__ uint4 gemv_dynamic_smem[];  // [kGemvWarps][P][R][kStageChunks] (StageBytes reads it)
  __shared__ float partial[kGemvWarps][R][NT];

  pdl_allow_dependents();
  typename Batch::template Cta<NT> cta;
  if constexpr (!Batch::kDense) {
    if (!cta.bind(args, extra)) return;  // no work for this CTA
  }
  const GemvArgs& a = Batch::kDense ? args : cta.a;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  constexpr int kStageSetChunks = R * G::kStageChunks;  // one stage of the R rows
  uint4* my_stages = gemv_dynamic_smem + warp * P * kStageSetChunks;
  const uint32_t my_stages_offset = static_cast<uint32_t>(warp * P * kStageSetChunks * kChunkBytes);

  const uint8_t* row_ptr[R];
  gemv_clamped_rows(a, row0, row_ptr);

  const int part = lane % D::kLanesPerBlock;
  const int64_t n_seg = (a.blocks_per_row + G::kBlocksPerSeg - 1) / G::kBlocksPerSeg;
  // this warp's segments are warp + W j, j < n_mine (int: a row has at most 2^25 blocks)
  const int n_mine = n_seg > warp ? static_cast<int>((n_seg - warp + kGemvWarps - 1) / kGemvWarps) : 0;

  float acc[R][NT];
  gemv_zero_acc(acc);

  // prologue: the first P-1 segments in flight (one commit group each, empty ones included, so that
  // copy_wait<P-1> below always means "segment j has landed")
#pragma unroll
  for (int s = 0; s < P - 1; ++s) {
    if (s < n_mine) {
      gemv_issue_segment<D, Cfg>(a, row_ptr, warp + int64_t{kGemvWarps} * s, lane, my_stages + s * kStageSetChunks);
    }
    copy_commit();
  }
  pdl_wait_prior_grid();  // weights are immutable: their first segments fly before x is ready (pdl.cuh)
  for (int j = 0; j < n_mine; ++j) {
    const int ahead = j + P - 1;  // into the stage decoded in iteration j-1 (freed by its closing __syncwarp)
    if (ahead < n_mine) {
      gemv_issue_segment<D, Cfg>(a, row_ptr, warp + int64_t{kGemvWarps} * ahead, lane,
                                 my_stages + (ahead % P) * kStageSetChunks);
    }
    copy_commit();
    copy_wait<P - 1>();
    __syncwarp();

    const int64_t seg = warp + int64_t{kGemvWarps} * j;
    const int64_t start = seg * G::kSegBytes;
    const int n_blocks =
        static_cast<int>(min(static_cast<int64_t>(G::kBlocksPerSeg), a.blocks_per_row - seg * G::kBlocksPerSeg));
    // byte offset (dynamic shared memory) of this segment's first block in each row's stage
    uint32_t row_stage[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const auto shift = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(row_ptr[i] + start) & 15);
      const int chunk = (j % P) * kStageSetChunks + i * G::kStageChunks;
      row_stage[i] = my_stages_offset + static_cast<uint32_t>(chunk * kChunkBytes) + shift;
    }

#pragma unroll
    for (int it = 0; it < G::kIters; ++it) {
      const int blk = it * G::kBlocksPerIter + lane / D::kLanesPerBlock;
      if (blk >= n_blocks) continue;
      const float* x_block = a.x + (seg * G::kBlocksPerSeg + blk) * D::kBlockElems;
      if constexpr (NT == 1) {
        // one token: x first, then each row is decoded and consumed at once (few live registers)
        float xv[kE], x_sum[kG];
        gemv_load_x<D>(x_block + cta.x(a, 0), part, xv, x_sum);
#pragma unroll
        for (int i = 0; i < R; ++i) {
          float q[kE], scale[kG], offset[kG];
          gemv_decode<D>(row_stage[i] + blk * D::kBlockBytes, part, q, scale, offset);
          acc[i][0] = gemv_block_dot<D>(q, scale, offset, xv, x_sum, acc[i][0]);
        }
      } else {
        // several tokens: the decoded weights of all R rows stay in registers across the tokens
        float q[R][kE], scale[R][kG], offset[R][kG];
#pragma unroll
        for (int i = 0; i < R; ++i) {
          gemv_decode<D>(row_stage[i] + blk * D::kBlockBytes, part, q[i], scale[i], offset[i]);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= a.n_tokens) break;
          float xv[kE], x_sum[kG];
          gemv_load_x<D>(x_block + cta.x(a, t), part, xv, x_sum);
#pragma unroll
          for (int i = 0; i < R; ++i) {
            acc[i][t] = gemv_block_dot<D>(q[i], scale[i], offset[i], xv, x_sum, acc[i][t]);
          }
        }
      }
    }
    __syncwarp();  // the stage may be refilled by the next iteration's copies
  }
  copy_wait<0>();  // no copy may outlive the CTA's shared memory (all groups past n_mine are empty)
  gemv_reduce_store<R, NT>(a, row0, acc, partial, cta);
}

// F32/F16/BF16 with 16-byte aligned rows: a "block" is one 16-byte chunk (blocks_per_row chunks per
// row). Warp w takes chunk groups w, w + W, ... of 32 * U chunks; lane l loads chunk 32u + l of the
// group for all R rows (U x R loads in flight) before decoding any.
template <class D, int NT, class Cfg, class Batch = DenseBatch>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_direct_kernel(const GemvArgs args, const typename Batch::Extra extra) {
  constexpr int R = Cfg::kRows;
  constexpr int U = Cfg::kUnroll;
  constexpr int kE = D::kElems;
  static_assert(D::kBlockBytes == kChunkBytes && D::kUnitScale, "direct path: float types, a chunk per block");
  __shared__ float partial[kGemvWarps][R][NT];
  pdl_allow_dependents();
  typename Batch::template Cta<NT> cta;
  if constexpr (!Batch::kDense) {
    if (!cta.bind(args, extra)) return;  // no work for this CTA
  }
  const GemvArgs& a = Batch::kDense ? args : cta.a;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  const uint8_t* row_ptr[R];
  gemv_clamped_rows(a, row0, row_ptr);

  float acc[R][NT];
  gemv_zero_acc(acc);

  const int64_t n_chunks = a.blocks_per_row;
  for (int64_t g0 = int64_t{32} * U * warp; g0 < n_chunks; g0 += int64_t{32} * U * kGemvWarps) {
    uint4 c[R][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = g0 + 32 * u + lane;
#pragma unroll
      for (int i = 0; i < R; ++i) c[i][u] = idx < n_chunks ? load_stream_16(row_ptr[i] + kChunkBytes * idx) : uint4{};
    }
    if (g0 == int64_t{32} * U * warp) pdl_wait_prior_grid();  // the first weights fly before x is ready
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = g0 + 32 * u + lane;
      if (idx >= n_chunks) continue;
      float q[R][kE];
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const uint32_t words[4] = {c[i][u].x, c[i][u].y, c[i][u].z, c[i][u].w};
        D::decode_words(words, q[i]);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= a.n_tokens) break;
        float xv[kE], x_sum[1];
        gemv_load_x<D>(a.x + cta.x(a, t) + idx * kE, 0, xv, x_sum);
#pragma unroll
        for (int i = 0; i < R; ++i) {
          float dot = 0.0f;
#pragma unroll
          for (int e = 0; e < kE; ++e) dot = fmaf(q[i][e], xv[e], dot);
          acc[i][t] += dot;
        }
      }
    }
  }
  gemv_reduce_store<R, NT>(a, row0, acc, partial, cta);
}

}  // namespace ga::cuda::detail
