// The Hopper forward's epilogue (flash_fwd_sm90.cuh): O / l and the LSE of one consumer warpgroup's 64 rows, written
// either straight from the wgmma accumulator registers or staged in shared memory and written by TMA stores.
//
// Register store (every variant; varlen, paged, f32 O, FP8): each consumer thread issues HD / 4 4-byte global stores
// per tile (16-byte row pieces, half a 32-byte sector each) while the tensor cores wait for the next tile's first S.
// At 4k keys a tile is only 32 key blocks (~59 us), and those stores are ~1.2 us of it.
//
// TMA store (kSchedTmaStore, variant 24: 16-bit dense O, non-causal): each warpgroup writes its normalized 64 x HD
// rows into the V slot of the tile's last key block, in the 128-byte swizzle of the O map (conflict-free st.shared:
// a warp's 8 rows land in 8 different 16-byte chunks); the producer warp writes the tile out with one TMA store per
// 64-column block. No extra shared memory: the slot holds 128 keys x HD, exactly the 128 x HD O tile (both
// [HD / 64][128][64]); FlashAttention-3 overlaps its O tile with V the same way. Both warpgroups' last PV GEMMs read
// all 128 V rows, so a 256-thread barrier precedes the staging; then every consumer warp fences (proxy async) and
// arrives on the slot's empty barrier as usual, which now means "O staged". The producer, which refills that slot
// next (the next item's V_1, queued after K_2, whose own slot waits for S_0), waits for that barrier just before K_2,
// issues the store (store_staged_o_tile) and waits for the store's reads just before loading the slot again. TMA
// clips rows past seqlen_q and never writes past head_dim, so partial query blocks and padded O rows work as with
// the register store; the LSE still goes out from registers. The kernel has no register store for O: the host runs
// variant 21 where a TMA store cannot be used (varlen, paged, f32 O, causal, a refused O map).
// Why the producer issues the stores (measured on the H200): with one consumer thread per
// warpgroup issuing them (warp 0 syncing a named barrier while warps 1-3 only arrive, thread 0 waiting for the bulk
// reads), ptxas no longer proved the consumer warps converged: the ring counters of the key loop moved from uniform
// to per-thread registers (uniform ops 267 -> 54 in the kernel, R2UR before each wgmma descriptor), WARPSYNC before
// the wgmma and a collective fallback for the quad shuffles; those kernels ran 1-3.5% slower than 21 whatever the
// epilogue did (a dedicated 32 KB staging tile, 22/23, and a first V-slot version). The 32 KB of shared
// memory itself cost nothing (21 asking for it ran as fast as 21, with the same SASS).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/tile/hopper.cuh"
#include "backends/cuda/kernels/flash/flash_fwd_args.h"

namespace ga::cuda::flash_detail {

using tile::ElemKind;

template <ElemKind E>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (E == ElemKind::kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// C below is the consumer warpgroup's state (flash_fwd_sm90.cuh Consumer): o[T::kPvParts][T::kPvN / 2] in the wgmma
// accumulator layout (o[p][i]: row g + 8 * ((i / 2) % 2) of this warp's 16, column p * kPvN + 8 * (i / 4) + 2c +
// (i % 2)), the row maxima m_run[2] and this thread's partial row sums l_run[2] (the quad's four are summed here).
template <class C>
__device__ __forceinline__ float quad_row_sum(const C& st, int r) {
  float l = st.l_run[r];
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  return l;
}

// O / l * o_scale as OutE (16-bit) or f32 (kF32) straight from registers, rows [0, seqlen_q) of this tile's sequence
// (q_off: the sequence's first row in the packed o, varlen); the LSE by the quad's first thread.
template <ElemKind OutE, bool kF32, class C>
__device__ __forceinline__ void store_o_regs_as(const C& st, const FwdArgs& a, int batch, int head, int row0, int c,
                                                float o_scale, int seqlen_q, int q_off) {
  using T = typename C::T;
  using Elem = std::conditional_t<kF32, float, std::conditional_t<OutE == ElemKind::kBf16, __nv_bfloat16, __half>>;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_row_sum(st, r);
    const float inv = l > 0.0f ? o_scale / l : 0.0f;
    const int row = row0 + 8 * r;
    if (row >= seqlen_q || (a.varlen && q_off + row >= a.total_q)) continue;
    // Varlen: row q_off + row of the packed o (no batch stride); dense: row `row` of batch `batch`.
    const int64_t o_row = a.varlen ? int64_t{q_off} + row : row;
    Elem* out = static_cast<Elem*>(a.o) + (a.varlen ? 0 : batch * a.o_batch_stride) + o_row * a.o_seq_stride +
                head * a.o_head_stride;
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p)
#pragma unroll
      for (int i = 0; i < T::kPvN / 2; i += 4) {
        const int col = p * T::kPvN + 8 * (i / 4) + 2 * c;
        // head dim 96 runs on the 128 tiles (flash_forward.cu): its columns 96.. are zeros, not written. Only the
        // 128 kernels carry the test (once per store, in the epilogue).
        if (C::T::kPvN * C::T::kPvParts == 128 && col >= a.o_cols) continue;
        const float x0 = st.o[p][i + 2 * r] * inv, x1 = st.o[p][i + 2 * r + 1] * inv;
        if constexpr (kF32) {
          *reinterpret_cast<float2*>(out + col) = make_float2(x0, x1);
        } else {
          *reinterpret_cast<uint32_t*>(out + col) = pack2<OutE>(x0, x1);
        }
      }
    if (a.lse != nullptr && c == 0) {
      // dense [batch][n_head][seqlen_q]; varlen [n_head][total_q]
      const int64_t idx = a.varlen ? int64_t{head} * a.total_q + o_row
                                   : (int64_t{batch} * a.n_head + head) * a.seqlen_q + row;
      a.lse[idx] = l > 0.0f ? st.m_run[r] * a.scale + logf(l) : -INFINITY;
    }
  }
}

