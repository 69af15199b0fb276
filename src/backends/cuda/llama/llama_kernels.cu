// The small kernels of the CUDA Llama forward (see llama_kernels.h for the contracts).
//
// These are simple on purpose: conversions are a few KB per token next to the weight traffic, so one
// thread per element with grid-stride loops is enough. The dequantization
// reuses the GEMV's block decoders (weight_decode.cuh) and their rounding order (scale * q, then
// + min, as the embedding gather and ga::cpu::dequantize_row do), so an f16 staged matrix differs
// from the CPU's float dequantization only by the final f16 rounding. The simple attention keeps
// all of a query's scores in shared memory (two passes: max, then exp-sum and V); it exists for
// head sizes the tuned attention does not instantiate, not for speed.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/dispatch.cuh"
#include "backends/cuda/llama/llama_kernels.h"

namespace ga::cuda::llama {
namespace {

constexpr int kThreads = 256;
constexpr int kAttnThreads = 128;
constexpr int kMaxGridBlocks = 65535;
constexpr int kMaxSimpleHeadDim = 256;
constexpr size_t kDefaultSharedBytes = 48 * 1024;
constexpr size_t kMaxSharedBytes = 220 * 1024;  // below Hopper's 227 KB opt-in limit; less where the GPU allows less

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxGridBlocks ? (blocks > 0 ? blocks : 1) : kMaxGridBlocks);
}

template <bool kBf16>
__global__ void convert_kernel(const float* src, int64_t ld_src, void* dst, int64_t ld_dst, int64_t n_rows,
                               int64_t n) {
  const int64_t total = n_rows * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    const float v = src[r * ld_src + c];
    if constexpr (kBf16) {
      static_cast<__nv_bfloat16*>(dst)[r * ld_dst + c] = __float2bfloat16_rn(v);
    } else {
      static_cast<__half*>(dst)[r * ld_dst + c] = __float2half_rn(v);
    }
  }
}

// One thread per (row, block, lane part) unit of the weight matrix.
template <class D>
__global__ void dequantize_kernel(const uint8_t* w, int64_t rows, int64_t blocks_per_row, int64_t row_bytes,
                                  int64_t cols, __half* dst) {
  constexpr int kRuns = D::kElems / 4;
  constexpr int kRunsPerGroup = kRuns / D::kGroups;
  const int64_t units_per_row = blocks_per_row * D::kLanesPerBlock;
  const int64_t total = rows * units_per_row;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < total; u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = u / units_per_row;
    const int64_t in_row = u % units_per_row;
    const int64_t blk = in_row / D::kLanesPerBlock;
    const int part = static_cast<int>(in_row % D::kLanesPerBlock);
    float q[D::kElems];
    float scale[D::kGroups];
    float min_v[D::kGroups];
    D::decode(w + r * row_bytes + blk * D::kBlockBytes, part, q, scale, min_v);
    __half* out = dst + r * cols + blk * D::kBlockElems;
#pragma unroll
    for (int run = 0; run < kRuns; ++run) {
      const int g = run / kRunsPerGroup;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float v = q[4 * run + k];
        if constexpr (!D::kUnitScale) v = __fmul_rn(scale[g], v);
        if constexpr (D::kHasMin) v = __fadd_rn(v, min_v[g]);
        out[D::run_offset(part, run) + k] = __float2half_rn(v);
      }
    }
  }
}

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
__global__ void __launch_bounds__(kAttnThreads) simple_attention_kernel(const SimpleAttentionParams p) {
  extern __shared__ float smem[];
  __shared__ float red[kAttnThreads / 32];
  __shared__ float partial[kAttnThreads];
  const int t = blockIdx.x, h = blockIdx.y;
  const int hd = p.head_dim;
  const int kvh = h / (p.n_head / p.n_head_kv);
  const int64_t kv_stride = static_cast<int64_t>(p.n_head_kv) * hd;
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
  for (int64_t j = threadIdx.x; j < n_kv; j += kAttnThreads) {
    const __half* kr = p.k + row_of(j) * kv_stride + static_cast<int64_t>(kvh) * hd;
    float s = 0.0f;
    for (int d = 0; d < hd; ++d) s += q[d] * __half2float(kr[d]);
    s *= p.scale;
    scores[j] = s;
    local_max = fmaxf(local_max, s);
  }
  const float m = block_reduce(local_max, true, red);
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n_kv; j += kAttnThreads) {
    const float e = __expf(scores[j] - m);
    scores[j] = e;
    local_sum += e;
  }
  const float inv_sum = 1.0f / block_reduce(local_sum, false, red);  // ends with barriers: scores are complete

  float* out = p.out + t * p.out_stride + static_cast<int64_t>(h) * hd;
  const __half* v_head = p.v + static_cast<int64_t>(kvh) * hd;
  if (hd <= kAttnThreads) {
    // groups of hd threads split the positions; thread (g, d) sums positions g, g + G, ...
    const int groups = kAttnThreads / hd;
    const int g = threadIdx.x / hd, d = threadIdx.x % hd;
    float acc = 0.0f;
    if (g < groups) {
      for (int64_t j = g; j < n_kv; j += groups) acc += scores[j] * __half2float(v_head[row_of(j) * kv_stride + d]);
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
      for (int64_t j = 0; j < n_kv; ++j) acc += scores[j] * __half2float(v_head[row_of(j) * kv_stride + d]);
      out[d] = acc * inv_sum;
    }
  }
}

