// Small kernels the CUDA engine needs beyond kernels/ (gemv, ops, attention): the fused
// bias + RoPE + f16 KV-cache store, activation conversion for the cuBLAS prefill, the
// dequantization of a weight matrix into an f16 scratch (the prefill's first version for quantized weights). (The simple
// attention for head sizes the tuned kernel does not take is kernels/attention_simple.h.)
//
// Same conventions as kernels/ops.h: device pointers, sizes in elements, the stream last, the launch
// status back. Positions are read from device memory so a captured decode graph replays unchanged.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/weight_layout.h"
#include "gpu_accel/dtype.h"

namespace ga::cuda::engine {

// For each token t at position positions[t] (qkv_rope_store.cu), with row = slots ? slots[t] : positions[t]:
//   q[t] = rope(q[t] + bq)                          in place, f32
//   k_cache[row] = half(rope(k[t] + bk))            k itself is left unchanged
//   v_cache[row] = half(v[t] + bv)
// or, for an FP8 cache (k_codes set; k_cache / v_cache null), per KV head h of the row: the head's values x (as
// above, in f32), scale = amax(|x|) / 448 (1 for an all-zero head) into k_scales[row][h], and the codes
// e4m3(x / scale) (IEEE division, round to nearest even, saturating) into k_codes[row][h]: the bytes of the CPU's
// cpu::store_kv_fp8 for the same x (tests/cuda/test_cuda_fp8_kv.cpp checks them). Same for V.
// Biases are all null or all set. rope: Normal or NeoX pairs over the first n_rot dims, pair i turned by
// positions[t] * inv_freq[i] (a table of the architecture's RoPE, step::RopeTable, in device memory, double:
// every scaling scheme is a different table) and the rotated values multiplied by mscale (YaRN's / LongRoPE's
// attention factor; 1 otherwise). q, k, v may be slices of one [n_tokens][q|k|v] buffer (the fused QKV
// projection): then ld_q == ld_kv is that buffer's stride.
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
  uint8_t* k_codes = nullptr;      // FP8 cache: [n_ctx][n_head_kv][head_dim] E4M3 codes (head_dim <= 256)
  uint8_t* v_codes = nullptr;
  float* k_scales = nullptr;       // FP8 cache: [n_ctx][n_head_kv]
  float* v_scales = nullptr;
  const int32_t* positions = nullptr;  // [n_tokens], device memory
  // [n_tokens] device memory or null: when set, token t's K/V go to cache row slots[t] (a slot of a
  // paged KV pool) while RoPE still uses positions[t]; a negative slot stores nothing (a padding
  // token of a fixed-size batch). Null: row positions[t] (the contiguous per-sequence cache).
  const int32_t* slots = nullptr;
  int64_t n_tokens = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  bool neox = false;
  const double* inv_freq = nullptr;  // [n_rot / 2], device memory
  float mscale = 1.0f;
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

// dst[i][c] = src[rows[i]][c] for i < n_rows, c < n (rows: device [n_rows]): the rows of a batch
// whose logits are wanted, gathered for one classifier matmul.
cudaError_t gather_rows(const float* src, int64_t ld_src, const int32_t* rows, int64_t n_rows, int64_t n, float* dst,
                        int64_t ld_dst, cudaStream_t stream);

// The compute capability the kernels of this library were compiled for on the current device
// (cudaFuncAttributes::binaryVersion of one of them, e.g. 90), or a negative value on failure.
int kernel_binary_version();

}  // namespace ga::cuda::engine
