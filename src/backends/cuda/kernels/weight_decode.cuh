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
//   Q2_K / Q3_K:    16 lanes, the same weights per part as Q6_K (PlaneMap): qs[32h+8c ..+8), planes
//                   kp and kp+2 (Q3_K: and hmask[8c ..+8) for the third bit)
//   F16/BF16/F32:   a "block" of 8 (4 for F32) weights, one lane each.
//   MXFP4:          4 lanes; part p owns qs[4p..4p+4): weights 4p..4p+3 (low nibbles), 16+4p.. (high), as Q4_0
//   NVFP4:          4 lanes; part p owns sub-block p: qs[8p..8p+8) and its scale d[p], weights 16p..16p+15
//
// Quant decoders are written once as unpack() (the weights' unsigned codes, 4 bytes per word in run
// order) plus fields() (scale and min of w = scale * (code - kBias) + min) and offer two forms
// (QuantForms): decode() above (the embedding gather and the f16 dequantizer use it), and
// decode_int() for the GEMV, which skips the float conversion of the codes: weight = scale_int * code +
// offset, the code delivered as the float whose bit pattern is the code (a subnormal, see
// bytes_to_code_floats), scale_int carrying the 2^69 that undoes the GEMV's scaling of x by 2^80.
// One PRMT per weight instead of a PRMT and an FADD; the bias moves into offset * sum(x), paid once
// per scale group and row. The FP4 types (Fp4Forms) offer the same two forms from signed codes, with
// no offset at all (see fp4_code_floats).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

// decode_int(): the GEMV multiplies codes (code * 2^-149 as floats) by x * kIntXScale, so each exact
// product is code * x * 2^-69, a normal float for |code * x| > 2^-57 (activations are never that
// small; below it a product loses bits, not the sum its magnitude); x * 2^80 stays finite for any
// |x| < 2^48. kIntDotUnscale = 2^(149 - 80) brings the dot back.
inline constexpr float kIntXScale = 0x1p80f;
inline constexpr float kIntDotUnscale = 0x1p69f;

// out[i] = the float whose bit pattern is byte i of v (byte i * 2^-149): one PRMT, no conversion.
__device__ __forceinline__ void bytes_to_code_floats(uint32_t v, float* out) {
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = __uint_as_float(__byte_perm(v, 0u, 0x4440u + static_cast<uint32_t>(i)));
}

// Byte readers the decoders are written against (B::Addr is the address type):
// AnyBytes: generic pointers, any memory (decode(): the embedding's stage, global rows);
// StageBytes: 32-bit byte offsets into the kernel's dynamic shared memory (the GEMV's stages), so
// field reads are LDS with 32-bit address arithmetic instead of generic 64-bit loads.
struct AnyBytes {
  using Addr = const uint8_t*;
  static __device__ __forceinline__ uint32_t u32(Addr p) { return load_u32_any(p); }
  static __device__ __forceinline__ float half(Addr p) { return load_half_any(p); }
  static __device__ __forceinline__ uint32_t u8(Addr p) { return *p; }
  static __device__ __forceinline__ int s8(Addr p) { return *reinterpret_cast<const int8_t*>(p); }
};

struct StageBytes {
  using Addr = uint32_t;
  static __device__ __forceinline__ const uint8_t* base() {
    extern __shared__ uint4 gemv_dynamic_smem[];  // every extern __shared__ array starts at this base
    return reinterpret_cast<const uint8_t*>(gemv_dynamic_smem);
  }
  static __device__ __forceinline__ uint32_t u32(Addr a) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(base()) + (a >> 2);
    return __funnelshift_r(words[0], words[1], (a & 3u) * 8u);
  }
  static __device__ __forceinline__ float half(Addr a) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(u32(a) & 0xFFFFu)));
  }
  static __device__ __forceinline__ uint32_t u8(Addr a) { return base()[a]; }
  static __device__ __forceinline__ int s8(Addr a) { return reinterpret_cast<const int8_t*>(base())[a]; }
};

