// What the forward and the backward host code share (flash_forward.cu defines it): the checks of the
// forward's parameters (pointers, dtype, head dim, shape, 16-byte alignment of pointers and strides), which
// the backward applies to its FlashBwdParams::fwd part before checking its own tensors; the device's SM count. And
// the seam to the FP8 forward's host code (flash_fp8.cu).
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/flash/flash_attention.h"

namespace ga::cuda::flash_detail {

// nullptr when the forward's parameters are valid (device aside), else why not.
const char* shared_params_reason(const FlashParams& p);

// The mma.sync kernels' form of p's mask (forward and backward): query row i sees keys i + lo .. i + hi (offsets from
// the bottom-right diagonal), clamped so that an unbounded side never masks and the sums stay in int (keys lie in
// [0, seqlen_k), rows in [0, seqlen_q)); windowed: p has a left window (lo bounds anything).
struct DiagonalBand {
  int lo, hi, windowed;
};
inline DiagonalBand diagonal_band(const FlashParams& p) {
  const int64_t diag = int64_t{p.seqlen_k} - p.seqlen_q;
  const int64_t hi = p.causal ? diag : p.window_right >= 0 ? diag + p.window_right : int64_t{p.seqlen_k};
  const int64_t lo = p.window_left >= 0 ? diag - p.window_left : -int64_t{p.seqlen_q};
  return {static_cast<int>(lo < -int64_t{p.seqlen_q} ? -int64_t{p.seqlen_q} : lo),
          static_cast<int>(hi > p.seqlen_k ? int64_t{p.seqlen_k} : hi), p.window_left >= 0 ? 1 : 0};
}

// SMs of the current device (sizes the forward's persistent grids and the backward's causal work order), or 0 when
// it cannot be read.
int current_sm_count();

// FP8 forward (flash_fp8.cu): the V^T workspace size, and the run itself (V^T pre-pass + attention kernel) for
// parameters the caller has already validated (params, device, variant compiled).
size_t fp8_workspace_bytes(const FlashParams& p);
cudaError_t forward_fp8(const FlashParams& p, int variant, void* workspace, size_t workspace_bytes, int num_sms,
                        cudaStream_t stream);
// Only the V^T pre-pass of forward_fp8 (flash_fp8_transpose_v: benchmarks split the FP8 time with it).
cudaError_t fp8_transpose_v(const FlashParams& p, void* workspace, cudaStream_t stream);

}  // namespace ga::cuda::flash_detail
