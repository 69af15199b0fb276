// The persistent decode kernel's plan builder: the step ops of one decode token, as the CUDA engine resolved them
// (device pointers of the token's row, the weights as uploaded), become the instruction list of plan.h.
//
// The engine runs the architecture's Program once against a recorder (engine/cuda_engine_persistent.cpp) instead
// of its kernels; nothing here names an architecture. The builder
//   1. fuses what a one-token step does in small ops into the instructions around it:
//        q/k head norms + RoPE + the K/V store + attention -> one attention instruction;
//        the attention's output -> merged by log-sum-exp in its projection's x load (no merge instruction);
//        GEMV into t, then rmsnorm(residual += t) -> the GEMV adds into the residual (kAccumulate);
//        rmsnorm(x) read only by GEMVs -> each GEMV CTA normalizes x while it stages it (kRmsNorm);
//        gate and up GEMVs, then act(gate) * up -> one GEMV over paired gate/up rows (kGlu);
//        a softcap of a GEMV's output -> its epilogue;
//      and keeps a norm or a GLU it cannot fold as an instruction of its own;
//   2. derives every instruction's dependencies from the device bytes each reads and writes (read after write,
//      write after read, write after write), transitively reduced, so an instruction waits for the few that it
//      must and no grid-wide barrier exists;
//   3. sizes the tiles, the ring and the shared-memory staging for the device.
// An op the kernel does not run (MoE, the recurrent ops, a tensor-parallel all-reduce), a weight type or layout it
// does not decode, or a shape past its limits makes build_plan throw Unsupported naming it; the engine then keeps
// the per-op path and says why once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "backends/cuda/persistent/plan.h"

namespace ga::cuda::persistent {

namespace rec {
struct Gemv {  // y[0, rows) = W x[0, cols)
  DType type = DType::F32;
  const uint8_t* w = nullptr;
  int64_t rows = 0, cols = 0, row_bytes = 0;
  bool gguf_layout = true;  // false: split rows (weight_layout.h), which the kernel does not decode
  const float* x = nullptr;
  float* y = nullptr;
};
struct Norm {  // out = rmsnorm(v) * w, v = x or residual += x
  const float* x = nullptr;
  float* residual = nullptr;
  const float* w = nullptr;
  float* out = nullptr;
  int64_t n = 0;
  float eps = 0.0f;
};
struct HeadNorm {  // per-head rmsnorm of x (x_heads heads) and x2 (x2_heads), in place
  float* x = nullptr;
  const float* w = nullptr;
  int64_t x_heads = 0;
  float* x2 = nullptr;
  const float* w2 = nullptr;
  int64_t x2_heads = 0;
  int64_t head_dim = 0;
  float eps = 0.0f;
};
struct RopeKv {  // q = rope(q + bq) in place; the cache row of the token = rope(k + bk), v + bv
  float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  bool neox = false;
  const double* inv_freq = nullptr;
  float mscale = 1.0f;
  uint16_t* k_cache = nullptr;
  uint16_t* v_cache = nullptr;
  int64_t cache_bytes = 0;
};
struct Attention {  // out = softmax(cap(scale q.k)) v over the cached positions
  const float* q = nullptr;
  float* out = nullptr;
  const uint16_t* k_cache = nullptr;
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.0f;
  int64_t window_left = -1;
  float softcap = 0.0f;
};
struct Glu {  // out = act(gate) * up
  const float* gate = nullptr;
  const float* up = nullptr;
  float* out = nullptr;
  int64_t n = 0;
  uint8_t act = 0;
};
struct Softcap {  // y = cap * tanh(y / cap), right after the GEMV that wrote y
  float* y = nullptr;
  int64_t n = 0;
  float cap = 0.0f;
};
}  // namespace rec

using StepRecord = std::variant<rec::Gemv, rec::Norm, rec::HeadNorm, rec::RopeKv, rec::Attention, rec::Glu, rec::Softcap>;

struct PlanTarget {
  int32_t grid = 0;          // CTAs: one per SM
  int64_t smem_bytes = 0;    // dynamic shared memory one CTA may take
  bool int8_x = true;        // the int8-activation dot for the types that have one (GemvInstr::int8_x)
  // Ring slots at most (2..kMaxSlots): 3 measured best on the H200 (1B F16 and 7B Q4_0, 2 to 6 slots within 4 %):
  // deeper rings only queue more weight bytes ahead of the step's dependent loads.
  int32_t max_slots = 3;
  // Rows per warp: prefer a choice whose tile fits one slot whole (packed: one bulk copy a slot) over the one that
  // reads fewer x bytes (GA_PERSISTENT_PACK=prefer; tuning).
  bool prefer_packed = false;
};

struct Plan {
  std::vector<Instr> instrs;
  std::vector<int32_t> deps;
  int32_t grid = 0;
  int32_t n_slots = 0;       // ring slots of kSlotBytes
  int64_t x_bytes = 0;       // staging of x (and the attention's scratch) after the ring
  int64_t x_int8_offset = 0; // where in that staging the int8 GEMVs' quantized x starts (after the floats)
  int64_t smem_bytes = 0;    // the launch's dynamic shared memory
  int64_t weight_bytes = 0;  // the weights one step streams
  std::string summary;       // "N instructions: ..." for the engine's description
};

// Chunks a KV head's positions are split into at most, on a grid of `grid` CTAs.
int32_t attention_chunks(int64_t n_head_kv, int32_t grid);
// Floats of the attention partials workspace the plan of `ops` needs (0 without attention).
int64_t attention_partial_floats(std::span<const StepRecord> ops, int32_t grid);

// The plan of `ops` (one decode token's step ops in Program order), or Unsupported naming what the kernel lacks.
// partials: a device workspace of attention_partial_floats(ops, target.grid) floats.
Plan build_plan(std::span<const StepRecord> ops, const PlanTarget& target, float* partials);

}  // namespace ga::cuda::persistent
