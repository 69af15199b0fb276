// Causal grouped-query attention over a KV cache, paged or contiguous (see ops.h).
//
// One work item is one (query token, query head) pair: it reads its KV head's keys once for the
// scores, takes a stable softmax, and accumulates the values. Items are independent, so they are
// split over the thread pool in contiguous ranges and each thread uses its own slice of the
// workspace (scores [n_keys] + an accumulator [head_dim]); nothing is allocated here. The cache
// element type is a template parameter so the F32 and F16 inner loops are each a plain loop.
// The FP8 cache (F8_E4M3 codes, a float scale per position and KV head) is read as values e4m3(code) * scale,
// each rounded once in float (a 256-entry table gives e4m3(code) exactly): the reference the GPU kernels, which
// fold the scales in elsewhere, are compared with.
//
// Paged and contiguous caches share one kernel: the kernel walks a sequence's keys block by block
// (rows inside a block are contiguous, so the inner loops are the same plain loops), and a
// contiguous cache is a single block that holds every position. The kernel takes the per-token
// (position, block table) from a small source functor, so the contiguous wrapper needs no per-token
// arrays and both paths do the same arithmetic in the same order (bit-identical results).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/ops.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const uint16_t* p, int64_t i) { return fp16_to_f32(p[i]); }

// Every E4M3 code's value (exact: e4m3_to_f32), built once.
const float* e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

// One cached row of head_dim values of the FP8 cache: value i = e4m3(codes[i]) * scale.
struct Fp8Row {
  const uint8_t* codes;
  float scale;
  const float* table;
};
inline float load(const Fp8Row& r, int64_t i) { return r.table[r.codes[i]] * r.scale; }

// The row of a cache at element offset `offset` (position * kv_row + head * head_dim) whose scale sits at
// scale index `si` (position * n_head_kv + head): the element pointer itself for F32 / F16.
template <typename KvT>
inline const KvT* kv_row_at(const KvT* base, int64_t offset, const float*, int64_t, const float*) {
  return base + offset;
}
inline Fp8Row kv_row_at(const uint8_t* base, int64_t offset, const float* scales, int64_t si, const float* table) {
  return Fp8Row{base + offset, scales[si], table};
}

// q . k over n elements. Eight independent partial sums let the compiler vectorize the loop
// (it may not reorder a single float accumulator), which matters because this is the inner loop
// over every cached position.
template <typename Row>
inline float dot(const float* q, const Row& k, int64_t n) {
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

// Where a query token sits: its position and the block table of its sequence.
struct QuerySlot {
  int64_t pos;
  const int32_t* table;
};

// The parts of the problem both entry points share.
struct Problem {
  int64_t n_head, n_head_kv, head_dim;
  float scale;
  int64_t window_left;  // -1: none
  float softcap;        // 0: none
  const float* q;
  int64_t q_stride;
  int64_t block_size;
  const void* k_blocks;
  const void* v_blocks;
  const float* k_scales;  // F8_E4M3: [slots][n_head_kv]
  const float* v_scales;
  float* out;
  int64_t out_stride;
  float* work;
  int64_t work_stride;
};

template <typename KvT, typename Slots>
void attention_items(const Problem& p, const Slots& slot_of, int64_t begin, int64_t end, int thread) {
  const KvT* k_blocks = static_cast<const KvT*>(p.k_blocks);
  const KvT* v_blocks = static_cast<const KvT*>(p.v_blocks);
  const float* const table = std::is_same_v<KvT, uint8_t> ? e4m3_table() : nullptr;
  const int64_t group = p.n_head / p.n_head_kv;            // query heads per KV head
  const int64_t kv_row = p.n_head_kv * p.head_dim;         // floats per cached position
  float* scores = p.work + static_cast<int64_t>(thread) * p.work_stride;  // [n_keys]
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / p.n_head;
    const int64_t h = item % p.n_head;
    const int64_t kvh = h / group;
    const QuerySlot slot = slot_of(t);
    // causal: positions first .. pos, first = 0 or the window's start
    const int64_t first = p.window_left >= 0 ? std::max<int64_t>(0, slot.pos - p.window_left) : 0;
    const int64_t n_keys = slot.pos + 1 - first;
    const float* q = p.q + t * p.q_stride + h * p.head_dim;  // [head_dim]
    float* acc = scores + n_keys;                             // [head_dim], after this item's scores

    // Scores block by block: positions j .. of one block are contiguous rows; scores[j - first].
    for (int64_t j = first; j <= slot.pos;) {
      const int64_t b = j / p.block_size;
      const int64_t r0 = j % p.block_size;
      const int64_t n_in_block = std::min(p.block_size - r0, slot.pos + 1 - j);
      const int64_t slot0 = static_cast<int64_t>(slot.table[b]) * p.block_size + r0;  // the cache row of j
      for (int64_t i = 0; i < n_in_block; ++i) {
        const auto k = kv_row_at(k_blocks, (slot0 + i) * kv_row + kvh * p.head_dim, p.k_scales,
                                 (slot0 + i) * p.n_head_kv + kvh, table);
        scores[j - first + i] = dot(q, k, p.head_dim) * p.scale;
      }
      j += n_in_block;
    }
    if (p.softcap > 0.0f) ga::cpu::softcap(scores, n_keys, p.softcap);
    softmax(scores, n_keys);

    for (int64_t d = 0; d < p.head_dim; ++d) acc[d] = 0.0f;
    for (int64_t j = first; j <= slot.pos;) {
      const int64_t b = j / p.block_size;
      const int64_t r0 = j % p.block_size;
      const int64_t n_in_block = std::min(p.block_size - r0, slot.pos + 1 - j);
      const int64_t slot0 = static_cast<int64_t>(slot.table[b]) * p.block_size + r0;
      for (int64_t i = 0; i < n_in_block; ++i) {
        const auto v = kv_row_at(v_blocks, (slot0 + i) * kv_row + kvh * p.head_dim, p.v_scales,
                                 (slot0 + i) * p.n_head_kv + kvh, table);
        const float w = scores[j - first + i];
        for (int64_t d = 0; d < p.head_dim; ++d) acc[d] += w * load(v, d);
      }
      j += n_in_block;
    }
    std::memcpy(p.out + t * p.out_stride + h * p.head_dim, acc, static_cast<size_t>(p.head_dim) * sizeof(float));
  }
}

