// moe_prefill_host_sync (moe_prefill.h): per routed expert, dequantize + cuBLAS GEMMs on its gathered rows.
#include "backends/cuda/moe_prefill.h"

#include <cuda_fp16.h>

#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/engine/engine_kernels.h"
#include "gpu_accel/error.h"

namespace ga::cuda {
namespace {

constexpr int64_t kAlign = 256;

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct PrefillScratch {  // byte offsets into the workspace
  int64_t x16, ys, w16, gate_up, act16, total;
};

PrefillScratch prefill_scratch(const MoeShape& s, int64_t n_embd, int64_t n_ff) {
  const int64_t pairs = s.n_pairs();
  PrefillScratch f;
  f.x16 = 0;                                                    // [n_pairs][n_embd] f16, sorted by expert
  f.ys = f.x16 + align_up(pairs * n_embd * 2);                  // [n_pairs][n_embd] f32, sorted by expert
  f.w16 = f.ys + align_up(pairs * n_embd * 4);                  // one matrix [n_ff * n_embd] f16
  f.gate_up = f.w16 + align_up(n_ff * n_embd * 2);              // [n_tokens][2 n_ff] f32
  f.act16 = f.gate_up + align_up(s.n_tokens * 2 * n_ff * 4);  // [n_tokens][n_ff] f16
  f.total = f.act16 + align_up(s.n_tokens * n_ff * 2);
  return f;
}

bool packed(const MoeExperts& w) {
  return static_cast<uint64_t>(w.row_stride) == row_bytes(w.type, static_cast<uint64_t>(w.cols));
}

// x16 [n_pairs][n_embd] = the pairs' token rows in the plan's sorted order, as f16.
cudaError_t gather_sorted(const MoePrefillParams& p, void* x16, cudaStream_t stream) {
  MoeGatherParams g;
  g.shape = p.shape;
  g.plan = p.plan;
  g.x = p.x;
  g.ldx = p.ldx;
  g.n = p.gate.cols;
  g.dst_f16 = x16;
  g.ld_dst = p.gate.cols;
  return moe_gather_rows_f16(g, stream);
}

// out (= or +=) the pairs' down rows ys (the plan's sorted order, read through its positions) with their weights.
MoeCombineParams sorted_combine(const MoePrefillParams& p, const float* ys, const MoePlanView& plan) {
  MoeCombineParams c;
  c.n_tokens = p.shape.n_tokens;
  c.top_k = p.shape.top_k;
  c.n_expert = p.shape.n_expert;
  c.ids = p.ids;
  c.weights = p.weights;
  c.y = ys;
  c.ldy = p.gate.cols;
  c.y_rows = plan.positions;
  c.n = p.gate.cols;
  c.out = p.out;
  c.ld_out = p.ld_out;
  c.accumulate = p.accumulate;
  return c;
}

// y [n_pairs][ldy] (sorted) = x [n_pairs][k] (sorted f16) . W^T per expert, W packed f16 [n][k] rows
// expert_stride halves apart (and w2 into columns [n, 2n)).
cudaError_t grouped_gemm(const MoePrefillParams& p, const void* w, const void* w2, int64_t expert_stride, int64_t n,
                         int64_t k, const void* x, float* y, int64_t ldy, cudaStream_t stream) {
  MoeGroupedGemmParams m;
  m.shape = p.shape;
  m.plan = p.plan;
  m.w = w;
  m.w2 = w2;
  m.n = n;
  m.k = k;
  m.ldw = k;
  m.expert_stride = expert_stride;
  m.x = x;
  m.ldx = k;
  m.y = y;
  m.ldy = ldy;
  return moe_grouped_gemm(m, stream);
}

}  // namespace

int64_t moe_prefill_workspace_bytes(const MoeShape& s, int64_t n_embd, int64_t n_ff) {
  return prefill_scratch(s, n_embd, n_ff).total;
}

namespace {

// The checks both paths share (shapes, types, strides, pointers); the workspace is each path's own.
const char* prefill_shape_reason(const MoePrefillParams& p) {
  if (const char* why = moe_shape_unsupported_reason(p.shape)) return why;
  if (p.plan == nullptr || p.ids == nullptr || p.weights == nullptr || p.x == nullptr || p.out == nullptr) {
    return "plan, ids, weights, x and out must be device pointers";
  }
  const int64_t n_embd = p.gate.cols, n_ff = p.gate.rows;
  if (p.up.type != p.gate.type || p.up.rows != n_ff || p.up.cols != n_embd || p.down.rows != n_embd ||
      p.down.cols != n_ff) {
    return "gate / up must be [n_ff][n_embd] of one type and down [n_embd][n_ff]";
  }
  for (const MoeExperts* w : {&p.gate, &p.up, &p.down}) {
    if (w->data == nullptr || !engine::dequantize_f16_supports(w->type)) return "a stack is null or of a type the f16 dequantizer does not read";
    if (!packed(*w)) return "the prefill needs packed rows (row_stride = row_bytes)";
    if (w->expert_stride % 16 != 0 || w->expert_stride < w->rows * w->row_stride) return "expert_stride must be a multiple of 16 holding an expert";
  }
  if (n_embd % 8 != 0 || n_ff % 8 != 0) return "n_embd and n_ff must be multiples of 8 (16-byte f16 rows)";
  if (p.ldx < n_embd || p.ldx % 4 != 0 || p.ld_out < n_embd || p.ld_out % 4 != 0) {
    return "ldx and ld_out must be >= n_embd and multiples of 4";
  }
  return nullptr;
}

bool workspace_holds(const MoePrefillParams& p, int64_t bytes) {
  return p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % kAlign == 0 && p.workspace_bytes >= bytes;
}

}  // namespace

const char* moe_prefill_unsupported_reason(const MoePrefillParams& p) {
  if (const char* why = prefill_shape_reason(p)) return why;
  if (!workspace_holds(p, moe_prefill_workspace_bytes(p.shape, p.gate.cols, p.gate.rows))) {
    return "the workspace must be 256-byte aligned and moe_prefill_workspace_bytes() long";
  }
  return nullptr;
}

void moe_prefill_host_sync(Gemm& gemm, const MoePrefillParams& p) {
  if (const char* why = moe_prefill_unsupported_reason(p)) GA_THROW(InvalidArgument, "moe prefill: ", why);
  if (p.shape.n_tokens == 0) return;
  const cudaStream_t stream = gemm.stream();
  const int64_t n_embd = p.gate.cols, n_ff = p.gate.rows;
  const int n_expert = p.shape.n_expert;
  const PrefillScratch f = prefill_scratch(p.shape, n_embd, n_ff);
  auto* ws = static_cast<uint8_t*>(p.workspace);
  auto* x16 = reinterpret_cast<__half*>(ws + f.x16);
  auto* ys = reinterpret_cast<float*>(ws + f.ys);
  auto* w16 = reinterpret_cast<__half*>(ws + f.w16);
  auto* gate_up = reinterpret_cast<float*>(ws + f.gate_up);
  auto* act16 = reinterpret_cast<__half*>(ws + f.act16);
  const MoePlanView plan = moe_plan_view(p.shape, const_cast<void*>(p.plan));

  GA_CUDA_CHECK(gather_sorted(p, x16, stream));
  // the host sync: which experts have tokens, and where their rows start
  std::vector<int32_t> counts(static_cast<size_t>(n_expert)), offsets(static_cast<size_t>(n_expert));
  GA_CUDA_CHECK(cudaMemcpyAsync(counts.data(), plan.counts, counts.size() * 4, cudaMemcpyDeviceToHost, stream));
  GA_CUDA_CHECK(cudaMemcpyAsync(offsets.data(), plan.offsets, offsets.size() * 4, cudaMemcpyDeviceToHost, stream));
  GA_CUDA_CHECK(cudaStreamSynchronize(stream));

  // f16 weights of expert e of a stack: the stack's own bytes (F16) or w16 after dequantize_to_f16
  auto f16_weights = [&](const MoeExperts& w, int e) -> const void* {
    const auto* base = static_cast<const uint8_t*>(w.data) + static_cast<int64_t>(e) * w.expert_stride;
    if (w.type == DType::F16) return base;
    GA_CUDA_CHECK(engine::dequantize_to_f16(w.type, base, w.rows, w.cols, w16, stream));
    return w16;
  };
  for (int e = 0; e < n_expert; ++e) {
    const int64_t count = counts[static_cast<size_t>(e)];
    if (count == 0) continue;
    const int64_t first = offsets[static_cast<size_t>(e)];
    GemmParams m;
    m.type = DType::F16;
    m.rows = n_ff;
    m.k = n_embd;
    m.n = count;
    m.ldw = n_embd;
    m.x = x16 + first * n_embd;
    m.ldx = n_embd;
    m.ldy = 2 * n_ff;
    for (int half = 0; half < 2; ++half) {  // gate into columns [0, n_ff), up into [n_ff, 2 n_ff)
      m.w = f16_weights(half == 0 ? p.gate : p.up, e);
      m.y = gate_up + half * n_ff;
      gemm.run(m);
    }
    const MoeActivateParams a{gate_up, 2 * n_ff, gate_up, 2 * n_ff, count, n_ff, p.act};
    GA_CUDA_CHECK(moe_activate(a, stream));
    GA_CUDA_CHECK(engine::convert_rows(gate_up, 2 * n_ff, act16, n_ff, DType::F16, count, n_ff, stream));
    GemmParams d;
    d.type = DType::F16;
    d.w = f16_weights(p.down, e);
    d.ldw = n_ff;
    d.x = act16;
    d.ldx = n_ff;
    d.y = ys + first * n_embd;
    d.ldy = n_embd;
    d.rows = n_embd;
    d.k = n_ff;
    d.n = count;
    gemm.run(d);
  }
  GA_CUDA_CHECK(moe_combine(sorted_combine(p, ys, plan), stream));
}

// ---- path (a): no host sync ----

namespace {

struct GraphScratch {  // byte offsets into the workspace
  int64_t x16, gate_up, act16, ys, gate16, up16, down16, total;
};

// The f16 weights of a stack: in place (F16), the caller's copy, or dequantized into the workspace.
bool stack_needs_f16(const MoeExperts& w, const void* f16_copy) { return w.type != DType::F16 && f16_copy == nullptr; }

GraphScratch graph_scratch(const MoePrefillParams& p) {
  const int64_t pairs = p.shape.n_pairs(), n_embd = p.gate.cols, n_ff = p.gate.rows;
  const int64_t stack16 = align_up(int64_t{p.shape.n_expert} * n_ff * n_embd * 2);
  GraphScratch f;
  f.x16 = 0;                                          // [n_pairs][n_embd] f16, sorted
  f.gate_up = f.x16 + align_up(pairs * n_embd * 2);   // [n_pairs][2 n_ff] f32, sorted
  f.act16 = f.gate_up + align_up(pairs * 2 * n_ff * 4);  // [n_pairs][n_ff] f16, sorted
  f.ys = f.act16 + align_up(pairs * n_ff * 2);        // [n_pairs][n_embd] f32, sorted
  f.gate16 = f.ys + align_up(pairs * n_embd * 4);
  f.up16 = f.gate16 + (stack_needs_f16(p.gate, p.gate_f16) ? stack16 : 0);
  f.down16 = f.up16 + (stack_needs_f16(p.up, p.up_f16) ? stack16 : 0);
  f.total = f.down16 + (stack_needs_f16(p.down, p.down_f16) ? stack16 : 0);
  return f;
}

}  // namespace

int64_t moe_prefill_graph_workspace_bytes(const MoePrefillParams& p) { return graph_scratch(p).total; }

const char* moe_prefill_graph_unsupported_reason(const MoePrefillParams& p) {
  if (const char* why = prefill_shape_reason(p)) return why;
  if (p.gate.rows % 64 != 0 || p.gate.cols % 64 != 0) return "the grouped GEMM needs n_embd and n_ff multiples of 64";
  if (!workspace_holds(p, moe_prefill_graph_workspace_bytes(p))) {
    return "the workspace must be 256-byte aligned and moe_prefill_graph_workspace_bytes() long";
  }
  for (const void* f16 : {p.gate_f16, p.up_f16, p.down_f16}) {
    if (reinterpret_cast<uintptr_t>(f16) % 16 != 0) return "the f16 copies must be 16-byte aligned";
  }
  const std::pair<const MoeExperts*, const void*> stacks[] = {{&p.gate, p.gate_f16}, {&p.up, p.up_f16}, {&p.down, p.down_f16}};
  for (const auto& [w, copy] : stacks) {
    if (stack_needs_f16(*w, copy) && w->expert_stride != w->rows * w->row_stride) {
      return "dequantizing a whole stack needs its experts packed (expert_stride = rows * row_stride)";
    }
  }
  return nullptr;
}

cudaError_t moe_prefill_graph(const MoePrefillParams& p, cudaStream_t stream) {
  if (moe_prefill_graph_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.shape.n_tokens == 0) return cudaSuccess;
  const int64_t n_embd = p.gate.cols, n_ff = p.gate.rows, pairs = p.shape.n_pairs();
  const GraphScratch f = graph_scratch(p);
  auto* ws = static_cast<uint8_t*>(p.workspace);
  const MoePlanView plan = moe_plan_view(p.shape, const_cast<void*>(p.plan));
  cudaError_t status = cudaSuccess;
  // f16 stacks: [n_expert * rows][cols] packed halves
  auto f16_stack = [&](const MoeExperts& w, const void* copy, int64_t offset) -> const void* {
    if (w.type == DType::F16) return w.data;
    if (copy != nullptr) return copy;
    void* dst = ws + offset;
    if (status == cudaSuccess) {
      status = engine::dequantize_to_f16(w.type, w.data, int64_t{p.shape.n_expert} * w.rows, w.cols,
                                        static_cast<__half*>(dst), stream);
    }
    return dst;
  };
  // a stack's expert stride in halves: packed f16 rows (dequantized or caller's copy), or the F16 stack's own
  auto stride16 = [&](const MoeExperts& w, const void* copy) {
    return w.type == DType::F16 && copy == nullptr ? w.expert_stride / 2 : w.rows * w.cols;
  };
  const void* gate16 = f16_stack(p.gate, p.gate_f16, f.gate16);
  const void* up16 = f16_stack(p.up, p.up_f16, f.up16);
  const void* down16 = f16_stack(p.down, p.down_f16, f.down16);
  if (status != cudaSuccess) return status;
  if (stride16(p.gate, p.gate_f16) != stride16(p.up, p.up_f16)) return cudaErrorInvalidValue;  // one launch: one stride

  if ((status = gather_sorted(p, ws + f.x16, stream)) != cudaSuccess) return status;

  // gate | up in one launch: [n_pairs][2 n_ff]
  if ((status = grouped_gemm(p, gate16, up16, stride16(p.gate, p.gate_f16), n_ff, n_embd, ws + f.x16,
                             reinterpret_cast<float*>(ws + f.gate_up), 2 * n_ff, stream)) != cudaSuccess) {
    return status;
  }
  auto* gate_up = reinterpret_cast<float*>(ws + f.gate_up);
  // all n_pairs sorted rows (past the valid ones: workspace left over, never read by the GEMM below)
  const MoeActivateParams a{gate_up, 2 * n_ff, gate_up, 2 * n_ff, pairs, n_ff, p.act};
  if ((status = moe_activate(a, stream)) != cudaSuccess) return status;
  if ((status = engine::convert_rows(gate_up, 2 * n_ff, ws + f.act16, n_ff, DType::F16, pairs, n_ff, stream)) !=
      cudaSuccess) {
    return status;
  }
  if ((status = grouped_gemm(p, down16, nullptr, stride16(p.down, p.down_f16), n_embd, n_ff, ws + f.act16,
                             reinterpret_cast<float*>(ws + f.ys), n_embd, stream)) != cudaSuccess) {
    return status;
  }

  return moe_combine(sorted_combine(p, reinterpret_cast<const float*>(ws + f.ys), plan), stream);
}

}  // namespace ga::cuda
