// dot_row (the dispatched SIMD kernel) and scalar::dot_row against a float64 dot of the
// dequantized row, for every weight type and awkward row lengths.
//
// Rows are random bytes (every bit pattern of the packed levels and scales occurs) with the fp16
// scale fields overwritten by finite values, so every unpacking path is exercised. The reference
// is dequantize_row (checked bit-exact against ggml in test_quant_dequant) followed by a float64
// dot. The error is measured against sum |w_i x_i|, the natural scale of float32 rounding error
// in a dot product (the dot itself may cancel to almost zero).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "common/quant_weights.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

// The quantized types (each block's fp16 fields: test::fp16_field_offsets).
const DType kQuantTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                             DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// A random row of n elements of `type`, in its stored bytes.
std::vector<uint8_t> random_row(DType type, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> row(row_bytes(type, static_cast<uint64_t>(n)));
  if (type == DType::F32) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      std::memcpy(row.data() + 4 * i, &v, 4);
    }
    return row;
  }
  if (type == DType::F16 || type == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      const uint16_t h = type == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
      std::memcpy(row.data() + 2 * i, &h, 2);
    }
    return row;
  }
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  test::set_finite_fp16_fields(type, row.data(), static_cast<int64_t>(row.size() / traits(type).type_size), rng);
  return row;
}

struct Reference {
  double dot;
  double magnitude;  // sum |w_i x_i|
};

Reference reference_dot(DType type, const std::vector<uint8_t>& row, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> w(x.size());
  dequantize_row(type, row.data(), w.data(), n);
  Reference r{0.0, 0.0};
  for (int64_t i = 0; i < n; ++i) {
    r.dot += static_cast<double>(w[i]) * x[i];
    r.magnitude += std::fabs(static_cast<double>(w[i]) * x[i]);
  }
  return r;
}

std::vector<DType> all_types() {
  std::vector<DType> types = {DType::F32, DType::F16, DType::BF16};
  types.insert(types.end(), std::begin(kQuantTypes), std::end(kQuantTypes));
  return types;
}

class DotRow : public ::testing::TestWithParam<DType> {};

TEST_P(DotRow, MatchesFloat64ReferenceForAwkwardLengths) {
  const DType type = GetParam();
  const int64_t block = traits(type).block_size;
  std::vector<int64_t> lengths;
  for (int64_t blocks_per_row : {1, 2, 7, 19}) lengths.push_back(blocks_per_row * block);
  if (block == 1) lengths.insert(lengths.end(), {3, 8, 31, 33, 37, 733, 4099});  // every SIMD tail
  std::mt19937 rng(1234u + static_cast<uint32_t>(type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr double kTolerance = 1e-5;  // relative to sum |w_i x_i|
  for (const int64_t n : lengths) {
    for (int trial = 0; trial < 4; ++trial) {
      const auto row = random_row(type, n, rng);
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = normal(rng);
      const Reference ref = reference_dot(type, row, x);
      ASSERT_GT(ref.magnitude, 0.0);
      const double simd_err = std::fabs(dot_row(type, row.data(), x.data(), n) - ref.dot) / ref.magnitude;
      const double scalar_err = std::fabs(scalar::dot_row(type, row.data(), x.data(), n) - ref.dot) / ref.magnitude;
      EXPECT_LE(simd_err, kTolerance) << dtype_name(type) << " n=" << n << " trial " << trial;
      EXPECT_LE(scalar_err, kTolerance) << dtype_name(type) << " n=" << n << " trial " << trial << " (scalar)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DotRow, ::testing::ValuesIn(all_types()),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });

TEST(DotRowErrors, RejectsBadLengthAndUnsupportedTypes) {
  std::vector<uint8_t> row(4096);
  std::vector<float> x(1024);
  EXPECT_THROW(dot_row(DType::Q8_0, row.data(), x.data(), 33), Error);
  EXPECT_THROW(scalar::dot_row(DType::Q6_K, row.data(), x.data(), 128), Error);
  try {
    dot_row(DType::IQ4_NL, row.data(), x.data(), 32);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  }
}

}  // namespace
}  // namespace ga::cpu
