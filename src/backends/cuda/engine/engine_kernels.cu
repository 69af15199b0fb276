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

int kernel_binary_version() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, convert_kernel<false>) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return attr.binaryVersion;
}

}  // namespace ga::cuda::engine
