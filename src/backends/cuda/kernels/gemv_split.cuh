// GEMV over split rows (weight_layout.h): Q8_0 / Q4_0 matrices repacked at upload so that a row's
// codes are aligned 16-byte chunks followed by its fp16 scales. F8_B128 split rows have their own
// kernels (gemv_split_f8_diag.cuh, gemv_split_f8x.cuh, gemv_split_f8.cuh).
//
// Design: the F16 direct kernel's scheme (gemv_kernel.cuh), which streams at 72-100 % of the copy
// bandwidth, applied to codes. A CTA owns R rows; warp w takes chunk groups w, w + 4, ... of 32 * U
// chunks; lane l loads chunk 32u + l of the group for all R rows, and the chunk's scale (2 bytes,
// 32 lanes read 32 or 64 contiguous bytes), all U x R loads issued before any is used, with
// ld.global.nc.L1::no_allocate so that L1 keeps x. No shared-memory staging, no transpose, no x
// quantization prologue: the first loads leave at the kernel's first instructions.
// Decode as in the staged kernel: a code byte becomes the subnormal float with its bit pattern
// (one PRMT), multiplied by x * 2^80 in an FMA (exact product), the bias folded into
// -bias * d * sum(x) once per chunk; activations stay float32, so the results are the float path's
// (parity within 1e-5 of sum |w x|, no int8 rounding of x).
//
// Q8_0 takes a second kernel (gemv_split_int8_kernel): measured, the float decode above costs ~3
// instructions per weight byte and reached only 44-54 % of copy on the large matrices (below the GGUF
// int8 path). With x rounded to two int8 digits per block of 32 (gemv_int8.cuh's scheme and
// numerics: gemv_uses_int8_activations is true for it), a chunk of 16 codes is 8 DP4A against x
// words read from shared memory, no code conversion at all. x is quantized once per CTA (persistent
// grid over tiles of kSplitInt8Rows rows), the first tile's loads in flight meanwhile; or, when the caller
// passes x already quantized (GemvArgs::x_int8, written once per step by the kernel that produces x:
// swiglu's out_int8 or the quantize_x_int8 pre-pass), the kernel has no prologue at all and reads the x
// words straight from global memory through L1 (ld.global.nc: 72 bytes per 32 weights, the same for every
// CTA of an SM, so L1 hits after the first touch). That removes the per-CTA cost that grows with the row
// length and kept 4096x11008 (ffn_down) on the float kernel: 24.4 us at 46 % of copy. For one token
// each warp issues its next chunk group (of this tile, else of its next tile) before the DP4A of the
// current one, so two groups per warp are in flight (112 registers, 4 CTAs per SM).
//
// Launch: unlike the other GEMVs, these two kernels are launched in stream order, NOT with programmatic
// dependent launch (pdl.cuh), and read x with __ldg. Measured on the H200 (2026-11-22), 7B Q8_0
// tg128: PDL + coherent x loads 268 tok/s, stream
// order + __ldg 313, PDL + coherent loads + the prefetch above 312, stream order + __ldg + prefetch 315 (this
// code); capping the PDL grid at 4 CTAs per SM 255. An early-launched persistent grid of 4-5 CTAs per SM
// (57 K of 64 K registers) waits inside the SMs that the kernel before it still needs. Launched in order,
// no kernel writes x while these run (a later kernel launched early waits for this grid before it writes),
// so ld.global.nc is valid here. They still call pdl_allow_dependents() so the next kernel launches early.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/gemv_int8.cuh"
#include "backends/cuda/kernels/gemv_kernel.cuh"
#include "backends/cuda/kernels/gemv_ptx.cuh"
#include "backends/cuda/kernels/gemv_split_f8_diag.cuh"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/split_rows.cuh"

namespace ga::cuda::detail {

// Rows per CTA and chunk loads per lane and row in flight: 4 x 2 x 16 bytes per lane for one token
// (16 KB per CTA; a 4096-row matrix is 1024 CTAs, all resident at once); fewer rows for several
// tokens (acc[R][NT] registers).
template <int NT>
struct SplitConfig {
  static constexpr int kRows = NT == 1 ? 4 : 2;
  static constexpr int kUnroll = 2;
};

// A row's fp16 scale, streamed like the codes (bypassing L1).
__device__ __forceinline__ float load_scale_stream(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  unsigned short h;
  asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(h) : "l"(p));
#else
  const unsigned short h = *reinterpret_cast<const unsigned short*>(p);
#endif
  return __half2float(__ushort_as_half(h));
}

