// FP4 reference quantizers (MXFP4, NVFP4), following ggml's quantize_row_mxfp4_ref / quantize_row_nvfp4_ref, so that
// make-model and quantize write the bytes llama.cpp writes for the same floats.
//
// Both pick a block scale from the block's largest magnitude and then, per weight, the E2M1 level nearest the
// weight: the code i whose |kFp4Levels[i] * d - x| is smallest in float, the first one on ties (so +0 wins over
// -0), with d the halved scale the dequantizer multiplies by (quant_blocks.h):
//   MXFP4: the E8M0 exponent e = floor(log2(amax)) - 2 + 127 (amax's largest level 6 = 1.5 * 2^2 then lands on
//          the top of the levels or just past it, saturating at +-6), d = e8m0_half(e);
//   NVFP4: per 16 weights the UE4M3 byte of amax / 6 (ggml_fp32_to_ue4m3's rounding: half up, not to even),
//          d = ue4m3_half(byte).
// Contraction stays off (the floats must round as ggml's do, step by step).
#include "backends/cpu/fp_contract_off.h"  // first: it covers every function after it

#include <algorithm>
#include <cmath>

#include "backends/cpu/quant_blocks.h"
#include "backends/cpu/quant_kernels.h"

namespace ga::cpu::detail {
namespace {

using namespace blocks;

uint8_t nearest_fp4_code(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kFp4Levels[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kFp4Levels[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

// The n weights at x into n / 2 bytes: weight j in the low nibble of byte j, weight j + n / 2 in its high one.
void pack_fp4_codes(const float* x, int n, float d, uint8_t* qs) {
  for (int j = 0; j < n / 2; ++j) {
    qs[j] = static_cast<uint8_t>(nearest_fp4_code(x[j], d) | (nearest_fp4_code(x[j + n / 2], d) << 4));
  }
}

float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

// ggml_fp32_to_ue4m3: 0 for x <= 0 (or NaN); x above 448 is 448. Subnormal codes (x < 2^-6) round x * 512 half
// up, to at least 1 or else to 0; normal ones keep the top 3 mantissa bits, plus one where the next bit is set,
// carrying into the exponent; an exponent of 15 or more gives 0x7E (448).
uint8_t fp32_to_ue4m3(float x) {
  if (!(x > 0.0f)) return 0;
  x = std::min(x, 448.0f);
  const uint32_t bits = bits_from_f32(x);
  int exp = static_cast<int>((bits >> 23) & 0xFFu) - 127 + 7;
  if (exp <= 0) {
    const int man = std::min(static_cast<int>(x * 512.0f + 0.5f), 7);
    return man < 1 ? 0 : static_cast<uint8_t>(man);
  }
  if (exp >= 15) return 0x7E;
  int man = static_cast<int>((bits >> 20) & 7u) + static_cast<int>((bits >> 19) & 1u);
  if (man > 7) {
    man = 0;
    if (++exp >= 15) return 0x7E;
  }
  return static_cast<uint8_t>((exp << 3) | man);
}

}  // namespace

void quantize_mxfp4(const float* x, void* dst, int64_t n_blocks) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK) {
    const float amax = abs_max(x, kQK);
    // ggml casts floorf(log2f(amax)) - 2 + 127 to uint8_t; below amax = 2^-125 that is negative (undefined in C):
    // 0 here, the smallest exponent
    const float e = amax > 0.0f ? std::clamp(std::floor(std::log2(amax)) - 2 + 127, 0.0f, 255.0f) : 0.0f;
    y[i].e = static_cast<uint8_t>(e);
    pack_fp4_codes(x, kQK, e8m0_half(y[i].e), y[i].qs);
  }
}

void quantize_nvfp4(const float* x, void* dst, int64_t n_blocks) {
  auto* y = static_cast<BlockNVFP4*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i) {
    for (int s = 0; s < kQKNV / kQKNVSub; ++s, x += kQKNVSub) {
      y[i].d[s] = fp32_to_ue4m3(abs_max(x, kQKNVSub) / 6.0f);
      pack_fp4_codes(x, kQKNVSub, ue4m3_half(y[i].d[s]), y[i].qs + s * (kQKNVSub / 2));
    }
  }
}

}  // namespace ga::cpu::detail
