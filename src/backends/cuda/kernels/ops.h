// Element-wise and per-row kernels of the model forward pass on the GPU: embedding gather,
// RMSNorm fused with the residual add, RoPE, SwiGLU and argmax.
//
// Pure entry points (DESIGN.md): raw device pointers, explicit sizes and strides (in elements), a
// params struct, the stream last; they never allocate and return the launch status
// (cudaErrorInvalidValue for parameters the matching *_unsupported_reason() rejects, which says why).
// Each op mirrors a CPU reference in backends/cpu/ops.h and is tested against it in
// tests/cuda/test_cuda_ops.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/weight_layout.h"
#include "gpu_accel/dtype.h"

namespace ga::cuda {

// out[i][0..n_cols) = dequantized row ids[i] of W, for any weight type the GEMV reads. Bit-exact
// with ga::cpu::dequantize_row. An id outside [0, n_rows_w) yields a row of NaN (a kernel cannot throw;
// NaN makes the bad token visible at once).
struct EmbeddingParams {
  DType type = DType::F32;
  const void* w = nullptr;        // [n_rows_w][n_cols] of `type`, row_stride bytes apart, 16-byte aligned
  int64_t n_rows_w = 0;
  int64_t n_cols = 0;
  int64_t row_stride = 0;         // bytes
  const int32_t* ids = nullptr;   // [n_ids], device memory
  int64_t n_ids = 0;
  float* out = nullptr;           // [n_ids][n_cols], ld_out floats between rows
  int64_t ld_out = 0;
  WeightLayout layout = WeightLayout::kGguf;  // kSplitRows: w was repacked by split_rows_in_place
};
const char* embedding_unsupported_reason(const EmbeddingParams& p);
cudaError_t embedding(const EmbeddingParams& p, cudaStream_t stream);

// For each row: when `residual` is set, residual += x (the skip connection) and the norm is taken of
// the sum; else of x. out = v / sqrt(mean(v^2) + eps) * weight. One kernel, one pass over memory
// (the reference is cpu::add_inplace followed by cpu::rms_norm). out may alias x.
struct RmsNormParams {
  const float* x = nullptr;  // [n_rows][n], ldx
  float* residual = nullptr; // [n_rows][n], ld_residual; nullptr: no residual add
  const float* weight = nullptr;  // [n]
  float* out = nullptr;      // [n_rows][n], ld_out
  int64_t n_rows = 0;
  int64_t n = 0;
  int64_t ldx = 0;
  int64_t ld_residual = 0;
  int64_t ld_out = 0;
  float eps = 1e-5f;
  // Optional: out also rounded to the int8 GEMV's activations (gemv.h: gemv_x_int8_bytes(n, n_rows) bytes, the
  // GemvParams::x_int8 of the projections that read out), in the same kernel: the q/k/v, gate/up and classifier
  // GEMVs then skip their per-CTA quantization. Needs n a multiple of 32 and at most 8192, x / out / weight /
  // residual 16-byte aligned and their strides multiples of 4 (the register path).
  void* out_int8 = nullptr;
  // Optional: out also rounded to the FP8 GEMV's two E4M3 digits (gemv.h: gemv_x_e4m3x2_bytes(n, n_rows) bytes, the
  // GemvParams::x_e4m3x2 of the F8_B128 projections that read out; the bytes of quantize_x_e4m3x2, x_fp8.h). Needs n
  // a multiple of 128 and at most 8192 and the register path's alignment, as out_int8.
  void* out_e4m3x2 = nullptr;
};
const char* rms_norm_unsupported_reason(const RmsNormParams& p);
cudaError_t rms_norm(const RmsNormParams& p, cudaStream_t stream);

enum class RopeStyle {
  Normal,  // rotate (x[2i], x[2i+1]): llama.cpp "normal" (GGUF llama)
  NeoX,    // rotate (x[i], x[i + n_rot/2]): Hugging Face rotate_half (qwen2, ...)
};

// In-place rotary embedding of the first n_rot dims of each head; dims >= n_rot pass through.
// Pair i of token t turns by theta = positions[t] * freq_scale * freq_base^(-2i/n_rot) / freq_factors[i],
// computed in double (positions reach 10^5-10^6 radians-ish products at long context). Llama-3
// scaling is expressed through freq_factors (GGUF rope_freqs), linear scaling through freq_scale.
struct RopeParams {
  float* x = nullptr;                  // [n_tokens][n_heads][head_dim], token_stride / head_stride floats
  int64_t n_tokens = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_rot = 0;                   // even, <= head_dim
  int64_t token_stride = 0;
  int64_t head_stride = 0;
  const int32_t* positions = nullptr;  // [n_tokens], device memory
  RopeStyle style = RopeStyle::Normal;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;             // 1 / linear scaling factor
  const float* freq_factors = nullptr; // [n_rot/2] divisors of each frequency, device memory; nullptr: none
};
const char* rope_unsupported_reason(const RopeParams& p);
cudaError_t rope(const RopeParams& p, cudaStream_t stream);

enum class GluActivation {
  kSilu,      // silu(g) = g / (1 + exp(-g)): SwiGLU
  kGeluTanh,  // 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))): GeGLU (Gemma's gelu_pytorch_tanh)
};

// out[r][i] = act(gate[r][i]) * up[r][i] (act: SiLU, or GELU-tanh). out may alias gate or up.
struct SwigluParams {
  const float* gate = nullptr;  // [n_rows][n], ld_gate
  const float* up = nullptr;    // [n_rows][n], ld_up
  float* out = nullptr;         // [n_rows][n], ld_out
  int64_t n_rows = 0;
  int64_t n = 0;
  int64_t ld_gate = 0;
  int64_t ld_up = 0;
  int64_t ld_out = 0;
  GluActivation act = GluActivation::kSilu;
  // Optional: out also rounded to the int8 GEMV's activations (gemv.h: gemv_x_int8_bytes(n, n_rows) bytes,
  // the GemvParams::x_int8 of the projection that reads out), in the same kernel: the down projection of a
  // Q8_0 model then skips its per-CTA quantization. Needs n a multiple of 32, gate/up/out 16-byte aligned
  // and their strides multiples of 4.
  void* out_int8 = nullptr;
  // Optional: out also rounded to the FP8 GEMV's two E4M3 digits (gemv_x_e4m3x2_bytes(n, n_rows) bytes, the bytes
  // of quantize_x_e4m3x2, x_fp8.h): an F8_B128 down projection then needs no pre-pass. Needs n a multiple of 128,
  // gate/up/out 16-byte aligned and their strides multiples of 4. Not with out_int8.
  void* out_e4m3x2 = nullptr;
};
const char* swiglu_unsupported_reason(const SwigluParams& p);
cudaError_t swiglu(const SwigluParams& p, cudaStream_t stream);

// out[r] = the index of the largest of x[r][0..n) (the first one on ties; NaN never wins).
struct ArgmaxParams {
  const float* x = nullptr;  // [n_rows][n], ldx
  int64_t n_rows = 0;
  int64_t n = 0;
  int64_t ldx = 0;
  int32_t* out = nullptr;    // [n_rows], device memory
  // Optional ([n_rows] each): the largest value (-inf when the row has no value above -inf that is not NaN) and
  // 1 when the row holds a NaN, else 0: what a greedy sampler needs to know that the index is its answer.
  float* out_max = nullptr;
  int32_t* out_nan = nullptr;
};
const char* argmax_unsupported_reason(const ArgmaxParams& p);
cudaError_t argmax(const ArgmaxParams& p, cudaStream_t stream);

}  // namespace ga::cuda
