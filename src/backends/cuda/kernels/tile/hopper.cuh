// Hopper (sm_90a) tile primitives: the PTX of the bulk tensor copy engine (TMA), mbarriers, warpgroup
// MMA (wgmma) and register reallocation, wrapped so kernel bodies read as the algorithm (load, mma,
// softmax, store), as ThunderKittens' group ops do. Shared by the FlashAttention-3-class forward
// (kernels/flash/) and, later, the GEMMs.
//
// Why this shape:
//  * Every wrapper compiles on every arch of the build list (75;80;86;89;90a): the PTX is emitted only
//    in the sm_90a device pass (GA_SM90A_DEVICE); elsewhere the body traps, so a kernel built from
//    these compiles to a trap for other archs and the host refuses those devices with a reason.
//  * Shared-memory tiles use the 128-byte swizzle that TMA writes and wgmma reads natively: a tile is
//    [rows][64] 16-bit elements (128 bytes a row) starting on a 1024-byte boundary; 16-byte chunk c of
//    row r sits at chunk c ^ (r % 8). A head dimension of 128 or 256 is 2 or 4 such column blocks,
//    [cb][rows][64]. Nothing here touches the swizzle by hand: TMA applies it on the way in, the
//    descriptors name it on the way out.
//  * wgmma descriptors (PTX ISA "matrix descriptor"): start address, leading- and stride-byte offsets
//    (all >> 4) and the layout type (1 = 128-byte swizzle). For a K-major operand (K contiguous: Q and
//    K of S = Q K^T) the stride offset is the 1024 bytes between 8-row groups and one k16 step moves the
//    start 32 bytes along the row. For an MN-major operand (N contiguous: V of O = P V, read with the
//    transpose bit) the stride offset is the 1024 bytes between groups of 8 K-rows and the leading
//    offset the distance between 64-column blocks.
//  * Bulk (non-tensor) copies move contiguous byte ranges: the backward's f32 dQ tiles go out as an
//    add-reduction in L2 (cp.reduce.async.bulk), which replaces per-element atomics.
//  * FP8 (e4m3) tiles use the same 128-byte rows, i.e. 128 elements; one k32 step is again 32 bytes.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GA_SM90A_DEVICE 1
#else
#define GA_SM90A_DEVICE 0
#endif

namespace ga::cuda::tile {

// kE4m3: FP8 (e4m3) operands, k = 32 per wgmma, both operands K-major (PTX allows the transpose bit only
// for 16-bit types), so V must be given to O = P V as V^T (kernels/flash/flash_fp8.cu transposes it).
enum class ElemKind { kBf16, kF16, kE4m3 };

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier: a 64-bit shared-memory barrier counting arrivals and the bytes TMA delivers ----

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
#if GA_SM90A_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
#else
  (void)bar; (void)arrivals;
#endif
}

// Makes initialized barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void mbar_fence_init() {
#if GA_SM90A_DEVICE
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// One arrival that also announces `bytes` the copy engine will deliver in this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if GA_SM90A_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
#else
  (void)bar; (void)bytes;
#endif
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if GA_SM90A_DEVICE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
#else
  (void)bar;
#endif
}

// Blocks until the phase with the given parity (0, 1, 0, ...) has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if GA_SM90A_DEVICE
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#else
  (void)bar; (void)parity;
  __trap();
#endif
}

// ---- TMA: one 4-D box of a tensor map into shared memory, completing on an mbarrier ----
// coords are in elements, innermost first (c0 = column, c1 = row, c2 = head, c3 = batch); rows past
// the tensor's extent arrive as zeros.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* tensor_map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
#if GA_SM90A_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar))
      : "memory");
#else
  (void)dst; (void)tensor_map; (void)bar; (void)c0; (void)c1; (void)c2; (void)c3;
  __trap();
#endif
}