// The two forms of a quant decoder `Self`, from its unpack() and fields() (see the file comment).
template <class Self>
struct QuantForms {
  static constexpr bool kIntDecode = true;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* min) {
    uint32_t codes[Self::kElems / 4];
    Self::template unpack<AnyBytes>(blk, part, codes);
#pragma unroll
    for (int r = 0; r < Self::kElems / 4; ++r) bytes_to_floats(codes[r], Self::kBias, q + 4 * r);
    Self::template fields<AnyBytes>(blk, part, scale, min);
  }
  // weight e = scale[g] * code(q[e]) + offset[g], scale[] already times kIntDotUnscale
  template <class B>
  static __device__ __forceinline__ void decode_int(typename B::Addr blk, int part, float* q, float* scale,
                                                    float* offset) {
    uint32_t codes[Self::kElems / 4];
    Self::template unpack<B>(blk, part, codes);
#pragma unroll
    for (int r = 0; r < Self::kElems / 4; ++r) bytes_to_code_floats(codes[r], q + 4 * r);
    float s[Self::kGroups], m[Self::kGroups];
    Self::template fields<B>(blk, part, s, m);
#pragma unroll
    for (int g = 0; g < Self::kGroups; ++g) {
      scale[g] = s[g] * kIntDotUnscale;
      if constexpr (Self::kHasMin && Self::kBias == 0.0f) {
        offset[g] = m[g];
      } else if constexpr (Self::kHasMin) {
        offset[g] = fmaf(-s[g], Self::kBias, m[g]);
      } else {
        offset[g] = -s[g] * Self::kBias;
      }
    }
  }
};

// Whether decode_int's weights have an offset (w = scale * code + offset, a bias or a min): then the GEMV
// takes sum(x) per scale group and pays an FMA for it. FP4 codes carry their own sign and have none.
template <class D>
__host__ __device__ constexpr bool int_decode_has_offset() {
  if constexpr (D::kIntDecode) {
    return D::kHasMin || D::kBias != 0.0f;
  } else {
    return false;
  }
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j from the 12 packed bytes (see k4_scale_min
// in quant_blocks.h for the packing).
template <class B>
__device__ __forceinline__ void k4_scale_min(int j, typename B::Addr q, int& sc, int& m) {
  if (j < 4) {
    sc = B::u8(q + j) & 63;
    m = B::u8(q + j + 4) & 63;
  } else {
    sc = (B::u8(q + j + 4) & 0xF) | ((B::u8(q + j - 4) >> 6) << 4);
    m = (B::u8(q + j + 4) >> 4) | ((B::u8(q + j) >> 6) << 4);
  }
}

// Shared shape of the classic 32-weight types: 4 lanes, 8 weights each, one scale.
struct ClassicShape {
  static constexpr int kBlockElems = layout::kQK;
  static constexpr int kLanesPerBlock = 4;
  static constexpr int kElems = 8;
  static constexpr int kGroups = 1;
  static constexpr bool kUnitScale = false;
  static constexpr int kRows = 8;  // GEMV rows per CTA (bench_gemv --sweep: 8 beat 4 by 5-30% for Q4_0, Q8_0)
  static constexpr int kChunksPerLane = 2;
  static __device__ __forceinline__ int run_offset(int part, int run) { return 4 * part + 16 * run; }
};

struct DecodeQ4_0 : ClassicShape, QuantForms<DecodeQ4_0> {
  static constexpr DType kType = DType::Q4_0;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ4_0);
  static constexpr bool kHasMin = false;
  static constexpr float kBias = 8.0f;
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    const uint32_t v = B::u32(blk + offsetof(layout::BlockQ4_0, qs) + 4 * part);
    codes[0] = v & kLowNibbles;
    codes[1] = (v >> 4) & kLowNibbles;
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int /*part*/, float* scale, float* /*min*/) {
    scale[0] = B::half(blk + offsetof(layout::BlockQ4_0, d));
  }
};

struct DecodeQ4_1 : ClassicShape, QuantForms<DecodeQ4_1> {
  static constexpr DType kType = DType::Q4_1;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ4_1);
  static constexpr bool kHasMin = true;
  static constexpr float kBias = 0.0f;
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    const uint32_t v = B::u32(blk + offsetof(layout::BlockQ4_1, qs) + 4 * part);
    codes[0] = v & kLowNibbles;
    codes[1] = (v >> 4) & kLowNibbles;
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int /*part*/, float* scale, float* min) {
    scale[0] = B::half(blk + offsetof(layout::BlockQ4_1, d));
    min[0] = B::half(blk + offsetof(layout::BlockQ4_1, m));
  }
};

// Q5_0 / Q5_1: bit j of the 32-bit qh is the 5th bit of weight j.
template <class B, class Block>
__device__ __forceinline__ void unpack_q5(typename B::Addr blk, int part, uint32_t* codes) {
  const uint32_t v = B::u32(blk + offsetof(Block, qs) + 4 * part);
  const uint32_t qh = B::u32(blk + offsetof(Block, qh));
  const uint32_t high_lo = spread_bits_to_bytes((qh >> (4 * part)) & 0xFu) << 4;
  const uint32_t high_hi = spread_bits_to_bytes((qh >> (16 + 4 * part)) & 0xFu) << 4;
  codes[0] = (v & kLowNibbles) | high_lo;
  codes[1] = ((v >> 4) & kLowNibbles) | high_hi;
}

