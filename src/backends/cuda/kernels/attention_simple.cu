// The simple attention (attention_simple.h): one block of kAttnThreads per (token, head) keeps all of the
// query's scores in shared memory and makes two passes over them (max, then exp-sum and V). It exists for
// head sizes the tuned attention does not instantiate, not for speed. A sliding window only moves the first
// position the block reads (the scores row holds the window's keys); soft-capping uses tanhf (the accurate one:
// speed does not matter here).
#include "backends/cuda/kernels/attention_simple.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>

#include <cuda_fp8.h>

namespace ga::cuda {
namespace {

constexpr int kAttnThreads = 128;
constexpr int kMaxGridBlocks = 65535;
constexpr int kMaxSimpleHeadDim = 256;
constexpr size_t kDefaultSharedBytes = 48 * 1024;
constexpr size_t kMaxSharedBytes = 220 * 1024;  // below Hopper's 227 KB opt-in limit; less where the GPU allows less

__device__ float block_reduce(float v, bool is_max, float* red) {
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kAttnThreads / 32; ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

// Block (t, h): query token t, head h. Shared: scores [max_positions] then q [head_dim].
// Value d of KV head kvh at cache row `row` of K (is_v false) or V: f16, or an FP8 code times its scale.
template <bool kFp8>
__device__ __forceinline__ float cache_value(const SimpleAttentionParams& p, bool is_v, int64_t row, int kvh, int d) {
  const int64_t i = row * p.n_head_kv * p.head_dim + static_cast<int64_t>(kvh) * p.head_dim + d;
  if constexpr (kFp8) {
    const uint8_t code = (is_v ? p.v_fp8 : p.k_fp8)[i];
    const float value = __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3)));
    return value * (is_v ? p.v_scale : p.k_scale)[row * p.n_head_kv + kvh];
  } else {
    return __half2float((is_v ? p.v : p.k)[i]);
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(kAttnThreads) simple_attention_kernel(const SimpleAttentionParams p) {
  extern __shared__ float smem[];
  __shared__ float red[kAttnThreads / 32];
  __shared__ float partial[kAttnThreads];
  const int t = blockIdx.x, h = blockIdx.y;
  const int hd = p.head_dim;
  const int kvh = h / (p.n_head / p.n_head_kv);
  // The query's run (paged form): the last run starting at or before t (binary search).
  int run = 0;
  int64_t n_kv = 0;
  if (p.block_table != nullptr) {
    int lo = 0, hi = p.n_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.seq_q_start[mid] <= t) lo = mid; else hi = mid - 1;
    }
    run = lo;
    n_kv = static_cast<int64_t>(p.seq_pos0[run]) + (t - p.seq_q_start[run]) + 1;
  } else {
    n_kv = static_cast<int64_t>(*p.pos0) + t + 1;
  }
  // positions [first, n_kv) are visible (a sliding window starts at n_kv - 1 - window_left); score i is position first + i
  const int64_t first = p.window_left >= 0 ? max(n_kv - 1 - p.window_left, int64_t{0}) : 0;
  const int64_t n_vis = n_kv - first;
  const int32_t* table = p.block_table != nullptr ? p.block_table + static_cast<int64_t>(run) * p.block_table_stride
                                                  : nullptr;
  // cache row of position j
  const auto row_of = [&](int64_t j) -> int64_t {
    return table == nullptr ? j : static_cast<int64_t>(table[j / p.block_size]) * p.block_size + j % p.block_size;
  };
  float* scores = smem;
  float* q = smem + p.max_positions;
  const float* q_src = p.q + t * p.q_stride + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += kAttnThreads) q[d] = q_src[d];
  __syncthreads();

  float local_max = -FLT_MAX;
  for (int64_t i = threadIdx.x; i < n_vis; i += kAttnThreads) {
    const int64_t row = row_of(first + i);
    float s = 0.0f;
    for (int d = 0; d < hd; ++d) s += q[d] * cache_value<kFp8>(p, false, row, kvh, d);
    s *= p.scale;
    if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
    scores[i] = s;
    local_max = fmaxf(local_max, s);
  }
  const float m = block_reduce(local_max, true, red);
  float local_sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n_vis; i += kAttnThreads) {
    const float e = __expf(scores[i] - m);
    scores[i] = e;
    local_sum += e;
  }
  const float inv_sum = 1.0f / block_reduce(local_sum, false, red);  // ends with barriers: scores are complete

  float* out = p.out + t * p.out_stride + static_cast<int64_t>(h) * hd;
  if (hd <= kAttnThreads) {
    // groups of hd threads split the positions; thread (g, d) sums positions g, g + G, ...
    const int groups = kAttnThreads / hd;
    const int g = threadIdx.x / hd, d = threadIdx.x % hd;
    float acc = 0.0f;
    if (g < groups) {
      for (int64_t i = g; i < n_vis; i += groups) acc += scores[i] * cache_value<kFp8>(p, true, row_of(first + i), kvh, d);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < hd) {
      float total = 0.0f;
      for (int gg = 0; gg < groups; ++gg) total += partial[gg * hd + threadIdx.x];
      out[threadIdx.x] = total * inv_sum;
    }
  } else {
    for (int d = threadIdx.x; d < hd; d += kAttnThreads) {
      float acc = 0.0f;
      for (int64_t i = 0; i < n_vis; ++i) acc += scores[i] * cache_value<kFp8>(p, true, row_of(first + i), kvh, d);
      out[d] = acc * inv_sum;
    }
  }
}

