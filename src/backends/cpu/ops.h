// CPU reference ops of the Llama-family forward pass: RMSNorm, RoPE, softmax, SwiGLU, residual
// add, embedding lookup and causal GQA attention over a KV cache.
//
// The ops take raw pointers and sizes (no tensor objects) so the forward pass can run them on
// scratch buffers it allocated once; none of them allocates. All math is float32 with float32
// accumulators except where a longer sum would lose precision (RMSNorm's mean of squares and the
// softmax denominator use double), because the forward is checked against a float64 reference to
// 1e-5. Only attention is threaded: the matmuls (the bulk of the work) are threaded in quant.h,
// and the other ops are linear in the activations, which are tiny next to the weights.
#pragma once

#include <cstdint>

#include "gpu_accel/dtype.h"

namespace ga {
class ThreadPool;
}

namespace ga::cpu {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] for i < n. out may alias x.
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps);

// out[i] = (x[i] - mean) / sqrt(var + eps) * w[i] + b[i] over n values (biased variance; sums in double).
// w == nullptr: no affine part (b is then ignored). out may alias x.
void layer_norm(const float* x, const float* w, const float* b, float* out, int64_t n, float eps);

// Numerically stable in-place softmax over n values (the max is subtracted before exp).
void softmax(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU with PyTorch's tanh approximation, Gemma's
// gelu_pytorch_tanh): gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). out may alias.
void geglu_tanh(const float* gate, const float* up, float* out, int64_t n);

// x[i] = cap * tanh(x[i] / cap) (Gemma 2's logit soft-capping); cap > 0.
void softcap(float* x, int64_t n, float cap);

// x[i] += y[i].
void add_inplace(float* x, const float* y, int64_t n);

// dst[0..n) = row `row` of a [rows][n] matrix of `type` (the embedding lookup for any weight type).
void embedding_row(DType type, const uint8_t* data, int64_t n, int64_t row, float* dst);

enum class RopeLayout {
  AdjacentPairs,  // rotate (x[2i], x[2i+1]): llama.cpp's "normal" mode (GGUF llama)
  Halves,         // rotate (x[i], x[i + n_rot/2]): "NeoX" mode, Hugging Face's rotate_half (qwen2)
};

// Rotation angles for one position: theta_i = pos * inv_freq[i] for i < n_rot/2.
// cos_out/sin_out: [n_rot/2]. inv_freq already holds base^(-2i/n_rot) / freq_factor[i] / linear factor;
// it is double because pos * inv_freq reaches thousands of radians at long contexts.
void rope_angles(const double* inv_freq, int64_t half, double pos, float* cos_out, float* sin_out);

// Rotates the first n_rot dims of each of n_heads vectors of head_dim floats at x (contiguous:
// [n_heads][head_dim]); dims >= n_rot pass through. cos/sin: [n_rot/2] from rope_angles.
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_v, const float* sin_v,
          RopeLayout layout);

