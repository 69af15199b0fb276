// Wider wgmma shapes for S = Q K^T of the forward's wide key tiles (kernels/flash/flash_fwd_sm90.cuh,
// FwdTraits::kBlockN 80 / 176 / 192: FlashAttention-3's 128 x 176 tile at head dim 128, 128 x 80 at 256,
// 128 x 192 at 64). Only the shared-memory form (ss) with f32 accumulators: the PV GEMM's N is the head dim,
// which tile/hopper.cuh already covers. Same operand conventions as tile/hopper.cuh's Wgmma<64/128, E>::ss:
// d[4j + e] is row 16w + g + 8 (e / 2), column 8j + 2c + (e % 2). The operand lists are long (N / 2
// accumulators each), so they are spelled by macros (GA_WG_ACC8: eight "+f" operands) instead of by hand.
#pragma once

#include "backends/cuda/kernels/tile/hopper.cuh"

namespace ga::cuda::tile {

#define GA_WG_ACC8(b)                                                                                   \
  "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), \
      "+f"(d[b + 7])

#define GA_WG_REGS80 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39"
#define GA_WG_ACCS80 GA_WG_ACC8(0), GA_WG_ACC8(8), GA_WG_ACC8(16), GA_WG_ACC8(24), GA_WG_ACC8(32)
#define GA_WG_REGS176 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
  "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87"
#define GA_WG_ACCS176 GA_WG_ACC8(0), GA_WG_ACC8(8), GA_WG_ACC8(16), GA_WG_ACC8(24), GA_WG_ACC8(32), \
  GA_WG_ACC8(40), GA_WG_ACC8(48), GA_WG_ACC8(56), GA_WG_ACC8(64), GA_WG_ACC8(72), GA_WG_ACC8(80)
#define GA_WG_REGS192 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
  "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define GA_WG_ACCS192 GA_WG_ACC8(0), GA_WG_ACC8(8), GA_WG_ACC8(16), GA_WG_ACC8(24), GA_WG_ACC8(32), \
  GA_WG_ACC8(40), GA_WG_ACC8(48), GA_WG_ACC8(56), GA_WG_ACC8(64), GA_WG_ACC8(72), GA_WG_ACC8(80), \
  GA_WG_ACC8(88)

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
// %N/2 .. %N/2+3: desc_a, desc_b, accumulate (predicate), kTransB.
#define GA_WGMMA_SS_WIDE_BODY(N, TYPE)                                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" GA_WG_STR(GA_WG_HALF##N##_2) ", 0;\n"                   \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" GA_WG_REGS##N "}, "    \
               "%" GA_WG_STR(GA_WG_HALF##N##_0) ", %" GA_WG_STR(GA_WG_HALF##N##_1) ", p, 1, 1, 0, "            \
               "%" GA_WG_STR(GA_WG_HALF##N##_3) ";\n}\n"                                                    \
               : GA_WG_ACCS##N                                                                                 \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB));
#else
#define GA_WGMMA_SS_WIDE_BODY(N, TYPE) \
  (void)d; (void)desc_a; (void)desc_b; (void)accumulate; __trap();
#endif
#define GA_WG_STR2(x) #x
#define GA_WG_STR(x) GA_WG_STR2(x)

#define GA_WG_HALF80_0 40
#define GA_WG_HALF80_1 41
#define GA_WG_HALF80_2 42
#define GA_WG_HALF80_3 43
#define GA_WG_HALF176_0 88
#define GA_WG_HALF176_1 89
#define GA_WG_HALF176_2 90
#define GA_WG_HALF176_3 91
#define GA_WG_HALF192_0 96
#define GA_WG_HALF192_1 97
#define GA_WG_HALF192_2 98
#define GA_WG_HALF192_3 99

GA_WGMMA_SS_WIDE(80, ElemKind::kBf16, "bf16")
GA_WGMMA_SS_WIDE(80, ElemKind::kF16, "f16")
GA_WGMMA_SS_WIDE(176, ElemKind::kBf16, "bf16")
GA_WGMMA_SS_WIDE(176, ElemKind::kF16, "f16")
GA_WGMMA_SS_WIDE(192, ElemKind::kBf16, "bf16")
GA_WGMMA_SS_WIDE(192, ElemKind::kF16, "f16")

#undef GA_WGMMA_SS_WIDE
#undef GA_WGMMA_SS_WIDE_BODY

}  // namespace ga::cuda::tile
