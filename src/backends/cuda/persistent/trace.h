// The persistent decode kernel's trace mode: the per-CTA stamps of one step (StepArgs::trace: plan.h's TraceStamp
// phases, in globaltimer nanoseconds, per CTA and instruction) as a Chrome-tracing / Perfetto JSON timeline and
// as a summary of where the step's time went: per instruction class, the bytes it streamed over the time it held
// the step (from its last CTA's dependencies to its last CTA's end), and the time CTAs spent waiting.
// GA_PERSISTENT_TRACE=FILE turns it on in the engine (the last step before the engine closes is written).
// Host code, no CUDA.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "backends/cuda/persistent/plan_builder.h"

namespace ga::cuda::persistent {

// stamps: [plan.grid][plan.instrs.size()][kTraceStamps], 0 where a CTA had no tile of an instruction.
std::string trace_json(const Plan& plan, std::span<const uint64_t> stamps);
std::string trace_summary(const Plan& plan, std::span<const uint64_t> stamps);

}  // namespace ga::cuda::persistent