__global__ void gather_rows_kernel(const float* src, int64_t ld_src, const int32_t* rows, int64_t n_rows, int64_t n,
                                   float* dst, int64_t ld_dst) {
  const int64_t total = n_rows * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    dst[r * ld_dst + c] = src[static_cast<int64_t>(rows[r]) * ld_src + c];
  }
}

size_t simple_attention_shared_bytes(const SimpleAttentionParams& p) {
  return static_cast<size_t>(p.max_positions + p.head_dim) * sizeof(float);
}

}  // namespace

cudaError_t convert_rows(const float* src, int64_t ld_src, void* dst, int64_t ld_dst, DType dst_type, int64_t n_rows,
                         int64_t n, cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return cudaSuccess;
  if (dst_type == DType::F16) {
    convert_kernel<false><<<grid_for(n_rows * n), kThreads, 0, stream>>>(src, ld_src, dst, ld_dst, n_rows, n);
  } else if (dst_type == DType::BF16) {
    convert_kernel<true><<<grid_for(n_rows * n), kThreads, 0, stream>>>(src, ld_src, dst, ld_dst, n_rows, n);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

bool dequantize_f16_supports(DType type) { return detail::decoder_block_elems(type) != 0; }

cudaError_t dequantize_to_f16(DType type, const void* w, int64_t rows, int64_t cols, __half* dst,
                              cudaStream_t stream, WeightLayout layout) {
  const int block = detail::decoder_block_elems(type);
  if (block == 0 || rows <= 0 || cols <= 0 || cols % block != 0) return cudaErrorInvalidValue;
  if (layout == WeightLayout::kSplitRows) {  // rows are dense here: row_stride = row_bytes
    return detail::split_rows_dequantize_f16(type, w, rows, cols,
                                             static_cast<int64_t>(row_bytes(type, static_cast<uint64_t>(cols))), dst,
                                             stream);
  }
  return detail::visit_decoder(type, [&](auto decoder) -> cudaError_t {
    using D = decltype(decoder);
    const int64_t blocks_per_row = cols / D::kBlockElems;
    const int64_t units = rows * blocks_per_row * D::kLanesPerBlock;
    dequantize_kernel<D><<<grid_for(units), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(w), rows, blocks_per_row, blocks_per_row * D::kBlockBytes, cols, dst);
    return cudaGetLastError();
  });
}

cudaError_t gather_rows(const float* src, int64_t ld_src, const int32_t* rows, int64_t n_rows, int64_t n, float* dst,
                        int64_t ld_dst, cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return cudaSuccess;
  if (src == nullptr || rows == nullptr || dst == nullptr || ld_src < n || ld_dst < n) return cudaErrorInvalidValue;
  gather_rows_kernel<<<grid_for(n_rows * n), kThreads, 0, stream>>>(src, ld_src, rows, n_rows, n, dst, ld_dst);
  return cudaGetLastError();
}

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
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.out == nullptr) {
    return "q, k, v and out must be device pointers";
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
  if (shared > kDefaultSharedBytes) {
    const cudaError_t st = cudaFuncSetAttribute(simple_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(shared));
    if (st != cudaSuccess) return st;
  }
  const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(p.n_head));
  simple_attention_kernel<<<grid, kAttnThreads, shared, stream>>>(p);
  return cudaGetLastError();
}

int kernel_binary_version() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, convert_kernel<false>) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return attr.binaryVersion;
}

}  // namespace ga::cuda::llama
