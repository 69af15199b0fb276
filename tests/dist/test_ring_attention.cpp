// Ring attention on CPU ranks of the loopback transport against a float64 attention of the whole sequence:
// forward (out, lse) and backward (dq, dk, dv), causal with zigzag sharding and full with contiguous
// sharding, lengths that do not divide by the rank count, GQA and MQA, 1/2/3/4/8 ranks, a sliding window
// (forward and backward) and soft-capped scores (forward; the backward refuses them). Bar: 1e-5 of the
// reference's largest magnitude (float32 sums over a few dozen keys).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "dist/loopback.h"
#include "dist/ring_attention.h"
#include "gpu_accel/error.h"

namespace {

using ga::dist::AttentionShape;

// The reference's mask and score: causal, the sliding window, the soft-cap (ring_attention.h's meaning).
bool hidden(const AttentionShape& s, int64_t t, int64_t j) {
  return (s.causal && j > t) || (s.window_left >= 0 && t - j > s.window_left);
}
double capped(const AttentionShape& s, double x) { return s.softcap > 0 ? s.softcap * std::tanh(x / s.softcap) : x; }

struct Reference {  // the whole sequence, float64
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const AttentionShape& s, int64_t n, const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& dout) {
  const int64_t H = s.n_head, G = s.n_head / s.n_head_kv, D = s.head_dim, Hk = s.n_head_kv;
  Reference r;
  r.out.assign(static_cast<size_t>(n * H * D), 0.0);
  r.lse.assign(static_cast<size_t>(H * n), -std::numeric_limits<double>::infinity());
  r.dq.assign(r.out.size(), 0.0);
  r.dk.assign(static_cast<size_t>(n * Hk * D), 0.0);
  r.dv.assign(r.dk.size(), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / G;
      std::vector<double> p(static_cast<size_t>(n), 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        if (hidden(s, t, j)) continue;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double{q[(t * H + h) * D + d]} * k[(j * Hk + g) * D + d];
        p[j] = capped(s, dot * s.scale);
        m = std::max(m, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (hidden(s, t, j)) continue;
        p[j] = std::exp(p[j] - m);
        sum += p[j];
      }
      r.lse[h * n + t] = m + std::log(sum);
      for (int64_t j = 0; j < n; ++j) p[j] /= sum;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < D; ++d) r.out[(t * H + h) * D + d] += p[j] * v[(j * Hk + g) * D + d];
      double delta = 0;
      for (int64_t d = 0; d < D; ++d) delta += r.out[(t * H + h) * D + d] * dout[(t * H + h) * D + d];
      for (int64_t j = 0; j < n; ++j) {
        if (hidden(s, t, j)) continue;
        double dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += double{dout[(t * H + h) * D + d]} * v[(j * Hk + g) * D + d];
        const double ds = p[j] * (dp - delta) * s.scale;
        for (int64_t d = 0; d < D; ++d) {
          r.dv[(j * Hk + g) * D + d] += p[j] * dout[(t * H + h) * D + d];
          r.dq[(t * H + h) * D + d] += ds * k[(j * Hk + g) * D + d];
          r.dk[(j * Hk + g) * D + d] += ds * q[(t * H + h) * D + d];
        }
      }
    }
  }
  return r;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (const double v : x)
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  return m;
}

// Rows of a [n][row] array at the given positions.
std::vector<float> gather(const std::vector<float>& x, int64_t row, const std::vector<int64_t>& pos) {
  std::vector<float> out;
  for (const int64_t p : pos) out.insert(out.end(), x.begin() + p * row, x.begin() + (p + 1) * row);
  return out;
}

struct Case {
  int64_t n, n_head, n_head_kv, head_dim;
  bool causal;
  int64_t window_left = -1;
  float softcap = 0.0f;
};

