// The CPU MoE feed-forward (backends/cpu/moe.h) against a float64 naive implementation written here from
// the semantics alone: softmax in double, the top-k by double p (ties by index), the experts' FFN on the
// dequantized weights in double, one token at a time, no grouping.
//
// Routing: random logits with many exact ties (values on a grid of 1/4) and -inf entries, k 1..8, E 4..256,
// normalize on and off, awkward token counts; ids must be identical, weights within 1e-6. The FFN: several
// weight types (dense and quantized, random stored bytes), k 1/2/4/8, E up to 128, experts that receive
// no token, every token on one expert, unused slots (id -1), SiLU and GELU-tanh, overwrite and accumulate,
// 1..4 threads; per token relative L2 error <= 2e-5 (float32 accumulation over a few hundred terms).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/moe.h"
#include "backends/cpu/quant.h"
#include "common/quant_weights.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

// ---- naive float64 reference ----

void naive_route(const float* logits, int n_expert, int k, bool normalize, int32_t* ids, double* weights) {
  double max_l = -INFINITY;
  for (int e = 0; e < n_expert; ++e) max_l = std::max(max_l, static_cast<double>(logits[e]));
  std::vector<double> prob(static_cast<size_t>(n_expert));
  double sum = 0.0;
  for (int e = 0; e < n_expert; ++e) sum += prob[static_cast<size_t>(e)] = std::exp(logits[e] - max_l);
  for (auto& v : prob) v /= sum;
  std::vector<int> order(static_cast<size_t>(n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return prob[static_cast<size_t>(a)] > prob[static_cast<size_t>(b)]; });
  double selected = 0.0;
  for (int j = 0; j < k; ++j) selected += prob[static_cast<size_t>(order[static_cast<size_t>(j)])];
  for (int j = 0; j < k; ++j) {
    ids[j] = order[static_cast<size_t>(j)];
    weights[j] = prob[static_cast<size_t>(ids[j])] / (normalize ? selected : 1.0);
  }
}

double naive_act(MoeActivation act, double g) {
  if (act == MoeActivation::kSilu) return g / (1.0 + std::exp(-g));
  return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}

// One expert's three matrices, dequantized.
struct DenseExpert {
  std::vector<float> gate, up, down;  // [n_ff][n_embd], [n_ff][n_embd], [n_embd][n_ff]
};

std::vector<float> dequantize_matrix(const ExpertStack& s, int64_t e) {
  std::vector<float> out(static_cast<size_t>(s.rows * s.cols));
  const MatrixRef m = s.expert(e);
  for (int64_t r = 0; r < s.rows; ++r) {
    dequantize_row(m.type, m.data + static_cast<uint64_t>(r) * m.row_stride, out.data() + r * s.cols, s.cols);
  }
  return out;
}

// out[t] = sum_j w_j down(act(gate x) * up x) in double, one token at a time.
std::vector<double> naive_ffn(const MoeRoutedFfnParams& p, const std::vector<double>& weights) {
  const int64_t n_embd = p.gate.cols, n_ff = p.gate.rows;
  std::vector<DenseExpert> experts(static_cast<size_t>(p.n_expert));
  std::vector<double> out(static_cast<size_t>(p.n_tokens * n_embd), 0.0);
  std::vector<double> h(static_cast<size_t>(n_ff));
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float* x = p.x + t * p.ldx;
    for (int j = 0; j < p.top_k; ++j) {
      const int32_t e = p.ids[t * p.top_k + j];
      if (e < 0 || e >= p.n_expert) continue;
      DenseExpert& d = experts[static_cast<size_t>(e)];
      if (d.gate.empty()) {
        d.gate = dequantize_matrix(p.gate, e);
        d.up = dequantize_matrix(p.up, e);
        d.down = dequantize_matrix(p.down, e);
      }
      for (int64_t r = 0; r < n_ff; ++r) {
        double g = 0.0, u = 0.0;
        for (int64_t c = 0; c < n_embd; ++c) {
          g += static_cast<double>(d.gate[static_cast<size_t>(r * n_embd + c)]) * x[c];
          u += static_cast<double>(d.up[static_cast<size_t>(r * n_embd + c)]) * x[c];
        }
        h[static_cast<size_t>(r)] = naive_act(p.activation, g) * u;
      }
      const double w = weights[static_cast<size_t>(t * p.top_k + j)];
      for (int64_t c = 0; c < n_embd; ++c) {
        double y = 0.0;
        for (int64_t r = 0; r < n_ff; ++r) y += static_cast<double>(d.down[static_cast<size_t>(c * n_ff + r)]) * h[r];
        out[static_cast<size_t>(t * n_embd + c)] += w * y;
      }
    }
  }
  return out;
}

