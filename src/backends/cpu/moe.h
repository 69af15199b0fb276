// Mixture-of-experts feed-forward on the CPU (the reference of the GPU kernels and the CPU engine's op):
// routing (softmax over the experts, top-k, optional renormalization) and the routed experts' SwiGLU /
// GeGLU products.
//
// Semantics (transformers' Mixtral / Qwen2-MoE / Qwen3-MoE blocks, llama.cpp's build_moe_ffn): p =
// softmax(router * x) over the n_expert experts in float; the top_k experts by p, ties to the lower index;
// weights w_k = p_k, divided by their sum when normalize_top_k; out = sum_k w_k * down_k(act(gate_k x) *
// up_k x). Expert stacks are GGUF's ffn_*_exps tensors: expert e's matrix is rows [e*rows, (e+1)*rows).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/quant.h"

namespace ga {
class ThreadPool;
}

namespace ga::cpu {

struct ExpertStack {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;         // per expert
  int64_t cols = 0;
  uint64_t row_stride = 0;  // bytes
  MatrixRef expert(int64_t e) const {
    return MatrixRef{type, data + static_cast<uint64_t>(e * rows) * row_stride, rows, cols, row_stride};
  }
};

// ids / weights [n_tokens][top_k] from router logits [n_tokens][n_expert] (ld floats apart), experts of one
// token in decreasing p (ties: lower index first).
struct MoeRouteParams {
  const float* logits = nullptr;
  int64_t ld = 0;
  int64_t n_tokens = 0;
  int64_t n_expert = 0;
  int64_t top_k = 0;
  bool normalize_top_k = true;
  int32_t* ids = nullptr;
  float* weights = nullptr;
};
void moe_route(const MoeRouteParams& p);

struct MoeFfnParams {
  int64_t n_tokens = 0;
  const float* x = nullptr;  // [n_tokens][gate.cols], ldx
  int64_t ldx = 0;
  float* out = nullptr;      // [n_tokens][down.rows], ld_out; overwritten
  int64_t ld_out = 0;
  MatrixRef router;          // [n_expert][gate.cols]
  int64_t n_expert = 0;
  int64_t top_k = 0;
  bool normalize_top_k = true;
  bool gelu_tanh = false;    // GeGLU instead of SwiGLU
  ExpertStack gate, up, down;
};

// Scratch moe_ffn grows once to the largest call (so steady decoding allocates nothing).
struct MoeScratch {
  std::vector<float> logits, weights, xs, gate, up, y;
  std::vector<int32_t> ids;
  std::vector<int64_t> rows;   // tokens routed to the current expert
  std::vector<float> row_w;    // their weights
};

// Each expert's weights are read once per call: the tokens routed to it are gathered and multiplied
// together (cpu::matmul), then added into out with their routing weights, experts in index order.
void moe_ffn(const MoeFfnParams& p, MoeScratch& scratch, ThreadPool* pool);

}  // namespace ga::cpu
