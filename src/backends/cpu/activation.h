// The scalar activation functions of the CPU backend, in one place: the forward's GLUs (ops.cpp), the
// recurrent step's unary ops (step_engine.cpp) and the tensor-ops library (src/ops) all call these, so the
// library's results are the engine's to the bit. float32 in, float32 out; no vectorisation (a reference).
#pragma once

#include <cmath>

namespace ga::cpu {

inline constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi), gelu_tanh's scale
inline constexpr float kGeluCubic = 0.044715f;              // gelu_tanh's cubic coefficient
inline constexpr float kInvSqrt2 = 0.7071067811865476f;     // 1 / sqrt(2), the exact GELU's erf argument

inline float relu(float x) {
  return x > 0.0f ? x : 0.0f;
}
inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
// PyTorch's gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh.
inline float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}
// The exact GELU (torch.nn.functional.gelu's default).
inline float gelu(float x) {
  return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
}

}  // namespace ga::cpu
