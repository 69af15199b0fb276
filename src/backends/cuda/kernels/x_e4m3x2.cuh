// The two-digit E4M3 rounding of x (x_fp8.h, QuantizeXE4m3x2Params) as one device function, so that the pre-pass
// kernel (quantize_x_e4m3x2) and the kernels that produce x and round it in place of the pre-pass (rms_norm's and
// swiglu's out_e4m3x2) write the same bytes: one warp rounds one block of 128 activations, lane l holding columns
// 4 l .. 4 l + 3.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/kernels/weight_decode.cuh"

namespace ga::cuda::detail {

inline constexpr int kXFp8Block = 128;      // activations per scale
inline constexpr float kXFp8Max = 448.0f;   // the host's kE4m3Max (backends/cpu/quant.h)

__device__ __forceinline__ uint8_t x_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// The block's scale from the lane's 4 values: amax / 448 over the warp (1 for an all-zero block), as the host's
// e4m3_group_scale; every lane of the warp must call it.
__device__ __forceinline__ float x_fp8_block_scale(const float4& v) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  return amax > 0.0f ? __fdiv_rn(amax, kXFp8Max) : 1.0f;
}

// Rounds the warp's block: q = v / d, x1 = e4m3(q), x2 = e4m3(16 (q - x1)), each rounded to nearest even; the lane
// writes its 4 first digits at x1 + 4 lane, its 4 second digits at x2 + 4 lane, and lane 0 the scale at *d_out.
__device__ __forceinline__ void round_x_e4m3x2_block(const float4& v, int lane, uint8_t* x1, uint8_t* x2,
                                                     float* d_out) {
  const float d = x_fp8_block_scale(v);
  const float q[4] = {__fdiv_rn(v.x, d), __fdiv_rn(v.y, d), __fdiv_rn(v.z, d), __fdiv_rn(v.w, d)};
  uint32_t w1 = 0, w2 = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint8_t c1 = x_e4m3(q[e]);
    const uint8_t c2 = x_e4m3(16.0f * (q[e] - e4m3_value(c1)));
    w1 |= static_cast<uint32_t>(c1) << (8 * e);
    w2 |= static_cast<uint32_t>(c2) << (8 * e);
  }
  *reinterpret_cast<uint32_t*>(x1 + 4 * lane) = w1;
  *reinterpret_cast<uint32_t*>(x2 + 4 * lane) = w2;
  if (lane == 0) *d_out = d;
}

// Where token t's block b lives in the two-digit buffer of n tokens of k activations (gemv_x_e4m3x2_bytes layout:
// all first digits, then all second digits, then the scales [n][k / 128]).
struct XE4m3x2Block {
  uint8_t* x1;
  uint8_t* x2;
  float* d;
};
__device__ __forceinline__ XE4m3x2Block x_e4m3x2_block(void* out, int64_t n, int64_t k, int64_t t, int64_t b) {
  auto* base = static_cast<uint8_t*>(out);
  const int64_t at = t * k + b * kXFp8Block;
  return {base + at, base + n * k + at, reinterpret_cast<float*>(base + 2 * n * k) + t * (k / kXFp8Block) + b};
}

}  // namespace ga::cuda::detail
