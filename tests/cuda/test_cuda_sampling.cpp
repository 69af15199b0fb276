// GPU sampling parity (backends/cuda/kernels/sampling.h, runtime/engine/sampler_gpu.h):
//  * the selection kernel's candidates equal the CPU reference (ga::select_candidates: penalties,
//    full sort) exactly, ids and order, over vocab 733/32000/128256/151936, 1..64 rows, k 1..1000,
//    with ties, -inf, -0.0 and penalties; its normalizers agree within 1e-5 relative (the summation
//    order is the only difference, so they are expected far closer); a NaN row raises its flag and
//    leaves the other rows intact; outputs are poisoned before each launch;
//  * the end-to-end path (sample_rows_on_gpu) picks the same token as Sampler::sample for hundreds of
//    seeded draws over a grid of parameter sets, with the Scheduler's logprob figures, and reports
//    sample()'s own error for a NaN row.
// Without a GPU every test reports SKIPPED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/sampling.h"
#include "backends/cuda/kernels/sampling_device.h"
#include "common/sampler_grid.h"
#include "cuda/cuda_harness.h"
#include "gpu_accel/error.h"
#include "gpu_accel/sampler.h"
#include "runtime/engine/sampler_gpu.h"

namespace ga {
namespace {

using test::cuda::DeviceArray;

std::vector<float> random_logits(std::mt19937_64& rng, int64_t n_vocab, int kind) {
  std::normal_distribution<float> normal(0.0f, kind == 2 ? 8.0f : 3.0f);
  std::vector<float> row(static_cast<size_t>(n_vocab));
  for (auto& l : row) {
    l = normal(rng);
    if (kind == 1) l = std::round(l * 2.0f) / 2.0f;  // heavy ties: the lowest id must win each
  }
  if (kind == 3) row[static_cast<size_t>(rng() % static_cast<uint64_t>(n_vocab))] += 30.0f;
  for (int64_t i = 0; i < n_vocab / 50; ++i) {
    row[static_cast<size_t>(rng() % static_cast<uint64_t>(n_vocab))] = -std::numeric_limits<float>::infinity();
  }
  row[static_cast<size_t>(rng() % static_cast<uint64_t>(n_vocab))] = -0.0f;
  row[static_cast<size_t>(rng() % static_cast<uint64_t>(n_vocab))] = 0.0f;
  return row;
}

std::vector<int32_t> random_history(std::mt19937_64& rng, int64_t n_vocab, size_t n) {
  std::vector<int32_t> h(n);
  for (auto& id : h) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(n_vocab, 400)));
  return h;  // ids crowd into the first 400 so repeats (counts > 1) are common
}

double raw_sum_exp_cpu(const std::vector<float>& row, float* raw_max) {
  float mx = -std::numeric_limits<float>::infinity();
  for (const float l : row) mx = std::max(mx, l);
  double sum = 0;
  for (const float l : row) sum += std::exp(static_cast<double>(l) - mx);
  *raw_max = mx;
  return sum;
}

double rel_diff(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }

