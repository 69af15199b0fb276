// Mixture-of-Experts feed-forward on the GPU (Mixtral, Qwen2-MoE, Qwen3-MoE): routing, grouping of the
// (token, slot) pairs by expert, the grouped expert GEMV of decode and small batches, the gated activation
// and the weighted combination. The prefill through cuBLAS is backends/cuda/moe_prefill.h.
//
// Semantics are ga::cpu's (backends/cpu/moe.h), the reference every kernel here is tested against:
// p = softmax(logits) in float32 (the denominator in double), the top_k experts by logit (= by p; ties: the
// lower index, the total order of cpu::moe_order_key), w = p of the selected, optionally divided by their sum.
// A pair is p = t * top_k + j; an expert id outside [0, n_expert) marks an unused slot (reads nothing, adds
// nothing: a padding token of a fixed-size batch).
//
// A decode step of one MoE layer, every call graph-capturable (no host sync, no allocation):
//   1. router logits [n_tokens][n_expert] by the plain gemv()/GEMM on ffn_gate_inp,
//   2. moe_route(): ids, weights and the plan (the pairs grouped by expert) in one kernel,
//   3. moe_gemv() on the gate and up stacks together: y_gate_up [n_pairs][2 n_ff] (gate | up per pair),
//   4. moe_activate(): act(gate) * up -> [n_pairs][n_ff],
//   5. moe_gemv() on the down stack: y_down [n_pairs][n_embd],
//   6. moe_combine(): out[t] (= or +=) sum_j w[t][j] * y_down[t * top_k + j].
// moe_ffn_gemv() runs 3-6 with a workspace from moe_ffn_gemv_workspace_bytes(). A prefill groups the sorted
// rows per expert for GEMMs instead (moe_gather_rows_f16, moe_grouped_gemm; moe_prefill.h).
//
// Pure entry points (DESIGN.md): raw device pointers, explicit strides, params structs, the stream last, no
// allocation, a cudaError_t back; *_unsupported_reason() says in a sentence why a parameter set is refused
// (then the call returns cudaErrorInvalidValue). Kernels are launched with PDL where the GEMV is (pdl.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu_accel/dtype.h"

