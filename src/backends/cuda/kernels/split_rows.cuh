// Device traits of the split-row layout (weight_layout.h): where a row's codes and scales are, how a
// 16-byte chunk of codes becomes code words in activation order, and one weight as the CPU forms it.
// A trait gives the block's Block type, kBlockWeights, kCodeBytes (code bytes per block), kChunkWeights
// (weights per 16-byte chunk of codes), scale(p) (a block's scale from its bytes in the scale array, of
// sizeof(Block::d) bytes each) and code(codes, k) (weight k's code as the CPU multiplies it by the scale).
// Shared by the split-row GEMV (gemv_split.cuh), the repack, the embedding gather and the f16
// dequantizer (split_rows.cu), so the layout is defined once.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/kernels/weight_decode.cuh"

namespace ga::cuda::detail {

template <class D>
struct SplitRows {
  static constexpr bool kEnabled = false;
};

// The fp16 scale of a classic block at p (2-byte aligned in the scale array).
__device__ __forceinline__ float half_scale(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}

// Q8_0: a chunk is 16 int8 codes = half a block; codes are flipped to unsigned (+128) for the
// GEMV's subnormal decode (the bias returns as -128 * d * sum(x)).
template <>
struct SplitRows<DecodeQ8_0> {
  static constexpr bool kEnabled = true;
  using Block = layout::BlockQ8_0;
  static constexpr int kBlockWeights = 32;
  static constexpr int kCodeBytes = 32;     // codes per block of 32 weights
  static constexpr int kChunkWeights = 16;  // weights per 16-byte chunk of codes
  static constexpr float kBias = 128.0f;
  // words[j] = unsigned codes of weights 4j..4j+3 of the chunk
  static __device__ __forceinline__ void chunk_codes(const uint4& c, uint32_t* words) {
    words[0] = c.x ^ kSignFlip;
    words[1] = c.y ^ kSignFlip;
    words[2] = c.z ^ kSignFlip;
    words[3] = c.w ^ kSignFlip;
  }
  static __device__ __forceinline__ float scale(const uint8_t* p) { return half_scale(p); }
  // the signed code of weight k (0..31) of a block whose codes start at `codes`
  static __device__ __forceinline__ float code(const uint8_t* codes, int k) {
    return static_cast<float>(reinterpret_cast<const int8_t*>(codes)[k]);
  }
};

// Q4_0: a chunk is one block's 16 code bytes in GGUF order: low nibbles are weights 0..15, high
// nibbles 16..31.
template <>
struct SplitRows<DecodeQ4_0> {
  static constexpr bool kEnabled = true;
  using Block = layout::BlockQ4_0;
  static constexpr int kBlockWeights = 32;
  static constexpr int kCodeBytes = 16;
  static constexpr int kChunkWeights = 32;
  static constexpr float kBias = 8.0f;
  static __device__ __forceinline__ void chunk_codes(const uint4& c, uint32_t* words) {
    const uint32_t v[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      words[j] = v[j] & kLowNibbles;
      words[4 + j] = (v[j] >> 4) & kLowNibbles;
    }
  }
  static __device__ __forceinline__ float scale(const uint8_t* p) { return half_scale(p); }
  static __device__ __forceinline__ float code(const uint8_t* codes, int k) {
    const uint32_t b = codes[k & 15];
    return static_cast<float>(static_cast<int>(k < 16 ? (b & 0xFu) : (b >> 4)) - 8);
  }
};

// F8_B128: a block is 128 E4M3 codes and a float32 scale; a chunk is 16 codes in column order (the mma GEMV,
// gemv_split_f8.cuh, converts them to f16 pairs; the readers below to float). Rows of a multiple of 4 blocks
// (cols % 512 == 0) are whole 16-byte chunks: 132 bytes per block.
template <>
struct SplitRows<DecodeF8B128> {
  static constexpr bool kEnabled = true;
  using Block = layout::BlockF8B128;
  static constexpr int kBlockWeights = layout::kQKF8;
  static constexpr int kCodeBytes = layout::kQKF8;
  static constexpr int kChunkWeights = 16;
  static __device__ __forceinline__ float scale(const uint8_t* p) { return *reinterpret_cast<const float*>(p); }
  static __device__ __forceinline__ float code(const uint8_t* codes, int k) { return e4m3_value(codes[k]); }
};

// Byte offset of the scales inside a split row of `blocks` blocks.
template <class D>
__host__ __device__ constexpr int64_t split_scales_offset(int64_t blocks) {
  return blocks * SplitRows<D>::kCodeBytes;
}

// Bytes of one block's scale in the scale array.
template <class D>
inline constexpr int kSplitScaleBytes = static_cast<int>(sizeof(SplitRows<D>::Block::d));

// The scale of block b of a split row of `blocks` blocks.
template <class D>
__device__ __forceinline__ float split_scale(const uint8_t* row, int64_t blocks, int64_t b) {
  return SplitRows<D>::scale(row + split_scales_offset<D>(blocks) + kSplitScaleBytes<D> * b);
}

// Weight k of a split row, formed as the CPU's dequantize_row does (d * q, one rounding).
template <class D>
__device__ __forceinline__ float split_weight(const uint8_t* row, int64_t blocks, int64_t k) {
  using S = SplitRows<D>;
  const int64_t b = k / S::kBlockWeights;
  return __fmul_rn(S::code(row + b * S::kCodeBytes, static_cast<int>(k % S::kBlockWeights)),
                   split_scale<D>(row, blocks, b));
}

}  // namespace ga::cuda::detail
