// See quant_weights.h. The offsets are those of ggml-common.h's block structs (d first, then m / dmin;
// Q2_K and Q3_K keep theirs after the scales and levels, Q6_K at the very end).
#include "common/quant_weights.h"

#include <cstring>

namespace ga::test {

std::vector<int> fp16_field_offsets(DType type) {
  switch (type) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return {0};
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    default: return {};
  }
}

void set_finite_fp16_fields(DType type, uint8_t* blocks, int64_t n_blocks, std::mt19937& rng) {
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  const uint64_t block_bytes = traits(type).type_size;
  const std::vector<int> offsets = fp16_field_offsets(type);
  for (int64_t blk = 0; blk < n_blocks; ++blk) {
    for (size_t k = 0; k < offsets.size(); ++k) {
      const float v = k == 0 ? (rng() % 2 ? 1.0f : -1.0f) * scale(rng) : scale(rng);
      const uint16_t h = f32_to_fp16(v);
      std::memcpy(blocks + static_cast<uint64_t>(blk) * block_bytes + offsets[k], &h, 2);
    }
  }
}

std::vector<uint8_t> random_weight_rows(DType type, int64_t rows, int64_t cols, uint64_t row_stride, std::mt19937& rng) {
  const auto& tr = traits(type);
  const uint64_t rb = row_bytes(type, static_cast<uint64_t>(cols));
  std::vector<uint8_t> data(rows > 0 ? row_stride * static_cast<uint64_t>(rows - 1) + rb : 0);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = data.data() + static_cast<uint64_t>(r) * row_stride;
    if (type == DType::F8_B128) {  // a float32 scale per block, codes without the NaN ones (0x7F, 0xFF)
      std::uniform_real_distribution<float> scale(0.001f, 0.05f);
      for (int64_t b = 0; b < cols / tr.block_size; ++b) {
        uint8_t* blk = row + static_cast<uint64_t>(b) * tr.type_size;
        const float s = scale(rng);
        std::memcpy(blk, &s, 4);
        for (uint32_t j = 4; j < tr.type_size; ++j) {
          if ((blk[j] & 0x7f) == 0x7f) blk[j] ^= 1;
        }
      }
      continue;
    }
    if (type == DType::MXFP4) {
      // E8M0 exponents of real weights' sizes (halved scales 2^-9 .. 2^6), and in 1 block of 16 the subnormal halved
      // scales of e = 0 and 1; random exponents would overflow (e = 255: 2^127 * 12)
      for (int64_t b = 0; b < cols / tr.block_size; ++b) {
        row[static_cast<uint64_t>(b) * tr.type_size] =
            static_cast<uint8_t>(rng() % 16 == 0 ? rng() % 2 : 119 + rng() % 16);
      }
      continue;
    }
    if (tr.quantized) {  // NVFP4 included: every UE4M3 scale byte is finite (at most 240 * 12)
      set_finite_fp16_fields(type, row, cols / tr.block_size, rng);
      continue;
    }
    for (int64_t i = 0; i < cols; ++i) {
      const float v = normal(rng);
      if (type == DType::F32) {
        std::memcpy(row + 4 * i, &v, 4);
      } else {
        const uint16_t h = type == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
        std::memcpy(row + 2 * i, &h, 2);
      }
    }
  }
  return data;
}

}  // namespace ga::test
