// Sampling a batch of device-resident logits rows: the call site for the Session and the Scheduler.
//
// One launch selects every row's candidates on the GPU (backends/cuda/kernels/sampling_device.h);
// each row's Sampler then finishes its chain from them (Sampler::sample_from_candidates). A row the
// candidates cannot decide (or one sample() would reject: NaN, a bad history token, no finite logit)
// is copied whole and handed to Sampler::sample, so every row gets exactly sample()'s token, PRNG
// state and error. Logprobs are the Scheduler's figures: log-softmax of the raw logits (before
// penalties), the chosen token's and the top_logprobs most likely tokens'.
#pragma once

#include <cstdint>
#include <exception>
#include <span>
#include <utility>
#include <vector>

#include "backends/cuda/kernels/sampling_device.h"
#include "gpu_accel/sampler.h"

namespace ga {

struct GpuSampleRow {
  Sampler* sampler = nullptr;         // the sequence's sampler: parameters and PRNG state, advanced
  std::span<const int32_t> history;   // prompt + generated tokens (the penalties' window)
  int32_t top_logprobs = -1;          // < 0: no logprobs; 0..20: the chosen token's (+ that many alternatives)
};

struct GpuSampleResult {
  int32_t token = -1;
  std::exception_ptr error;           // what Sampler::sample threw for this row (token stays -1)
  bool used_full_row = false;         // the candidates could not decide: the row was copied and sampled on the CPU
  float logprob = 0.0f;               // raw log-softmax of the chosen token (top_logprobs >= 0)
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob) by (raw logit desc, id asc)
};

// The most candidates a runtime caller asks make_cuda_sampling for (the kernel's limit; a larger
// top_k falls back to the full row).
inline constexpr int32_t kGpuSamplingMaxCandidates = 1024;

// Candidates per row a launch should select so that `params` decides without the full row in the
// common cases: 20 for greedy (the reported candidates), top_k when it is on, else a default of 256.
int32_t gpu_sampling_candidates(const SamplerParams& params, int64_t n_vocab, int32_t top_logprobs);

// Samples row i of device logits [rows.size()][n_vocab] (ld floats apart) with rows[i].sampler, in
// order. Per-row errors land in the results; CUDA failures throw ga::Error.
std::vector<GpuSampleResult> sample_rows_on_gpu(cuda::CudaSampling& gpu, const float* device_logits, int64_t ld,
                                                std::span<const GpuSampleRow> rows);

}  // namespace ga
