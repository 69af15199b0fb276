// FlashAttention-3-class forward kernel for Hopper (sm_90a): TMA loads completing on mbarriers, wgmma
// with Q and K from shared memory for S = Q K^T and P from registers for O += P V, a producer warp and
// two consumer warpgroups with setmaxnreg, a multi-stage K/V pipeline and the online softmax in registers.
//
// CTA = 3 warpgroups (384 threads), one (batch, head, 128-row query block):
//   warpgroup 0: producer. Gives its registers away (setmaxnreg 24); one thread issues every TMA copy:
//     Q once, then K and V tiles of kBlockN keys into a ring of kStages slots. Slot s has three mbarriers:
//     k_full[s] and v_full[s] (completed by the copy engine's byte count, so S = Q K^T can start before V
//     lands) and empty[s] (8 arrivals: one per consumer warp once its wgmmas no longer read the slot).
//   warpgroups 1, 2: consumers (setmaxnreg 240), 64 query rows each. Per key tile: S = Q K^T (wgmma SS),
//     mask, online softmax (row max/sum via quad shuffles; exp2 with the scale folded into one FFMA),
//     P to 16-bit A fragments in registers, O = O * corr + P V (wgmma RS, V read N-major with the
//     transpose bit, so V needs no transpose pass).
// Schedules (template kSched, measured against each other in docs/results/2026-11-22-h200-flash.md):
//   0 serial: S GEMM, wait, softmax, PV GEMM, wait (the FA2 order on wgmma).
//   1 intra-warpgroup overlap (FA3 section 3.2): issue S_{j} = Q K_j and O += P_{j-1} V_{j-1} together,
//     wait for S_j only, run its softmax while the PV wgmma still runs, then wait for PV.
//   2 = 1 plus ping-pong between the two consumer warpgroups (FA3 section 3.1): named barriers let one
//     warpgroup issue its GEMMs while the other does softmax, so the tensor cores see back-to-back work.
//   First H200 measurement: 1 is fastest at head dim 64 (+14%), 0 at 128 and 256 (1 and 2 lose 15-35%,
//   probably register pressure: S, P and O live at once); flash_fwd_launch.h picks per head dim.
// Causal is bottom-right aligned (query i sees key j <= i + seqlen_k - seqlen_q); row blocks run
// heaviest-first. Keys past seqlen_k arrive from TMA as zeros and are masked to -inf in S.
//
// Not yet: a persistent tile scheduler, TMA stores of O, varlen/paged KV, FP8 (see the results file).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/tile/hopper.cuh"

namespace ga::cuda::flash_detail {

using tile::ElemKind;

template <int HD>
struct FwdTraits {
  static constexpr int kBlockM = 128;                       // 2 consumer warpgroups x 64 rows
  static constexpr int kBlockN = HD == 256 ? 64 : 128;      // keys per tile (registers: S is 64 x kBlockN)
  static constexpr int kStages = HD == 64 ? 4 : 2;          // K/V ring depth (shared memory bound)
  static constexpr int kColBlocks = HD / 64;                // 128-byte swizzle column blocks
  static constexpr int kThreads = 384;
  static constexpr uint32_t kQBytes = kBlockM * HD * 2;
  static constexpr uint32_t kTileBytes = kBlockN * HD * 2;  // one K or one V tile
  static constexpr int kSAcc = kBlockN / 2;                 // S accumulators per thread
  static constexpr int kPvN = HD > 128 ? 128 : HD;          // N of one PV wgmma (256 = 2 x 128)
  static constexpr int kPvParts = HD / kPvN;
  static constexpr int kBarriers = 1 + 3 * kStages;
  static constexpr size_t kSmemBytes = 1024 + kQBytes + 2 * size_t{kStages} * kTileBytes + 8 * kBarriers;
};

struct FwdArgs {
  CUtensorMap tm_q;  // [batch][n_head][seqlen_q][HD] as 4-D boxes {64, kBlockM, 1, 1}
  CUtensorMap tm_k;  // [batch][n_head_kv][seqlen_k][HD], boxes {64, kBlockN, 1, 1}
  CUtensorMap tm_v;
  void* o;
  float* lse;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;
  int seqlen_q, seqlen_k, n_head, group, m_blocks, causal;
  float scale_log2;  // softmax_scale * log2(e)
  float scale;
};

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

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

// One consumer warpgroup's state and steps. Register fragments follow the wgmma accumulator layout
// (tile/hopper.cuh): s[4j + e] is row (g + 8 * (e / 2)) of this warp's 16, key 8j + 2c + (e % 2).
template <ElemKind E, int HD>
struct Consumer {
  using T = FwdTraits<HD>;
  static constexpr int N = T::kBlockN;

