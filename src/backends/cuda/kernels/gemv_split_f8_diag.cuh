// GEMV over F8_B128 split rows on the FP8 tensor cores with whole-row warp loads: the access pattern of the BF16
// kernel (gemv_kernel.cuh: a warp load is 512 contiguous bytes of one row) with the products and sums of
// mma.sync m16n8k32 E4M3, reading only the diagonal of the mma's result.
//
// Why: gemv_split_f8x_kernel feeds the mma its natural operands, B = 8 different weight rows, so each of its warp
// loads touches 8 rows x 64 bytes, and it holds two chunk groups of 2 x 8 rows in registers (168-170 registers,
// 8 warps per SM): it streamed at 45-69 % of copy against the BF16 kernel's 84-100 % (H200, 2026-12-04). Here
// lane l loads bytes 16 l .. 16 l + 15 of a 512-byte chunk of ONE row, so the mma's 8 B columns are the 8
// 64-byte segments of that chunk (lanes 4 n .. 4 n + 3 hold segment n), and A's rows 0..7 are x's first digits
// at each lane's own columns (A row n = the x of segment n), rows 8..15 the second digits. C[n][n] is then
// segment n's dot with x1 and C[n + 8][n] its dot with x2; the 56 other products of C are not used. The tensor
// cores do 8 x the needed work, which costs nothing here: one mma covers 256 weight bytes, and at the copy rate
// an SM needs only one per 16 cycles.
//
// Fragments (m16n8k32, 8-bit; lane (g, t), g = lane / 4, t = lane % 4): b0 = B[4t..4t+3][g] and b1 =
// B[4t+16..4t+19][g] are words 0 and 1 (first mma) or 2 and 3 (second) of the lane's 16 code bytes; a0 / a2 =
// A[g][same k] are the same words of the lane's 16 bytes of x1, a1 / a3 = A[g + 8][same k] those of x2. Any
// bijection of a segment's bytes onto k gives its dot, and A and B use the same one. C[g][g] lives in lane (g,
// g / 2) as c[g % 2], C[g + 8][g] as c[2 + g % 2].
//
// Scales: a lane's 16 columns lie in one block of 128 (segment g of chunk c is block 4 c + g / 2), so each
// lane folds its own diagonal per chunk: acc += s_w * d_x * (c + c' / 16) (x ~ d_x (x1 + x2 / 16), gemv_split_f8x.cuh
// says how x is rounded). Lanes off the diagonal fold garbage, dropped before the reduction.
//
// Work split, as the BF16 kernel: a CTA owns R rows; warp w takes chunk groups w, w + 4, ... of U chunks; every
// code load of a group (U x R, 16 bytes each, ld.global.nc.L1::no_allocate) is issued before any is used, and the
// group's row scales (16 bytes per chunk and row) travel meanwhile by cp.async into shared memory, holding no
// registers; x's digits (and their scales) are __ldg loads that hit L1 after the first CTA of an SM. Several
// tokens cost two mmas each per chunk and row (the A rows are segments, not tokens).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/gemv_ptx.cuh"
#include "backends/cuda/kernels/gemv_split_f8x.cuh"