namespace ga::cuda {

inline constexpr int kMoeMaxExperts = 256;
inline constexpr int kMoeMaxTopK = 16;
inline constexpr int64_t kMoeMaxPairs = 1 << 24;  // n_tokens * top_k of one call (plan indices are int32)

// The routing step of one MoE layer: what every kernel of the layer must agree on.
struct MoeShape {
  int64_t n_tokens = 0;
  int n_expert = 0;  // 1 .. kMoeMaxExperts
  int top_k = 0;     // 1 .. min(n_expert, kMoeMaxTopK)
  int64_t n_pairs() const { return n_tokens * top_k; }
};

// nullptr when the shape is one these kernels take, else why not.
const char* moe_shape_unsupported_reason(const MoeShape& s);

// ---- the plan: the pairs grouped by expert, in device memory ----
// Written by moe_route() (or moe_plan() from ids made elsewhere) into a workspace of moe_plan_bytes(shape)
// bytes (16-byte aligned) and read by moe_gemv() and the prefill. The grouping is a stable counting sort:
// deterministic, pairs of one expert in ascending pair order. GEMV work items are runs of at most
// item_pairs pairs of one expert (moe_plan_item_pairs: 1 for one token, whose top_k experts are distinct;
// 8 for several, or 2 / 4 / 8 by the expected pairs per expert when built with GA_MOE_GEMV_ALL_WIDTHS), so
// that a CTA reads an expert's weights once for all of the item's pairs.
struct MoePlanView {
  int32_t* n_items = nullptr;       // [1]: work items written
  int32_t* counts = nullptr;        // [n_expert]: pairs routed to each expert
  int32_t* offsets = nullptr;       // [n_expert + 1]: first sorted position of each expert; [n_expert] = valid pairs
  int32_t* sorted_pairs = nullptr;  // [n_pairs]: pair indices grouped by expert (first offsets[n_expert] valid)
  int32_t* positions = nullptr;     // [n_pairs]: the sorted position of each pair (-1: unused slot)
  int4* items = nullptr;            // [max_items]: {expert, first sorted position, count, 0}
  int item_pairs = 1;
  int64_t max_items = 0;            // an upper bound of n_items for any routing of this shape
};
int moe_plan_item_pairs(const MoeShape& s);
int64_t moe_plan_max_items(const MoeShape& s);
int64_t moe_plan_bytes(const MoeShape& s);
MoePlanView moe_plan_view(const MoeShape& s, void* plan);

// ---- routing ----
struct MoeRouteParams {
  MoeShape shape;
  const float* logits = nullptr;  // [n_tokens][n_expert], ld_logits floats between tokens
  int64_t ld_logits = 0;
  bool normalize = true;          // divide the selected p by their sum (Mixtral, Qwen3-MoE; not Qwen2-MoE)
  int32_t* ids = nullptr;         // [n_tokens][top_k], best first
  float* weights = nullptr;       // [n_tokens][top_k]
  void* plan = nullptr;           // optional: moe_plan_bytes(shape) bytes, also written (as moe_plan() would)
};
const char* moe_route_unsupported_reason(const MoeRouteParams& p);
// One kernel when the plan fits one CTA's work (n_tokens <= kMoeRouteFusedMaxTokens, the GEMV path), else
// the routing kernel then moe_plan's.
inline constexpr int64_t kMoeRouteFusedMaxTokens = 64;
cudaError_t moe_route(const MoeRouteParams& p, cudaStream_t stream);

struct MoePlanParams {
  MoeShape shape;
  const int32_t* ids = nullptr;  // [n_tokens][top_k] (device)
  void* plan = nullptr;          // moe_plan_bytes(shape) bytes
};
const char* moe_plan_unsupported_reason(const MoePlanParams& p);
cudaError_t moe_plan(const MoePlanParams& p, cudaStream_t stream);

// ---- grouped expert GEMV (decode, small batches) ----

// One stack of n_expert matrices in the GGUF layout (ffn_{gate,up,down}_exps): expert e's `rows` x `cols`
// matrix starts at data + e * expert_stride, rows row_stride bytes apart.
struct MoeExperts {
  DType type = DType::F32;
  const void* data = nullptr;  // 16-byte aligned
  int64_t rows = 0;
  int64_t cols = 0;            // a multiple of the type's block (as gemv())
  int64_t row_stride = 0;      // >= row_bytes(type, cols)
  int64_t expert_stride = 0;   // a multiple of 16, >= the expert's rows
};

// Which x row a pair reads: its token's row (gate/up: x = the normed hidden state, row = p / top_k) or its
// own (down: x = the pair's activation row, row = p).
enum class MoeGemvInput : uint8_t { kTokenRows = 0, kPairRows = 1 };

// Kernel choice: kAuto is gemv()'s routing for the type and shape; the others force a path (for the
// benchmark and the tests): kFloat the float kernels, kInt8 the int8-activation kernel (gemv_int8.cuh).
enum class MoeGemvKernel : uint8_t { kAuto = 0, kFloat = 1, kInt8 = 2 };

// y[p][0, rows) = W_{ids[p]} . x[row_of(p)] for every valid pair p, reading only the routed experts'
// weights; with w2 also y[p][rows, 2 rows) = W2_{ids[p]} . x[row_of(p)] in the same launch (gate | up).
// Rows of unused pairs are not written. Every weight type of gemv() in the GGUF block order; the int8
// activation path (x rounded to two int8 digits per block of 32) where gemv() takes it
// (moe_gemv_uses_int8_activations).
struct MoeGemvParams {
  MoeShape shape;
  const void* plan = nullptr;  // written by moe_route()/moe_plan() for this shape (read after the prior kernel)
  MoeExperts w;
  const void* w2 = nullptr;    // optional second stack of w's type, shape and strides (up beside gate)
  const float* x = nullptr;    // [n_tokens or n_pairs][ldx] (input), 16-byte aligned, ldx a multiple of 4
  int64_t ldx = 0;
  MoeGemvInput input = MoeGemvInput::kTokenRows;
  float* y = nullptr;          // [n_pairs][ldy], ldy >= rows (2 rows with w2)
  int64_t ldy = 0;
  MoeGemvKernel kernel = MoeGemvKernel::kAuto;
};
const char* moe_gemv_unsupported_reason(const MoeGemvParams& p);
bool moe_gemv_uses_int8_activations(const MoeGemvParams& p);  // false for refused parameters
cudaError_t moe_gemv(const MoeGemvParams& p, cudaStream_t stream);

// ---- activation and combination ----

enum class MoeActivation : uint8_t {
  kSilu = 0,      // g / (1 + exp(-g))
  kGeluTanh = 1,  // 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3)))
};

// out[r][i] = act(gate_up[r][i]) * gate_up[r][n + i] for r < n_rows, i < n (the [gate | up] rows of
// moe_gemv with w2). out may be gate_up itself (ld_out = ld_in: the activation replaces the gate half).
struct MoeActivateParams {
  const float* gate_up = nullptr;  // [n_rows][ld_in]
  int64_t ld_in = 0;               // >= 2 n
  float* out = nullptr;            // [n_rows][ld_out]
  int64_t ld_out = 0;
  int64_t n_rows = 0;
  int64_t n = 0;
  MoeActivation act = MoeActivation::kSilu;
};
const char* moe_activate_unsupported_reason(const MoeActivateParams& p);
cudaError_t moe_activate(const MoeActivateParams& p, cudaStream_t stream);

// out[t][c] (= or +=) sum over slots j in order of w[t][j] * y[row(t * top_k + j)][c] (unused slots
// skipped), row(p) = y_rows ? y_rows[p] : p; exactly cpu::moe_combine's expression and order (bit-identical
// given the same y).
struct MoeCombineParams {
  int64_t n_tokens = 0;
  int top_k = 0;
  int n_expert = 0;
  const int32_t* ids = nullptr;      // [n_tokens][top_k]
  const float* weights = nullptr;    // [n_tokens][top_k]
  const float* y = nullptr;          // [rows][ldy]
  int64_t ldy = 0;
  const int32_t* y_rows = nullptr;   // optional [n_pairs] (e.g. MoePlanView::positions: y in sorted order)
  int64_t n = 0;                     // floats per row
  float* out = nullptr;              // [n_tokens][ld_out]; must not overlap y
  int64_t ld_out = 0;
  bool accumulate = false;
};
const char* moe_combine_unsupported_reason(const MoeCombineParams& p);
cudaError_t moe_combine(const MoeCombineParams& p, cudaStream_t stream);

// ---- the whole routed FFN of a decode step (steps 3-6 above) ----
struct MoeFfnGemvParams {
  MoeShape shape;
  const void* plan = nullptr;      // from moe_route() for these ids
  const int32_t* ids = nullptr;    // [n_tokens][top_k]
  const float* weights = nullptr;  // [n_tokens][top_k]
  MoeExperts gate, up, down;       // gate / up [n_expert][n_ff][n_embd], down [n_expert][n_embd][n_ff]
  const float* x = nullptr;        // [n_tokens][ldx]
  int64_t ldx = 0;
  float* out = nullptr;            // [n_tokens][ld_out]
  int64_t ld_out = 0;
  bool accumulate = false;
  MoeActivation act = MoeActivation::kSilu;
  void* workspace = nullptr;       // moe_ffn_gemv_workspace_bytes(shape, n_embd, n_ff), 16-byte aligned
};
int64_t moe_ffn_gemv_workspace_bytes(const MoeShape& s, int64_t n_embd, int64_t n_ff);
const char* moe_ffn_gemv_unsupported_reason(const MoeFfnGemvParams& p);
cudaError_t moe_ffn_gemv(const MoeFfnGemvParams& p, cudaStream_t stream);

// ---- the prefill's pieces (moe_prefill.h puts them together) ----

// Y[s][0, n) = X[s] . W_{e(s)}^T for every valid sorted position s of the plan, e(s) the expert whose segment
// [offsets[e], offsets[e] + counts[e]) holds s; with w2 also Y[s][n, 2n) from the second stack. f16 inputs,
// float accumulation and output (WMMA tensor cores), segment sizes read on the device: graph-capturable.
// Rows past the valid pairs are neither read nor written.
struct MoeGroupedGemmParams {
  MoeShape shape;
  const void* plan = nullptr;
  const void* w = nullptr;    // [n_expert] x [n][ldw] halves, expert_stride halves apart, 16-byte aligned
  const void* w2 = nullptr;   // optional second stack, same strides
  int64_t n = 0;              // outputs per expert: a multiple of 64
  int64_t k = 0;              // a multiple of 32
  int64_t ldw = 0;            // >= k, a multiple of 8
  int64_t expert_stride = 0;  // halves, >= n * ldw
  const void* x = nullptr;    // [n_pairs][ldx] halves in the plan's sorted order (moe_gather_rows_f16)
  int64_t ldx = 0;            // >= k, a multiple of 8
  float* y = nullptr;         // [n_pairs][ldy] in sorted order
  int64_t ldy = 0;            // >= n (2 n with w2), a multiple of 4
};
const char* moe_grouped_gemm_unsupported_reason(const MoeGroupedGemmParams& p);
cudaError_t moe_grouped_gemm(const MoeGroupedGemmParams& p, cudaStream_t stream);

// dst[i] = half(x[sorted_pairs[i] / top_k]) for the valid pairs of the plan (i < offsets[n_expert]): each
// expert's tokens become contiguous f16 rows, the GEMM's input.
struct MoeGatherParams {
  MoeShape shape;
  const void* plan = nullptr;
  const float* x = nullptr;  // [n_tokens][ldx]
  int64_t ldx = 0;
  int64_t n = 0;             // columns
  void* dst_f16 = nullptr;   // [n_pairs][ld_dst] halves
  int64_t ld_dst = 0;
};
cudaError_t moe_gather_rows_f16(const MoeGatherParams& p, cudaStream_t stream);

}  // namespace ga::cuda
