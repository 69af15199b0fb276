// Mixture-of-experts on the CPU (moe.h has the semantics).
//
// moe_routed_ffn groups the (token, slot) pairs by expert with a stable counting sort, then per routed expert:
// gathers its tokens' rows, runs gate and up as one cpu::matmul each (a weight block is decoded once and
// used for every gathered token), the gated activation, and down into the pair's row of a buffer in
// sorted order; moe_combine then reads those rows through the inverse permutation in slot order. Only the
// matmuls carry real work; they thread over rows, the activation and the combine over rows / tokens.
// No fused multiply-add in this file (fp_contract_off.h): the combine must be the exact expression the
// CUDA kernel evaluates, so that the GPU's combine can be checked bit for bit.
#include "backends/cpu/fp_contract_off.h"  // first: see the file

#include "backends/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "backends/cpu/ops.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

bool valid_expert(int32_t id, int64_t n_expert) { return id >= 0 && id < n_expert; }

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

void check_stack(const ExpertStack& s, const char* name, int64_t n_expert) {
  GA_CHECK(s.data != nullptr, InvalidArgument, "moe_ffn: ", name, " stack is null");
  GA_CHECK(s.rows > 0 && s.cols > 0, InvalidArgument, "moe_ffn: ", name, " has ", s.rows, "x", s.cols, " matrices");
  const uint64_t rb = row_bytes(s.type, static_cast<uint64_t>(s.cols));
  GA_CHECK(s.row_stride >= rb, InvalidArgument, "moe_ffn: ", name, " row stride ", s.row_stride, " < a row's ", rb,
           " bytes");
  GA_CHECK(n_expert == 1 || s.stride() >= s.row_stride * static_cast<uint64_t>(s.rows - 1) + rb, InvalidArgument,
           "moe_ffn: ", name, " expert stride ", s.stride(), " is smaller than one expert's rows");
}

}  // namespace

void moe_route(const MoeRouteParams& p) {
  GA_CHECK(p.n_tokens >= 0, InvalidArgument, "moe_route: negative n_tokens");
  if (p.n_tokens == 0) return;
  GA_CHECK(p.n_expert > 0 && p.top_k > 0 && p.top_k <= p.n_expert, InvalidArgument, "moe_route: top_k ", p.top_k,
           " of ", p.n_expert, " experts");
  GA_CHECK(p.logits != nullptr && p.ids != nullptr && p.weights != nullptr, InvalidArgument, "moe_route: null pointer");
  GA_CHECK(p.n_tokens == 1 || p.ld >= p.n_expert, InvalidArgument, "moe_route: ld ", p.ld, " < n_expert ",
           p.n_expert);
  const int64_t n_expert = p.n_expert;
  const int64_t k = p.top_k;
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  std::vector<uint32_t> keys(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float* l = p.logits + t * p.ld;
    int64_t best = 0;
    for (int64_t e = 0; e < n_expert; ++e) {
      keys[static_cast<size_t>(e)] = moe_order_key(l[e]);
      if (keys[static_cast<size_t>(e)] > keys[static_cast<size_t>(best)]) best = e;
      order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    }
    const float max_logit = l[best];
    double sum = 0.0;
    for (int64_t e = 0; e < n_expert; ++e) sum += static_cast<double>(std::exp(l[e] - max_logit));
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const uint32_t ka = keys[static_cast<size_t>(a)], kb = keys[static_cast<size_t>(b)];
      return ka != kb ? ka > kb : a < b;
    });
    int32_t* ids = p.ids + t * k;
    float* w = p.weights + t * k;
    double selected = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      ids[j] = e;
      w[j] = static_cast<float>(static_cast<double>(std::exp(l[e] - max_logit)) / sum);
      selected += static_cast<double>(w[j]);
    }
    if (p.normalize_top_k) {
      for (int64_t j = 0; j < k; ++j) w[j] = static_cast<float>(static_cast<double>(w[j]) / selected);
    }
  }
}