TEST(CudaSampling, CandidatesMatchCpuReference) {
  GA_REQUIRE_CUDA_DEVICE();
  cuda::CachingAllocator alloc(0);
  std::mt19937_64 rng(20261122);
  int compared_rows = 0;
  double worst_sum_rel = 0;
  struct Case {
    int64_t n_vocab;
    int64_t n_rows;
    int32_t k;
  };
  const std::vector<Case> cases = {{733, 3, 20},      {733, 2, 733},     {32000, 1, 1},     {32000, 7, 40},
                                   {32000, 64, 256},  {128256, 1, 20},   {128256, 16, 1000}, {128256, 33, 256},
                                   {151936, 1, 256},  {151936, 64, 20},  {151936, 5, 1024}};
  for (const Case& c : cases) {
    std::vector<float> logits;
    std::vector<SamplerParams> params(static_cast<size_t>(c.n_rows));
    std::vector<std::vector<int32_t>> histories(static_cast<size_t>(c.n_rows));
    std::vector<cuda::SamplingRowParams> row_params(static_cast<size_t>(c.n_rows));
    std::vector<int32_t> pen_ids, pen_counts;
    const int64_t nan_row = c.n_rows >= 3 ? 1 : -1;
    for (int64_t r = 0; r < c.n_rows; ++r) {
      std::vector<float> row = random_logits(rng, c.n_vocab, static_cast<int>(r % 4));
      if (r == nan_row) row[static_cast<size_t>(c.n_vocab / 2)] = std::nanf("");
      logits.insert(logits.end(), row.begin(), row.end());
      SamplerParams& p = params[static_cast<size_t>(r)];
      p.temperature = (r % 3 == 0) ? 1.0f : (r % 3 == 1 ? 0.7f : 0.0f);
      if (r % 2 == 1) {
        p.repeat_penalty = 1.25f;
        p.frequency_penalty = 0.3f;
        p.presence_penalty = 0.5f;
        p.repeat_last_n = 64;
        histories[static_cast<size_t>(r)] = random_history(rng, c.n_vocab, 120);
      }
      cuda::SamplingRowParams& rp = row_params[static_cast<size_t>(r)];
      rp.temperature = p.temperature;
      rp.repeat_penalty = p.repeat_penalty;
      rp.frequency_penalty = p.frequency_penalty;
      rp.presence_penalty = p.presence_penalty;
      rp.raw_stats = 1;
      rp.penalty_begin = static_cast<int32_t>(pen_ids.size());
      for (const auto& [id, count] : penalty_counts(p, histories[static_cast<size_t>(r)], c.n_vocab)) {
        pen_ids.push_back(id);
        pen_counts.push_back(count);
      }
      rp.penalty_count = static_cast<int32_t>(pen_ids.size()) - rp.penalty_begin;
    }
    DeviceArray<float> d_logits(alloc, logits.size());
    d_logits.upload(logits);
    DeviceArray<cuda::SamplingRowParams> d_rows(alloc, row_params.size());
    d_rows.upload(row_params);
    DeviceArray<int32_t> d_pen_ids(alloc, std::max<size_t>(pen_ids.size(), 1));
    DeviceArray<int32_t> d_pen_counts(alloc, std::max<size_t>(pen_ids.size(), 1));
    if (!pen_ids.empty()) {
      d_pen_ids.upload(pen_ids);
      d_pen_counts.upload(pen_counts);
    }
    const size_t nk = static_cast<size_t>(c.n_rows * c.k);
    DeviceArray<int32_t> d_ids(alloc, nk);
    DeviceArray<float> d_out_logits(alloc, nk), d_raw(alloc, nk);
    DeviceArray<cuda::SamplingRowStats> d_stats(alloc, static_cast<size_t>(c.n_rows));
    const size_t ws_bytes = cuda::sampling_workspace_bytes(c.n_rows, c.n_vocab, c.k);
    DeviceArray<unsigned char> d_ws(alloc, ws_bytes);
    d_ids.poison();
    d_out_logits.poison();
    d_raw.poison();
    d_stats.poison();
    d_ws.poison();

    cuda::SamplingSelectParams sp;
    sp.logits = d_logits.get();
    sp.n_rows = c.n_rows;
    sp.n_vocab = c.n_vocab;
    sp.ld = c.n_vocab;
    sp.rows = d_rows.get();
    sp.penalty_ids = d_pen_ids.get();
    sp.penalty_counts = d_pen_counts.get();
    sp.k = c.k;
    sp.workspace = d_ws.get();
    sp.workspace_bytes = ws_bytes;
    sp.out_ids = d_ids.get();
    sp.out_logits = d_out_logits.get();
    sp.out_raw_logits = d_raw.get();
    sp.out_stats = d_stats.get();
    ASSERT_EQ(cuda::sampling_select_unsupported_reason(sp), nullptr);
    GA_CUDA_CHECK(cuda::sampling_select(sp, nullptr));
    GA_CUDA_CHECK(cudaDeviceSynchronize());
    const auto ids = d_ids.download();
    const auto out_logits = d_out_logits.download();
    const auto raw = d_raw.download();
    const auto stats = d_stats.download();

    for (int64_t r = 0; r < c.n_rows; ++r) {
      const std::string what = "vocab " + std::to_string(c.n_vocab) + " rows " + std::to_string(c.n_rows) + " k " +
                               std::to_string(c.k) + " row " + std::to_string(r);
      const auto& s = stats[static_cast<size_t>(r)];
      const std::vector<float> row(logits.begin() + r * c.n_vocab, logits.begin() + (r + 1) * c.n_vocab);
      if (r == nan_row) {
        EXPECT_EQ(s.nan, 1) << what;
        continue;
      }
      ASSERT_EQ(s.nan, 0) << what;
      const SamplingCandidates want =
          select_candidates(row, histories[static_cast<size_t>(r)], params[static_cast<size_t>(r)],
                            static_cast<size_t>(c.k));
      for (int32_t i = 0; i < c.k; ++i) {
        const size_t at = static_cast<size_t>(r * c.k + i);
        ASSERT_EQ(ids[at], want.top[static_cast<size_t>(i)].id) << what << " candidate " << i;
        ASSERT_EQ(out_logits[at], want.top[static_cast<size_t>(i)].logit) << what << " candidate " << i;
        ASSERT_EQ(raw[at], row[static_cast<size_t>(ids[at])]) << what << " candidate " << i;
      }
      ASSERT_EQ(s.max, want.top.front().logit) << what;
      float raw_max = 0;
      const double raw_sum = raw_sum_exp_cpu(row, &raw_max);
      ASSERT_EQ(s.raw_max, raw_max) << what;
      const double rels[] = {rel_diff(s.sum_exp, want.sum_exp), rel_diff(s.sum_exp_temp, want.sum_exp_temp),
                             rel_diff(s.raw_sum_exp, raw_sum)};
      for (const double rel : rels) {
        ASSERT_LT(rel, 1e-5) << what << " sums " << s.sum_exp << " " << s.sum_exp_temp << " " << s.raw_sum_exp;
        worst_sum_rel = std::max(worst_sum_rel, rel);
      }
      ++compared_rows;
    }
  }
  ASSERT_GT(compared_rows, 150);
  std::printf("[ sampling ] %d rows compared exactly; worst normalizer relative difference %.3g\n", compared_rows,
              worst_sum_rel);
}

