// Mixture-of-experts on the CPU (see moe.h).
#include "backends/cpu/moe.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/ops.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace

void moe_route(const MoeRouteParams& p) {
  GA_CHECK(p.n_expert > 0 && p.top_k > 0 && p.top_k <= p.n_expert, InvalidArgument, "moe_route: top ", p.top_k,
           " of ", p.n_expert, " experts");
  std::vector<float> prob(static_cast<size_t>(p.n_expert));
  std::vector<int32_t> order(static_cast<size_t>(p.n_expert));
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float* l = p.logits + t * p.ld;
    std::copy(l, l + p.n_expert, prob.begin());
    softmax(prob.data(), p.n_expert);
    for (int64_t e = 0; e < p.n_expert; ++e) order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    // decreasing p, ties to the lower index (a stable order of the indices)
    std::partial_sort(order.begin(), order.begin() + p.top_k, order.end(), [&](int32_t a, int32_t b) {
      const float pa = prob[static_cast<size_t>(a)], pb = prob[static_cast<size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    double sum = 0.0;
    for (int64_t k = 0; k < p.top_k; ++k) sum += prob[static_cast<size_t>(order[static_cast<size_t>(k)])];
    const float inv = p.normalize_top_k ? static_cast<float>(1.0 / sum) : 1.0f;
    for (int64_t k = 0; k < p.top_k; ++k) {
      const int32_t e = order[static_cast<size_t>(k)];
      p.ids[t * p.top_k + k] = e;
      p.weights[t * p.top_k + k] = prob[static_cast<size_t>(e)] * inv;
    }
  }
}

void moe_ffn(const MoeFfnParams& p, MoeScratch& s, ThreadPool* pool) {
  const int64_t n = p.n_tokens;
  const int64_t E = p.n_expert, K = p.top_k;
  const int64_t in = p.gate.cols, ff = p.gate.rows, out_cols = p.down.rows;
  GA_CHECK(p.router.rows == E && p.router.cols == in && p.up.rows == ff && p.up.cols == in && p.down.cols == ff,
           InvalidArgument, "moe_ffn: router [", p.router.rows, " x ", p.router.cols, "], experts gate [", ff, " x ",
           in, "], up [", p.up.rows, " x ", p.up.cols, "], down [", out_cols, " x ", p.down.cols, "]");
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

  for (int64_t t = 0; t < n; ++t) std::fill(p.out + t * p.ld_out, p.out + t * p.ld_out + out_cols, 0.0f);
  for (int64_t e = 0; e < E; ++e) {
    s.rows.clear();
    s.row_w.clear();
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t k = 0; k < K; ++k) {
        if (s.ids[static_cast<size_t>(t * K + k)] != e) continue;
        s.rows.push_back(t);
        s.row_w.push_back(s.weights[static_cast<size_t>(t * K + k)]);
      }
    }
    const int64_t m = static_cast<int64_t>(s.rows.size());
    if (m == 0) continue;  // an expert no token chose costs nothing
    grow(s.xs, m * in);
    grow(s.gate, m * ff);
    grow(s.up, m * ff);
    grow(s.y, m * out_cols);
    for (int64_t i = 0; i < m; ++i) {
      const float* src = p.x + s.rows[static_cast<size_t>(i)] * p.ldx;
      std::copy(src, src + in, s.xs.data() + i * in);
    }
    matmul(p.gate.expert(e), s.xs.data(), m, in, s.gate.data(), ff, pool);  // [m][ff]
    matmul(p.up.expert(e), s.xs.data(), m, in, s.up.data(), ff, pool);
    if (p.gelu_tanh) {
      geglu_tanh(s.gate.data(), s.up.data(), s.gate.data(), m * ff);
    } else {
      swiglu(s.gate.data(), s.up.data(), s.gate.data(), m * ff);
    }
    matmul(p.down.expert(e), s.gate.data(), m, ff, s.y.data(), out_cols, pool);  // [m][out]
    for (int64_t i = 0; i < m; ++i) {
      float* dst = p.out + s.rows[static_cast<size_t>(i)] * p.ld_out;
      const float* y = s.y.data() + i * out_cols;
      const float w = s.row_w[static_cast<size_t>(i)];
      for (int64_t c = 0; c < out_cols; ++c) dst[c] += w * y[c];
    }
  }
}

}  // namespace ga::cpu
