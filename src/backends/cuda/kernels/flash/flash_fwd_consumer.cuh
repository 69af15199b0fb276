// One consumer warpgroup of the Hopper forward (flash_fwd_sm90.cuh): the tile traits, the GEMM issue steps (S = Q K^T
// from shared memory, O += P V with P from registers), the online softmax, and the split tail's partial save / merge.
// Kept apart from the kernel's scheduling code (consumer_main, producer_main) so each file stays small: the kernel file
// says in which order the steps run, this one what each step does to a warpgroup's registers. The design of the whole
// kernel (schedules, FP8, varlen, paged KV) is the paragraph at the top of flash_fwd_sm90.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/attention_softcap.cuh"
#include "backends/cuda/kernels/tile/hopper.cuh"
#include "backends/cuda/kernels/tile/hopper_wide.cuh"
#include "backends/cuda/kernels/tile/hopper_wide_fp8.cuh"
#include "backends/cuda/kernels/flash/flash_fwd_args.h"
#include "backends/cuda/kernels/flash/flash_fwd_epilogue.cuh"

namespace ga::cuda::flash_detail {

using tile::ElemKind;

// K/V ring depth: the default and a deeper one (shared memory bound: 227 KB per CTA).
template <int HD>
constexpr int default_stages() { return HD == 64 ? 4 : 2; }
template <int HD>
constexpr int deep_stages() { return HD == 64 ? 6 : HD == 128 ? 3 : 2; }

template <ElemKind E>
__host__ __device__ constexpr int elem_bytes() { return E == ElemKind::kE4m3 ? 1 : 2; }

// The wide key tile of the 16-bit "wide" variants (FlashAttention-3's choices, tile_size_fwd_sm90): 176 keys at
// head dim 128 and 80 at 256 (fewer online-softmax steps per FLOP: the O rescale, the row max/sum shuffles and
// the barrier/wgmma-wait round trips are paid per key tile), 192 at head dim 64. Shared memory: hd 256 x 80
// keys x 2 stages = 225 KB of the 227 KB.
template <int HD>
constexpr int wide_block_n() { return HD == 64 ? 192 : HD == 128 ? 176 : 80; }
// FP8's wide key tile at head dim 128 (FA3's FP8 choice, 128 x 224): S 112 + P 28 + O 64 registers in the overlapped
// consumer, under setmaxnreg 240; a 128 x 128 FP8 tile is ~1024 tensor clocks and as many MUFU clocks, so the fixed
// per-key-tile costs (the wait -> max -> exp2 -> PV issue chain) are a large share and 224 keys pay them 1.75x less.
// (256 keys, which would leave no partial last tile at 4k-16k, spills 156 bytes under 240 registers: not kept.)
constexpr int fp8_wide_block_n() { return 224; }

// kElemBytes 2: bf16/fp16; 1: FP8 e4m3 (V given as V^T: one tile is [HD][kBlockN] bytes, one column block).
// kBlockNT: keys per tile, 0 = the default below (a multiple of 16; the wide variants pass wide_block_n).
// kConsumerWGs: consumer warpgroups of 64 query rows each (2; 3 for an FP8 hd 128 candidate, variant 48: three warps
// per scheduler instead of two, under setmaxnreg 160).
template <int HD, int kStagesT = default_stages<HD>(), int kElemBytes = 2, int kBlockNT = 0, int kConsumerWGsT = 2>
struct FwdTraits {
  static constexpr int kConsumerWGs = kConsumerWGsT;
  static_assert(kConsumerWGs == 2 || (kConsumerWGs == 3 && kElemBytes == 1 && HD == 128 && kBlockNT == 128),
                "3 consumer warpgroups: FP8 hd 128 with 128-key tiles (O 64 + S 64 registers under 160)");
  static constexpr int kBlockM = 64 * kConsumerWGs;         // 64 query rows per consumer warpgroup
  static constexpr int kConsumerRegs = kConsumerWGs == 3 ? 160 : 240;  // setmaxnreg (producer: 24)
  // keys per tile (registers: S is 64 x kBlockN). FP8 keeps 128 at HD 256: V^T's tile rows are 128 keys of
  // one byte = one swizzle row, and its P fragments are half the registers of a 16-bit P.
  // FP8 may also take fp8_wide_block_n() keys at HD 128 (FA3's FP8 tile; its V^T tile is two 128-key blocks).
  static constexpr int kBlockN = kBlockNT > 0 ? kBlockNT : (HD == 256 && kElemBytes == 2) ? 64 : 128;
  static_assert(kBlockN % 16 == 0 && (kElemBytes == 2 || kBlockN == 128 || (HD == 128 && kBlockN == 224)),
                "key tile: k16 steps; FP8 128 keys (224 at head dim 128)");
  static constexpr int kStages = kStagesT;
  static constexpr int kColElems = 128 / kElemBytes;        // elements per 128-byte swizzle row
  static constexpr int kColBlocks = HD / kColElems;         // 128-byte swizzle column blocks of Q and K
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  static constexpr uint32_t kQBytes = kBlockM * HD * kElemBytes;
  static constexpr uint32_t kKBytes = kBlockN * HD * kElemBytes;  // one K tile (and 16-bit V) as loaded
  // FP8 V^T tile: HD rows of kBlockN keys in 128-key column blocks of [HD][128] bytes (one swizzle row per head-dim
  // row; a block past kBlockN keys is loaded whole and its extra keys never read). 16-bit: V is like K.
  static constexpr int kVtBlocks = (kBlockN + 127) / 128;
  static constexpr uint32_t kVBytes = kElemBytes == 1 ? kVtBlocks * HD * 128 : kKBytes;
  static constexpr uint32_t kTileBytes = kKBytes > kVBytes ? kKBytes : kVBytes;  // one ring slot (K or V)
  static constexpr int kSAcc = kBlockN / 2;                 // S accumulators per thread
  static constexpr int kKSteps = kBlockN * kElemBytes / 32;  // k steps of O += P V (k16 16-bit, k32 FP8)
  static constexpr int kPvN = HD > 128 ? 128 : HD;          // N of one PV wgmma (256 = 2 x 128)
  static constexpr int kPvParts = HD / kPvN;
  static constexpr int kBarriers = 2 + 4 * kStages;  // q full/empty; k full, v full, k empty, v empty per slot
  // + 16: the tile number the producer hands to the consumers (dynamic scheduler)
  static constexpr size_t kSmemBytes = 1024 + kQBytes + 2 * size_t{kStages} * kTileBytes + 8 * kBarriers + 16;
};

// kSched flag: logit soft-capping in the consumers' softmax (Consumer's kSoftcap). Only the kernels with the flag have
// the code (variant 59, flash_fwd_launch.h: a soft-capped 16-bit call runs it whatever variant it asked for), so the
// default kernels' key loop is the plain softmax's. (Compiled into every kernel behind a uniform test, the cap's exp2
// and reciprocal per score made the hd 256 80-key kernels spill 4-20 bytes and FP8 hd 256 spill 132 instead of 24.)
constexpr int kSchedSoftcap = 32768;
template <ElemKind E, int kSched>
__host__ __device__ constexpr bool softcap_sched() {
  return (kSched & kSchedSoftcap) != 0;
}

// kSched flag (the others are in flash_fwd_sm90.cuh): a 16-bit persistent kernel that takes its tiles from a global
// counter like FP8's (flash_fwd_launch.h 55, 56), so the causal tiles' longest-first order (decode_tile)
// reaches the CTAs as they free up instead of in static rounds.
constexpr int kSchedDynamicTiles = 4096;
// FP8's persistent kernels schedule tiles dynamically (see the top of flash_fwd_sm90.cuh); the 16-bit ones statically
// unless their schedule has kSchedDynamicTiles.
template <ElemKind E, bool kPersistent, int kSched>
__host__ __device__ constexpr bool dynamic_tiles() {
  return kPersistent && (E == ElemKind::kE4m3 || (kSched & kSchedDynamicTiles) != 0);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x for x <= 0 on the FMA and integer pipes instead of the MUFU (the FP8 hd 128 consumers use it for a
// quarter of S: there the exp2 unit, 16 per clock per SM, is as busy as the tensor cores). x = j + f with j
// the nearest integer (adding 1.5 * 2^23 leaves round(x) in t's low mantissa bits) and f in [-0.5, 0.5];
// 2^f by a cubic through the Chebyshev nodes (relative error 1e-4, far below P's e4m3 rounding, 2^-4);
// j goes into the exponent field (t's bits << 23 = j << 23). x is clamped to -125 first: masked (-inf)
// entries give 2^-125 instead of 0, which e4m3 P rounds to 0 and which adds nothing visible to l.
__device__ __forceinline__ float poly_exp2(float x) {
  x = fmaxf(x, -125.0f);
  const float t = __fadd_rn(x, 12582912.0f);
  const float f = __fsub_rn(x, __fsub_rn(t, 12582912.0f));
  const float p = fmaf(fmaf(fmaf(0.05583828f, f, 0.24263948f), f, 0.69313673f), f, 0.99992456f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

// Packs four floats into four e4m3 bytes (x0 in the lowest byte), rounding to nearest, saturating to +-448.
__device__ __forceinline__ uint32_t pack4_e4m3(float x0, float x1, float x2, float x3) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(x2, x3), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// FP8 P V: column l of a 16-key group of V^T (the k index the 8-bit A fragment uses: thread c holds k
// 4c..4c+3) holds key fp8_key_of_column(l) (the key whose S value thread c packs at that place: its
// accumulators hold keys 2c, 2c+1, 8+2c, 9+2c). Used by the V^T pre-pass; the sum over keys is unchanged.
__host__ __device__ constexpr int fp8_key_of_column(int l) { return 2 * (l / 4) + (l % 2) + 8 * ((l % 4) / 2); }

// One consumer warpgroup's state and steps. Register fragments follow the wgmma accumulator layout
// (tile/hopper.cuh): s[4j + e] is row (g + 8 * (e / 2)) of this warp's 16, key 8j + 2c + (e % 2).
// kQReg (kSchedQReg, 16-bit, 128-key tiles): this warpgroup's 64 Q rows live in registers as wgmma A fragments
// (qa, HD / 16 k steps x 4 registers) and S = Q K^T is the register-A form: Q is read from shared memory once per
// tile instead of once per key tile, and its slot is released to the producer right away.
// kFp8Tree (FP8 only; kSchedFp8TreeSoftmax): row max and row sum by 4 independent partial chains instead of one serial
// chain of N / 4 dependent FMNMX / FADD per row (the consumers are latency bound: ~2 warps per scheduler;
// +6-11% on the 224-key tile). (Also measured and dropped:
// exp2 on f16 pairs, ex2.approx.f16x2: ptxas emits two MUFU.EX2 per pair plus conversions, 20-30% slower.)
// Whether the kernels of element kind E and head dim HD have sliding windows: all but FP8 head dim 256 (its consumer
// registers are full: the window's bounds made it spill; flash_forward.cu refuses windows there).
template <ElemKind E, int HD>
__host__ __device__ constexpr bool window_kernel() {
  return !(E == ElemKind::kE4m3 && HD == 256);
}

// kSoftcap (softcap_sched): the softmax soft-caps S when FwdArgs::softcap_k2 != 0.
template <ElemKind E, int HD, bool kPolyExp = false, int kBN = 0, bool kQReg = false, bool kFp8Tree = false,
          int kWGs = 2, bool kSoftcap = false>
struct Consumer {
  using T = FwdTraits<HD, default_stages<HD>(), elem_bytes<E>(), kBN, kWGs>;
  static constexpr ElemKind kElem = E;
  static constexpr bool kFp8 = E == ElemKind::kE4m3;
  static constexpr int N = T::kBlockN;
  static constexpr int kQSteps = HD * elem_bytes<E>() / 32;  // k steps of S = Q K^T
  static_assert(!kQReg || (!kFp8 && N == 128), "Q in registers: 16-bit, 128-key tiles (Wgmma<128>::rs)");

  float o[T::kPvParts][T::kPvN / 2];
  float m_run[2], l_run[2];
  // Row g's diagonal key (bottom-right aligned: row + seqlen_k - seqlen_q; keys are numbered from 0 in every work
  // item, split tail pieces and windows included: flash_fwd_sm90.cuh).
  // Every bound of both of this thread's rows follows from it, the item's key count and the kernel arguments (kept in
  // the constant bank): row g sees keys lo .. lim with lim = min(keys - 1, diag_key + win_right) (0 causal) and
  // lo = diag_key - win_left (FwdArgs: kNoWindow for an unbounded side, so no mode test); row
  // g + 8 sees lo + 8 .. min(lim + 8, keys - 1). One register for all of them (the two upper limits alone took two
  // before windows): the hd 256 kernels have no room for more (lim_of, softmax).
  int diag_key;
  // Without a window (kWindow false: FP8 head dim 256, whose registers are full; flash_forward.cu refuses its windows):
  // the two rows' last keys, computed once per item as before windows existed.
  static constexpr bool kWindow = window_kernel<E, HD>();
  int lim_fixed[kWindow ? 1 : 2];
  uint32_t q_addr;
  uint32_t qa[kQReg ? kQSteps : 1][4];  // kQReg: Q's A fragments (row g / g + 8 of this warp's 16, k 2c.. / 8+2c..)

  // kQReg: Q's A fragments from the 128-byte-swizzled tile (the TMA layout: 16-byte chunk ch of row r at chunk
  // ch ^ (r % 8)) by ldmatrix.x4: lane l addresses row (l % 8) + 8 * ((l / 8) % 2) of this warp's 16 and the k
  // step's chunk 2 * kin + l / 16, so the four matrices are exactly the A registers (rows 0-7 / 8-15, k 0-7 /
  // 8-15). After Q's barrier wait; the caller releases Q's slot after it.
  __device__ __forceinline__ void load_q_regs(int warp, int lane) {
    if constexpr (kQReg) {
      const int r = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2);  // row within this warpgroup's 64
      const uint32_t row_addr = q_addr + static_cast<uint32_t>(r) * 128u;
#pragma unroll
      for (int kk = 0; kk < kQSteps; ++kk) {
        const int cb = kk / 4, chunk = 2 * (kk % 4) + lane / 16;
        const uint32_t addr = row_addr + cb * (T::kBlockM * 128) + ((chunk ^ (r % 8)) * 16);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(qa[kk][0]), "=r"(qa[kk][1]), "=r"(qa[kk][2]), "=r"(qa[kk][3])
                     : "r"(addr));
      }
    } else {
      (void)warp;
      (void)lane;
    }
  }

  __device__ __forceinline__ void init(const FwdArgs& a, int row0, int wg_row_base, const unsigned char* sq,
                                       int seqlen_q, int seqlen_k) {
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p)
#pragma unroll
      for (int i = 0; i < T::kPvN / 2; ++i) o[p][i] = 0.0f;
    const int diag = seqlen_k - seqlen_q;  // bottom-right alignment
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_run[r] = -INFINITY;
      l_run[r] = 0.0f;
    }
    if constexpr (kWindow) {
      diag_key = row0 + diag;
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) lim_fixed[r] = a.causal ? min(seqlen_k - 1, row0 + 8 * r + diag) : seqlen_k - 1;
    }
    q_addr = tile::smem_u32(sq) + static_cast<uint32_t>(wg_row_base) * 128u;
  }