// ---- TMA store: one 4-D box from shared memory (the map's swizzle, 1024-byte aligned) into the tensor ----
// Tracked by bulk groups (bulk_commit, then bulk_wait_read before the source is rewritten); elements of the box
// outside the tensor's extent are not written (partial last query blocks, padded rows stay untouched).
__device__ __forceinline__ void tma_store_4d(const void* tensor_map, const void* src, int c0, int c1, int c2,
                                             int c3) {
#if GA_SM90A_DEVICE
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];" ::"l"(
                   reinterpret_cast<uint64_t>(tensor_map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(src))
               : "memory");
#else
  (void)tensor_map; (void)src; (void)c0; (void)c1; (void)c2; (void)c3;
  __trap();
#endif
}

__device__ __forceinline__ void tma_prefetch_map(const void* tensor_map) {
#if GA_SM90A_DEVICE
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tensor_map)) : "memory");
#else
  (void)tensor_map;
#endif
}

// ---- bulk (non-tensor) copies: contiguous byte ranges, 16-byte aligned, sizes multiples of 16 ----
// dst[i] += src[i] for `bytes` / 4 floats, shared -> global, done by the copy engine in L2 (FA3's dQ
// accumulation: one instruction per tile instead of one atomic per element pair). Tracked by bulk groups.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const void* src, uint32_t bytes) {
#if GA_SM90A_DEVICE
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                   reinterpret_cast<uint64_t>(dst)),
               "r"(smem_u32(src)), "r"(bytes)
               : "memory");
#else
  (void)dst; (void)src; (void)bytes;
  __trap();
#endif
}
__device__ __forceinline__ void bulk_commit() {
#if GA_SM90A_DEVICE
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
// Until at most kPending committed bulk groups still read their shared-memory source (the buffer may be reused).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
#if GA_SM90A_DEVICE
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
#endif
}
// Until at most kPending committed bulk groups are still running (their global writes done).
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
#if GA_SM90A_DEVICE
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
#endif
}
// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads (wgmma operands,
// bulk copies out of shared memory); pair it with a barrier so the reader's thread sees them.
__device__ __forceinline__ void fence_async_shared() {
#if GA_SM90A_DEVICE
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// ---- register reallocation between warpgroups (setmaxnreg); needs __launch_bounds__(threads, 1) ----
template <int kRegs>
__device__ __forceinline__ void regs_release() {
#if GA_SM90A_DEVICE
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void regs_acquire() {
#if GA_SM90A_DEVICE
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
#endif
}

// ---- named barriers (ids 1..15; 0 is __syncthreads) for ordering between warpgroups ----
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Orders this thread's ordinary shared-memory stores before later async-proxy reads (wgmma operands, TMA
// stores) of the same bytes; a barrier between the writers and the wgmma issuers must follow.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if GA_SM90A_DEVICE
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// ---- wgmma bookkeeping ----
__device__ __forceinline__ void wgmma_fence() {  // registers written before are visible to the next wgmma
#if GA_SM90A_DEVICE
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if GA_SM90A_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int kPending>  // wait until at most kPending committed groups are still running
__device__ __forceinline__ void wgmma_wait() {
#if GA_SM90A_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
#endif
}
// Pins accumulator registers in place around async wgmma so the compiler moves no use across it.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Same for register A fragments: keeps them live until the wgmma that reads them has been waited for.
template <int M, int K>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[M][K]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < K; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// ---- shared-memory matrix descriptors, 128-byte swizzle ----
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_addr, uint32_t leading_bytes, uint32_t stride_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_addr >> 4) & 0x3FFF);
  d |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32;
  d |= uint64_t{1} << 62;  // layout type 1: 128-byte swizzle (base offset 0: tiles are 1024-byte aligned)
  return d;
}
// K-major [rows][64] block (Q, K): 8-row groups 1024 bytes apart; the leading offset is unused.
__device__ __forceinline__ uint64_t desc_k_major(uint32_t smem_addr) { return desc_sw128(smem_addr, 16, 1024); }
// MN-major block set [cb][k rows][64] (V read as [keys][head_dim]): 64-column blocks `block_bytes` apart.
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t smem_addr, uint32_t block_bytes) {
  return desc_sw128(smem_addr, block_bytes, 1024);
}