struct DecodeQ5_0 : ClassicShape, QuantForms<DecodeQ5_0> {
  static constexpr DType kType = DType::Q5_0;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ5_0);
  static constexpr bool kHasMin = false;
  static constexpr float kBias = 16.0f;
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    unpack_q5<B, layout::BlockQ5_0>(blk, part, codes);
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int /*part*/, float* scale, float* /*min*/) {
    scale[0] = B::half(blk + offsetof(layout::BlockQ5_0, d));
  }
};

struct DecodeQ5_1 : ClassicShape, QuantForms<DecodeQ5_1> {
  static constexpr DType kType = DType::Q5_1;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ5_1);
  static constexpr bool kHasMin = true;
  static constexpr float kBias = 0.0f;
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    unpack_q5<B, layout::BlockQ5_1>(blk, part, codes);
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int /*part*/, float* scale, float* min) {
    scale[0] = B::half(blk + offsetof(layout::BlockQ5_1, d));
    min[0] = B::half(blk + offsetof(layout::BlockQ5_1, m));
  }
};

struct DecodeQ8_0 : ClassicShape, QuantForms<DecodeQ8_0> {
  static constexpr DType kType = DType::Q8_0;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ8_0);
  static constexpr bool kHasMin = false;
  static constexpr float kBias = 128.0f;  // codes are the int8 values + 128
  static __device__ __forceinline__ int run_offset(int part, int run) { return 8 * part + 4 * run; }
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    const typename B::Addr qs = blk + offsetof(layout::BlockQ8_0, qs) + 8 * part;
    codes[0] = B::u32(qs) ^ kSignFlip;
    codes[1] = B::u32(qs + 4) ^ kSignFlip;
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int /*part*/, float* scale, float* /*min*/) {
    scale[0] = B::half(blk + offsetof(layout::BlockQ8_0, d));
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
  template <class B, class Block>
  static __device__ __forceinline__ void scales_mins(typename B::Addr blk, int part, float* scale, float* min) {
    const float d = B::half(blk + offsetof(Block, d));
    const float dmin = B::half(blk + offsetof(Block, dmin));
    const int g = part >> 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int sc = 0, m = 0;
      k4_scale_min<B>(2 * g + h, blk + offsetof(Block, scales), sc, m);
      scale[h] = d * static_cast<float>(sc);  // the CPU's d1 = d * sc, rounded once
      min[h] = -(dmin * static_cast<float>(m));
    }
  }
};

struct DecodeQ4_K : Q4KMap, QuantForms<DecodeQ4_K> {
  static constexpr DType kType = DType::Q4_K;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ4_K);
  static constexpr bool kHasMin = true;
  static constexpr float kBias = 0.0f;
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    const typename B::Addr qs = blk + offsetof(layout::BlockQ4_K, qs) + 32 * (part >> 2) + 8 * (part & 3);
    const uint32_t v0 = B::u32(qs);
    const uint32_t v1 = B::u32(qs + 4);
    codes[0] = v0 & kLowNibbles;
    codes[1] = v1 & kLowNibbles;
    codes[2] = (v0 >> 4) & kLowNibbles;
    codes[3] = (v1 >> 4) & kLowNibbles;
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int part, float* scale, float* min) {
    scales_mins<B, layout::BlockQ4_K>(blk, part, scale, min);
  }
};

struct DecodeQ5_K : Q4KMap, QuantForms<DecodeQ5_K> {
  static constexpr DType kType = DType::Q5_K;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ5_K);
  static constexpr bool kHasMin = true;
  static constexpr float kBias = 0.0f;
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    const int g = part >> 2;
    const int c = part & 3;
    const typename B::Addr qs = blk + offsetof(layout::BlockQ5_K, qs) + 32 * g + 8 * c;
    const typename B::Addr qh = blk + offsetof(layout::BlockQ5_K, qh) + 8 * c;
    const uint32_t v0 = B::u32(qs);
    const uint32_t v1 = B::u32(qs + 4);
    const uint32_t h0 = B::u32(qh);
    const uint32_t h1 = B::u32(qh + 4);
    // the 5th bit of sub-block s is bit s of qh[l]
    codes[0] = (v0 & kLowNibbles) | (((h0 >> (2 * g)) & kLowBits) << 4);
    codes[1] = (v1 & kLowNibbles) | (((h1 >> (2 * g)) & kLowBits) << 4);
    codes[2] = ((v0 >> 4) & kLowNibbles) | (((h0 >> (2 * g + 1)) & kLowBits) << 4);
    codes[3] = ((v1 >> 4) & kLowNibbles) | (((h1 >> (2 * g + 1)) & kLowBits) << 4);
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int part, float* scale, float* min) {
    scales_mins<B, layout::BlockQ5_K>(blk, part, scale, min);
  }
};

