// One intermediate form for every quantized block: int8 levels plus a float scale and min per
// sub-block, so that weight[i] = scale[s] * q[i] - min[s] with s = i / sub_size.
//
// Why: the portable dot (quant_dot_scalar.cpp) then needs a single inner loop (int8 levels x float
// activations, scaled per sub-block) instead of one hand-written loop per type; the per-type work
// is only the bit unpacking below. The AVX2 kernels use the same decomposition, unpacked in
// registers instead (quant_unpack_avx2.h). The algebra (scale * sum(q*x) - min * sum(x)) is exact
// for every ggml type; only the float rounding differs from dequantize-then-dot, which is what the
// float64-reference tests allow.
#pragma once

#include <cstdint>

#include "backends/cpu/quant_blocks.h"

namespace ga::cpu::detail {

struct UnpackedBlock {
  int8_t q[blocks::kQKK];     // [n] levels, already centred (e.g. Q4_0 nibble - 8)
  float scale[16];            // [n / sub_size]
  float min[16];              // [n / sub_size]; all zero when has_min is false
};

// Static shape of a type's unpacked block.
struct UnpackShape {
  int n;         // weights per block
  int sub_size;  // weights per scale
  bool has_min;  // whether min[] is used
};

template <typename Block>
struct Unpack;

template <>
struct Unpack<blocks::BlockQ4_0> {
  static constexpr UnpackShape kShape{32, 32, false};
  static void run(const blocks::BlockQ4_0& b, UnpackedBlock& u) {
    for (int j = 0; j < 16; ++j) {
      u.q[j] = static_cast<int8_t>((b.qs[j] & 0xF) - 8);
      u.q[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
    }
    u.scale[0] = blocks::half(b.d);
  }
};

template <>
struct Unpack<blocks::BlockQ4_1> {
  static constexpr UnpackShape kShape{32, 32, true};
  static void run(const blocks::BlockQ4_1& b, UnpackedBlock& u) {
    for (int j = 0; j < 16; ++j) {
      u.q[j] = static_cast<int8_t>(b.qs[j] & 0xF);
      u.q[j + 16] = static_cast<int8_t>(b.qs[j] >> 4);
    }
    u.scale[0] = blocks::half(b.d);
    u.min[0] = -blocks::half(b.m);  // weight = d*q + m
  }
};

template <>
struct Unpack<blocks::BlockQ5_0> {
  static constexpr UnpackShape kShape{32, 32, false};
  static void run(const blocks::BlockQ5_0& b, UnpackedBlock& u) {
    const uint32_t qh = blocks::load_u32(b.qh);
    for (int j = 0; j < 16; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      u.q[j] = static_cast<int8_t>(((b.qs[j] & 0xF) | h0) - 16);
      u.q[j + 16] = static_cast<int8_t>(((b.qs[j] >> 4) | h1) - 16);
    }
    u.scale[0] = blocks::half(b.d);
  }
};

template <>
struct Unpack<blocks::BlockQ5_1> {
  static constexpr UnpackShape kShape{32, 32, true};
  static void run(const blocks::BlockQ5_1& b, UnpackedBlock& u) {
    const uint32_t qh = blocks::load_u32(b.qh);
    for (int j = 0; j < 16; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      u.q[j] = static_cast<int8_t>((b.qs[j] & 0xF) | h0);
      u.q[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) | h1);
    }
    u.scale[0] = blocks::half(b.d);
    u.min[0] = -blocks::half(b.m);
  }
};

template <>
struct Unpack<blocks::BlockQ8_0> {
  static constexpr UnpackShape kShape{32, 32, false};
  static void run(const blocks::BlockQ8_0& b, UnpackedBlock& u) {
    for (int j = 0; j < 32; ++j) u.q[j] = b.qs[j];
    u.scale[0] = blocks::half(b.d);
  }
};

template <>
struct Unpack<blocks::BlockQ2_K> {
  static constexpr UnpackShape kShape{256, 16, true};
  static void run(const blocks::BlockQ2_K& b, UnpackedBlock& u) {
    const float d = blocks::half(b.d);
    const float dmin = blocks::half(b.dmin);
    for (int s = 0; s < 16; ++s) {
      u.scale[s] = d * static_cast<float>(b.scales[s] & 0xF);
      u.min[s] = dmin * static_cast<float>(b.scales[s] >> 4);
    }
    // weight 128h + 32p + l (l < 32) is bits 2p of qs[32h + l]
    for (int h = 0; h < 2; ++h) {
      for (int p = 0; p < 4; ++p) {
        for (int l = 0; l < 32; ++l) u.q[128 * h + 32 * p + l] = static_cast<int8_t>((b.qs[32 * h + l] >> (2 * p)) & 3);
      }
    }
  }
};

template <>
struct Unpack<blocks::BlockQ3_K> {
  static constexpr UnpackShape kShape{256, 16, false};
  static void run(const blocks::BlockQ3_K& b, UnpackedBlock& u) {
    const float d = blocks::half(b.d);
    int8_t sc[16];
    blocks::q3k_scales(b.scales, sc);
    for (int s = 0; s < 16; ++s) u.scale[s] = d * static_cast<float>(sc[s]);
    // weight 128h + 32p + l: low 2 bits at 2p of qs[32h + l]; the 3rd bit is bit 4h + p of hmask[l]
    for (int h = 0; h < 2; ++h) {
      for (int p = 0; p < 4; ++p) {
        const int bit = 4 * h + p;
        for (int l = 0; l < 32; ++l) {
          const int low = (b.qs[32 * h + l] >> (2 * p)) & 3;
          const int high = (b.hmask[l] >> bit) & 1;
          u.q[128 * h + 32 * p + l] = static_cast<int8_t>(low - (high ? 0 : 4));
        }
      }
    }
  }
};

// Q4_K and Q5_K share their scales and nibble layout; Q5_K adds the 5th bit of sub-block s at bit s
// of qh[l].
template <typename Block, bool FifthBit>
struct UnpackK45 {
  static constexpr UnpackShape kShape{256, 32, true};
  static void run(const Block& b, UnpackedBlock& u) {
    const float d = blocks::half(b.d);
    const float dmin = blocks::half(b.dmin);
    for (int s = 0; s < 8; ++s) {
      const blocks::ScaleMin f = blocks::k4_factors(s, b.scales, d, dmin);
      u.scale[s] = f.scale;
      u.min[s] = f.min;
    }
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        int h1 = 0, h2 = 0;
        if constexpr (FifthBit) {
          h1 = ((b.qh[l] >> (2 * g)) & 1) << 4;
          h2 = ((b.qh[l] >> (2 * g + 1)) & 1) << 4;
        }
        u.q[64 * g + l] = static_cast<int8_t>((b.qs[32 * g + l] & 0xF) | h1);
        u.q[64 * g + 32 + l] = static_cast<int8_t>((b.qs[32 * g + l] >> 4) | h2);
      }
    }
  }
};
template <>
struct Unpack<blocks::BlockQ4_K> : UnpackK45<blocks::BlockQ4_K, false> {};
template <>
struct Unpack<blocks::BlockQ5_K> : UnpackK45<blocks::BlockQ5_K, true> {};