// ---- warpgroup MMA, f32 accumulators: D[64][N] (+)= A[64][K] * B[K][N] (K = 16 for 16-bit types, 32 for e4m3) ----
// Accumulator layout (per thread of the warpgroup: warp w owns rows 16w..16w+15, lane = 4g + c):
//   d[4j + e] -> row 16w + g + 8 * (e / 2), column 8j + 2c + (e % 2).
// Register A fragment (rs), 16-bit: a[0] rows g, k 2c..2c+1; a[1] rows g+8; a[2] row g, k 2c+8..; a[3] row g+8,
// k 2c+8.. FP8 (e4m3 x e4m3 -> f32): 4 x b32 of 4 e4m3 each, lowest byte = lowest k: a[0] row g, k 4c..4c+3; a[1]
// row g+8, k 4c..4c+3; a[2] row g, k 16+4c..; a[3] row g+8, k 16+4c.. Both FP8 operands are K-major (no transpose
// immediates exist for 8-bit types).
// ss: A and B in shared memory (descriptors); kTransA 1 (16-bit): A is M-major (the backward's dQ = dS K reads dS
// from a [keys][queries] tile). rs: A in registers, B in shared memory. `accumulate` 0 overwrites D.
template <int N, ElemKind E>
struct Wgmma;

// The instructions' operand lists are N / 2 accumulators long, so they are spelled by macros (also used by
// hopper_wide.cuh and hopper_wide_fp8.cuh): GA_WG_ACC8(b) is eight "+f" operands from d[b]; GA_WG_REGS<N> the
// "%0, ..., %<N/2 - 1>" text of the accumulator list; GA_WG_I<N>_<k> the operand number N / 2 + k (the first one
// after the accumulators), as text for the instruction string.
#define GA_WG_STR2(x) #x
#define GA_WG_STR(x) GA_WG_STR2(x)
#define GA_WG_ACC8(b)                                                                                   \
  "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), \
      "+f"(d[b + 7])
#define GA_WG_REGS64                                                                                      \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GA_WG_ACCS64 GA_WG_ACC8(0), GA_WG_ACC8(8), GA_WG_ACC8(16), GA_WG_ACC8(24)
#define GA_WG_REGS128 \
  GA_WG_REGS64 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GA_WG_ACCS128 GA_WG_ACCS64, GA_WG_ACC8(32), GA_WG_ACC8(40), GA_WG_ACC8(48), GA_WG_ACC8(56)
#define GA_WG_I64_0 32
#define GA_WG_I64_1 33
#define GA_WG_I64_2 34
#define GA_WG_I64_3 35
#define GA_WG_I64_4 36
#define GA_WG_I64_5 37
#define GA_WG_I64_6 38
#define GA_WG_I128_0 64
#define GA_WG_I128_1 65
#define GA_WG_I128_2 66
#define GA_WG_I128_3 67
#define GA_WG_I128_4 68
#define GA_WG_I128_5 69
#define GA_WG_I128_6 70
#define GA_WG_I(N, k) "%" GA_WG_STR(GA_WG_I##N##_##k)

#if GA_SM90A_DEVICE
// 16-bit ss: desc_a, desc_b, accumulate (predicate), kTransB, kTransA after the accumulators.
#define GA_WGMMA_SS16_BODY(N, TYPE)                                                                        \
  asm volatile("{\n.reg .pred p;\n"                                                                       \
               "setp.ne.b32 p, " GA_WG_I(N, 2) ", 0;\n"                                                     \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" GA_WG_REGS##N "},"     \
               " " GA_WG_I(N, 0) ", " GA_WG_I(N, 1) ", p, 1, 1, " GA_WG_I(N, 4) ", " GA_WG_I(N, 3) ";\n}\n" \
               : GA_WG_ACCS##N                                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB), "n"(kTransA));
