// Device decoders of every GGUF weight type the CUDA backend reads, one traits struct per type.
//
// A block is shared by kLanesPerBlock lanes; lane `part` decodes kElems of its weights, in runs of 4
// consecutive weights (run_offset(part, r) is the element offset of run r inside the block), so the
// matching activations are one aligned float4 load per run. The weights come out factored as
//     w = scale[g] * q + min[g]      (g = the scale group of the run: run r is in group r*kGroups/kRuns)
// with q a small integer held exactly in a float. GEMV uses the factored form (one multiply per
// group, not per weight: scale * sum(q x) + min * sum(x)); the embedding gather forms w itself with
// the CPU's rounding order (scale*q rounded, then + min rounded), which makes it bit-exact with
// ga::cpu::dequantize_row. Types with kUnitScale (F32/F16/BF16) have scale 1 and no min.
//
// Decoders read a block from a staged byte buffer through load_u32_any (blocks are only 2-byte
// aligned); the field offsets come from the one layout definition, backends/cpu/quant_blocks.h.
// The part -> weights maps follow how each layout packs its bits:
//   Q4_0/Q4_1/Q5_x: 4 lanes; part p owns qs[4p..4p+4): weights 4p..4p+3 (low nibbles), 16+4p.. (high)
//   Q8_0:           4 lanes; part p owns qs[8p..8p+8)
//   Q4_K/Q5_K:      16 lanes; part p = 4g + c owns qs[32g+8c ..+8): sub-block 2g (low nibbles, weights
//                   64g+8c..) and 2g+1 (high nibbles, weights 64g+32+8c..)
//   Q6_K:           16 lanes; part p = 8h + 4kp + c owns ql[64h+32kp+8c ..+8) and qh[32h+8c ..+8):
//                   weights 128h + 32k + 8c.. for k = kp (low nibbles) and k = kp+2 (high nibbles)
//   F16/BF16/F32:   a "block" of 8 (4 for F32) weights, one lane each.
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "backends/cpu/quant_blocks.h"
#include "backends/cuda/kernels/device_bytes.cuh"
#include "gpu_accel/dtype.h"

namespace ga::cuda::detail {

namespace layout = ga::cpu::blocks;

inline constexpr uint32_t kLowNibbles = 0x0F0F0F0Fu;
inline constexpr uint32_t kLowBitPairs = 0x03030303u;
inline constexpr uint32_t kLowBits = 0x01010101u;
inline constexpr uint32_t kSignFlip = 0x80808080u;  // int8 -> uint8 + 128

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j from the 12 packed bytes (see k4_scale_min
// in quant_blocks.h for the packing).
__device__ __forceinline__ void k4_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Shared shape of the classic 32-weight types: 4 lanes, 8 weights each, one scale.
struct ClassicShape {
  static constexpr int kBlockElems = layout::kQK;
  static constexpr int kLanesPerBlock = 4;
  static constexpr int kElems = 8;
  static constexpr int kGroups = 1;
  static constexpr bool kUnitScale = false;
  static constexpr int kRows = 4;
  static constexpr int kChunksPerLane = 2;
  static __device__ __forceinline__ int run_offset(int part, int run) { return 4 * part + 16 * run; }
};

struct DecodeQ4_0 : ClassicShape {
  static constexpr DType kType = DType::Q4_0;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ4_0);
  static constexpr bool kHasMin = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* /*min*/) {
    const uint32_t v = load_u32_any(blk + offsetof(layout::BlockQ4_0, qs) + 4 * part);
    bytes_to_floats(v & kLowNibbles, 8.0f, q);
    bytes_to_floats((v >> 4) & kLowNibbles, 8.0f, q + 4);
    scale[0] = load_half_any(blk + offsetof(layout::BlockQ4_0, d));
  }
};

struct DecodeQ4_1 : ClassicShape {
  static constexpr DType kType = DType::Q4_1;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ4_1);
  static constexpr bool kHasMin = true;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* min) {
    const uint32_t v = load_u32_any(blk + offsetof(layout::BlockQ4_1, qs) + 4 * part);
    bytes_to_floats(v & kLowNibbles, 0.0f, q);
    bytes_to_floats((v >> 4) & kLowNibbles, 0.0f, q + 4);
    scale[0] = load_half_any(blk + offsetof(layout::BlockQ4_1, d));
    min[0] = load_half_any(blk + offsetof(layout::BlockQ4_1, m));
  }
};

// Q5_0 / Q5_1: bit j of the 32-bit qh is the 5th bit of weight j.
template <class Block>
__device__ __forceinline__ void decode_q5_bits(const uint8_t* blk, int part, float bias, float* q) {
  const uint32_t v = load_u32_any(blk + offsetof(Block, qs) + 4 * part);
  const uint32_t qh = load_u32_any(blk + offsetof(Block, qh));
  const uint32_t high_lo = spread_bits_to_bytes((qh >> (4 * part)) & 0xFu) << 4;
  const uint32_t high_hi = spread_bits_to_bytes((qh >> (16 + 4 * part)) & 0xFu) << 4;
  bytes_to_floats((v & kLowNibbles) | high_lo, bias, q);
  bytes_to_floats(((v >> 4) & kLowNibbles) | high_hi, bias, q + 4);
}