// Q2_K / Q3_K / Q6_K: a super-block is two halves of 128 weights; in a half, byte l (0..31) of the
// packed planes carries weight 32k + l of plane k (2 bits at 2k, or a nibble for Q6_K's ql). Part
// p = 8h + 4kp + c owns bytes 8c..8c+7 of half h and planes k = kp (group 0) and kp + 2 (group 1):
// weights 128h + 32k + 8c + [0, 8), all in sub-block of 16 number 8h + 2k + c / 2.
struct PlaneMap : KShape {
  static __device__ __forceinline__ int run_offset(int part, int run) {
    // weights 128h + 32k + 8c + [0, 8) with k = kp (runs 0, 1) or kp + 2 (runs 2, 3)
    return 128 * (part >> 3) + 32 * (((part >> 2) & 1) + 2 * (run >> 1)) + 8 * (part & 3) + 4 * (run & 1);
  }
  // the sub-block of 16 of group g (0: plane kp, 1: plane kp + 2)
  static __device__ __forceinline__ int sub_block(int part, int g) {
    return 8 * (part >> 3) + 2 * (((part >> 2) & 1) + 2 * g) + (part & 3) / 2;
  }
};

// Q2_K: codes are the 2-bit planes of qs; sub-block s has scale d * (scales[s] & 15) and min
// dmin * (scales[s] >> 4) (the CPU's w = dl * q - ml, each factor one float product).
struct DecodeQ2_K : PlaneMap, QuantForms<DecodeQ2_K> {
  static constexpr DType kType = DType::Q2_K;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ2_K);
  static constexpr bool kHasMin = true;
  static constexpr float kBias = 0.0f;
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    const int kp = (part >> 2) & 1;
    const typename B::Addr qs = blk + offsetof(layout::BlockQ2_K, qs) + 32 * (part >> 3) + 8 * (part & 3);
    const uint32_t v0 = B::u32(qs);
    const uint32_t v1 = B::u32(qs + 4);
    codes[0] = (v0 >> (2 * kp)) & kLowBitPairs;
    codes[1] = (v1 >> (2 * kp)) & kLowBitPairs;
    codes[2] = (v0 >> (2 * kp + 4)) & kLowBitPairs;
    codes[3] = (v1 >> (2 * kp + 4)) & kLowBitPairs;
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int part, float* scale, float* min) {
    const float d = B::half(blk + offsetof(layout::BlockQ2_K, d));
    const float dmin = B::half(blk + offsetof(layout::BlockQ2_K, dmin));
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const uint32_t sm = B::u8(blk + offsetof(layout::BlockQ2_K, scales) + sub_block(part, g));
      scale[g] = d * static_cast<float>(sm & 0xFu);
      min[g] = -(dmin * static_cast<float>(sm >> 4));
    }
  }
};

