// Token sampling with the usual llama.cpp / OpenAI knobs, deterministic for a given seed.
//
// Order of the chain (llama.cpp's default order): penalties (repetition, frequency, presence) ->
// top-k -> top-p -> min-p -> temperature -> draw. temperature <= 0 is greedy (argmax, lowest id on
// ties) and ignores the filters.
//
// Two entry points share that chain: sample() over a whole logits row, and sample_from_candidates()
// over the few highest penalized logits plus the full-vocabulary normalizers (what the GPU selection
// kernel returns, so only K candidates cross the bus). The second answers "undecided" (and leaves the
// sampler untouched) whenever the candidates cannot prove the result sample() would give; the
// caller then runs sample() on the full row.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace ga {

struct SamplerParams {
  float temperature = 0.8f;
  int32_t top_k = 40;         // <= 0: off
  float top_p = 0.95f;        // >= 1: off
  float min_p = 0.05f;        // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off; divides positive logits / multiplies negative ones
  int32_t repeat_last_n = 64;   // window of recent tokens the penalties look at (-1: all)
  float frequency_penalty = 0.0f;  // subtracts count * penalty
  float presence_penalty = 0.0f;   // subtracts penalty once if present
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  // Picks the next token from logits ([n_vocab]) given the tokens so far (prompt + generated).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  // The probabilities the last draw used, sorted descending (token, p); for logprobs. After a
  // greedy draw without penalties: only the chosen token (p = 1), the argmax needs no distribution.
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  const std::vector<Candidate>& last_candidates() const { return candidates_; }

  // The highest penalized logits of a row and its normalizers, for sample_from_candidates().
  struct CandidateView {
    int64_t n_vocab = 0;
    // The min(K, n_vocab) largest penalized logits, ordered (logit desc, id asc); p is ignored.
    std::span<const Candidate> top;
    // Over the whole vocabulary, with max = top[0].logit: sum_v exp(double(float(q_v - max))) and the
    // same with the exponent divided by the temperature (used when no filter narrows the list).
    double sum_exp = 0.0;
    double sum_exp_temp = 0.0;
    // Bound of the sums' relative difference from sample()'s sequential double sums (0: the same
    // sums). Decisions that the normalizer could flip within this bound answer "undecided".
    double sum_rel_error = 0.0;
  };

  // The token sample() would pick for the row behind `view` (same history), or nullopt when the
  // candidates cannot decide it: top_k above the candidates, a top-p/min-p cut or the draw beyond
  // them, or a decision within the sums' error. nullopt leaves the sampler's state unchanged, so
  // sample() on the full row then gives exactly sample()'s answer. A decided draw advances the
  // PRNG like sample(); last_candidates() then holds the same list (only its first top.size()
  // entries when the draw ran over the whole vocabulary). Throws what sample() throws for a row
  // whose largest logit is not finite.
  std::optional<int32_t> sample_from_candidates(const CandidateView& view);

  const SamplerParams& params() const { return params_; }
  void reseed(uint64_t seed);

 private:
  SamplerParams params_;
  uint64_t rng_state_[4];
  std::vector<Candidate> candidates_;
  double next_uniform();
};

// Index of the largest logit (lowest index on ties).
int32_t argmax(std::span<const float> logits);

// Whether repetition / frequency / presence penalties change any logit (a window of 0 tokens changes none).
bool penalties_in_effect(const SamplerParams& params);

// Whether sample() takes its one-pass greedy path for these parameters: temperature <= 0 with no penalty in
// effect, so its token is the row's argmax and last_candidates() is that token alone (p = 1).
bool greedy_is_argmax(const SamplerParams& params);

// The penalty table sample() applies: (token id, occurrences) of the last repeat_last_n tokens of
// `history`, sorted by id; empty when no penalty is active. Throws InvalidArgument (sample()'s
// message) for a history token outside [0, n_vocab).
std::vector<std::pair<int32_t, int32_t>> penalty_counts(const SamplerParams& params, std::span<const int32_t> history,
                                                        int64_t n_vocab);

// One token's penalized logit, rounded step by step exactly as sample() and the GPU kernel do.
float penalize_logit(float logit, int32_t count, const SamplerParams& params);

// The CPU reference of the GPU candidate selection (backends/cuda/kernels/sampling.h): the k highest
// penalized logits of `logits` in sampler order and the sums of a CandidateView, summed sequentially.
// NaN logits throw like sample().
struct SamplingCandidates {
  int64_t n_vocab = 0;
  std::vector<Sampler::Candidate> top;
  double sum_exp = 0.0;
  double sum_exp_temp = 0.0;
  Sampler::CandidateView view(double sum_rel_error = 0.0) const {
    return {n_vocab, std::span<const Sampler::Candidate>(top), sum_exp, sum_exp_temp, sum_rel_error};
  }
};
SamplingCandidates select_candidates(std::span<const float> logits, std::span<const int32_t> history,
                                     const SamplerParams& params, size_t k);

}  // namespace ga
