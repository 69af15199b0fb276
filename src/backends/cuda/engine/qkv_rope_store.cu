// qkv_rope_store(): the step between the Q/K/V projections and the attention, in one kernel:
// optional QKV bias, RoPE of q (in place) and k, and the f16 store of k and v into the KV cache.
//
// Why one kernel: in a decode step each of these touches a few KB, so their cost is the launch and
// one dependent memory round trip each, not bandwidth. Done separately (3 bias adds, 2 ropes, 2
// stores) they cost ~20 us per layer of a 1B model on an H200 (ncu), more than its Q/K/V GEMVs.
// Grid (token, slot blocks): one thread per (head, pair) slot of the q, k and v heads together, so
// every load of a step is in flight at once (a first version walked a token's 6144 slots of a 7B
// layer with one block: 24 dependent round trips, 17 us). Each thread computes its own angle in
// double from the RoPE table (theta = pos * inv_freq reaches thousands of radians at long contexts);
// a few dozen flops, hidden behind the loads. Roped k never goes back to f32: the attention reads
// k only from the cache. With `slots` (a paged KV pool) the cache row of a token is its slot, not its
// position; a negative slot skips the K/V stores of that token (the q rotation still happens).
#include <cmath>

#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/step_math.cuh"
#include "backends/cuda/engine/engine_kernels.h"

namespace ga::cuda::engine {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPairs = 1024;  // n_rot / 2, as kernels/rope.cu

__global__ void __launch_bounds__(kThreads) qkv_rope_store_kernel(const QkvRopeStoreParams p) {
  ga::cuda::detail::pdl_wait_prior_grid();  // pdl.cuh: q/k/v of the GEMV are ready from here
  ga::cuda::detail::pdl_allow_dependents();
  const int64_t t = blockIdx.x;
  const int half_hd = p.head_dim / 2;
  const int64_t kv_dim = int64_t{p.n_head_kv} * p.head_dim;
  const int64_t slots = int64_t{p.n_head + 2 * p.n_head_kv} * half_hd;  // q heads, then k heads, then v heads
  const int64_t s = int64_t{blockIdx.y} * kThreads + threadIdx.x;
  if (s >= slots) return;
  const int64_t pos = p.positions[t];
  const int64_t cache_row = p.slots != nullptr ? int64_t{p.slots[t]} : pos;
  float* const q = p.q + t * p.ld_q;
  const float* const k = p.k + t * p.ld_kv;
  const float* const v = p.v + t * p.ld_kv;
  __half* const k_row = p.k_cache + cache_row * kv_dim;
  __half* const v_row = p.v_cache + cache_row * kv_dim;
  const int head = static_cast<int>(s / half_hd);
  if (cache_row < 0 && head >= p.n_head) return;  // a padding token: nothing to store
  const int pair = static_cast<int>(s % half_hd);
  // Rotated pairs of q and k heads as kernels/rope.cu (Normal: adjacent dims, NeoX: halves of
  // n_rot); dims past n_rot pass through two by two (step_math.cuh).
  const ga::cuda::detail::RopePair rp =
      head < p.n_head + p.n_head_kv ? ga::cuda::detail::rope_pair(pair, p.n_rot, p.neox, pos, p.inv_freq, p.mscale)
                                    : ga::cuda::detail::RopePair{2 * pair, 2 * pair + 1, false, 1.0f, 0.0f};
  const int d0 = rp.d0, d1 = rp.d1;
  if (head < p.n_head) {  // q: bias, rope, back in place
    float* x = q + int64_t{head} * p.head_dim;
    float x0 = x[d0], x1 = x[d1];
    if (p.bq != nullptr) {
      x0 += p.bq[head * p.head_dim + d0];
      x1 += p.bq[head * p.head_dim + d1];
    }
    ga::cuda::detail::rope_apply(rp, x0, x1);
    x[d0] = x0;
    x[d1] = x1;
  } else if (head < p.n_head + p.n_head_kv) {  // k: bias, rope, f16 into the cache
    const int kh = head - p.n_head;
    const int64_t o = int64_t{kh} * p.head_dim;
    float x0 = k[o + d0], x1 = k[o + d1];
    if (p.bk != nullptr) {
      x0 += p.bk[o + d0];
      x1 += p.bk[o + d1];
    }
    ga::cuda::detail::rope_apply(rp, x0, x1);
    k_row[o + d0] = __float2half_rn(x0);
    k_row[o + d1] = __float2half_rn(x1);
  } else {  // v: bias, f16 into the cache (no rotation: plain adjacent dims)
    const int64_t o = int64_t{head - p.n_head - p.n_head_kv} * p.head_dim;
    float x0 = v[o + 2 * pair], x1 = v[o + 2 * pair + 1];
    if (p.bv != nullptr) {
      x0 += p.bv[o + 2 * pair];
      x1 += p.bv[o + 2 * pair + 1];
    }
    v_row[o + 2 * pair] = __float2half_rn(x0);
    v_row[o + 2 * pair + 1] = __float2half_rn(x1);
  }
}

}  // namespace

const char* qkv_rope_store_unsupported_reason(const QkvRopeStoreParams& p) {
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.k_cache == nullptr || p.v_cache == nullptr ||
      p.positions == nullptr) {
    return "q, k, v, the caches and positions must be device pointers";
  }
  if ((p.bq == nullptr) != (p.bk == nullptr) || (p.bq == nullptr) != (p.bv == nullptr)) {
    return "bq, bk and bv must be all set or all null";
  }
  if (p.n_tokens < 0 || p.n_head <= 0 || p.n_head_kv <= 0 || p.head_dim <= 0) return "sizes must be positive";
  if (p.head_dim % 2 != 0) return "head_dim must be even";
  if (p.n_rot <= 0 || p.n_rot % 2 != 0 || p.n_rot > p.head_dim) return "n_rot must be even and in 2..head_dim";
  if (p.n_rot / 2 > kMaxPairs) return "n_rot above 2048";
  if (p.n_tokens > 0x7fffffff) return "more than 2^31 tokens";
  if (int64_t{p.n_head + 2 * p.n_head_kv} * (p.head_dim / 2) > int64_t{65535} * kThreads) {
    return "more than 2^24 q/k/v pairs per token (a grid dimension)";
  }
  if (p.n_tokens > 1 && (p.ld_q < int64_t{p.n_head} * p.head_dim || p.ld_kv < int64_t{p.n_head_kv} * p.head_dim)) {
    return "ld_q < n_head * head_dim or ld_kv < n_head_kv * head_dim";
  }
  if (p.inv_freq == nullptr) return "the RoPE table inv_freq must be a device pointer";
  if (!(p.mscale > 0.0f)) return "mscale must be positive";
  return nullptr;
}

cudaError_t qkv_rope_store(const QkvRopeStoreParams& p, cudaStream_t stream) {
  if (qkv_rope_store_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.n_tokens == 0) return cudaSuccess;
  const int64_t slots = int64_t{p.n_head + 2 * p.n_head_kv} * (p.head_dim / 2);
  const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>((slots + kThreads - 1) / kThreads));
  return ga::cuda::detail::launch_after_prior(qkv_rope_store_kernel, grid, dim3(kThreads), 0, stream, p);
}

}  // namespace ga::cuda::engine