// Q3_K: code = the 2-bit plane of qs | the hmask bit (bit 4h + k of hmask[l]) << 2, weight =
// d * scale[s] * (code - 4) with the 6-bit signed scales of q3k_scales (quant_blocks.h).
struct DecodeQ3_K : PlaneMap, QuantForms<DecodeQ3_K> {
  static constexpr DType kType = DType::Q3_K;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ3_K);
  static constexpr bool kHasMin = false;
  static constexpr float kBias = 4.0f;
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    const int h = part >> 3;
    const int kp = (part >> 2) & 1;
    const int c = part & 3;
    const typename B::Addr qs = blk + offsetof(layout::BlockQ3_K, qs) + 32 * h + 8 * c;
    const typename B::Addr hm = blk + offsetof(layout::BlockQ3_K, hmask) + 8 * c;
    const uint32_t v0 = B::u32(qs);
    const uint32_t v1 = B::u32(qs + 4);
    const uint32_t m0 = B::u32(hm);
    const uint32_t m1 = B::u32(hm + 4);
    codes[0] = ((v0 >> (2 * kp)) & kLowBitPairs) | (((m0 >> (4 * h + kp)) & kLowBits) << 2);
    codes[1] = ((v1 >> (2 * kp)) & kLowBitPairs) | (((m1 >> (4 * h + kp)) & kLowBits) << 2);
    codes[2] = ((v0 >> (2 * kp + 4)) & kLowBitPairs) | (((m0 >> (4 * h + kp + 2)) & kLowBits) << 2);
    codes[3] = ((v1 >> (2 * kp + 4)) & kLowBitPairs) | (((m1 >> (4 * h + kp + 2)) & kLowBits) << 2);
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int part, float* scale, float* /*min*/) {
    const float d = B::half(blk + offsetof(layout::BlockQ3_K, d));
    const typename B::Addr packed = blk + offsetof(layout::BlockQ3_K, scales);
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int j = sub_block(part, g);
      const uint32_t low = j < 8 ? (B::u8(packed + j) & 0xFu) : (B::u8(packed + j - 8) >> 4);
      const uint32_t high = (B::u8(packed + 8 + (j & 3)) >> (2 * (j >> 2))) & 3u;
      scale[g] = d * static_cast<float>(static_cast<int>(low | (high << 4)) - 32);  // the CPU's dl, rounded once
    }
  }
};

struct DecodeQ6_K : PlaneMap, QuantForms<DecodeQ6_K> {
  static constexpr DType kType = DType::Q6_K;
  static constexpr int kBlockBytes = sizeof(layout::BlockQ6_K);
  static constexpr bool kHasMin = false;
  static constexpr float kBias = 32.0f;
  template <class B>
  static __device__ __forceinline__ void unpack(typename B::Addr blk, int part, uint32_t* codes) {
    const int h = part >> 3;
    const int kp = (part >> 2) & 1;
    const int c = part & 3;
    const typename B::Addr ql = blk + offsetof(layout::BlockQ6_K, ql) + 64 * h + 32 * kp + 8 * c;
    const typename B::Addr qh = blk + offsetof(layout::BlockQ6_K, qh) + 32 * h + 8 * c;
    const uint32_t l0 = B::u32(ql);
    const uint32_t l1 = B::u32(ql + 4);
    const uint32_t h0 = B::u32(qh);
    const uint32_t h1 = B::u32(qh + 4);
    // weight k takes the 2 bits at 2k of qh[l] as its bits 4..5
    codes[0] = (l0 & kLowNibbles) | (((h0 >> (2 * kp)) & kLowBitPairs) << 4);
    codes[1] = (l1 & kLowNibbles) | (((h1 >> (2 * kp)) & kLowBitPairs) << 4);
    codes[2] = ((l0 >> 4) & kLowNibbles) | (((h0 >> (2 * kp + 4)) & kLowBitPairs) << 4);
    codes[3] = ((l1 >> 4) & kLowNibbles) | (((h1 >> (2 * kp + 4)) & kLowBitPairs) << 4);
  }
  template <class B>
  static __device__ __forceinline__ void fields(typename B::Addr blk, int part, float* scale, float* /*min*/) {
    const int h = part >> 3;
    const int kp = (part >> 2) & 1;
    const int c = part & 3;
    const float d = B::half(blk + offsetof(layout::BlockQ6_K, d));
    const typename B::Addr sc = blk + offsetof(layout::BlockQ6_K, scales) + 8 * h + c / 2;
    scale[0] = d * static_cast<float>(B::s8(sc + 2 * kp));  // the CPU's d * sc, rounded once
    scale[1] = d * static_cast<float>(B::s8(sc + 2 * kp + 4));
  }
};

// Unquantized weights: q is the weight itself. decode() reads a staged block at any byte offset;
// decode_words() takes the block's 16 bytes as 4 words (the GEMV's direct path, rows 16-byte aligned).
struct FloatShape {
  static constexpr int kLanesPerBlock = 1;
  static constexpr int kGroups = 1;
  static constexpr bool kUnitScale = true;
  static constexpr bool kHasMin = false;
  static constexpr bool kIntDecode = false;
  static constexpr int kRows = 2;          // x is re-read per 2 weight bytes at most; fewer registers
  static constexpr int kChunksPerLane = 3;  // one iteration is 512 bytes: 2 per segment
  static __device__ __forceinline__ int run_offset(int /*part*/, int run) { return 4 * run; }
};