struct DecodeQ5_0 : ClassicShape {
  static constexpr DType kType = DType::Q5_0;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ5_0);
  static constexpr bool kHasMin = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* /*min*/) {
    decode_q5_bits<layout::BlockQ5_0>(blk, part, 16.0f, q);
    scale[0] = load_half_any(blk + offsetof(layout::BlockQ5_0, d));
  }
};

struct DecodeQ5_1 : ClassicShape {
  static constexpr DType kType = DType::Q5_1;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ5_1);
  static constexpr bool kHasMin = true;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* min) {
    decode_q5_bits<layout::BlockQ5_1>(blk, part, 0.0f, q);
    scale[0] = load_half_any(blk + offsetof(layout::BlockQ5_1, d));
    min[0] = load_half_any(blk + offsetof(layout::BlockQ5_1, m));
  }
};

struct DecodeQ8_0 : ClassicShape {
  static constexpr DType kType = DType::Q8_0;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ8_0);
  static constexpr bool kHasMin = false;
  static __device__ __forceinline__ int run_offset(int part, int run) { return 8 * part + 4 * run; }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* /*min*/) {
    const uint8_t* qs = blk + offsetof(layout::BlockQ8_0, qs) + 8 * part;
    bytes_to_floats(load_u32_any(qs) ^ kSignFlip, 128.0f, q);
    bytes_to_floats(load_u32_any(qs + 4) ^ kSignFlip, 128.0f, q + 4);
    scale[0] = load_half_any(blk + offsetof(layout::BlockQ8_0, d));
  }
};

// Shared shape of the 256-weight K-quants: 16 lanes, 16 weights each in two scale groups of 8.
struct KShape {
  static constexpr int kBlockElems = layout::kQKK;
  static constexpr int kLanesPerBlock = 16;
  static constexpr int kElems = 16;
  static constexpr int kGroups = 2;
  static constexpr bool kUnitScale = false;
  static constexpr int kRows = 4;
  static constexpr int kChunksPerLane = 2;
};

// Q4_K / Q5_K: group 0 is sub-block 2g (low nibbles), group 1 sub-block 2g+1 (high nibbles).
struct Q4KMap : KShape {
  static __device__ __forceinline__ int run_offset(int part, int run) {
    return 64 * (part >> 2) + 8 * (part & 3) + 32 * (run >> 1) + 4 * (run & 1);
  }
  template <class Block>
  static __device__ __forceinline__ void scales_mins(const uint8_t* blk, int part, float* scale, float* min) {
    const float d = load_half_any(blk + offsetof(Block, d));
    const float dmin = load_half_any(blk + offsetof(Block, dmin));
    const int g = part >> 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int sc = 0, m = 0;
      k4_scale_min(2 * g + h, blk + offsetof(Block, scales), sc, m);
      scale[h] = d * static_cast<float>(sc);  // the CPU's d1 = d * sc, rounded once
      min[h] = -(dmin * static_cast<float>(m));
    }
  }
};

struct DecodeQ4_K : Q4KMap {
  static constexpr DType kType = DType::Q4_K;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ4_K);
  static constexpr bool kHasMin = true;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* min) {
    const uint8_t* qs = blk + offsetof(layout::BlockQ4_K, qs) + 32 * (part >> 2) + 8 * (part & 3);
    const uint32_t v0 = load_u32_any(qs);
    const uint32_t v1 = load_u32_any(qs + 4);
    bytes_to_floats(v0 & kLowNibbles, 0.0f, q);
    bytes_to_floats(v1 & kLowNibbles, 0.0f, q + 4);
    bytes_to_floats((v0 >> 4) & kLowNibbles, 0.0f, q + 8);
    bytes_to_floats((v1 >> 4) & kLowNibbles, 0.0f, q + 12);
    scales_mins<layout::BlockQ4_K>(blk, part, scale, min);
  }
};

struct DecodeQ5_K : Q4KMap {
  static constexpr DType kType = DType::Q5_K;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ5_K);
  static constexpr bool kHasMin = true;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* min) {
    const int g = part >> 2;
    const int c = part & 3;
    const uint8_t* qs = blk + offsetof(layout::BlockQ5_K, qs) + 32 * g + 8 * c;
    const uint8_t* qh = blk + offsetof(layout::BlockQ5_K, qh) + 8 * c;
    const uint32_t v0 = load_u32_any(qs);
    const uint32_t v1 = load_u32_any(qs + 4);
    const uint32_t h0 = load_u32_any(qh);
    const uint32_t h1 = load_u32_any(qh + 4);
    // the 5th bit of sub-block s is bit s of qh[l]
    bytes_to_floats((v0 & kLowNibbles) | (((h0 >> (2 * g)) & kLowBits) << 4), 0.0f, q);
    bytes_to_floats((v1 & kLowNibbles) | (((h1 >> (2 * g)) & kLowBits) << 4), 0.0f, q + 4);
    bytes_to_floats(((v0 >> 4) & kLowNibbles) | (((h0 >> (2 * g + 1)) & kLowBits) << 4), 0.0f, q + 8);
    bytes_to_floats(((v1 >> 4) & kLowNibbles) | (((h1 >> (2 * g + 1)) & kLowBits) << 4), 0.0f, q + 12);
    scales_mins<layout::BlockQ5_K>(blk, part, scale, min);
  }
};