namespace {

void combine_rows(const MoeCombineParams& p, int64_t t_begin, int64_t t_end) {
  for (int64_t t = t_begin; t < t_end; ++t) {
    float* out = p.out + t * p.ld_out;
    const int32_t* ids = p.ids + t * p.top_k;
    const float* w = p.weights + t * p.top_k;
    for (int64_t c = 0; c < p.n; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < p.top_k; ++j) {
        if (!valid_expert(ids[j], p.n_expert)) continue;
        const int64_t pair = t * p.top_k + j;
        const int64_t row = p.y_rows != nullptr ? p.y_rows[pair] : pair;
        const float prod = w[j] * p.y[row * p.ldy + c];
        acc = acc + prod;
      }
      out[c] = p.accumulate ? out[c] + acc : acc;
    }
  }
}

void check_combine(const MoeCombineParams& p) {
  GA_CHECK(p.n_tokens >= 0 && p.top_k > 0 && p.n >= 0, InvalidArgument, "moe_combine: bad sizes");
  GA_CHECK(p.ids != nullptr && p.weights != nullptr && p.y != nullptr && p.out != nullptr, InvalidArgument,
           "moe_combine: null pointer");
  GA_CHECK(p.ldy >= p.n && p.ld_out >= p.n, InvalidArgument, "moe_combine: ldy or ld_out < n");
}

void gated_activation(MoeActivation act, const float* gate, const float* up, float* out, int64_t n) {
  if (act == MoeActivation::kGeluTanh) {
    geglu_tanh(gate, up, out, n);
  } else {
    swiglu(gate, up, out, n);
  }
}

}  // namespace

void moe_combine(const MoeCombineParams& p) {
  check_combine(p);
  combine_rows(p, 0, p.n_tokens);
}

void moe_routed_ffn(const MoeRoutedFfnParams& p, MoeScratch& s, ThreadPool* pool) {
  GA_CHECK(p.n_tokens >= 0 && p.top_k > 0 && p.n_expert > 0 && p.top_k <= p.n_expert, InvalidArgument,
           "moe_ffn: top_k ", p.top_k, " of ", p.n_expert, " experts, ", p.n_tokens, " tokens");
  if (p.n_tokens == 0) return;
  check_stack(p.gate, "gate", p.n_expert);
  check_stack(p.up, "up", p.n_expert);
  check_stack(p.down, "down", p.n_expert);
  const int64_t n_embd = p.gate.cols;
  const int64_t n_ff = p.gate.rows;
  GA_CHECK(p.up.rows == n_ff && p.up.cols == n_embd && p.down.rows == n_embd && p.down.cols == n_ff,
           InvalidArgument, "moe_ffn: gate ", n_ff, "x", n_embd, ", up ", p.up.rows, "x", p.up.cols, " and down ",
           p.down.rows, "x", p.down.cols, " do not fit together");
  GA_CHECK(p.ids != nullptr && p.weights != nullptr && p.x != nullptr && p.out != nullptr, InvalidArgument,
           "moe_ffn: null pointer");
  GA_CHECK(p.ldx >= n_embd && p.ld_out >= n_embd, InvalidArgument, "moe_ffn: ldx or ld_out < n_embd ", n_embd);

  GA_CHECK(p.activation == MoeActivation::kSilu || p.activation == MoeActivation::kGeluTanh, InvalidArgument,
           "moe_ffn: unknown activation ", static_cast<int>(p.activation));
  const int64_t k = p.top_k;
  const int64_t n_pairs = p.n_tokens * k;
  // stable counting sort of the valid pairs by expert
  std::vector<int64_t>& offsets = s.offsets;
  std::vector<int32_t>& sorted = s.sorted;
  std::vector<int32_t>& positions = s.positions;
  offsets.assign(static_cast<size_t>(p.n_expert) + 1, 0);
  grow(sorted, n_pairs);
  positions.assign(static_cast<size_t>(n_pairs), 0);
  for (int64_t q = 0; q < n_pairs; ++q) {
    if (valid_expert(p.ids[q], p.n_expert)) ++offsets[static_cast<size_t>(p.ids[q]) + 1];
  }
  int64_t max_count = 0;
  for (int64_t e = 0; e < p.n_expert; ++e) {
    max_count = std::max(max_count, offsets[static_cast<size_t>(e) + 1]);
    offsets[static_cast<size_t>(e) + 1] += offsets[static_cast<size_t>(e)];
  }
  {
    std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
    for (int64_t q = 0; q < n_pairs; ++q) {
      const int32_t e = p.ids[q];
      if (!valid_expert(e, p.n_expert)) continue;
      const int64_t at = fill[static_cast<size_t>(e)]++;
      sorted[static_cast<size_t>(at)] = static_cast<int32_t>(q);
      positions[static_cast<size_t>(q)] = static_cast<int32_t>(at);
    }
  }

  grow(s.xs, max_count * n_embd);
  grow(s.gate, max_count * n_ff);
  grow(s.up, max_count * n_ff);
  grow(s.ys, std::max<int64_t>(offsets.back(), 1) * n_embd);  // [valid pairs, sorted][n_embd]
  float* const xg = s.xs.data();
  float* const gate = s.gate.data();
  float* const up = s.up.data();
  float* const ys = s.ys.data();

  for (int64_t e = 0; e < p.n_expert; ++e) {
    const int64_t first = offsets[static_cast<size_t>(e)];
    const int64_t count = offsets[static_cast<size_t>(e) + 1] - first;
    if (count == 0) continue;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t token = sorted[static_cast<size_t>(first + i)] / k;
      std::copy_n(p.x + token * p.ldx, n_embd, xg + i * n_embd);
    }
    matmul(p.gate.expert(e), xg, count, n_embd, gate, n_ff, pool);
    matmul(p.up.expert(e), xg, count, n_embd, up, n_ff, pool);
    parallel_for(pool, count, [&](int64_t begin, int64_t end, int) {
      gated_activation(p.activation, gate + begin * n_ff, up + begin * n_ff, gate + begin * n_ff, (end - begin) * n_ff);
    });
    matmul(p.down.expert(e), gate, count, n_ff, ys + first * n_embd, n_embd, pool);
  }

  MoeCombineParams c;
  c.n_tokens = p.n_tokens;
  c.top_k = k;
  c.n_expert = p.n_expert;
  c.ids = p.ids;
  c.weights = p.weights;
  c.y = ys;
  c.ldy = n_embd;
  c.y_rows = positions.data();
  c.n = n_embd;
  c.out = p.out;
  c.ld_out = p.ld_out;
  c.accumulate = p.accumulate;
  check_combine(c);
  parallel_for(pool, p.n_tokens, [&](int64_t begin, int64_t end, int) { combine_rows(c, begin, end); });
}