// kWords words of packed f16 pairs as 2 kWords floats (the f16 GEMV rows, the persistent kernel's cache rows).
template <int kWords>
__device__ __forceinline__ void halves_to_floats(const uint32_t* w, float* q) {
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    q[2 * i] = f.x;
    q[2 * i + 1] = f.y;
  }
}

struct DecodeF16 : FloatShape {
  static constexpr DType kType = DType::F16;
  static constexpr int kBlockElems = 8;
  static constexpr int kBlockBytes = 16;
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void decode_words(const uint32_t* w, float* q) { halves_to_floats<4>(w, q); }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int /*part*/, float* q, float* /*scale*/, float* /*min*/) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = load_u32_any(blk + 4 * i);
    decode_words(w, q);
  }
};

struct DecodeBF16 : FloatShape {
  static constexpr DType kType = DType::BF16;
  static constexpr int kBlockElems = 8;
  static constexpr int kBlockBytes = 16;
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void decode_words(const uint32_t* w, float* q) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // bfloat16 is the top half of a float
      q[2 * i] = __uint_as_float(w[i] << 16);
      q[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int /*part*/, float* q, float* /*scale*/, float* /*min*/) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = load_u32_any(blk + 4 * i);
    decode_words(w, q);
  }
};

struct DecodeF32 : FloatShape {
  static constexpr DType kType = DType::F32;
  static constexpr int kBlockElems = 4;
  static constexpr int kBlockBytes = 16;
  static constexpr int kElems = 4;
  static __device__ __forceinline__ void decode_words(const uint32_t* w, float* q) {
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = __uint_as_float(w[i]);
  }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int /*part*/, float* q, float* /*scale*/, float* /*min*/) {
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = __uint_as_float(load_u32_any(blk + 4 * i));
  }
};

// The value of one E4M3 code, exactly (every E4M3 value is a half).
__device__ __forceinline__ float e4m3_value(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

// F8_B128 (gpu_accel's in-memory FP8 type, backends/cpu/quant_blocks.h): a float32 scale, then 128 E4M3 codes.
// 16 lanes, lane `part` owns codes [8 part, 8 part + 8) (two runs of 4). The codes become floats exactly (every
// E4M3 value is a half, and the conversion is one instruction on sm_89+), so the weights are q * scale with q the
// E4M3 value: a float decoder with one scale per block (kUnitScale false, kIntDecode false).
struct DecodeF8B128 {
  static constexpr DType kType = DType::F8_B128;
  static constexpr int kBlockElems = layout::kQKF8;
  static constexpr int kBlockBytes = sizeof(layout::BlockF8B128);
  static constexpr int kLanesPerBlock = 16;
  static constexpr int kElems = 8;
  static constexpr int kGroups = 1;
  static constexpr bool kUnitScale = false;
  static constexpr bool kHasMin = false;
  static constexpr bool kIntDecode = false;
  static constexpr int kRows = 4;
  static constexpr int kChunksPerLane = 3;
  static __device__ __forceinline__ int run_offset(int part, int run) { return 8 * part + 4 * run; }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* /*min*/) {
    scale[0] = __uint_as_float(load_u32_any(blk + offsetof(layout::BlockF8B128, d)));
    const uint8_t* codes = blk + offsetof(layout::BlockF8B128, qs) + 8 * part;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const uint32_t four = load_u32_any(codes + 4 * w);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>(four >> (16 * h));
        const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&raw));
        q[4 * w + 2 * h] = f.x;
        q[4 * w + 2 * h + 1] = f.y;
      }
    }
  }
};

// ---- FP4: MXFP4 and NVFP4 (E2M1 codes, backends/cpu/quant_blocks.h) ----
//
// A code is a sign bit and a 3-bit magnitude index; the CPU's weight is kFp4Levels[code] (ggml's doubled E2M1
// levels 0, 1, 2, 3, 4, 6, 8, 12) times the block's halved scale, one float product. The levels are not affine in
// the code, so these decoders have no unpack() + fields() form: fp4_code_floats() looks the magnitudes up with a
// PRMT (the 8 levels are the 8 bytes of two registers), 4 weights per PRMT, then builds each weight's float from
// its level byte and sign bit with one more PRMT: the float whose bits are sign << 31 | level, +-level * 2^-149.
// That is decode_int's code float with the sign in the float itself, so there is no bias, no offset and no
// sum(x) term (int_decode_has_offset is false); 15 instructions per 8 weights, against Q4_0's 11 plus its sum.

