// The parity harness of the CUDA tests (DESIGN.md, after llama.cpp's test-backend-ops): every GPU
// op is compared with the CPU reference over a grid of shapes and types.
//
// Rules it enforces:
//  * without a GPU every test calls GTEST_SKIP() with "no CUDA device" (never a silent pass);
//  * output buffers are poisoned with NaN (all bytes 0xFF) before each run, so an element the
//    kernel forgot stays NaN and fails the comparison, and padding it must not touch is checked to
//    still hold the poison;
//  * a combination the kernel does not support prints "SKIPPED <case>: <reason>" (once per reason)
//    and is counted;
//  * a test that compared nothing fails (Parity::finish), so a grid that silently became empty is
//    a failure, not a pass.
// Output stays short: one line per failure (the first few per test) and one summary line per test.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/kernels/gemv.h"

namespace ga::test::cuda {

inline bool have_cuda_device(std::string* reason) { return ::ga::cuda::device_count(reason) > 0; }

// First statement of every CUDA test.
#define GA_REQUIRE_CUDA_DEVICE()                                             \
  do {                                                                       \
    std::string no_device_reason_;                                           \
    if (!::ga::test::cuda::have_cuda_device(&no_device_reason_)) {           \
      GTEST_SKIP() << "no CUDA device (" << no_device_reason_ << ")";        \
    }                                                                        \
  } while (0)

inline constexpr uint32_t kPoisonBits = 0xFFFFFFFFu;  // a NaN, and the pattern cudaMemset(0xFF) writes

inline bool is_poison(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits == kPoisonBits;
}

// A device buffer of T from the test's allocator, with host transfers.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(::ga::cuda::CachingAllocator& alloc, size_t n) : n_(n), buf_(alloc, n * sizeof(T) + 16) {}
  T* get() const { return buf_.as<T>(); }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    GA_CUDA_CHECK(cudaMemcpy(get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    GA_CUDA_CHECK(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  void poison() { GA_CUDA_CHECK(cudaMemset(get(), 0xFF, n_ * sizeof(T))); }

 private:
  size_t n_;
  ::ga::cuda::DeviceBuffer buf_;
};

// Counts comparisons and skips of one test and reports failures briefly.
class Parity {
 public:
  explicit Parity(std::string op) : op_(std::move(op)) {}

  // Prints the first case skipped for each distinct reason (the count is in the summary line).
  void skip(const std::string& case_name, const std::string& reason) {
    ++skipped_;
    if (skip_reasons_.insert(reason).second) {
      std::printf("SKIPPED %s %s: %s\n", op_.c_str(), case_name.c_str(), reason.c_str());
    }
  }

  // Compares got against ref element-wise: |got - ref| <= atol + rtol * |ref| (scale[i] replaces
  // |ref| when given: e.g. sum |w x| for a dot product). NaN in got fails unless ref is NaN too.
  void compare(const std::string& case_name, const float* got, const double* ref, size_t n, double rtol,
               double atol, const double* scale = nullptr) {
    ++cases_;
    size_t bad = 0;
    size_t first_bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double tol = atol + rtol * (scale ? scale[i] : std::fabs(ref[i]));
      const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
      const bool ok = std::isnan(ref[i]) ? std::isnan(got[i]) : (!std::isnan(got[i]) && err <= tol);
      if (!ok) {
        if (bad == 0) first_bad = i;
        ++bad;
      }
      if (!std::isnan(err)) worst = std::max(worst, tol > 0 ? err / tol : err);
    }
    compared_ += n;
    report(case_name, bad, n, first_bad, got, ref, worst);
  }

  // Exact comparison (bit patterns) for ops that must reproduce the CPU bit for bit.
  void compare_bits(const std::string& case_name, const float* got, const float* ref, size_t n) {
    ++cases_;
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(&got[i], &ref[i], 4) != 0) {
        if (bad == 0) first_bad = i;
        ++bad;
      }
    }
    compared_ += n;
    if (bad > 0) {
      fail(case_name + ": " + std::to_string(bad) + "/" + std::to_string(n) + " not bit-exact, first [" +
           std::to_string(first_bad) + "] got " + std::to_string(got[first_bad]) + " want " +
           std::to_string(ref[first_bad]));
    }
  }

  void compare_ints(const std::string& case_name, const int32_t* got, const int32_t* ref, size_t n) {
    ++cases_;
    for (size_t i = 0; i < n; ++i) {
      if (got[i] != ref[i]) {
        fail(case_name + ": [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
             std::to_string(ref[i]));
        break;
      }
    }
    compared_ += n;
  }

