// The prefill of a MoE layer (many tokens) through cuBLAS: the routed-expert FFN for n_tokens tokens given
// the routing on the device (ids, weights and the plan of moe_route(), kernels/moe.h).
//
// Path (b) of the MoE design, the host-synchronizing one: the E per-expert counts are copied to the host
// (one stream synchronization), then for each expert that received tokens its matrices are dequantized to
// f16 (dequantize_to_f16, as the dense prefill does; F16 weights are used in place) and multiplied with
// the expert's gathered rows by the engine's Gemm: gate and up into [count][gate | up], the activation in
// place, the activation rounded to f16, down into the expert's rows of a sorted [n_pairs][n_embd] buffer;
// moe_combine() then adds the pairs' rows with their weights in slot order (through the plan's positions).
// Each routed expert's weights are decoded once per call. Not capturable in a CUDA graph (the host reads
// the counts).
//
// Path (a), moe_prefill_graph: the same FFN with no host sync, so a prefill step can be one CUDA graph:
// the grouped GEMM (kernels/moe.h, moe_grouped_gemm) reads the segment sizes from the plan on the device,
// gate and up in one launch, then the activation, the f16 rounding and down over all the pairs' sorted
// rows, then the same combine. It needs the stacks in f16: F16 weights are used in place, other types are
// dequantized whole (every expert, routed or not) into the workspace each call, or taken from f16 copies
// the caller keeps (MoePrefillParams::*_f16).
// Numerics (both): x, the weights (quantized ones are exact in f16 only up to f16's rounding of d * q + m)
// and the activation are rounded to f16, the products accumulate in f32, like the dense prefill.
#pragma once

#include <cstdint>

#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/moe.h"

namespace ga::cuda {

struct MoePrefillParams {
  MoeShape shape;
  const void* plan = nullptr;      // moe_route()/moe_plan() for these ids, on the Gemm's stream
  const int32_t* ids = nullptr;    // [n_tokens][top_k] (device)
  const float* weights = nullptr;  // [n_tokens][top_k] (device)
  MoeExperts gate, up, down;       // gate / up [n_expert][n_ff][n_embd], down [n_expert][n_embd][n_ff];
                                   // packed rows (row_stride = row_bytes), 16 readable bytes after each stack
  const float* x = nullptr;        // [n_tokens][ldx]
  int64_t ldx = 0;
  float* out = nullptr;            // [n_tokens][ld_out]
  int64_t ld_out = 0;
  bool accumulate = false;
  MoeActivation act = MoeActivation::kSilu;
  void* workspace = nullptr;       // moe_prefill_workspace_bytes / moe_prefill_graph_workspace_bytes, 256-aligned
  int64_t workspace_bytes = 0;
  // moe_prefill_graph only, optional: the stacks already in f16 ([n_expert][rows][cols] packed halves), so a
  // quantized model that keeps f16 copies skips the per-call dequantization (and its workspace)
  const void* gate_f16 = nullptr;
  const void* up_f16 = nullptr;
  const void* down_f16 = nullptr;
};

// Device scratch of moe_prefill_host_sync: the gathered f16 rows and the sorted down outputs of all pairs,
// one expert's f16 weights and its [n_tokens][2 n_ff] gate|up rows (a token meets an expert at most once).
int64_t moe_prefill_workspace_bytes(const MoeShape& s, int64_t n_embd, int64_t n_ff);

const char* moe_prefill_unsupported_reason(const MoePrefillParams& p);

// Runs on gemm.stream() and returns when the work is enqueued (after one host sync on the counts). Throws
// ga::Error on refused parameters (with the reason) or a failed launch.
void moe_prefill_host_sync(Gemm& gemm, const MoePrefillParams& p);

// Path (a). The workspace holds the f16 stacks of every stack that is neither F16 nor given in f16 (hence the
// weight type and the f16 copies in the arguments); the same p is valid for moe_prefill_host_sync when its
// workspace is large enough for both.
int64_t moe_prefill_graph_workspace_bytes(const MoePrefillParams& p);
const char* moe_prefill_graph_unsupported_reason(const MoePrefillParams& p);
// cudaErrorInvalidValue when refused, else the first failing launch's status. Enqueues on `stream` only.
cudaError_t moe_prefill_graph(const MoePrefillParams& p, cudaStream_t stream);

}  // namespace ga::cuda
