// CPU reference kernels for every supported weight type: dequantize, quantize, dot products and
// the matrix-vector / matrix-matrix product used by the forward pass.
//
// Activations stay float32 (we do not quantize them as llama.cpp does), so results match a float64
// reference to float32 rounding. Each kernel has a portable scalar version that is always built and
// tested, and an AVX2/FMA version selected at compile time where the compiler targets it.
#pragma once

#include <cstdint>

#include "gpu_accel/dtype.h"

namespace ga {
class ThreadPool;
}

namespace ga::cpu {

// dst[0..n) = the float values of n elements of `type` at src. n must be a multiple of the block size.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Quantizes n floats into `type` with llama.cpp's reference rounding (quantize_row_*_ref), so files
// we write load in llama.cpp and vice versa. n must be a multiple of the block size.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// FP8 E4M3 under a shared float32 scale (quant_quantize_fp8.cpp), the one quantizer of F8_B128 blocks and of
// `quantize ... fp8` checkpoints: e4m3_group_scale(amax) is amax / 448 (1 for an all-zero group), so nothing
// saturates; codes[i] = e4m3(x[i] / scale), rounded to nearest even.
inline constexpr float kE4m3Max = 448.0f;
float e4m3_group_scale(float amax);
void quantize_e4m3(const float* x, int64_t n, float scale, uint8_t* codes);

// sum_i w[i] * x[i] for one row of n elements of `type`.
float dot_row(DType type, const void* row, const float* x, int64_t n);

// Portable versions (always compiled), for tests of the SIMD paths.
namespace scalar {
float dot_row(DType type, const void* row, const float* x, int64_t n);
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
}

// A 2-D weight matrix in its stored type: `rows` rows of `cols` elements, each row_stride bytes apart.
struct MatrixRef {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t row_stride = 0;  // bytes; row_bytes(type, cols) for a dense matrix
};

// y[t][r] = sum_k W[r][k] * x[t][k] for t < n_tokens, r < rows.
// x: [n_tokens][cols] with row stride ldx floats; y: [n_tokens][rows] with row stride ldy floats.
// Rows are split over the pool's threads. For several tokens, each weight block is decoded once and
// used for every token (the prefill path), so the weight bytes are read once per call.
void matmul(const MatrixRef& w, const float* x, int64_t n_tokens, int64_t ldx, float* y, int64_t ldy,
            ThreadPool* pool);

}  // namespace ga::cpu
