// In-register AVX2 unpacking of every quantized block type into groups of 32 int8 levels.
//
// Why one shared unpacker: the AVX2 dot (quant_dot_avx2.cpp) and the AVX2 dequantizer
// (quant_dequant_avx2.cpp) need exactly the same bit fiddling, so each type's layout is decoded
// in one place. A block is visited as consecutive groups of 32 weights; weight l of a group is
// scale[l / 16] * q[l] - min[l / 16] (types with one scale per 32 weights repeat it). The scale
// and min floats are formed exactly as ggml's scalar dequantizer forms them (d * sc, dmin * m), so
// a multiply followed by a subtract reproduces ggml's values bit for bit.
//
// Levels never go through memory: writing bytes and reading them back as wider vectors would stall
// store-to-load forwarding.
#pragma once

#include "backends/cpu/simd_avx2.h"

#if GA_CPU_AVX2

#include "backends/cpu/quant_blocks.h"

namespace ga::cpu::avx2 {

struct Group32 {
  __m256i q;       // 32 int8 levels
  float scale[2];  // lanes 0..15, 16..31
  float min[2];    // subtracted; zero for types without a min
};

namespace unpack {

inline __m256i low_nibbles() { return _mm256_set1_epi8(0x0F); }

// 16 packed bytes -> 32 levels: low nibbles in lanes 0..15, high nibbles in lanes 16..31
inline __m256i nibbles32(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), low_nibbles());
}

// bit i of the 32-bit word -> 0x10 in byte i (the 5th bit of Q5_0/Q5_1 levels)
inline __m256i fifth_bits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                                0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Shifts every 16-bit lane right by a run-time count (bits crossing into a byte are masked later).
inline __m256i shift_right(__m256i v, int count) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(count)); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

}  // namespace unpack

// SimdUnpack<Block>::run(block, f) calls f(const Group32&) for the block's groups in order.
template <typename Block>
struct SimdUnpack;

template <>
struct SimdUnpack<blocks::BlockQ4_0> {
  static constexpr int kN = 32;
  static constexpr bool kHasMin = false;
  template <typename F>
  static void run(const blocks::BlockQ4_0& b, F&& f) {
    const float d = blocks::half(b.d);
    f(Group32{_mm256_sub_epi8(unpack::nibbles32(b.qs), _mm256_set1_epi8(8)), {d, d}, {0.0f, 0.0f}});
  }
};

template <>
struct SimdUnpack<blocks::BlockQ4_1> {
  static constexpr int kN = 32;
  static constexpr bool kHasMin = true;
  template <typename F>
  static void run(const blocks::BlockQ4_1& b, F&& f) {
    const float d = blocks::half(b.d);
    const float m = -blocks::half(b.m);  // weight = d*q + m = d*q - (-m), the same float
    f(Group32{unpack::nibbles32(b.qs), {d, d}, {m, m}});
  }
};

template <>
struct SimdUnpack<blocks::BlockQ5_0> {
  static constexpr int kN = 32;
  static constexpr bool kHasMin = false;
  template <typename F>
  static void run(const blocks::BlockQ5_0& b, F&& f) {
    const float d = blocks::half(b.d);
    const __m256i q = _mm256_or_si256(unpack::nibbles32(b.qs), unpack::fifth_bits(blocks::load_u32(b.qh)));
    f(Group32{_mm256_sub_epi8(q, _mm256_set1_epi8(16)), {d, d}, {0.0f, 0.0f}});
  }
};

template <>
struct SimdUnpack<blocks::BlockQ5_1> {
  static constexpr int kN = 32;
  static constexpr bool kHasMin = true;
  template <typename F>
  static void run(const blocks::BlockQ5_1& b, F&& f) {
    const float d = blocks::half(b.d);
    const float m = -blocks::half(b.m);
    f(Group32{_mm256_or_si256(unpack::nibbles32(b.qs), unpack::fifth_bits(blocks::load_u32(b.qh))), {d, d}, {m, m}});
  }
};

template <>
struct SimdUnpack<blocks::BlockQ8_0> {
  static constexpr int kN = 32;
  static constexpr bool kHasMin = false;
  template <typename F>
  static void run(const blocks::BlockQ8_0& b, F&& f) {
    const float d = blocks::half(b.d);
    f(Group32{unpack::load256(b.qs), {d, d}, {0.0f, 0.0f}});
  }
};

// Q2_K: half h, plane p (bits 2p of qs[32h + l]) = sub-blocks 8h + 2p and 8h + 2p + 1.
template <>
struct SimdUnpack<blocks::BlockQ2_K> {
  static constexpr int kN = 256;
  static constexpr bool kHasMin = true;
  template <typename F>
  static void run(const blocks::BlockQ2_K& b, F&& f) {
    const float d = blocks::half(b.d);
    const float dmin = blocks::half(b.dmin);
    const __m256i mask = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i v = unpack::load256(b.qs + 32 * h);
      for (int p = 0; p < 4; ++p) {
        const int s = 8 * h + 2 * p;
        f(Group32{_mm256_and_si256(unpack::shift_right(v, 2 * p), mask),
                  {d * static_cast<float>(b.scales[s] & 0xF), d * static_cast<float>(b.scales[s + 1] & 0xF)},
                  {dmin * static_cast<float>(b.scales[s] >> 4), dmin * static_cast<float>(b.scales[s + 1] >> 4)}});
      }
    }
  }
};