namespace ga::cuda::detail {

inline constexpr int kF8DiagChunk = 512;  // bytes (= columns) of a row per warp load
// Where the kernel below runs and in which shape (bench_gemv --sweep, H200, 2026-12-04, one token, x given, times
// in us against the best of gemv_split_f8x_kernel / the staged kernel): up to kF8DiagMaxTokens tokens; matrices of
// kF8DiagWideRows rows and more with 4 rows and 2 chunks per group at 6 CTAs per SM (28672 x 4096: 34.0 against
// 38.7, 84 % of copy), fewer rows with 4 rows and one chunk at 8 CTAs per SM (4096 x 14336: 19.9 against 22.7,
// 4096 x 4096: 7.9 against 8.7; 6144 x 4096: 11.2 against 10.4, within the sweep's spread of the other shapes). The
// __launch_bounds__ minimum is what makes the difference: it caps the registers (80 / 64, against 112 unbounded,
// a few spilled bytes), so more warps' loads are in flight. More tokens: gemv_split_f8x_kernel, whose A rows are the
// tokens (here each token costs two more mmas per chunk and row; not measured yet).
inline constexpr int kF8DiagMaxTokens = 1;
inline constexpr int64_t kF8DiagWideRows = 16384;

// R rows per CTA, U chunks per warp and group, NT the token-count bound.
template <int R, int U, int NT, int kMinCtas = 1>
__global__ void __launch_bounds__(kGemvWarps * 32, kMinCtas) gemv_split_f8_diag_kernel(const GemvArgs a) {
  __shared__ float partial[kGemvWarps][R][NT];
  __shared__ uint4 scale_stage[kGemvWarps][U][R];  // a warp's group: the 4 block scales of each chunk and row
  static_assert(U * R <= 32, "one lane copies one chunk's scales");
  pdl_allow_dependents();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;  // the lane's segment: its block within a chunk is g / 2
  const int64_t nb = a.blocks_per_row;
  const int64_t cols = nb * layout::kQKF8;
  const int n_chunks = static_cast<int>(cols / kF8DiagChunk);  // cols % 512 == 0 (split_rows_supported)
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  // 32-bit offsets from the tile's first row (R rows of a split row fit easily): fewer registers than R pointers.
  // Rows past the end are clamped to the last: read, never stored.
  const uint8_t* const tile = a.w + row0 * a.row_stride + 16 * lane;
  uint32_t row_off[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row_off[r] = static_cast<uint32_t>((min(row0 + r, a.rows - 1) - row0) * a.row_stride);
  // the scale chunk this lane copies per group (lanes >= U R copy none): row lane % R of chunk lane / R
  const uint8_t* const scale_src = a.w + min(row0 + lane % R, a.rows - 1) * a.row_stride +
                                   split_scales_offset<DecodeF8B128>(nb) + 16 * (lane / R);
  const F8xDigits xd = f8x_digits(a, cols, 0);
  const int64_t x_token = cols;  // bytes between tokens' digits (x1 and x2); x's scales: nb floats
  const bool copies_scales = lane < U * R;

  float acc[R][NT] = {};
  for (int c0 = warp * U; c0 < n_chunks; c0 += kGemvWarps * U) {
    uint4 w[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + u < n_chunks) {
#pragma unroll
        for (int r = 0; r < R; ++r) w[u][r] = load_stream_16(tile + row_off[r] + kF8DiagChunk * (c0 + u));
      }
    }
    // the group's scales through the copy engine: no registers held while they travel with the codes
    __syncwarp();  // every lane is done with the previous group's scales
    if (copies_scales && c0 + lane / R < n_chunks) {
      copy_chunk_async(&scale_stage[warp][lane / R][lane % R], scale_src + 16 * c0, 16);
    }
    copy_commit();
    copy_wait<0>();
    __syncwarp();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u;
      if (c >= n_chunks) break;
#pragma unroll
      for (int k = 0; k < NT; ++k) {
        if (k > 0 && k >= a.n_tokens) break;
        const uint8_t* x1p = xd.x1 + k * x_token + kF8DiagChunk * c + 16 * lane;
        const uint4 x1 = __ldg(reinterpret_cast<const uint4*>(x1p));
        const uint4 x2 = __ldg(reinterpret_cast<const uint4*>(x1p + a.n_tokens * x_token));
        const float dx = __ldg(xd.d + k * nb + 4 * c + g / 2);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float cc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          f8x_mma(cc, x1.x, x2.x, x1.y, x2.y, w[u][r].x, w[u][r].y);
          f8x_mma(cc, x1.z, x2.z, x1.w, x2.w, w[u][r].z, w[u][r].w);
          const float v = (g & 1) ? fmaf(0.0625f, cc[3], cc[1]) : fmaf(0.0625f, cc[2], cc[0]);
          const float sw = reinterpret_cast<const float*>(&scale_stage[warp][u][r])[g >> 1];
          acc[r][k] = fmaf(sw * dx, v, acc[r][k]);
        }
      }
    }
  }

  const bool diagonal = (lane & 3) == (g >> 1);  // lane (g, g / 2) holds segment g's sums
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int k = 0; k < NT; ++k) {
      const float v = warp_sum(diagonal ? acc[r][k] : 0.0f);
      if (lane == 0) partial[warp][r][k] = v;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < R * NT; idx += kGemvWarps * 32) {
    const int r = idx / NT;
    const int k = idx - r * NT;
    if (k >= a.n_tokens || row0 + r >= a.rows) continue;
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kGemvWarps; ++wi) sum += partial[wi][r][k];
    a.y[k * a.ldy + row0 + r] = sum;
  }
}

template <int R, int U, int NT, int kMinCtas = 1>
cudaError_t launch_gemv_split_f8_diag(const GemvArgs& a, cudaStream_t stream) {
  const int64_t blocks = (a.rows + R - 1) / R;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  // a plain launch, not launch_after_prior(): x's digits are read with __ldg (gemv_split.cuh's file comment)
  gemv_split_f8_diag_kernel<R, U, NT, kMinCtas>
      <<<dim3(static_cast<unsigned>(blocks)), dim3(kGemvWarps * 32), 0, stream>>>(a);
  return cudaGetLastError();
}

// The F8_B128 split-row GEMV: an FP8 tensor-core kernel where one runs (gemv_split_f8x_eligible), else the f16
// kernel (gemv_split_f8.cuh). One token: the kernel above. More tokens, from bench_gemv --sweep (H200, 2026-12-04,
// measured with one token, x given): matrices of 16K rows and more stream best staged, 8 rows per CTA, 3 stages
// (28672 x 4096: 38.1 us against 41.0-45.3 direct), fewer rows direct with 16 rows per CTA (4096 x 14336: 22.5 us
// against 24.5 with 8 rows and 28.2-31.3 staged). The f16 kernel takes 16 rows per CTA unless that leaves an SM
// without two CTAs.
template <int NT>
cudaError_t launch_gemv_split_f8(const GemvArgs& a, cudaStream_t stream) {
  if (gemv_split_f8x_eligible(a)) {
    if constexpr (NT <= kF8DiagMaxTokens) {
      if (a.rows >= kF8DiagWideRows) return launch_gemv_split_f8_diag<4, 2, NT, 6>(a, stream);
      return launch_gemv_split_f8_diag<4, 1, NT, 8>(a, stream);
    }
    if (a.rows >= 16384) return launch_gemv_split_f8s<1, 3, NT>(a, stream);
    return launch_gemv_split_f8x<2, NT>(a, stream);
  }
  int device = 0, sms = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  if ((status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return status;
  const bool small = (a.rows + 15) / 16 < 2 * static_cast<int64_t>(sms);
  return small ? launch_gemv_split_f8_rows<1, NT>(a, stream) : launch_gemv_split_f8_rows<2, NT>(a, stream);
}

}  // namespace ga::cuda::detail
