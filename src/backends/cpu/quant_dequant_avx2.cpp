// AVX2 dequantization, bit-identical to the scalar dequantizer (and so to ggml).
//
// The prefill matmul decodes every weight tile to float once per call, so decoding speed matters
// for short prompts; the scalar loops run at 2-4 ns per weight, these at a fraction of that. Each
// group of 32 levels (quant_unpack_avx2.h) becomes scale * q - min with a separate multiply and
// subtract (never an FMA), the same two roundings as ggml's scalar code, so the results are
// identical bit for bit (test_quant_dequant checks this path and the scalar one).
#include "backends/cpu/fp_contract_off.h"  // first; GCC would fuse the intrinsic multiply and subtract

#include "backends/cpu/quant_kernels.h"

#if GA_CPU_AVX2

#include "backends/cpu/quant_unpack_avx2.h"

namespace ga::cpu::avx2 {
namespace {

using namespace blocks;

// 8 int8 levels -> floats
inline __m256 levels8(__m128i q) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)); }

template <typename Block>
void dequant_blocks(const Block* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    SimdUnpack<Block>::run(b[i], [&](const Group32& g) {
      const __m128i halves[2] = {_mm256_castsi256_si128(g.q), _mm256_extracti128_si256(g.q, 1)};
      for (int h = 0; h < 2; ++h) {
        const __m256 scale = _mm256_set1_ps(g.scale[h]);
        __m256 lo = _mm256_mul_ps(scale, levels8(halves[h]));
        __m256 hi = _mm256_mul_ps(scale, levels8(_mm_srli_si128(halves[h], 8)));
        if constexpr (SimdUnpack<Block>::kHasMin) {
          const __m256 min = _mm256_set1_ps(g.min[h]);
          lo = _mm256_sub_ps(lo, min);
          hi = _mm256_sub_ps(hi, min);
        }
        _mm256_storeu_ps(y + 16 * h, lo);
        _mm256_storeu_ps(y + 16 * h + 8, hi);
      }
      y += 32;
    });
  }
}

}  // namespace

bool dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::F16:
    case DType::BF16: {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, type == DType::F16 ? simd::f16x8_to_f32(bytes + 2 * i) : simd::bf16x8_to_f32(bytes + 2 * i));
      }
      for (; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        dst[i] = type == DType::F16 ? fp16_to_f32(bits) : bf16_to_f32(bits);
      }
      return true;
    }
    case DType::Q4_0: dequant_blocks(static_cast<const BlockQ4_0*>(src), dst, n / 32); return true;
    case DType::Q4_1: dequant_blocks(static_cast<const BlockQ4_1*>(src), dst, n / 32); return true;
    case DType::Q5_0: dequant_blocks(static_cast<const BlockQ5_0*>(src), dst, n / 32); return true;
    case DType::Q5_1: dequant_blocks(static_cast<const BlockQ5_1*>(src), dst, n / 32); return true;
    case DType::Q8_0: dequant_blocks(static_cast<const BlockQ8_0*>(src), dst, n / 32); return true;
    case DType::Q2_K: dequant_blocks(static_cast<const BlockQ2_K*>(src), dst, n / 256); return true;
    case DType::Q3_K: dequant_blocks(static_cast<const BlockQ3_K*>(src), dst, n / 256); return true;
    case DType::Q4_K: dequant_blocks(static_cast<const BlockQ4_K*>(src), dst, n / 256); return true;
    case DType::Q5_K: dequant_blocks(static_cast<const BlockQ5_K*>(src), dst, n / 256); return true;
    case DType::Q6_K: dequant_blocks(static_cast<const BlockQ6_K*>(src), dst, n / 256); return true;
    default: return false;
  }
}

}  // namespace ga::cpu::avx2

#endif  // GA_CPU_AVX2
