// The grouped expert GEMV (moe_gemv(), moe.h): gemv()'s kernels with an expert indirection.
//
// Design. Decode of a MoE layer reads k experts' matrices per token; each is an ordinary GEMV, so the GEMV's
// kernels (gemv_kernel.cuh: staged cp.async ring and direct loads; gemv_int8.cuh: int8 activations + DP4A)
// and their per-type routing run unchanged, given a policy (ExpertBatch, the Batch of gemv_kernel.cuh) that
// tells each CTA which matrix and which tokens are its own:
//  * grid (row tiles, work items, stacks): blockIdx.y is a work item of the plan (moe.h: a run of at most
//    item_pairs pairs routed to one expert, grouped by moe_route's counting sort), blockIdx.z the stack
//    (gate / up: one launch writes both halves of a pair's [gate | up] row). The CTA reads its item after
//    pdl_wait_prior_grid() (the plan is the router's output), points w at expert e's rows of the stack
//    (data + e * expert_stride) and takes the item's pairs as its tokens: x row p / top_k (gate/up) or p
//    (down), y row p. CTAs of items past the plan's count return at once (the grid is sized by the
//    routing-independent bound moe_plan_max_items, so a captured graph replays for any routing).
//  * Only routed experts' bytes are read, and an expert's rows once per item: for one token the k items are
//    k distinct experts; for a batch the pairs of an expert share its weights (up to item_pairs per CTA as
//    the GEMV's tokens; the items of one expert are adjacent in blockIdx.y, so a second item of a busy
//    expert finds its rows in L2).
//  * The routing limits (int8 from kMinRows rows, Q6_K's long-row configuration) see one expert's matrix, as
//    gemv() sees one matrix: measured on the H200 (docs/results/2026-12-02-h200-moe.md), Q8_0 at 4096 and 768
//    rows per expert ran the float kernel faster than the int8 one (Mixtral down 58 vs 68 us, Qwen3-30B-A3B
//    down 13.6 vs 16.7 us) although the launch's total rows passed the int8 threshold. The int8 kernel's
//    persistent grid is shared by the launch's matrices. MoeGemvKernel forces a family (benchmark, tests).
// The plain GEMV's code is unchanged by the policy (gemv_kernel.cuh says how that was checked).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cuda/kernels/gemv_impl.cuh"
#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/kernels/pdl.cuh"

namespace ga::cuda::detail {

// ExpertBatch's fields beyond one matrix's GemvArgs (the kernels' Extra parameter).
struct ExpertGemvExtra {
  const uint8_t* w2 = nullptr;      // the second stack (blockIdx.z == 1), or null
  int64_t expert_stride = 0;        // bytes between experts of a stack
  int64_t y_stack_offset = 0;       // floats between the two stacks' outputs in a pair's row (= rows)
  const int4* items = nullptr;      // the plan's work items {expert, first, count, 0}
  const int32_t* n_items = nullptr;
  const int32_t* sorted_pairs = nullptr;
  int x_pair_div = 1;               // x row of pair p: p / x_pair_div (top_k: the token's row; 1: its own)
  int grid_items = 0;               // grid.y: moe_plan_max_items
};

struct ExpertGemvLaunch {
  GemvArgs g;  // one expert's matrix: w = the first stack, n_tokens = item_pairs (the CTA's bound)
  ExpertGemvExtra e;
  int64_t expected_items = 1;  // host only: items a routing gives on average (the persistent grid's share)
};

struct ExpertBatch {
  static constexpr bool kDense = false;
  using Args = ExpertGemvLaunch;
  using Extra = ExpertGemvExtra;
  template <int NT>
  struct Cta {
    GemvArgs a;
    const int32_t* pairs;  // the item's pairs: y rows
    int32_t x_rows[NT];    // registers: only indexed by unrolled loops (x); x_any and y read the plan
    int x_pair_div;

