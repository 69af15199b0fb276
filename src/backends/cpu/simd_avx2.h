// Small AVX2/FMA/F16C helpers shared by the CPU kernels.
//
// GA_CPU_AVX2 is 1 when the compiler targets AVX2 + FMA + F16C (the build uses -march=native);
// kernels test it at compile time so a build for an older CPU still compiles and falls back to
// the portable scalar code. Nothing here is selected at run time: the binary is built for the
// machine it runs on.
#pragma once

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define GA_CPU_AVX2 1
#include <immintrin.h>

#include <cstdint>

namespace ga::cpu::simd {

// Sum of the 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 int8 values -> 8 floats.
inline __m256 i8x8_to_f32(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// 8 fp16 values (unaligned bytes) -> 8 floats (exact, F16C).
inline __m256 f16x8_to_f32(const void* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

// 8 bf16 values (unaligned bytes) -> 8 floats (exact: bf16 is the top half of a float).
inline __m256 bf16x8_to_f32(const void* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

}  // namespace ga::cpu::simd
#else
#define GA_CPU_AVX2 0
#endif
