// The mma.sync building blocks the flash forward (flash_fwd_sm80.cuh) and backward (flash_bwd_sm80.cuh) share on
// top of the PTX wrappers of kernels/attention_detail.cuh: a pair of 16-bit values (bf16 or fp16, picked at
// compile time) packed into one 32-bit register and back, m16n8k16 with f32 accumulators for either dtype (or, for
// the sm_75 forward, the same step as two m16n8k8), and exp2.
// One copy, so both kernels round P (and dS) the same way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/kernels/attention_detail.cuh"

namespace ga::cuda::flash_sm80 {

template <bool kBf16>
__device__ __forceinline__ float2 unpack2(uint32_t w) {
  if constexpr (kBf16) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
  }
}

// lo in the low half (the lower column / dimension of an mma fragment), rounded to nearest.
template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    return detail::pack_half2(lo, hi);
  }
}

// d[16x8] += a[16x16] * b[16x8] (b0: k rows 0-7, b1: k rows 8-15), f32 accumulators. kK8 (the sm_75 forward):
// the same product as two m16n8k8 (Turing has no m16n8k16): a0/a1 are rows g / g + 8 at k 0-7 with b0, a2/a3 the
// same rows at k 8-15 with b1 (the m16n8k16 fragment is exactly two m16n8k8 fragments side by side). f16 only: sm_75
// tensor cores have no bf16.
template <bool kBf16, bool kK8 = false>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kK8) {
    static_assert(!kBf16, "sm_75 mma.sync has no bf16 inputs");
    detail::mma_1688(d, a[0], a[1], b0);
    detail::mma_1688(d, a[2], a[3], b1);
  } else {
    detail::mma_16816<kBf16>(d, a, b0, b1);
  }
}

// 2^x in one MUFU instruction (exp2f adds range handling the softmax does not need); 2^-inf = +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace ga::cuda::flash_sm80
