// What the two parity tests of the CUDA attention (test_cuda_attention.cpp: one sequence over a
// contiguous cache; test_cuda_paged_attention.cpp: a batch of runs through block tables) share: the
// tolerances, the f16 helpers, the random inputs, the float64 softmax of one query head, the output
// check and the rejection check. The two tests differ only in where a key position lives (a row of a
// contiguous cache or a slot of the pool), so the helpers take rows (element offsets into K/V)
// rather than a layout; everything here is what both files did word for word before, kept in one
// place so a change to a tolerance or to the check reaches both tests.
#pragma once

#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/kernels/attention.h"
#include "cuda_harness.h"

namespace ga::test::cuda {

// Tolerance: relative L2 1e-3 per case (q and the probabilities are rounded to f16 on the GPU) plus
// an element-wise bound of 2e-2 of the row's RMS that catches a single bad row.
inline constexpr double kAttentionRelL2Tolerance = 1e-3;
inline constexpr double kAttentionRowRmsTolerance = 2e-2;
inline constexpr uint16_t kHalfNaN = 0x7FFF;  // what K/V hold where no key was written

inline uint16_t half_bits(float x) {
  const __half_raw raw = __float2half_rn(x);
  return raw.x;
}

// f16 bits -> double through a table (exact: every f16 value fits a double), built once.
inline double half_value(uint16_t bits) {
  static const std::vector<double> table = [] {
    std::vector<double> t(65536);
    for (uint32_t b = 0; b < 65536; ++b) {
      __half_raw raw;
      raw.x = static_cast<uint16_t>(b);
      t[b] = static_cast<double>(__half2float(__half(raw)));
    }
    return t;
  }();
  return table[bits];
}

// A key/value element as a double: f16 bits through the table, or already decoded.
inline double kv_value(uint16_t bits) { return half_value(bits); }
inline double kv_value(double x) { return x; }

// q rows [n_tokens][q_stride] of N(0, 1.5) values; the padding past q_row stays NaN.
inline std::vector<float> random_query_rows(std::mt19937& rng, int n_tokens, int64_t q_row, int64_t q_stride) {
  std::normal_distribution<float> q_dist(0.0f, 1.5f);
  std::vector<float> q(static_cast<size_t>(q_stride * n_tokens), std::nanf(""));
  for (int t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < q_row; ++i) q[static_cast<size_t>(t * q_stride + i)] = q_dist(rng);
  }
  return q;
}

// One K row and one V row of n f16 values drawn from kv_dist (k and v interleaved, as both tests draw them).
inline void random_kv_row(std::normal_distribution<float>& kv_dist, std::mt19937& rng, uint16_t* k, uint16_t* v,
                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    k[i] = half_bits(kv_dist(rng));
    v[i] = half_bits(kv_dist(rng));
  }
}

// float64 softmax attention of one query head q[hd] over the keys at rows[first..last] (element offsets
// into k and v, plus kv_off for the head): o[hd] += softmax(cap(q.k * scale)) v, cap(s) = softcap tanh(s /
// softcap) when softcap > 0. p holds >= last + 1. A sliding window is first = max(0, last - window_left)
// (window_first).
template <class KV>
void attend_one_head(const float* q, int hd, double scale, int64_t last, const int64_t* rows, const KV* k,
                     const KV* v, int64_t kv_off, double* p, double* o, int64_t first = 0, double softcap = 0.0) {
  double m = -INFINITY;
  for (int64_t j = first; j <= last; ++j) {
    const KV* kj = k + rows[j] + kv_off;
    double dot = 0.0;
    for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * kv_value(kj[d]);
    p[j] = dot * scale;
    if (softcap > 0.0) p[j] = softcap * std::tanh(p[j] / softcap);
    m = std::max(m, p[j]);
  }
  double sum = 0.0;
  for (int64_t j = first; j <= last; ++j) sum += (p[j] = std::exp(p[j] - m));
  for (int64_t j = first; j <= last; ++j) {
    const KV* vj = v + rows[j] + kv_off;
    const double w = p[j] / sum;
    for (int d = 0; d < hd; ++d) o[d] += w * kv_value(vj[d]);
  }
}

