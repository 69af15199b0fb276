// matmul against a float64 reference (dequantized weights, float64 dots) for every weight type,
// awkward shapes (7/19/37/733 rows), decode and prefill token counts, padded strides and 1/2/4
// threads.
//
// Weights are random stored bytes with finite fp16 scales (as in test_quant_dot), the output is
// poisoned with NaN so an unwritten element fails, and the padding columns of y must stay
// untouched. Errors are measured against sum_k |W[r][k] x[t][k]| per output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "common/quant_weights.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

// `rows` random rows of `cols` elements, each row_stride bytes apart (padding bytes are random).
std::vector<uint8_t> random_matrix(DType type, int64_t rows, int64_t cols, uint64_t row_stride, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> data(row_stride * static_cast<uint64_t>(rows));
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const auto& tr = traits(type);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = data.data() + static_cast<uint64_t>(r) * row_stride;
    for (int64_t i = 0; i < cols && !tr.quantized; ++i) {
      const float v = normal(rng);
      if (type == DType::F32) {
        std::memcpy(row + 4 * i, &v, 4);
      } else {
        const uint16_t h = type == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
        std::memcpy(row + 2 * i, &h, 2);
      }
    }
    if (tr.quantized) test::set_finite_fp16_fields(type, row, cols / tr.block_size, rng);
  }
  return data;
}

struct Shape {
  int64_t rows;
  int64_t blocks_per_row;
  int64_t n_tokens;
};

class Matmul : public ::testing::TestWithParam<DType> {};

TEST_P(Matmul, MatchesFloat64ReferenceOnAwkwardShapes) {
  const DType type = GetParam();
  const int64_t block = traits(type).block_size == 1 ? 32 : traits(type).block_size;
  // Includes a row length above the 2048-column tile (the chunked accumulation path) and, for the
  // dense types, lengths that are not multiples of 8 (the scalar tails).
  std::vector<Shape> shapes = {{7, 1, 1}, {19, 3, 3}, {37, 2, 17}, {733, 1, 3}, {37, 4096 / block + 1, 3},
                               {19, 7, 1}, {733, 2, 1}};
  std::mt19937 rng(99u + static_cast<uint32_t>(type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool2(2), pool4(4);
  ThreadPool* pools[] = {nullptr, &pool2, &pool4};
  std::vector<int64_t> extra_cols = {0};
  if (traits(type).block_size == 1) extra_cols.push_back(5);

  for (const auto& s : shapes) {
    for (const int64_t extra : extra_cols) {
      const int64_t cols = s.blocks_per_row * block + extra;
      const uint64_t dense = row_bytes(type, static_cast<uint64_t>(cols));
      const uint64_t stride = dense + (s.rows % 2 ? 2 * traits(type).type_size : 0);  // padded rows on odd shapes
      const auto data = random_matrix(type, s.rows, cols, stride, rng);
      const MatrixRef w{type, data.data(), s.rows, cols, stride};
      const int64_t ldx = cols + 3;
      const int64_t ldy = s.rows + 2;
      std::vector<float> x(static_cast<size_t>(s.n_tokens * ldx));
      for (auto& v : x) v = normal(rng);

      // float64 reference from the dequantized rows
      std::vector<double> ref(static_cast<size_t>(s.n_tokens * s.rows)), mag(ref.size());
      std::vector<float> wrow(static_cast<size_t>(cols));
      for (int64_t r = 0; r < s.rows; ++r) {
        dequantize_row(type, data.data() + static_cast<uint64_t>(r) * stride, wrow.data(), cols);
        for (int64_t t = 0; t < s.n_tokens; ++t) {
          double acc = 0.0, m = 0.0;
          for (int64_t k = 0; k < cols; ++k) {
            const double p = static_cast<double>(wrow[k]) * x[t * ldx + k];
            acc += p;
            m += std::fabs(p);
          }
          ref[t * s.rows + r] = acc;
          mag[t * s.rows + r] = m;
        }
      }

      for (ThreadPool* pool : pools) {
        const int threads = pool ? pool->size() : 1;
        std::vector<float> y(static_cast<size_t>(s.n_tokens * ldy), std::nanf(""));
        matmul(w, x.data(), s.n_tokens, ldx, y.data(), ldy, pool);
        int64_t failures = 0;
        for (int64_t t = 0; t < s.n_tokens; ++t) {
          for (int64_t r = 0; r < s.rows; ++r) {
            const double err = std::fabs(y[t * ldy + r] - ref[t * s.rows + r]) / mag[t * s.rows + r];
            if (!(err <= 1e-5) && ++failures <= 3) {
              ADD_FAILURE() << dtype_name(type) << " rows " << s.rows << " cols " << cols << " tokens " << s.n_tokens
                            << " threads " << threads << ": y[" << t << "][" << r << "] = " << y[t * ldy + r]
                            << ", reference " << ref[t * s.rows + r] << " (rel err " << err << ")";
            }
          }
          for (int64_t r = s.rows; r < ldy; ++r) EXPECT_TRUE(std::isnan(y[t * ldy + r])) << "padding overwritten";
        }
        EXPECT_EQ(failures, 0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, Matmul,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                           DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                                           DType::Q5_K, DType::Q6_K),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });

TEST(MatmulErrors, RejectsBadShapes) {
  std::vector<uint8_t> data(34 * 4);
  std::vector<float> x(64), y(8);
  const MatrixRef w{DType::Q8_0, data.data(), 2, 64, 68};
  EXPECT_NO_THROW(matmul(w, x.data(), 1, 64, y.data(), 2, nullptr));
  MatrixRef short_stride = w;
  short_stride.row_stride = 60;
  EXPECT_THROW(matmul(short_stride, x.data(), 1, 64, y.data(), 2, nullptr), Error);
  MatrixRef bad_cols = w;
  bad_cols.cols = 48;
  EXPECT_THROW(matmul(bad_cols, x.data(), 1, 64, y.data(), 2, nullptr), Error);
  EXPECT_THROW(matmul(w, x.data(), 1, 32, y.data(), 2, nullptr), Error);  // ldx < cols
  MatrixRef unsupported = w;
  unsupported.type = DType::IQ2_XS;
  unsupported.cols = 256;
  EXPECT_THROW(matmul(unsupported, x.data(), 1, 256, y.data(), 2, nullptr), Error);
}

}  // namespace
}  // namespace ga::cpu