void check_common(int64_t n_head, int64_t n_head_kv, DType kv_type, int64_t window_left, float softcap) {
  GA_CHECK(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0, InvalidArgument, "attention: n_head ", n_head,
           " is not a multiple of n_head_kv ", n_head_kv);
  GA_CHECK(kv_type == DType::F32 || kv_type == DType::F16 || kv_type == DType::F8_E4M3, Unsupported,
           "attention: KV cache type ", dtype_name(kv_type), " (supported: F32, F16, F8_E4M3)");
  // a bad option is an error, not a silent plain attention
  GA_CHECK(window_left >= -1, InvalidArgument, "attention: window_left must be -1 (off) or >= 0, got ", window_left);
  GA_CHECK(std::isfinite(softcap) && softcap >= 0.0f, InvalidArgument,
           "attention: softcap must be 0 (off) or a finite positive cap, got ", softcap);
}

void check_scales(DType kv_type, const float* k_scales, const float* v_scales) {
  GA_CHECK(kv_type != DType::F8_E4M3 || (k_scales != nullptr && v_scales != nullptr), InvalidArgument,
           "attention: an F8_E4M3 KV cache needs its K and V scales");
}

template <typename Slots>
void run_items(const Problem& prob, DType kv_type, int64_t n_tokens, const Slots& slots, ThreadPool* pool) {
  const int64_t n_items = n_tokens * prob.n_head;
  const auto run = [&](int64_t begin, int64_t end, int thread) {
    if (kv_type == DType::F32) {
      attention_items<float>(prob, slots, begin, end, thread);
    } else if (kv_type == DType::F16) {
      attention_items<uint16_t>(prob, slots, begin, end, thread);
    } else {
      attention_items<uint8_t>(prob, slots, begin, end, thread);
    }
  };
  if (pool == nullptr || pool->size() <= 1 || n_items == 1) {
    run(0, n_items, 0);
  } else {
    pool->parallel_for(n_items, run);
  }
}

}  // namespace

void paged_attention(const PagedAttentionParams& p, ThreadPool* pool) {
  check_common(p.n_head, p.n_head_kv, p.kv_type, p.window_left, p.softcap);
  GA_CHECK(p.block_size > 0, InvalidArgument, "paged attention: block_size must be positive, got ", p.block_size);
  GA_CHECK(p.n_tokens >= 0 && (p.n_tokens == 0 || (p.positions != nullptr && p.block_tables != nullptr)),
           InvalidArgument, "paged attention: positions and block tables are required");
  int64_t max_pos = -1;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    GA_CHECK(p.positions[t] >= 0 && p.block_tables[t] != nullptr, InvalidArgument, "paged attention: token ", t,
             " has position ", p.positions[t], " or no block table");
    max_pos = std::max(max_pos, p.positions[t]);
  }
  GA_CHECK(p.work_stride >= attention_work_floats(max_pos + 1, p.head_dim), Internal, "attention: workspace stride ",
           p.work_stride, " too small for ", max_pos + 1, " positions");
  check_scales(p.kv_type, p.k_scales, p.v_scales);
  const Problem prob{p.n_head,   p.n_head_kv,  p.head_dim, p.scale,      p.window_left, p.softcap,
                     p.q,        p.q_stride,   p.block_size, p.k_blocks, p.v_blocks,    p.k_scales,
                     p.v_scales, p.out,        p.out_stride, p.work,     p.work_stride};
  const auto slots = [&p](int64_t t) { return QuerySlot{p.positions[t], p.block_tables[t]}; };
  run_items(prob, p.kv_type, p.n_tokens, slots, pool);
}

void attention(const AttentionParams& p, ThreadPool* pool) {
  check_common(p.n_head, p.n_head_kv, p.kv_type, p.window_left, p.softcap);
  GA_CHECK(p.work_stride >= attention_work_floats(p.pos0 + p.n_tokens, p.head_dim), Internal,
           "attention: workspace stride ", p.work_stride, " too small for ", p.pos0 + p.n_tokens, " positions");
  // The whole cache is block 0 of a pool of one block that holds every position the call reads.
  static constexpr int32_t kOnlyBlock[1] = {0};
  const int64_t block_size = std::max<int64_t>(p.pos0 + p.n_tokens, 1);
  check_scales(p.kv_type, p.k_scales, p.v_scales);
  const Problem prob{p.n_head,   p.n_head_kv, p.head_dim, p.scale,      p.window_left, p.softcap,
                     p.q,        p.q_stride,  block_size, p.k_cache,    p.v_cache,     p.k_scales,
                     p.v_scales, p.out,       p.out_stride, p.work,     p.work_stride};
  const int64_t pos0 = p.pos0;
  const auto slots = [pos0](int64_t t) { return QuerySlot{pos0 + t, kOnlyBlock}; };
  run_items(prob, p.kv_type, p.n_tokens, slots, pool);
}

}  // namespace ga::cpu