// Bytes i of the two PRMT table registers: the levels of magnitude indices 0..3 and 4..7, from the CPU's table.
constexpr uint32_t fp4_level_bytes(int first) {
  uint32_t word = 0;
  for (int i = 0; i < 4; ++i) {
    word |= static_cast<uint32_t>(static_cast<uint8_t>(layout::kFp4Levels[first + i])) << (8 * i);
  }
  return word;
}
inline constexpr uint32_t kFp4LevelsLow = fp4_level_bytes(0);
inline constexpr uint32_t kFp4LevelsHigh = fp4_level_bytes(4);
static_assert(kFp4LevelsLow == 0x03020100u && kFp4LevelsHigh == 0x0C080604u, "levels 0 1 2 3 | 4 6 8 12");
static_assert(layout::kFp4Levels[8] == 0 && layout::kFp4Levels[15] == -layout::kFp4Levels[7],
              "codes 8..15 are the negatives of 0..7");

// PTX prmt in its generic mode: selector nibble k (bits 4k..4k+3) makes result byte k from byte n & 7 of
// {b, a}, copied when n < 8 and replaced by its sign (0x00 or 0xFF, the msb of that byte) when n >= 8.
// __byte_perm() masks the selector to 3 bits, so the sign mode, which writes zero bytes here, needs the
// instruction itself.
__device__ __forceinline__ uint32_t prmt_generic(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// The code floats of 4 packed bytes v (byte k = high code k << 4 | low code k): low[k] of the low nibbles,
// high[k] of the high ones, each the float with bits sign << 31 | level.
__device__ __forceinline__ void fp4_code_floats(uint32_t v, float* low, float* high) {
  const uint32_t index = v & 0x77777777u;  // magnitude indices; nibbles 0..7: low 0, high 0, low 1, high 1, ...
  const uint32_t mag01 = prmt_generic(kFp4LevelsLow, kFp4LevelsHigh, index);        // levels of l0 h0 l1 h1
  const uint32_t mag23 = prmt_generic(kFp4LevelsLow, kFp4LevelsHigh, index >> 16);  // levels of l2 h2 l3 h3
  const uint32_t sign_low = (v << 4) & 0x80808080u;  // byte k: 0x80 where low code k is negative, else 0
  const uint32_t sign_high = v & 0x80808080u;
  // byte 0 the level, bytes 1 and 2 the sign of a level byte (< 0x80: zero), byte 3 the sign byte k:
  // selector 0x(4+k)(8|m)(8|m)m for the level at byte m of the magnitude word
  low[0] = __uint_as_float(prmt_generic(mag01, sign_low, 0x4880u));
  low[1] = __uint_as_float(prmt_generic(mag01, sign_low, 0x5AA2u));
  low[2] = __uint_as_float(prmt_generic(mag23, sign_low, 0x6880u));
  low[3] = __uint_as_float(prmt_generic(mag23, sign_low, 0x7AA2u));
  high[0] = __uint_as_float(prmt_generic(mag01, sign_high, 0x4991u));
  high[1] = __uint_as_float(prmt_generic(mag01, sign_high, 0x5BB3u));
  high[2] = __uint_as_float(prmt_generic(mag23, sign_high, 0x6991u));
  high[3] = __uint_as_float(prmt_generic(mag23, sign_high, 0x7BB3u));
}

// The level of a code float as an ordinary float: +-level exactly, and +0 for both zero codes (the CPU's
// static_cast<float>(0) * d is +0; a -0 here would differ in the embedding's bits).
__device__ __forceinline__ float fp4_level(float code) {
  const uint32_t bits = __float_as_uint(code);
  const int level = static_cast<int>(bits & 0xFFu);
  return static_cast<float>(bits >> 31 ? -level : level);
}

// The two forms of an FP4 decoder `Self`, from its code_floats() (the lane's kElems code floats in run
// order) and its scale byte's conversions half_scale() (the CPU's halved block scale, exactly) and
// int_scale() (that scale times kIntDotUnscale).
template <class Self>
struct Fp4Forms {
  static constexpr bool kUnitScale = false;
  static constexpr bool kIntDecode = true;
  static constexpr bool kHasMin = false;
  static constexpr float kBias = 0.0f;
  static constexpr int kGroups = 1;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int part, float* q, float* scale, float* /*min*/) {
    Self::template code_floats<AnyBytes>(blk, part, q);
#pragma unroll
    for (int e = 0; e < Self::kElems; ++e) q[e] = fp4_level(q[e]);
    scale[0] = Self::half_scale(AnyBytes::u8(blk + Self::scale_offset(part)));
  }
  template <class B>
  static __device__ __forceinline__ void decode_int(typename B::Addr blk, int part, float* q, float* scale,
                                                    float* offset) {
    Self::template code_floats<B>(blk, part, q);
    scale[0] = Self::int_scale(B::u8(blk + Self::scale_offset(part)));
    offset[0] = 0.0f;  // never read (int_decode_has_offset)
  }
};

