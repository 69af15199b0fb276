// Activations rounded to two int8 digits per block of 32 (the int8 GEMV's x, gemv_int8.cuh): the device
// functions that every producer of that format shares, so that a block quantized inside a GEMV CTA, by the
// quantize_x_int8() pre-pass (x_int8.cu) or by the fused SwiGLU (swiglu.cu) is the same bytes.
//
// Format of one block (kXBlockBytes + a float2): 32 int8 q1 = rint(x * 127 / amax), then 32 int8
// q2 = rint((x * 127 / amax - q1) * 254), and (d_x = amax / 127, sum of the 32 floats in index order), so
// x ~ d_x * (q1 + q2 / 254). A buffer of several tokens (gemv.h, GemvParams::x_int8) is
// [n_tokens][cols / 32][64] int8 followed by [n_tokens][cols / 32] float2: the layout the int8 GEMV kernels
// keep in shared memory, so a kernel may read it straight from global memory instead of building it.
//
// Why one shared function: the GEMV parity tests compare a pre-quantized run against the same CPU reference
// as the in-kernel quantization; any difference in rounding between producers would be a silent numerics
// fork. Explicit IEEE intrinsics (__fmul_rn, __fadd_rn, __fdiv_rn): no contraction may change a digit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/device_bytes.cuh"

namespace ga::cuda::detail {

inline constexpr int kXBlockBytes = 64;             // per x block: 32 int8 q1, then 32 int8 q2
inline constexpr float kResidualSteps = 254.0f;     // q2 = rint(residual of q1 * 254), |q2| <= 127
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: x + it rounds x to an integer (|x| < 2^22)
inline constexpr int kRoundMagicBits = 0x4B400000;  // its bit pattern

// Quantizes 32 activations (in registers) into their 64 bytes of qx (16-byte aligned) and their (d_x, sum).
__device__ __forceinline__ void gemv_quantize_x_values(const float (&v)[32], int8_t* qx, float2* ds) {
  float amax = 0.0f, sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    amax = fmaxf(amax, fabsf(v[i]));
    sum = __fadd_rn(sum, v[i]);
  }
  // Rounding without F2I/I2F (quarter-rate on the SM, 96 per block: they dominated the GEMV's prologue,
  // which every CTA pays before its first tile): s + 1.5 * 2^23 rounds s to the nearest integer (ties to
  // even, as rint) for |s| < 2^22, and that integer sits in the sum's low mantissa bits, so its low byte is
  // the int8 code; subtracting 1.5 * 2^23 again gives rint(s) as an exact float.
  const float inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
  uint32_t words[8], residual_words[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    uint32_t q1_bits[4], q2_bits[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float scaled = __fmul_rn(v[4 * k + j], inv);
      const float shifted = __fadd_rn(scaled, kRoundMagic);  // |scaled| <= 127
      const float q1 = __fsub_rn(shifted, kRoundMagic);
      q1_bits[j] = __float_as_uint(shifted);
      q2_bits[j] = __float_as_uint(__fadd_rn(__fmul_rn(__fsub_rn(scaled, q1), kResidualSteps), kRoundMagic));
    }
    // low bytes of the four words, in order (PRMT selectors: byte 0 of a = 0, of b = 4)
    words[k] = __byte_perm(__byte_perm(q1_bits[0], q1_bits[1], 0x0040u), __byte_perm(q1_bits[2], q1_bits[3], 0x0040u),
                           0x5410u);
    residual_words[k] = __byte_perm(__byte_perm(q2_bits[0], q2_bits[1], 0x0040u),
                                    __byte_perm(q2_bits[2], q2_bits[3], 0x0040u), 0x5410u);
  }
  uint4* dst = reinterpret_cast<uint4*>(qx);
  dst[0] = make_uint4(words[0], words[1], words[2], words[3]);
  dst[1] = make_uint4(words[4], words[5], words[6], words[7]);
  dst[2] = make_uint4(residual_words[0], residual_words[1], residual_words[2], residual_words[3]);
  dst[3] = make_uint4(residual_words[4], residual_words[5], residual_words[6], residual_words[7]);
  *ds = make_float2(__fdiv_rn(amax, 127.0f), sum);
}

// Quantizes the block of 32 activations at src (16-byte aligned).
// kReadOnlyX: read x with __ldg (ld.global.nc), only from kernels launched in stream order (not through
// launch_after_prior, pdl.cuh), for which no kernel writes x during their lifetime (gemv_split.cuh).
template <bool kReadOnlyX = false>
__device__ __forceinline__ void gemv_quantize_x_block(const float* src, int8_t* qx, float2* ds) {
  float v[32];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 f = kReadOnlyX ? __ldg(reinterpret_cast<const float4*>(src + 4 * i)) : load_activations_4(src + 4 * i);
    v[4 * i] = f.x;
    v[4 * i + 1] = f.y;
    v[4 * i + 2] = f.z;
    v[4 * i + 3] = f.w;
  }
  gemv_quantize_x_values(v, qx, ds);
}

// Where the (d_x, sum) pairs of a buffer of n_blocks blocks start: right after all the blocks' digits.
__host__ __device__ __forceinline__ float2* x_int8_scales(int8_t* qx, int64_t n_blocks) {
  return reinterpret_cast<float2*>(qx + n_blocks * kXBlockBytes);
}

// The pre-pass kernels' loop (quantize_x_int8, the fused SwiGLU): one thread per block of 32 of an [n_rows][cols]
// matrix, grid-stride, kThreads per CTA; calls f(block index, row, first column of the block).
template <int kThreads, class F>
__device__ __forceinline__ void for_each_x_block(int64_t n_rows, int64_t cols, F&& f) {
  const int64_t nb = cols / 32;
  const int64_t total = n_rows * nb;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / nb;
    f(i, r, 32 * (i - r * nb));
  }
}

// The grid for_each_x_block runs on: enough CTAs for every block, at most the 1-D grid limit (the loop strides).
inline unsigned x_block_ctas(int64_t n_blocks, int threads) {
  const int64_t ctas = (n_blocks + threads - 1) / threads;
  return static_cast<unsigned>(ctas < 65535 ? ctas : 65535);
}

}  // namespace ga::cuda::detail
