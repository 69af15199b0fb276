// Diagnostic switches read from the environment (GA_SCHEDULER_TRACE, GA_PREFILL_GPU_TIMING, ...): one reading rule
// for all of them, so "GA_X=0" means off everywhere.
#pragma once

namespace ga {

// True when the variable `name` is set to anything but the empty string or "0".
bool env_flag(const char* name);

}  // namespace ga
