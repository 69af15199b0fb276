// moe_route() and moe_plan(): the router's top-k and the grouping of the pairs by expert (moe.h).
//
// Routing: one warp per token; lane l holds the logits of experts l, l + 32, ... (E <= 256: up to 8 per
// lane, coalesced loads). The softmax's max is a warp max of the order keys (cpu::moe_order_key, the same
// total order as the CPU), its denominator a double sum of expf(l - max); the top-k are k rounds of a warp
// argmax over (key, lower index) with the winners masked out, so ties go to the lower index exactly as in
// cpu::moe_route. p and the normalized weights are the CPU's double expressions rounded to float; only
// expf may differ (CUDA's is within 2 ulp), which keeps the weights within 1e-6 and the ids identical.
//
// Plan: a stable counting sort in one CTA. Counts by shared-memory atomics (order-free), exclusive scans
// of the counts and of the work items per expert (ceil(count / item_pairs)) by warp 0, then the pairs in
// chunks of the CTA's 1024 threads: within a warp, __match_any_sync gives each pair its rank among the
// lanes with the same expert, per-warp counts in shared memory give the ranks of the earlier warps, and a
// running count per expert those of earlier chunks, so the sorted order is ascending pair order inside
// each expert, independent of timing. For the GEMV path (n_tokens <= kMoeRouteFusedMaxTokens) the route
// and the plan are one kernel of one CTA: its warps route the tokens, a __syncthreads makes the ids
// visible, and the same CTA sorts them (one chunk). Larger calls (prefill) launch the routing over many
// CTAs, then the plan kernel.
//
// Both kernels are launched after the previous one with PDL (pdl.cuh) and wait for it before reading.
#include <cstdint>

#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/kernels/pdl.cuh"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kRouteWarpsPerCta = 8;  // the multi-CTA router
constexpr int kPlanThreads = 1024;    // one chunk of pairs per pass of the plan's scatter
constexpr int kPlanWarps = kPlanThreads / 32;
constexpr int kMaxPerLane = kMoeMaxExperts / 32;
constexpr uint32_t kFullMask = 0xffffffffu;

