// Split-row layout (weight_layout.h): the in-place repack done once at upload, and the two readers
// besides the GEMV (embedding gather, f16 dequantizer for the prefill GEMM).
//
// The repack runs one CTA per row: the row's GGUF bytes are copied into shared memory, then written
// back in split order, so it needs no second buffer (a row is at most kMaxRowBytes; longer rows are
// refused and stay in GGUF order). It is a one-time cost (~ms for a 7B model), so it is written for
// clarity, not speed. The readers form each weight as d * q with one rounding, like
// ga::cpu::dequantize_row, so both are bit-exact with the CPU on the original blocks.
#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/split_rows.cuh"
#include "backends/cuda/kernels/weight_layout.h"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kRepackThreads = 256;
constexpr int64_t kMaxRowBytes = 48 * 1024;  // dynamic shared memory without an opt-in
constexpr int kThreads = 256;

template <class D>
__global__ void __launch_bounds__(kRepackThreads) split_rows_kernel(uint8_t* w, int64_t row_stride, int64_t blocks) {
  using S = SplitRows<D>;
  using Block = typename S::Block;
  extern __shared__ uint4 row_copy[];
  uint8_t* row = w + static_cast<int64_t>(blockIdx.x) * row_stride;
  const int64_t bytes = blocks * static_cast<int64_t>(sizeof(Block));  // a multiple of 16 (split_rows_supported)
  for (int64_t i = threadIdx.x; i < bytes / 16; i += kRepackThreads) row_copy[i] = reinterpret_cast<const uint4*>(row)[i];
  __syncthreads();
  const auto* src = reinterpret_cast<const uint8_t*>(row_copy);
  for (int64_t i = threadIdx.x; i < blocks * S::kCodeBytes; i += kRepackThreads) {
    const int64_t b = i / S::kCodeBytes;
    row[i] = src[b * static_cast<int64_t>(sizeof(Block)) + offsetof(Block, qs) + i % S::kCodeBytes];
  }
  uint8_t* scales = row + split_scales_offset<D>(blocks);
  constexpr int kScale = kSplitScaleBytes<D>;
  for (int64_t i = threadIdx.x; i < kScale * blocks; i += kRepackThreads) {
    scales[i] = src[(i / kScale) * static_cast<int64_t>(sizeof(Block)) + offsetof(Block, d) + i % kScale];
  }
}

template <class D>
__global__ void split_embedding_kernel(const uint8_t* w, int64_t n_rows_w, int64_t cols, int64_t row_stride,
                                       const int32_t* ids, float* out, int64_t ld_out) {
  const int64_t token = blockIdx.x;
  const int32_t id = ids[token];
  const int64_t blocks = cols / SplitRows<D>::kBlockWeights;
  for (int64_t k = blockIdx.y * int64_t{kThreads} + threadIdx.x; k < cols; k += int64_t{gridDim.y} * kThreads) {
    out[token * ld_out + k] = (id < 0 || id >= n_rows_w) ? NAN : split_weight<D>(w + id * row_stride, blocks, k);
  }
}

// One thread per 16-byte chunk of codes (Q8_0 and F8_B128: 16 weights, Q4_0: 32): one 16-byte load, one scale,
// 2 or 4 16-byte stores of f16 (one weight per thread measured 14369 vs 15361 tok/s of 7B Q8_0 pp512
// against the GGUF-order dequantizer; the prefill GEMM waits on this pass for every matrix).
template <class D>
__global__ void split_dequantize_kernel(const uint8_t* w, int64_t rows, int64_t cols, int64_t row_stride,
                                        __half* dst) {
  using S = SplitRows<D>;
  constexpr int kW = S::kChunkWeights;
  const int64_t blocks = cols / S::kBlockWeights;
  const int64_t chunks_per_row = cols / kW;
  const int64_t total = rows * chunks_per_row;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / chunks_per_row;
    const int64_t chunk = i - r * chunks_per_row;
    const uint8_t* row = w + r * row_stride;
    const uint4 codes = *reinterpret_cast<const uint4*>(row + 16 * chunk);
    const auto* code_bytes = reinterpret_cast<const uint8_t*>(&codes);
    const float d = split_scale<D>(row, blocks, chunk * kW / S::kBlockWeights);
    uint4 out[kW / 8];
    auto* halves = reinterpret_cast<__half*>(out);
#pragma unroll
    for (int k = 0; k < kW; ++k) halves[k] = __float2half_rn(__fmul_rn(S::code(code_bytes, k), d));
    uint4* dst_chunk = reinterpret_cast<uint4*>(dst + r * cols + chunk * kW);  // cols % 256 == 0: 16-byte aligned
#pragma unroll
    for (int j = 0; j < kW / 8; ++j) dst_chunk[j] = out[j];
  }
}

// out[b * rows + r] = the scale of block b of F8_B128 split row r: one thread per (row, block), consecutive threads
// take consecutive rows so that the stores are contiguous.
__global__ void f8_gemm_scales_kernel(const uint8_t* w, int64_t rows, int64_t blocks, int64_t row_stride, float* out) {
  const int64_t total = rows * blocks;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    const int64_t b = i / rows;
    const int64_t r = i - b * rows;
    out[i] = split_scale<DecodeF8B128>(w + r * row_stride, blocks, b);
  }
}

// Calls f(DecodeX{}) for the split-row types, cudaErrorInvalidValue otherwise.
template <class F>
cudaError_t visit_split(DType type, F&& f) {
  switch (type) {
    case DType::Q4_0: return f(DecodeQ4_0{});
    case DType::Q8_0: return f(DecodeQ8_0{});
    case DType::F8_B128: return f(DecodeF8B128{});
    default: return cudaErrorInvalidValue;
  }
}