// Causal grouped-query attention of n_tokens queries from any number of sequences over a paged KV
// cache. Keys and values live in fixed-size blocks of a pool shared by all sequences; a sequence's
// block table lists its blocks in position order, so position j of that sequence is row j % block_size
// of block table[j / block_size]. Query t (at position positions[t] of its sequence) sees positions
// 0 .. positions[t] of that sequence (the cache already holds the new tokens' keys and values).
// Query head h reads KV head h / (n_head / n_head_kv).
struct PagedAttentionParams {
  int64_t n_tokens = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;                           // usually 1/sqrt(head_dim)
  const float* q = nullptr;                     // [n_tokens][n_head][head_dim]
  int64_t q_stride = 0;                         // floats between tokens of q (>= n_head * head_dim)
  const int64_t* positions = nullptr;           // [n_tokens]
  const int32_t* const* block_tables = nullptr;  // [n_tokens]: the block table of token t's sequence
  int64_t block_size = 0;                       // positions per block
  DType kv_type = DType::F32;                   // F32, F16 or F8_E4M3
  const void* k_blocks = nullptr;               // [n_blocks][block_size][n_head_kv][head_dim] of kv_type
  const void* v_blocks = nullptr;               // [n_blocks][block_size][n_head_kv][head_dim] of kv_type
  // F8_E4M3 only: [n_blocks][block_size][n_head_kv] scales; a cached value is e4m3(code) * scale (kv_pool.h)
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  float* out = nullptr;                         // [n_tokens][n_head][head_dim]
  int64_t out_stride = 0;                       // floats between tokens of out
  // Sliding window: >= 0 limits query t to positions positions[t] - window_left .. positions[t]
  // (Hugging Face's sliding_window W is window_left = W - 1); -1: every position from 0.
  int64_t window_left = -1;
  // > 0: scores s = scale * q.k become softcap * tanh(s / softcap) before the softmax (Gemma 2).
  float softcap = 0.0f;
  // Per-thread workspace: pool size x work_stride floats, work_stride >= max(positions) + 1 + head_dim.
  float* work = nullptr;
  int64_t work_stride = 0;
};

// Work items (token, head) are split over the pool (nullptr: the calling thread does all).
void paged_attention(const PagedAttentionParams& p, ThreadPool* pool);

// Causal grouped-query attention of n_tokens new queries of one sequence over a contiguous KV cache:
// paged_attention with the whole cache as one block.
// Query token t sits at position pos0 + t and sees cache positions 0 .. pos0 + t (the cache
// already holds the new tokens' keys and values). Query head h reads KV head h / (n_head / n_head_kv).
struct AttentionParams {
  int64_t n_tokens = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t pos0 = 0;
  float scale = 1.0f;             // usually 1/sqrt(head_dim)
  const float* q = nullptr;       // [n_tokens][n_head][head_dim]
  int64_t q_stride = 0;           // floats between tokens of q (>= n_head * head_dim)
  DType kv_type = DType::F32;     // F32, F16 or F8_E4M3
  const void* k_cache = nullptr;  // [n_ctx][n_head_kv][head_dim] of kv_type
  const void* v_cache = nullptr;  // [n_ctx][n_head_kv][head_dim] of kv_type
  const float* k_scales = nullptr;  // F8_E4M3 only: [n_ctx][n_head_kv], as PagedAttentionParams
  const float* v_scales = nullptr;
  float* out = nullptr;           // [n_tokens][n_head][head_dim]
  int64_t out_stride = 0;         // floats between tokens of out
  int64_t window_left = -1;       // as PagedAttentionParams
  float softcap = 0.0f;           // as PagedAttentionParams
  // Per-thread workspace: pool size x work_stride floats, work_stride >= pos0 + n_tokens + head_dim.
  float* work = nullptr;
  int64_t work_stride = 0;
};

// Work items (token, head) are split over the pool (nullptr: the calling thread does all).
void attention(const AttentionParams& p, ThreadPool* pool);

// Floats of per-thread workspace attention() needs for a context of n_ctx positions.
inline int64_t attention_work_floats(int64_t n_ctx, int64_t head_dim) { return n_ctx + head_dim; }

// Copies n floats into a KV cache row of `type` (F32 copy or F16 rounding to nearest even).
void store_kv(DType type, const float* src, void* dst, int64_t n);
// The FP8 cache's store of one position: src [n_head_kv][head_dim] floats become E4M3 codes [n_head_kv][head_dim]
// with one scale per head, scales[h] = e4m3_group_scale(amax of head h) (amax / 448, 1 for an all-zero head) and
// codes = f32_to_e4m3(x / scale) (quant.h's quantize_e4m3: round to nearest even, nothing saturates). The CUDA
// store (engine/qkv_rope_store.cu) writes the same bytes.
void store_kv_fp8(const float* src, uint8_t* codes, float* scales, int64_t n_head_kv, int64_t head_dim);

}  // namespace ga::cpu
