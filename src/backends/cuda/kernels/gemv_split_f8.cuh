// GEMV over F8_B128 split rows (weight_layout.h: per row all E4M3 codes, 16-byte aligned, then one float32
// scale per block of 128), on the tensor cores.
//
// Why tensor cores for a GEMV: F8_B128 in GGUF order (132-byte blocks) decodes each code to float with a
// conversion and an FFMA, ~3 instructions per weight byte, and reached 0.66x of the F16 decode (H200,
// 2026-12-03): one byte per weight leaves ~7 issue slots per byte at full bandwidth, and the float decode uses
// them all. Here a code pair becomes an f16 pair in one instruction (cvt.rn.f16x2.e4m3x2, exact: every E4M3
// value is a half) and the products and sums are one mma.sync m16n8k16 per 128 weights of a lane's quad: no FFMA
// per weight. Measured: 38-70 % of copy on the Llama shapes; the FP8 tensor-core kernel (gemv_split_f8x.cuh) is
// faster where it runs (sm_89+), so this one serves the older GPUs.
//
// The mma's operands. B (16 x 8, "col") holds 8 weight rows: lane (g, t) (g = lane / 4, t = lane % 4) holds
// row g at k = 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1). A (16 x 16) holds the tokens: row g = token g (rows 8..15 and
// tokens >= n_tokens are zeros) at the same k. A dot product may sum its terms in any order, so k is a
// permutation of the columns chosen for the loads: lane (g, t) loads 16 contiguous codes of weight row g, columns
// c0 + 16t .. c0 + 16t + 15, and step s (0..3) of the round reads its codes 4s .. 4s+3 as k = 2t, 2t+1, 2t+8,
// 2t+9. The x it needs for that step is token g's columns c0 + 16t + 4s .. +3: the same columns, so a lane loads
// its own 16 x values (4 float4 through L1) and rounds them to f16 pairs. A round is 64 columns of 8 rows; two
// rounds are one scale block, whose C (token g, rows 2t, 2t+1) is multiplied by the rows' scales and added to
// float accumulators. Several tokens (up to 8) cost nothing more: they are rows of A the mma computes anyway.
//
// Numerics: x is rounded to f16 (relative 2^-11, |x| < 65504), the products q * x are exact in the mma and
// summed in float32 over 128 weights, then scaled: gemv_rounds_x_to_f16() says so, and the parity test
// compares with the same rounding of x. The E4M3 error itself (2^-4 relative) is the weights'.
//
// Work split as in the other split-row kernels: a CTA owns G x 8 rows (G = 2, or 1 for matrices too small to
// give every SM two CTAs); its 4 warps take chunk groups
// (kF8Rounds rounds = 256 columns, two scale blocks) w, w + 4, ...; every load of a group (codes of both row
// groups, their scales) is issued before any is used, and a warp issues its next group's loads before it computes
// the current one (two groups in flight; measured no faster than one, 29.0 against 30.2 us on 4096 x 14336, H200),
// ld.global.nc.L1::no_allocate so that L1 keeps x. Each round has its own mma chain (4 deep). Launched
// in stream order with __ldg for x, like gemv_split_kernel (gemv_split.cuh says why).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/gemv_kernel.cuh"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/split_rows.cuh"

namespace ga::cuda::detail {

inline constexpr int kF8Rounds = 4;   // rounds of 64 columns per chunk group: 256 columns, two scale blocks
inline constexpr int kF8GroupCols = 64 * kF8Rounds;
static_assert(kF8GroupCols == 2 * layout::kQKF8, "a chunk group is two scale blocks (the scale loads are float2)");

// c += a * b: a 16x16 (4 registers of f16 pairs), b 16x8 (2 registers), c 16x8 float. Turing (sm_75) has only
// m16n8k8: the same fragments as two halves of k (a0, a1 with b0; a2, a3 with b1).
__device__ __forceinline__ void f8_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__)
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(b0));
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a2), "r"(a3), "r"(b1));
#else
  (void)c, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
#endif
}

// Two E4M3 codes (low byte first) as an f16 pair, exactly.
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

__device__ __forceinline__ uint32_t f8_pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// A row's two consecutive block scales (8-byte aligned: the scale array starts at a multiple of 512 bytes of
// codes and blocks come in pairs), streamed like the codes.
__device__ __forceinline__ float2 load_scales_stream(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  float2 v;
  asm("ld.global.nc.L1::no_allocate.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p));
  return v;
#else
  return *reinterpret_cast<const float2*>(p);
#endif
}

// Row pointers of tile `tile` (8 G rows from tile * 8 G, clamped to the last row: read, never stored): lane (g, t)'s
// code row g of each row group, and the scale arrays of rows 2t, 2t+1 of each (the C fragment's columns).
template <int G>
__device__ __forceinline__ void f8_tile_rows(const GemvArgs& a, int64_t tile, int64_t scales, int g, int t,
                                             const uint8_t* (&code_row)[G], const uint8_t* (&scale_row)[G][2]) {
  const int64_t row0 = tile * (8 * G);
#pragma unroll
  for (int i = 0; i < G; ++i) {
    code_row[i] = a.w + min(row0 + 8 * i + g, a.rows - 1) * a.row_stride;
#pragma unroll
    for (int j = 0; j < 2; ++j) scale_row[i][j] = a.w + min(row0 + 8 * i + 2 * t + j, a.rows - 1) * a.row_stride + scales;
  }
}

// Sums the warps' accumulators and writes y: lane (g, t) holds token g's sums of rows 2t, 2t+1 of each of the G row
// groups (rows row0 + 8i + 2t + j); rows past the end and tokens >= n_tokens are not stored.
template <int G, int NT>
__device__ __forceinline__ void f8_reduce_store(const GemvArgs& a, int64_t row0, const float (&acc)[G][2],
                                                float (&partial)[kGemvWarps][G * 8][NT]) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  if (g < NT) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) partial[warp][8 * i + 2 * t + j][g] = acc[i][j];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < 8 * G * NT; idx += kGemvWarps * 32) {
    const int r = idx / NT;
    const int tok = idx - r * NT;
    if (tok >= a.n_tokens || row0 + r >= a.rows) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) sum += partial[w][r][tok];
    a.y[tok * a.ldy + row0 + r] = sum;
  }
}

