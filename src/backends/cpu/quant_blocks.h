// Block layouts of the ggml weight types, shared by the CPU dequantize / quantize / dot kernels.
//
// The structs mirror the bytes of a GGUF tensor exactly (ggml's ggml-common.h defines the same
// layouts): scales are stored as raw fp16 bit patterns, never as float, so a block can be read
// straight out of a memory-mapped file. Every struct is checked against the type size that
// dtype.h publishes, so a layout slip fails at compile time instead of corrupting weights.
//
// The small decoders of packed scale fields live here too, because the dequantizer, the scalar
// dot and the AVX2 dot must agree on them bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "gpu_accel/dtype.h"

namespace ga::cpu::blocks {

inline constexpr int kQK = 32;    // weights per block of the classic types (Q4_0 ... Q8_0)
inline constexpr int kQKK = 256;  // weights per super-block of the K-quants

// d: scale. Weight j = d * (nibble_j - 8); nibble j < 16 is the low half of qs[j], j >= 16 the high half.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// Weight j = d * nibble_j + m.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
// 5-bit: the 5th bit of weight j is bit j of the little-endian 32-bit qh. Weight = d * (q - 16).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Weight = d * q + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Weight = d * qs[j].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

// 16 sub-blocks of 16: scales[s] = 4-bit scale | 4-bit min << 4. Weight = d*sc*q - dmin*m, q in 0..3.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};
// 16 sub-blocks of 16 with 6-bit signed scales packed into 12 bytes; q = 2 low bits + 1 high bit (hmask).
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32 with 6-bit scales and mins packed into 12 bytes. Weight = d*sc*q - dmin*m.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
// Like Q4_K plus a 5th bit per weight in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// 16 sub-blocks of 16 with int8 scales; q = 4 low bits (ql) + 2 high bits (qh), weight = d*sc*(q - 32).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};

// MXFP4: e is an E8M0 exponent (scale 2^(e-127)); weight j = kvalues_fp4[nibble_j] * 2^(e-128)
// (the table holds doubled E2M1 values); nibble j < 16 is the low half of qs[j], j >= 16 the high half.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};

// NVFP4: 64 weights in 4 sub-blocks of 16, each with a UE4M3 scale d[s]; sub-block s uses
// qs[8s .. 8s+8), low nibbles for its first 8 weights, high nibbles for the last 8.
inline constexpr int kQKNV = 64;
inline constexpr int kQKNVSub = 16;
struct BlockNVFP4 {
  uint8_t d[kQKNV / kQKNVSub];
  uint8_t qs[kQKNV / 2];
};

// F8_B128 (gpu_accel's own, not a ggml type): 128 FP8 E4M3 codes and the float32 scale they share;
// weight j = e4m3(qs[j]) * d. The scale's bytes, not a float member, so that blocks need no alignment.
inline constexpr int kQKF8 = 128;
struct BlockF8B128 {
  uint8_t d[4];
  uint8_t qs[kQKF8];
};
inline float f8_block_scale(const BlockF8B128& b) {
  float d;
  std::memcpy(&d, b.d, 4);
  return d;
}

static_assert(sizeof(BlockF8B128) == 132);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockNVFP4) == 36);
// Blocks are read at arbitrary byte offsets (Q5_0 is 22 bytes): only 2-byte alignment is assumed.
static_assert(alignof(BlockQ5_0) <= 2 && alignof(BlockQ3_K) <= 2 && alignof(BlockQ6_K) <= 2);

inline float half(uint16_t h) { return fp16_to_f32(h); }

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
// Sub-blocks 0..3 keep their low 6 bits in bytes 0..3 (scales) and 4..7 (mins); 4..7 keep their
// low 4 bits in bytes 8..11 and borrow the top 2 bits of bytes 0..7.
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Sub-block j's float factors in a Q4_K / Q5_K super-block with super-block scales d and dmin:
// weight = scale * level - min. Each is one float product, as in ggml's dequantization.
struct ScaleMin {
  float scale;
  float min;
};
inline ScaleMin k4_factors(int j, const uint8_t* scales, float d, float dmin) {
  uint8_t sc, m;
  k4_scale_min(j, scales, &sc, &m);
  return {d * static_cast<float>(sc), dmin * static_cast<float>(m)};
}

// Q3_K: the 16 signed 6-bit scales (already minus 32) from the 12 packed bytes.
// Bytes 0..7 hold the low 4 bits (sub-block j < 8 in the low nibble of byte j, j >= 8 in the high
// nibble of byte j-8); bytes 8..11 hold the top 2 bits, sub-block j at bits 2*(j/4) of byte 8 + j%4.
inline void q3k_scales(const uint8_t* packed, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

// E2M1 levels times two (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, doubled to integers), as
// ggml's kvalues_mxfp4; the block scales below are halved to compensate.
inline constexpr int8_t kFp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Half of the E8M0 scale 2^(e-127), i.e. 2^(e-128), exactly as ggml_e8m0_to_fp32_half (e = 0, 1 give
// the float subnormals 2^-128, 2^-127; e = 255 is not treated as NaN).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return f32_from_bits(bits);
}

// Half of a UE4M3 scale, exactly as ggml_ue4m3_to_fp32: the sign bit is ignored, 0 and 0x7F decode to
// 0, exponent 0 is subnormal (m * 2^-9), otherwise (1 + m/8) * 2^(e-7). Every result is exact in float.
inline float ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int e = (x >> 3) & 0xF;
  const int m = x & 0x7;
  // (e == 0 ? m * 2^-9 : (8 + m) * 2^(e-10)), halved; both products are exact
  const float raw = e == 0 ? static_cast<float>(m) * 0x1p-9f : static_cast<float>(8 + m) * f32_from_bits(static_cast<uint32_t>(e - 10 + 127) << 23);
  return raw * 0.5f;
}

}  // namespace ga::cpu::blocks
