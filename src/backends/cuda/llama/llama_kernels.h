// Small kernels the CUDA Llama forward needs beyond kernels/ (gemv, ops, attention): bias add, the
// f16 KV-cache store, activation conversion for the cuBLAS prefill, the dequantization of a weight
// matrix into an f16 scratch (the prefill's first version for quantized weights) and a simple
// attention for head sizes the tuned kernel does not take.
//
// Same conventions as kernels/ops.h: device pointers, sizes in elements, the stream last, the launch
// status back. Positions are read from device memory so a captured decode graph replays unchanged.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu_accel/dtype.h"

namespace ga::cuda::llama {

// x[t][i] += bias[i] for t < n_rows, i < n.  x: [n_rows][n] with row stride ldx.
cudaError_t add_bias(float* x, const float* bias, int64_t n_rows, int64_t n, int64_t ldx, cudaStream_t stream);

// cache[positions[t]][i] = half(src[t][i]) for t < n_tokens, i < kv_dim (cache rows kv_dim apart).
cudaError_t store_kv_f16(const float* src, int64_t ld_src, __half* cache, int64_t kv_dim, const int32_t* positions,
                         int64_t n_tokens, cudaStream_t stream);

// dst[r][i] = src[r][i] rounded to F16 or BF16 (dst_type), rows ld_src / ld_dst elements apart.
cudaError_t convert_rows(const float* src, int64_t ld_src, void* dst, int64_t ld_dst, DType dst_type, int64_t n_rows,
                         int64_t n, cudaStream_t stream);

// dst[r][c] = half(W[r][c]) for a weight matrix of any type the GEMV decoders read (rows packed,
// row_bytes(type, cols) apart). The weight buffer needs 16 readable bytes after its end.
bool dequantize_f16_supports(DType type);
cudaError_t dequantize_to_f16(DType type, const void* w, int64_t rows, int64_t cols, __half* dst, cudaStream_t stream);

// Causal GQA attention, any head_dim <= 256 (one block per (token, head), scores in shared memory).
// Layouts as kernels/attention.h; query t sits at position *pos0 + t. Used when the tuned kernel
// reports the shape unsupported (tiny test models: head_dim 8, 32).
struct SimpleAttentionParams {
  const float* q = nullptr;        // [n_tokens][n_head][head_dim], q_stride floats between tokens
  int64_t q_stride = 0;
  const __half* k = nullptr;       // [n_ctx][n_head_kv][head_dim]
  const __half* v = nullptr;
  float* out = nullptr;            // [n_tokens][n_head][head_dim], out_stride floats between tokens
  int64_t out_stride = 0;
  int n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  const int32_t* pos0 = nullptr;   // device scalar
  int64_t max_positions = 0;       // the cache capacity (sizes the shared memory)
  float scale = 1.0f;
};
const char* simple_attention_unsupported_reason(const SimpleAttentionParams& p);
cudaError_t simple_attention(const SimpleAttentionParams& p, cudaStream_t stream);

// The compute capability the kernels of this library were compiled for on the current device
// (cudaFuncAttributes::binaryVersion of one of them, e.g. 90), or a negative value on failure.
int kernel_binary_version();

}  // namespace ga::cuda::llama
