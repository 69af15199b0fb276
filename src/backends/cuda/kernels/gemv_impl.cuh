// Launch side of the GEMV: the default configuration per type and token count, the two kernel
// launchers (also called with other configurations by bench_gemv's sweep) and the per-type entry
// point launch_gemv<D>, explicitly instantiated in gemv_instances/gemv_<type>.cu. The kernels and
// their design notes are in gemv_kernel.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/gemv_int8.cuh"
#include "backends/cuda/kernels/gemv_kernel.cuh"
#include "backends/cuda/kernels/gemv_split.cuh"

namespace ga::cuda::detail {

inline constexpr int64_t kDefaultSharedLimit = 48 * 1024;  // dynamic shared memory without an opt-in

// Batch: DenseBatch (gemv()) or the expert GEMV's policy (moe_gemv_impl.cuh); see gemv_kernel.cuh.
template <class D, int NT, class Cfg, class Batch = DenseBatch>
cudaError_t launch_gemv_staged(const typename Batch::Args& args, cudaStream_t stream) {
  const GemvArgs& a = Batch::base(args);
  const int64_t blocks = (a.rows + Cfg::kRows - 1) / Cfg::kRows;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  constexpr int64_t smem = gemv_stage_bytes<D, Cfg>();
  if constexpr (smem > kDefaultSharedLimit) {
    // per call, not cached: the attribute belongs to the current device, and it costs ~1 us of host time
    const cudaError_t status = cudaFuncSetAttribute(
        gemv_staged_kernel<D, NT, Cfg, Batch>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (status != cudaSuccess) return status;
  }
  return launch_after_prior(gemv_staged_kernel<D, NT, Cfg, Batch>, Batch::grid(static_cast<unsigned>(blocks), args),
                            dim3(kGemvWarps * 32), static_cast<size_t>(smem), stream, a, Batch::extra(args));
}

template <class D, int NT, class Cfg, class Batch = DenseBatch>
cudaError_t launch_gemv_direct(const typename Batch::Args& args, cudaStream_t stream) {
  const GemvArgs& a = Batch::base(args);
  const int64_t blocks = (a.rows + Cfg::kRows - 1) / Cfg::kRows;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return launch_after_prior(gemv_direct_kernel<D, NT, Cfg, Batch>, Batch::grid(static_cast<unsigned>(blocks), args),
                            dim3(kGemvWarps * 32), 0, stream, a, Batch::extra(args));
}

// Rows per CTA of the staged kernel: D::kRows for one token; for several, the decoded weights of all
// rows stay live across the tokens, so rows are cut to 4 and, from 4 tokens on, to keep the decoded
// weights near 32 registers (8 rows of a classic type at 2 tokens spilled).
template <class D, int NT>
__host__ __device__ constexpr int gemv_staged_rows() {
  if constexpr (NT == 1) return D::kRows;
  constexpr int budget = (NT >= 4 ? 32 : 64) / D::kElems;
  constexpr int rows = budget < 2 ? 2 : (budget > 4 ? 4 : budget);
  return rows < D::kRows ? rows : D::kRows;
}

// Default configurations (bench_gemv --sweep compares alternatives on the device): quant types take
// one chunk per lane and row per stage, a ring of 4 for 4 rows (34 KB per CTA: 6 CTAs, 24 warps per
// SM, each with 3 x 4 x 512 bytes in flight) and of 3 for 8 rows (51 KB: 4 CTAs, 16 warps, 2 x 8 x 512
// bytes each); the float types' unaligned-row fallback needs 2 iterations of 512 bytes per stage.
template <class D, int NT>
using DefaultStaged = StagedConfig<gemv_staged_rows<D, NT>(), D::kIntDecode ? 1 : D::kChunksPerLane,
                                   D::kIntDecode && gemv_staged_rows<D, NT>() < 8 ? 4 : 3>;
template <int NT>
using DefaultDirect = DirectConfig<NT == 1 ? 2 : 4, NT == 1 ? 4 : 2>;

// The kernel arguments of a validated GemvParams.
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
  a.split_rows = p.layout == WeightLayout::kSplitRows;
  a.x_int8 = p.x_int8;
  a.x_e4m3x2 = p.x_e4m3x2;
  return a;
}

// Which kernel family a launch may take: the routing below (kAuto), or one forced (the expert GEMV's
// MoeGemvKernel, for its benchmark and tests): kFloat never the int8 kernel, kInt8 only it (the caller
// has checked gemv_int8_eligible).
enum class GemvPath : uint8_t { kAuto, kFloat, kInt8 };

// Whether the routing sends these arguments to the int8 kernel (`r`: Batch::routing(args), the launch's
// shape as the routing limits see it).
template <class D>
bool gemv_routes_to_int8(const GemvArgs& r, GemvPath path) {
  return path == GemvPath::kInt8 || (path == GemvPath::kAuto && gemv_int8_eligible<D>(r));
}

template <class D, int NT, class Batch = DenseBatch>
cudaError_t launch_gemv_tokens(const typename Batch::Args& args, cudaStream_t stream, GemvPath path = GemvPath::kAuto) {
  constexpr bool kDense = std::is_same_v<Batch, DenseBatch>;
  const GemvArgs& a = Batch::base(args);
  const GemvArgs r = Batch::routing(args);
  if constexpr (SplitRows<D>::kEnabled && kDense) {
    // rows repacked at upload (weight_layout.h): aligned code chunks read straight into registers
    if (a.split_rows) return launch_gemv_split<D, NT>(a, stream);
  }
  if constexpr (Int8Traits<D>::kEnabled) {
    // classic quant types with 16-byte aligned rows: int8 activations and DP4A (gemv_int8.cuh)
    if (gemv_routes_to_int8<D>(r, path)) return launch_gemv_int8<D, NT, Batch>(args, stream);
  }
  if constexpr (D::kUnitScale) {
    // float types read rows straight into registers when every chunk is 16-byte aligned (w is)
    if (a.row_stride % kChunkBytes == 0) return launch_gemv_direct<D, NT, DefaultDirect<NT>, Batch>(args, stream);
  }
  if constexpr (D::kType == DType::Q6_K && NT == 1) {
    // few rows, long rows (Q4_K_M's ffn_down, 4096x11008): 2 rows x 2 chunks x 4 stages per warp measured
    // 24.6 us against the default's 27.0 us; elsewhere the default was as fast or faster (bench_gemv --sweep,
    // H200, 2026-11-22)
    if (r.rows <= 4096 && r.blocks_per_row >= 32) return launch_gemv_staged<D, 1, StagedConfig<2, 2, 4>, Batch>(args, stream);
  }
  return launch_gemv_staged<D, NT, DefaultStaged<D, NT>, Batch>(args, stream);
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
