// FP8 E4M3 (OCP E4M3FN, torch.float8_e4m3fn) conversions, against the format's definition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gpu_accel/dtype.h"

namespace ga {
namespace {

// The value of a finite code from the definition, in double: (-1)^s * 2^(e-7) * (1 + m/8), or
// (-1)^s * 2^-6 * m/8 when e == 0.
double definition(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

bool is_nan_code(uint8_t c) { return (c & 0x7f) == 0x7f; }

TEST(Fp8E4M3, EveryCodeDecodesToItsDefinition) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float v = e4m3_to_f32(code);
    if (is_nan_code(code)) {
      EXPECT_TRUE(std::isnan(v)) << c;
      EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), definition(code)) << "code " << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << c;  // 0x80 is -0
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
}

TEST(Fp8E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const uint8_t back = f32_to_e4m3(e4m3_to_f32(code));
    EXPECT_EQ(back, code) << c;  // NaN codes too: 0x7f / 0xff keep their sign
  }
}

// Round to nearest, ties to the even code, by brute force over the finite codes; saturating.
uint8_t brute_force(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xff : 0x7f;
  const double x = f;
  if (x >= 448.0) return 0x7e;
  if (x <= -448.0) return 0xfe;
  int best = -1;
  double best_err = 0.0;
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(static_cast<uint8_t>(c))) continue;
    if ((c & 0x80) != (std::signbit(f) ? 0x80 : 0)) continue;  // same sign (keeps -0)
    const double err = std::fabs(definition(static_cast<uint8_t>(c)) - x);
    if (best < 0 || err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8E4M3, RoundsToNearestEvenAndSaturates) {
  // Every midpoint between neighbouring codes, and the values just either side of it.
  for (int c = 0; c < 0x7e; ++c) {
    for (const double sign : {1.0, -1.0}) {
      const double lo = definition(static_cast<uint8_t>(c)), hi = definition(static_cast<uint8_t>(c + 1));
      const auto mid = static_cast<float>(sign * (lo + hi) / 2);  // exact in float
      for (const float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, static_cast<float>(sign * 1000.0))}) {
        EXPECT_EQ(f32_to_e4m3(f), brute_force(f)) << "f = " << f;
      }
    }
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> expo(-14.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = (i & 1 ? -1.0f : 1.0f) * std::exp2(expo(rng));
    ASSERT_EQ(f32_to_e4m3(f), brute_force(f)) << "f = " << f;
  }
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);              // half the smallest subnormal: tie to 0
  EXPECT_EQ(f32_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -30)), 0x00);
}

}  // namespace
}  // namespace ga
