// GEMV over F8_B128 split rows on the FP8 tensor cores (sm_89+): x rounded to two E4M3 digits per block of 128,
// the weights' codes fed to mma.sync m16n8k32 as they are stored. The path of several tokens (up to 8, one A row
// each); one token takes the diagonal kernel (gemv_split_f8_diag.cuh), whose warp loads are whole 512-byte chunks.
//
// Why: the f16 kernel (gemv_split_f8.cuh) converts every code pair and every x pair with cvt (F2FP) and streamed at
// 38-73 % of copy, as slow as BF16 on long rows (H200, 2026-12-04). Here no instruction converts a weight: the codes
// are the mma's B operand, and x comes rounded
// (GemvParams::x_e4m3x2, written once per call by quantize_x_e4m3x2, x_fp8.h). Rounding x in every CTA instead
// (a shared-memory prologue) measured slower than the f16 kernel: 41.6 us for 4096 x 14336, the prologue's
// divisions and reductions over all 14336 columns outweighing the CTA's 8 rows of mma. Measured with x given:
// 44-75 % of copy, 4-22 % faster than the f16 kernel; Nsight Compute names occupancy as what bounds it (170
// registers at 16 rows a CTA: 8 warps per SM, DRAM at 46 % of peak; docs/performance.md).
//
// x's two digits: per token and block of 128, d = amax / 448 (1 for zeros) as the prefill's quantize_x_fp8, then
// x1 = e4m3(x / d) and x2 = e4m3(16 (x / d - x1)), both rounded to nearest even, so x ~ d (x1 + x2 / 16) to about
// 2^-8 of |x| (the weights' own E4M3 error is 2^-4). The mma's A has 16 rows: rows g = token g's x1, rows g + 8
// its x2, so one mma gives both partial sums (C rows g and g + 8) and the lane folds them as d (c + c' / 16) times
// the weight row's scale, per block. gemv_rounds_x_to_e4m3x2() says when this path runs; the parity test rounds x
// the same way on the host.
//
// The fragments (m16n8k32, 8-bit operands): lane (g, t) holds B = weight row g at k = 4t..4t+3 (b0) and
// 4t+16..4t+19 (b1), A rows g / g + 8 at the same k (a0 / a1, a2 / a3). As in the f16 kernel, k is a permutation
// of the lane's 16 contiguous codes: step s (0, 1) of a round takes code words 2s (b0) and 2s + 1 (b1), and the
// x digits of the same columns are words 2s and 2s + 1 of one 16-byte shared-memory load per digit.
//
// Grid: one CTA per tile of 8 G rows, as the f16 kernel; every warp's next chunk group is issued before the
// current one's mma. The x digits are read with __ldg (16 bytes per digit per round; the same for every CTA, so L1
// and L2 hits after the first touch).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/gemv_ptx.cuh"
#include "backends/cuda/kernels/gemv_split_f8.cuh"

namespace ga::cuda::detail {

// c += a * b on the FP8 tensor cores (E4M3 x E4M3, float accumulators).
__device__ __forceinline__ void f8x_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__)
  (void)c, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
  __trap();  // never launched below sm_89 (launch_gemv_split_f8)
#else
  (void)c, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
#endif
}

// Token g's x digits (gemv_x_e4m3x2_bytes layout): first digits, second digits, block scales. Lanes of tokens >=
// n_tokens read token 0's: their C rows are computed and never used.
struct F8xDigits {
  const uint8_t* x1;
  const uint8_t* x2;
  const float* d;
};
__device__ __forceinline__ F8xDigits f8x_digits(const GemvArgs& a, int64_t cols, int g) {
  const int xt = g < a.n_tokens ? g : 0;
  const auto* base = static_cast<const uint8_t*>(a.x_e4m3x2);
  return {base + xt * cols, base + (a.n_tokens + xt) * cols,
          reinterpret_cast<const float*>(base + 2 * a.n_tokens * cols) + xt * (cols / 128)};
}