  // Padding the kernel must leave alone still holds the poison.
  void expect_untouched(const std::string& case_name, const float* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (!is_poison(data[i])) {
        fail(case_name + ": wrote outside its output (padding element " + std::to_string(i) + ")");
        return;
      }
    }
  }

  void fail(const std::string& message) {
    ++failures_;
    if (failures_ <= kMaxReported) ADD_FAILURE() << op_ << " " << message;
  }

  // Call last: fails when nothing was compared; prints one summary line.
  void finish() {
    std::printf("%s: %zu cases, %zu values compared, %zu skipped, %zu failures\n", op_.c_str(), cases_, compared_,
                skipped_, failures_);
    if (failures_ > kMaxReported) ADD_FAILURE() << op_ << ": " << failures_ - kMaxReported << " more failures";
    EXPECT_GT(compared_, 0u) << op_ << " compared nothing: a run that compares nothing is a failure";
  }

 private:
  static constexpr size_t kMaxReported = 5;

  void report(const std::string& case_name, size_t bad, size_t n, size_t first_bad, const float* got,
              const double* ref, double worst) {
    if (bad == 0) return;
    fail(case_name + ": " + std::to_string(bad) + "/" + std::to_string(n) + " outside tolerance, first [" +
         std::to_string(first_bad) + "] got " + std::to_string(got[first_bad]) + " want " +
         std::to_string(ref[first_bad]) + " (worst error/tolerance " + std::to_string(worst) + ")");
  }

  std::string op_;
  size_t cases_ = 0;
  size_t compared_ = 0;
  size_t skipped_ = 0;
  size_t failures_ = 0;
  std::set<std::string> skip_reasons_;
};

// The bytes of x [n_tokens][cols] (ld ldx) rounded as gemv.h's gemv_x_int8_bytes() describes, on the CPU
// (IEEE float steps as kernels/x_int8.cuh, no contraction; the block's sum in index order): [t][b] 32 int8 q1, 32 int8 q2, then
// [t][b] (d_x, sum) as two floats.
inline std::vector<uint8_t> reference_x_int8(const std::vector<float>& x, int64_t ldx, int64_t cols, int n_tokens) {
  const int64_t nb = cols / 32;
  std::vector<uint8_t> out(static_cast<size_t>(::ga::cuda::gemv_x_int8_bytes(cols, n_tokens)));
  uint8_t* const ds = out.data() + static_cast<size_t>(n_tokens * nb * 64);
  for (int t = 0; t < n_tokens; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x.data() + t * ldx + 32 * b;
      float amax = 0.0f, sum = 0.0f;
      for (int k = 0; k < 32; ++k) {
        amax = std::max(amax, std::fabs(xb[k]));
        sum += xb[k];
      }
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      uint8_t* const q = out.data() + static_cast<size_t>((t * nb + b) * 64);
      for (int k = 0; k < 32; ++k) {
        const float scaled = xb[k] * inv;
        const float q1 = std::nearbyint(scaled);
        q[k] = static_cast<uint8_t>(static_cast<int8_t>(q1));
        q[32 + k] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint((scaled - q1) * 254.0f)));
      }
      const float pair[2] = {amax / 127.0f, sum};
      std::memcpy(ds + static_cast<size_t>((t * nb + b) * 8), pair, 8);
    }
  }
  return out;
}

// The int8 copy a fused kernel wrote (its bytes, downloaded) equals the CPU's rounding of the float rows it
// wrote ([n_rows][n], dense) bit for bit: the producer kernels (RMSNorm, SwiGLU) must round exactly like
// quantize_x_int8 so that every GEMV reading x_int8 sees the same bytes.
inline void expect_int8_copy_matches(const std::string& name, const std::vector<uint8_t>& bytes,
                                     const std::vector<float>& rows, int64_t n, int n_rows) {
  const std::vector<uint8_t> ref_bytes = reference_x_int8(rows, n, n, n_rows);
  ASSERT_EQ(bytes.size(), ref_bytes.size()) << name;
  size_t byte_mismatches = 0;
  for (size_t i = 0; i < bytes.size(); ++i) byte_mismatches += bytes[i] != ref_bytes[i] ? 1 : 0;
  EXPECT_EQ(byte_mismatches, 0u) << name << ": int8 bytes differ from the CPU's rounding of the output";
}

}  // namespace ga::test::cuda