// MXFP4: one E8M0 exponent e per 32 weights, scale 2^(e-127), halved 2^(e-128); lanes as Q4_0's.
struct DecodeMXFP4 : Fp4Forms<DecodeMXFP4> {
  static constexpr DType kType = DType::MXFP4;
  static constexpr int kBlockElems = layout::kQK;
  static constexpr int kBlockBytes = sizeof(layout::BlockMXFP4);
  static constexpr int kLanesPerBlock = 4;
  static constexpr int kElems = 8;
  static constexpr int kRows = ClassicShape::kRows;
  static constexpr int kChunksPerLane = ClassicShape::kChunksPerLane;
  static __device__ __forceinline__ int run_offset(int part, int run) { return ClassicShape::run_offset(part, run); }
  static __device__ __forceinline__ int scale_offset(int /*part*/) {
    return static_cast<int>(offsetof(layout::BlockMXFP4, e));
  }
  template <class B>
  static __device__ __forceinline__ void code_floats(typename B::Addr blk, int part, float* q) {
    fp4_code_floats(B::u32(blk + offsetof(layout::BlockMXFP4, qs) + 4 * part), q, q + 4);
  }
  // layout::e8m0_half: 2^(e-128), the float subnormals 2^-128 and 2^-127 for e = 0 and 1
  static __device__ __forceinline__ float half_scale(uint32_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  }
  // 2^(e-128) * 2^69 = 2^(e-59), a normal float for every e up to 186; +inf beyond, where the product overflows
  static __device__ __forceinline__ float int_scale(uint32_t e) { return __uint_as_float(min(e + 68u, 255u) << 23); }
};

// NVFP4: 64 weights in 4 sub-blocks of 16, a UE4M3 scale each; lane `part` decodes sub-block `part`.
struct DecodeNVFP4 : Fp4Forms<DecodeNVFP4> {
  static constexpr DType kType = DType::NVFP4;
  static constexpr int kBlockElems = layout::kQKNV;
  static constexpr int kBlockBytes = sizeof(layout::BlockNVFP4);
  static constexpr int kLanesPerBlock = layout::kQKNV / layout::kQKNVSub;
  static constexpr int kElems = layout::kQKNVSub;
  static constexpr int kRows = KShape::kRows;  // 16 weights per lane, as the K-quants
  static constexpr int kChunksPerLane = KShape::kChunksPerLane;
  static __device__ __forceinline__ int run_offset(int part, int run) { return kElems * part + 4 * run; }
  static __device__ __forceinline__ int scale_offset(int part) {
    return static_cast<int>(offsetof(layout::BlockNVFP4, d)) + part;
  }
  // byte j of the sub-block: weight j (low nibble) and j + 8 (high), so bytes 0..3 give runs 0 and 2, 4..7 runs 1, 3
  template <class B>
  static __device__ __forceinline__ void code_floats(typename B::Addr blk, int part, float* q) {
    const typename B::Addr qs = blk + offsetof(layout::BlockNVFP4, qs) + (kElems / 2) * part;
    fp4_code_floats(B::u32(qs), q, q + 8);
    fp4_code_floats(B::u32(qs + 4), q + 4, q + 12);
  }
  // The UE4M3 byte x as a half: (x & 0x7F) << 7 puts its 4 exponent and 3 mantissa bits where a half's low 4
  // exponent bits and top mantissa bits are, so the half is the UE4M3 value times 2^-8 exactly, subnormals
  // included (a half subnormal becomes a normal float: no subnormal float arithmetic). x = 0x7F (and only that
  // byte: 0xFF is 240) is 0, as layout::ue4m3_half.
  static __device__ __forceinline__ float ue4m3_over_256(uint32_t x) {
    const float v = __half2float(__ushort_as_half(static_cast<unsigned short>((x & 0x7Fu) << 7)));
    return x == 0x7Fu ? 0.0f : v;
  }
  static __device__ __forceinline__ float half_scale(uint32_t x) { return ue4m3_over_256(x) * 0x1p7f; }
  static __device__ __forceinline__ float int_scale(uint32_t x) {
    return ue4m3_over_256(x) * (0x1p7f * kIntDotUnscale);
  }
};

}  // namespace ga::cuda::detail
