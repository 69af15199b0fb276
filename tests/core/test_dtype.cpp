#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"

namespace ga {
namespace {

TEST(DType, TraitsMatchGgml) {
  EXPECT_EQ(traits(DType::Q4_0).type_size, 18u);
  EXPECT_EQ(traits(DType::Q4_K).block_size, 256u);
  EXPECT_EQ(traits(DType::Q6_K).type_size, 210u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 256), 8u * 34u);
  EXPECT_EQ(row_bytes(DType::BF16, 7), 14u);
  EXPECT_THROW(row_bytes(DType::Q4_K, 100), Error);
  EXPECT_FALSE(dtype_traits(4).has_value());
  EXPECT_FALSE(dtype_traits(999).has_value());
  EXPECT_EQ(dtype_from_name("q5_k"), DType::Q5_K);
  EXPECT_FALSE(dtype_from_name("q9_0").has_value());
}

TEST(DType, Fp16RoundTripEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(f))));
      continue;
    }
    EXPECT_EQ(f32_to_fp16(f), h) << "half bits " << h;
  }
}

TEST(DType, Fp16RoundsToNearestEven) {
  // 1 + 2^-11 is exactly between 1 and the next half (1 + 2^-10): ties go to even (1.0).
  EXPECT_EQ(f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);  // overflows to inf
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(0x1p-25f), 0x0000);  // tie between 0 and the smallest subnormal -> 0
  EXPECT_EQ(f32_to_fp16(0x1p-25f * 1.5f), 0x0001);
  EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000);
}

TEST(DType, Bf16) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // round to nearest even at the 16-bit boundary
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82);
}

}  // namespace
}  // namespace ga