template <class D, int NT>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_split_kernel(const GemvArgs a) {
  using S = SplitRows<D>;
  constexpr int R = SplitConfig<NT>::kRows;
  constexpr int U = SplitConfig<NT>::kUnroll;
  constexpr int kW = S::kChunkWeights;
  constexpr int kChunksPerBlock = 32 / kW;
  __shared__ float partial[kGemvWarps][R][NT];
  pdl_allow_dependents();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  const uint8_t* row_ptr[R];
  gemv_clamped_rows(a, row0, row_ptr);
  const int64_t scales = split_scales_offset<D>(a.blocks_per_row);
  const int64_t n_chunks = a.blocks_per_row * kChunksPerBlock;

  float acc[R][NT];
  gemv_zero_acc(acc);

  for (int64_t g0 = int64_t{32} * U * warp; g0 < n_chunks; g0 += int64_t{32} * U * kGemvWarps) {
    uint4 c[R][U];
    float d[R][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = g0 + 32 * u + lane;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        if (idx < n_chunks) {
          c[i][u] = load_stream_16(row_ptr[i] + kChunkBytes * idx);
          d[i][u] = load_scale_stream(row_ptr[i] + scales + 2 * (idx / kChunksPerBlock));
        } else {
          c[i][u] = uint4{};
          d[i][u] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = g0 + 32 * u + lane;
      if (idx >= n_chunks) continue;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= a.n_tokens) break;
        const float* xc = a.x + t * a.ldx + idx * kW;
        float xv[kW];
        float x_sum = 0.0f;
#pragma unroll
        for (int r = 0; r < kW / 4; ++r) {
          const float4 v = __ldg(reinterpret_cast<const float4*>(xc + 4 * r));  // launched in order: read-only
          xv[4 * r] = v.x;
          xv[4 * r + 1] = v.y;
          xv[4 * r + 2] = v.z;
          xv[4 * r + 3] = v.w;
        }
#pragma unroll
        for (int e = 0; e < kW; ++e) {
          x_sum += xv[e];
          xv[e] *= kIntXScale;
        }
#pragma unroll
        for (int i = 0; i < R; ++i) {
          uint32_t words[kW / 4];
          S::chunk_codes(c[i][u], words);
          float dot = 0.0f;
#pragma unroll
          for (int j = 0; j < kW / 4; ++j) {
            float q[4];
            bytes_to_code_floats(words[j], q);
#pragma unroll
            for (int k = 0; k < 4; ++k) dot = fma_keep_subnormal(q[k], xv[4 * j + k], dot);
          }
          // w = d (code - bias): d * 2^69 * dot(code * 2^-149, x * 2^80) - bias * d * sum(x)
          acc[i][t] = fmaf(d[i][u] * kIntDotUnscale, dot, fmaf(-S::kBias * d[i][u], x_sum, acc[i][t]));
        }
      }
    }
  }
  gemv_reduce_store<R, NT>(a, row0, acc, partial);
}

inline constexpr int kSplitInt8Rows = 4;
inline constexpr int kSplitInt8Unroll = 2;
inline constexpr int64_t kSplitInt8MaxSmem = 48 * 1024;  // quantized x of all tokens; beyond it the float kernel

__host__ __device__ constexpr int64_t split_int8_smem(int64_t blocks_per_row, int n_tokens) {
  return n_tokens * blocks_per_row * (kXBlockBytes + 8);
}

// Whether gemv() reads these split rows with int8 activations: Q8_0, rows of at most 8192 weights
// (longer rows make every CTA's x prologue longer: 4096x11008 measured 28.1 us int8 vs 25.9 us float,
// while 4096 columns measured 10.5 vs 11.1 us and 19.0 vs 24.5 us for 11008 rows), quantized x within
// the shared-memory cap (H200 runs of 2026-11-22; their logs are in git history under docs/results/).
// With x pre-quantized (a.x_int8) there is no prologue and no shared copy of x: every shape is eligible.
inline constexpr int64_t kSplitInt8MaxBlocks = 256;
template <class D>
bool gemv_split_int8_eligible(const GemvArgs& a) {
  if (D::kType != DType::Q8_0 || !a.split_rows) return false;
  return a.x_int8 != nullptr || (a.blocks_per_row <= kSplitInt8MaxBlocks &&
                                 split_int8_smem(a.blocks_per_row, a.n_tokens) <= kSplitInt8MaxSmem);
}

