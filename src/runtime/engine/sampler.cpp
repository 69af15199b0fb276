// Token sampler: penalties -> top-k -> top-p -> min-p -> temperature -> seeded draw.
//
// Design: every step works on one candidate list (id, logit, p) that each filter shrinks in place,
// so the list left at the end is exactly what the draw used and doubles as last_candidates() for
// logprobs. Greedy decoding without penalties skips the list: it is a plain argmax (and
// last_candidates() holds only the chosen token), because it is the common serving case and a full
// softmax per token would make the sampling thread the bottleneck of a large batch. Candidates are ordered by (logit desc, id asc): a strict total order, so std::sort gives
// the same result on every standard library and ties never depend on the sort algorithm.
//
// Reproducibility: the PRNG is our own xoshiro256** seeded through splitmix64, and the uniform draw
// is built from the top 53 bits by hand, because std::uniform_real_distribution's output is
// implementation-defined. Probabilities are accumulated in double for the same reason (a float sum
// over 150k tokens drifts enough to move the draw between platforms' exp()).
#include "gpu_accel/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "gpu_accel/error.h"

namespace ga {

namespace {

// Greedy mode has no "draw distribution"; it reports this many most likely tokens for logprobs
// (OpenAI's top_logprobs maximum is 20).
constexpr size_t kGreedyReportedCandidates = 20;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

bool higher_first(const Sampler::Candidate& a, const Sampler::Candidate& b) {
  if (a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}

// Softmax of the candidates' logits divided by temperature, into p (double accumulation).
void softmax(std::vector<Sampler::Candidate>& cands, float temperature) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const auto& c : cands) max_logit = std::max(max_logit, c.logit);
  GA_CHECK(std::isfinite(max_logit), InvalidArgument, "every candidate logit is -inf: nothing can be sampled");
  double sum = 0;
  std::vector<double> e(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) {
    e[i] = std::exp(static_cast<double>(cands[i].logit - max_logit) / temperature);
    sum += e[i];
  }
  for (size_t i = 0; i < cands.size(); ++i) cands[i].p = static_cast<float>(e[i] / sum);
}

// The index of the largest logit, the lowest on ties (as argmax()); InvalidArgument on a NaN. Two
// passes: the maximum over kLanes independent lanes (no loop-carried dependency between them, so
// the compiler keeps them in one vector register), then the first index holding it.
size_t checked_argmax(std::span<const float> logits) {
  constexpr size_t kLanes = 8;
  float lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, -std::numeric_limits<float>::infinity());
  bool any_nan = false;
  const size_t n = logits.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const float x = logits[i + l];
      any_nan |= x != x;
      lane_max[l] = x > lane_max[l] ? x : lane_max[l];
    }
  }
  for (; i < n; ++i) {
    any_nan |= logits[i] != logits[i];
    lane_max[0] = logits[i] > lane_max[0] ? logits[i] : lane_max[0];
  }
  if (any_nan) {
    for (size_t j = 0; j < n; ++j) GA_CHECK(!std::isnan(logits[j]), InvalidArgument, "logit of token ", j, " is NaN");
  }
  float m = lane_max[0];
  for (size_t l = 1; l < kLanes; ++l) m = lane_max[l] > m ? lane_max[l] : m;
  size_t best = 0;
  while (best < n && logits[best] != m) ++best;
  return best < n ? best : 0;  // all -inf: token 0, as argmax()
}

}  // namespace

int32_t argmax(std::span<const float> logits) {
  GA_CHECK(!logits.empty(), InvalidArgument, "argmax of empty logits");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: the lowest id wins ties
  }
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_state_{} {
  GA_CHECK(std::isfinite(params.temperature), InvalidArgument, "temperature = ", params.temperature, " is not finite");
  GA_CHECK(params.top_p >= 0.0f && params.top_p <= 1.0f, InvalidArgument, "top_p = ", params.top_p,
           " is outside [0, 1]");
  GA_CHECK(params.min_p >= 0.0f && params.min_p <= 1.0f, InvalidArgument, "min_p = ", params.min_p,
           " is outside [0, 1]");
  GA_CHECK(params.repeat_penalty > 0.0f && std::isfinite(params.repeat_penalty), InvalidArgument,
           "repeat_penalty = ", params.repeat_penalty, " must be a positive number");
  GA_CHECK(params.repeat_last_n >= -1, InvalidArgument, "repeat_last_n = ", params.repeat_last_n,
           " must be >= -1");
  GA_CHECK(std::isfinite(params.frequency_penalty) && std::isfinite(params.presence_penalty), InvalidArgument,
           "frequency/presence penalties must be finite");
  reseed(params.seed);
}