// cpu::moe_order_key (backends/cpu/moe.h): the float order on the bits, -0 folded onto +0, NaN above +inf.
__device__ __forceinline__ uint32_t order_key(float logit) {
  if (logit == 0.0f) logit = 0.0f;
  const uint32_t bits = __float_as_uint(logit);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ float key_logit(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// (key, index) that routes first: the larger key, then the lower index.
__device__ __forceinline__ bool routes_before(uint32_t ka, int ia, uint32_t kb, int ib) {
  return ka != kb ? ka > kb : ia < ib;
}

// Routes token t with the calling warp (all 32 lanes): ids / weights [t][0, k).
__device__ void route_token(const MoeRouteParams& p, int64_t t, int lane) {
  const int n_expert = p.shape.n_expert;
  const int k = p.shape.top_k;
  const float* logits = p.logits + t * p.ld_logits;
  uint32_t keys[kMaxPerLane];
  uint32_t best_key = 0;  // below every real key (the smallest, -NaN with all bits set, maps to 0 only for ~0)
  int n_mine = 0;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    keys[i] = e < n_expert ? order_key(logits[e]) : 0u;
    if (e < n_expert) {
      n_mine = i + 1;
      best_key = max(best_key, keys[i]);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) best_key = max(best_key, __shfl_xor_sync(kFullMask, best_key, off));
  const float max_logit = key_logit(best_key);
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    if (i < n_mine) sum += static_cast<double>(expf(key_logit(keys[i]) - max_logit));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);

  uint32_t taken = 0;  // bit i: expert lane + 32 i already selected
  float mine = 0.0f;   // lane j < k: p of slot j
  double selected = 0.0;
  for (int j = 0; j < k; ++j) {
    uint32_t kb = 0;
    int ib = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + 32 * i;
      if (i < n_mine && !(taken >> i & 1u) && routes_before(keys[i], e, kb, ib)) {
        kb = keys[i];
        ib = e;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const uint32_t ko = __shfl_xor_sync(kFullMask, kb, off);
      const int io = __shfl_xor_sync(kFullMask, ib, off);
      if (routes_before(ko, io, kb, ib)) {
        kb = ko;
        ib = io;
      }
    }
    if ((ib & 31) == lane) taken |= 1u << (ib >> 5);
    const float pj = static_cast<float>(static_cast<double>(expf(key_logit(kb) - max_logit)) / sum);
    selected += static_cast<double>(pj);
    if (lane == j) {
      mine = pj;
      p.ids[t * k + j] = ib;
    }
  }
  if (lane < k) {
    p.weights[t * k + lane] = p.normalize ? static_cast<float>(static_cast<double>(mine) / selected) : mine;
  }
}

// The plan of `ids` by the whole CTA (kPlanThreads threads); ids may have been written by this CTA before a
// __syncthreads (global writes are then visible to the CTA).
__device__ void build_plan(const MoeShape& shape, const int32_t* ids, const MoePlanView& plan) {
  __shared__ int32_t counts[kMoeMaxExperts];
  __shared__ int32_t starts[kMoeMaxExperts];  // sorted position of each expert's next pair (running)
  __shared__ int32_t warp_counts[kPlanWarps][kMoeMaxExperts];
  const int n_expert = shape.n_expert;
  const int64_t n_pairs = shape.n_tokens * shape.top_k;  // (MoeShape::n_pairs is host code)
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  for (int e = tid; e < n_expert; e += kPlanThreads) counts[e] = 0;
  __syncthreads();
  for (int64_t q = tid; q < n_pairs; q += kPlanThreads) {
    const int32_t e = ids[q];
    if (e >= 0 && e < n_expert) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (warp == 0) {
    // exclusive scans of the counts and of the items per expert: lane l owns experts 8l .. 8l + 7
    constexpr int kPer = kMoeMaxExperts / 32;
    const int w = plan.item_pairs;
    int c[kPer], sum_c = 0, sum_i = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane * kPer + i;
      c[i] = e < n_expert ? counts[e] : 0;
      sum_c += c[i];
      sum_i += (c[i] + w - 1) / w;
    }
    int pre_c = sum_c, pre_i = sum_i;  // inclusive scans over lanes
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int oc = __shfl_up_sync(kFullMask, pre_c, off);
      const int oi = __shfl_up_sync(kFullMask, pre_i, off);
      if (lane >= off) {
        pre_c += oc;
        pre_i += oi;
      }
    }
    int at = pre_c - sum_c, item = pre_i - sum_i;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane * kPer + i;
      if (e >= n_expert) break;
      starts[e] = at;
      plan.counts[e] = c[i];
      plan.offsets[e] = at;
      for (int first = 0; first < c[i]; first += w, ++item) {
        plan.items[item] = make_int4(e, at + first, min(w, c[i] - first), 0);
      }
      at += c[i];
    }
    if (lane == 31) {
      plan.offsets[n_expert] = pre_c;
      *plan.n_items = pre_i;
    }
  }
  __syncthreads();
  for (int64_t base = 0; base < n_pairs; base += kPlanThreads) {
    for (int i = tid; i < kPlanWarps * n_expert; i += kPlanThreads) warp_counts[i / n_expert][i % n_expert] = 0;
    __syncthreads();
    const int64_t q = base + tid;
    const int32_t e = q < n_pairs ? ids[q] : -1;
    const bool valid = e >= 0 && e < n_expert;
    const uint32_t same = __match_any_sync(kFullMask, valid ? e : -1);
    const int rank = __popc(same & ((1u << lane) - 1u));
    if (valid && rank == 0) warp_counts[warp][e] = __popc(same);
    __syncthreads();
    if (q < n_pairs) {
      if (valid) {
        int pos = starts[e] + rank;
        for (int w = 0; w < warp; ++w) pos += warp_counts[w][e];
        plan.sorted_pairs[pos] = static_cast<int32_t>(q);
        plan.positions[q] = pos;
      } else {
        plan.positions[q] = -1;
      }
    }
    __syncthreads();  // every thread has read starts[] of this chunk
    for (int ex = tid; ex < n_expert; ex += kPlanThreads) {
      int add = 0;
      for (int w = 0; w < kPlanWarps; ++w) add += warp_counts[w][ex];
      starts[ex] += add;
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kPlanThreads) route_and_plan_kernel(const MoeRouteParams p, const MoePlanView plan) {
  pdl_wait_prior_grid();  // the logits are the previous kernel's output
  pdl_allow_dependents();
  const int lane = static_cast<int>(threadIdx.x & 31);
  for (int64_t t = threadIdx.x >> 5; t < p.shape.n_tokens; t += kPlanWarps) route_token(p, t, lane);
  __syncthreads();
  build_plan(p.shape, p.ids, plan);
}

__global__ void __launch_bounds__(kRouteWarpsPerCta * 32) route_kernel(const MoeRouteParams p) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRouteWarpsPerCta;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarpsPerCta + (threadIdx.x >> 5); t < p.shape.n_tokens;
       t += warps) {
    route_token(p, t, lane);
  }
}