// Issues the U x R chunk loads (codes and scales) of chunk group g0 of the tile's rows.
template <int R, int U>
__device__ __forceinline__ void split_int8_load(const GemvArgs& a, int64_t row0, int64_t g0, int64_t n_chunks,
                                                int64_t scales, int lane, uint4 (&c)[R][U], float (&d)[R][U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t idx = g0 + 32 * u + lane;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const uint8_t* row = a.w + min(row0 + i, a.rows - 1) * a.row_stride;  // clamped: read, never stored
      if (idx < n_chunks) {
        c[i][u] = load_stream_16(row + kChunkBytes * idx);
        d[i][u] = load_scale_stream(row + scales + 2 * (idx / 2));
      } else {
        c[i][u] = uint4{};
        d[i][u] = 0.0f;
      }
    }
  }
}

// The group just loaded (c, d) becomes the one computed (cur, dcur), freeing c and d for the next loads.
template <int R, int U>
__device__ __forceinline__ void split_int8_take(const uint4 (&c)[R][U], const float (&d)[R][U], uint4 (&cur)[R][U],
                                                float (&dcur)[R][U]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      cur[i][u] = c[i][u];
      dcur[i][u] = d[i][u];
    }
  }
}

// kPreQuantX: x comes quantized in a.x_int8 (x_int8.cuh layout), read from global memory; else each CTA
// quantizes a.x into shared memory first.
template <int NT, bool kPreQuantX>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_split_int8_kernel(const GemvArgs a, int64_t n_tiles) {
  // one token: the next group's loads leave before this group's DP4A (two groups in flight per warp,
  // 112 registers, 4 CTAs per SM); several tokens keep one group (acc[R][NT] needs the registers)
  constexpr bool kPrefetch = NT == 1;
  constexpr int R = kSplitInt8Rows;
  constexpr int U = kSplitInt8Unroll;
  extern __shared__ uint4 gemv_dynamic_smem[];
  __shared__ float partial[kGemvWarps][R][NT];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t nb = a.blocks_per_row;
  const int64_t n_chunks = 2 * nb;  // 16 codes per chunk
  const int64_t scales = split_scales_offset<DecodeQ8_0>(nb);
  // [n_tokens][nb][64] int8, then [n_tokens][nb] float2 (d_x, sum): in shared memory, or the caller's buffer
  int8_t* const smem_qx = reinterpret_cast<int8_t*>(gemv_dynamic_smem);
  int8_t* const qx = kPreQuantX ? static_cast<int8_t*>(const_cast<void*>(a.x_int8)) : smem_qx;
  auto* ds = reinterpret_cast<float2*>(qx + static_cast<int64_t>(a.n_tokens) * nb * kXBlockBytes);

  pdl_allow_dependents();
  uint4 c[R][U];
  float d[R][U];
  const int64_t g_first = int64_t{32} * U * warp;
  if (blockIdx.x < n_tiles) split_int8_load<R, U>(a, blockIdx.x * int64_t{R}, g_first, n_chunks, scales, lane, c, d);
  if constexpr (!kPreQuantX) {
    for (int64_t i = threadIdx.x; i < a.n_tokens * nb; i += kGemvWarps * 32) {
      const int64_t t = i / nb;
      gemv_quantize_x_block<true>(a.x + t * a.ldx + 32 * (i - t * nb), qx + i * kXBlockBytes, ds + i);
    }
    __syncthreads();
  }

  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int64_t row0 = tile * R;
    float acc[R][NT];
    gemv_zero_acc(acc);
    for (int64_t g0 = g_first; g0 < n_chunks; g0 += int64_t{32} * U * kGemvWarps) {
      uint4 cur[R][U];
      float dcur[R][U];
      if constexpr (kPrefetch) {
        // c holds group (tile, g0); issue this warp's next group (of this tile, else the next tile's
        // first) before computing, so two groups per warp are in flight
        split_int8_take(c, d, cur, dcur);
        int64_t next_g = g0 + int64_t{32} * U * kGemvWarps;
        int64_t next_tile = tile;
        if (next_g >= n_chunks) {
          next_g = g_first;
          next_tile += gridDim.x;
        }
        if (next_tile < n_tiles) split_int8_load<R, U>(a, next_tile * R, next_g, n_chunks, scales, lane, c, d);
      } else {
        if (g0 != g_first) split_int8_load<R, U>(a, row0, g0, n_chunks, scales, lane, c, d);
        split_int8_take(c, d, cur, dcur);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t idx = g0 + 32 * u + lane;
        if (idx >= n_chunks) continue;
        const int64_t b = idx >> 1;
        const int half = static_cast<int>(idx & 1);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= a.n_tokens) break;
          const int8_t* xb = qx + (t * nb + b) * kXBlockBytes + 16 * half;
          uint4 x1, x2;  // q1 of the 16 activations, q2 (residual digit)
          float dx;
          if constexpr (kPreQuantX) {  // launched in stream order: nothing writes x_int8 meanwhile
            x1 = __ldg(reinterpret_cast<const uint4*>(xb));
            x2 = __ldg(reinterpret_cast<const uint4*>(xb + 32));
            dx = __ldg(&ds[t * nb + b].x);
          } else {
            x1 = *reinterpret_cast<const uint4*>(xb);
            x2 = *reinterpret_cast<const uint4*>(xb + 32);
            dx = ds[t * nb + b].x;
          }
#pragma unroll
          for (int i = 0; i < R; ++i) {
            const int w0 = static_cast<int>(cur[i][u].x), w1 = static_cast<int>(cur[i][u].y);
            const int w2 = static_cast<int>(cur[i][u].z), w3 = static_cast<int>(cur[i][u].w);
            int dot1 = __dp4a(w0, static_cast<int>(x1.x), 0);
            dot1 = __dp4a(w1, static_cast<int>(x1.y), dot1);
            dot1 = __dp4a(w2, static_cast<int>(x1.z), dot1);
            dot1 = __dp4a(w3, static_cast<int>(x1.w), dot1);
            int dot2 = __dp4a(w0, static_cast<int>(x2.x), 0);
            dot2 = __dp4a(w1, static_cast<int>(x2.y), dot2);
            dot2 = __dp4a(w2, static_cast<int>(x2.z), dot2);
            dot2 = __dp4a(w3, static_cast<int>(x2.w), dot2);
            // |dot| <= 16 * 128 * 127 < 2^22: exact as float either way
            const float dot = fmaf(small_int_to_float(dot2), 1.0f / kResidualSteps, small_int_to_float(dot1));
            acc[i][t] = fmaf(dcur[i][u], dx * dot, acc[i][t]);
          }
        }
      }
    }
    gemv_reduce_store<R, NT>(a, row0, acc, partial);
    __syncthreads();  // partial is rewritten by the next tile
    const int64_t next = tile + gridDim.x;
    if (!kPrefetch && next < n_tiles) split_int8_load<R, U>(a, next * R, g_first, n_chunks, scales, lane, c, d);
  }
}