// One chunk group c of a tile (kF8Rounds rounds = 256 columns, two scale blocks) as lane (g, t) holds it: its 16
// codes of each round for row g of each row group, and the two block scales of rows 2t, 2t+1 of each row group.
template <int G>
struct F8Group {
  uint4 codes[G][kF8Rounds];
  float2 scale[G][2];
  // Issues the group's loads (none is used before the caller reads the members).
  __device__ __forceinline__ void load(const uint8_t* const (&code_row)[G], const uint8_t* const (&scale_row)[G][2],
                                       int64_t c, int t) {
    const int64_t col0 = c * kF8GroupCols;
#pragma unroll
    for (int u = 0; u < kF8Rounds; ++u) {
#pragma unroll
      for (int i = 0; i < G; ++i) codes[i][u] = load_stream_16(code_row[i] + col0 + 64 * u + 16 * t);
    }
#pragma unroll
    for (int i = 0; i < G; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) scale[i][j] = load_scales_stream(scale_row[i][j] + 4 * (2 * c));
    }
  }
};

// G: groups of 8 rows per CTA (the mma's n); NT: the token-count bound.
template <int G, int NT>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_split_f8_kernel(const GemvArgs a) {
  constexpr int U = kF8Rounds;
  __shared__ float partial[kGemvWarps][G * 8][NT];
  pdl_allow_dependents();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;  // B: weight row g of each group; A and C: token g
  const int t = lane & 3;   // B and A: columns 16t.. of a round; C: rows 2t, 2t+1 of each group
  const int64_t nb = a.blocks_per_row;
  const int64_t scales = split_scales_offset<DecodeF8B128>(nb);
  const int64_t n_groups = nb * layout::kQKF8 / kF8GroupCols;  // cols % 512 == 0 (split_rows_supported)
  const uint8_t* code_row[G];
  const uint8_t* scale_row[G][2];
  f8_tile_rows<G>(a, blockIdx.x, scales, g, t, code_row, scale_row);
  const bool has_x = g < a.n_tokens && g < NT;
  const float* xg = a.x + (has_x ? g : 0) * a.ldx;

  float acc[G][2] = {};
  // the warp's first group in flight; each iteration issues the next group's loads before computing this one
  F8Group<G> next;
  if (warp < n_groups) next.load(code_row, scale_row, warp, t);
  for (int64_t c = warp; c < n_groups; c += kGemvWarps) {
    const int64_t col0 = c * kF8GroupCols;
    const F8Group<G> cur = next;
    if (c + kGemvWarps < n_groups) next.load(code_row, scale_row, c + kGemvWarps, t);
    float blk[G][U][4];  // C of each round (independent mma chains); rounds 0, 1 are scale block 0, rounds 2, 3 block 1
#pragma unroll
    for (int i = 0; i < G; ++i) {
#pragma unroll
      for (int u = 0; u < U; ++u) blk[i][u][0] = blk[i][u][1] = blk[i][u][2] = blk[i][u][3] = 0.0f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint32_t xa[8] = {};  // step s: xa[2s] = (x0, x1) at k 2t, 2t+1; xa[2s + 1] = (x2, x3) at k 2t+8, 2t+9
      if (has_x) {
        const float* xc = xg + col0 + 64 * u + 16 * t;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          const float4 v = __ldg(reinterpret_cast<const float4*>(xc + 4 * s));  // launched in order: read-only
          xa[2 * s] = f8_pack_half2(v.x, v.y);
          xa[2 * s + 1] = f8_pack_half2(v.z, v.w);
        }
      }
#pragma unroll
      for (int i = 0; i < G; ++i) {
        const uint32_t w[4] = {cur.codes[i][u].x, cur.codes[i][u].y, cur.codes[i][u].z, cur.codes[i][u].w};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          f8_mma(blk[i][u], xa[2 * s], 0u, xa[2 * s + 1], 0u, e4m3x2_to_half2(w[s] & 0xFFFFu),
                 e4m3x2_to_half2(w[s] >> 16));
        }
      }
    }
#pragma unroll
    for (int i = 0; i < G; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        acc[i][j] = fmaf(cur.scale[i][j].x, blk[i][0][j] + blk[i][1][j], acc[i][j]);
        acc[i][j] = fmaf(cur.scale[i][j].y, blk[i][2][j] + blk[i][3][j], acc[i][j]);
      }
    }
  }

  f8_reduce_store<G, NT>(a, static_cast<int64_t>(blockIdx.x) * (8 * G), acc, partial);
}

template <int G, int NT>
cudaError_t launch_gemv_split_f8_rows(const GemvArgs& a, cudaStream_t stream) {
  const int64_t blocks = (a.rows + 8 * G - 1) / (8 * G);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  // a plain launch, not launch_after_prior(): x is read with __ldg (gemv_split.cuh's file comment)
  gemv_split_f8_kernel<G, NT><<<dim3(static_cast<unsigned>(blocks)), dim3(kGemvWarps * 32), 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ga::cuda::detail