  float o[T::kPvParts][T::kPvN / 2];
  float m_run[2], l_run[2];
  int lim[2];  // last visible key of each of this thread's two rows (inclusive)
  uint32_t q_addr;

  __device__ __forceinline__ void init(const FwdArgs& a, int row0, int wg_row_base, const unsigned char* sq) {
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p)
#pragma unroll
      for (int i = 0; i < T::kPvN / 2; ++i) o[p][i] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_run[r] = -INFINITY;
      l_run[r] = 0.0f;
      const int row = row0 + 8 * r;
      lim[r] = a.causal ? min(a.seqlen_k - 1, row + a.seqlen_k - a.seqlen_q) : a.seqlen_k - 1;
    }
    q_addr = tile::smem_u32(sq) + static_cast<uint32_t>(wg_row_base) * 128u;
  }

  // S[64][N] = Q[64][HD] K[N][HD]^T, issued and committed (not waited).
  __device__ __forceinline__ void issue_s(float (&s)[T::kSAcc], uint32_t k_addr) {
    tile::fence_regs(s);
    tile::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      const int cb = kk / 4, kin = kk % 4;
      const uint64_t da = tile::desc_k_major(q_addr + cb * (T::kBlockM * 128) + kin * 32);
      const uint64_t db = tile::desc_k_major(k_addr + cb * (N * 128) + kin * 32);
      tile::Wgmma<N, E>::template ss<0>(s, da, db, kk > 0 ? 1 : 0);
    }
    tile::wgmma_commit();
  }

  // O[64][HD] += P[64][N] V[N][HD], issued and committed (not waited).
  __device__ __forceinline__ void issue_pv(const uint32_t (&pa)[N / 16][4], uint32_t v_addr) {
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p) tile::fence_regs(o[p]);
    tile::wgmma_fence();
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p) {
#pragma unroll
      for (int kk = 0; kk < N / 16; ++kk) {
        // keys 16kk..16kk+15 = two 8-row groups (1024 bytes each); part p = column blocks 2p, 2p+1.
        const uint64_t db = tile::desc_mn_major(v_addr + p * 2 * (N * 128) + kk * 2048, N * 128);
        tile::Wgmma<T::kPvN, E>::template rs<1>(o[p], pa[kk], db, 1);
      }
    }
    tile::wgmma_commit();
  }

  __device__ __forceinline__ void fence_o() {
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p) tile::fence_regs(o[p]);
  }

  // Masks S (keys past each row's limit), updates the running max/sum, turns S into P (in place) and
  // returns the factor the previous O must be scaled by.
  __device__ __forceinline__ void softmax(float (&s)[T::kSAcc], int n0, int c, float scale_log2, float (&corr)[2]) {
    if (n0 + N - 1 > min(lim[0], lim[1])) {
#pragma unroll
      for (int i = 0; i < T::kSAcc; ++i) {
        const int key = n0 + 8 * (i / 4) + 2 * c + (i % 2);
        if (key > lim[(i / 2) % 2]) s[i] = -INFINITY;
      }
    }
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
          s[i] = fast_exp2(fmaf(s[i], scale_log2, -m_scaled));
          sum += s[i];
        }
      }
      l_run[r] = l_run[r] * corr[r] + sum;  // per-thread partial; the quad is summed in the epilogue
    }
  }

  __device__ __forceinline__ void rescale_o(const float (&corr)[2]) {
#pragma unroll
    for (int p = 0; p < T::kPvParts; ++p)
#pragma unroll
      for (int i = 0; i < T::kPvN / 2; ++i) o[p][i] *= corr[(i / 2) % 2];
  }

  // P accumulators -> A fragments of O += P V: keys 16kk.. of the tile are n8 blocks 2kk and 2kk + 1.
  static __device__ __forceinline__ void to_a_fragments(const float (&s)[T::kSAcc], uint32_t (&pa)[N / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk) {
      pa[kk][0] = pack2<E>(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = pack2<E>(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack2<E>(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack2<E>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }

  __device__ __forceinline__ void store(const FwdArgs& a, int batch, int head, int row0, int c) {
    using Elem = std::conditional_t<E == ElemKind::kBf16, __nv_bfloat16, __half>;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int row = row0 + 8 * r;
      if (row >= a.seqlen_q) continue;
      Elem* out = static_cast<Elem*>(a.o) + batch * a.o_batch_stride + row * a.o_seq_stride + head * a.o_head_stride;
#pragma unroll
      for (int p = 0; p < T::kPvParts; ++p)
#pragma unroll
        for (int i = 0; i < T::kPvN / 2; i += 4) {
          const int col = p * T::kPvN + 8 * (i / 4) + 2 * c;
          *reinterpret_cast<uint32_t*>(out + col) = pack2<E>(o[p][i + 2 * r] * inv, o[p][i + 2 * r + 1] * inv);
        }
      if (a.lse != nullptr && c == 0) {
        a.lse[(int64_t{batch} * a.n_head + head) * a.seqlen_q + row] =
            l > 0.0f ? m_run[r] * a.scale + logf(l) : -INFINITY;
      }
    }
  }
};

template <ElemKind E, int HD, int kSched>
__device__ __forceinline__ void consumer_main(const FwdArgs& a, unsigned char* sq, unsigned char* sk,
                                              unsigned char* sv, uint64_t* bars, int m0, int head, int batch,
                                              int n_tiles) {
  using T = FwdTraits<HD>;
  constexpr int N = T::kBlockN;
  uint64_t* bar_q = bars;
  uint64_t* bar_k = bars + 1;
  uint64_t* bar_v = bars + 1 + T::kStages;
  uint64_t* bar_empty = bars + 1 + 2 * T::kStages;

  const int cwg = static_cast<int>(threadIdx.x) / 128 - 1;  // consumer warpgroup 0 or 1
  const int wtid = static_cast<int>(threadIdx.x) % 128;
  const int warp = wtid / 32, lane = wtid % 32, g = lane / 4, c = lane % 4;
  const int wg_row_base = cwg * 64;
  const int row0 = m0 + wg_row_base + warp * 16 + g;

  Consumer<E, HD> st;
  st.init(a, row0, wg_row_base, sq);
  const uint32_t k_base = tile::smem_u32(sk), v_base = tile::smem_u32(sv);
  // Ping-pong (kSched 2): named barrier 1 + w is "warpgroup w may issue its GEMMs".
  const int my_bar = 1 + cwg, other_bar = 2 - cwg;
  const int phases = n_tiles + 1;  // GEMM issue points: S_0, (S_j + PV_{j-1}) for j >= 1, PV_last
  auto turn_begin = [&](int phase) {
    if constexpr (kSched == 2) {
      if (cwg == 1 || phase > 0) tile::named_barrier_sync(my_bar, 256);
    }
  };
  auto turn_end = [&](int phase) {
    if constexpr (kSched == 2) {
      if (cwg == 0 || phase < phases - 1) tile::named_barrier_arrive(other_bar, 256);
    }
  };

  tile::mbar_wait(bar_q, 0);
  float s[T::kSAcc];
  uint32_t pa[N / 16][4];
  float corr[2];
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) tile::mbar_arrive(&bar_empty[stage]);
  };

  if constexpr (kSched == 0) {
    for (int j = 0; j < n_tiles; ++j) {
      const int stage = j % T::kStages;
      const uint32_t parity = (j / T::kStages) & 1;
      tile::mbar_wait(&bar_k[stage], parity);
      st.issue_s(s, k_base + stage * T::kTileBytes);
      tile::wgmma_wait<0>();
      tile::fence_regs(s);
      st.softmax(s, j * N, c, a.scale_log2, corr);
      st.rescale_o(corr);
      Consumer<E, HD>::to_a_fragments(s, pa);
      tile::mbar_wait(&bar_v[stage], parity);
      st.issue_pv(pa, v_base + stage * T::kTileBytes);
      tile::wgmma_wait<0>();
      st.fence_o();
      release(stage);
    }
  } else {
    if (n_tiles > 0) {
      tile::mbar_wait(&bar_k[0], 0);
      turn_begin(0);
      st.issue_s(s, k_base);
      turn_end(0);
      tile::wgmma_wait<0>();
      tile::fence_regs(s);
      st.softmax(s, 0, c, a.scale_log2, corr);  // O is zero: no rescale needed
      Consumer<E, HD>::to_a_fragments(s, pa);
      for (int j = 1; j < n_tiles; ++j) {
        const int stage = j % T::kStages, prev = (j - 1) % T::kStages;
        tile::mbar_wait(&bar_k[stage], (j / T::kStages) & 1);
        tile::mbar_wait(&bar_v[prev], ((j - 1) / T::kStages) & 1);
        turn_begin(j);
        st.issue_s(s, k_base + stage * T::kTileBytes);
        st.issue_pv(pa, v_base + prev * T::kTileBytes);
        turn_end(j);
        tile::wgmma_wait<1>();  // S_j done; PV_{j-1} may still run (it reads pa and writes O)
        tile::fence_regs(s);
        st.softmax(s, j * N, c, a.scale_log2, corr);
        tile::wgmma_wait<0>();
        st.fence_o();
        tile::fence_regs(pa);  // PV_{j-1} read pa until here
        release(prev);
        st.rescale_o(corr);
        Consumer<E, HD>::to_a_fragments(s, pa);
      }
      const int last = (n_tiles - 1) % T::kStages;
      tile::mbar_wait(&bar_v[last], ((n_tiles - 1) / T::kStages) & 1);
      turn_begin(n_tiles);
      st.issue_pv(pa, v_base + last * T::kTileBytes);
      turn_end(n_tiles);
      tile::wgmma_wait<0>();
      st.fence_o();
      release(last);
    }
  }
  st.store(a, batch, head, row0, c);
}

