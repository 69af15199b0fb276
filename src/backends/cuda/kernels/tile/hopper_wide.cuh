// Wider wgmma shapes for S = Q K^T of the forward's wide key tiles (kernels/flash/flash_fwd_sm90.cuh,
// FwdTraits::kBlockN 80 / 176 / 192: FlashAttention-3's 128 x 176 tile at head dim 128, 128 x 80 at 256,
// 128 x 192 at 64). Only the shared-memory form (ss) with f32 accumulators: the PV GEMM's N is the head dim,
// which tile/hopper.cuh already covers. Same operand conventions as tile/hopper.cuh's Wgmma<64/128, E>::ss:
// d[4j + e] is row 16w + g + 8 (e / 2), column 8j + 2c + (e % 2). The operand lists are long (N / 2
// accumulators each), so they are spelled by macros (tile/hopper.cuh's GA_WG_ACC8: eight "+f" operands) instead of by
// hand.
#pragma once

#include "backends/cuda/kernels/tile/hopper.cuh"

namespace ga::cuda::tile {

#define GA_WG_REGS80 GA_WG_REGS64 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define GA_WG_ACCS80 GA_WG_ACCS64, GA_WG_ACC8(32)
#define GA_WG_REGS176                                                                                       \
  GA_WG_REGS128 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, " \
  "%82, %83, %84, %85, %86, %87"
#define GA_WG_ACCS176 GA_WG_ACCS128, GA_WG_ACC8(64), GA_WG_ACC8(72), GA_WG_ACC8(80)
#define GA_WG_REGS192 GA_WG_REGS176 ", %88, %89, %90, %91, %92, %93, %94, %95"
#define GA_WG_ACCS192 GA_WG_ACCS176, GA_WG_ACC8(88)

// One specialization per (N, type): the PTX type string must be a literal.
#define GA_WGMMA_SS_WIDE(N, E, TYPE)                                                                           \
  template <>                                                                                                  \
  struct Wgmma<N, E> {                                                                                         \
    template <int kTransB>                                                                                     \
    static __device__ __forceinline__ void ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int accumulate) { \
      GA_WGMMA_SS_WIDE_BODY(N, TYPE)                                                                           \
    }                                                                                                          \
  };

#if GA_SM90A_DEVICE
// GA_WG_I(N, 0 .. 3): desc_a, desc_b, accumulate (predicate), kTransB.
#define GA_WGMMA_SS_WIDE_BODY(N, TYPE)                                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " GA_WG_I(N, 2) ", 0;\n"                                       \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" GA_WG_REGS##N "}, "    \
               GA_WG_I(N, 0) ", " GA_WG_I(N, 1) ", p, 1, 1, 0, " GA_WG_I(N, 3) ";\n}\n"                       \
               : GA_WG_ACCS##N                                                                                 \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB));
#else
#define GA_WGMMA_SS_WIDE_BODY(N, TYPE) \
  (void)d; (void)desc_a; (void)desc_b; (void)accumulate; __trap();
#endif

#define GA_WG_I80_0 40
#define GA_WG_I80_1 41
#define GA_WG_I80_2 42
#define GA_WG_I80_3 43
#define GA_WG_I176_0 88
#define GA_WG_I176_1 89
#define GA_WG_I176_2 90
#define GA_WG_I176_3 91
#define GA_WG_I192_0 96
#define GA_WG_I192_1 97
#define GA_WG_I192_2 98
#define GA_WG_I192_3 99

GA_WGMMA_SS_WIDE(80, ElemKind::kBf16, "bf16")
GA_WGMMA_SS_WIDE(80, ElemKind::kF16, "f16")
GA_WGMMA_SS_WIDE(176, ElemKind::kBf16, "bf16")
GA_WGMMA_SS_WIDE(176, ElemKind::kF16, "f16")
GA_WGMMA_SS_WIDE(192, ElemKind::kBf16, "bf16")
GA_WGMMA_SS_WIDE(192, ElemKind::kF16, "f16")

#undef GA_WGMMA_SS_WIDE
#undef GA_WGMMA_SS_WIDE_BODY

}  // namespace ga::cuda::tile