// Logits on a grid of 1/4 in [-4, 4] (many exact ties), with an occasional -inf (a masked expert).
std::vector<float> tied_logits(int64_t n_tokens, int n_expert, int64_t ld, std::mt19937& rng, bool with_inf) {
  std::vector<float> l(static_cast<size_t>(n_tokens * ld), NAN);
  std::uniform_int_distribution<int> grid(-16, 16);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int e = 0; e < n_expert; ++e) {
      float v = static_cast<float>(grid(rng)) / 4.0f;
      if (with_inf && rng() % 11 == 0) v = -INFINITY;
      l[static_cast<size_t>(t * ld + e)] = v;
    }
    if (with_inf) l[static_cast<size_t>(t * ld)] = 1.0f;  // at least one finite logit
  }
  return l;
}

TEST(MoeRoute, MatchesFloat64ReferenceWithTies) {
  std::mt19937 rng(7);
  int cases = 0;
  for (int n_expert : {4, 8, 60, 64, 128, 256}) {
    for (int k : {1, 2, 4, 8}) {
      if (k > n_expert) continue;
      for (int64_t n_tokens : {1, 7, 19, 37}) {
        for (bool normalize : {false, true}) {
          for (bool with_inf : {false, true}) {
            const int64_t ld = n_expert + 3;
            const std::vector<float> logits = tied_logits(n_tokens, n_expert, ld, rng, with_inf);
            std::vector<int32_t> ids(static_cast<size_t>(n_tokens * k), -7);
            std::vector<float> w(ids.size(), NAN);
            MoeRouteParams p;
            p.logits = logits.data();
            p.ld = ld;
            p.n_tokens = n_tokens;
            p.n_expert = n_expert;
            p.top_k = k;
            p.normalize_top_k = normalize;
            p.ids = ids.data();
            p.weights = w.data();
            moe_route(p);
            std::vector<int32_t> want_ids(static_cast<size_t>(k));
            std::vector<double> want_w(static_cast<size_t>(k));
            for (int64_t t = 0; t < n_tokens; ++t) {
              naive_route(logits.data() + t * ld, n_expert, k, normalize, want_ids.data(), want_w.data());
              for (int j = 0; j < k; ++j) {
                const size_t at = static_cast<size_t>(t * k + j);
                ASSERT_EQ(ids[at], want_ids[static_cast<size_t>(j)])
                    << "E " << n_expert << " k " << k << " token " << t << " slot " << j;
                ASSERT_NEAR(w[at], want_w[static_cast<size_t>(j)], 1e-6)
                    << "E " << n_expert << " k " << k << " token " << t << " slot " << j;
              }
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 300);
}

TEST(MoeRoute, OrderKeyIsTheFloatOrder) {
  const float values[] = {-INFINITY, -3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 2.0f, INFINITY};
  for (size_t i = 0; i + 1 < std::size(values); ++i) {
    if (values[i] == values[i + 1]) {
      EXPECT_EQ(moe_order_key(values[i]), moe_order_key(values[i + 1])) << values[i];
    } else {
      EXPECT_LT(moe_order_key(values[i]), moe_order_key(values[i + 1])) << values[i];
    }
  }
  EXPECT_GT(moe_order_key(NAN), moe_order_key(INFINITY));
}

TEST(MoeRoute, RejectsBadShapes) {
  float l[4] = {0, 0, 0, 0};
  int32_t ids[8];
  float w[8];
  MoeRouteParams p;
  p.logits = l;
  p.ld = 4;
  p.n_tokens = 1;
  p.n_expert = 4;
  p.top_k = 5;
  p.ids = ids;
  p.weights = w;
  EXPECT_THROW(moe_route(p), Error);
  p.top_k = 2;
  p.ids = nullptr;
  EXPECT_THROW(moe_route(p), Error);
}

// ---- the FFN ----

struct FfnCase {
  DType type;
  int n_expert;
  int k;
  int64_t n_embd;
  int64_t n_ff;
  int64_t n_tokens;
  MoeActivation act = MoeActivation::kSilu;
  bool accumulate = false;
  enum Ids { kRouted, kOneExpert, kSomeUnused } ids = kRouted;
};

std::string name_of(const FfnCase& c) {
  return str(dtype_name(c.type), " E", c.n_expert, " k", c.k, " ", c.n_embd, "x", c.n_ff, " n", c.n_tokens,
             c.act == MoeActivation::kSilu ? " silu" : " gelu", c.accumulate ? " +=" : "",
             c.ids == FfnCase::kOneExpert ? " one expert" : (c.ids == FfnCase::kSomeUnused ? " unused slots" : ""));
}

ExpertStack stack_of(DType type, int n_expert, int64_t rows, int64_t cols, const std::vector<uint8_t>& data) {
  ExpertStack s;
  s.type = type;
  s.data = data.data();
  s.rows = rows;
  s.cols = cols;
  s.row_stride = row_bytes(type, static_cast<uint64_t>(cols));
  s.expert_stride = s.row_stride * static_cast<uint64_t>(rows);
  (void)n_expert;
  return s;
}

void run_ffn_case(const FfnCase& c, ThreadPool* pool, std::mt19937& rng) {
  const std::string name = name_of(c);
  const uint64_t gate_row = row_bytes(c.type, static_cast<uint64_t>(c.n_embd));
  const uint64_t down_row = row_bytes(c.type, static_cast<uint64_t>(c.n_ff));
  const auto gate = test::random_weight_rows(c.type, c.n_expert * c.n_ff, c.n_embd, gate_row, rng);
  const auto up = test::random_weight_rows(c.type, c.n_expert * c.n_ff, c.n_embd, gate_row, rng);
  const auto down = test::random_weight_rows(c.type, c.n_expert * c.n_embd, c.n_ff, down_row, rng);
  const int64_t ldx = c.n_embd + 5, ld_out = c.n_embd + 2;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(c.n_tokens * ldx));
  for (auto& v : x) v = normal(rng);

  // routing: the CPU router on random logits, or forced ids
  std::vector<float> logits(static_cast<size_t>(c.n_tokens * c.n_expert));
  for (auto& v : logits) v = normal(rng);
  std::vector<int32_t> ids(static_cast<size_t>(c.n_tokens * c.k));
  std::vector<float> w(ids.size());
  MoeRouteParams r;
  r.logits = logits.data();
  r.ld = c.n_expert;
  r.n_tokens = c.n_tokens;
  r.n_expert = c.n_expert;
  r.top_k = c.k;
  r.normalize_top_k = true;
  r.ids = ids.data();
  r.weights = w.data();
  moe_route(r);
  if (c.ids == FfnCase::kOneExpert) {
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      for (int j = 0; j < c.k; ++j) ids[static_cast<size_t>(t * c.k + j)] = (c.n_expert / 2 + j) % c.n_expert;
    }
  } else if (c.ids == FfnCase::kSomeUnused) {
    for (size_t i = 0; i < ids.size(); i += 3) ids[i] = i % 2 ? c.n_expert : -1;
  }
  std::vector<double> w_ref(w.begin(), w.end());

  MoeRoutedFfnParams p;
  p.gate = stack_of(c.type, c.n_expert, c.n_ff, c.n_embd, gate);
  p.up = stack_of(c.type, c.n_expert, c.n_ff, c.n_embd, up);
  p.down = stack_of(c.type, c.n_expert, c.n_embd, c.n_ff, down);
  p.n_expert = c.n_expert;
  p.n_tokens = c.n_tokens;
  p.top_k = c.k;
  p.ids = ids.data();
  p.weights = w.data();
  p.x = x.data();
  p.ldx = ldx;
  p.activation = c.act;
  p.accumulate = c.accumulate;
  std::vector<float> out(static_cast<size_t>(c.n_tokens * ld_out), c.accumulate ? 0.5f : NAN);
  p.out = out.data();
  p.ld_out = ld_out;
  MoeScratch scratch;
  moe_routed_ffn(p, scratch, pool);

  const std::vector<double> ref = naive_ffn(p, w_ref);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    double err = 0.0, norm = 0.0;
    for (int64_t i = 0; i < c.n_embd; ++i) {
      const double want = ref[static_cast<size_t>(t * c.n_embd + i)] + (c.accumulate ? 0.5 : 0.0);
      const double got = out[static_cast<size_t>(t * ld_out + i)];
      ASSERT_FALSE(std::isnan(got)) << name << " token " << t << " [" << i << "] not written";
      err += (got - want) * (got - want);
      norm += want * want;
    }
    if (norm == 0.0) {  // every slot unused: exactly the initial value
      EXPECT_EQ(err, 0.0) << name << " token " << t;
      continue;
    }
    EXPECT_LE(std::sqrt(err / norm), 2e-5) << name << " token " << t;
    for (int64_t i = c.n_embd; i < ld_out; ++i) {
      const float pad = out[static_cast<size_t>(t * ld_out + i)];
      EXPECT_TRUE(c.accumulate ? pad == 0.5f : std::isnan(pad)) << name << ": padding written";
    }
  }
}

TEST(MoeFfn, MatchesFloat64ReferenceForWeightTypesAndShapes) {
  std::mt19937 rng(2024);
  ThreadPool pool2(2), pool4(4);
  // K-quant rows are whole super-blocks (256): gate/up rows of n_embd, down rows of n_ff
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K,
                     DType::Q5_K}) {
    const bool k_quant = traits(type).block_size == 256;
    const int64_t n_embd = k_quant ? 256 : 96, n_ff = k_quant ? 256 : 64;
    for (int64_t n_tokens : {1, 7, 19, 37}) {
      run_ffn_case({type, 8, 2, n_embd, n_ff, n_tokens}, n_tokens % 2 ? &pool2 : &pool4, rng);
    }
    run_ffn_case({type, 4, 1, n_embd, n_ff, 7, MoeActivation::kGeluTanh}, nullptr, rng);
    run_ffn_case({type, 16, 4, n_embd, n_ff, 19, MoeActivation::kSilu, true}, &pool4, rng);
  }
  // many experts, most of which receive no token; k 8
  for (DType type : {DType::F16, DType::Q8_0}) {
    run_ffn_case({type, 128, 8, 64, 32, 1}, &pool2, rng);
    run_ffn_case({type, 128, 8, 64, 32, 37}, &pool4, rng);
    run_ffn_case({type, 60, 4, 64, 32, 19}, nullptr, rng);
  }
  // every token on the same experts; unused slots
  run_ffn_case({DType::Q4_K, 8, 2, 256, 256, 37, MoeActivation::kSilu, false, FfnCase::kOneExpert}, &pool2, rng);
  run_ffn_case({DType::F16, 8, 8, 96, 64, 19, MoeActivation::kSilu, false, FfnCase::kOneExpert}, &pool2, rng);
  run_ffn_case({DType::Q8_0, 8, 2, 96, 64, 19, MoeActivation::kGeluTanh, true, FfnCase::kSomeUnused}, &pool2, rng);
  run_ffn_case({DType::F32, 4, 1, 32, 32, 7, MoeActivation::kSilu, true, FfnCase::kSomeUnused}, nullptr, rng);
}