template <ElemKind E, int HD, int kSched>
__global__ void __launch_bounds__(384, 1) flash_fwd_sm90_kernel(const __grid_constant__ FwdArgs a) {
#if GA_SM90A_DEVICE
  using T = FwdTraits<HD>;
  constexpr int N = T::kBlockN;
  extern __shared__ unsigned char flash_smem_raw[];
  // 128-byte swizzled tiles must start on 1024-byte boundaries.
  unsigned char* smem = flash_smem_raw + ((1024 - (tile::smem_u32(flash_smem_raw) & 1023)) & 1023);
  unsigned char* sq = smem;                              // [kColBlocks][kBlockM][64]
  unsigned char* sk = sq + T::kQBytes;                   // [kStages][kColBlocks][kBlockN][64]
  unsigned char* sv = sk + T::kStages * T::kTileBytes;   // same
  uint64_t* bars = reinterpret_cast<uint64_t*>(sv + T::kStages * T::kTileBytes);

  const int m_block = a.m_blocks - 1 - static_cast<int>(blockIdx.x);  // causal: longest rows first
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int m0 = m_block * T::kBlockM;
  int kv_end = a.seqlen_k;  // keys [0, kv_end) are visible to some row of the block
  if (a.causal) kv_end = min(kv_end, m0 + T::kBlockM + a.seqlen_k - a.seqlen_q);
  const int n_tiles = kv_end > 0 ? (kv_end + N - 1) / N : 0;

  if (threadIdx.x == 0) {
    tile::mbar_init(&bars[0], 1);
    for (int s = 0; s < T::kStages; ++s) {
      tile::mbar_init(&bars[1 + s], 1);
      tile::mbar_init(&bars[1 + T::kStages + s], 1);
      tile::mbar_init(&bars[1 + 2 * T::kStages + s], 8);  // 8 consumer warps
    }
    tile::mbar_fence_init();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    tile::regs_release<24>();
    if (threadIdx.x == 0) {
      tile::tma_prefetch_map(&a.tm_q);
      tile::tma_prefetch_map(&a.tm_k);
      tile::tma_prefetch_map(&a.tm_v);
      const int kv_head = head / a.group;
      tile::mbar_arrive_expect_tx(&bars[0], T::kQBytes);
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb)
        tile::tma_load_4d(sq + cb * (T::kBlockM * 128), &a.tm_q, &bars[0], cb * 64, m0, head, batch);
      for (int j = 0; j < n_tiles; ++j) {
        const int stage = j % T::kStages;
        if (j >= T::kStages) tile::mbar_wait(&bars[1 + 2 * T::kStages + stage], ((j / T::kStages) - 1) & 1);
        uint64_t* bk = &bars[1 + stage];
        uint64_t* bv = &bars[1 + T::kStages + stage];
        tile::mbar_arrive_expect_tx(bk, T::kTileBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
          tile::tma_load_4d(sk + stage * T::kTileBytes + cb * (N * 128), &a.tm_k, bk, cb * 64, j * N, kv_head, batch);
        tile::mbar_arrive_expect_tx(bv, T::kTileBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
          tile::tma_load_4d(sv + stage * T::kTileBytes + cb * (N * 128), &a.tm_v, bv, cb * 64, j * N, kv_head, batch);
      }
    }
  } else {
    tile::regs_acquire<240>();
    consumer_main<E, HD, kSched>(a, sq, sk, sv, bars, m0, head, batch, n_tiles);
  }
#else
  (void)a;
  __trap();
#endif
}

}  // namespace ga::cuda::flash_detail
