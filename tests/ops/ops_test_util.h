// Helpers of the tensor-ops tests: random data in any float type, contiguous views, and the comparison against
// a float64 reference with a tolerance per type.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "gpu_accel/dtype.h"
#include "gpu_accel/tensor_ops.h"

namespace ga::ops::testing {

// Values in one type: bits for F16/BF16, floats for F32, with the exact float64 value of each element.
struct Buffer {
  DType type = DType::F32;
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::vector<double> exact;  // what the stored value is, as float64

  void* data() { return type == DType::F32 ? static_cast<void*>(f32.data()) : static_cast<void*>(half.data()); }
  size_t size() const { return exact.size(); }
  double get(size_t i) const {  // the stored value (after a write by the op under test)
    if (type == DType::F32) return f32[i];
    return type == DType::F16 ? fp16_to_f32(half[i]) : bf16_to_f32(half[i]);
  }
};

inline Buffer random_buffer(DType type, size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  Buffer b;
  b.type = type;
  b.exact.resize(n);
  if (type == DType::F32)
    b.f32.resize(n);
  else
    b.half.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (type == DType::F32) {
      b.f32[i] = v;
    } else {
      b.half[i] = type == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
    }
    b.exact[i] = b.get(i);
  }
  return b;
}

inline Buffer empty_buffer(DType type, size_t n) {
  Buffer b;
  b.type = type;
  b.exact.assign(n, 0.0);
  if (type == DType::F32)
    b.f32.assign(n, NAN);
  else
    b.half.assign(n, 0x7e00);  // poisoned: NaN
  return b;
}

inline TensorView view(Buffer& b, std::initializer_list<int64_t> shape) {
  TensorView v;
  v.type = b.type;
  v.data = b.data();
  v.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (const int64_t s : shape) v.shape[d++] = s;
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.strides[i] = stride;
    stride *= v.shape[i];
  }
  return v;
}

// The rounding of the output type plus the float32 math's error over a sum of `terms` products.
inline double tolerance(DType out) {
  switch (out) {
    case DType::F16:
      return 2e-3;
    case DType::BF16:
      return 1.6e-2;
    default:
      return 2e-5;
  }
}

inline void expect_near_all(const Buffer& got, const std::vector<double>& ref, double rel, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  double scale = 0.0;
  for (const double r : ref) scale = std::max(scale, std::fabs(r));
  scale = std::max(scale, 1.0);
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got.get(i);
    const double err = std::fabs(g - ref[i]);
    if (!(err <= rel * (std::fabs(ref[i]) + 0.05 * scale))) {  // also catches a NaN (the poison left in place)
      if (bad++ < 5) ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

inline void expect_ok(const Status& s) {
  ASSERT_TRUE(s.ok()) << (s.error() ? s.error()->message() : "");
}

inline void expect_error(const Status& s, ErrorKind kind, const char* needle) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error()->kind(), kind) << s.error()->message();
  EXPECT_NE(s.error()->message().find(needle), std::string::npos) << s.error()->message();
}

}  // namespace ga::ops::testing
