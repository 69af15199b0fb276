// FP8 V^T made in the kernel (kSchedFp8VtInKernel, flash_fwd_sm90.cuh): two spare warps of the producer warpgroup turn
// each V tile [keys][head_dim] that TMA brought into shared memory into the K-major B operand of O += P V that 8-bit
// wgmma needs ([head_dim][keys], keys contiguous, each 16-key group's columns in fp8_key_of_column's order: the layout
// the global pre-pass, flash_fp8.cu's fp8_transpose_v_kernel, writes), with ldmatrix / stmatrix as FlashAttention-3
// does, so the forward needs no pre-pass over V and no V-sized workspace (benchmark variants 57 / 58: slower than the
// pre-pass, flash_fwd_launch.h).
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/flash/flash_fp8_vt_map.h"
#include "backends/cuda/kernels/flash/flash_fwd_consumer.cuh"

namespace ga::cuda::flash_detail {

// ldmatrix / stmatrix of four 8 x 8 b16 matrices (sm_90): lane L gives the address of row L % 8 of matrix L / 8.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

// Warps that transpose V in the kernel (the producer warpgroup's warps 1 and 2; warp 0 issues the TMA copies, warp 3
// has no work): each takes two of the four 32-byte head-dim columns c of every 128-byte panel, so its loops have
// compile-time trip counts and offsets.
constexpr int kVtTransposeWarps = 2;

// One V tile, in shared memory as TMA loads it (K's layout: [HD / 128][kBlockN keys][128 bytes], 128-byte swizzle:
// byte (key, d) at (d / 128) * kBlockN * 128 + key * 128 + ((d % 128 / 16) ^ (key % 8)) * 16 + d % 16), to the V^T
// tile the consumers read ([kVtBlocks][HD][128 keys], 128-byte swizzle: byte (d, column c) at (c / 128) * HD * 128 +
// d * 128 + ((c % 128 / 16) ^ (d % 8)) * 16 + c % 16, column 16g + l holding key 16g + fp8_key_of_column(l)).
// One step of a warp: a 16-key group g x 32 head-dim bytes (32 c .. 32 c + 31 of a panel), 512 bytes, in three
// instructions' worth of data movement (FA3's way, with 16-bit matrix instructions on 8-bit data):
//   - ldmatrix.x4.trans: matrices 0 / 1 = keys 0-7 / 8-15 of the group x head-dim bytes 32c..32c+15, 2 / 3 = the
//     same keys x the next 16 bytes. Transposed delivery gives thread t (p = t / 4, q = t % 4), for each matrix, the
//     byte pairs (d, d + 1), d = 2p, of the two keys 2q, 2q + 1 (matrices 0, 2) or 8 + 2q, 9 + 2q (1, 3): exactly
//     the four keys of V^T word q (fp8_key_of_column(4q + i)), for two head-dim rows.
//   - two byte permutes per pair of registers split them into the words of rows d (bytes 0, 2 of each) and d + 1
//     (bytes 1, 3);
//   - stmatrix.x4 writes each word to word q of its row's 16-byte chunk (row addresses per lane, so any rows). Each
//     matrix takes its rows from threads p = 0..7: even rows from p < 4 and odd rows from p >= 4 (and the other way
//     round in the second matrix), so its 8 rows have 8 different d % 8, i.e. 8 different swizzled chunks: no bank
//     conflict (all even rows would hit 4 chunks twice). The loads read 8 consecutive keys per matrix: 8 chunks too.
// Per step only the group changes: the load address moves by a constant, the store address's swizzle is one XOR
// (the row base is 128-byte aligned, the chunk bits below it). (Moving 4-byte words with 32-bit loads and stores,
// or computing the step's indices at run time, took ~40 instructions per 512 bytes, and the transposing warps'
// instructions, +42% over the kernel's, made 58 1.5x slower than 29; Nsight Compute on the H200.)
// Groups run over the tile's kBlockN / 16 (the 224-key tile's second V^T block has 6; its other columns are never
// read).
template <int HD, int kBlockN>
__device__ __forceinline__ void transpose_v_tile(uint32_t raw, uint32_t vt, int warp, int lane) {
  constexpr int kPanels = HD / 128, kGroups = kBlockN / 16;
  static_assert(kBlockN % 16 == 0, "whole 16-key groups");
  const VtLaneMap map = vt_lane_map(lane);  // flash_fp8_vt_map.h: the addresses and selectors, checked on the host
#pragma unroll 1  // 24 registers (the producer warpgroup's setmaxnreg): one column's groups unrolled at a time
  for (int panel = 0; panel < kPanels; ++panel) {
#pragma unroll 1
    for (int ci = 0; ci < 2; ++ci) {
      const int c = 2 * warp + ci;
      const uint32_t ld = raw + vt_load_base(map, panel, c, kBlockN);
      const uint32_t st = vt_store_base(vt, map, panel, c);
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        uint32_t v[4];
        ldsm_x4_trans(vt_load_offset(ld, g), v);
        const uint32_t w[4] = {__byte_perm(v[0], v[1], map.sel_a), __byte_perm(v[0], v[1], map.sel_b),
                               __byte_perm(v[2], v[3], map.sel_a), __byte_perm(v[2], v[3], map.sel_b)};
        stsm_x4(vt_store_offset(st, g, HD), w);
      }
    }
  }
}

}  // namespace ga::cuda::flash_detail
