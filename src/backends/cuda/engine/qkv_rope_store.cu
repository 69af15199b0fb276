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
//
// The FP8 cache (p.k_codes set): a head's codes share one scale, its largest magnitude / 448, so each K and V head
// is one warp (after the q heads' threads, rounded up to whole warps): each lane makes up to 4 of the head's pairs
// (head_dim <= 256) as above, the warp takes the amax, and each lane writes its codes, x / scale by the IEEE
// division rounded to nearest even with saturation, as the host's quantize_e4m3 (and x_fp8.cu): the CPU's bytes.
#include <cuda_fp8.h>

#include <cmath>

#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/step_math.cuh"
#include "backends/cuda/engine/engine_kernels.h"

namespace ga::cuda::engine {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPairs = 1024;  // n_rot / 2, as kernels/rope.cu
constexpr int kFp8MaxPairsPerLane = 4;  // FP8 cache: a warp per head of up to 256 dims
constexpr float kE4m3Max = 448.0f;      // the host's kE4m3Max (backends/cpu/quant.h)

// Threads of the q heads in the FP8 form: one per pair, rounded up to whole warps (the K/V warps follow).
__host__ __device__ inline int64_t fp8_q_span(const QkvRopeStoreParams& p) {
  return (int64_t{p.n_head} * (p.head_dim / 2) + 31) / 32 * 32;
}

// One K or V head of token t into the FP8 cache row (the warp of lanes 0..31 together; file comment).
__device__ __forceinline__ void store_head_fp8(const QkvRopeStoreParams& p, int64_t t, int64_t pos, int64_t cache_row,
                                               int kv_head, bool is_v) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int half_hd = p.head_dim / 2;
  const int64_t o = int64_t{kv_head} * p.head_dim;
  const float* const x = (is_v ? p.v + t * p.ld_kv : p.k + t * p.ld_kv) + o;
  const float* const bias = is_v ? p.bv : p.bk;
  float x0[kFp8MaxPairsPerLane], x1[kFp8MaxPairsPerLane];
  int d0[kFp8MaxPairsPerLane], d1[kFp8MaxPairsPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kFp8MaxPairsPerLane; ++i) {
    const int pair = lane + 32 * i;
    d0[i] = d1[i] = -1;
    x0[i] = x1[i] = 0.0f;
    if (pair >= half_hd) continue;
    const ga::cuda::detail::RopePair rp =
        is_v ? ga::cuda::detail::RopePair{2 * pair, 2 * pair + 1, false, 1.0f, 0.0f}
             : ga::cuda::detail::rope_pair(pair, p.n_rot, p.neox, pos, p.inv_freq, p.mscale);
    d0[i] = rp.d0;
    d1[i] = rp.d1;
    float a = x[rp.d0], b = x[rp.d1];
    if (bias != nullptr) {
      a += bias[o + rp.d0];
      b += bias[o + rp.d1];
    }
    if (!is_v) ga::cuda::detail::rope_apply(rp, a, b);
    x0[i] = a;
    x1[i] = b;
    amax = fmaxf(amax, fmaxf(fabsf(a), fabsf(b)));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float scale = amax > 0.0f ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
  const int64_t kv_dim = int64_t{p.n_head_kv} * p.head_dim;
  uint8_t* const codes = (is_v ? p.v_codes : p.k_codes) + cache_row * kv_dim + o;
#pragma unroll
  for (int i = 0; i < kFp8MaxPairsPerLane; ++i) {
    if (d0[i] < 0) continue;
    codes[d0[i]] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x0[i], scale), __NV_SATFINITE, __NV_E4M3));
    codes[d1[i]] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x1[i], scale), __NV_SATFINITE, __NV_E4M3));
  }
  if (lane == 0) (is_v ? p.v_scales : p.k_scales)[cache_row * p.n_head_kv + kv_head] = scale;
}

template <bool kFp8>
__global__ void __launch_bounds__(kThreads) qkv_rope_store_kernel(const QkvRopeStoreParams p) {
  ga::cuda::detail::pdl_wait_prior_grid();  // pdl.cuh: q/k/v of the GEMV are ready from here
  ga::cuda::detail::pdl_allow_dependents();
  const int64_t t = blockIdx.x;
  const int half_hd = p.head_dim / 2;
  const int64_t kv_dim = int64_t{p.n_head_kv} * p.head_dim;
  const int64_t s = int64_t{blockIdx.y} * kThreads + threadIdx.x;
  const int64_t pos = p.positions[t];
  const int64_t cache_row = p.slots != nullptr ? int64_t{p.slots[t]} : pos;
  if constexpr (kFp8) {
    const int64_t q_span = fp8_q_span(p);
    if (s >= q_span) {  // a K or V head's warp (whole warps: q_span and kThreads are multiples of 32)
      const int64_t w = (s - q_span) / 32;
      if (w >= 2 * p.n_head_kv || cache_row < 0) return;  // past the heads, or a padding token: nothing to store
      store_head_fp8(p, t, pos, cache_row, static_cast<int>(w % p.n_head_kv), w >= p.n_head_kv);
      return;
    }
    if (s >= int64_t{p.n_head} * half_hd) return;  // the q span's padding lanes
  }
  const int64_t slots = int64_t{p.n_head + 2 * p.n_head_kv} * half_hd;  // q heads, then k heads, then v heads
  if (s >= slots) return;
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
  const bool fp8 = p.k_codes != nullptr;
  if (fp8 ? p.v_codes == nullptr || p.k_scales == nullptr || p.v_scales == nullptr || p.k_cache != nullptr ||
                p.v_cache != nullptr
          : p.k_cache == nullptr || p.v_cache == nullptr || p.v_codes != nullptr) {
    return "the cache is f16 (k_cache, v_cache) or FP8 (k_codes, v_codes, k_scales, v_scales), one of them complete";
  }
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.positions == nullptr) {
    return "q, k, v, the caches and positions must be device pointers";
  }
  if (fp8 && p.head_dim > 2 * 32 * kFp8MaxPairsPerLane) return "head_dim above 256 with an FP8 cache";
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
  const bool fp8 = p.k_codes != nullptr;
  const int64_t slots = fp8 ? fp8_q_span(p) + int64_t{2} * p.n_head_kv * 32
                            : int64_t{p.n_head + 2 * p.n_head_kv} * (p.head_dim / 2);
  const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>((slots + kThreads - 1) / kThreads));
  return fp8 ? ga::cuda::detail::launch_after_prior(qkv_rope_store_kernel<true>, grid, dim3(kThreads), 0, stream, p)
             : ga::cuda::detail::launch_after_prior(qkv_rope_store_kernel<false>, grid, dim3(kThreads), 0, stream, p);
}

}  // namespace ga::cuda::engine
