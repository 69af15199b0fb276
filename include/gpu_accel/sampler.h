// Token sampling with the usual llama.cpp / OpenAI knobs, deterministic for a given seed.
//
// Order of the chain (llama.cpp's default order): penalties (repetition, frequency, presence) ->
// top-k -> top-p -> min-p -> temperature -> draw. temperature <= 0 is greedy (argmax, lowest id on
// ties) and ignores the filters.
#pragma once

#include <cstdint>
#include <span>
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

}  // namespace ga
