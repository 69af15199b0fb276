// Small per-row kernels of the architectures beyond Llama: per-head RMSNorm (Qwen3 / Gemma 3 q and k),
// soft-capping (Gemma 2 logits), row scaling (Gemma's embedding scale), row addition (the MoE shared
// expert's output) and the sigmoid gate of a row (Qwen2-MoE's shared expert).
//
// Same conventions as ops.h: device pointers, sizes and strides in elements, a params struct where there
// are many, the stream last, the launch status back; *_unsupported_reason says why parameters are refused.
// Every kernel is launched after the previous one with PDL (pdl.cuh) and reads its inputs after the wait.
// CPU references: cpu::rms_norm per head, cpu::softcap, the plain loops of backends/cpu/step_engine.cpp;
// tests/cuda/test_cuda_elementwise.cpp compares them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ga::cuda {

// In place, for each row r < n_rows and head h: x[r][h*head_dim .. +head_dim) = rmsnorm(that slice) *
// weight, for n_heads heads; the same for x2 / weight2 / n_heads2 when x2 is set (q and k in one launch).
struct HeadRmsNormParams {
  float* x = nullptr;
  int64_t ldx = 0;
  int64_t n_heads = 0;
  const float* weight = nullptr;  // [head_dim]
  float* x2 = nullptr;
  int64_t ldx2 = 0;
  int64_t n_heads2 = 0;
  const float* weight2 = nullptr;
  int64_t n_rows = 0;
  int64_t head_dim = 0;  // <= 1024
  float eps = 1e-6f;
};
const char* head_rms_norm_unsupported_reason(const HeadRmsNormParams& p);
cudaError_t head_rms_norm(const HeadRmsNormParams& p, cudaStream_t stream);

// x[r][i] = cap * tanh(x[r][i] / cap) for r < n_rows, i < n; cap > 0.
cudaError_t softcap_rows(float* x, int64_t ldx, int64_t n_rows, int64_t n, float cap, cudaStream_t stream);

// x[r][i] *= scale.
cudaError_t scale_rows(float* x, int64_t ldx, int64_t n_rows, int64_t n, float scale, cudaStream_t stream);

// x[r][i] += y[r][i].
cudaError_t add_rows(float* x, int64_t ldx, const float* y, int64_t ldy, int64_t n_rows, int64_t n,
                     cudaStream_t stream);

// y[r][0..n_y) *= sigmoid(gate . x[r][0..n_x)) (the dot in float, one block per row).
cudaError_t sigmoid_gate_rows(float* y, int64_t ldy, int64_t n_y, const float* gate, const float* x, int64_t ldx,
                              int64_t n_x, int64_t n_rows, cudaStream_t stream);

// ---- RWKV's row-wise ops (step_ops.h: LayerNormOp, GroupNormOp, MixOp, Unary, mul, add_vec, lerp_to) ----

// out[r] = (x - mean) / sqrt(var + eps) per group of n / groups columns, then * weight + bias over all n columns
// (weight and bias both null: none). groups = 1 is a LayerNorm. out may alias x.
struct GroupNormParams {
  const float* x = nullptr;
  int64_t ldx = 0;
  float* out = nullptr;
  int64_t ld_out = 0;
  const float* weight = nullptr;  // [n]
  const float* bias = nullptr;    // [n]
  int64_t n_rows = 0, n = 0, groups = 1;
  float eps = 1e-5f;
};
const char* group_norm_unsupported_reason(const GroupNormParams& p);
cudaError_t group_norm_rows(const GroupNormParams& p, cudaStream_t stream);

// x = fn(x) element-wise (step::Unary's functions, the same formulas as the CPU's).
enum class RowUnary { kSigmoid, kTanh, kSilu, kReluSquare, kExpNegExp, kV7Decay };
cudaError_t unary_rows(float* x, int64_t ldx, int64_t n_rows, int64_t n, RowUnary fn, cudaStream_t stream);

// x[r][i] *= y[r][i].
cudaError_t mul_rows(float* x, int64_t ldx, const float* y, int64_t ldy, int64_t n_rows, int64_t n,
                     cudaStream_t stream);

// x[r][i] += b[i].
cudaError_t add_vector_rows(float* x, int64_t ldx, const float* b, int64_t n_rows, int64_t n, cudaStream_t stream);

// x[r][i] += (target[r][i] - x[r][i]) * t[r][i].
cudaError_t lerp_rows(float* x, int64_t ldx, const float* target, int64_t ld_target, const float* t, int64_t ld_t,
                      int64_t n_rows, int64_t n, cudaStream_t stream);

// The token-shift interpolation: complement (RWKV 4/5) out = x * m + (prev - prev * m); otherwise (RWKV 6/7)
// out = x + (prev - x) * (m + dyn), dyn null: 0.
struct MixParams {
  const float* x = nullptr;
  int64_t ldx = 0;
  const float* prev = nullptr;
  int64_t ld_prev = 0;
  const float* mix = nullptr;  // [n]
  const float* dyn = nullptr;
  int64_t ld_dyn = 0;
  float* out = nullptr;
  int64_t ld_out = 0;
  int64_t n_rows = 0, n = 0;
  bool complement = false;
};
cudaError_t mix_rows(const MixParams& p, cudaStream_t stream);

// Several mixes of one x and prev in one pass (RWKV 6/7's five or six token-shift mixes: each element of x and
// prev read once, one launch). The mixes must agree on x, prev, their strides, the form and the sizes.
constexpr int kMaxMixes = 6;
struct MixManyParams {
  MixParams mix[kMaxMixes];
  int count = 0;
};
cudaError_t mix_rows_many(const MixManyParams& p, cudaStream_t stream);

// x[r][i] = fn(x[r][i] + b[i]): add_vector_rows and unary_rows in one pass.
cudaError_t add_vector_unary_rows(float* x, int64_t ldx, const float* b, int64_t n_rows, int64_t n, RowUnary fn,
                                  cudaStream_t stream);

}  // namespace ga::cuda