// The register store in the output type: FP8 inputs write bf16 or fp16 (out_bf16) times descale_v, 16-bit ones
// their own type or f32 (out_f32).
template <class C>
__device__ __forceinline__ void store_o_regs(const C& st, const FwdArgs& a, int batch, int head, int row0, int c,
                                             int seqlen_q, int q_off) {
  if constexpr (C::kFp8) {
    if (a.out_bf16) store_o_regs_as<ElemKind::kBf16, false>(st, a, batch, head, row0, c, a.o_scale, seqlen_q, q_off);
    else store_o_regs_as<ElemKind::kF16, false>(st, a, batch, head, row0, c, a.o_scale, seqlen_q, q_off);
  } else {
    if (a.out_f32) store_o_regs_as<ElemKind::kBf16, true>(st, a, batch, head, row0, c, 1.0f, seqlen_q, q_off);
    else store_o_regs_as<C::kElem, false>(st, a, batch, head, row0, c, 1.0f, seqlen_q, q_off);
  }
}

// O / l as the input type into this warpgroup's 64 rows of the staging tile (rows past seqlen_q too: TMA clips them).
// so_wg: the warpgroup's first row in column block 0; column blocks kBlockM rows of 128 bytes apart, 128-byte
// swizzle (16-byte chunk ch of row r at ch ^ (r % 8); r % 8 == g for every row of this thread).
template <class C>
__device__ __forceinline__ void stage_o_smem(const C& st, uint32_t so_wg, int warp, int g, int c) {
  using T = typename C::T;
  static_assert(!C::kFp8, "the TMA-store epilogue is 16-bit");
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_row_sum(st, r);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const uint32_t row_addr = so_wg + static_cast<uint32_t>(warp * 16 + g + 8 * r) * 128u + 4u * c;
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p)
#pragma unroll
      for (int i = 0; i < T::kPvN / 2; i += 4) {
        const int col = p * T::kPvN + 8 * (i / 4);  // this n8 block's first column (the thread's pair: + 2c)
        const uint32_t addr = row_addr + (col / 64) * (T::kBlockM * 128) + (((col % 64) / 8) ^ g) * 16;
        const uint32_t v = pack2<C::kElem>(st.o[p][i + 2 * r] * inv, st.o[p][i + 2 * r + 1] * inv);
        asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
      }
  }
}

// The LSE of the staged rows (dense rows < seqlen_q), as store_o_regs_as writes it.
template <class C>
__device__ __forceinline__ void store_lse_dense(const C& st, const FwdArgs& a, int c, int batch, int head, int row0,
                                                int seqlen_q) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_row_sum(st, r);
    const int row = row0 + 8 * r;
    if (a.lse != nullptr && c == 0 && row < seqlen_q) {
      a.lse[(int64_t{batch} * a.n_head + head) * a.seqlen_q + row] =
          l > 0.0f ? st.m_run[r] * a.scale + logf(l) : -INFINITY;
    }
  }
}

// kSchedTmaStore, producer side: one TMA store per 64-column block of the 128 x HD O tile staged at `so` (tile
// m0 of (head, batch); the O map's boxes are 128 rows, rows past seqlen_q are clipped), committed as one bulk group.
template <class T>
__device__ __forceinline__ void store_staged_o_tile(const FwdArgs& a, const unsigned char* so, int m0, int head,
                                                    int batch) {
#pragma unroll
  for (int cb = 0; cb < T::kColBlocks; ++cb) {
    tile::tma_store_4d(&a.tm_o, so + cb * (T::kBlockM * 128), cb * T::kColElems, m0, head, batch);
  }
  tile::bulk_commit();
}

}  // namespace ga::cuda::flash_detail
