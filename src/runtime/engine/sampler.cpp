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
//
// sample_from_candidates() replays the same chain over the K highest logits the GPU selected. Every
// step that only looks at a prefix of the sorted list (top-k, min-p, a top-p or draw that stops
// early) is computed with the same code on the same values, so it is bit-identical. Steps that need
// the whole vocabulary's normalizer get it from the view; since its summation order differs, the
// decision is made twice, with the sum nudged down and up by its error bound: the probabilities are
// monotone in the sum, so when both agree every sum in between (the CPU's included) agrees too.
#include "gpu_accel/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

// One softmax term: the difference rounds in float, the exponential runs in double. The GPU kernel
// computes its sums from exactly these terms.
double exp_term(float logit, float max_logit, float temperature) {
  return std::exp(static_cast<double>(logit - max_logit) / temperature);
}

void check_finite_max(float max_logit) {
  GA_CHECK(std::isfinite(max_logit), InvalidArgument, "every candidate logit is -inf: nothing can be sampled");
}

// Softmax of the candidates' logits divided by temperature, into p (double accumulation).
void softmax(std::vector<Sampler::Candidate>& cands, float temperature) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const auto& c : cands) max_logit = std::max(max_logit, c.logit);
  check_finite_max(max_logit);
  double sum = 0;
  std::vector<double> e(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) {
    e[i] = exp_term(cands[i].logit, max_logit, temperature);
    sum += e[i];
  }
  for (size_t i = 0; i < cands.size(); ++i) cands[i].p = static_cast<float>(e[i] / sum);
}

// The top-p cut over a list whose normalizer is `sum` (only cands[0..) are known): the kept length,
// or 0 when the cumulative probability does not reach top_p inside the known candidates.
size_t top_p_cut(const std::vector<Sampler::Candidate>& cands, double sum, float top_p) {
  const float max_logit = cands.front().logit;
  double cumulative = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    cumulative += static_cast<float>(exp_term(cands[i].logit, max_logit, 1.0f) / sum);
    if (cumulative >= top_p) return i + 1;
  }
  return 0;
}

// The draw over a list whose normalizer is `sum`: the index u falls into, or cands.size() when it
// falls beyond the known candidates.
size_t draw_index(const std::vector<Sampler::Candidate>& cands, double sum, float temperature, double u) {
  const float max_logit = cands.front().logit;
  double cumulative = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    cumulative += static_cast<float>(exp_term(cands[i].logit, max_logit, temperature) / sum);
    if (u < cumulative) return i;
  }
  return cands.size();
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

bool penalties_in_effect(const SamplerParams& params) {
  const bool any_penalty =
      params.repeat_penalty != 1.0f || params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  return any_penalty && params.repeat_last_n != 0;
}

bool greedy_is_argmax(const SamplerParams& params) {
  return params.temperature <= 0.0f && !penalties_in_effect(params);
}

std::vector<std::pair<int32_t, int32_t>> penalty_counts(const SamplerParams& params, std::span<const int32_t> history,
                                                        int64_t n_vocab) {
  std::vector<std::pair<int32_t, int32_t>> counts;
  if (!penalties_in_effect(params) || history.empty()) return counts;
  const size_t window = params.repeat_last_n < 0 ? history.size()
                                                 : std::min(history.size(), static_cast<size_t>(params.repeat_last_n));
  std::vector<int32_t> ids(history.end() - static_cast<ptrdiff_t>(window), history.end());
  for (const int32_t id : ids) {
    GA_CHECK(id >= 0 && id < n_vocab, InvalidArgument, "history token ", id, " is outside the vocabulary of ",
             n_vocab);
  }
  std::sort(ids.begin(), ids.end());
  for (const int32_t id : ids) {
    if (counts.empty() || counts.back().first != id) counts.emplace_back(id, 0);
    ++counts.back().second;
  }
  return counts;
}