struct DecodeQ6_K : KShape {
  static constexpr DType kType = DType::Q6_K;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ6_K);
  static constexpr bool kHasMin = false;
  static __device__ __forceinline__ int run_offset(int part, int run) {
    // weights 128h + 32k + 8c + [0, 8) with k = kp (runs 0, 1) or kp + 2 (runs 2, 3)
    return 128 * (part >> 3) + 32 * (((part >> 2) & 1) + 2 * (run >> 1)) + 8 * (part & 3) + 4 * (run & 1);
  }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* /*min*/) {
    const int h = part >> 3;
    const int kp = (part >> 2) & 1;
    const int c = part & 3;
    const uint8_t* ql = blk + offsetof(layout::BlockQ6_K, ql) + 64 * h + 32 * kp + 8 * c;
    const uint8_t* qh = blk + offsetof(layout::BlockQ6_K, qh) + 32 * h + 8 * c;
    const uint32_t l0 = load_u32_any(ql);
    const uint32_t l1 = load_u32_any(ql + 4);
    const uint32_t h0 = load_u32_any(qh);
    const uint32_t h1 = load_u32_any(qh + 4);
    // weight k takes the 2 bits at 2k of qh[l] as its bits 4..5
    bytes_to_floats((l0 & kLowNibbles) | (((h0 >> (2 * kp)) & kLowBitPairs) << 4), 32.0f, q);
    bytes_to_floats((l1 & kLowNibbles) | (((h1 >> (2 * kp)) & kLowBitPairs) << 4), 32.0f, q + 4);
    bytes_to_floats(((l0 >> 4) & kLowNibbles) | (((h0 >> (2 * kp + 4)) & kLowBitPairs) << 4), 32.0f, q + 8);
    bytes_to_floats(((l1 >> 4) & kLowNibbles) | (((h1 >> (2 * kp + 4)) & kLowBitPairs) << 4), 32.0f, q + 12);
    const float d = load_half_any(blk + offsetof(layout::BlockQ6_K, d));
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + offsetof(layout::BlockQ6_K, scales)) + 8 * h + c / 2;
    scale[0] = d * static_cast<float>(sc[2 * kp]);        // the CPU's d * sc, rounded once
    scale[1] = d * static_cast<float>(sc[2 * kp + 4]);
  }
};

// Unquantized weights: q is the weight itself.
struct FloatShape {
  static constexpr int kLanesPerBlock = 1;
  static constexpr int kGroups = 1;
  static constexpr bool kUnitScale = true;
  static constexpr bool kHasMin = false;
  static constexpr int kRows = 2;          // x is re-read per 2 weight bytes at most; fewer registers
  static constexpr int kChunksPerLane = 3;  // one iteration is 512 bytes: 2 per segment
  static __device__ __forceinline__ int run_offset(int /*part*/, int run) { return 4 * run; }
};

struct DecodeF16 : FloatShape {
  static constexpr DType kType = DType::F16;
  static constexpr int kBlockElems = 8;
  static constexpr int kBlockBytes = 16;
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int /*part*/, float* q, float* /*scale*/, float* /*min*/) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = load_u32_any(blk + 4 * i);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&v));
      q[2 * i] = f.x;
      q[2 * i + 1] = f.y;
    }
  }
};

struct DecodeBF16 : FloatShape {
  static constexpr DType kType = DType::BF16;
  static constexpr int kBlockElems = 8;
  static constexpr int kBlockBytes = 16;
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int /*part*/, float* q, float* /*scale*/, float* /*min*/) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = load_u32_any(blk + 4 * i);  // bfloat16 is the top half of a float
      q[2 * i] = __uint_as_float(v << 16);
      q[2 * i + 1] = __uint_as_float(v & 0xFFFF0000u);
    }
  }
};

struct DecodeF32 : FloatShape {
  static constexpr DType kType = DType::F32;
  static constexpr int kBlockElems = 4;
  static constexpr int kBlockBytes = 16;
  static constexpr int kElems = 4;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int /*part*/, float* q, float* /*scale*/, float* /*min*/) {
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = __uint_as_float(load_u32_any(blk + 4 * i));
  }
};

}  // namespace ga::cuda::detail