size_t simple_attention_shared_bytes(const SimpleAttentionParams& p) {
  return static_cast<size_t>(p.max_positions + p.head_dim) * sizeof(float);
}

}  // namespace

// The dynamic shared memory the simple attention may use on the current device: Hopper lets a block opt into
// 227 KB, Ampere 163 KB, Ada 99 KB, Turing only 64 KB, so a context that fits on one GPU must be refused (with a
// reason, before the launch) on another. The kernel's static arrays (red, partial) count against the same limit.
// The answer is a property of the device, so the driver is asked once per device (the check runs at every
// layer's launch), not per call; 0 in the cache means "not asked yet".
namespace {

constexpr int kCachedDevices = 64;
std::atomic<size_t> g_max_shared_by_device[kCachedDevices];

size_t simple_attention_max_shared_bytes() {
  constexpr size_t kStaticBytes = (kAttnThreads / 32 + kAttnThreads) * sizeof(float);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return kDefaultSharedBytes;
  const bool cacheable = device >= 0 && device < kCachedDevices;
  if (cacheable) {
    const size_t known = g_max_shared_by_device[device].load(std::memory_order_relaxed);
    if (known != 0) return known;
  }
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      static_cast<size_t>(optin) <= kStaticBytes) {
    return kDefaultSharedBytes;  // not cached: asked again next time
  }
  const size_t bytes = std::min(kMaxSharedBytes, static_cast<size_t>(optin) - kStaticBytes);
  if (cacheable) g_max_shared_by_device[device].store(bytes, std::memory_order_relaxed);
  return bytes;
}

}  // namespace

const char* simple_attention_unsupported_reason(const SimpleAttentionParams& p) {
  const bool fp8 = p.k_fp8 != nullptr;
  if (p.q == nullptr || p.out == nullptr || (fp8 ? p.v_fp8 == nullptr || p.k_scale == nullptr || p.v_scale == nullptr
                                                 : p.k == nullptr || p.v == nullptr)) {
    return "q, k, v (or the FP8 cache's codes and scales) and out must be device pointers";
  }
  if (p.block_table == nullptr && p.pos0 == nullptr) return "pos0 must be a device pointer (one-sequence form)";
  if (p.block_table != nullptr && (p.seq_q_start == nullptr || p.seq_pos0 == nullptr || p.n_seqs <= 0 ||
                                   p.block_size <= 0 || p.block_table_stride <= 0)) {
    return "the paged form needs seq_q_start, seq_pos0, n_seqs, block_size and block_table_stride";
  }
  if (p.max_positions <= 0) return "max_positions must be positive";
  if (p.n_tokens <= 0 || p.n_head <= 0 || p.n_head_kv <= 0 || p.head_dim <= 0) return "sizes must be positive";
  if (p.n_head % p.n_head_kv != 0) return "n_head must be a multiple of n_head_kv";
  if (p.head_dim > kMaxSimpleHeadDim) return "head_dim above 256";
  if (p.window_left < -1) return "window_left must be -1 (no sliding window) or >= 0";
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f) return "softcap must be 0 (off) or finite and > 0";
  if (p.n_head > kMaxGridBlocks) return "more than 65535 heads";
  if (simple_attention_shared_bytes(p) > simple_attention_max_shared_bytes()) {
    return "context too long for the simple attention on this GPU (its scores row exceeds the shared memory a block "
           "may opt into)";
  }
  return nullptr;
}

cudaError_t simple_attention(const SimpleAttentionParams& p, cudaStream_t stream) {
  if (simple_attention_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  const size_t shared = simple_attention_shared_bytes(p);
  auto* const kernel = p.k_fp8 != nullptr ? simple_attention_kernel<true> : simple_attention_kernel<false>;
  if (shared > kDefaultSharedBytes) {
    const cudaError_t st =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (st != cudaSuccess) return st;
  }
  const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(p.n_head));
  kernel<<<grid, kAttnThreads, shared, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace ga::cuda
