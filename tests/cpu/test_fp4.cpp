// MXFP4 and NVFP4 against gguf-py, an independent implementation.
//
// tests/data/fp4/ (written by tools/reference/make_fp4_reference.py) holds blocks that gguf-py
// quantized, plus blocks of random bytes covering every scale code, and gguf-py's float32
// dequantization of all of them. Our dequantizer must match bit for bit; the dot products must
// equal the float64 dot of those dequantized values up to float rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "backends/cpu/quant_blocks.h"
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

// quantize_row of random rows (block magnitudes 2^-12 .. 2^12): each weight dequantizes to a level times its
// block's halved scale (read back from the bytes) that no other level beats (|level * d - x|, as the quantizer
// measures it); a wrong nibble order would pair weights with other weights' codes. MXFP4 also re-finds its own
// dequantized values exactly: levels times a power of two, whatever the largest level (floor(log2) steps the
// exponent down to where 2L, 4L or 8L are levels again).
TEST_P(Fp4, QuantizeRowPicksTheNearestLevel) {
  const DType type = GetParam();
  const int64_t bs = traits(type).block_size;
  const int64_t ts = traits(type).type_size;
  const int64_t sub = type == DType::MXFP4 ? 32 : 16;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int64_t n = 75 * bs;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i / bs % 25) - 12);
  std::vector<uint8_t> q(row_bytes(type, n));
  quantize_row(type, x.data(), q.data(), n);
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(type, q.data(), y.data(), n);
  int64_t beaten = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* blk = q.data() + i / bs * ts;
    const float d = type == DType::MXFP4 ? blocks::e8m0_half(blk[0]) : blocks::ue4m3_half(blk[i % bs / sub]);
    const float err = std::fabs(y[i] - x[i]);
    // (a margin of 1e-6 |x|: this file may contract level * d - x into one rounding where the quantizer rounds twice)
    for (const int8_t level : blocks::kFp4Levels) {
      beaten += std::fabs(static_cast<float>(level) * d - x[i]) + 1e-6f * std::fabs(x[i]) < err;
    }
  }
  EXPECT_EQ(beaten, 0) << dtype_name(type);
  if (type == DType::MXFP4) {
    std::vector<uint8_t> again(q.size());
    quantize_row(type, y.data(), again.data(), n);
    std::vector<float> y_again(y.size());
    dequantize_row(type, again.data(), y_again.data(), n);
    EXPECT_EQ(y_again, y);
  }
}

// ggml's choices on hand-made blocks: the MXFP4 exponent floor(log2(amax)) - 2 + 127, ties to the first code
// (+0 before -0 and before the level above), the high nibble holding weight j + 16; NVFP4's UE4M3 scale of
// amax / 6 rounded half up (1.0625 -> 1.125 and, subnormal, 2.5 * 2^-9 -> 3 * 2^-9, where round-to-even would
// keep 1.0 and 2 * 2^-9) and saturated at 448.
TEST(Fp4Quantize, MatchesGgmlOnHandMadeBlocks) {
  {
    std::vector<float> x(32, 0.0f);
    x[0] = 1.0f;     // amax 7 -> e = 2 - 2 + 127, d = 0.5: level 2
    x[1] = -6.0f;    // level -12
    x[2] = 0.25f;    // between 0 and 1 * d: the first, 0
    x[3] = -0.25f;   // 0, -0 and -1 * d tie: 0
    x[4] = 2.5f;     // 4 * d and 6 * d tie: 4
    x[5] = 7.0f;     // past the largest level: 12
    x[6] = -0.0f;    // 0
    x[16] = -1.5f;   // high nibble of byte 0: level -3
    x[21] = 0.2501f;  // high nibble of byte 5: level 1
    std::vector<uint8_t> q(17);
    quantize_row(DType::MXFP4, x.data(), q.data(), 32);
    const std::vector<uint8_t> want = {127, 2 | 11 << 4, 15, 0, 0, 4, 7 | 1 << 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    EXPECT_EQ(q, want);
  }
  {
    std::vector<float> x(64, 0.0f);
    x[0] = 6.375f;  // amax / 6 = 1.0625: 0x39 (1.125), d = 0.5625; 6.375 is nearest 12 d = 6.75
    x[1] = 1.0f;    // 2 d = 1.125
    x[16] = 3.0f;   // amax / 6 = 0.5: 0x30, d = 0.25: level 12
    x[24] = -0.75f;  // weight 8 of sub-block 1: the high nibble of its byte 0, level -3
    x[32] = 0.029296875f;  // amax / 6 = 2.5 * 2^-9: 0x03, d = 3 * 2^-10; 30 * 2^-10 ties 8 d and 12 d: 8
    x[48] = 6000.0f;       // amax / 6 = 1000: 0x7E (448), d = 224: level 12
    std::vector<uint8_t> q(36);
    quantize_row(DType::NVFP4, x.data(), q.data(), 64);
    std::vector<uint8_t> want(36, 0);
    const uint8_t scales[4] = {0x39, 0x30, 0x03, 0x7E};
    std::copy(scales, scales + 4, want.begin());
    want[4 + 0] = 7, want[4 + 1] = 2;  // sub-block 0: weights 0 and 1, low nibbles
    want[4 + 8] = 7 | 11 << 4;        // sub-block 1: weight 0 low, weight 8 high
    want[4 + 16] = 6;                 // sub-block 2: weight 0 at level 8
    want[4 + 24] = 7;
    EXPECT_EQ(q, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Fp4, ::testing::Values(DType::MXFP4, DType::NVFP4),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace ga::cpu
