// Sampler::sample_from_candidates against Sampler::sample: the candidate-based completion (what the
// GPU path runs after its selection kernel) must give the token sample() gives, the same reported
// probabilities, the same PRNG progress, and "undecided" (with the PRNG untouched) exactly when the
// candidates cannot prove the answer.
//
// The candidates are built here independently (a full sort of the penalized row, sums summed in
// reverse order so they differ from sample()'s in the last bits, as the GPU's do), over random rows
// with ties, -inf entries and penalties, and over a grid of parameter sets: greedy, top-k, top-p,
// min-p, pure temperature and their combinations, for K from 1 to the whole vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/sampler_grid.h"
#include "gpu_accel/error.h"
#include "gpu_accel/sampler.h"

namespace ga {
namespace {

constexpr double kSumRelError = 1e-12;  // what the view claims; the reversed sums are well inside it

struct Row {
  std::vector<float> logits;
  std::vector<int32_t> history;
};

Row random_row(std::mt19937_64& rng, int64_t n_vocab, int kind) {
  Row row;
  std::normal_distribution<float> normal(0.0f, kind == 2 ? 6.0f : 2.5f);
  row.logits.resize(static_cast<size_t>(n_vocab));
  for (auto& l : row.logits) {
    l = normal(rng);
    if (kind == 1) l = std::round(l * 4.0f) / 4.0f;  // many exact ties
  }
  if (kind == 3) {  // a peaked row: one token far above the rest
    row.logits[static_cast<size_t>(rng() % static_cast<uint64_t>(n_vocab))] += 25.0f;
  }
  const int64_t n_neg_inf = n_vocab / 10;
  for (int64_t i = 0; i < n_neg_inf; ++i) {
    row.logits[static_cast<size_t>(rng() % static_cast<uint64_t>(n_vocab))] = -std::numeric_limits<float>::infinity();
  }
  row.logits[static_cast<size_t>(rng() % static_cast<uint64_t>(n_vocab))] = -0.0f;  // equal to +0.0 for sorting
  const size_t n_hist = rng() % 100;
  for (size_t i = 0; i < n_hist; ++i) row.history.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab)));
  return row;
}

// Independent candidate builder: llama.cpp's penalty arithmetic written out, a full sort, sums in
// reverse order.
Sampler::Candidate make_candidate(int32_t id, float logit) { return {id, logit, 0.0f}; }

struct Built {
  std::vector<Sampler::Candidate> top;
  double sum_exp = 0;
  double sum_exp_temp = 0;
};

Built build_candidates(const Row& row, const SamplerParams& p, size_t k) {
  std::vector<float> q = row.logits;
  const bool any = p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (any && p.repeat_last_n != 0 && !row.history.empty()) {
    const size_t window = p.repeat_last_n < 0 ? row.history.size()
                                              : std::min(row.history.size(), static_cast<size_t>(p.repeat_last_n));
    std::map<int32_t, int> counts;
    for (size_t i = row.history.size() - window; i < row.history.size(); ++i) ++counts[row.history[i]];
    for (const auto& [id, count] : counts) {
      float& l = q[static_cast<size_t>(id)];
      l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
      const float by_frequency = static_cast<float>(count) * p.frequency_penalty;
      l -= by_frequency + p.presence_penalty;
    }
  }
  std::vector<Sampler::Candidate> all;
  for (size_t i = 0; i < q.size(); ++i) all.push_back(make_candidate(static_cast<int32_t>(i), q[i]));
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  });
  Built b;
  b.top.assign(all.begin(), all.begin() + static_cast<ptrdiff_t>(std::min(k, all.size())));
  const float mx = all.front().logit;
  const float t = p.temperature > 0.0f ? p.temperature : 1.0f;
  for (size_t i = q.size(); i-- > 0;) {
    b.sum_exp += std::exp(static_cast<double>(q[i] - mx));
    b.sum_exp_temp += std::exp(static_cast<double>(q[i] - mx) / t);
  }
  return b;
}

