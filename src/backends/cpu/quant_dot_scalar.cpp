// Portable dot products of one stored weight row with float32 activations (always compiled).
//
// This is the reference the AVX2 kernels are tested against and the fallback on CPUs without
// AVX2/FMA. Quantized rows go through the shared unpacked form (quant_unpack.h): per sub-block
// sum(q * x) and sum(x) in float, scaled once per sub-block; the running total across blocks is
// a double so that long rows do not lose accuracy in the scalar path. Activations are never
// quantized (unlike llama.cpp's CPU backend), so the result is the float64 dot of the
// dequantized row up to float32 rounding.
#include <array>

#include "backends/cpu/quant.h"
#include "backends/cpu/quant_kernels.h"
#include "backends/cpu/quant_unpack.h"
#include "gpu_accel/error.h"

namespace ga::cpu::scalar {
namespace {

using detail::Unpack;
using detail::UnpackedBlock;

template <typename Block>
float dot_blocks(const void* row, const float* x, int64_t n) {
  constexpr auto shape = Unpack<Block>::kShape;
  const auto* b = static_cast<const Block*>(row);
  const int64_t nb = n / shape.n;
  UnpackedBlock u;
  double total = 0.0;
  for (int64_t i = 0; i < nb; ++i, x += shape.n) {
    Unpack<Block>::run(b[i], u);
    float block_sum = 0.0f;
    for (int s = 0; s < shape.n / shape.sub_size; ++s) {
      const int8_t* q = u.q + s * shape.sub_size;
      const float* xs = x + s * shape.sub_size;
      float sum_qx = 0.0f;
      float sum_x = 0.0f;
      for (int j = 0; j < shape.sub_size; ++j) {
        sum_qx += static_cast<float>(q[j]) * xs[j];
        sum_x += xs[j];
      }
      block_sum += u.scale[s] * sum_qx;
      if constexpr (shape.has_min) block_sum -= u.min[s] * sum_x;
    }
    total += block_sum;
  }
  return static_cast<float>(total);
}

template <typename Convert>
float dot_halves(const void* row, const float* x, int64_t n, Convert convert) {
  const auto* p = static_cast<const uint8_t*>(row);
  double total = 0.0;
  constexpr int64_t kChunk = 64;  // float partial sums over short runs, double across them
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t end = i + kChunk < n ? i + kChunk : n;
    float partial = 0.0f;
    for (int64_t j = i; j < end; ++j) {
      uint16_t bits;
      std::memcpy(&bits, p + 2 * j, 2);
      partial += convert(bits) * x[j];
    }
    total += partial;
  }
  return static_cast<float>(total);
}

// F8_B128: per block d * sum(e4m3(q) x), float inside a block, double across blocks; the codes through a table of
// their 256 float values (each exact).
float dot_f8_b128(const void* row, const float* x, int64_t n) {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  const auto* b = static_cast<const blocks::BlockF8B128*>(row);
  double total = 0.0;
  for (int64_t i = 0; i < n / blocks::kQKF8; ++i, x += blocks::kQKF8) {
    float sum = 0.0f;
    for (int j = 0; j < blocks::kQKF8; ++j) sum += table[b[i].qs[j]] * x[j];
    total += blocks::f8_block_scale(b[i]) * sum;
  }
  return static_cast<float>(total);
}

float dot_f32(const float* w, const float* x, int64_t n) {
  double total = 0.0;
  constexpr int64_t kChunk = 64;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t end = i + kChunk < n ? i + kChunk : n;
    float partial = 0.0f;
    for (int64_t j = i; j < end; ++j) partial += w[j] * x[j];
    total += partial;
  }
  return static_cast<float>(total);
}

}  // namespace

float dot_row(DType type, const void* row, const float* x, int64_t n) {
  detail::checked_block_count("dot_row", type, n);
  using namespace blocks;
  switch (type) {
    case DType::F32: return dot_f32(static_cast<const float*>(row), x, n);
    case DType::F16: return dot_halves(row, x, n, fp16_to_f32);
    case DType::BF16: return dot_halves(row, x, n, bf16_to_f32);
    case DType::Q4_0: return dot_blocks<BlockQ4_0>(row, x, n);
    case DType::Q4_1: return dot_blocks<BlockQ4_1>(row, x, n);
    case DType::Q5_0: return dot_blocks<BlockQ5_0>(row, x, n);
    case DType::Q5_1: return dot_blocks<BlockQ5_1>(row, x, n);
    case DType::Q8_0: return dot_blocks<BlockQ8_0>(row, x, n);
    case DType::Q2_K: return dot_blocks<BlockQ2_K>(row, x, n);
    case DType::Q3_K: return dot_blocks<BlockQ3_K>(row, x, n);
    case DType::Q4_K: return dot_blocks<BlockQ4_K>(row, x, n);
    case DType::Q5_K: return dot_blocks<BlockQ5_K>(row, x, n);
    case DType::Q6_K: return dot_blocks<BlockQ6_K>(row, x, n);
    case DType::MXFP4: return dot_blocks<BlockMXFP4>(row, x, n);
    case DType::NVFP4: return dot_blocks<BlockNVFP4>(row, x, n);
    case DType::F8_B128: return dot_f8_b128(row, x, n);
    default: GA_THROW(Unsupported, "dot_row: weight type ", traits(type).name, " is not supported on the CPU backend");
  }
}

}  // namespace ga::cpu::scalar
