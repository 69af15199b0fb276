// FP8 (e4m3) wgmma shapes wider than 128 for S = Q K^T of the FP8 forward's wide key tiles
// (kernels/flash/flash_fwd_sm90.cuh, FwdTraits::kBlockN 224: FlashAttention-3's FP8 tile at head dim 128, which pays
// each key tile's fixed costs (wgmma wait, row max/sum shuffles, O rescale, barrier round trips) once per 224 keys
// instead of once per 128). Only the shared-memory form (ss), f32 accumulators: the PV GEMM's N is the head dim, which
// tile/hopper.cuh's Wgmma<128, kE4m3>::rs covers. Same conventions as Wgmma<128, kE4m3>::ss: k = 32 bytes per
// instruction, both operands K-major (8-bit wgmma has no transpose immediates), d[4j + e] is row 16w + g + 8 (e / 2),
// column 8j + 2c + (e % 2). The operand lists and the instruction reuse tile/hopper.cuh's spelling macros.
#pragma once

#include "backends/cuda/kernels/tile/hopper_wide.cuh"

namespace ga::cuda::tile {

#define GA_WG_REGS224 \
  GA_WG_REGS192 ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define GA_WG_ACCS224 GA_WG_ACCS192, GA_WG_ACC8(96), GA_WG_ACC8(104)
#define GA_WG_I224_0 112  // desc_a, desc_b, accumulate after the 112 accumulators (tile/hopper.cuh GA_WGMMA_SS8_BODY)
#define GA_WG_I224_1 113
#define GA_WG_I224_2 114

template <>
struct Wgmma<224, ElemKind::kE4m3> {
  template <int kTransB>
  static __device__ __forceinline__ void ss(float (&d)[112], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    static_assert(kTransB == 0, "8-bit wgmma reads both operands K-major");
    GA_WGMMA_SS8_BODY(224)
  }
};

}  // namespace ga::cuda::tile