std::vector<SamplerParams> parameter_grid() {
  std::vector<SamplerParams> grid;
  const auto make = test::sampler_params;
  grid.push_back(make(0.0f, 40, 0.95f, 0.05f));  // greedy (filters ignored)
  grid.push_back(make(0.8f, 40, 1.0f, 0.0f));    // top-k only
  grid.push_back(make(1.0f, 0, 0.9f, 0.0f));     // top-p over the whole vocabulary
  grid.push_back(make(0.7f, 0, 0.5f, 0.0f));
  grid.push_back(make(1.0f, 0, 1.0f, 0.05f));    // min-p only
  grid.push_back(make(1.3f, 0, 1.0f, 0.0f));     // pure temperature
  grid.push_back(make(0.8f, 40, 0.95f, 0.05f));  // the defaults
  grid.push_back(make(0.6f, 200, 0.8f, 0.02f));
  grid.push_back(make(1.0f, 5, 0.0f, 0.0f));     // top_p = 0: one token
  grid.push_back(make(0.9f, 0, 0.999f, 0.0f));
  std::vector<SamplerParams> with_penalties;
  for (SamplerParams p : grid) {
    p.repeat_penalty = 1.3f;
    p.frequency_penalty = 0.2f;
    p.presence_penalty = 0.4f;
    p.repeat_last_n = 32;
    with_penalties.push_back(p);
  }
  grid.insert(grid.end(), with_penalties.begin(), with_penalties.end());
  return grid;
}

struct Tally {
  int decided = 0;
  int undecided = 0;
};

// Draws `steps` tokens from the same row with a CPU sampler and a candidate sampler of the same
// seed; compares everything sample() exposes.
void compare(const Row& row, const SamplerParams& params, size_t k, int steps, Tally& tally, const std::string& what) {
  Sampler cpu(params), cand(params);
  const int64_t n_vocab = static_cast<int64_t>(row.logits.size());
  const Built built = build_candidates(row, params, k);
  for (int step = 0; step < steps; ++step) {
    const int32_t expected = cpu.sample(row.logits, row.history);
    const Sampler::CandidateView view{n_vocab, built.top, built.sum_exp, built.sum_exp_temp, kSumRelError};
    const std::optional<int32_t> got = cand.sample_from_candidates(view);
    if (!got) {
      ++tally.undecided;
      // The state is untouched: the fallback gives sample()'s token from here.
      ASSERT_EQ(cand.sample(row.logits, row.history), expected) << what << " step " << step << " (fallback)";
      continue;
    }
    ++tally.decided;
    ASSERT_EQ(*got, expected) << what << " step " << step;
    const auto& want = cpu.last_candidates();
    const auto& have = cand.last_candidates();
    ASSERT_FALSE(have.empty()) << what;
    ASSERT_LE(have.size(), want.size()) << what;
    if (have.size() < want.size()) {  // a whole-vocabulary draw reports the candidates it had
      ASSERT_EQ(have.size(), built.top.size()) << what;
    }
    for (size_t i = 0; i < have.size(); ++i) {
      ASSERT_EQ(have[i].id, want[i].id) << what << " candidate " << i;
      ASSERT_EQ(have[i].logit, want[i].logit) << what << " candidate " << i;
      ASSERT_NEAR(have[i].p, want[i].p, 1e-6) << what << " candidate " << i;
    }
  }
}

TEST(SamplerCandidates, MatchesSampleOverRandomRowsAndParameters) {
  std::mt19937_64 rng(20261122);
  Tally tally;
  const std::vector<SamplerParams> grid = parameter_grid();
  int cases = 0;
  for (const int64_t n_vocab : {7, 300, 4000}) {
    for (int kind = 0; kind < 4; ++kind) {
      for (int rep = 0; rep < 3; ++rep) {
        const Row row = random_row(rng, n_vocab, kind);
        for (size_t g = 0; g < grid.size(); ++g) {
          for (const size_t k : {size_t{1}, size_t{20}, size_t{64}, size_t{256}, static_cast<size_t>(n_vocab)}) {
            SamplerParams params = grid[g];
            params.seed = rng();
            const std::string what = "vocab " + std::to_string(n_vocab) + " kind " + std::to_string(kind) +
                                     " params " + std::to_string(g) + " k " + std::to_string(k);
            compare(row, params, k, 4, tally, what);
            if (HasFatalFailure()) return;
            ++cases;
          }
        }
      }
    }
  }
  // Both paths must have run many times, or the test proves nothing about one of them.
  EXPECT_GT(tally.decided, cases);
  EXPECT_GT(tally.undecided, cases / 10);
  std::printf("[ sampler ] %d cases, %d draws decided from candidates, %d fell back\n", cases, tally.decided,
              tally.undecided);
}

