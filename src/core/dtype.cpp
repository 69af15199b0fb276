#include "gpu_accel/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "gpu_accel/error.h"

namespace ga {
namespace {

constexpr uint32_t kQK = 32;    // weights per block of the classic quant types
constexpr uint32_t kQKK = 256;  // weights per super-block of the K-quants

// {type, name, block_size, type_size, quantized, supported}
constexpr std::array<DTypeTraits, 37> kTraits = {{
    {DType::F32, "F32", 1, 4, false, true},
    {DType::F16, "F16", 1, 2, false, true},
    {DType::Q4_0, "Q4_0", kQK, 18, true, true},
    {DType::Q4_1, "Q4_1", kQK, 20, true, true},
    {DType::Q5_0, "Q5_0", kQK, 22, true, true},
    {DType::Q5_1, "Q5_1", kQK, 24, true, true},
    {DType::Q8_0, "Q8_0", kQK, 34, true, true},
    {DType::Q8_1, "Q8_1", kQK, 36, true, false},
    {DType::Q2_K, "Q2_K", kQKK, 84, true, true},
    {DType::Q3_K, "Q3_K", kQKK, 110, true, true},
    {DType::Q4_K, "Q4_K", kQKK, 144, true, true},
    {DType::Q5_K, "Q5_K", kQKK, 176, true, true},
    {DType::Q6_K, "Q6_K", kQKK, 210, true, true},
    {DType::Q8_K, "Q8_K", kQKK, 292, true, false},
    {DType::IQ2_XXS, "IQ2_XXS", kQKK, 66, true, false},
    {DType::IQ2_XS, "IQ2_XS", kQKK, 74, true, false},
    {DType::IQ3_XXS, "IQ3_XXS", kQKK, 98, true, false},
    {DType::IQ1_S, "IQ1_S", kQKK, 50, true, false},
    {DType::IQ4_NL, "IQ4_NL", kQK, 18, true, false},
    {DType::IQ3_S, "IQ3_S", kQKK, 110, true, false},
    {DType::IQ2_S, "IQ2_S", kQKK, 82, true, false},
    {DType::IQ4_XS, "IQ4_XS", kQKK, 136, true, false},
    {DType::I8, "I8", 1, 1, false, false},
    {DType::I16, "I16", 1, 2, false, false},
    {DType::I32, "I32", 1, 4, false, false},
    {DType::I64, "I64", 1, 8, false, false},
    {DType::F64, "F64", 1, 8, false, false},
    {DType::IQ1_M, "IQ1_M", kQKK, 56, true, false},
    {DType::BF16, "BF16", 1, 2, false, true},
    {DType::TQ1_0, "TQ1_0", kQKK, 54, true, false},
    {DType::TQ2_0, "TQ2_0", kQKK, 66, true, false},
    {DType::MXFP4, "MXFP4", kQK, 17, true, true},
    {DType::NVFP4, "NVFP4", 64, 36, true, true},
    {DType::F8_B128, "F8_B128", 128, 132, true, true},
    {DType::F8_E4M3, "F8_E4M3", 1, 1, false, false},  // the FP8 KV cache's codes, not a weight type
    // padding entries are never matched: ids 4, 5, 31..33, 36..38 are not valid types
    {DType::F32, nullptr, 0, 0, false, false},
    {DType::F32, nullptr, 0, 0, false, false},
}};

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t id) {
  for (const auto& t : kTraits) {
    if (t.name != nullptr && static_cast<uint32_t>(t.type) == id) return t;
  }
  return std::nullopt;
}

const DTypeTraits& traits(DType type) {
  for (const auto& t : kTraits) {
    if (t.name != nullptr && t.type == type) return t;
  }
  GA_THROW(Internal, "unknown dtype id ", static_cast<uint32_t>(type));
}

const char* dtype_name(DType type) { return traits(type).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string upper(name);
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& t : kTraits) {
    if (t.name != nullptr && upper == t.name) return t.type;
  }
  return std::nullopt;
}

uint64_t row_bytes(DType type, uint64_t n) {
  const auto& t = traits(type);
  GA_CHECK(n % t.block_size == 0, InvalidArgument, "row of ", n, " elements is not a multiple of the ", t.name,
           " block size ", t.block_size);
  return n / t.block_size * t.type_size;
}

uint16_t f32_to_fp16(float f) {
  // Round-to-nearest-even conversion by bit manipulation (same results as F16C's vcvtps2ph with
  // rounding mode 0, which ggml uses).
  const uint32_t x = bits_from_f32(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf (>= 65520)
  if (abs < 0x38800000u) {
    // result is subnormal or zero: value * 2^24, rounded to nearest even integer
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t midpoint = 1u << (shift - 1u);
    if (rem > midpoint || (rem == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | h);
}

uint8_t f32_to_e4m3(float f) {
  const uint32_t x = bits_from_f32(f);
  const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (a > 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // beyond 448 (inf too): saturate
  if (a < 0x3c800000u) {
    // below 2^-6: subnormal (or zero), the level is round-half-even(|f| * 2^9) in 0..8; 8 is the
    // code of 2^-6, the smallest normal, so the level is also the code. The scaling is exact.
    const float scaled = f32_from_bits(a) * 512.0f;
    auto q = static_cast<uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    return static_cast<uint8_t>(sign | q);
  }
  // normal: keep 3 of the 23 mantissa bits, round half to even; a carry moves into the exponent.
  // 448 is representable and the input is <= 448, so the result never passes 0x7E.
  const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;  // float exponent << 3 | mantissa
  return static_cast<uint8_t>(sign | (r - (120u << 3)));
}

}  // namespace ga