// 16-bit rs: a[0..3], desc_b, accumulate (predicate), kTransB.
#define GA_WGMMA_RS16_BODY(N, TYPE)                                                                          \
  asm volatile("{\n.reg .pred p;\n"                                                                         \
               "setp.ne.b32 p, " GA_WG_I(N, 5) ", 0;\n"                                                       \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" GA_WG_REGS##N "},"       \
               " {" GA_WG_I(N, 0) ", " GA_WG_I(N, 1) ", " GA_WG_I(N, 2) ", " GA_WG_I(N, 3) "}, " GA_WG_I(N, 4) \
               ", p, 1, 1, " GA_WG_I(N, 6) ";\n}\n"                                                          \
               : GA_WG_ACCS##N                                                                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB));
// FP8 ss: desc_a, desc_b, accumulate; rs: a[0..3], desc_b, accumulate (no transpose operands).
#define GA_WGMMA_SS8_BODY(N)                                                                         \
  asm volatile("{\n.reg .pred p;\n"                                                                 \
               "setp.ne.b32 p, " GA_WG_I(N, 2) ", 0;\n"                                               \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" GA_WG_REGS##N "},"         \
               " " GA_WG_I(N, 0) ", " GA_WG_I(N, 1) ", p, 1, 1;\n}\n"                                 \
               : GA_WG_ACCS##N                                                                     \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#define GA_WGMMA_RS8_BODY(N)                                                                                  \
  asm volatile("{\n.reg .pred p;\n"                                                                          \
               "setp.ne.b32 p, " GA_WG_I(N, 5) ", 0;\n"                                                        \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" GA_WG_REGS##N "},"                  \
               " {" GA_WG_I(N, 0) ", " GA_WG_I(N, 1) ", " GA_WG_I(N, 2) ", " GA_WG_I(N, 3) "}, " GA_WG_I(N, 4) \
               ", p, 1, 1;\n}\n"                                                                              \
               : GA_WG_ACCS##N                                                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
#else
#define GA_WGMMA_SS16_BODY(N, TYPE) (void)d; (void)desc_a; (void)desc_b; (void)accumulate; __trap();
#define GA_WGMMA_RS16_BODY(N, TYPE) (void)d; (void)a; (void)desc_b; (void)accumulate; __trap();
#define GA_WGMMA_SS8_BODY(N) (void)d; (void)desc_a; (void)desc_b; (void)accumulate; __trap();
#define GA_WGMMA_RS8_BODY(N) (void)d; (void)a; (void)desc_b; (void)accumulate; __trap();
#endif

// One specialization per (N, type): the PTX type string must be a literal.
#define GA_WGMMA_16BIT(N, E, TYPE)                                                                              \
  template <>                                                                                                   \
  struct Wgmma<N, E> {                                                                                          \
    template <int kTransB, int kTransA = 0>                                                                     \
    static __device__ __forceinline__ void ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int accumulate) { \
      GA_WGMMA_SS16_BODY(N, TYPE)                                                                               \
    }                                                                                                           \
    template <int kTransB>                                                                                      \
    static __device__ __forceinline__ void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,       \
                                              int accumulate) {                                                 \
      GA_WGMMA_RS16_BODY(N, TYPE)                                                                               \
    }                                                                                                           \
  };
GA_WGMMA_16BIT(64, ElemKind::kBf16, "bf16")
GA_WGMMA_16BIT(64, ElemKind::kF16, "f16")
GA_WGMMA_16BIT(128, ElemKind::kBf16, "bf16")
GA_WGMMA_16BIT(128, ElemKind::kF16, "f16")
#undef GA_WGMMA_16BIT

template <>
struct Wgmma<128, ElemKind::kE4m3> {
  template <int kTransB>
  static __device__ __forceinline__ void ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    static_assert(kTransB == 0, "8-bit wgmma reads both operands K-major");
    GA_WGMMA_SS8_BODY(128)
  }
  template <int kTransB>
  static __device__ __forceinline__ void rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    static_assert(kTransB == 0, "8-bit wgmma reads both operands K-major");
    GA_WGMMA_RS8_BODY(128)
  }
};

}  // namespace ga::cuda::tile