// G: groups of 8 rows per CTA (the mma's n); NT: the token-count bound. A chunk group is the f16 kernel's
// (F8Group: kF8Rounds rounds, two scale blocks; 8 rounds measured slower, bench_gemv --sweep, 2026-12-04).
template <int G, int NT>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_split_f8x_kernel(const GemvArgs a) {
  constexpr int U = kF8Rounds;
  constexpr int kBlocks = U / 2;  // scale blocks per chunk group
  __shared__ float partial[kGemvWarps][G * 8][NT];
  pdl_allow_dependents();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;  // B: weight row g of each group; A and C: token g (its x1 row; row g + 8: its x2)
  const int t = lane & 3;
  const int64_t nb = a.blocks_per_row;
  const int64_t cols = nb * layout::kQKF8;
  const int64_t scales = split_scales_offset<DecodeF8B128>(nb);
  const int64_t n_groups = cols / kF8GroupCols;  // cols % 512 == 0 (split_rows_supported)
  const int64_t tile = blockIdx.x;

  const uint8_t* code_row[G];
  const uint8_t* scale_row[G][2];
  f8_tile_rows<G>(a, tile, scales, g, t, code_row, scale_row);
  F8Group<G> next;
  if (warp < n_groups) next.load(code_row, scale_row, warp, t);
  const F8xDigits xd = f8x_digits(a, cols, g);

  float acc[G][2] = {};
  for (int64_t c = warp; c < n_groups; c += kGemvWarps) {
    const int64_t col0 = c * kF8GroupCols;
    const F8Group<G> cur = next;
    if (c + kGemvWarps < n_groups) next.load(code_row, scale_row, c + kGemvWarps, t);
    float blk[G][kBlocks][4];  // C of each scale block: its own mma chain (2 rounds x 2 steps)
#pragma unroll
    for (int i = 0; i < G; ++i) {
#pragma unroll
      for (int h = 0; h < kBlocks; ++h) blk[i][h][0] = blk[i][h][1] = blk[i][h][2] = blk[i][h][3] = 0.0f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {  // launched in order: x's digits are read-only here
      const uint4 d1 = __ldg(reinterpret_cast<const uint4*>(xd.x1 + col0 + 64 * u + 16 * t));
      const uint4 d2 = __ldg(reinterpret_cast<const uint4*>(xd.x2 + col0 + 64 * u + 16 * t));
#pragma unroll
      for (int i = 0; i < G; ++i) {
        f8x_mma(blk[i][u / 2], d1.x, d2.x, d1.y, d2.y, cur.codes[i][u].x, cur.codes[i][u].y);
        f8x_mma(blk[i][u / 2], d1.z, d2.z, d1.w, d2.w, cur.codes[i][u].z, cur.codes[i][u].w);
      }
    }
#pragma unroll
    for (int h = 0; h < kBlocks; ++h) {
      const float dxh = __ldg(xd.d + kBlocks * c + h);  // x's scale of the block
#pragma unroll
      for (int i = 0; i < G; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float sw = h == 0 ? cur.scale[i][j].x : cur.scale[i][j].y;
          acc[i][j] = fmaf(sw * dxh, fmaf(0.0625f, blk[i][h][j + 2], blk[i][h][j]), acc[i][j]);
        }
      }
    }
  }
  f8_reduce_store<G, NT>(a, tile * (8 * G), acc, partial);
}

// ---- the staged form: each row's 512 bytes of a chunk group copied by one warp instruction ----
//
// The kernel above reads lane (g, t)'s 16 bytes of row g straight into the fragment, so each warp load touches 8
// rows x 64 bytes; it streamed at 45-69 % of copy whatever its tile (G) or group (U) size (bench_gemv --sweep,
// H200, 2026-12-04), against 84-100 % for the BF16 kernel, whose warp loads are 512 contiguous bytes of one row.
// Here a warp copies its group's rows into a shared-memory ring with cp.async, lane l taking bytes 16l.. of a row
// (512 contiguous bytes per instruction), the group's scales with them (16 bytes per row: 4 blocks); S - 1 groups
// are in flight while one is read from shared memory into the fragments (16-byte loads; rows padded to 576
// bytes, so the 8 rows of a load fall in distinct banks). A chunk group is 8 rounds (512 columns, 4 scale blocks).
template <int G>
struct F8sStage {
  static constexpr int kRowBytes = 512 + 64;
  static constexpr int kCodeBytes = 8 * G * kRowBytes;
  static constexpr int kBytes = kCodeBytes + 8 * G * 16;
};

template <int G, int S>
__host__ __device__ constexpr int f8s_smem_bytes() {
  return kGemvWarps * S * F8sStage<G>::kBytes;
}