void moe_ffn(const MoeFfnParams& p, MoeScratch& s, ThreadPool* pool) {
  const int64_t n = p.n_tokens, E = p.n_expert, K = p.top_k;
  GA_CHECK(p.router.rows == E && p.router.cols == p.gate.cols, InvalidArgument, "moe_ffn: router [", p.router.rows,
           " x ", p.router.cols, "] for ", E, " experts of ", p.gate.cols, " inputs");
  if (n == 0) return;
  grow(s.logits, n * E);
  grow(s.ids, n * K);
  grow(s.weights, n * K);
  matmul(p.router, p.x, n, p.ldx, s.logits.data(), E, pool);  // [n][n_expert]
  MoeRouteParams r;
  r.logits = s.logits.data();
  r.ld = E;
  r.n_tokens = n;
  r.n_expert = E;
  r.top_k = K;
  r.normalize_top_k = p.normalize_top_k;
  r.ids = s.ids.data();
  r.weights = s.weights.data();
  moe_route(r);
  MoeRoutedFfnParams f;
  f.gate = p.gate;
  f.up = p.up;
  f.down = p.down;
  f.n_expert = E;
  f.n_tokens = n;
  f.top_k = K;
  f.ids = s.ids.data();
  f.weights = s.weights.data();
  f.x = p.x;
  f.ldx = p.ldx;
  f.out = p.out;
  f.ld_out = p.ld_out;
  f.activation = p.gelu_tanh ? MoeActivation::kGeluTanh : MoeActivation::kSilu;
  moe_routed_ffn(f, s, pool);
}

}  // namespace ga::cpu