TEST(CudaSampling, RejectsBadParameters) {
  GA_REQUIRE_CUDA_DEVICE();
  cuda::SamplingSelectParams sp;
  EXPECT_NE(cuda::sampling_select_unsupported_reason(sp), nullptr);
  EXPECT_EQ(cuda::sampling_select(sp, nullptr), cudaErrorInvalidValue);
  EXPECT_THROW((void)cuda::make_cuda_sampling(0, 4, 100, 2000), Error);  // k above the vocabulary
}

std::vector<SamplerParams> parameter_grid() {
  std::vector<SamplerParams> grid;
  const auto make = test::sampler_params;
  grid.push_back(make(0.0f, 40, 0.95f, 0.05f));   // greedy
  grid.push_back(make(0.8f, 40, 0.95f, 0.05f));   // the defaults
  grid.push_back(make(1.0f, 0, 0.9f, 0.0f));      // top-p over the whole vocabulary
  grid.push_back(make(0.7f, 0, 1.0f, 0.1f));      // min-p only
  grid.push_back(make(1.0f, 0, 1.0f, 0.0f));      // pure temperature: mostly the full-row fallback
  grid.push_back(make(0.6f, 500, 0.8f, 0.0f));
  SamplerParams pen = make(0.9f, 50, 0.95f, 0.02f);
  pen.repeat_penalty = 1.2f;
  pen.frequency_penalty = 0.1f;
  pen.presence_penalty = 0.3f;
  grid.push_back(pen);
  pen.temperature = 0.0f;
  grid.push_back(pen);
  return grid;
}