void run_case(const Case& c, int world) {
  SCOPED_TRACE(testing::Message() << "n " << c.n << " heads " << c.n_head << "/" << c.n_head_kv << " causal "
                                  << c.causal << " ranks " << world);
  AttentionShape s{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)), c.causal,
                   c.window_left, c.softcap};
  const bool backward = c.softcap == 0.0f;  // the backward refuses soft-capped scores
  std::mt19937 rng(static_cast<unsigned>(c.n * 31 + c.n_head_kv * 7 + world + (c.causal ? 1000 : 0)));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t qrow = c.n_head * c.head_dim, krow = c.n_head_kv * c.head_dim;
  std::vector<float> q(static_cast<size_t>(c.n * qrow)), k(static_cast<size_t>(c.n * krow)), v(k.size()),
      dout(q.size());
  for (auto* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = dist(rng);
  const Reference ref = reference(s, c.n, q, k, v, dout);

  std::vector<std::vector<int64_t>> pos(static_cast<size_t>(world));
  std::vector<ga::dist::AttentionForward> fwd(static_cast<size_t>(world));
  std::vector<ga::dist::AttentionGrads> grads(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    pos[r] = c.causal ? ga::dist::zigzag_positions(c.n, world, r) : ga::dist::contiguous_positions(c.n, world, r);
  }
  ga::dist::LoopbackGroup group(world, std::chrono::seconds(20));
  group.run([&](ga::dist::Transport& t) {
    const int r = t.rank();
    const std::vector<float> ql = gather(q, qrow, pos[r]), kl = gather(k, krow, pos[r]), vl = gather(v, krow, pos[r]),
                             dl = gather(dout, qrow, pos[r]);
    const ga::dist::AttentionShard shard{pos[r], ql, pos[r], kl, vl};
    fwd[r] = ga::dist::ring_attention_forward(t, s, shard);
    if (backward) {
      grads[r] = ga::dist::ring_attention_backward(t, s, shard, fwd[r].out, fwd[r].lse, dl);
    } else {
      EXPECT_THROW(ga::dist::ring_attention_backward(t, s, shard, fwd[r].out, fwd[r].lse, dl), ga::Error);
    }
  });
  const double tol_out = 1e-5 * max_abs(ref.out), tol_lse = 1e-5 * max_abs(ref.lse), tol_dq = 1e-5 * max_abs(ref.dq),
               tol_dk = 1e-5 * max_abs(ref.dk), tol_dv = 1e-5 * max_abs(ref.dv);
  size_t checked = 0;
  for (int r = 0; r < world; ++r) {
    const int64_t nl = static_cast<int64_t>(pos[r].size());
    for (int64_t i = 0; i < nl; ++i) {
      const int64_t p = pos[r][i];
      for (int64_t e = 0; e < qrow; ++e) {
        ASSERT_NEAR(fwd[r].out[i * qrow + e], ref.out[p * qrow + e], tol_out) << "out, position " << p;
        if (backward) {
          ASSERT_NEAR(grads[r].dq[i * qrow + e], ref.dq[p * qrow + e], tol_dq) << "dq, position " << p;
        }
      }
      for (int64_t h = 0; h < c.n_head; ++h) {
        ASSERT_NEAR(fwd[r].lse[h * nl + i], ref.lse[h * c.n + p], tol_lse) << "lse, position " << p;
      }
      for (int64_t e = 0; e < krow && backward; ++e) {
        ASSERT_NEAR(grads[r].dk[i * krow + e], ref.dk[p * krow + e], tol_dk) << "dk, position " << p;
        ASSERT_NEAR(grads[r].dv[i * krow + e], ref.dv[p * krow + e], tol_dv) << "dv, position " << p;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<size_t>(c.n));
}

TEST(RingAttention, MatchesTheWholeSequenceOnEveryRankCount) {
  const Case cases[] = {
      {37, 4, 2, 16, true},   // GQA, causal, 37 positions over 2W chunks: uneven
      {37, 4, 2, 16, false},  // full
      {29, 4, 1, 8, true},    // MQA
      {64, 2, 2, 32, true},   // MHA, even
      {37, 4, 2, 16, true, 5},        // a sliding window of 5 positions back
      {37, 4, 2, 16, true, 7, 1.5f},  // and soft-capped scores (Gemma 2), forward only
  };
  for (const Case& c : cases) {
    for (const int world : {1, 2, 3, 4, 8}) run_case(c, world);
  }
}

TEST(RingAttention, ZigzagShardsCoverEveryPositionOnce) {
  for (const int world : {1, 2, 3, 8}) {
    for (const int64_t n : {0, 1, 15, 16, 17, 1000}) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int r = 0; r < world; ++r) {
        for (const int64_t p : ga::dist::zigzag_positions(n, world, r)) ++seen[static_cast<size_t>(p)];
      }
      for (int64_t p = 0; p < n; ++p) ASSERT_EQ(seen[static_cast<size_t>(p)], 1) << "position " << p;
    }
  }
  // rank 0 holds the first and the last chunk: the lightest and the heaviest causal rows
  const std::vector<int64_t> r0 = ga::dist::zigzag_positions(16, 2, 0);
  EXPECT_EQ(r0, (std::vector<int64_t>{0, 1, 2, 3, 12, 13, 14, 15}));
}

