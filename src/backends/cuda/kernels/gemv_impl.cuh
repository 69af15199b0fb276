// Launch side of the GEMV: rows-per-warp choice, token-count dispatch and the per-type entry
// point launch_gemv<D>, explicitly instantiated in gemv_instances/gemv_<type>.cu. The kernel and
// its design notes are in gemv_kernel.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/gemv_kernel.cuh"

namespace ga::cuda::detail {

template <class D, int NT>
cudaError_t launch_gemv_tokens(const GemvArgs& a, cudaStream_t stream) {
  constexpr int R = gemv_rows_per_warp<D, NT>();
  const int64_t rows_per_block = static_cast<int64_t>(kGemvWarps) * R;
  const int64_t blocks = (a.rows + rows_per_block - 1) / rows_per_block;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  gemv_kernel<D, R, NT><<<static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

// The kernel arguments of a validated GemvParams (separate so host-side emulation can reuse it).
template <class D>
GemvArgs make_gemv_args(const GemvParams& p) {
  GemvArgs a;
  a.w = static_cast<const uint8_t*>(p.w);
  a.rows = p.rows;
  a.row_stride = p.row_stride;
  a.blocks_per_row = p.cols / D::kBlockElems;
  a.row_bytes = a.blocks_per_row * D::kBlockBytes;
  a.w_end = a.w + (p.rows - 1) * p.row_stride + a.row_bytes;
  a.x = p.x;
  a.ldx = p.ldx;
  a.y = p.y;
  a.ldy = p.ldy;
  a.n_tokens = p.n_tokens;
  return a;
}

// The per-type entry point; its explicit instantiations live in gemv_instances/gemv_<type>.cu.
template <class D>
cudaError_t launch_gemv(const GemvParams& p, cudaStream_t stream) {
  const GemvArgs a = make_gemv_args<D>(p);
  if (p.n_tokens == 1) return launch_gemv_tokens<D, 1>(a, stream);
  if (p.n_tokens == 2) return launch_gemv_tokens<D, 2>(a, stream);
  if (p.n_tokens <= 4) return launch_gemv_tokens<D, 4>(a, stream);
  return launch_gemv_tokens<D, 8>(a, stream);
}

}  // namespace ga::cuda::detail
