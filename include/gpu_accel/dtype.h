// Tensor element types (the GGUF/ggml type ids) and their block layouts.
//
// Quantized types store weights in blocks: `block_size` weights take `type_size` bytes. A row of
// n weights (n a multiple of block_size) takes n / block_size * type_size bytes. The numeric ids
// are the ones written in GGUF files, so they never change.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace ga {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  // 4, 5: removed Q4_2/Q4_3, never valid
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,  // OCP MX: 32 E2M1 weights share one E8M0 (power of two) scale
  NVFP4 = 40,  // NVIDIA: 64 E2M1 weights, one UE4M3 scale per 16
  // Types only gpu_accel makes in memory (never in a GGUF file: their ids start at kFirstInternalDTypeId).
  F8_B128 = 1000,  // 128 FP8 E4M3 weights times one float32 scale: an FP8 checkpoint's weights as they ship
  // Bare FP8 E4M3 codes, one byte each: the FP8 KV cache's (its float scales, one per position and KV head, live
  // beside the codes: backends/cpu/kv_pool.h). Never a weight type.
  F8_E4M3 = 1001,
};
inline constexpr uint32_t kFirstInternalDTypeId = 1000;
// Whether a type can be stored in a GGUF file (every ggml type; not gpu_accel's in-memory ones).
inline bool is_gguf_type(DType t) { return static_cast<uint32_t>(t) < kFirstInternalDTypeId; }

struct DTypeTraits {
  DType type;
  const char* name;      // "Q4_K", as llama.cpp prints it
  uint32_t block_size;   // weights per block (1 for scalar types)
  uint32_t type_size;    // bytes per block
  bool quantized;
  bool supported;        // gpu_accel can dequantize it (others load as an Unsupported error)
};

// Traits of a type id read from a file; nullopt for an id that is not a known ggml type.
std::optional<DTypeTraits> dtype_traits(uint32_t id);
// Traits of a known type (throws Internal for an unknown enum value).
const DTypeTraits& traits(DType type);
const char* dtype_name(DType type);
// Parses "q4_k", "Q4_K", "f16", ... ; nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name);
// Bytes of a row of n elements; throws InvalidArgument if n is not a multiple of the block size.
uint64_t row_bytes(DType type, uint64_t n);

// ---- scalar half-precision conversions (bit-exact, portable) ----

inline float f32_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t bits_from_f32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// IEEE binary16 -> float (exact for every input, including subnormals, inf and NaN).
// The plain floating-point types (one element per "block"): F32, F16, BF16.
inline bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: value = mant * 2^-24, exact in float
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> IEEE binary16, round to nearest even (as the F16C instruction and ggml do).
uint16_t f32_to_fp16(float f);

// bfloat16 is the top half of a float.
inline float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }
// Round to nearest even; NaN stays a quiet NaN (same rule as ggml_compute_fp32_to_bf16).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = bits_from_f32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// ---- FP8 E4M3 (OCP "E4M3FN", torch.float8_e4m3fn) ----
// Sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 (0x7F, 0xFF) is NaN;
// largest finite 448. Code e > 0: (-1)^s * 2^(e-7) * (1 + m/8); e == 0: (-1)^s * 2^-6 * m/8.

// Exact for every code (every E4M3 value is a float).
inline float e4m3_to_f32(uint8_t b) {
  const uint32_t e = (b >> 3) & 0xfu;
  const uint32_t m = b & 0x7u;
  float mag;
  if (e == 15 && m == 7) {
    mag = f32_from_bits(0x7fc00000u);
  } else if (e == 0) {
    mag = static_cast<float>(m) * 0x1p-9f;  // m * 2^-9, exact
  } else {
    mag = f32_from_bits((e + 120u) << 23 | (m << 20));  // 2^(e-7) * (1 + m/8)
  }
  return (b & 0x80u) ? -mag : mag;
}

// float -> E4M3, round to nearest even; finite values (and infinities) beyond 448 saturate to
// +-448 (the OCP spec's saturating conversion); NaN gives 0x7F with the input's sign.
uint8_t f32_to_e4m3(float f);

}  // namespace ga
