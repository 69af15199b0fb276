// Candidate selection for token sampling on the GPU: per row of logits, the K highest penalized
// logits in the CPU sampler's order and the full-vocabulary normalizers, so the host finishes the
// sampling chain (ga::Sampler::sample_from_candidates) from K candidates instead of n_vocab floats.
//
// What one launch computes, per row r of logits [n_rows][n_vocab] (ld floats apart), with l the raw
// logits and q the penalized ones (llama.cpp's arithmetic, exactly as ga::Sampler::sample rounds it:
// q = (l > 0 ? l / repeat : l * repeat) - (count * frequency + presence), no FMA contraction):
//   * ids/logits[r][0..k): the k largest q, ordered (q desc, id asc), -0.0 reported as +0.0;
//   * raw_logits[r][i] = l[ids[r][i]] (the logprobs report raw logits);
//   * stats[r]: max = max q; sum_exp = sum_v exp(double(float(q_v - max))) (the sampler's softmax
//     terms at temperature 1); sum_exp_temp = the same with the exponent divided by `temperature`
//     (rows with temperature > 0 and != 1; else = sum_exp); with raw_stats: raw_max = max l and
//     raw_sum_exp = sum_v exp(double(l_v) - raw_max) (the Scheduler's log_sum_exp); nan = 1 when a raw
//     logit of the row is NaN (then the rest of that row's outputs are meaningless).
// The sums differ from the CPU's sequential double sums only by summation order (relative error
// below n_vocab * 2^-52); everything else is bit-exact.
//
// Algorithm (two kernels, one launch each for all rows, so 1..256 rows cost one pass; why: sampling.cu):
//   1. maxima: grid (chunks, rows). Each block reduces its chunk's raw and penalized maxima and NaN flag.
//   2. select + sums: grid (chunks, rows). Each block reduces the chunk maxima to the row's max, sums
//      its chunk's exp terms in double against it (the max must be known first: the CPU rounds q - max
//      in float), and radix-selects its chunk's k best over 64-bit keys (ordered float bits << 32 |
//      ~id: unique, so no tie handling is needed and the lowest id wins ties). The last block of each
//      row to finish (atomic ticket) selects the row's k best from the chunks' candidates, sorts them,
//      writes the outputs and adds the chunk partial sums in a fixed order (deterministic).
//   Chunks hold 1024..kSamplingChunk logits (fewer rows: shorter chunks, more blocks per row).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ga::cuda {

inline constexpr int kSamplingChunk = 4096;         // the longest chunk: logits per block of both kernels
inline constexpr int kSamplingMaxCandidates = 1024;  // the largest k of one launch
inline constexpr int64_t kSamplingMaxVocab = int64_t{kSamplingChunk} * 1024;

// Per-row parameters, device memory [n_rows].
struct SamplingRowParams {
  float temperature = 1.0f;        // > 0 and != 1: sum_exp_temp is summed at this temperature
  float repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t penalty_begin = 0;       // this row's entries of penalty_ids/penalty_counts
  int32_t penalty_count = 0;       // 0: no penalties (distinct ids, each < n_vocab)
  int32_t raw_stats = 0;           // nonzero: raw_max and raw_sum_exp too
  int32_t pad_ = 0;
};

// Per-row results (device memory [n_rows]).
struct SamplingRowStats {
  float max = 0.0f;          // largest penalized logit
  float raw_max = 0.0f;      // largest raw logit (raw_stats rows)
  int32_t nan = 0;           // 1: a raw logit of the row is NaN
  int32_t pad_ = 0;
  double sum_exp = 0.0;      // sum_v exp(double(float(q_v - max)))
  double sum_exp_temp = 0.0; // sum_v exp(double(float(q_v - max)) / temperature)
  double raw_sum_exp = 0.0;  // sum_v exp(double(l_v) - raw_max) (raw_stats rows)
};

struct SamplingSelectParams {
  const float* logits = nullptr;  // [n_rows][n_vocab], ld floats apart, device memory
  int64_t n_rows = 0;
  int64_t n_vocab = 0;
  int64_t ld = 0;
  const SamplingRowParams* rows = nullptr;  // [n_rows], device memory
  const int32_t* penalty_ids = nullptr;     // [total penalty entries], device memory (nullptr if none)
  const int32_t* penalty_counts = nullptr;  // [total penalty entries], occurrences in the window
  int32_t k = 0;                   // candidates per row, 1..min(n_vocab, kSamplingMaxCandidates)
  void* workspace = nullptr;       // sampling_workspace_bytes(n_rows, n_vocab, k) bytes, 16-byte aligned
  size_t workspace_bytes = 0;
  int32_t* out_ids = nullptr;       // [n_rows][k]
  float* out_logits = nullptr;      // [n_rows][k] penalized logits
  float* out_raw_logits = nullptr;  // [n_rows][k] raw logits of the same ids
  SamplingRowStats* out_stats = nullptr;  // [n_rows]
};

size_t sampling_workspace_bytes(int64_t n_rows, int64_t n_vocab, int32_t k);
const char* sampling_select_unsupported_reason(const SamplingSelectParams& p);
cudaError_t sampling_select(const SamplingSelectParams& p, cudaStream_t stream);

}  // namespace ga::cuda