__global__ void __launch_bounds__(kPlanThreads) plan_kernel(const MoeShape shape, const int32_t* ids,
                                                            const MoePlanView plan) {
  pdl_wait_prior_grid();  // ids are the previous kernel's output
  pdl_allow_dependents();
  build_plan(shape, ids, plan);
}

}  // namespace
}  // namespace detail

const char* moe_route_unsupported_reason(const MoeRouteParams& p) {
  if (const char* why = moe_shape_unsupported_reason(p.shape)) return why;
  if (p.logits == nullptr || p.ids == nullptr || p.weights == nullptr) return "logits, ids and weights must be set";
  if (p.shape.n_tokens > 1 && p.ld_logits < p.shape.n_expert) return "ld_logits < n_expert";
  if (reinterpret_cast<uintptr_t>(p.plan) % 16 != 0) return "the plan workspace must be 16-byte aligned";
  return nullptr;
}

cudaError_t moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (moe_route_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.shape.n_tokens == 0) return cudaSuccess;
  if (p.plan != nullptr && p.shape.n_tokens <= kMoeRouteFusedMaxTokens) {
    return detail::launch_after_prior(detail::route_and_plan_kernel, dim3(1), dim3(detail::kPlanThreads), 0, stream, p,
                                      moe_plan_view(p.shape, p.plan));
  }
  const int64_t ctas = (p.shape.n_tokens + detail::kRouteWarpsPerCta - 1) / detail::kRouteWarpsPerCta;
  cudaError_t status = detail::launch_after_prior(detail::route_kernel, dim3(static_cast<unsigned>(ctas < 65535 ? ctas : 65535)),
                                                  dim3(detail::kRouteWarpsPerCta * 32), 0, stream, p);
  if (status != cudaSuccess || p.plan == nullptr) return status;
  return detail::launch_after_prior(detail::plan_kernel, dim3(1), dim3(detail::kPlanThreads), 0, stream, p.shape,
                                    static_cast<const int32_t*>(p.ids), moe_plan_view(p.shape, p.plan));
}

const char* moe_plan_unsupported_reason(const MoePlanParams& p) {
  if (const char* why = moe_shape_unsupported_reason(p.shape)) return why;
  if (p.ids == nullptr || p.plan == nullptr) return "ids and plan must be set";
  if (reinterpret_cast<uintptr_t>(p.plan) % 16 != 0) return "the plan workspace must be 16-byte aligned";
  return nullptr;
}

cudaError_t moe_plan(const MoePlanParams& p, cudaStream_t stream) {
  if (moe_plan_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  return detail::launch_after_prior(detail::plan_kernel, dim3(1), dim3(detail::kPlanThreads), 0, stream, p.shape,
                                    p.ids, moe_plan_view(p.shape, p.plan));
}

}  // namespace ga::cuda
