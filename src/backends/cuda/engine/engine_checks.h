// Small helpers the CudaEngine files share.
#pragma once

#include "gpu_accel/error.h"

namespace ga::cuda::engine {

// Throws with the op's own reason when a launcher rejects its parameters.
template <class P>
void check_params(const char* op, const char* (*reason)(const P&), const P& p) {
  const char* why = reason(p);
  GA_CHECK(why == nullptr, Internal, "CUDA ", op, " rejected its parameters: ", why);
}

}  // namespace ga::cuda::engine
