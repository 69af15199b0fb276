// The prefill GEMM (backends/cuda/gemm.h) against a float64 reference on the host, for the token
// counts a bucketed algorithm must serve although it was chosen for its bucket's largest n: 1, 7, the
// bucket edges (16, 17, 128, 129) and awkward counts (99, 1000), for f16, bf16 and f32 operands, with
// row strides wider than the rows (the forward's fused [q | k | v] and [gate | up] scratch) and an
// output poisoned with NaN so an unwritten element or a write into the padding fails.
//
// Tolerance: the inputs are exactly representable in their types, products are exact in f32 and the
// sums are f32 (CUBLAS_COMPUTE_32F, no TF32), so the relative L2 error against float64 is ~1e-7; the
// bound 1e-5 leaves room for split-K reduction orders and still catches any wrong element.
// The cache test checks what makes the warm-up complete: one heuristic query per bucket, so every n
// of a bucket runs the algorithm (and the kernel) the warm-up's n loaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/stream.h"
#include "cuda_harness.h"
#include "gpu_accel/dtype.h"

namespace {

using ga::DType;
using ga::test::cuda::DeviceArray;

// Random values of `type` (as their bit patterns for f16/bf16) and the same values as doubles.
void random_matrix(DType type, size_t count, std::mt19937& rng, std::vector<uint16_t>& bits16,
                   std::vector<float>& f32, std::vector<double>& value) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  value.resize(count);
  if (type == DType::F32) {
    f32.resize(count);
    for (size_t i = 0; i < count; ++i) value[i] = f32[i] = dist(rng);
    return;
  }
  bits16.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const float v = dist(rng);
    bits16[i] = type == DType::F16 ? ga::f32_to_fp16(v) : ga::f32_to_bf16(v);
    value[i] = type == DType::F16 ? ga::fp16_to_f32(bits16[i]) : ga::bf16_to_f32(bits16[i]);
  }
}

struct Case {
  DType type;
  int64_t rows, k;
};

// Runs y = x * W^T for n tokens through `gemm` and compares with float64; returns the relative L2 error.
double check_gemm(ga::cuda::Gemm& gemm, ga::cuda::CachingAllocator& alloc, const Case& c, int64_t n,
                  std::mt19937& rng) {
  const int64_t ldw = c.k + 8, ldx = c.k + 16, ldy = c.rows + 4;  // strides wider than the rows
  const size_t elem = c.type == DType::F32 ? 4 : 2;
  std::vector<uint16_t> w16, x16;
  std::vector<float> w32, x32;
  std::vector<double> wv, xv;
  random_matrix(c.type, static_cast<size_t>(c.rows * ldw), rng, w16, w32, wv);
  random_matrix(c.type, static_cast<size_t>(n * ldx), rng, x16, x32, xv);
  DeviceArray<uint8_t> w(alloc, static_cast<size_t>(c.rows * ldw) * elem);
  DeviceArray<uint8_t> x(alloc, static_cast<size_t>(n * ldx) * elem);
  DeviceArray<float> y(alloc, static_cast<size_t>(n * ldy));
  GA_CUDA_CHECK(cudaMemcpy(w.get(), c.type == DType::F32 ? static_cast<const void*>(w32.data()) : w16.data(),
                           w.size(), cudaMemcpyHostToDevice));
  GA_CUDA_CHECK(cudaMemcpy(x.get(), c.type == DType::F32 ? static_cast<const void*>(x32.data()) : x16.data(),
                           x.size(), cudaMemcpyHostToDevice));
  y.poison();
  ga::cuda::GemmParams p;
  p.type = c.type;
  p.w = w.get();
  p.ldw = ldw;
  p.x = x.get();
  p.ldx = ldx;
  p.y = y.get();
  p.ldy = ldy;
  p.rows = c.rows;
  p.k = c.k;
  p.n = n;
  gemm.run(p);
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = y.download();
  double err2 = 0.0, ref2 = 0.0;
  int64_t bad = 0;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < ldy; ++r) {
      const float g = got[static_cast<size_t>(t * ldy + r)];
      if (r >= c.rows) {  // padding: must still hold the poison
        bad += ga::test::cuda::is_poison(g) ? 0 : 1;
        continue;
      }
      double want = 0.0;
      for (int64_t i = 0; i < c.k; ++i) {
        want += wv[static_cast<size_t>(r * ldw + i)] * xv[static_cast<size_t>(t * ldx + i)];
      }
      if (!std::isfinite(g)) ++bad;
      err2 += (g - want) * (g - want);
      ref2 += want * want;
    }
  }
  EXPECT_EQ(bad, 0) << ga::dtype_name(c.type) << " rows " << c.rows << " k " << c.k << " n " << n
                    << ": non-finite outputs or writes into the padding";
  return std::sqrt(err2 / ref2);
}