TEST(MoeCombine, SumsSlotsInOrderAndSkipsUnused) {
  // 1 token, 3 slots; y rows picked through y_rows
  const int32_t ids[3] = {2, -1, 0};
  const float w[3] = {0.25f, 100.0f, 0.75f};
  const float y[3][2] = {{9.0f, 9.0f}, {1.0f, 2.0f}, {4.0f, 8.0f}};
  const int32_t rows[3] = {2, 0, 1};
  float out[2] = {1.0f, 1.0f};
  MoeCombineParams p;
  p.n_tokens = 1;
  p.top_k = 3;
  p.n_expert = 3;
  p.ids = ids;
  p.weights = w;
  p.y = &y[0][0];
  p.ldy = 2;
  p.y_rows = rows;
  p.n = 2;
  p.out = out;
  p.ld_out = 2;
  p.accumulate = true;
  moe_combine(p);
  EXPECT_EQ(out[0], 1.0f + (0.25f * 4.0f + 0.75f * 1.0f));
  EXPECT_EQ(out[1], 1.0f + (0.25f * 8.0f + 0.75f * 2.0f));
}

TEST(MoeFfn, RejectsMismatchedStacks) {
  std::vector<uint8_t> bytes(4096);
  MoeRoutedFfnParams p;
  p.gate = {DType::F32, bytes.data(), 4, 8, 32, 128};
  p.up = p.gate;
  p.down = {DType::F32, bytes.data(), 8, 5, 20, 160};  // cols 5 != n_ff 4
  p.n_expert = 2;
  p.n_tokens = 1;
  p.top_k = 1;
  int32_t ids[1] = {0};
  float w[1] = {1.0f}, x[8] = {}, out[8] = {};
  p.ids = ids;
  p.weights = w;
  p.x = x;
  p.ldx = 8;
  p.out = out;
  p.ld_out = 8;
  MoeScratch scratch;
  EXPECT_THROW(moe_routed_ffn(p, scratch, nullptr), Error);
}