TEST(CudaSampling, EndToEndMatchesCpuSampler) {
  GA_REQUIRE_CUDA_DEVICE();
  cuda::CachingAllocator alloc(0);
  std::mt19937_64 rng(42);
  int draws = 0, fallbacks = 0;
  const std::vector<SamplerParams> grid = parameter_grid();
  for (const int64_t n_vocab : {32000, 151936}) {
    const int64_t n_rows = 24;
    auto gpu = cuda::make_cuda_sampling(0, n_rows, n_vocab, cuda::kSamplingMaxCandidates);
    std::vector<Sampler> cpu_samplers, gpu_samplers;
    std::vector<std::vector<int32_t>> histories(static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) {
      SamplerParams p = grid[static_cast<size_t>(r) % grid.size()];
      p.seed = rng();
      cpu_samplers.emplace_back(p);
      gpu_samplers.emplace_back(p);
      histories[static_cast<size_t>(r)] = random_history(rng, n_vocab, 80);
    }
    for (int step = 0; step < 8; ++step) {
      std::vector<float> logits;
      for (int64_t r = 0; r < n_rows; ++r) {
        const auto row = random_logits(rng, n_vocab, static_cast<int>((r + step) % 4));
        logits.insert(logits.end(), row.begin(), row.end());
      }
      DeviceArray<float> d_logits(alloc, logits.size());
      d_logits.upload(logits);
      std::vector<GpuSampleRow> rows(static_cast<size_t>(n_rows));
      for (int64_t r = 0; r < n_rows; ++r) {
        rows[static_cast<size_t>(r)].sampler = &gpu_samplers[static_cast<size_t>(r)];
        rows[static_cast<size_t>(r)].history = histories[static_cast<size_t>(r)];
        rows[static_cast<size_t>(r)].top_logprobs = (r % 3 == 0) ? 5 : -1;
      }
      const std::vector<GpuSampleResult> got = sample_rows_on_gpu(*gpu, d_logits.get(), n_vocab, rows);
      for (int64_t r = 0; r < n_rows; ++r) {
        const std::span<const float> row(logits.data() + r * n_vocab, static_cast<size_t>(n_vocab));
        const int32_t want = cpu_samplers[static_cast<size_t>(r)].sample(row, histories[static_cast<size_t>(r)]);
        const GpuSampleResult& g = got[static_cast<size_t>(r)];
        const std::string what = "vocab " + std::to_string(n_vocab) + " step " + std::to_string(step) + " row " +
                                 std::to_string(r);
        ASSERT_FALSE(g.error) << what;
        ASSERT_EQ(g.token, want) << what;
        ++draws;
        fallbacks += g.used_full_row ? 1 : 0;
        if (rows[static_cast<size_t>(r)].top_logprobs >= 0) {
          // The Scheduler's figures, computed here from the row.
          float mx = 0;
          const double sum = raw_sum_exp_cpu(std::vector<float>(row.begin(), row.end()), &mx);
          const double lse = static_cast<double>(mx) + std::log(sum);
          EXPECT_NEAR(g.logprob, static_cast<double>(row[static_cast<size_t>(want)]) - lse, 1e-5) << what;
          std::vector<int32_t> order(row.size());
          for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
          std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&row](int32_t a, int32_t b) {
            const float la = row[static_cast<size_t>(a)], lb = row[static_cast<size_t>(b)];
            return la != lb ? la > lb : a < b;
          });
          ASSERT_EQ(g.top.size(), 5u) << what;
          for (size_t i = 0; i < 5; ++i) {
            EXPECT_EQ(g.top[i].first, order[i]) << what << " top " << i;
            EXPECT_NEAR(g.top[i].second, static_cast<double>(row[static_cast<size_t>(order[i])]) - lse, 1e-5) << what;
          }
        }
        histories[static_cast<size_t>(r)].push_back(want);
      }
    }
  }
  EXPECT_GT(draws, 300);
  EXPECT_LT(fallbacks, draws / 2);  // most draws must be decided from the candidates
  std::printf("[ sampling ] %d seeded draws equal to Sampler::sample; %d used the full row\n", draws, fallbacks);
}

TEST(CudaSampling, NanRowGetsSamplersError) {
  GA_REQUIRE_CUDA_DEVICE();
  cuda::CachingAllocator alloc(0);
  const int64_t n_vocab = 32000;
  std::mt19937_64 rng(5);
  std::vector<float> logits = random_logits(rng, n_vocab, 0);
  const auto second = random_logits(rng, n_vocab, 1);
  logits.insert(logits.end(), second.begin(), second.end());
  logits[123] = std::nanf("");
  DeviceArray<float> d_logits(alloc, logits.size());
  d_logits.upload(logits);
  auto gpu = cuda::make_cuda_sampling(0, 2, n_vocab, 256);
  SamplerParams p;
  Sampler a(p), b(p), cpu(p);
  const std::vector<GpuSampleRow> rows = {{&a, {}, -1}, {&b, {}, -1}};
  const auto got = sample_rows_on_gpu(*gpu, d_logits.get(), n_vocab, rows);
  ASSERT_TRUE(got[0].error);
  try {
    std::rethrow_exception(got[0].error);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logit of token 123 is NaN"), std::string::npos) << e.what();
  }
  ASSERT_FALSE(got[1].error);
  EXPECT_EQ(got[1].token, cpu.sample(std::span<const float>(logits.data() + n_vocab, n_vocab), {}));
}