unsigned grid_for(int64_t n) {
  const int64_t g = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(g < 4096 ? (g < 1 ? 1 : g) : 4096);
}

}  // namespace

cudaError_t split_rows_embedding(DType type, const void* w, int64_t n_rows_w, int64_t cols, int64_t row_stride,
                                 const int32_t* ids, int64_t n_ids, float* out, int64_t ld_out, cudaStream_t stream) {
  if (!split_rows_supported(type, cols) || n_ids > 0x7fffffff) return cudaErrorInvalidValue;
  if (n_ids == 0) return cudaSuccess;
  return visit_split(type, [&](auto decoder) -> cudaError_t {
    const int64_t segments = (cols + kThreads - 1) / kThreads;
    const dim3 grid(static_cast<unsigned>(n_ids), static_cast<unsigned>(segments < 65535 ? segments : 65535));
    split_embedding_kernel<decltype(decoder)><<<grid, kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(w), n_rows_w, cols, row_stride, ids, out, ld_out);
    return cudaGetLastError();
  });
}

cudaError_t split_rows_dequantize_f16(DType type, const void* w, int64_t rows, int64_t cols, int64_t row_stride,
                                      void* dst_f16, cudaStream_t stream) {
  if (!split_rows_supported(type, cols) || rows <= 0 || row_stride % 16 != 0) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(dst_f16) % 16 != 0) {
    return cudaErrorInvalidValue;  // 16-byte loads of codes and stores of f16
  }
  return visit_split(type, [&](auto decoder) -> cudaError_t {
    const int64_t chunks = rows * (cols / SplitRows<decltype(decoder)>::kChunkWeights);
    split_dequantize_kernel<decltype(decoder)><<<grid_for(chunks), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(w), rows, cols, row_stride, static_cast<__half*>(dst_f16));
    return cudaGetLastError();
  });
}

cudaError_t split_rows_f8_gemm_scales(const void* w, int64_t rows, int64_t cols, int64_t row_stride, float* out,
                                      cudaStream_t stream) {
  if (!split_rows_supported(DType::F8_B128, cols) || rows <= 0 || row_stride % 16 != 0 || w == nullptr ||
      out == nullptr) {
    return cudaErrorInvalidValue;
  }
  const int64_t blocks = cols / layout::kQKF8;
  f8_gemm_scales_kernel<<<grid_for(rows * blocks), kThreads, 0, stream>>>(static_cast<const uint8_t*>(w), rows, blocks,
                                                                         row_stride, out);
  return cudaGetLastError();
}

}  // namespace detail

bool split_rows_supported(DType type, int64_t cols) {
  if (type != DType::Q4_0 && type != DType::Q8_0 && type != DType::F8_B128) return false;
  const auto block = static_cast<int64_t>(traits(type).block_size);
  return cols > 0 && cols % block == 0 && row_bytes(type, static_cast<uint64_t>(cols)) % 16 == 0;
}

bool gemv_prefers_split_rows(DType type, int64_t cols) {
  // Q8_0 and F8_B128 only: Q4_0 split rows measured no faster than its GGUF-order int8 path, which stays (H200
  // runs of 2026-11-22; their logs are in git history under docs/results/); F8_B128 in GGUF order (132-byte
  // blocks) is staged and decoded per byte, its split rows take the tensor-core GEMV (gemv_split_f8.cuh)
  return (type == DType::Q8_0 || type == DType::F8_B128) && split_rows_supported(type, cols) &&
         static_cast<int64_t>(row_bytes(type, static_cast<uint64_t>(cols))) <= detail::kMaxRowBytes;
}

const char* split_rows_unsupported_reason(DType type, int64_t rows, int64_t cols, int64_t row_stride, const void* w) {
  if (type != DType::Q4_0 && type != DType::Q8_0 && type != DType::F8_B128) {
    return "split rows exist for Q4_0, Q8_0 and F8_B128 only";
  }
  if (rows <= 0 || cols <= 0 || rows > 0x7fffffff) return "rows must be in 1..2^31-1 and cols positive";
  if (!split_rows_supported(type, cols)) {
    return "a row must be whole 16-byte chunks (cols a multiple of 256; F8_B128: of 512)";
  }
  const auto rb = static_cast<int64_t>(row_bytes(type, static_cast<uint64_t>(cols)));
  if (rb > detail::kMaxRowBytes) return "rows above 48 KiB are not split (the repack stages a row in shared memory)";
  if (row_stride < rb || row_stride % 16 != 0) return "row_stride must be >= row_bytes and a multiple of 16";
  if (w == nullptr || reinterpret_cast<uintptr_t>(w) % 16 != 0) return "w must be a 16-byte aligned device pointer";
  return nullptr;
}

cudaError_t split_rows_in_place(DType type, void* w, int64_t rows, int64_t cols, int64_t row_stride,
                                cudaStream_t stream) {
  if (split_rows_unsupported_reason(type, rows, cols, row_stride, w) != nullptr) return cudaErrorInvalidValue;
  return detail::visit_split(type, [&](auto decoder) -> cudaError_t {
    const auto smem = static_cast<size_t>(row_bytes(type, static_cast<uint64_t>(cols)));
    detail::split_rows_kernel<decltype(decoder)><<<static_cast<unsigned>(rows), detail::kRepackThreads, smem, stream>>>(
        static_cast<uint8_t*>(w), row_stride, cols / detail::SplitRows<decltype(decoder)>::kBlockWeights);
    return cudaGetLastError();
  });
}

}  // namespace ga::cuda