// The engine's block (router matmul + routing + FFN) equals its parts.
TEST(MoeFfn, BlockIsRouterRouteAndRoutedFfn) {
  std::mt19937 rng(3);
  const int64_t n_embd = 64, n_ff = 32, n_expert = 8, k = 2, n_tokens = 5;
  const auto router = test::random_weight_rows(DType::F32, n_expert, n_embd, n_embd * 4, rng);
  const auto gate = test::random_weight_rows(DType::Q8_0, n_expert * n_ff, n_embd, row_bytes(DType::Q8_0, n_embd), rng);
  const auto up = test::random_weight_rows(DType::Q8_0, n_expert * n_ff, n_embd, row_bytes(DType::Q8_0, n_embd), rng);
  const auto down = test::random_weight_rows(DType::Q8_0, n_expert * n_embd, n_ff, row_bytes(DType::Q8_0, n_ff), rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_tokens * n_embd));
  for (auto& v : x) v = normal(rng);
  MoeFfnParams p;
  p.n_tokens = n_tokens;
  p.x = x.data();
  p.ldx = n_embd;
  std::vector<float> out(static_cast<size_t>(n_tokens * n_embd), NAN), want(out.size(), NAN);
  p.out = out.data();
  p.ld_out = n_embd;
  p.router = {DType::F32, router.data(), n_expert, n_embd, static_cast<uint64_t>(n_embd * 4)};
  p.n_expert = n_expert;
  p.top_k = k;
  p.gelu_tanh = true;
  p.gate = {DType::Q8_0, gate.data(), n_ff, n_embd, row_bytes(DType::Q8_0, n_embd)};
  p.up = {DType::Q8_0, up.data(), n_ff, n_embd, row_bytes(DType::Q8_0, n_embd)};
  p.down = {DType::Q8_0, down.data(), n_embd, n_ff, row_bytes(DType::Q8_0, n_ff)};
  MoeScratch scratch;
  moe_ffn(p, scratch, nullptr);

  std::vector<float> logits(static_cast<size_t>(n_tokens * n_expert));
  matmul(p.router, x.data(), n_tokens, n_embd, logits.data(), n_expert, nullptr);
  std::vector<int32_t> ids(static_cast<size_t>(n_tokens * k));
  std::vector<float> w(ids.size());
  MoeRouteParams r{logits.data(), n_expert, n_tokens, n_expert, k, true, ids.data(), w.data()};
  moe_route(r);
  MoeRoutedFfnParams f;
  f.gate = p.gate;
  f.up = p.up;
  f.down = p.down;
  f.n_expert = n_expert;
  f.n_tokens = n_tokens;
  f.top_k = k;
  f.ids = ids.data();
  f.weights = w.data();
  f.x = x.data();
  f.ldx = n_embd;
  f.out = want.data();
  f.ld_out = n_embd;
  f.activation = MoeActivation::kGeluTanh;
  MoeScratch other;
  moe_routed_ffn(f, other, nullptr);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], want[i]) << i;
}

}  // namespace
}  // namespace ga::cpu