// Greedy rows without penalties or logprobs take the argmax kernel (sampler_gpu.cpp): the same token, candidate list
// and error as Sampler::sample over the whole row, for single-row calls (a lone request) and whole batches, on rows
// with ties, signed zeros, infinities, NaN and no finite logit. Decided rows must not use the full-row fallback.
TEST(CudaSampling, GreedyRowsByArgmaxMatchCpuSampler) {
  GA_REQUIRE_CUDA_DEVICE();
  cuda::CachingAllocator alloc(0);
  std::mt19937_64 rng(11);
  int decided = 0;
  for (const int64_t n_vocab : {32000, 32003, 151936}) {
    const int64_t n_rows = 9;
    std::vector<float> logits;
    for (int64_t r = 0; r < n_rows; ++r) {
      std::vector<float> row = random_logits(rng, n_vocab, static_cast<int>(r % 4));
      const size_t a = static_cast<size_t>(n_vocab / 3), b = static_cast<size_t>(n_vocab - 1);
      if (r == 1) row[a] = row[b] = 1e4f;                        // a tie at the maximum: the lower id
      if (r == 2) {                                               // signed zeros tie at the maximum
        for (float& x : row) x = -1.0f - std::fabs(x);
        row[b] = 0.0f;
        row[a] = -0.0f;
      }
      if (r == 3) row[b] = std::numeric_limits<float>::infinity();  // not finite: the full row
      if (r == 4) row[a] = std::nanf("");                           // sample()'s NaN error
      if (r == 5) std::fill(row.begin(), row.end(), -std::numeric_limits<float>::infinity());  // token 0
      if (r == 6) row[b] = 1e4f;                                    // the last id
      logits.insert(logits.end(), row.begin(), row.end());
    }
    DeviceArray<float> d_logits(alloc, logits.size());
    d_logits.upload(logits);
    auto gpu = cuda::make_cuda_sampling(0, n_rows, n_vocab, 256);
    SamplerParams greedy;
    greedy.temperature = 0.0f;
    SamplerParams no_window = greedy;  // penalties that look at no token: still sample()'s one-pass path
    no_window.repeat_penalty = 1.3f;
    no_window.repeat_last_n = 0;
    for (const bool batched : {false, true}) {
      std::vector<Sampler> gpu_samplers, cpu_samplers;
      for (int64_t r = 0; r < n_rows; ++r) {
        gpu_samplers.emplace_back(r == 7 ? no_window : greedy);
        cpu_samplers.emplace_back(r == 7 ? no_window : greedy);
      }
      const std::vector<int32_t> history{5, 9, 5};
      std::vector<GpuSampleResult> got;
      if (batched) {
        std::vector<GpuSampleRow> rows;
        for (Sampler& s : gpu_samplers) rows.push_back({&s, history, -1});
        got = sample_rows_on_gpu(*gpu, d_logits.get(), n_vocab, rows);
      } else {
        for (int64_t r = 0; r < n_rows; ++r) {
          const GpuSampleRow row{&gpu_samplers[static_cast<size_t>(r)], history, -1};
          std::vector<GpuSampleResult> one =
              sample_rows_on_gpu(*gpu, d_logits.get() + r * n_vocab, n_vocab, std::span<const GpuSampleRow>(&row, 1));
          got.push_back(std::move(one[0]));
        }
      }
      ASSERT_EQ(got.size(), static_cast<size_t>(n_rows));
      for (int64_t r = 0; r < n_rows; ++r) {
        const std::string what = "vocab " + std::to_string(n_vocab) + (batched ? " batched" : " alone") + " row " +
                                 std::to_string(r);
        const std::span<const float> row(logits.data() + r * n_vocab, static_cast<size_t>(n_vocab));
        const GpuSampleResult& g = got[static_cast<size_t>(r)];
        Sampler& cpu = cpu_samplers[static_cast<size_t>(r)];
        std::string cpu_error;
        int32_t want = -1;
        try {
          want = cpu.sample(row, history);
        } catch (const Error& e) {
          cpu_error = e.what();
        }
        if (!cpu_error.empty()) {
          ASSERT_TRUE(g.error) << what;
          try {
            std::rethrow_exception(g.error);
          } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()), cpu_error) << what;
          }
          continue;
        }
        ASSERT_FALSE(g.error) << what;
        EXPECT_EQ(g.token, want) << what;
        const bool finite_row = r != 3 && r != 5;
        EXPECT_EQ(g.used_full_row, !finite_row) << what;
        decided += g.used_full_row ? 0 : 1;
        const auto& gc = gpu_samplers[static_cast<size_t>(r)].last_candidates();
        const auto& cc = cpu.last_candidates();
        ASSERT_EQ(gc.size(), cc.size()) << what;
        for (size_t i = 0; i < cc.size(); ++i) {
          EXPECT_EQ(gc[i].id, cc[i].id) << what;
          EXPECT_EQ(gc[i].logit, cc[i].logit) << what;
        }
      }
    }
  }
  EXPECT_GE(decided, 3 * 2 * 6);
}

}  // namespace
}  // namespace ga