// Q3_K: like Q2_K; the third bit of plane (h, p) is bit 4h + p of hmask[l]; level = low - 4 unless set.
template <>
struct SimdUnpack<blocks::BlockQ3_K> {
  static constexpr int kN = 256;
  static constexpr bool kHasMin = false;
  template <typename F>
  static void run(const blocks::BlockQ3_K& b, F&& f) {
    const float d = blocks::half(b.d);
    int8_t sc[16];
    blocks::q3k_scales(b.scales, sc);
    const __m256i mask = _mm256_set1_epi8(3);
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i hm = unpack::load256(b.hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i v = unpack::load256(b.qs + 32 * h);
      for (int p = 0; p < 4; ++p) {
        const int s = 8 * h + 2 * p;
        const __m256i low = _mm256_and_si256(unpack::shift_right(v, 2 * p), mask);
        const __m256i high = _mm256_and_si256(unpack::shift_right(hm, 4 * h + p), one);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 2)), _mm256_set1_epi8(4));
        f(Group32{q, {d * static_cast<float>(sc[s]), d * static_cast<float>(sc[s + 1])}, {0.0f, 0.0f}});
      }
    }
  }
};

// Q4_K / Q5_K: group 2g = low nibbles of qs[32g + l], group 2g + 1 = high nibbles; Q5_K adds bit
// 2g / 2g + 1 of qh[l] as the 5th bit.
template <typename Block, bool FifthBit>
struct SimdUnpackK45 {
  static constexpr int kN = 256;
  static constexpr bool kHasMin = true;
  template <typename F>
  static void run(const Block& b, F&& f) {
    const float d = blocks::half(b.d);
    const float dmin = blocks::half(b.dmin);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (FifthBit) qh = unpack::load256(b.qh);
    for (int g = 0; g < 4; ++g) {
      const __m256i v = unpack::load256(b.qs + 32 * g);
      for (int part = 0; part < 2; ++part) {
        const int s = 2 * g + part;
        __m256i q = _mm256_and_si256(part == 0 ? v : _mm256_srli_epi16(v, 4), unpack::low_nibbles());
        if constexpr (FifthBit) {
          const __m256i bit = _mm256_and_si256(_mm256_slli_epi16(unpack::shift_right(qh, s), 4), _mm256_set1_epi8(0x10));
          q = _mm256_or_si256(q, bit);
        }
        const auto [scale, min] = blocks::k4_factors(s, b.scales, d, dmin);
        f(Group32{q, {scale, scale}, {min, min}});
      }
    }
  }
};
template <>
struct SimdUnpack<blocks::BlockQ4_K> : SimdUnpackK45<blocks::BlockQ4_K, false> {};
template <>
struct SimdUnpack<blocks::BlockQ5_K> : SimdUnpackK45<blocks::BlockQ5_K, true> {};

// Q6_K: half h, k = 0..3: nibble from ql[64h + 32(k & 1) + l] (low for k < 2, high otherwise) and
// 2 bits at 2k of qh[32h + l]; minus 32. Sub-blocks 8h + 2k and 8h + 2k + 1.
template <>
struct SimdUnpack<blocks::BlockQ6_K> {
  static constexpr int kN = 256;
  static constexpr bool kHasMin = false;
  template <typename F>
  static void run(const blocks::BlockQ6_K& b, F&& f) {
    const float d = blocks::half(b.d);
    const __m256i mask2 = _mm256_set1_epi8(3);
    const __m256i bias = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = unpack::load256(b.ql + 64 * h);
      const __m256i ql1 = unpack::load256(b.ql + 64 * h + 32);
      const __m256i qh = unpack::load256(b.qh + 32 * h);
      const __m256i nib[4] = {_mm256_and_si256(ql0, unpack::low_nibbles()),
                              _mm256_and_si256(ql1, unpack::low_nibbles()),
                              _mm256_and_si256(_mm256_srli_epi16(ql0, 4), unpack::low_nibbles()),
                              _mm256_and_si256(_mm256_srli_epi16(ql1, 4), unpack::low_nibbles())};
      for (int k = 0; k < 4; ++k) {
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(unpack::shift_right(qh, 2 * k), mask2), 4);
        const int s = 8 * h + 2 * k;
        f(Group32{_mm256_sub_epi8(_mm256_or_si256(nib[k], high), bias),
                  {d * static_cast<float>(b.scales[s]), d * static_cast<float>(b.scales[s + 1])},
                  {0.0f, 0.0f}});
      }
    }
  }
};

}  // namespace ga::cpu::avx2

#endif  // GA_CPU_AVX2
