// Logit soft-capping (Gemma 2; FlashAttention-2's `softcap`): s -> c tanh(s / c), shared by every attention
// kernel that offers it (the engine's decode and prefill, the flash forwards, the simple attention), so they
// round it the same way.
//
// The kernels keep scores pre-multiplied (q scaled on load, or the scale folded into the exp2's FFMA), so
// the caller passes x2 = 2 log2(e) s / c and gets tanh(s / c); it then multiplies by c (or c log2 e, where
// scores are in log2 units). tanh comes from one exp2 and one reciprocal:
//   tanh(y) = 1 - 2 / (1 + e^(2y)) = 1 - 2 / (1 + 2^x2),
// which is exact at both ends (x2 -> -inf: 2^x2 = 0, -1; x2 -> +inf: 2^x2 = inf, 1 / inf = 0, 1) and whose
// ABSOLUTE error is ~2^-22 everywhere (ex2.approx and rcp.approx are good to a few ulps), which is what the
// softmax feels: c tanh is off by ~c 2^-22 (1e-5 at c = 50). tanh.approx.f32 (one MUFU op instead of two) has
// a relative error of 2^-11: c 2^-11 = 0.024 at c = 50, a 2.4% error in every probability near the cap,
// larger than the 16-bit P rounding the kernels are measured against; not used.
#pragma once

#include <cuda_runtime.h>

namespace ga::cuda::detail {

// log2(e) again (attention_detail.cuh's kLog2e): this header is also included on its own.
inline constexpr float kSoftcapLog2e = 1.4426950408889634f;

// tanh(s / c) for x2 = 2 log2(e) s / c (see above).
__device__ __forceinline__ float softcap_tanh(float x2) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x2));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return fmaf(-2.0f, r, 1.0f);
}

}  // namespace ga::cuda::detail
