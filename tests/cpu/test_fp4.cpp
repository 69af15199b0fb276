// MXFP4 and NVFP4 against gguf-py, an independent implementation.
//
// tests/data/fp4/ (written by tools/reference/make_fp4_reference.py) holds blocks that gguf-py
// quantized, plus blocks of random bytes covering every scale code, and gguf-py's float32
// dequantization of all of them. Our dequantizer must match bit for bit; the dot products must
// equal the float64 dot of those dequantized values up to float rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "common/test_data.h"
#include "gpu_accel/dtype.h"

namespace ga::cpu {
namespace {

struct Reference {
  std::string blocks;        // raw ggml blocks
  std::vector<float> deq;    // gguf-py's dequantization
  int64_t n_blocks = 0;
};

Reference load(DType type) {
  const std::string base = std::string("tests/data/fp4/") + (type == DType::MXFP4 ? "mxfp4" : "nvfp4");
  Reference r;
  r.blocks = test::read_file(test::repo_path(base + ".blocks"));
  r.deq = test::read_f32_file(test::repo_path(base + ".f32"));
  r.n_blocks = static_cast<int64_t>(r.blocks.size() / traits(type).type_size);
  return r;
}

class Fp4 : public ::testing::TestWithParam<DType> {};

TEST_P(Fp4, TraitsMatchGgml) {
  const DType type = GetParam();
  const auto& tr = traits(type);
  EXPECT_TRUE(tr.quantized);
  EXPECT_TRUE(tr.supported);
  EXPECT_EQ(tr.block_size, type == DType::MXFP4 ? 32u : 64u);
  EXPECT_EQ(tr.type_size, type == DType::MXFP4 ? 17u : 36u);
  EXPECT_EQ(dtype_from_name(type == DType::MXFP4 ? "mxfp4" : "nvfp4"), type);
  EXPECT_EQ(dtype_traits(type == DType::MXFP4 ? 39u : 40u)->type, type);
}

TEST_P(Fp4, DequantizeMatchesGgufPyBitForBit) {
  const DType type = GetParam();
  const Reference r = load(type);
  const int64_t bs = traits(type).block_size;
  ASSERT_GT(r.n_blocks, 0);
  ASSERT_EQ(r.blocks.size(), static_cast<size_t>(r.n_blocks) * traits(type).type_size);
  ASSERT_EQ(r.deq.size(), static_cast<size_t>(r.n_blocks * bs));
  for (auto* dequantize : {&dequantize_row, &scalar::dequantize_row}) {
    std::vector<float> got(r.deq.size(), std::nanf(""));
    dequantize(type, r.blocks.data(), got.data(), static_cast<int64_t>(got.size()));
    int64_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (bits_from_f32(got[i]) != bits_from_f32(r.deq[i]) && mismatches++ < 5) {
        ADD_FAILURE() << dtype_name(type) << " element " << i << ": got " << got[i] << ", gguf-py " << r.deq[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST_P(Fp4, DotEqualsFloat64DotOfDequantized) {
  const DType type = GetParam();
  const Reference r = load(type);
  const int64_t bs = traits(type).block_size;
  const uint32_t ts = traits(type).type_size;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(r.deq.size());
  for (auto& v : x) v = normal(rng);

  auto check = [&](int64_t first_block, int64_t count) {
    double ref = 0.0, abs_sum = 0.0;
    for (int64_t i = first_block * bs; i < (first_block + count) * bs; ++i) {
      ref += static_cast<double>(r.deq[i]) * x[i];
      abs_sum += std::fabs(static_cast<double>(r.deq[i]) * x[i]);
    }
    if (!std::isfinite(abs_sum)) return;  // blocks whose scale overflows float (MXFP4 e near 255)
    const char* row = r.blocks.data() + first_block * ts;
    for (auto* dot : {&dot_row, &scalar::dot_row}) {
      const double got = dot(type, row, x.data() + first_block * bs, count * bs);
      EXPECT_NEAR(got, ref, 1e-5 * abs_sum + 1e-30) << dtype_name(type) << " blocks " << first_block << "+" << count;
    }
  };
  for (int64_t b = 0; b < r.n_blocks; ++b) check(b, 1);
  const int64_t quantized = 1024 / bs;  // the leading blocks gguf-py quantized (all finite)
  check(0, quantized);
  check(1, quantized - 1);
}

TEST_P(Fp4, MatmulThroughTheDispatch) {
  // A 4 x 256 matrix of reference blocks times a batch: matmul must equal row-wise dots of the
  // dequantized weights.
  const DType type = GetParam();
  const Reference r = load(type);
  const int64_t cols = 256, rows = 4;
  const uint64_t rb = row_bytes(type, cols);
  ASSERT_LE(static_cast<size_t>(rows) * rb, r.blocks.size());
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  const MatrixRef w{type, reinterpret_cast<const uint8_t*>(r.blocks.data()), rows, cols, rb};
  for (const int64_t batch : {int64_t{1}, int64_t{3}}) {  // the decode (dot) and prefill (decode-once) paths
    std::vector<float> x(static_cast<size_t>(batch * cols));
    for (auto& v : x) v = normal(rng);
    std::vector<float> y(static_cast<size_t>(batch * rows));
    matmul(w, x.data(), batch, cols, y.data(), rows, nullptr);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t o = 0; o < rows; ++o) {
        double ref = 0.0, abs_sum = 0.0;
        for (int64_t k = 0; k < cols; ++k) {
          const double p = static_cast<double>(r.deq[o * cols + k]) * x[b * cols + k];
          ref += p;
          abs_sum += std::fabs(p);
        }
        EXPECT_NEAR(y[b * rows + o], ref, 1e-5 * abs_sum + 1e-30) << "row " << o << " batch " << b << "/" << batch;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Fp4, ::testing::Values(DType::MXFP4, DType::NVFP4),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace ga::cpu