TEST(RingAttention, RejectsMismatchedShards) {
  ga::dist::LoopbackGroup group(1);
  const AttentionShape s{4, 3, 8, 1.0f, false};  // 4 heads over 3 KV heads
  const std::vector<int64_t> pos{0};
  const std::vector<float> q(32), kv(24);
  EXPECT_THROW(ga::dist::ring_attention_forward(group.transport(0), s, {pos, q, pos, kv, kv}), ga::Error);
}

}  // namespace

namespace {

// Pass-Q: the last few positions' queries (decode: one) on every rank over the K/V of all positions sharded
// over the ranks, against the float64 attention of the whole sequence.
TEST(ShardedKvAttention, DecodeAndShortQueriesMatchTheWholeSequence) {
  for (const bool zigzag : {false, true}) {
    for (const int64_t n_query : {int64_t{1}, int64_t{5}}) {
      for (const int world : {1, 2, 3, 4, 8}) {
        SCOPED_TRACE(testing::Message() << "queries " << n_query << " ranks " << world << " zigzag " << zigzag);
        const int64_t n = 45, H = 4, Hk = 2, D = 16;
        // several queries: with a sliding window and a soft-cap (Gemma's local layers)
        const AttentionShape s = n_query == 1 ? AttentionShape{H, Hk, D, 0.25f, true}
                                              : AttentionShape{H, Hk, D, 0.25f, true, 9, 1.5f};
        std::mt19937 rng(static_cast<unsigned>(world * 13 + n_query));
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> q(static_cast<size_t>(n * H * D)), k(static_cast<size_t>(n * Hk * D)), v(k.size()),
            dout(q.size(), 0.0f);
        for (auto* x : {&q, &k, &v})
          for (float& e : *x) e = dist(rng);
        const Reference ref = reference(s, n, q, k, v, dout);
        std::vector<int64_t> q_pos;
        for (int64_t p = n - n_query; p < n; ++p) q_pos.push_back(p);
        const std::vector<float> ql = gather(q, H * D, q_pos);
        std::vector<ga::dist::AttentionForward> got(static_cast<size_t>(world));
        ga::dist::LoopbackGroup group(world);
        group.run([&](ga::dist::Transport& t) {
          const std::vector<int64_t> kv_pos = zigzag ? ga::dist::zigzag_positions(n, world, t.rank())
                                                     : ga::dist::contiguous_positions(n, world, t.rank());
          const std::vector<float> kl = gather(k, Hk * D, kv_pos), vl = gather(v, Hk * D, kv_pos);
          got[static_cast<size_t>(t.rank())] = ga::dist::sharded_kv_attention(t, s, {q_pos, ql, kv_pos, kl, vl});
        });
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(got[r].out, got[0].out) << "rank " << r << " differs from rank 0";
          for (int64_t i = 0; i < n_query; ++i) {
            for (int64_t e = 0; e < H * D; ++e) {
              ASSERT_NEAR(got[r].out[i * H * D + e], ref.out[q_pos[i] * H * D + e], 1e-5 * max_abs(ref.out));
            }
            for (int64_t h = 0; h < H; ++h) {
              ASSERT_NEAR(got[r].lse[h * n_query + i], ref.lse[h * n + q_pos[i]], 1e-5 * max_abs(ref.lse));
            }
          }
        }
      }
    }
  }
}

}  // namespace
