// Small kernels the CUDA Llama forward needs beyond kernels/ (gemv, ops, attention): the fused
// bias + RoPE + f16 KV-cache store, activation conversion for the cuBLAS prefill, the
// dequantization of a weight matrix into an f16 scratch (the prefill's first version for quantized weights) and a simple
// attention for head sizes the tuned kernel does not take.
//
// Same conventions as kernels/ops.h: device pointers, sizes in elements, the stream last, the launch
// status back. Positions are read from device memory so a captured decode graph replays unchanged.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/weight_layout.h"
#include "gpu_accel/dtype.h"

namespace ga::cuda::llama {

// For each token t at position positions[t] (qkv_rope_store.cu):
//   q[t] = rope(q[t] + bq)                          in place, f32
//   k_cache[positions[t]] = half(rope(k[t] + bk))   k itself is left unchanged
//   v_cache[positions[t]] = half(v[t] + bv)
// Biases are all null or all set. rope as kernels/ops.h (Normal or NeoX pairs over the first n_rot
// dims, angle pos * freq_scale * base^(-2i/n_rot) / freq_factors[i]). q, k, v may be slices of one
// [n_tokens][q|k|v] buffer (the fused QKV projection): then ld_q == ld_kv is that buffer's stride.
struct QkvRopeStoreParams {
  float* q = nullptr;              // [n_tokens][n_head][head_dim], ld_q floats between tokens
  const float* k = nullptr;        // [n_tokens][n_head_kv][head_dim], ld_kv floats between tokens
  const float* v = nullptr;        // same layout as k
  int64_t ld_q = 0, ld_kv = 0;
  const float* bq = nullptr;       // [n_head * head_dim] or null
  const float* bk = nullptr;       // [n_head_kv * head_dim] or null
  const float* bv = nullptr;
  __half* k_cache = nullptr;       // [n_ctx][n_head_kv][head_dim]
  __half* v_cache = nullptr;
  const int32_t* positions = nullptr;  // [n_tokens], device memory
  int64_t n_tokens = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  bool neox = false;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // [n_rot / 2] or null
};
const char* qkv_rope_store_unsupported_reason(const QkvRopeStoreParams& p);
cudaError_t qkv_rope_store(const QkvRopeStoreParams& p, cudaStream_t stream);

// dst[r][i] = src[r][i] rounded to F16 or BF16 (dst_type), rows ld_src / ld_dst elements apart.
cudaError_t convert_rows(const float* src, int64_t ld_src, void* dst, int64_t ld_dst, DType dst_type, int64_t n_rows,
                         int64_t n, cudaStream_t stream);

// dst[r][c] = half(W[r][c]) for a weight matrix of any type the GEMV decoders read (rows packed,
// row_bytes(type, cols) apart). The weight buffer needs 16 readable bytes after its end.
bool dequantize_f16_supports(DType type);
cudaError_t dequantize_to_f16(DType type, const void* w, int64_t rows, int64_t cols, __half* dst, cudaStream_t stream,
                              WeightLayout layout = WeightLayout::kGguf);

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
