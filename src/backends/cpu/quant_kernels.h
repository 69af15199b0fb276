// Internal entry points shared by the CPU quant files (not part of the quant.h contract).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/simd_avx2.h"
#include "gpu_accel/dtype.h"

namespace ga::cpu {

#if GA_CPU_AVX2
namespace avx2 {
// AVX2/FMA dot of one stored row with float activations (quant_dot_avx2.cpp).
float dot_row(DType type, const void* row, const float* x, int64_t n);
// Bit-exact AVX2 dequantization of n (already validated) elements; false for types it does not
// handle (the caller falls back to the scalar code).
bool dequantize_row(DType type, const void* src, float* dst, int64_t n);
// Plain float dot with 4 independent 8-wide accumulators; any n.
float dot_f32(const float* a, const float* b, int64_t n);
}  // namespace avx2
#endif

namespace detail {
// The number of blocks in n elements of `type`, after the check every row entry point makes: n must be
// non-negative and a multiple of the type's block size, else InvalidArgument names `entry` (the caller,
// e.g. "dot_row"), n, the type and its block size.
int64_t checked_block_count(const char* entry, DType type, int64_t n);

// The best available float32 dot (AVX2 when compiled for it).
float dot_f32(const float* a, const float* b, int64_t n);

// K-quant reference quantizers (quant_quantize_k.cpp): n_blocks super-blocks of 256 floats.
void quantize_q2_k(const float* x, void* dst, int64_t n_blocks);
void quantize_q3_k(const float* x, void* dst, int64_t n_blocks);
void quantize_q4_k(const float* x, void* dst, int64_t n_blocks);
void quantize_q5_k(const float* x, void* dst, int64_t n_blocks);
void quantize_q6_k(const float* x, void* dst, int64_t n_blocks);

// FP4 reference quantizers (quant_quantize_fp4.cpp): n_blocks blocks of 32 (MXFP4) or 64 (NVFP4) floats.
void quantize_mxfp4(const float* x, void* dst, int64_t n_blocks);
void quantize_nvfp4(const float* x, void* dst, int64_t n_blocks);
// F8_B128 (quant_quantize_fp8.cpp): n_blocks blocks of 128 floats, each scaled by its own amax / 448.
void quantize_f8_b128(const float* x, void* dst, int64_t n_blocks);

// The signed value of largest magnitude of x[0..n) (the first one on ties; 0 when all are 0): the
// reference quantizers map it to the extreme level.
inline float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// llama.cpp's nearest_int: round half to even via the 1.5 * 2^23 trick (valid for |v| < 2^22).
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  uint32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return static_cast<int>(bits & 0x007fffffu) - 0x00400000;
}
}  // namespace detail

}  // namespace ga::cpu