// Which configurations must decide from the candidates: the GPU path's speed depends on it.
TEST(SamplerCandidates, DecidesWhenTheCandidatesSuffice) {
  std::mt19937_64 rng(7);
  const Row row = random_row(rng, 5000, 0);
  auto decided = [&](SamplerParams p, size_t k) {
    Sampler s(p);
    const Built b = build_candidates(row, p, k);
    return s.sample_from_candidates({5000, b.top, b.sum_exp, b.sum_exp_temp, kSumRelError}).has_value();
  };
  SamplerParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(decided(p, 1));    // greedy without penalties: the chosen token alone, as sample()
  p.repeat_penalty = 1.1f;
  EXPECT_TRUE(decided(p, 20));   // greedy with penalties: its 20 reported candidates
  EXPECT_FALSE(decided(p, 19));
  p.repeat_penalty = 1.0f;
  p.temperature = 0.8f;
  p.top_k = 40;
  EXPECT_TRUE(decided(p, 40));   // top-k within the candidates: always
  EXPECT_FALSE(decided(p, 39));  // top-k beyond them: never
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  EXPECT_TRUE(decided(p, 5000));  // the whole vocabulary as candidates: always
  p.min_p = 0.5f;                 // a tight min-p cut lies inside 256 candidates of a N(0, 2.5) row
  EXPECT_TRUE(decided(p, 256));
  p.min_p = 1e-9f;                // a cut far below every candidate cannot be decided
  EXPECT_FALSE(decided(p, 256));
}

TEST(SamplerCandidates, UndecidedLeavesTheStateUntouched) {
  std::mt19937_64 rng(11);
  const Row row = random_row(rng, 4000, 0);
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 99;
  const Built b = build_candidates(row, p, 1);
  Sampler fresh(p), probed(p);
  int undecided = 0;
  for (int i = 0; i < 50; ++i) {
    if (!probed.sample_from_candidates({4000, b.top, b.sum_exp, b.sum_exp_temp, kSumRelError})) ++undecided;
  }
  ASSERT_GT(undecided, 0);
  // Whatever the probes decided, `probed` advanced exactly once per decided draw: replay that.
  Sampler replay(p);
  for (int i = 0; i < 50 - undecided; ++i) (void)replay.sample(row.logits, row.history);
  EXPECT_EQ(probed.sample(row.logits, row.history), replay.sample(row.logits, row.history));
  (void)fresh;
}

TEST(SamplerCandidates, ErrorsMatchSample) {
  SamplerParams p;
  std::vector<float> all_neg_inf(10, -std::numeric_limits<float>::infinity());
  Sampler a(p), b(p);
  std::string cpu_error, cand_error;
  try {
    (void)a.sample(all_neg_inf, {});
  } catch (const Error& e) {
    cpu_error = e.what();
  }
  const Built built = build_candidates({all_neg_inf, {}}, p, 10);
  try {
    (void)b.sample_from_candidates({10, built.top, built.sum_exp, built.sum_exp_temp, 0.0});
  } catch (const Error& e) {
    cand_error = e.what();
  }
  ASSERT_FALSE(cpu_error.empty());
  // The messages carry file:line; the reason after it must agree.
  EXPECT_NE(cand_error.find("every candidate logit is -inf"), std::string::npos) << cand_error;
  EXPECT_NE(cpu_error.find("every candidate logit is -inf"), std::string::npos) << cpu_error;
  std::vector<float> with_nan(10, 0.0f);
  with_nan[3] = std::nanf("");
  EXPECT_THROW((void)select_candidates(with_nan, {}, p, 4), Error);
  const std::vector<int32_t> bad_history = {3, 12};
  EXPECT_THROW((void)penalty_counts([] {
                 SamplerParams q;
                 q.repeat_penalty = 1.1f;
                 return q;
               }(), bad_history, 10),
               Error);
}

// The library's CPU reference of the GPU selection agrees with the independent builder here.
TEST(SamplerCandidates, SelectCandidatesMatchesIndependentBuilder) {
  std::mt19937_64 rng(3);
  for (const SamplerParams& params : parameter_grid()) {
    const Row row = random_row(rng, 3000, 1);
    const Built want = build_candidates(row, params, 100);
    const SamplingCandidates got = select_candidates(row.logits, row.history, params, 100);
    ASSERT_EQ(got.top.size(), want.top.size());
    for (size_t i = 0; i < want.top.size(); ++i) {
      ASSERT_EQ(got.top[i].id, want.top[i].id) << i;
      ASSERT_EQ(got.top[i].logit, want.top[i].logit) << i;
    }
    EXPECT_NEAR(got.sum_exp, want.sum_exp, 1e-12 * want.sum_exp);
    EXPECT_NEAR(got.sum_exp_temp, want.sum_exp_temp, 1e-12 * want.sum_exp_temp);
  }
}

}  // namespace
}  // namespace ga