template <int NT, bool kPreQuantX>
cudaError_t launch_gemv_split_int8_variant(const GemvArgs& a, cudaStream_t stream) {
  const int64_t n_tiles = (a.rows + kSplitInt8Rows - 1) / kSplitInt8Rows;
  const auto smem = kPreQuantX ? 0 : static_cast<int>(split_int8_smem(a.blocks_per_row, a.n_tokens));
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  if ((status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return status;
  status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_split_int8_kernel<NT, kPreQuantX>,
                                                         kGemvWarps * 32, smem);
  if (status != cudaSuccess) return status;
  const int64_t resident = int64_t{sms} * (per_sm < 1 ? 1 : per_sm);
  const int64_t grid = n_tiles < resident ? n_tiles : resident;
  // a plain launch, not launch_after_prior(): see the file comment
  gemv_split_int8_kernel<NT, kPreQuantX><<<dim3(static_cast<unsigned>(grid)), dim3(kGemvWarps * 32),
                                           static_cast<size_t>(smem), stream>>>(a, n_tiles);
  return cudaGetLastError();
}

template <int NT>
cudaError_t launch_gemv_split_int8(const GemvArgs& a, cudaStream_t stream) {
  if (a.x_int8 != nullptr) return launch_gemv_split_int8_variant<NT, true>(a, stream);
  return launch_gemv_split_int8_variant<NT, false>(a, stream);
}

template <class D, int NT>
cudaError_t launch_gemv_split(const GemvArgs& a, cudaStream_t stream) {
  if constexpr (D::kType == DType::F8_B128) {
    // the tensor-core kernels (gemv_split_f8_diag.cuh, gemv_split_f8x.cuh, gemv_split_f8.cuh)
    return launch_gemv_split_f8<NT>(a, stream);
  } else {
    if constexpr (D::kType == DType::Q8_0) {
      if (gemv_split_int8_eligible<D>(a)) return launch_gemv_split_int8<NT>(a, stream);
    }
    constexpr int R = SplitConfig<NT>::kRows;
    const int64_t blocks = (a.rows + R - 1) / R;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    gemv_split_kernel<D, NT><<<dim3(static_cast<unsigned>(blocks)), dim3(kGemvWarps * 32), 0, stream>>>(a);
    return cudaGetLastError();
  }
}

}  // namespace ga::cuda::detail
