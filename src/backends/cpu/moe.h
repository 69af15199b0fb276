// Mixture-of-experts feed-forward on the CPU (Mixtral, Qwen2-MoE, Qwen3-MoE): the reference of the GPU
// kernels (backends/cuda/kernels/moe.h) and the CPU engine's op: routing, the routed experts' SwiGLU /
// GeGLU products grouped by expert, and the weighted combination.
//
// Semantics (transformers' Mixtral / Qwen2-MoE / Qwen3-MoE blocks, llama.cpp's build_moe_ffn):
//   p = softmax(logits[t]) over the n_expert experts (float32 values; the denominator summed in double),
//   the top_k experts by p (ties: the lower expert index first), w_j = p_{e_j}, and with normalize_top_k
//   (Mixtral; Qwen3-MoE norm_topk_prob) w_j /= sum of the selected p (in double),
//   out[t] = sum_j w_j * down_{e_j}(act(gate_{e_j} x_t) * up_{e_j} x_t).
// Selection compares the logits, not p: softmax is monotone, so this is the same order, but it cannot be
// changed by how exp() rounds (two close logits whose p round to the same float), so the CPU and the GPU
// choose the same experts bit for bit. The order is total: moe_order_key() below (-0 equals +0, NaN sorts
// above +inf; a row of NaN or all -inf logits gives NaN weights, as the softmax would).
//
// A "pair" is one (token, slot) of the routing: p = t * top_k + j. Expert ids outside [0, n_expert) mark
// an unused slot (e.g. a padding token of a fixed-size batch): it reads no weights and adds nothing.
// Expert stacks are GGUF's 3-D tensors (blk.N.ffn_{gate,up,down}_exps.weight): expert e's matrix is rows
// [e * rows, (e + 1) * rows) of one [n_expert * rows][cols] matrix.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/quant.h"
#include "gpu_accel/dtype.h"

namespace ga {
class ThreadPool;
}

namespace ga::cpu {

// Bigger key = routed first. The float order on the bit pattern (sign-magnitude to two's order), with -0
// folded onto +0 so that equal p compare equal; ties between equal keys go to the lower expert index.
// The CUDA router (kernels/moe_route.cu) computes the same key.
inline uint32_t moe_order_key(float logit) {
  if (logit == 0.0f) logit = 0.0f;  // -0 -> +0
  uint32_t bits;
  std::memcpy(&bits, &logit, 4);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// ids / weights [n_tokens][top_k] from router logits [n_tokens][n_expert] (ld floats apart), experts of one
// token best first. Throws InvalidArgument for bad sizes or null pointers.
struct MoeRouteParams {
  const float* logits = nullptr;
  int64_t ld = 0;
  int64_t n_tokens = 0;
  int64_t n_expert = 0;
  int64_t top_k = 0;              // 1 .. n_expert
  bool normalize_top_k = true;    // w_j /= sum of the selected p
  int32_t* ids = nullptr;
  float* weights = nullptr;
};
void moe_route(const MoeRouteParams& p);

enum class MoeActivation : uint8_t {
  kSilu = 0,      // ops.h swiglu: g / (1 + exp(-g)) * u (Mixtral, Qwen2/3-MoE)
  kGeluTanh = 1,  // ops.h geglu_tanh: 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))) * u
};

// One stack of n_expert matrices of `type`, each `rows` x `cols`, rows row_stride bytes apart.
struct ExpertStack {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;                // per expert
  int64_t cols = 0;
  uint64_t row_stride = 0;         // bytes
  uint64_t expert_stride = 0;      // bytes between experts; 0: rows * row_stride (GGUF's packed stacks)
  uint64_t stride() const { return expert_stride != 0 ? expert_stride : static_cast<uint64_t>(rows) * row_stride; }
  MatrixRef expert(int64_t e) const {
    return MatrixRef{type, data + static_cast<uint64_t>(e) * stride(), rows, cols, row_stride};
  }
};

// out[t] (= or +=) sum_j weights[t][j] * y[row(t * top_k + j)] for j in slot order: acc = 0, then
// acc = acc + w * y for each slot with a valid id (two roundings each: no fused multiply-add), then
// out = accumulate ? out + acc : acc. row(p) = y_rows ? y_rows[p] : p. The CUDA combine computes the same
// expression in the same order, so given the same y it is bit-identical.
struct MoeCombineParams {
  int64_t n_tokens = 0;
  int64_t top_k = 0;
  int64_t n_expert = 0;            // slots whose id is outside [0, n_expert) are skipped
  const int32_t* ids = nullptr;    // [n_tokens][top_k]
  const float* weights = nullptr;  // [n_tokens][top_k]
  const float* y = nullptr;        // [rows][ldy]: one row of n floats per pair
  int64_t ldy = 0;
  const int32_t* y_rows = nullptr;  // optional [n_tokens * top_k]: the y row of each pair
  int64_t n = 0;                   // floats per row (n_embd)
  float* out = nullptr;            // [n_tokens][ld_out]
  int64_t ld_out = 0;
  bool accumulate = false;
};
void moe_combine(const MoeCombineParams& p);

// Scratch of the FFN, grown once to the largest call (so steady decoding allocates nothing).
struct MoeScratch {
  std::vector<float> logits, weights;  // moe_ffn's routing
  std::vector<int32_t> ids;
  std::vector<int64_t> offsets;        // the grouping: first sorted pair of each expert
  std::vector<int32_t> sorted, positions;
  std::vector<float> xs, gate, up, ys;  // gathered rows, gate / up / activation, down outputs (sorted)
};

// The routed experts' FFN for n_tokens tokens given the routing (ids, weights). Tokens are grouped by expert
// (a stable counting sort of the pairs), so each routed expert's weights are decoded once per call by
// cpu::matmul on the gathered rows (threaded over rows by the pool); then out as moe_combine says.
struct MoeRoutedFfnParams {
  ExpertStack gate;  // [n_expert][n_ff][n_embd]
  ExpertStack up;    // same shape as gate
  ExpertStack down;  // [n_expert][n_embd][n_ff]
  int64_t n_expert = 0;
  int64_t n_tokens = 0;
  int64_t top_k = 0;
  const int32_t* ids = nullptr;      // [n_tokens][top_k]
  const float* weights = nullptr;    // [n_tokens][top_k]
  const float* x = nullptr;          // [n_tokens][ldx], n_embd used
  int64_t ldx = 0;
  float* out = nullptr;              // [n_tokens][ld_out], n_embd written; must not overlap x
  int64_t ld_out = 0;
  bool accumulate = false;           // out += instead of out =
  MoeActivation activation = MoeActivation::kSilu;
};
// Throws InvalidArgument on inconsistent shapes.
void moe_routed_ffn(const MoeRoutedFfnParams& p, MoeScratch& scratch, ThreadPool* pool);

// The whole MoE block of the CPU engine: router logits = router * x, moe_route, moe_routed_ffn (out
// overwritten).
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
void moe_ffn(const MoeFfnParams& p, MoeScratch& scratch, ThreadPool* pool);

}  // namespace ga::cpu
