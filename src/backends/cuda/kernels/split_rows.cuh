// Device traits of the split-row layout (weight_layout.h): where a row's codes and scales are, how a
// 16-byte chunk of codes becomes code words in activation order, and one weight as the CPU forms it.
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

// Q8_0: a chunk is 16 int8 codes = half a block; codes are flipped to unsigned (+128) for the
// GEMV's subnormal decode (the bias returns as -128 * d * sum(x)).
template <>
struct SplitRows<DecodeQ8_0> {
  static constexpr bool kEnabled = true;
  using Block = layout::BlockQ8_0;
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
  static __device__ __forceinline__ float code(const uint8_t* codes, int k) {
    const uint32_t b = codes[k & 15];
    return static_cast<float>(static_cast<int>(k < 16 ? (b & 0xFu) : (b >> 4)) - 8);
  }
};

// Byte offset of the scales inside a split row of `blocks` blocks.
template <class D>
__host__ __device__ constexpr int64_t split_scales_offset(int64_t blocks) {
  return blocks * SplitRows<D>::kCodeBytes;
}

// Weight k of a split row, formed as the CPU's dequantize_row does (d * q, one rounding).
template <class D>
__device__ __forceinline__ float split_weight(const uint8_t* row, int64_t blocks, int64_t k) {
  using S = SplitRows<D>;
  const int64_t b = k / 32;
  const float d = __half2float(__ushort_as_half(
      *reinterpret_cast<const unsigned short*>(row + split_scales_offset<D>(blocks) + 2 * b)));
  return __fmul_rn(S::code(row + b * S::kCodeBytes, static_cast<int>(k % 32)), d);
}

}  // namespace ga::cuda::detail
