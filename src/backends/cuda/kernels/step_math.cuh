// The per-element math of the decode step's small ops, written once for every kernel that does it: the
// per-op kernels (rms_norm.cu, elementwise.cu's head norm, swiglu.cu, engine/qkv_rope_store.cu) and the
// persistent decode kernel (persistent/), so that the two decode paths cannot drift apart in a formula.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ga::cuda::detail {

// 1 / rms of n values whose squares sum to sum_sq (the CPU reference's 1 / sqrt(mean + eps)).
__device__ __forceinline__ float inv_rms(float sum_sq, int64_t n, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(n) + eps);
}

// A GLU's activation of the gate: SiLU (Llama, Qwen, Mistral, Phi-3) or GELU-tanh (Gemma). expf and tanhf
// (not the fast intrinsics) keep the result within a few ulp of the CPU reference's std::exp / std::tanh.
enum class GluAct : uint8_t { kSilu = 0, kGeluTanh = 1 };

__device__ __forceinline__ float glu_activate(GluAct act, float g) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kGeluCubic = 0.044715f;
  if (act == GluAct::kSilu) return g / (1.0f + expf(-g));
  return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + kGeluCubic * g * g * g)));
}

// RoPE of one pair: the dims (d0, d1) that pair `pair` of a head turns (Normal: adjacent dims; NeoX: the
// halves of n_rot; pairs past n_rot / 2 pass through, as adjacent dims), and cos / sin of its angle times
// mscale. The angle pos * inv_freq is taken in double: it reaches thousands of radians at long contexts.
struct RopePair {
  int d0 = 0, d1 = 1;
  bool rotated = false;
  float cos_v = 1.0f, sin_v = 0.0f;
};

__device__ __forceinline__ RopePair rope_pair(int pair, int n_rot, bool neox, int64_t pos, const double* inv_freq,
                                              float mscale) {
  RopePair r;
  const int rot_pairs = n_rot / 2;
  r.rotated = pair < rot_pairs;
  r.d0 = 2 * pair;
  r.d1 = 2 * pair + 1;
  if (r.rotated) {
    double sin_d = 0.0, cos_d = 0.0;
    sincos(static_cast<double>(pos) * inv_freq[pair], &sin_d, &cos_d);
    r.cos_v = static_cast<float>(cos_d) * mscale;
    r.sin_v = static_cast<float>(sin_d) * mscale;
    if (neox) {
      r.d0 = pair;
      r.d1 = pair + rot_pairs;
    }
  }
  return r;
}

// (x0, x1) turned by the pair's angle (unchanged when the pair is not rotated).
__device__ __forceinline__ void rope_apply(const RopePair& r, float& x0, float& x1) {
  if (!r.rotated) return;
  const float r0 = x0 * r.cos_v - x1 * r.sin_v, r1 = x0 * r.sin_v + x1 * r.cos_v;
  x0 = r0;
  x1 = r1;
}

}  // namespace ga::cuda::detail
