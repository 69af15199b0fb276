// moe_prefill_host_sync (moe_prefill.h): per routed expert, dequantize + cuBLAS GEMMs on its gathered rows.
#include "backends/cuda/moe_prefill.h"

#include <cuda_fp16.h>

#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/llama/llama_kernels.h"
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

}  // namespace

int64_t moe_prefill_workspace_bytes(const MoeShape& s, int64_t n_embd, int64_t n_ff) {
  return prefill_scratch(s, n_embd, n_ff).total;
}

const char* moe_prefill_unsupported_reason(const MoePrefillParams& p) {
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
    if (w->data == nullptr || !llama::dequantize_f16_supports(w->type)) return "a stack is null or of a type the f16 dequantizer does not read";
    if (!packed(*w)) return "the prefill needs packed rows (row_stride = row_bytes)";
    if (w->expert_stride % 16 != 0 || w->expert_stride < w->rows * w->row_stride) return "expert_stride must be a multiple of 16 holding an expert";
  }
  if (n_embd % 8 != 0 || n_ff % 8 != 0) return "n_embd and n_ff must be multiples of 8 (16-byte f16 rows)";
  if (p.ldx < n_embd || p.ldx % 4 != 0 || p.ld_out < n_embd || p.ld_out % 4 != 0) {
    return "ldx and ld_out must be >= n_embd and multiples of 4";
  }
  if (p.workspace == nullptr || reinterpret_cast<uintptr_t>(p.workspace) % kAlign != 0 ||
      p.workspace_bytes < moe_prefill_workspace_bytes(p.shape, n_embd, n_ff)) {
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

  MoeGatherParams g;
  g.shape = p.shape;
  g.plan = p.plan;
  g.x = p.x;
  g.ldx = p.ldx;
  g.n = n_embd;
  g.dst_f16 = x16;
  g.ld_dst = n_embd;
  GA_CUDA_CHECK(moe_gather_rows_f16(g, stream));
  // the host sync: which experts have tokens, and where their rows start
  std::vector<int32_t> counts(static_cast<size_t>(n_expert)), offsets(static_cast<size_t>(n_expert));
  GA_CUDA_CHECK(cudaMemcpyAsync(counts.data(), plan.counts, counts.size() * 4, cudaMemcpyDeviceToHost, stream));
  GA_CUDA_CHECK(cudaMemcpyAsync(offsets.data(), plan.offsets, offsets.size() * 4, cudaMemcpyDeviceToHost, stream));
  GA_CUDA_CHECK(cudaStreamSynchronize(stream));

  // f16 weights of expert e of a stack: the stack's own bytes (F16) or w16 after dequantize_to_f16
  auto f16_weights = [&](const MoeExperts& w, int e) -> const void* {
    const auto* base = static_cast<const uint8_t*>(w.data) + static_cast<int64_t>(e) * w.expert_stride;
    if (w.type == DType::F16) return base;
    GA_CUDA_CHECK(llama::dequantize_to_f16(w.type, base, w.rows, w.cols, w16, stream));
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
    GA_CUDA_CHECK(llama::convert_rows(gate_up, 2 * n_ff, act16, n_ff, DType::F16, count, n_ff, stream));
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
  MoeCombineParams c;
  c.n_tokens = p.shape.n_tokens;
  c.top_k = p.shape.top_k;
  c.n_expert = n_expert;
  c.ids = p.ids;
  c.weights = p.weights;
  c.y = ys;
  c.ldy = n_embd;
  c.y_rows = plan.positions;
  c.n = n_embd;
  c.out = p.out;
  c.ld_out = p.ld_out;
  c.accumulate = p.accumulate;
  GA_CUDA_CHECK(moe_combine(c, stream));
}

}  // namespace ga::cuda
