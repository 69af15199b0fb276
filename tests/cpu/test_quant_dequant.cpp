// dequantize_row against ggml's own dequantization, bit for bit.
//
// fixtures/quant/dequant-<T>.gguf holds one weight tensor of type T (the bytes llama-quantize
// wrote) and its float32 dequantization made by gguf-py (ggml's reference decoders). Every
// element must match exactly: any slip in a block layout, a scale packing or the order of the
// float operations shows up as a mismatch here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/quant.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"

namespace ga::cpu {
namespace {

const char* const kTensor = "blk.0.attn_k.weight";

class DequantFixture : public ::testing::TestWithParam<DType> {};

TEST_P(DequantFixture, MatchesGgmlBitForBit) {
  const DType type = GetParam();
  const std::string path = test::shared_path(std::string("fixtures/quant/dequant-") + dtype_name(type) + ".gguf");
  const auto file = gguf::File::open(path);
  const auto* q = file.find_tensor(kTensor);
  const auto* ref = file.find_tensor(std::string(kTensor) + ".deq");
  ASSERT_NE(q, nullptr);
  ASSERT_NE(ref, nullptr);
  ASSERT_EQ(q->type, type);
  ASSERT_EQ(ref->type, DType::F32);
  ASSERT_EQ(q->ne.size(), 2u);
  ASSERT_EQ(q->n_elements, ref->n_elements);

  const int64_t cols = static_cast<int64_t>(q->ne[0]);
  const int64_t rows = static_cast<int64_t>(q->ne[1]);
  const uint64_t row_size = row_bytes(type, static_cast<uint64_t>(cols));
  ASSERT_EQ(q->nbytes, row_size * static_cast<uint64_t>(rows));

  std::vector<float> expected(static_cast<size_t>(rows * cols));
  std::memcpy(expected.data(), file.tensor_data(*ref), expected.size() * sizeof(float));
  // Both the dispatched kernel (AVX2 where compiled for it) and the portable scalar one.
  using Dequantizer = void (*)(DType, const void*, float*, int64_t);
  const std::pair<const char*, Dequantizer> kernels[] = {{"dispatched", &dequantize_row},
                                                          {"scalar", &scalar::dequantize_row}};
  for (const auto& [kernel_name, dequantize] : kernels) {
    // Poison the output so an element we forget to write cannot pass by accident.
    std::vector<float> got(expected.size(), std::nanf(""));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize(type, file.tensor_data(*q) + static_cast<uint64_t>(r) * row_size, got.data() + r * cols, cols);
    }
    int64_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (bits_from_f32(got[i]) != bits_from_f32(expected[i])) {
        if (++mismatches <= 5) {
          ADD_FAILURE() << kernel_name << " " << dtype_name(type) << " element " << i << " (row " << i / cols
                        << ", col " << i % cols << "): got " << got[i] << ", ggml " << expected[i];
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << kernel_name << ": of " << got.size() << " elements";
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantFixture,
                         ::testing::Values(DType::F16, DType::BF16, DType::Q8_0, DType::Q6_K, DType::Q5_K, DType::Q5_1,
                                           DType::Q5_0, DType::Q4_K, DType::Q4_1, DType::Q4_0, DType::Q3_K,
                                           DType::Q2_K),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });

// F32 "dequantization" is a copy; F16/BF16 must widen exactly (every 16-bit pattern, by the
// independent scalar converters of dtype.h).
TEST(Dequant, FloatTypesAreExact) {
  const auto file = gguf::File::open(test::shared_path("fixtures/quant/fixture-f32.gguf"));
  const auto* t = file.find_tensor(kTensor);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, DType::F32);
  const auto n = static_cast<int64_t>(t->n_elements);
  std::vector<float> got(static_cast<size_t>(n), std::nanf(""));
  dequantize_row(DType::F32, file.tensor_data(*t), got.data(), n);
  EXPECT_EQ(std::memcmp(got.data(), file.tensor_data(*t), static_cast<size_t>(n) * sizeof(float)), 0);

  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  // n = 65535 also exercises the scalar tail of the vector path
  dequantize_row(DType::F16, all.data(), wide.data(), static_cast<int64_t>(all.size()) - 1);
  dequantize_row(DType::F16, all.data() + all.size() - 1, wide.data() + all.size() - 1, 1);
  for (uint32_t i = 0; i < all.size(); ++i) {
    const float want = fp16_to_f32(all[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(wide[i])) << i;
    } else {
      EXPECT_EQ(bits_from_f32(wide[i]), bits_from_f32(want)) << i;
    }
  }
  dequantize_row(DType::BF16, all.data(), wide.data(), static_cast<int64_t>(all.size()));
  for (uint32_t i = 0; i < all.size(); ++i) EXPECT_EQ(bits_from_f32(wide[i]), static_cast<uint32_t>(i) << 16) << i;
}

// The vector path against the scalar path on random blocks (every bit pattern of the packed levels
// and scales; the fp16 scale fields are set to finite values of either sign).
TEST(Dequant, VectorPathMatchesScalarOnRandomBlocks) {
  struct Layout {
    DType type;
    std::vector<int> half_offsets;  // byte offsets of the fp16 fields in a block (ggml-common.h)
  };
  const Layout layouts[] = {{DType::Q4_0, {0}},    {DType::Q4_1, {0, 2}},   {DType::Q5_0, {0}},   {DType::Q5_1, {0, 2}},
                            {DType::Q8_0, {0}},    {DType::Q2_K, {80, 82}}, {DType::Q3_K, {108}}, {DType::Q4_K, {0, 2}},
                            {DType::Q5_K, {0, 2}}, {DType::Q6_K, {208}}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> scale(-0.1f, 0.1f);
  for (const auto& layout : layouts) {
    const auto& tr = traits(layout.type);
    const int64_t n = 64 * tr.block_size;
    std::vector<uint8_t> bytes(row_bytes(layout.type, static_cast<uint64_t>(n)));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (size_t blk = 0; blk < bytes.size() / tr.type_size; ++blk) {
      for (const int off : layout.half_offsets) {
        const uint16_t h = f32_to_fp16(scale(rng));
        std::memcpy(bytes.data() + blk * tr.type_size + off, &h, 2);
      }
    }
    std::vector<float> fast(static_cast<size_t>(n), std::nanf("")), slow(static_cast<size_t>(n), std::nanf(""));
    dequantize_row(layout.type, bytes.data(), fast.data(), n);
    scalar::dequantize_row(layout.type, bytes.data(), slow.data(), n);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) mismatches += bits_from_f32(fast[i]) != bits_from_f32(slow[i]);
    EXPECT_EQ(mismatches, 0) << dtype_name(layout.type);
  }
}

TEST(Dequant, RejectsBadInput) {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> out(512);
  try {
    dequantize_row(DType::Q4_K, bytes.data(), out.data(), 100);
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  }
  try {
    dequantize_row(DType::IQ2_XXS, bytes.data(), out.data(), 256);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  }
}

}  // namespace
}  // namespace ga::cpu
