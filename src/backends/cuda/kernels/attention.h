// Causal GQA attention over a per-sequence KV cache on the GPU: the prefill (many query tokens) and
// the decode (one or a few query tokens over a long cache) of the Llama-family forward pass.
//
// Pure entry points (DESIGN.md): device pointers, explicit strides (in elements), a params struct,
// the stream last; never allocate (split-KV partials go to a caller-provided workspace sized by
// attention_workspace_bytes) and return the launch status. The CPU reference is
// ga::cpu::attention / paged_attention (backends/cpu/ops.h); tests/cuda/test_cuda_attention.cpp
// compares against it.
//
// Layouts:
//   q    [n_tokens][n_head][head_dim]        f32, q_token_stride floats between tokens (roped)
//   k, v [n_kv_positions][n_head_kv][head_dim] f16, kv_pos_stride halves between positions
//   out  [n_tokens][n_head][head_dim]        f32, out_token_stride floats between tokens
// Query token t sits at position pos0 + t and attends to cache positions [0, pos0 + t] (causal);
// query head h reads KV head h / (n_head / n_head_kv). scores are scaled by `scale`
// (1/sqrt(head_dim) for Llama), softmax in f32.
// pos0 may live in device memory (pos0_device) so a captured CUDA graph replays for every step.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ga::cuda {

struct AttentionParams {
  const float* q = nullptr;
  int64_t q_token_stride = 0;
  const __half* k = nullptr;
  const __half* v = nullptr;
  int64_t kv_pos_stride = 0;
  float* out = nullptr;
  int64_t out_token_stride = 0;
  int n_tokens = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;              // 64, 128, 256 (and others the implementation lists)
  int64_t pos0 = 0;              // used when pos0_device is null
  const int32_t* pos0_device = nullptr;  // device scalar: overrides pos0 (graph replay)
  int64_t max_kv_positions = 0;  // capacity of the cache: bounds the split-KV workspace
  float scale = 1.0f;
  // attention_workspace_bytes(params) bytes of device memory, ZERO-FILLED before the first call: it
  // holds the split-KV partials and the counters of their fused merge, which every call leaves at
  // zero again (so a workspace zeroed once serves every later call and batch size of the model).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

const char* attention_unsupported_reason(const AttentionParams& p);
size_t attention_workspace_bytes(const AttentionParams& p);
cudaError_t attention(const AttentionParams& p, cudaStream_t stream);

}  // namespace ga::cuda
