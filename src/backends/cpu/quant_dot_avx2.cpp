// AVX2/FMA dot products of one stored weight row with float32 activations.
//
// Activations stay float32. Quantized blocks are unpacked in registers into groups of 32 int8
// levels with a scale (and min) per 16 lanes (quant_unpack_avx2.h), then one kernel does the float
// work for every type: levels -> float, FMA with x into a per-sub-block vector, and one FMA by the
// sub-block scale into the running accumulator. The min term uses sum(x) per sub-block. All partial sums stay in 8-wide vectors and are reduced
// horizontally once per row, so the rounding error grows slowly with the row length.
//
// F32/F16/BF16 rows use four independent accumulators (32 values per iteration) to hide the FMA
// latency; F16 and BF16 are widened exactly (F16C, shift).
#include "backends/cpu/quant_kernels.h"

#if GA_CPU_AVX2

#include "backends/cpu/quant_unpack_avx2.h"
#include "gpu_accel/error.h"

namespace ga::cpu::avx2 {
namespace {

using namespace blocks;

// sum over lanes of q[0..16) * x[0..16), as 8 partial sums
inline __m256 qx16(__m128i q, const float* x) {
  const __m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_loadu_ps(x));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), _mm256_loadu_ps(x + 8), a);
}
inline __m256 sum16(const float* x) { return _mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)); }

// One row: every group of 32 levels is multiplied with its 32 activations, 16 lanes per scale.
// Two accumulator chains for the scaled products hide the FMA latency; a third takes the mins.
template <typename Block>
float dot_blocks(const Block* b, const float* x, int64_t nb) {
  __m256 acc_lo = _mm256_setzero_ps();
  __m256 acc_hi = _mm256_setzero_ps();
  __m256 acc_min = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    SimdUnpack<Block>::run(b[i], [&](const Group32& g) {
      acc_lo = _mm256_fmadd_ps(_mm256_set1_ps(g.scale[0]), qx16(_mm256_castsi256_si128(g.q), x), acc_lo);
      acc_hi = _mm256_fmadd_ps(_mm256_set1_ps(g.scale[1]), qx16(_mm256_extracti128_si256(g.q, 1), x + 16), acc_hi);
      if constexpr (SimdUnpack<Block>::kHasMin) {
        acc_min = _mm256_fmadd_ps(_mm256_set1_ps(g.min[0]), sum16(x), acc_min);
        acc_min = _mm256_fmadd_ps(_mm256_set1_ps(g.min[1]), sum16(x + 16), acc_min);
      }
      x += 32;
    });
  }
  return simd::hsum(_mm256_sub_ps(_mm256_add_ps(acc_lo, acc_hi), acc_min));
}

// Four accumulators over 32 values per step; `load(p, i)` widens 8 weights starting at index i.
template <typename Load, typename Scalar>
float dot_dense(const void* row, const float* x, int64_t n, Load load, Scalar scalar) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(load(row, i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(load(row, i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(load(row, i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(load(row, i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load(row, i), _mm256_loadu_ps(x + i), a0);
  float total = simd::hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) total += scalar(row, i) * x[i];
  return total;
}

uint16_t half_bits(const void* row, int64_t i) {
  uint16_t bits;
  std::memcpy(&bits, static_cast<const uint8_t*>(row) + 2 * i, 2);
  return bits;
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
  return dot_dense(
      a, b, n, [](const void* p, int64_t i) { return _mm256_loadu_ps(static_cast<const float*>(p) + i); },
      [](const void* p, int64_t i) { return static_cast<const float*>(p)[i]; });
}

float dot_row(DType type, const void* row, const float* x, int64_t n) {
  detail::checked_block_count("dot_row", type, n);
  switch (type) {
    case DType::F32: return dot_f32(static_cast<const float*>(row), x, n);
    case DType::F16:
      return dot_dense(
          row, x, n, [](const void* p, int64_t i) { return simd::f16x8_to_f32(static_cast<const uint16_t*>(p) + i); },
          [](const void* p, int64_t i) { return fp16_to_f32(half_bits(p, i)); });
    case DType::BF16:
      return dot_dense(
          row, x, n, [](const void* p, int64_t i) { return simd::bf16x8_to_f32(static_cast<const uint16_t*>(p) + i); },
          [](const void* p, int64_t i) { return bf16_to_f32(half_bits(p, i)); });
    case DType::Q4_0: return dot_blocks(static_cast<const BlockQ4_0*>(row), x, n / 32);
    case DType::Q4_1: return dot_blocks(static_cast<const BlockQ4_1*>(row), x, n / 32);
    case DType::Q5_0: return dot_blocks(static_cast<const BlockQ5_0*>(row), x, n / 32);
    case DType::Q5_1: return dot_blocks(static_cast<const BlockQ5_1*>(row), x, n / 32);
    case DType::Q8_0: return dot_blocks(static_cast<const BlockQ8_0*>(row), x, n / 32);
    case DType::Q2_K: return dot_blocks(static_cast<const BlockQ2_K*>(row), x, n / 256);
    case DType::Q3_K: return dot_blocks(static_cast<const BlockQ3_K*>(row), x, n / 256);
    case DType::Q4_K: return dot_blocks(static_cast<const BlockQ4_K*>(row), x, n / 256);
    case DType::Q5_K: return dot_blocks(static_cast<const BlockQ5_K*>(row), x, n / 256);
    case DType::Q6_K: return dot_blocks(static_cast<const BlockQ6_K*>(row), x, n / 256);
    default: GA_THROW(Unsupported, "dot_row: weight type ", traits(type).name, " is not supported on the CPU backend");
  }
}

}  // namespace ga::cpu::avx2

#endif  // GA_CPU_AVX2
