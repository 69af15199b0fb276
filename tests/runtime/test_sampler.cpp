// Sampler tests on hand-made logits whose probabilities are known exactly (logits = log p), so each
// filter's kept set follows from the definitions by hand, and the draw is checked statistically
// against a softmax computed here independently.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "gpu_accel/error.h"
#include "gpu_accel/sampler.h"

namespace ga {
namespace {

// Filters off, temperature 1: the draw uses the plain softmax.
SamplerParams plain(float temperature = 1.0f) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  return p;
}

// Probabilities 0.05, 0.5, 0.1, 0.2, 0.15 spread over ids so that sorting matters.
std::vector<float> known_logits() {
  return {std::log(0.05f), std::log(0.5f), std::log(0.1f), std::log(0.2f), std::log(0.15f)};
}

std::set<int32_t> kept_ids(const Sampler& s) {
  std::set<int32_t> ids;
  for (const auto& c : s.last_candidates()) ids.insert(c.id);
  return ids;
}

std::set<int32_t> kept_after_one_draw(const SamplerParams& params, const std::vector<float>& logits) {
  Sampler s(params);
  const int32_t id = s.sample(logits, {});
  const std::set<int32_t> kept = kept_ids(s);
  EXPECT_TRUE(kept.count(id)) << "drawn token " << id << " is not among the kept candidates";
  return kept;
}

TEST(Sampler, GreedyTakesTheLowestIdOnTies) {
  const std::vector<float> logits = {1.0f, 5.0f, 5.0f, 2.0f, 5.0f};
  EXPECT_EQ(argmax(logits), 1);
  Sampler s(plain(0.0f));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(logits, {}), 1);
  Sampler negative(plain(-1.0f));
  EXPECT_EQ(negative.sample(logits, {}), 1);
  ASSERT_FALSE(s.last_candidates().empty());
  EXPECT_EQ(s.last_candidates().front().id, 1);
}

TEST(Sampler, GreedyIgnoresFilters) {
  SamplerParams p = plain(0.0f);
  p.top_k = 1;
  p.top_p = 0.01f;
  p.min_p = 0.9f;
  Sampler s(p);
  EXPECT_EQ(s.sample(known_logits(), {}), 1);
}

TEST(Sampler, TopKKeepsTheKHighest) {
  SamplerParams p = plain();
  p.top_k = 3;
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1, 3, 4}));
  p.top_k = 1;
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1}));
  p.top_k = 100;  // larger than the vocabulary: off
  EXPECT_EQ(kept_after_one_draw(p, known_logits()).size(), 5u);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  SamplerParams p = plain();
  // sorted probabilities 0.5, 0.2, 0.15, 0.1, 0.05; cumulative 0.5, 0.7, 0.85, 0.95, 1.0
  p.top_p = 0.45f;
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1}));
  p.top_p = 0.75f;
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1, 3, 4}));
  p.top_p = 0.9f;
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1, 2, 3, 4}));
  p.top_p = 0.0f;  // at least one token survives
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1}));
}

TEST(Sampler, MinPKeepsTokensAboveAFractionOfTheBest) {
  SamplerParams p = plain();
  p.min_p = 0.25f;  // threshold 0.125: 0.5, 0.2, 0.15
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1, 3, 4}));
  p.min_p = 0.35f;  // threshold 0.175: 0.5, 0.2
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1, 3}));
  p.min_p = 1.0f;
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1}));
}

TEST(Sampler, FiltersChainInOrder) {
  SamplerParams p = plain();
  p.top_k = 4;     // drops 0.05
  p.top_p = 0.9f;  // of the renormalized top-4 (0.526, 0.211, 0.158, 0.105): cumulative 0.526, 0.737, 0.895, 1.0
  p.min_p = 0.0f;
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1, 2, 3, 4}));
  p.top_p = 0.85f;
  EXPECT_EQ(kept_after_one_draw(p, known_logits()), (std::set<int32_t>{1, 3, 4}));
}

TEST(Sampler, CandidatesAreSortedAndNormalized) {
  SamplerParams p = plain();
  p.top_k = 3;
  Sampler s(p);
  s.sample(known_logits(), {});
  const auto& c = s.last_candidates();
  ASSERT_EQ(c.size(), 3u);
  double sum = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    sum += c[i].p;
    if (i > 0) {
      EXPECT_GE(c[i - 1].p, c[i].p);
    }
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  // renormalized over 0.5 + 0.2 + 0.15 = 0.85
  EXPECT_NEAR(c[0].p, 0.5 / 0.85, 1e-6);
  EXPECT_NEAR(c[1].p, 0.2 / 0.85, 1e-6);
}

TEST(Sampler, PenaltiesFollowLlamaCppArithmetic) {
  const std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
  const std::vector<int32_t> history = {4, 0, 1, 1, 3};  // token 4 falls outside the window of 4
  SamplerParams p = plain();
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 4;
  p.frequency_penalty = 0.1f;
  p.presence_penalty = 0.3f;
  Sampler s(p);
  s.sample(logits, history);
  std::vector<float> got(logits.size(), NAN);
  for (const auto& c : s.last_candidates()) got[static_cast<size_t>(c.id)] = c.logit;
  EXPECT_FLOAT_EQ(got[0], 2.0f / 2.0f - 1 * 0.1f - 0.3f);
  EXPECT_FLOAT_EQ(got[1], -2.0f * 2.0f - 2 * 0.1f - 0.3f);
  EXPECT_FLOAT_EQ(got[2], 1.0f);
  EXPECT_FLOAT_EQ(got[3], 0.5f / 2.0f - 1 * 0.1f - 0.3f);
  EXPECT_FLOAT_EQ(got[4], 3.0f);

  p.repeat_last_n = -1;  // the whole history: token 4 is penalized too
  Sampler all(p);
  all.sample(logits, history);
  for (const auto& c : all.last_candidates()) {
    if (c.id == 4) {
      EXPECT_FLOAT_EQ(c.logit, 3.0f / 2.0f - 0.1f - 0.3f);
    }
  }

  p.repeat_last_n = 0;  // no window: nothing changes
  Sampler none(p);
  none.sample(logits, history);
  for (const auto& c : none.last_candidates()) EXPECT_FLOAT_EQ(c.logit, logits[static_cast<size_t>(c.id)]);
}

