// Batch sampling of device logits (contract: sampler_gpu.h).
//
// Why the policy is "candidates first, full row on doubt": the candidate path moves K * 12 bytes per
// row instead of n_vocab * 4 and decides almost every real request (greedy, top-k, top-p and min-p
// that cut inside K), while the fallback keeps exactness for everything else without a second
// implementation of the chain. The raw top logprobs come from the same candidates when the row has
// no penalties (raw and penalized order agree); with penalties a second, penalty-free selection runs.
//
// Why greedy rows get an argmax of their own: a greedy row without penalties or logprobs needs only its first
// largest logit (Sampler::sample's one-pass path), so when every row of a call is one, one argmax kernel and a
// 12-byte copy per row replace the two-kernel candidate selection with its double-precision exp sums and its
// parameter upload. That is what a lone greedy request's first token waits for after its prefill (the Scheduler
// queues the sampling behind the forward); on the H200 the candidate selection takes 0.015-0.025 ms longer there than
// the argmax (1B F16, 128-token prompt). A row holding a NaN or no finite logit goes to the full row as in the
// candidate path.
#include "runtime/engine/sampler_gpu.h"

#include <algorithm>
#include <cmath>

#include "gpu_accel/error.h"
#include "runtime/engine/raw_logprobs.h"

namespace ga {

namespace {

constexpr int32_t kDefaultCandidates = 256;   // enough for top-p/min-p cuts of peaked distributions
constexpr int32_t kGreedyCandidates = 20;      // what Sampler reports for greedy (OpenAI top_logprobs max)

float logprob_of(float raw_logit, double lse) {
  return static_cast<float>(static_cast<double>(raw_logit) - lse);
}

// The Scheduler's figures from a whole row (fill_logprobs, raw_logprobs.h).
void logprobs_from_row(std::span<const float> row, int32_t top_n, GpuSampleResult& r) {
  const double lse = engine::raw_log_sum_exp(row);
  r.logprob = logprob_of(row[static_cast<size_t>(r.token)], lse);
  if (top_n <= 0) return;
  for (const int32_t id : engine::top_logit_ids(row, static_cast<size_t>(top_n))) {
    r.top.emplace_back(id, logprob_of(row[static_cast<size_t>(id)], lse));
  }
}


// The row the GPU could not decide, whole on the CPU: Sampler::sample's token, PRNG state, error and logprobs.
void sample_full_row(cuda::CudaSampling& gpu, const float* device_logits, int64_t ld, size_t i, const GpuSampleRow& row,
                     std::vector<float>& host_row, GpuSampleResult& result) {
  result.used_full_row = true;
  host_row.resize(static_cast<size_t>(gpu.n_vocab()));
  gpu.copy_row(device_logits, ld, static_cast<int64_t>(i), host_row);
  try {
    result.token = row.sampler->sample(host_row, row.history);
  } catch (...) {
    result.error = std::current_exception();
    return;
  }
  if (row.top_logprobs >= 0) logprobs_from_row(host_row, row.top_logprobs, result);
}

// Every row greedy without penalties or logprobs (greedy_is_argmax, no top_logprobs): the argmax kernel's answers,
// handed to each row's sampler as its one candidate (so last_candidates() is sample()'s), NaN / non-finite rows whole
// on the CPU.
std::vector<GpuSampleResult> sample_rows_by_argmax(cuda::CudaSampling& gpu, const float* device_logits, int64_t ld,
                                                   std::span<const GpuSampleRow> rows) {
  std::vector<GpuSampleResult> results(rows.size());
  std::vector<cuda::SamplingRowArgmax> best;
  gpu.argmax(device_logits, ld, static_cast<int64_t>(rows.size()), best);
  std::vector<float> host_row;
  for (size_t i = 0; i < rows.size(); ++i) {
    const cuda::SamplingRowArgmax& b = best[i];
    GpuSampleResult& result = results[i];
    if (!b.nan && std::isfinite(b.max)) {
      const std::vector<Sampler::Candidate> top{{b.id, b.max, 0.0f}};
      const Sampler::CandidateView view{gpu.n_vocab(), top, 0.0, 0.0, gpu.sum_rel_error()};
      try {
        if (const auto token = rows[i].sampler->sample_from_candidates(view)) result.token = *token;
      } catch (...) {
        result.error = std::current_exception();
        continue;
      }
    }
    if (result.token < 0) sample_full_row(gpu, device_logits, ld, i, rows[i], host_row, result);
  }
  return results;
}

}  // namespace

int32_t gpu_sampling_candidates(const SamplerParams& params, int64_t n_vocab, int32_t top_logprobs) {
  int64_t k = kDefaultCandidates;
  if (params.temperature <= 0.0f) {
    k = kGreedyCandidates;
  } else if (params.top_k > 0 && params.top_k < n_vocab) {
    k = params.top_k;
  }
  k = std::max<int64_t>(k, top_logprobs);
  return static_cast<int32_t>(std::min<int64_t>(k, n_vocab));
}

std::vector<GpuSampleResult> sample_rows_on_gpu(cuda::CudaSampling& gpu, const float* device_logits, int64_t ld,
                                                std::span<const GpuSampleRow> rows) {
  const int64_t n_vocab = gpu.n_vocab();
  for (size_t i = 0; i < rows.size(); ++i) {
    GA_CHECK(rows[i].sampler != nullptr, InvalidArgument, "sample_rows_on_gpu: row ", i, " has no sampler");
  }
  if (!rows.empty() &&
      std::all_of(rows.begin(), rows.end(),
                  [](const GpuSampleRow& r) { return greedy_is_argmax(r.sampler->params()) && r.top_logprobs < 0; })) {
    return sample_rows_by_argmax(gpu, device_logits, ld, rows);
  }
  std::vector<GpuSampleResult> results(rows.size());
  std::vector<cuda::SamplingRowRequest> requests(rows.size());
  std::vector<char> full_row(rows.size(), 0);
  int32_t k = 1;
  bool want_raw_top = false;  // some row needs raw top logprobs that its penalized candidates cannot give
  for (size_t i = 0; i < rows.size(); ++i) {
    const GpuSampleRow& row = rows[i];
    GA_CHECK(row.sampler != nullptr, InvalidArgument, "sample_rows_on_gpu: row ", i, " has no sampler");
    GA_CHECK(row.top_logprobs <= 20, InvalidArgument, "top_logprobs = ", row.top_logprobs, " is above 20");
    const SamplerParams& params = row.sampler->params();
    cuda::SamplingRowRequest& req = requests[i];
    req.temperature = params.temperature;
    req.repeat_penalty = params.repeat_penalty;
    req.frequency_penalty = params.frequency_penalty;
    req.presence_penalty = params.presence_penalty;
    req.raw_stats = row.top_logprobs >= 0;
    try {
      req.penalties = penalty_counts(params, row.history, n_vocab);
    } catch (...) {
      full_row[i] = 1;  // sample() reports it, after its own NaN check: the same error, the same order
    }
    if (row.top_logprobs > 0 && !req.penalties.empty()) want_raw_top = true;
    k = std::max(k, gpu_sampling_candidates(params, n_vocab, std::max<int32_t>(row.top_logprobs, 0)));
  }
  k = std::min(k, gpu.max_k());

  std::vector<cuda::SamplingRowCandidates> cands;
  gpu.select(device_logits, ld, requests, k, cands);
  std::vector<cuda::SamplingRowCandidates> raw_top;
  if (want_raw_top) {
    std::vector<cuda::SamplingRowRequest> plain(rows.size());  // no penalties: the raw order
    gpu.select(device_logits, ld, plain, std::min<int32_t>(20, static_cast<int32_t>(std::min<int64_t>(
                                                                   gpu.max_k(), n_vocab))),
               raw_top);
  }

  std::vector<Sampler::Candidate> view_top;
  std::vector<float> host_row;
  for (size_t i = 0; i < rows.size(); ++i) {
    const GpuSampleRow& row = rows[i];
    GpuSampleResult& result = results[i];
    const cuda::SamplingRowCandidates& c = cands[i];
    if (!full_row[i] && !c.nan && std::isfinite(c.max)) {
      view_top.resize(c.ids.size());
      for (size_t j = 0; j < c.ids.size(); ++j) view_top[j] = {c.ids[j], c.logits[j], 0.0f};
      const Sampler::CandidateView view{n_vocab, view_top, c.sum_exp, c.sum_exp_temp, gpu.sum_rel_error()};
      try {
        if (const auto token = row.sampler->sample_from_candidates(view)) result.token = *token;
      } catch (...) {
        result.error = std::current_exception();
        continue;
      }
    }
    if (result.token < 0) {  // undecided (or an error sample() must word): the whole row on the CPU
      sample_full_row(gpu, device_logits, ld, i, row, host_row, result);
      continue;
    }
    if (row.top_logprobs < 0) continue;
    const double lse = static_cast<double>(c.raw_max) + std::log(c.raw_sum_exp);
    const auto chosen = std::find(c.ids.begin(), c.ids.end(), result.token);  // a decided token is a candidate
    result.logprob = logprob_of(c.raw_logits[static_cast<size_t>(chosen - c.ids.begin())], lse);
    const bool penalized = !requests[i].penalties.empty();
    const cuda::SamplingRowCandidates& raw = penalized ? raw_top[i] : c;
    const size_t n_top = std::min(static_cast<size_t>(row.top_logprobs), raw.ids.size());
    for (size_t j = 0; j < n_top; ++j) result.top.emplace_back(raw.ids[j], logprob_of(raw.raw_logits[j], lse));
  }
  return results;
}

}  // namespace ga
