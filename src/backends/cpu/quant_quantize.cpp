// quantize_row: float32 -> stored weight type with llama.cpp's reference rounding.
//
// Files we write must load in llama.cpp and quantize exactly like llama-quantize without an
// importance matrix, so each routine follows ggml's quantize_row_*_ref step by step: the same
// choice of scale (Q4_0/Q5_0: the signed value of largest magnitude divided by -8 / -16, so the
// extreme maps to level 0; Q4_1/Q5_1: min/max; Q8_0: amax/127 with roundf), the same truncating
// conversions (int8_t)(v + 8.5f), and the same fp16 rounding of the stored scales. The order of
// the float operations is kept as written there, because a different order can move a value
// across a rounding boundary. The K-quants (search-based) live in quant_quantize_k.cpp, MXFP4 and
// NVFP4 in quant_quantize_fp4.cpp, F8_B128 in quant_quantize_fp8.cpp.
// Floating-point contraction is off for the same reason (a fused x * id + 8.5f rounds differently).
#include "backends/cpu/fp_contract_off.h"  // first: it covers every function after it

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "backends/cpu/quant.h"
#include "backends/cpu/quant_blocks.h"
#include "backends/cpu/quant_kernels.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

using namespace blocks;

void min_max(const float* x, int n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = detail::signed_absmax(x, kQK) / -8;  // the extreme value maps to level 0 (-8 * d)
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[j + kQK / 2] * id;
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[j + kQK / 2] - min) * id;
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 0.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = detail::signed_absmax(x, kQK) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[j + kQK / 2] * id;
      const uint32_t q0 = static_cast<uint32_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x0 + 16.5f))));
      const uint32_t q1 = static_cast<uint32_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x1 + 16.5f))));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= ((q0 & 0x10u) >> 4) << j;  // 5th bit of weight j -> bit j
      qh |= ((q1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[j + kQK / 2] - min) * id;
      const uint32_t q0 = static_cast<uint8_t>(x0 + 0.5f);
      const uint32_t q1 = static_cast<uint8_t>(x1 + 0.5f);
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= ((q0 & 0x10u) >> 4) << j;
      qh |= ((q1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

}  // namespace

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const int64_t nb = detail::checked_block_count("quantize_row", type, n);
  auto* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_fp16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::Q4_0: return quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case DType::Q4_1: return quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), nb);
    case DType::Q5_0: return quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case DType::Q5_1: return quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), nb);
    case DType::Q8_0: return quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case DType::Q2_K: return detail::quantize_q2_k(src, dst, nb);
    case DType::Q3_K: return detail::quantize_q3_k(src, dst, nb);
    case DType::Q4_K: return detail::quantize_q4_k(src, dst, nb);
    case DType::Q5_K: return detail::quantize_q5_k(src, dst, nb);
    case DType::Q6_K: return detail::quantize_q6_k(src, dst, nb);
    case DType::MXFP4: return detail::quantize_mxfp4(src, dst, nb);
    case DType::NVFP4: return detail::quantize_nvfp4(src, dst, nb);
    case DType::F8_B128: return detail::quantize_f8_b128(src, dst, nb);
    default:
      GA_THROW(Unsupported, "quantize_row: cannot quantize to ", traits(type).name,
               " (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4, "
               "NVFP4, F8_B128)");
  }
}

}  // namespace ga::cpu