template <>
struct Unpack<blocks::BlockQ6_K> {
  static constexpr UnpackShape kShape{256, 16, false};
  static void run(const blocks::BlockQ6_K& b, UnpackedBlock& u) {
    const float d = blocks::half(b.d);
    for (int s = 0; s < 16; ++s) u.scale[s] = d * static_cast<float>(b.scales[s]);
    // weight 128h + 32k + l: nibble from ql[64h + l + 32(k&1)] (low for k < 2, high otherwise),
    // 2 high bits at 2k of qh[32h + l]
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        u.q[128 * h + l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        u.q[128 * h + 32 + l] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        u.q[128 * h + 64 + l] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        u.q[128 * h + 96 + l] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
  }
};

// MXFP4 / NVFP4: levels are ggml's doubled E2M1 values, scales the halved block scales.
template <>
struct Unpack<blocks::BlockMXFP4> {
  static constexpr UnpackShape kShape{32, 32, false};
  static void run(const blocks::BlockMXFP4& b, UnpackedBlock& u) {
    for (int j = 0; j < 16; ++j) {
      u.q[j] = blocks::kFp4Levels[b.qs[j] & 0xF];
      u.q[j + 16] = blocks::kFp4Levels[b.qs[j] >> 4];
    }
    u.scale[0] = blocks::e8m0_half(b.e);
  }
};

template <>
struct Unpack<blocks::BlockNVFP4> {
  static constexpr UnpackShape kShape{blocks::kQKNV, blocks::kQKNVSub, false};
  static void run(const blocks::BlockNVFP4& b, UnpackedBlock& u) {
    for (int s = 0; s < blocks::kQKNV / blocks::kQKNVSub; ++s) {
      for (int j = 0; j < 8; ++j) {
        const uint8_t byte = b.qs[s * 8 + j];
        u.q[s * 16 + j] = blocks::kFp4Levels[byte & 0xF];
        u.q[s * 16 + j + 8] = blocks::kFp4Levels[byte >> 4];
      }
      u.scale[s] = blocks::ue4m3_half(b.d[s]);
    }
  }
};

}  // namespace ga::cpu::detail