    __device__ __forceinline__ bool bind(const GemvArgs& g, const ExpertGemvExtra& e) {
      pdl_wait_prior_grid();  // the plan (and x) are earlier kernels' outputs
      const int item = static_cast<int>(blockIdx.y);
      if (item >= *e.n_items) return false;
      const int4 it = e.items[item];  // expert, first sorted position, count
      a = g;
      a.w = (blockIdx.z == 0 ? g.w : e.w2) + it.x * e.expert_stride;
      a.w_end = a.w + (a.rows - 1) * a.row_stride + a.row_bytes;
      a.y = g.y + blockIdx.z * e.y_stack_offset;
      a.n_tokens = it.z;
      pairs = e.sorted_pairs + it.y;
      x_pair_div = e.x_pair_div;
#pragma unroll
      for (int t = 0; t < NT; ++t) x_rows[t] = pairs[t < it.z ? t : 0] / e.x_pair_div;
      return true;
    }
    __device__ __forceinline__ int64_t x(const GemvArgs& g, int t) const { return int64_t{x_rows[t]} * g.ldx; }
    __device__ __forceinline__ int64_t x_any(const GemvArgs& g, int t) const {
      return int64_t{pairs[t] / x_pair_div} * g.ldx;
    }
    __device__ __forceinline__ int64_t y(const GemvArgs& g, int t) const { return int64_t{pairs[t]} * g.ldy; }
  };
  static const GemvArgs& base(const ExpertGemvLaunch& l) { return l.g; }
  static const ExpertGemvExtra& extra(const ExpertGemvLaunch& l) { return l.e; }
  static dim3 grid(unsigned blocks, const ExpertGemvLaunch& l) {
    return dim3(blocks, static_cast<unsigned>(l.e.grid_items), l.e.w2 != nullptr ? 2u : 1u);
  }
  // Matrices the launch works on at once, for the int8 kernel's persistent grid: the expected items (not the
  // bound: the CTAs of items past the plan's count exit at once and would leave their SMs' share idle).
  static int64_t concurrent_matrices(const ExpertGemvLaunch& l) {
    return l.expected_items * (l.e.w2 != nullptr ? 2 : 1);
  }
  static GemvArgs routing(const ExpertGemvLaunch& l) { return l.g; }
};

// The launch of a validated MoeGemvParams.
template <class D>
ExpertGemvLaunch make_expert_launch(const MoeGemvParams& p) {
  const MoePlanView plan = moe_plan_view(p.shape, const_cast<void*>(p.plan));
  ExpertGemvLaunch l;
  GemvArgs& a = l.g;
  a.w = static_cast<const uint8_t*>(p.w.data);
  a.rows = p.w.rows;
  a.row_stride = p.w.row_stride;
  a.blocks_per_row = p.w.cols / D::kBlockElems;
  a.row_bytes = a.blocks_per_row * D::kBlockBytes;
  a.w_end = a.w + (a.rows - 1) * a.row_stride + a.row_bytes;  // expert 0's; each CTA sets its own
  a.x = p.x;
  a.ldx = p.ldx;
  a.y = p.y;
  a.ldy = p.ldy;
  a.n_tokens = plan.item_pairs;
  a.split_rows = false;
  a.x_int8 = nullptr;
  a.x_e4m3x2 = nullptr;
  l.e.w2 = static_cast<const uint8_t*>(p.w2);
  l.e.expert_stride = p.w.expert_stride;
  l.e.y_stack_offset = p.w.rows;
  l.e.items = plan.items;
  l.e.n_items = plan.n_items;
  l.e.sorted_pairs = plan.sorted_pairs;
  l.e.x_pair_div = p.input == MoeGemvInput::kTokenRows ? p.shape.top_k : 1;
  l.e.grid_items = static_cast<int>(plan.max_items);
  // items of one pair: every pair; wider items: the distinct experts of a uniform routing, E (1 - (1 - k / E)^n),
  // about one item each; at most the bound
  const double e = p.shape.n_expert;
  const double distinct = e * (1.0 - std::pow(1.0 - p.shape.top_k / e, static_cast<double>(p.shape.n_tokens)));
  const int64_t expected = plan.item_pairs == 1 ? p.shape.n_pairs() : std::llround(distinct);
  l.expected_items = std::clamp<int64_t>(expected, 1, plan.max_items);
  return l;
}

inline GemvPath gemv_path(MoeGemvKernel k) {
  return k == MoeGemvKernel::kFloat ? GemvPath::kFloat : (k == MoeGemvKernel::kInt8 ? GemvPath::kInt8 : GemvPath::kAuto);
}

// The per-type entry point; its explicit instantiations live in moe_gemv_instances/moe_gemv_<type>.cu.
template <class D>
cudaError_t launch_moe_gemv(const MoeGemvParams& p, cudaStream_t stream) {
  const ExpertGemvLaunch l = make_expert_launch<D>(p);
  const GemvPath path = gemv_path(p.kernel);
  // the widths moe_plan_item_pairs hands out: 1 and 8, and 2 and 4 with GA_MOE_GEMV_ALL_WIDTHS (each width is
  // a full set of the type's kernels: the default keeps the CI build to two)
  switch (l.g.n_tokens) {
    case 1: return launch_gemv_tokens<D, 1, ExpertBatch>(l, stream, path);
#if defined(GA_MOE_GEMV_ALL_WIDTHS)
    case 2: return launch_gemv_tokens<D, 2, ExpertBatch>(l, stream, path);
    case 4: return launch_gemv_tokens<D, 4, ExpertBatch>(l, stream, path);
#endif
    case 8: return launch_gemv_tokens<D, 8, ExpertBatch>(l, stream, path);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ga::cuda::detail
