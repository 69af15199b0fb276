// The small kernels of the CUDA engine (see engine_kernels.h for the contracts).
//
// These are simple on purpose: conversions are a few KB per token next to the weight traffic, so one
// thread per element with grid-stride loops is enough. The dequantization
// reuses the GEMV's block decoders (weight_decode.cuh) and their rounding order (scale * q, then
// + min, as the embedding gather and ga::cpu::dequantize_row do), so an f16 staged matrix differs
// from the CPU's float dequantization only by the final f16 rounding.
#include <cuda_bf16.h>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/dispatch.cuh"
#include "backends/cuda/engine/engine_kernels.h"

namespace ga::cuda::engine {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxGridBlocks = 65535;

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

// One thread per (row, block, lane part) unit of the weight matrix: blockIdx.x is the row, blockIdx.y * kThreads +
// threadIdx.x the unit in it, so the index math is 32-bit shifts (a grid-stride loop over all units paid two 64-bit
// divisions per 16 weights, more than the decode itself), neighbouring threads decode neighbouring parts of one
// block (its bytes come from L1 after the first), and each run of 4 weights is one 8-byte store, two adjacent runs
// one 16-byte store.
template <class D>
__global__ void dequantize_kernel(const uint8_t* w, int blocks_per_row, int64_t row_bytes, int64_t cols, __half* dst) {
  constexpr int kRuns = D::kElems / 4;
  constexpr int kRunsPerGroup = kRuns / D::kGroups;
  const int unit = static_cast<int>(blockIdx.y) * kThreads + static_cast<int>(threadIdx.x);
  if (unit >= blocks_per_row * D::kLanesPerBlock) return;
  const int64_t r = blockIdx.x;
  const int blk = unit / D::kLanesPerBlock;
  const int part = unit % D::kLanesPerBlock;
  float q[D::kElems];
  float scale[D::kGroups];
  float min_v[D::kGroups];
  D::decode(w + r * row_bytes + static_cast<int64_t>(blk) * D::kBlockBytes, part, q, scale, min_v);
  __half* out = dst + r * cols + static_cast<int64_t>(blk) * D::kBlockElems;
  __half2 h[D::kElems / 2];
#pragma unroll
  for (int run = 0; run < kRuns; ++run) {
    const int g = run / kRunsPerGroup;
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[k] = q[4 * run + k];
      if constexpr (!D::kUnitScale) v[k] = __fmul_rn(scale[g], v[k]);
      if constexpr (D::kHasMin) v[k] = __fadd_rn(v[k], min_v[g]);
    }
    h[2 * run] = __halves2half2(__float2half_rn(v[0]), __float2half_rn(v[1]));
    h[2 * run + 1] = __halves2half2(__float2half_rn(v[2]), __float2half_rn(v[3]));
  }
#pragma unroll
  for (int run = 0; run < kRuns; ++run) {
    const int offset = D::run_offset(part, run);
    if (run + 1 < kRuns && offset % 8 == 0 && D::run_offset(part, run + 1) == offset + 4) {
      uint4 pair;
      pair.x = *reinterpret_cast<const uint32_t*>(&h[2 * run]);
      pair.y = *reinterpret_cast<const uint32_t*>(&h[2 * run + 1]);
      pair.z = *reinterpret_cast<const uint32_t*>(&h[2 * run + 2]);
      pair.w = *reinterpret_cast<const uint32_t*>(&h[2 * run + 3]);
      *reinterpret_cast<uint4*>(out + offset) = pair;
      ++run;
    } else {
      uint2 one;
      one.x = *reinterpret_cast<const uint32_t*>(&h[2 * run]);
      one.y = *reinterpret_cast<const uint32_t*>(&h[2 * run + 1]);
      *reinterpret_cast<uint2*>(out + offset) = one;
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
  // 8- and 16-byte stores of f16 runs: rows of dst start 16-byte aligned (cols is a multiple of the block of 8+)
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  return detail::visit_decoder(type, [&](auto decoder) -> cudaError_t {
    using D = decltype(decoder);
    const int64_t blocks_per_row = cols / D::kBlockElems;
    const int64_t units_per_row = blocks_per_row * D::kLanesPerBlock;
    if (units_per_row > int64_t{65535} * kThreads) return cudaErrorInvalidValue;
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((units_per_row + kThreads - 1) / kThreads));
    dequantize_kernel<D><<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t*>(w),
                                                        static_cast<int>(blocks_per_row),
                                                        blocks_per_row * D::kBlockBytes, cols, dst);
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

int kernel_binary_version() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, convert_kernel<false>) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return attr.binaryVersion;
}

}  // namespace ga::cuda::engine
