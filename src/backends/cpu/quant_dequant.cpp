// dequantize_row: stored weights -> float32, bit-exact with ggml / gguf-py.
//
// Bit-exactness is the point of this file: the tests compare against ggml's own dequantization
// (fixtures/quant/dequant-<T>.gguf) bit for bit. That fixes the order of every float operation:
// a sub-block factor is formed first (d * sc, dmin * m, as float), then each weight is
// factor * q - min_factor. The compiler must not fuse that multiply and subtract into an FMA (one
// rounding instead of two), so floating-point contraction is switched off for this file; GCC
// contracts across statements by default even in ISO C++ mode.
//
// These are the portable loops (scalar::dequantize_row); where the compiler targets AVX2,
// dequantize_row uses the bit-identical vector version in quant_dequant_avx2.cpp for speed.
#include "backends/cpu/fp_contract_off.h"  // first: it covers every function after it

#include "backends/cpu/quant.h"
#include "backends/cpu/quant_blocks.h"
#include "backends/cpu/quant_kernels.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

using namespace blocks;

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = half(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((b[i].qs[j] & 0xF) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = half(b[i].d);
    const float m = half(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(b[i].qs[j] & 0xF) * d + m;
      y[j + kQK / 2] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = half(b[i].d);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int high0 = static_cast<int>((qh >> j) << 4) & 0x10;
      const int high1 = static_cast<int>(qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>(((b[i].qs[j] & 0xF) | high0) - 16) * d;
      y[j + kQK / 2] = static_cast<float>(((b[i].qs[j] >> 4) | high1) - 16) * d;
    }
  }
}

void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = half(b[i].d);
    const float m = half(b[i].m);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int high0 = static_cast<int>((qh >> j) << 4) & 0x10;
      const int high1 = static_cast<int>(qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>((b[i].qs[j] & 0xF) | high0) * d + m;
      y[j + kQK / 2] = static_cast<float>((b[i].qs[j] >> 4) | high1) * d + m;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = half(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void dequant_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = half(b[i].d);
    const float dmin = half(b[i].dmin);
    const uint8_t* q = b[i].qs;
    int sub = 0;
    // Two halves of 128 weights; in each, 32 bytes carry 4 planes of 2 bits (shift 0, 2, 4, 6),
    // each plane being two sub-blocks of 16 (bytes 0..15, then 16..31).
    for (int n = 0; n < kQKK; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++sub) {
          const float dl = d * static_cast<float>(b[i].scales[sub] & 0xF);
          const float ml = dmin * static_cast<float>(b[i].scales[sub] >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequant_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d_all = half(b[i].d);
    int8_t scales[16];
    q3k_scales(b[i].scales, scales);
    const uint8_t* q = b[i].qs;
    const uint8_t* hm = b[i].hmask;
    uint8_t mask = 1;  // the hmask bit of the current plane: one bit per (half, shift) pair
    int sub = 0;
    for (int n = 0; n < kQKK; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, mask = static_cast<uint8_t>(mask << 1)) {
        for (int part = 0; part < 2; ++part, ++sub) {
          const float dl = d_all * static_cast<float>(scales[sub]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int value = ((q[l] >> shift) & 3) - ((hm[l] & mask) ? 0 : 4);
            *y++ = dl * static_cast<float>(value);
          }
        }
      }
    }
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = half(b[i].d);
    const float dmin = half(b[i].dmin);
    const uint8_t* q = b[i].qs;
    // 4 groups of 64 weights: 32 bytes, low nibbles = sub-block 2g, high nibbles = 2g+1.
    for (int g = 0; g < 4; ++g, q += 32) {
      const auto [d1, m1] = k4_factors(2 * g, b[i].scales, d, dmin);
      const auto [d2, m2] = k4_factors(2 * g + 1, b[i].scales, d, dmin);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = half(b[i].d);
    const float dmin = half(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    // Like Q4_K; the 5th bit of sub-block s sits in bit s of qh[l].
    for (int g = 0; g < 4; ++g, ql += 32) {
      const auto [d1, m1] = k4_factors(2 * g, b[i].scales, d, dmin);
      const auto [d2, m2] = k4_factors(2 * g + 1, b[i].scales, d, dmin);
      const uint8_t bit1 = static_cast<uint8_t>(1u << (2 * g));
      const uint8_t bit2 = static_cast<uint8_t>(2u << (2 * g));
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & bit1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & bit2) ? 16 : 0)) - m2;
      }
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = half(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    // Two halves of 128: weight n + 32k + l takes 4 bits from ql (k = 0,1: low nibble of ql[l],
    // ql[l+32]; k = 2,3: high nibbles) and 2 bits from qh[l] at bit 2k. Sub-block = 2k + l/16.
    for (int n = 0; n < kQKK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// y = level * d with d the halved block scale: one float product, as ggml's dequantize_row_mxfp4/nvfp4.
void dequant_mxfp4(const BlockMXFP4* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = e8m0_half(b[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(kFp4Levels[b[i].qs[j] & 0xF]) * d;
      y[j + kQK / 2] = static_cast<float>(kFp4Levels[b[i].qs[j] >> 4]) * d;
    }
  }
}

// y = e4m3 * d, one float product (what the FP8 checkpoint loader's F32 dequantization computes).
void dequant_f8_b128(const BlockF8B128* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKF8) {
    const float d = f8_block_scale(b[i]);
    for (int j = 0; j < kQKF8; ++j) y[j] = e4m3_to_f32(b[i].qs[j]) * d;
  }
}

void dequant_nvfp4(const BlockNVFP4* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    for (int s = 0; s < kQKNV / kQKNVSub; ++s, y += kQKNVSub) {
      const float d = ue4m3_half(b[i].d[s]);
      for (int j = 0; j < kQKNVSub / 2; ++j) {
        const uint8_t byte = b[i].qs[s * (kQKNVSub / 2) + j];
        y[j] = static_cast<float>(kFp4Levels[byte & 0xF]) * d;
        y[j + kQKNVSub / 2] = static_cast<float>(kFp4Levels[byte >> 4]) * d;
      }
    }
  }
}

}  // namespace

namespace scalar {

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const int64_t nb = detail::checked_block_count("dequantize_row", type, n);
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      const auto* h = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, h + 2 * i, 2);
        dst[i] = fp16_to_f32(bits);
      }
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, h + 2 * i, 2);
        dst[i] = bf16_to_f32(bits);
      }
      return;
    }
    case DType::Q4_0: return dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case DType::Q4_1: return dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case DType::Q5_0: return dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case DType::Q5_1: return dequant_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case DType::Q8_0: return dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case DType::Q2_K: return dequant_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb);
    case DType::Q3_K: return dequant_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb);
    case DType::Q4_K: return dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case DType::Q5_K: return dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
    case DType::Q6_K: return dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    case DType::MXFP4: return dequant_mxfp4(static_cast<const BlockMXFP4*>(src), dst, nb);
    case DType::NVFP4: return dequant_nvfp4(static_cast<const BlockNVFP4*>(src), dst, nb);
    case DType::F8_B128: return dequant_f8_b128(static_cast<const BlockF8B128*>(src), dst, nb);
    default:
      GA_THROW(Unsupported, "dequantize_row: weight type ", traits(type).name, " is not supported on the CPU backend");
  }
}

}  // namespace scalar

}  // namespace ga::cpu