TEST(CudaGemm, BucketedAlgorithmsMatchFloat64ForAwkwardTokenCounts) {
  GA_REQUIRE_CUDA_DEVICE();
  ga::cuda::CachingAllocator alloc(0);
  ga::cuda::Stream stream(0);
  ga::cuda::Gemm gemm(alloc, stream.get());
  std::mt19937 rng(20261122);
  const Case cases[] = {{DType::F16, 384, 256}, {DType::BF16, 200, 320}, {DType::F32, 96, 136}};
  const int64_t ns[] = {1, 7, 16, 17, 99, 128, 129, 1000};
  int compared = 0;
  for (const Case& c : cases) {
    for (const int64_t n : ns) {
      const double rel = check_gemm(gemm, alloc, c, n, rng);
      EXPECT_LT(rel, 1e-5) << ga::dtype_name(c.type) << " rows " << c.rows << " k " << c.k << " n " << n;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 24);
  std::printf("gemm: %d cases, %lld heuristic queries for %lld calls\n", compared,
              static_cast<long long>(gemm.stats().heuristic_queries), static_cast<long long>(gemm.stats().calls));
}

// One heuristic query per (shape, bucket): n = 9..16 share one algorithm, 17 starts the next bucket
// (17..20), 99 and 112 share (96, 112], and a repeated n asks nothing.
TEST(CudaGemm, OneAlgorithmPerBucket) {
  GA_REQUIRE_CUDA_DEVICE();
  if (std::getenv("GA_GEMM") != nullptr) GTEST_SKIP() << "GA_GEMM is set: the diagnostic GemmEx path has no cache";
  EXPECT_EQ(ga::cuda::gemm_bucket(1), 16);
  EXPECT_EQ(ga::cuda::gemm_bucket(16), 16);
  EXPECT_EQ(ga::cuda::gemm_bucket(17), 20);
  EXPECT_EQ(ga::cuda::gemm_bucket(32), 32);
  EXPECT_EQ(ga::cuda::gemm_bucket(33), 40);
  EXPECT_EQ(ga::cuda::gemm_bucket(99), 112);
  EXPECT_EQ(ga::cuda::gemm_bucket(129), 160);
  EXPECT_EQ(ga::cuda::gemm_bucket(512), 512);
  EXPECT_EQ(ga::cuda::gemm_bucket(513), 640);
  EXPECT_EQ(ga::cuda::gemm_bucket_warm_up_tokens(9, 512),
            (std::vector<int64_t>{9, 17, 21, 25, 29, 33, 41, 49, 57, 65, 81, 97, 113, 129, 161, 193, 225, 257, 321,
                                  385, 449}));
  EXPECT_EQ(ga::cuda::gemm_bucket_warm_up_tokens(9, 40), (std::vector<int64_t>{9, 17, 21, 25, 29, 33}));
  // every n from 1 to 3000 lies in the bucket of the warm-up n before it
  const std::vector<int64_t> warm = ga::cuda::gemm_bucket_warm_up_tokens(1, 3000);
  for (int64_t n = 1; n <= 3000; ++n) {
    const auto it = std::upper_bound(warm.begin(), warm.end(), n);
    ASSERT_NE(it, warm.begin()) << n;
    EXPECT_EQ(ga::cuda::gemm_bucket(*(it - 1)), ga::cuda::gemm_bucket(n)) << n;
  }

  ga::cuda::CachingAllocator alloc(0);
  ga::cuda::Stream stream(0);
  ga::cuda::Gemm gemm(alloc, stream.get());
  std::mt19937 rng(7);
  const Case c{DType::F16, 256, 128};
  const auto queries_after = [&](int64_t n) {
    EXPECT_LT(check_gemm(gemm, alloc, c, n, rng), 1e-5) << "n " << n;
    return gemm.stats().heuristic_queries;
  };
  // The row strides (check_gemm: 272, 288 and 1040 bytes) bound the alignment part of the key below
  // the 256 bytes every device buffer starts on, so it is the same for all these calls.
  EXPECT_EQ(queries_after(9), 1);
  EXPECT_EQ(queries_after(16), 1);
  EXPECT_EQ(queries_after(17), 2);
  EXPECT_EQ(queries_after(99), 3);
  EXPECT_EQ(queries_after(112), 3);
  EXPECT_EQ(queries_after(99), 3);
  EXPECT_EQ(gemm.stats().calls, 6);
}

}  // namespace
