// The persistent decode kernel: one launch runs a whole decode step of one sequence (every layer's GEMVs,
// attention, norms and GLUs, the final norm and the LM head) from an instruction list (plan.h) built once per model
// by plan_builder.h. The embedding gather before it and the sampling after it stay their own kernels.
//
// One CTA per SM, kThreads threads: kConsumerWarps consumer warps run the instructions; one producer warp streams
// the GEMVs' weight rows into a ring of shared-memory slots (TMA bulk copies on sm_90, cp.async on sm_80/86/89),
// running ahead of the consumers across instruction boundaries, bounded only by the ring. Dependencies are counters
// in global memory (release / acquire at GPU scope), waited on per instruction by the CTAs that have tiles of it.
// The GEMV math is the per-op GEMV's own (gemv_kernel.cuh: decoders, block dot, x loads), the norms, RoPE and GLU
// activation are step_math.cuh's, so the two decode paths share every formula.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/persistent/plan.h"

namespace ga::cuda::persistent {

struct StepArgs {
  const Instr* instrs = nullptr;  // device copy of Plan::instrs
  int32_t n_instrs = 0;
  const int32_t* deps = nullptr;  // device copy of Plan::deps
  uint32_t* counters = nullptr;   // [n_instrs]; persistent_decode() zeroes them before the launch
  const int32_t* pos = nullptr;   // the token's position (device memory: a captured graph replays unchanged)
  const int32_t* slot = nullptr;  // its cache row (paged pool), or null: the row is the position
  const int32_t* block_table = nullptr;  // the sequence's block table (paged pool), or null: contiguous cache
  int32_t block_size = 0;
  int32_t n_slots = 0;            // Plan::n_slots
  int32_t x_offset = 0;           // byte offset of the x staging in dynamic shared memory (n_slots * kSlotBytes)
  int32_t x_int8_offset = 0;      // Plan::x_int8_offset: the int8 x after the float x, from x_offset
  bool bulk_copies = true;        // TMA bulk copies (sm_90) or cp.async (any sm_80+)
  bool weights_evict_first = true;  // the bulk copies' L2 lines evicted first (GA_PERSISTENT_L2=normal: not)
  // Diagnostics (GA_PERSISTENT_PROBE=stream): the consumers take every slot and compute nothing, so a step's time
  // is the weight stream's alone (outputs are garbage).
  bool stream_only = false;
  // Diagnostics (GA_PERSISTENT_PROBE=free): with stream_only, no instruction waits for its dependencies either, so a
  // step's time is the ring's own streaming rate.
  bool ignore_deps = false;
  // Trace mode (optional): [grid][n_instrs][kTraceStamps] globaltimer stamps (plan.h's TraceStamp) per CTA and
  // instruction, 0 where the CTA had no tile of it.
  uint64_t* trace = nullptr;
};

struct DeviceLimits {
  int32_t grid = 0;          // SMs
  int64_t smem_bytes = 0;    // dynamic shared memory one CTA of the kernel may take
  bool bulk_copies = false;  // sm_90: TMA bulk copies
};

// The limits on `device`, or a reason the kernel cannot run there (compute capability below 8.0, a build without
// sm_80+ code for it). GA_PERSISTENT_COPIES=cp.async forces the sm_80 copy path on a Hopper GPU (tests).
const char* persistent_decode_unsupported_reason(int device, DeviceLimits* limits);

// Zeroes the counters and launches the kernel (grid limits.grid, dynamic shared memory smem_bytes <= the limits'
// smem_bytes, which persistent_decode_unsupported_reason() has set as the kernel's maximum) on the stream:
// both are captured into a CUDA graph as they are.
cudaError_t persistent_decode(const StepArgs& args, int32_t grid, int64_t smem_bytes, cudaStream_t stream);

}  // namespace ga::cuda::persistent
