// Causal grouped-query attention over a KV cache (see ops.h).
//
// One work item is one (query token, query head) pair: it reads its KV head's keys once for the
// scores, takes a stable softmax, and accumulates the values. Items are independent, so they are
// split over the thread pool in contiguous ranges and each thread uses its own slice of the
// workspace (scores [n_keys] + an accumulator [head_dim]); nothing is allocated here. The cache
// element type is a template parameter so the F32 and F16 inner loops are each a plain loop.
#include <cmath>
#include <cstring>

#include "backends/cpu/ops.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const uint16_t* p, int64_t i) { return fp16_to_f32(p[i]); }

// q . k over n elements. Eight independent partial sums let the compiler vectorize the loop
// (it may not reorder a single float accumulator), which matters because this is the inner loop
// over every cached position.
template <typename KvT>
inline float dot(const float* q, const KvT* k, int64_t n) {
  constexpr int64_t kLanes = 8;
  float part[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= n; d += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) part[l] += q[d + l] * load(k, d + l);
  }
  float sum = 0.0f;
  for (; d < n; ++d) sum += q[d] * load(k, d);
  for (int64_t l = 0; l < kLanes; ++l) sum += part[l];
  return sum;
}

template <typename KvT>
void attention_items(const AttentionParams& p, int64_t begin, int64_t end, int thread) {
  const KvT* k_cache = static_cast<const KvT*>(p.k_cache);
  const KvT* v_cache = static_cast<const KvT*>(p.v_cache);
  const int64_t group = p.n_head / p.n_head_kv;  // query heads per KV head
  const int64_t kv_row = p.n_head_kv * p.head_dim;  // floats per cache position
  float* scores = p.work + static_cast<int64_t>(thread) * p.work_stride;  // [n_keys]
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / p.n_head;
    const int64_t h = item % p.n_head;
    const int64_t kvh = h / group;
    const int64_t n_keys = p.pos0 + t + 1;  // causal: positions 0 .. pos0 + t
    const float* q = p.q + t * p.q_stride + h * p.head_dim;  // [head_dim]
    float* acc = scores + n_keys;  // [head_dim], after this item's scores

    for (int64_t j = 0; j < n_keys; ++j) {
      scores[j] = dot(q, k_cache + j * kv_row + kvh * p.head_dim, p.head_dim) * p.scale;
    }
    softmax(scores, n_keys);

    for (int64_t d = 0; d < p.head_dim; ++d) acc[d] = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) {
      const KvT* v = v_cache + j * kv_row + kvh * p.head_dim;
      const float w = scores[j];
      for (int64_t d = 0; d < p.head_dim; ++d) acc[d] += w * load(v, d);
    }
    std::memcpy(p.out + t * p.out_stride + h * p.head_dim, acc, static_cast<size_t>(p.head_dim) * sizeof(float));
  }
}

}  // namespace

void attention(const AttentionParams& p, ThreadPool* pool) {
  GA_CHECK(p.n_head > 0 && p.n_head_kv > 0 && p.n_head % p.n_head_kv == 0, InvalidArgument,
           "attention: n_head ", p.n_head, " is not a multiple of n_head_kv ", p.n_head_kv);
  GA_CHECK(p.work_stride >= attention_work_floats(p.pos0 + p.n_tokens, p.head_dim), Internal,
           "attention: workspace stride ", p.work_stride, " too small for ", p.pos0 + p.n_tokens, " positions");
  GA_CHECK(p.kv_type == DType::F32 || p.kv_type == DType::F16, Unsupported, "attention: KV cache type ",
           dtype_name(p.kv_type), " (supported: F32, F16)");
  const int64_t n_items = p.n_tokens * p.n_head;
  const auto run = [&p](int64_t begin, int64_t end, int thread) {
    if (p.kv_type == DType::F32) {
      attention_items<float>(p, begin, end, thread);
    } else {
      attention_items<uint16_t>(p, begin, end, thread);
    }
  };
  if (pool == nullptr || pool->size() <= 1 || n_items == 1) {
    run(0, n_items, 0);
  } else {
    pool->parallel_for(n_items, run);
  }
}

}  // namespace ga::cpu
