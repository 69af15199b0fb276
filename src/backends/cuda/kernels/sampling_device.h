// GPU candidate selection for sampling, as the runtime sees it: plain C++, no CUDA headers.
//
// ga_runtime links ga_cuda (never the other way round), so the Sampler cannot live here and the
// kernel launcher (sampling.h) cannot be seen from there; this class is the seam. It owns the
// device buffers one launch needs (sized once for max_rows x n_vocab x max_k, so a decode step
// allocates nothing), packs the per-row parameters and penalty tables, runs sampling_select on the
// caller's stream and brings back only the candidates and the normalizers (one packed copy). A build
// without CUDA answers make_cuda_sampling() with Unsupported (backends/cuda_stub).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace ga::cuda {

struct SamplingRowRequest {
  float temperature = 1.0f;   // > 0 and != 1: the normalizer at this temperature is summed too
  float repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::vector<std::pair<int32_t, int32_t>> penalties;  // (token id, count), distinct ids < n_vocab
  bool raw_stats = false;     // raw max and raw sum_exp for logprobs
};

struct SamplingRowCandidates {
  std::vector<int32_t> ids;       // [k] by (penalized logit desc, id asc)
  std::vector<float> logits;      // [k] penalized
  std::vector<float> raw_logits;  // [k] raw logits of the same ids
  float max = 0.0f;               // largest penalized logit
  float raw_max = 0.0f;
  bool nan = false;               // a raw logit of the row is NaN (the rest is meaningless)
  double sum_exp = 0.0;           // see SamplingRowStats in sampling.h
  double sum_exp_temp = 0.0;
  double raw_sum_exp = 0.0;
};

// A greedy row's answer from argmax(): the first largest logit; `nan` says the row holds a NaN (then `id` and
// `max` are not what the host sampler would say: it rejects the row).
struct SamplingRowArgmax {
  int32_t id = -1;
  float max = 0.0f;
  bool nan = false;
};

class CudaSampling {
 public:
  virtual ~CudaSampling() = default;
  // Candidates of rows [rows.size()][n_vocab] of device `logits` (ld floats apart). k <= max_k,
  // rows.size() <= max_rows. Synchronizes the stream. Throws ga::Error on a CUDA failure.
  virtual void select(const float* logits, int64_t ld, std::span<const SamplingRowRequest> rows, int32_t k,
                      std::vector<SamplingRowCandidates>& out) = 0;
  // Argmax of rows [n_rows][n_vocab] of device `logits` (ld floats apart), n_rows <= max_rows: the greedy rows
  // without penalties or logprobs, whose answer is the first largest logit (one kernel and a 12-byte-per-row copy
  // instead of the candidate selection). Synchronizes the stream. Throws ga::Error on a CUDA failure.
  virtual void argmax(const float* logits, int64_t ld, int64_t n_rows, std::vector<SamplingRowArgmax>& out) = 0;
  // Copies row `row` of device `logits` to `host` ([n_vocab]); the fallback when candidates cannot decide.
  virtual void copy_row(const float* logits, int64_t ld, int64_t row, std::span<float> host) = 0;
  virtual int64_t n_vocab() const = 0;
  virtual int64_t max_rows() const = 0;
  virtual int32_t max_k() const = 0;
  // Bound of the relative difference between the device sums and a sequential double sum of the
  // same terms (summation order only): 2 * n_vocab * 2^-53, doubled for exp()'s last-bit rounding.
  virtual double sum_rel_error() const = 0;
};

// `stream`: a cudaStream_t (nullptr: the legacy default stream), on which the logits are produced.
std::unique_ptr<CudaSampling> make_cuda_sampling(int device, int64_t max_rows, int64_t n_vocab, int32_t max_k,
                                                 void* stream = nullptr);

}  // namespace ga::cuda