void Sampler::reseed(uint64_t seed) {
  params_.seed = seed;
  uint64_t sm = seed;
  for (auto& word : rng_state_) word = splitmix64(sm);
}

double Sampler::next_uniform() {
  // xoshiro256** (Blackman & Vigna); the top 53 bits make a double in [0, 1).
  const uint64_t result = rotl(rng_state_[1] * 5, 7) * 9;
  const uint64_t t = rng_state_[1] << 17;
  rng_state_[2] ^= rng_state_[0];
  rng_state_[3] ^= rng_state_[1];
  rng_state_[1] ^= rng_state_[2];
  rng_state_[0] ^= rng_state_[3];
  rng_state_[2] ^= t;
  rng_state_[3] = rotl(rng_state_[3], 45);
  return static_cast<double>(result >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  GA_CHECK(!logits.empty(), InvalidArgument, "sample() got empty logits");
  const int64_t n_vocab = static_cast<int64_t>(logits.size());
  const bool any_penalty =
      params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f;

  // ---- greedy without penalties: one pass, no candidate list and no softmax (a server samples
  // 64 rows of up to 150k logits per step on one thread's budget) ----
  if (params_.temperature <= 0.0f && (!any_penalty || params_.repeat_last_n == 0 || history.empty())) {
    const size_t best = checked_argmax(logits);
    candidates_.assign(1, Candidate{static_cast<int32_t>(best), logits[best], 1.0f});
    return static_cast<int32_t>(best);
  }

  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    GA_CHECK(!std::isnan(logits[i]), InvalidArgument, "logit of token ", i, " is NaN");
    candidates_[i] = {static_cast<int32_t>(i), logits[i], 0.0f};
  }

  // ---- penalties over the last repeat_last_n tokens (llama.cpp's arithmetic) ----
  if (any_penalty && params_.repeat_last_n != 0 && !history.empty()) {
    const size_t window = params_.repeat_last_n < 0
                              ? history.size()
                              : std::min(history.size(), static_cast<size_t>(params_.repeat_last_n));
    std::unordered_map<int32_t, int> counts;
    for (size_t i = history.size() - window; i < history.size(); ++i) {
      const int32_t id = history[i];
      GA_CHECK(id >= 0 && id < n_vocab, InvalidArgument, "history token ", id, " is outside the vocabulary of ",
               n_vocab);
      ++counts[id];
    }
    for (const auto& [id, count] : counts) {
      float& logit = candidates_[static_cast<size_t>(id)].logit;
      logit = logit > 0 ? logit / params_.repeat_penalty : logit * params_.repeat_penalty;
      logit -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
    }
  }

  // ---- greedy: argmax of the penalized logits; report the top candidates at temperature 1 ----
  if (params_.temperature <= 0.0f) {
    softmax(candidates_, 1.0f);
    const size_t keep = std::min(kGreedyReportedCandidates, candidates_.size());
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep), candidates_.end(),
                      higher_first);
    candidates_.resize(keep);
    return candidates_.front().id;
  }

  // ---- top-k: keep the k highest logits (sorted, so the later filters can walk a prefix) ----
  const int64_t k = params_.top_k;
  if (k > 0 && k < n_vocab) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), higher_first);
    candidates_.resize(static_cast<size_t>(k));
  } else {
    std::sort(candidates_.begin(), candidates_.end(), higher_first);
  }

  // ---- top-p: the smallest prefix whose probability reaches p (at least one token) ----
  if (params_.top_p < 1.0f) {
    softmax(candidates_, 1.0f);
    double cumulative = 0;
    size_t keep = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += candidates_[i].p;
      if (cumulative >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    candidates_.resize(keep);
  }

  // ---- min-p: keep p_i >= min_p * p_max, i.e. logit_i >= logit_max + log(min_p) ----
  if (params_.min_p > 0.0f) {
    const double threshold = static_cast<double>(candidates_.front().logit) + std::log(params_.min_p);
    size_t keep = 1;
    while (keep < candidates_.size() && static_cast<double>(candidates_[keep].logit) >= threshold) ++keep;
    candidates_.resize(keep);
  }

  // ---- temperature, then a draw from the renormalized distribution ----
  softmax(candidates_, params_.temperature);
  const double u = next_uniform();
  double cumulative = 0;
  for (const auto& c : candidates_) {
    cumulative += c.p;
    if (u < cumulative) return c.id;
  }
  // u landed in the rounding gap above the float p's sum: the last candidate owns it.
  return candidates_.back().id;
}

}  // namespace ga