// The first position a query at position `pos` sees under window_left (-1: no window).
inline int64_t window_first(int64_t pos, int64_t window_left) {
  return window_left >= 0 ? std::max<int64_t>(0, pos - window_left) : 0;
}

// Runs work(t_begin, t_step) on up to 16 threads: thread i takes tokens i, i + n, i + 2n, ...
template <class Work>
void for_tokens_in_parallel(Work&& work) {
  const int n_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  std::vector<std::thread> threads;
  for (int i = 0; i < n_threads; ++i) threads.emplace_back(work, i, n_threads);
  for (auto& th : threads) th.join();
}

// Checks a downloaded output ([n_tokens][out_stride], padding poisoned) against the reference
// ([n_tokens][n_head][head_dim], contiguous): padding untouched, every element within 2e-2 of its
// head row's RMS, relative L2 <= 1e-3 over the case.
inline void check_attention_output(Parity& parity, const std::string& name, int n_tokens, int n_head, int head_dim,
                                   int64_t out_stride, const std::vector<float>& got, const std::vector<double>& ref,
                                   double rel_l2_tolerance = kAttentionRelL2Tolerance) {
  const size_t row = static_cast<size_t>(n_head) * head_dim;
  std::vector<float> got_packed(ref.size());
  std::vector<double> row_rms(ref.size());
  for (int t = 0; t < n_tokens; ++t) {
    const float* src = got.data() + t * out_stride;
    std::copy(src, src + row, got_packed.begin() + static_cast<ptrdiff_t>(t * row));
    parity.expect_untouched(name, src + row, static_cast<size_t>(out_stride) - row);
    for (int h = 0; h < n_head; ++h) {
      const size_t off = t * row + static_cast<size_t>(h) * head_dim;
      double sq = 0.0;
      for (int d = 0; d < head_dim; ++d) sq += ref[off + d] * ref[off + d];
      std::fill_n(row_rms.begin() + static_cast<ptrdiff_t>(off), head_dim, std::sqrt(sq / head_dim));
    }
  }
  parity.compare(name, got_packed.data(), ref.data(), ref.size(), kAttentionRowRmsTolerance, 1e-6, row_rms.data());
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += (got_packed[i] - ref[i]) * (got_packed[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  const double rel = std::sqrt(err / norm);
  if (!(rel <= rel_l2_tolerance)) {
    parity.fail(name + ": relative L2 error " + std::to_string(rel) + " > " + std::to_string(rel_l2_tolerance));
  }
}

// p must be refused with a reason that names `word`, and the launch must fail without writing `out`.
inline void expect_attention_rejected(DeviceArray<float>& out, const ::ga::cuda::AttentionParams& p,
                                      const std::string& word) {
  const char* why = ::ga::cuda::attention_unsupported_reason(p);
  ASSERT_NE(why, nullptr) << "expected a reason mentioning " << word;
  EXPECT_NE(std::string(why).find(word), std::string::npos) << why;
  out.poison();
  EXPECT_EQ(::ga::cuda::attention(p, nullptr), cudaErrorInvalidValue);
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = out.download();
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), is_poison)) << "a rejected call wrote its output";
}

// One attention launch with p captured into an executable graph on `stream` (the decode loop's way:
// the replays read new positions from device memory).
inline cudaGraphExec_t capture_attention_graph(const ::ga::cuda::AttentionParams& p, cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  GA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaError_t launched = ::ga::cuda::attention(p, stream);
  GA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  GA_CUDA_CHECK(launched);
  cudaGraphExec_t exec = nullptr;
  GA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  GA_CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

}  // namespace ga::test::cuda
