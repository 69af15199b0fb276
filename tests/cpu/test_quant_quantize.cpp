// quantize_row against llama-quantize: the F32 fixture model quantized by us vs the same model
// quantized by llama.cpp (fixtures/quant/fixture-<T>.gguf, `llama-quantize --pure`, no imatrix).
//
// Measured: every block of every type is byte-identical. The tests allow at most 0.1% differing
// blocks for the quantized types (a compiler that fused a multiply-add in the reference build
// would move values sitting exactly on a rounding boundary; F16/BF16 must match exactly), and for
// the K-quants (search-based) additionally require the weight RMSE of our dequantized result
// against the F32 source to be within 5% of llama.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"

namespace ga::cpu {
namespace {

struct Comparison {
  uint64_t blocks = 0;
  uint64_t differing_blocks = 0;
  double sq_err_ours = 0.0;    // sum (our dequantized - source)^2
  double sq_err_theirs = 0.0;  // sum (llama.cpp dequantized - source)^2
  uint64_t elements = 0;
};

Comparison compare_with_llama_quantize(DType type) {
  const auto source = gguf::File::open(test::shared_path("fixtures/quant/fixture-f32.gguf"));
  const auto theirs = gguf::File::open(test::shared_path(std::string("fixtures/quant/fixture-") + dtype_name(type) +
                                                         ".gguf"));
  const auto& tr = traits(type);
  Comparison c;
  int matrices = 0;
  for (const auto& t : source.tensors()) {
    if (t.ne.size() != 2) continue;  // norm vectors stay F32
    const auto* q = theirs.find_tensor(t.name);
    EXPECT_NE(q, nullptr) << t.name;
    if (q == nullptr) continue;
    EXPECT_EQ(q->type, type) << t.name;
    EXPECT_EQ(q->ne, t.ne) << t.name;
    if (q->type != type || q->ne != t.ne) continue;
    ++matrices;
    const auto cols = static_cast<int64_t>(t.ne[0]);
    const auto rows = static_cast<int64_t>(t.ne[1]);
    const uint64_t row_size = row_bytes(type, static_cast<uint64_t>(cols));
    const auto* src = reinterpret_cast<const float*>(source.tensor_data(t));
    std::vector<float> row(static_cast<size_t>(cols));
    std::vector<uint8_t> ours(row_size);
    std::vector<float> deq_ours(static_cast<size_t>(cols)), deq_theirs(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(row.data(), src + r * cols, static_cast<size_t>(cols) * sizeof(float));  // aligned copy
      quantize_row(type, row.data(), ours.data(), cols);
      const uint8_t* ref = theirs.tensor_data(*q) + static_cast<uint64_t>(r) * row_size;
      for (uint64_t b = 0; b < row_size / tr.type_size; ++b) {
        ++c.blocks;
        if (std::memcmp(ours.data() + b * tr.type_size, ref + b * tr.type_size, tr.type_size) != 0) {
          ++c.differing_blocks;
        }
      }
      dequantize_row(type, ours.data(), deq_ours.data(), cols);
      dequantize_row(type, ref, deq_theirs.data(), cols);
      for (int64_t k = 0; k < cols; ++k) {
        const double a = static_cast<double>(deq_ours[k]) - row[k];
        const double b = static_cast<double>(deq_theirs[k]) - row[k];
        c.sq_err_ours += a * a;
        c.sq_err_theirs += b * b;
      }
      c.elements += static_cast<uint64_t>(cols);
    }
  }
  EXPECT_EQ(matrices, 16) << "the fixture model has 16 matrices";
  return c;
}

class QuantizeExact : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeExact, MatchesLlamaQuantizeBytes) {
  const DType type = GetParam();
  const Comparison c = compare_with_llama_quantize(type);
  ASSERT_GT(c.blocks, 0u);
  const double fraction = static_cast<double>(c.differing_blocks) / static_cast<double>(c.blocks);
  std::printf("%s: %llu of %llu blocks differ from llama-quantize\n", dtype_name(type),
              static_cast<unsigned long long>(c.differing_blocks), static_cast<unsigned long long>(c.blocks));
  const bool is_float = type == DType::F16 || type == DType::BF16;
  EXPECT_LE(fraction, is_float ? 0.0 : 1e-3) << c.differing_blocks << " of " << c.blocks << " blocks differ";
  EXPECT_LE(c.sq_err_ours, c.sq_err_theirs * 1.0001 + 1e-30);
}

INSTANTIATE_TEST_SUITE_P(Classic, QuantizeExact,
                         ::testing::Values(DType::F16, DType::BF16, DType::Q8_0, DType::Q5_1, DType::Q5_0,
                                           DType::Q4_1, DType::Q4_0),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });

class QuantizeK : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeK, RmseWithinFivePercentOfLlamaQuantize) {
  const DType type = GetParam();
  const Comparison c = compare_with_llama_quantize(type);
  ASSERT_GT(c.elements, 0u);
  const double rmse_ours = std::sqrt(c.sq_err_ours / static_cast<double>(c.elements));
  const double rmse_theirs = std::sqrt(c.sq_err_theirs / static_cast<double>(c.elements));
  std::printf("%s: RMSE ours %.6g, llama.cpp %.6g; %llu of %llu blocks differ\n", dtype_name(type), rmse_ours,
              rmse_theirs, static_cast<unsigned long long>(c.differing_blocks),
              static_cast<unsigned long long>(c.blocks));
  EXPECT_GT(rmse_theirs, 0.0);
  EXPECT_LE(rmse_ours, rmse_theirs * 1.05);
  EXPECT_LE(static_cast<double>(c.differing_blocks), 1e-3 * static_cast<double>(c.blocks));
}

INSTANTIATE_TEST_SUITE_P(KQuants, QuantizeK,
                         ::testing::Values(DType::Q6_K, DType::Q5_K, DType::Q4_K, DType::Q3_K, DType::Q2_K),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });

// Quantize -> dequantize round trip of edge-case blocks: all zeros, a single outlier, constant
// blocks, and tiny values. Zero blocks must decode to exact zeros; every block to finite values.
TEST(Quantize, EdgeCaseBlocksDecodeSanely) {
  const DType types[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K,
                         DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  for (const DType type : types) {
    const int64_t n = 256;
    std::vector<uint8_t> q(row_bytes(type, n));
    std::vector<float> out(n);
    std::vector<float> zeros(n, 0.0f);
    quantize_row(type, zeros.data(), q.data(), n);
    dequantize_row(type, q.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 0.0f) << dtype_name(type) << " zero block, element " << i;

    std::vector<float> outlier(n, 0.0f);
    outlier[5] = 3.0f;
    quantize_row(type, outlier.data(), q.data(), n);
    dequantize_row(type, q.data(), out.data(), n);
    EXPECT_NEAR(out[5], 3.0f, 0.2f) << dtype_name(type);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(out[i])) << dtype_name(type);

    std::vector<float> constant(n, -0.75f);
    quantize_row(type, constant.data(), q.data(), n);
    dequantize_row(type, q.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], -0.75f, 0.05f) << dtype_name(type) << " element " << i;
  }
}

TEST(Quantize, RejectsBadInput) {
  std::vector<float> src(256);
  std::vector<uint8_t> dst(1024);
  EXPECT_THROW(quantize_row(DType::Q4_0, src.data(), dst.data(), 33), Error);
  try {
    quantize_row(DType::IQ4_XS, src.data(), dst.data(), 256);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  }
}

}  // namespace
}  // namespace ga::cpu