  // S[64][N] = Q[64][HD] K[N][HD]^T, issued and committed (not waited). One k step = 32 bytes of a row.
  __device__ __forceinline__ void issue_s(float (&s)[T::kSAcc], uint32_t k_addr) {
    tile::fence_regs(s);
    tile::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk) {
      const int cb = kk / 4, kin = kk % 4;
      const uint64_t db = tile::desc_k_major(k_addr + cb * (N * 128) + kin * 32);
      if constexpr (kQReg) {
        tile::Wgmma<N, E>::template rs<0>(s, qa[kk], db, kk > 0 ? 1 : 0);
      } else {
        const uint64_t da = tile::desc_k_major(q_addr + cb * (T::kBlockM * 128) + kin * 32);
        tile::Wgmma<N, E>::template ss<0>(s, da, db, kk > 0 ? 1 : 0);
      }
    }
    tile::wgmma_commit();
  }

  // O[64][HD] += P[64][N] V[N][HD], issued and committed (not waited).
  __device__ __forceinline__ void issue_pv(const uint32_t (&pa)[T::kKSteps][4], uint32_t v_addr) {
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p) tile::fence_regs(o[p]);
    tile::wgmma_fence();
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p) {
#pragma unroll
      for (int kk = 0; kk < T::kKSteps; ++kk) {
        if constexpr (kFp8) {
          // V^T tile [kVtBlocks][HD][128 keys], one swizzle row per head-dim row: part p = rows 128p..128p+127,
          // keys 32kk..32kk+31 = 32 bytes along a row of column block kk / 4 (K-major, like Q and K).
          const uint64_t db = tile::desc_k_major(v_addr + (kk / 4) * (HD * 128) + p * (T::kPvN * 128) + (kk % 4) * 32);
          tile::Wgmma<T::kPvN, E>::template rs<0>(o[p], pa[kk], db, 1);
        } else {
          // keys 16kk..16kk+15 = two 8-row groups (1024 bytes each); part p = column blocks 2p, 2p+1.
          const uint64_t db = tile::desc_mn_major(v_addr + p * 2 * (N * 128) + kk * 2048, N * 128);
          tile::Wgmma<T::kPvN, E>::template rs<1>(o[p], pa[kk], db, 1);
        }
      }
    }
    tile::wgmma_commit();
  }

  __device__ __forceinline__ void fence_o() {
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p) tile::fence_regs(o[p]);
  }

  // Row g's last visible key in a sequence of `keys` keys (diag_key above; win_right is kNoWindow when unbounded).
  __device__ __forceinline__ int lim_of(const FwdArgs& a, int keys) const { return min(keys - 1, diag_key + a.win_right); }

  // Soft-caps S (kSoftcap and softcap_k2 != 0: S = tanh(softmax_scale q.k / softcap), the cap then being in
  // scale_log2), masks it (keys past each row's limit, keys below its window), updates the running max/sum, turns S
  // into P (in place) and returns the factor the previous O must be scaled by. n0: the tile's first key; keys: the
  // sequence's key count. The bounds come from diag_key and the arguments per key tile (a few scalar ops), the lower-bound
  // test is false without a window, so the per-element code of the default kernels is the plain softmax's (and they
  // have no soft-cap code at all: kSoftcap).
  __device__ __forceinline__ void softmax(float (&s)[T::kSAcc], int n0, int c, const FwdArgs& a, int keys,
                                          float (&corr)[2]) {
    if constexpr (kSoftcap) {
      if (a.softcap_k2 != 0.0f) {
#pragma unroll
        for (int i = 0; i < T::kSAcc; ++i) s[i] = detail::softcap_tanh(s[i] * a.softcap_k2);
      }
    }
    if constexpr (!kWindow) {
      if (n0 + N - 1 > min(lim_fixed[0], lim_fixed[1])) {
#pragma unroll
        for (int i = 0; i < T::kSAcc; ++i) {
          const int key = n0 + 8 * (i / 4) + 2 * c + (i % 2);
          if (key > lim_fixed[(i / 2) % 2]) s[i] = -INFINITY;
        }
      }
    } else if constexpr (kFp8) {
      // FP8 (head dim 128): the two bounds in two branches (the form its registers fit without a spill)
      const int lim = lim_of(a, keys);
      if (n0 + N - 1 > lim) {  // (row g + 8's limit is at least row g's)
        const int lim8 = min(lim + 8, keys - 1);
#pragma unroll
        for (int i = 0; i < T::kSAcc; ++i) {
          const int key = n0 + 8 * (i / 4) + 2 * c + (i % 2);
          if (key > ((i / 2) % 2 ? lim8 : lim)) s[i] = -INFINITY;
        }
      }
      const int lo = diag_key - a.win_left;
      if (n0 < lo + 8) {  // some key of the tile lies below row g + 8's window (never without one: kNoWindow)
#pragma unroll
        for (int i = 0; i < T::kSAcc; ++i) {
          const int key = n0 + 8 * (i / 4) + 2 * c + (i % 2);
          if (key < lo + 8 * ((i / 2) % 2)) s[i] = -INFINITY;
        }
      }
    } else {
      // 16-bit: one masking branch for both bounds (row g sees lo .. lim, row g + 8 lo + 8 .. lim8): per key tile one
      // test of the tile's ends, and the tiles wholly inside every row's window (all of them without a window but the
      // diagonal's) run no per-element test. Without a left window lo is far below key 0 (FwdArgs::kNoWindow), so the
      // lower test never fires. (Two branches, upper and lower, made the persistent hd 256 80-key kernel spill 4 bytes;
      // one branch makes FP8 spill: each kind has the form its registers fit.)
      const int lim = lim_of(a, keys), lo = diag_key - a.win_left;
      if (n0 + N - 1 > lim || n0 < lo + 8) {
        const int lim8 = min(lim + 8, keys - 1);  // (row g + 8's limit is at least row g's)
#pragma unroll
        for (int i = 0; i < T::kSAcc; ++i) {
          const int key = n0 + 8 * (i / 4) + 2 * c + (i % 2);
          const bool row8 = (i / 2) % 2;
          if (key > (row8 ? lim8 : lim) || key < lo + 8 * row8) s[i] = -INFINITY;
        }
      }
    }
    const float scale_log2 = a.scale_log2;
    if constexpr (kFp8 && kFp8Tree) {
      softmax_fp8_split(s, scale_log2, corr);
    } else {
      softmax_serial(s, scale_log2, corr);
    }
  }
  __device__ __forceinline__ void softmax_serial(float (&s)[T::kSAcc], float scale_log2, float (&corr)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m_run[r];
#pragma unroll
      for (int i = 0; i < T::kSAcc; ++i)
        if ((i / 2) % 2 == r) mx = fmaxf(mx, s[i]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
      corr[r] = fast_exp2(m_run[r] * scale_log2 - m_scaled);
      m_run[r] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < T::kSAcc; ++i) {
        if ((i / 2) % 2 == r) {
          const float x = fmaf(s[i], scale_log2, -m_scaled);
          s[i] = (kPolyExp && (i / 4) % 4 == 3) ? poly_exp2(x) : fast_exp2(x);  // every 4th n8 block
          sum += s[i];
        }
      }
      l_run[r] = l_run[r] * corr[r] + sum;  // per-thread partial; the quad is summed in the epilogue
    }
  }

  // FP8 softmax with split reductions (kFp8Tree, above). Row r's values are s[4j + 2r + e] (e = 0, 1); partial chain q
  // takes the n8 blocks j with j % 4 == q. Same arithmetic per element as softmax_serial; only the order of the max
  // (exact) and of the sum (f32 rounding) differ.
  static constexpr int kParts = 4;
  __device__ __forceinline__ void softmax_fp8_split(float (&s)[T::kSAcc], float scale_log2, float (&corr)[2]) {
    static_assert(T::kSAcc % (4 * kParts) == 0, "whole n8 blocks per partial chain");
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mq[kParts];
#pragma unroll
      for (int q = 0; q < kParts; ++q) mq[q] = fmaxf(s[4 * q + 2 * r], s[4 * q + 2 * r + 1]);
#pragma unroll
      for (int j = kParts; j < T::kSAcc / 4; ++j)
        mq[j % kParts] = fmaxf(mq[j % kParts], fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
      float mx = fmaxf(fmaxf(mq[0], mq[1]), fmaxf(fmaxf(mq[2], mq[3]), m_run[r]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
      corr[r] = fast_exp2(m_run[r] * scale_log2 - m_scaled);
      m_run[r] = mx;
      float sq[kParts] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < T::kSAcc / 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = 4 * j + 2 * r + e;
          s[i] = fast_exp2(fmaf(s[i], scale_log2, -m_scaled));
          sq[j % kParts] += s[i];
        }
      }
      l_run[r] = l_run[r] * corr[r] + ((sq[0] + sq[1]) + (sq[2] + sq[3]));  // per-thread partial (quad: epilogue)
    }
  }

  // Ends ptxas's basic block here (kSchedPinPvWait): a warp-uniform branch on this thread's row sums that is never
  // taken (they are sums of exp2 values times exp2 factors, never negative; NaN compares false). ptxas schedules within
  // a block, so what follows (the PV wait) cannot move above the softmax whose results the branch reads. (A divergent
  // branch to __trap() made ptxas spill ~1.4 KB; a PTX branch to the next instruction changed nothing.)
  __device__ __forceinline__ void end_block() const {
    if (__any_sync(0xffffffffu, fminf(l_run[0], l_run[1]) < 0.0f)) asm volatile("nanosleep.u32 1;");
  }

  // The lazy form (kSchedLazyRescale): skipped when no row of this warp changed its max (corr is exactly 1
  // then, so skipping is exact); on long rows the running max settles after a few tiles. Warp-uniform branch.
  __device__ __forceinline__ void rescale_o_lazy(const float (&corr)[2]) {
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) rescale_o(corr);
  }

  __device__ __forceinline__ void rescale_o(const float (&corr)[2]) {
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p)
#pragma unroll
      for (int i = 0; i < T::kPvN / 2; ++i) o[p][i] *= corr[(i / 2) % 2];
  }

  // P accumulators -> A fragments of O += P V. 16-bit: keys 16kk.. of the tile are n8 blocks 2kk and 2kk + 1.
  // FP8: keys 32kk.. are n8 blocks 4kk..4kk+3; register r of the fragment takes this thread's four values of
  // one row (e % 2 == row half) from two n8 blocks as they lie (the V^T columns are permuted to match).
  static __device__ __forceinline__ void to_a_fragments(const float (&s)[T::kSAcc], uint32_t (&pa)[T::kKSteps][4]) {
#pragma unroll
    for (int kk = 0; kk < T::kKSteps; ++kk) {
      if constexpr (kFp8) {
        const float* b = s + 16 * kk;
        pa[kk][0] = pack4_e4m3(b[0], b[1], b[4], b[5]);     // row g, n8 blocks 4kk, 4kk + 1
        pa[kk][1] = pack4_e4m3(b[2], b[3], b[6], b[7]);     // row g + 8
        pa[kk][2] = pack4_e4m3(b[8], b[9], b[12], b[13]);   // row g, n8 blocks 4kk + 2, 4kk + 3
        pa[kk][3] = pack4_e4m3(b[10], b[11], b[14], b[15]); // row g + 8
      } else {
        pa[kk][0] = pack2<E>(s[8 * kk + 0], s[8 * kk + 1]);
        pa[kk][1] = pack2<E>(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = pack2<E>(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = pack2<E>(s[8 * kk + 6], s[8 * kk + 7]);
      }
    }
  }

  // Split tail: this thread's unnormalized O, row maxima and partial row sums into a workspace slot (`ctid`: the
  // thread's index among the 256 consumer threads; thread-fastest float4s), and folded back in by the thread of
  // the same index of the CTA that owns the tile (same fragment layout: no exchange between threads).
  static constexpr int kO4 = HD / 8;  // float4 chunks of this thread's O
  __device__ __forceinline__ void save_partial(float4* slot, int ctid) const {
#pragma unroll
    for (int k = 0; k < kO4; ++k) {
      const int q = 4 * k, p = q / (T::kPvN / 2), i = q % (T::kPvN / 2);
      __stcg(slot + k * 256 + ctid, make_float4(o[p][i], o[p][i + 1], o[p][i + 2], o[p][i + 3]));
    }
    __stcg(slot + kO4 * 256 + ctid, make_float4(m_run[0], m_run[1], l_run[0], l_run[1]));
  }
  __device__ __forceinline__ void merge_partial(const float4* slot, int ctid, float scale_log2) {
    const float4 ml = __ldcg(slot + kO4 * 256 + ctid);
    const float m_other[2] = {ml.x, ml.y}, l_other[2] = {ml.z, ml.w};
    float f_own[2], f_other[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mx = fmaxf(m_run[r], m_other[r]);
      const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;  // both empty: factors 0, l stays 0
      f_own[r] = fast_exp2(m_run[r] * scale_log2 - m_scaled);
      f_other[r] = fast_exp2(m_other[r] * scale_log2 - m_scaled);
      l_run[r] = l_run[r] * f_own[r] + l_other[r] * f_other[r];
      m_run[r] = mx;
    }
#pragma unroll
    for (int k = 0; k < kO4; ++k) {
      const float4 x = __ldcg(slot + k * 256 + ctid);
      const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int q = 4 * k + e, p = q / (T::kPvN / 2), i = q % (T::kPvN / 2), r = (i / 2) % 2;
        o[p][i] = o[p][i] * f_own[r] + xs[e] * f_other[r];
      }
    }
  }
};

}  // namespace ga::cuda::flash_detail