TEST(Sampler, GreedyWithoutPenaltiesIsTheArgmax) {
  // A vocabulary-sized row with repeated maxima: the fast greedy path must pick what argmax() picks
  // (the lowest id among the largest), with and without a history.
  std::vector<float> logits(50000);
  uint64_t state = 12345;
  for (float& l : logits) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    l = static_cast<float>(state >> 40) / static_cast<float>(1 << 20);  // coarse: many ties
  }
  const int32_t expected = ga::argmax(logits);
  Sampler s(plain(0.0f));
  EXPECT_EQ(s.sample(logits, {}), expected);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{expected, 3, 7}), expected);
  ASSERT_EQ(s.last_candidates().size(), 1u);
  EXPECT_EQ(s.last_candidates().front().id, expected);
  logits[777] = NAN;
  EXPECT_THROW(s.sample(logits, {}), ga::Error);
}

TEST(Sampler, PenaltiesApplyBeforeGreedy) {
  const std::vector<float> logits = {2.0f, 1.5f};
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 2.0f;  // token 0 drops to 1.0
  Sampler s(p);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{0}), 1);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{}), 0);
}

std::vector<int32_t> draws(uint64_t seed, int n) {
  SamplerParams p = plain();
  p.seed = seed;
  Sampler s(p);
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(0.7 * i));
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits, {}));
  return out;
}

TEST(Sampler, SameSeedSameSequenceOtherSeedDiffers) {
  const auto a = draws(42, 500);
  EXPECT_EQ(a, draws(42, 500));
  EXPECT_NE(a, draws(43, 500));
  EXPECT_NE(a, draws(0, 500));
  // reseed() restarts the sequence
  SamplerParams p = plain();
  p.seed = 42;
  Sampler s(p);
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(0.7 * i));
  for (int i = 0; i < 10; ++i) s.sample(logits, {});
  s.reseed(42);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(s.sample(logits, {}), a[static_cast<size_t>(i)]) << i;
}

// Frequencies of n draws must match the expected probabilities: each within 5 standard deviations,
// and Pearson's chi-square below the 99.9% quantile for its degrees of freedom.
void expect_distribution(Sampler& s, const std::vector<float>& logits, const std::vector<double>& expected) {
  constexpr int kDraws = 100000;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) counts[static_cast<size_t>(s.sample(logits, {}))]++;
  double chi2 = 0;
  int dof = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = expected[i];
    if (p == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " was filtered out but drawn";
      continue;
    }
    const double freq = static_cast<double>(counts[i]) / kDraws;
    EXPECT_NEAR(freq, p, 5 * std::sqrt(p * (1 - p) / kDraws)) << "token " << i;
    chi2 += (counts[i] - kDraws * p) * (counts[i] - kDraws * p) / (kDraws * p);
    ++dof;
  }
  // chi-square 99.9% quantiles for 1..6 degrees of freedom
  const double quantile[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46};
  ASSERT_LE(dof, 6);
  EXPECT_LT(chi2, quantile[dof]) << "chi-square with " << dof << " degrees of freedom";
}

TEST(Sampler, DrawsMatchTheSoftmaxWithTemperature) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f, 0.5f, 1.5f};
  const double temperature = 0.7;
  std::vector<double> expected(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += expected[i] = std::exp(logits[i] / temperature);
  for (auto& e : expected) e /= sum;
  Sampler s(plain(static_cast<float>(temperature)));
  expect_distribution(s, logits, expected);
}

TEST(Sampler, DrawsRenormalizeAfterTopK) {
  const std::vector<float> logits = known_logits();
  SamplerParams p = plain();
  p.top_k = 3;
  p.seed = 99;
  Sampler s(p);
  expect_distribution(s, logits, {0.0, 0.5 / 0.85, 0.0, 0.2 / 0.85, 0.15 / 0.85});
}

TEST(Sampler, RejectsBadInput) {
  SamplerParams p = plain();
  p.top_p = 2.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = plain();
  p.min_p = -0.5f;
  EXPECT_THROW(Sampler{p}, Error);
  p = plain();
  p.repeat_penalty = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  Sampler s(plain());
  EXPECT_THROW(s.sample(std::vector<float>{}, {}), Error);
  EXPECT_THROW(s.sample(std::vector<float>{1.0f, NAN}, {}), Error);
  const float neg_inf = -INFINITY;
  EXPECT_THROW(s.sample(std::vector<float>{neg_inf, neg_inf}, {}), Error);
  SamplerParams penal = plain();
  penal.repeat_penalty = 1.1f;
  Sampler with_penalty(penal);
  EXPECT_THROW(with_penalty.sample(std::vector<float>{1.0f, 2.0f}, std::vector<int32_t>{7}), Error);
}

TEST(Sampler, MaskedTokensAreNeverDrawn) {
  const float neg_inf = -INFINITY;
  const std::vector<float> logits = {neg_inf, 0.0f, neg_inf, 0.0f};
  Sampler s(plain());
  for (int i = 0; i < 1000; ++i) {
    const int32_t id = s.sample(logits, {});
    ASSERT_TRUE(id == 1 || id == 3) << id;
  }
}

}  // namespace
}  // namespace ga