float penalize_logit(float logit, int32_t count, const SamplerParams& params) {
  // Separate statements: no compiler may contract count * frequency + presence into an FMA, so the
  // GPU kernel (explicit round-to-nearest intrinsics) reproduces every bit.
  const float scaled = logit > 0 ? logit / params.repeat_penalty : logit * params.repeat_penalty;
  const float by_frequency = static_cast<float>(count) * params.frequency_penalty;
  const float subtract = by_frequency + params.presence_penalty;
  return scaled - subtract;
}

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

  // ---- greedy without penalties: one pass, no candidate list and no softmax (a server samples
  // 64 rows of up to 150k logits per step on one thread's budget) ----
  // (Decided from the parameters alone, so sample_from_candidates reports the same candidate list.)
  if (greedy_is_argmax(params_)) {
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
  for (const auto& [id, count] : penalty_counts(params_, history, n_vocab)) {
    float& logit = candidates_[static_cast<size_t>(id)].logit;
    logit = penalize_logit(logit, count, params_);
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

std::optional<int32_t> Sampler::sample_from_candidates(const CandidateView& view) {
  GA_CHECK(view.n_vocab > 0 && !view.top.empty() && static_cast<int64_t>(view.top.size()) <= view.n_vocab,
           InvalidArgument, "sample_from_candidates: ", view.top.size(), " candidates for a vocabulary of ",
           view.n_vocab);
  const int64_t n_vocab = view.n_vocab;
  const size_t m = view.top.size();
  // Every path of sample() ends in a softmax whose max is the largest logit.
  check_finite_max(view.top.front().logit);
  const double sum_lo = view.sum_exp * (1.0 - view.sum_rel_error);
  const double sum_hi = view.sum_exp * (1.0 + view.sum_rel_error);

  // ---- greedy: the first candidate; the reported top candidates at temperature 1 ----
  if (params_.temperature <= 0.0f) {
    if (greedy_is_argmax(params_)) {  // as sample(): the chosen token alone
      candidates_.assign(1, Candidate{view.top.front().id, view.top.front().logit, 1.0f});
      return candidates_.front().id;
    }
    const size_t keep = std::min(kGreedyReportedCandidates, static_cast<size_t>(n_vocab));
    if (m < keep) return std::nullopt;
    candidates_.assign(view.top.begin(), view.top.begin() + static_cast<ptrdiff_t>(keep));
    const float max_logit = candidates_.front().logit;
    for (auto& c : candidates_) c.p = static_cast<float>(exp_term(c.logit, max_logit, 1.0f) / view.sum_exp);
    return candidates_.front().id;
  }

  // ---- top-k: a known prefix when k <= m; else the list is the whole vocabulary ----
  const int64_t k = params_.top_k;
  size_t list_size = static_cast<size_t>(n_vocab);
  if (k > 0 && k < n_vocab) {
    if (static_cast<size_t>(k) > m) return std::nullopt;
    list_size = static_cast<size_t>(k);
  }
  bool list_known = list_size <= m;  // every member of the list is among the candidates
  std::vector<Candidate> cands(view.top.begin(), view.top.begin() + static_cast<ptrdiff_t>(std::min(list_size, m)));

  // ---- top-p ----
  if (params_.top_p < 1.0f) {
    if (list_known) {  // sample()'s code on sample()'s list
      softmax(cands, 1.0f);
      double cumulative = 0;
      size_t keep = cands.size();
      for (size_t i = 0; i < cands.size(); ++i) {
        cumulative += cands[i].p;
        if (cumulative >= params_.top_p) {
          keep = i + 1;
          break;
        }
      }
      cands.resize(keep);
    } else {  // the whole vocabulary's softmax: the view's normalizer
      const size_t keep = top_p_cut(cands, sum_lo, params_.top_p);
      if (keep == 0 || keep != top_p_cut(cands, sum_hi, params_.top_p)) return std::nullopt;
      cands.resize(keep);
      list_known = true;
    }
  }

  // ---- min-p: keep logit_i >= logit_max + log(min_p) ----
  if (params_.min_p > 0.0f) {
    const double threshold = static_cast<double>(cands.front().logit) + std::log(params_.min_p);
    size_t keep = 1;
    while (keep < cands.size() && static_cast<double>(cands[keep].logit) >= threshold) ++keep;
    if (!list_known && keep == cands.size()) return std::nullopt;  // the cut lies beyond the candidates
    cands.resize(keep);
    list_known = true;
  }

  // ---- temperature and the draw ----
  if (list_known) {
    softmax(cands, params_.temperature);
    const double u = next_uniform();
    candidates_ = std::move(cands);
    double cumulative = 0;
    for (const auto& c : candidates_) {
      cumulative += c.p;
      if (u < cumulative) return c.id;
    }
    return candidates_.back().id;
  }
  // A draw over the whole vocabulary: decided when u falls inside the candidates for both bounds of
  // the normalizer. The PRNG advances only then.
  const double temp_lo = view.sum_exp_temp * (1.0 - view.sum_rel_error);
  const double temp_hi = view.sum_exp_temp * (1.0 + view.sum_rel_error);
  uint64_t saved_state[4];
  std::copy(std::begin(rng_state_), std::end(rng_state_), saved_state);
  const double u = next_uniform();
  const size_t index = draw_index(cands, temp_lo, params_.temperature, u);
  if (index >= cands.size() || index != draw_index(cands, temp_hi, params_.temperature, u)) {
    std::copy(std::begin(saved_state), std::end(saved_state), rng_state_);
    return std::nullopt;
  }
  const float max_logit = cands.front().logit;
  for (auto& c : cands) {
    c.p = static_cast<float>(exp_term(c.logit, max_logit, params_.temperature) / view.sum_exp_temp);
  }
  candidates_ = std::move(cands);
  return candidates_[index].id;
}

SamplingCandidates select_candidates(std::span<const float> logits, std::span<const int32_t> history,
                                     const SamplerParams& params, size_t k) {
  GA_CHECK(!logits.empty() && k > 0, InvalidArgument, "select_candidates: empty logits or k = 0");
  std::vector<float> q(logits.begin(), logits.end());
  for (size_t i = 0; i < q.size(); ++i) GA_CHECK(!std::isnan(q[i]), InvalidArgument, "logit of token ", i, " is NaN");
  const int64_t n_vocab = static_cast<int64_t>(q.size());
  for (const auto& [id, count] : penalty_counts(params, history, n_vocab)) {
    q[static_cast<size_t>(id)] = penalize_logit(q[static_cast<size_t>(id)], count, params);
  }
  SamplingCandidates out;
  out.n_vocab = n_vocab;
  std::vector<Sampler::Candidate> all(q.size());
  for (size_t i = 0; i < q.size(); ++i) all[i] = {static_cast<int32_t>(i), q[i], 0.0f};
  const size_t keep = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<ptrdiff_t>(keep), all.end(), higher_first);
  out.top.assign(all.begin(), all.begin() + static_cast<ptrdiff_t>(keep));
  const float max_logit = out.top.front().logit;
  const bool at_temperature = params.temperature > 0.0f && params.temperature != 1.0f;
  for (const float v : q) {
    out.sum_exp += exp_term(v, max_logit, 1.0f);
    if (at_temperature) out.sum_exp_temp += exp_term(v, max_logit, params.temperature);
  }
  if (!at_temperature) out.sum_exp_temp = out.sum_exp;
  return out;
}

}  // namespace ga