template <int G, int S, int NT>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_split_f8s_kernel(const GemvArgs a) {
  using St = F8sStage<G>;
  static_assert(S >= 2, "a ring of at least two stages");
  extern __shared__ uint4 f8s_smem[];
  __shared__ float partial[kGemvWarps][G * 8][NT];
  pdl_allow_dependents();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int64_t nb = a.blocks_per_row;
  const int64_t cols = nb * layout::kQKF8;
  const int64_t scales = split_scales_offset<DecodeF8B128>(nb);
  const int64_t n_groups = cols / 512;  // cols % 512 == 0 (split_rows_supported)
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * (8 * G);
  uint8_t* ring = reinterpret_cast<uint8_t*>(f8s_smem) + warp * S * St::kBytes;
  const auto row_ptr = [&](int r) { return a.w + min(row0 + r, a.rows - 1) * a.row_stride; };  // clamped rows
  // group c into stage `stage`: 8 G rows of 512 code bytes (lane l: bytes 16l..), then their 16 scale bytes
  const auto issue = [&](int64_t c, int stage) {
    uint8_t* st = ring + stage * St::kBytes;
#pragma unroll
    for (int r = 0; r < 8 * G; ++r) {
      copy_chunk_async(reinterpret_cast<uint4*>(st + r * St::kRowBytes + 16 * lane), row_ptr(r) + 512 * c + 16 * lane,
                       16);
    }
    if (lane < 8 * G) {
      copy_chunk_async(reinterpret_cast<uint4*>(st + St::kCodeBytes + 16 * lane), row_ptr(lane) + scales + 16 * c, 16);
    }
    copy_commit();
  };
  int64_t next = warp;
#pragma unroll
  for (int s = 0; s < S - 1; ++s, next += kGemvWarps) {
    if (next < n_groups) {
      issue(next, s);
    } else {
      copy_commit();  // an empty group keeps the count the waits below expect
    }
  }
  const F8xDigits xd = f8x_digits(a, cols, g);

  float acc[G][2] = {};
  int stage = 0;
  for (int64_t c = warp; c < n_groups; c += kGemvWarps, next += kGemvWarps) {
    copy_wait<S - 2>();
    __syncwarp();  // every lane's copies of this stage landed, and every lane is done with the stage refilled next
    if (next < n_groups) {
      issue(next, (stage + S - 1) % S);
    } else {
      copy_commit();
    }
    const uint8_t* st = ring + stage * St::kBytes;
    const int64_t col0 = c * 512;
    float blk[G][4][4];
#pragma unroll
    for (int i = 0; i < G; ++i) {
#pragma unroll
      for (int h = 0; h < 4; ++h) blk[i][h][0] = blk[i][h][1] = blk[i][h][2] = blk[i][h][3] = 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const uint4 d1 = __ldg(reinterpret_cast<const uint4*>(xd.x1 + col0 + 64 * u + 16 * t));
      const uint4 d2 = __ldg(reinterpret_cast<const uint4*>(xd.x2 + col0 + 64 * u + 16 * t));
#pragma unroll
      for (int i = 0; i < G; ++i) {
        const uint4 w = *reinterpret_cast<const uint4*>(st + (8 * i + g) * St::kRowBytes + 64 * u + 16 * t);
        f8x_mma(blk[i][u / 2], d1.x, d2.x, d1.y, d2.y, w.x, w.y);
        f8x_mma(blk[i][u / 2], d1.z, d2.z, d1.w, d2.w, w.z, w.w);
      }
    }
    const float4 dx = __ldg(reinterpret_cast<const float4*>(xd.d + 4 * c));  // x's scales of the 4 blocks
#pragma unroll
    for (int i = 0; i < G; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float4 sw = *reinterpret_cast<const float4*>(st + St::kCodeBytes + 16 * (8 * i + 2 * t + j));
        acc[i][j] = fmaf(sw.x * dx.x, fmaf(0.0625f, blk[i][0][j + 2], blk[i][0][j]), acc[i][j]);
        acc[i][j] = fmaf(sw.y * dx.y, fmaf(0.0625f, blk[i][1][j + 2], blk[i][1][j]), acc[i][j]);
        acc[i][j] = fmaf(sw.z * dx.z, fmaf(0.0625f, blk[i][2][j + 2], blk[i][2][j]), acc[i][j]);
        acc[i][j] = fmaf(sw.w * dx.w, fmaf(0.0625f, blk[i][3][j + 2], blk[i][3][j]), acc[i][j]);
      }
    }
    stage = (stage + 1) % S;
  }
  copy_wait<0>();
  f8_reduce_store<G, NT>(a, row0, acc, partial);
}

template <int G, int S, int NT>
cudaError_t launch_gemv_split_f8s(const GemvArgs& a, cudaStream_t stream) {
  constexpr int kSmem = f8s_smem_bytes<G, S>();
  if constexpr (kSmem > 48 * 1024) {  // above the default: opt in once per instantiation (and device)
    static const cudaError_t opt_in =
        cudaFuncSetAttribute(gemv_split_f8s_kernel<G, S, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (opt_in != cudaSuccess) return opt_in;
  }
  const int64_t blocks = (a.rows + 8 * G - 1) / (8 * G);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  gemv_split_f8s_kernel<G, S, NT><<<dim3(static_cast<unsigned>(blocks)), dim3(kGemvWarps * 32), kSmem, stream>>>(a);
  return cudaGetLastError();
}

// Whether the FP8 tensor-core kernel runs: x comes rounded (a.x_e4m3x2) and the device has FP8 mma (sm_89+).
inline bool gemv_split_f8x_eligible(const GemvArgs& a) {
  if (a.x_e4m3x2 == nullptr) return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return false;
  }
  return 10 * major + minor >= 89;
}

template <int G, int NT>
cudaError_t launch_gemv_split_f8x(const GemvArgs& a, cudaStream_t stream) {
  const int64_t blocks = (a.rows + 8 * G - 1) / (8 * G);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  // a plain launch, not launch_after_prior(): x's digits are read with __ldg (gemv_split.cuh's file comment)
  gemv_split_f8x_kernel<G, NT><<<dim3(static_cast<unsigned>(blocks)), dim3(kGemvWarps * 32), 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ga::cuda::detail
