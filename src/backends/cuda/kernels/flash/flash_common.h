// What the forward and the backward host code share (flash_forward.cu defines it): the checks of the
// forward's parameters (pointers, dtype, head dim, shape, 16-byte alignment of pointers and strides), which
// the backward applies to its FlashBwdParams::fwd part before checking its own tensors.
#pragma once

#include "backends/cuda/kernels/flash/flash_attention.h"

namespace ga::cuda::flash_detail {

// nullptr when the forward's parameters are valid (device aside), else why not.
const char* shared_params_reason(const FlashParams& p);

}  // namespace ga::cuda::flash_detail
