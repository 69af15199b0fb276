// FlashAttention backward (FlashAttention-2's algorithm, arXiv 2307.08691 section 3.2) on mma.sync m16n8k16:
// three kernels, all sm_80+ (they also run on Hopper; a wgmma version is the next step for speed).
//
//  1. flash_bwd_preprocess: D = rowsum(dO * O) per (batch, head, query) into the workspace, and zeroes that
//     row of the f32 dq accumulator (so no memset launch is needed). One warp per row.
//  2. flash_bwd_main: one CTA per (key block of kBc keys, KV head, batch). K and V of the block stay in shared
//     memory; the CTA walks every query head of its GQA group and every query block of kBr rows that can see
//     the block (causal: from the first query block that reaches its first key), double-buffering Q, dO,
//     LSE and D with cp.async. Per query block, three phases separated by barriers:
//       phase 1 (warps split keys x queries): S^T = K Q^T and dP^T = V dO^T ([16 keys][queries] per warp,
//               f32), P^T = exp2(S^T * scale * log2 e - LSE * log2 e), dS^T = P^T * (dP^T - D); both rounded
//               to the input dtype into shared memory (FA2 rounds P and dS the same way);
//       phase 2 (warps split keys x head dims): dV += P^T dO, dK += dS^T Q into registers that live across the
//               whole loop (this is why a CTA owns a key block: dK/dV need no atomics and are deterministic;
//               GQA sums the group's heads in the same registers, so no reduction workspace);
//       phase 3 (warps split queries x head dims): dQ_partial = dS K, added with f32 atomics into the
//               accumulator (every key block contributes to every query row).
//     Working from shared memory for every operand (rather than keeping K/V fragments in registers) lets the
//     three phases use different warp tilings, which is what keeps the dK/dV accumulators (16 keys x up to
//     128 dims x 2 per warp) inside the register file at head dim 256.
//  3. flash_bwd_convert_dq: dq = scale * accumulator in the caller's dtype and strides. One warp per row.
//
// Sliding windows and soft-capping (flash_attention.h), as the forward: a key block's CTA walks only the query
// blocks whose rows' windows reach it (m_begin .. m_end), and masks the straddling ones with the causal test;
// with soft-capping S = c tanh(scale q.k / c) (attention_softcap.cuh), P = exp(S - LSE) with the forward's capped
// LSE, and dS picks up the derivative 1 - tanh^2 (the chain rule through the cap), so dK / dQ keep their scale at
// the end. The cap's two code paths are separate instantiations of phase 1's element loop (a uniform branch per
// step), so the plain path is the plain FA2 arithmetic.
//
// Numerics: f32 accumulation everywhere; dK and dQ get the softmax scale at the end (dS is the gradient of
// the scaled scores). Masking replaces P by 0 (select, never arithmetic on -inf), so rows with LSE = -inf
// (no visible key) and key/query padding past the sequence ends give exact zeros. Keys and queries past the
// ends are zero-filled in shared memory and never written back.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/attention_detail.cuh"
#include "backends/cuda/kernels/flash/flash_mma_sm80.cuh"

namespace ga::cuda::flash_bwd {

using detail::cp_async_16;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::ldmatrix_x4;
using detail::ldmatrix_x4_trans;
using flash_sm80::mma;
using flash_sm80::pack2;
using flash_sm80::unpack2;

struct Strides {
  int64_t batch, seq, head;  // elements
};

// What the kernels receive (validated FlashBwdParams; 16-bit tensors as raw bits).
struct BwdArgs {
  const uint16_t *q, *k, *v, *o, *dout;
  const float* lse;  // [batch][n_head][seqlen_q], natural log
  uint16_t *dq, *dk, *dv;
  Strides q_st, k_st, v_st, o_st, do_st, dq_st, dk_st, dv_st;
  float* dq_accum;  // workspace [batch][n_head][seqlen_q][head_dim]
  float* dsum;      // workspace D [batch][n_head][seqlen_q]
  int seqlen_q, seqlen_k, n_head, n_head_kv, group, batch;
  int causal;
  // Query row i sees keys i + diag_lo .. i + diag_hi (flash_backward.cu: the forward's window as offsets from the
  // bottom-right diagonal, clamped to -seqlen_q / seqlen_k where a side is unbounded, so they never mask).
  int diag_lo, diag_hi, windowed;
  float scale, scale_log2;
  float softcap_k2;  // 0, or 2 log2(e) softmax_scale / softcap (attention_softcap.cuh)
  float cap_log2;    // softcap * log2(e): the capped score's exp2 scale
};

template <int HD>
struct BwdTraits {
  static constexpr int kBc = HD == 256 ? 64 : 128;  // keys per CTA
  static constexpr int kBr = 64;                    // query rows per step
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKeyGroups = kBc / 16;         // phases 1-2: warps along the keys
  static constexpr int kSplit = kWarps / kKeyGroups;  // ... and along queries (phase 1) / dims (phase 2)
  static constexpr int kQPerWarp = kBr / kSplit;      // phase 1: [16 keys][kQPerWarp queries] per warp
  static constexpr int kDPerWarp = HD / kSplit;       // phase 2: [16 keys][kDPerWarp dims] of dK and dV
  static constexpr int kDqRowGroups = kBr / 16;       // phase 3: warps along the queries
  static constexpr int kDqDims = HD / (kWarps / kDqRowGroups);
  static constexpr int kRow = HD + 8;   // halves per row of K, V, Q, dO (16-byte pad: ldmatrix conflict-free)
  static constexpr int kPRow = kBr + 8;  // halves per row of P^T, dS^T [key][query]
  // Shared memory (halves): K, V [kBc][kRow]; Q, dO [2][kBr][kRow]; P^T, dS^T [kBc][kPRow]; then
  // f32 LSE * log2 e and D, [2][kBr] each.
  static constexpr int kOffV = kBc * kRow;
  static constexpr int kOffQ = 2 * kBc * kRow;
  static constexpr int kOffDo = kOffQ + 2 * kBr * kRow;
  static constexpr int kOffP = kOffDo + 2 * kBr * kRow;
  static constexpr int kOffDs = kOffP + kBc * kPRow;
  static constexpr int kHalves = kOffDs + kBc * kPRow;
  static constexpr size_t kSmemBytes = size_t{kHalves} * 2 + size_t{4} * kBr * sizeof(float);
  static_assert(kKeyGroups * kSplit == kWarps && kDqRowGroups * (kWarps / kDqRowGroups) == kWarps, "warp tiling");
  static_assert(kQPerWarp % 16 == 0 && kDPerWarp % 16 == 0 && kDqDims % 16 == 0, "mma tiles of 16");
};

// dst[0] += x, dst[1] += y in device memory (dst 8-byte aligned). Hopper has a vector reduction, one L2
// atomic for the pair: the dq accumulation issues Br x head_dim of them per step and key block.
__device__ __forceinline__ void add_pair(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

// Row r of the flattened [batch][seqlen_q][n_head] query rows, as (batch, query, head).
struct RowIndex {
  int b, i, h;
};
__device__ __forceinline__ RowIndex row_index(int64_t r, int n_head, int seqlen_q) {
  RowIndex x;
  x.h = static_cast<int>(r % n_head);
  x.i = static_cast<int>((r / n_head) % seqlen_q);
  x.b = static_cast<int>(r / (int64_t{n_head} * seqlen_q));
  return x;
}

// ---- 1. D = rowsum(dO * O), zero the dq accumulator ----

template <bool kBf16, int HD>
__global__ void __launch_bounds__(256) flash_bwd_preprocess(BwdArgs a) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t{a.batch} * a.seqlen_q * a.n_head) return;
  const RowIndex x = row_index(row, a.n_head, a.seqlen_q);
  const uint16_t* o = a.o + x.b * a.o_st.batch + x.i * a.o_st.seq + x.h * a.o_st.head;
  const uint16_t* dout = a.dout + x.b * a.do_st.batch + x.i * a.do_st.seq + x.h * a.do_st.head;
  const int64_t acc_row = (int64_t{x.b} * a.n_head + x.h) * a.seqlen_q + x.i;
  float* acc = a.dq_accum + acc_row * HD;
  float sum = 0.0f;
#pragma unroll
  for (int t = 0; t < HD / 64; ++t) {  // lane reads pairs at dims 2 lane + 64 t: coalesced 4-byte loads
    const int d = 2 * lane + 64 * t;
    const float2 ov = unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(o + d));
    const float2 gv = unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(dout + d));
    sum += ov.x * gv.x + ov.y * gv.y;
    *reinterpret_cast<float2*>(acc + d) = make_float2(0.0f, 0.0f);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) a.dsum[acc_row] = sum;
}

// ---- 3. dq = scale * accumulator ----

template <bool kBf16, int HD>
__global__ void __launch_bounds__(256) flash_bwd_convert_dq(BwdArgs a) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t{a.batch} * a.seqlen_q * a.n_head) return;
  const RowIndex x = row_index(row, a.n_head, a.seqlen_q);
  const float* acc = a.dq_accum + ((int64_t{x.b} * a.n_head + x.h) * a.seqlen_q + x.i) * HD;
  uint16_t* dq = a.dq + x.b * a.dq_st.batch + x.i * a.dq_st.seq + x.h * a.dq_st.head;
#pragma unroll
  for (int t = 0; t < HD / 64; ++t) {
    const int d = 2 * lane + 64 * t;
    const float2 g = *reinterpret_cast<const float2*>(acc + d);
    *reinterpret_cast<uint32_t*>(dq + d) = pack2<kBf16>(g.x * a.scale, g.y * a.scale);
  }
}

// ---- 2. the main kernel ----

// rows [0, kRowsTile) of a [rows][HD] tile into shared memory (row pitch kRow halves) with cp.async; rows
// at or past `valid` become zeros. All threads take part; the caller commits.
template <int HD, int kRowsTile, int kThreads>
__device__ __forceinline__ void load_tile(uint16_t* dst, const uint16_t* src, int64_t row_stride, int valid) {
  constexpr int kChunksPerRow = HD / 8;
  constexpr int kChunks = kRowsTile * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "every thread copies the same number of 16-byte chunks");
#pragma unroll
  for (int n = 0; n < kChunks / kThreads; ++n) {
    const int chunk = n * kThreads + static_cast<int>(threadIdx.x);
    const int r = chunk / kChunksPerRow;
    const int c = (chunk % kChunksPerRow) * 8;
    const bool ok = r < valid;
    cp_async_16(dst + r * (HD + 8) + c, src + (ok ? r * row_stride + c : 0), ok ? 16 : 0);
  }
}

template <bool kBf16, int HD>
__global__ void __launch_bounds__(BwdTraits<HD>::kThreads, 1) flash_bwd_main(BwdArgs a) {
  using T = BwdTraits<HD>;
  constexpr int kBc = T::kBc, kBr = T::kBr, kRow = T::kRow, kPRow = T::kPRow;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* const smem = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* const sK = smem;
  uint16_t* const sV = smem + T::kOffV;
  uint16_t* const sP = smem + T::kOffP;
  uint16_t* const sDs = smem + T::kOffDs;
  float* const sLse = reinterpret_cast<float*>(smem + T::kHalves);  // [2][kBr], LSE * log2 e
  float* const sD = sLse + 2 * kBr;                                  // [2][kBr]

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, c = lane % 4;
  const int n0 = static_cast<int>(blockIdx.x) * kBc;
  const int hk = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const int keys_valid = min(kBc, a.seqlen_k - n0);

  // K, V of this block: one cp.async group, completes with the first query block's.
  load_tile<HD, kBc, T::kThreads>(sK, a.k + b * a.k_st.batch + int64_t{n0} * a.k_st.seq + hk * a.k_st.head,
                                  a.k_st.seq, keys_valid);
  load_tile<HD, kBc, T::kThreads>(sV, a.v + b * a.v_st.batch + int64_t{n0} * a.v_st.seq + hk * a.v_st.head,
                                  a.v_st.seq, keys_valid);

  // The query blocks whose rows see a key of the block: row i sees keys up to i + diag_hi (from i >= n0 - diag_hi on)
  // and from i + diag_lo (up to i <= n0 + kBc - 1 - diag_lo).
  const int m_begin = max(0, n0 - a.diag_hi) / kBr;
  const int last_row = min(a.seqlen_q - 1, n0 + kBc - 1 - a.diag_lo);
  const int m_end = last_row < 0 ? 0 : last_row / kBr + 1;
  const int per_head = max(0, m_end - m_begin);
  const int steps = per_head * a.group;

  // Step s: query head hk * group + s / per_head, query block m_begin + s % per_head, into buffer s % 2.
  auto prefetch = [&](int s) {
    const int buf = s & 1;
    const int h = hk * a.group + s / per_head;
    const int m0 = (m_begin + s % per_head) * kBr;
    const int rows = min(kBr, a.seqlen_q - m0);
    load_tile<HD, kBr, T::kThreads>(smem + T::kOffQ + buf * kBr * kRow,
                                    a.q + b * a.q_st.batch + int64_t{m0} * a.q_st.seq + h * a.q_st.head,
                                    a.q_st.seq, rows);
    load_tile<HD, kBr, T::kThreads>(smem + T::kOffDo + buf * kBr * kRow,
                                    a.dout + b * a.do_st.batch + int64_t{m0} * a.do_st.seq + h * a.do_st.head,
                                    a.do_st.seq, rows);
    if (threadIdx.x < kBr) {
      const int i = m0 + static_cast<int>(threadIdx.x);
      const int64_t r = (int64_t{b} * a.n_head + h) * a.seqlen_q + i;
      sLse[buf * kBr + threadIdx.x] = i < a.seqlen_q ? a.lse[r] * detail::kLog2e : 0.0f;
      sD[buf * kBr + threadIdx.x] = i < a.seqlen_q ? a.dsum[r] : 0.0f;
    }
  };

  float dk[T::kDPerWarp / 8][4], dv[T::kDPerWarp / 8][4];
#pragma unroll
  for (int j = 0; j < T::kDPerWarp / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[j][e] = dv[j][e] = 0.0f;

  if (steps > 0) prefetch(0);
  cp_async_commit();

  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) {
      prefetch(s + 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int buf = s & 1;
    const int h = hk * a.group + s / per_head;
    const int m0 = (m_begin + s % per_head) * kBr;
    const uint16_t* const sQ = smem + T::kOffQ + buf * kBr * kRow;
    const uint16_t* const sDo = smem + T::kOffDo + buf * kBr * kRow;
    const float* const lse = sLse + buf * kBr;
    const float* const dsum = sD + buf * kBr;

    // Phase 1: S^T and dP^T for keys [kg * 16, +16) x queries [qp * kQPerWarp, +kQPerWarp).
    {
      const int kg = warp % T::kKeyGroups, qp = warp / T::kKeyGroups;
      constexpr int kNq = T::kQPerWarp;
      float st[kNq / 8][4], dpt[kNq / 8][4];
#pragma unroll
      for (int j = 0; j < kNq / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        // A fragments (rows = keys, k = dims): matrices rows +0/+8 x dims +0/+8 in a0..a3 order.
        const int arow = kg * 16 + (lane % 8) + ((lane / 8) % 2) * 8, acol = kk * 16 + (lane / 16) * 8;
        uint32_t ka[4], va[4];
        ldmatrix_x4(ka, sK + arow * kRow + acol);
        ldmatrix_x4(va, sV + arow * kRow + acol);
#pragma unroll
        for (int j = 0; j < kNq / 16; ++j) {
          // B fragments (n = queries, k = dims): queries +0..7 / +8..15, dims +0..7 / +8..15.
          const int qrow = qp * kNq + j * 16 + (lane / 16) * 8 + (lane % 8);
          const int dim = kk * 16 + ((lane / 8) % 2) * 8;
          uint32_t bq[4], bd[4];
          ldmatrix_x4(bq, sQ + qrow * kRow + dim);
          ldmatrix_x4(bd, sDo + qrow * kRow + dim);
          mma<kBf16>(st[2 * j], ka, bq[0], bq[1]);
          mma<kBf16>(st[2 * j + 1], ka, bq[2], bq[3]);
          mma<kBf16>(dpt[2 * j], va, bd[0], bd[1]);
          mma<kBf16>(dpt[2 * j + 1], va, bd[2], bd[3]);
        }
      }
      // keys past seqlen_k or queries past seqlen_q in the tile, keys past the first row's right end (the causal
      // diagonal or a window), keys below the last row's left end (a window)
      const bool need_mask = n0 + kBc > a.seqlen_k || m0 + kBr > a.seqlen_q || n0 + kBc - 1 > m0 + a.diag_hi ||
                             (a.windowed && n0 < m0 + kBr - 1 + a.diag_lo);
      // P and dS of this warp's tile; kCap: through the soft-cap (S = c t, t = tanh(scale q.k / c), dS *= 1 - t^2)
      auto p_and_ds = [&](auto cap) {
        constexpr bool kCap = decltype(cap)::value;
#pragma unroll
        for (int j = 0; j < kNq / 8; ++j) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {  // key rows g and g + 8
            const int key = kg * 16 + g + 8 * half;
            const int q = qp * kNq + j * 8 + 2 * c;
            float p[2], ds[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float x, dcap = 1.0f;
              if constexpr (kCap) {
                const float t = detail::softcap_tanh(st[j][2 * half + e] * a.softcap_k2);
                x = exp2f(t * a.cap_log2 - lse[q + e]);
                dcap = 1.0f - t * t;
              } else {
                x = exp2f(st[j][2 * half + e] * a.scale_log2 - lse[q + e]);
              }
              const int kpos = n0 + key, qpos = m0 + q + e;
              const bool visible = !need_mask || (kpos < a.seqlen_k && qpos < a.seqlen_q && kpos <= qpos + a.diag_hi &&
                                                  kpos >= qpos + a.diag_lo);
              p[e] = visible ? x : 0.0f;
              ds[e] = p[e] * (dpt[j][2 * half + e] - dsum[q + e]);
              if constexpr (kCap) ds[e] *= dcap;
            }
            *reinterpret_cast<uint32_t*>(sP + key * kPRow + q) = pack2<kBf16>(p[0], p[1]);
            *reinterpret_cast<uint32_t*>(sDs + key * kPRow + q) = pack2<kBf16>(ds[0], ds[1]);
          }
        }
      };
      if (a.softcap_k2 != 0.0f) {
        p_and_ds(std::true_type{});
      } else {
        p_and_ds(std::false_type{});
      }
    }
    __syncthreads();

    // Phase 2: dV += P^T dO, dK += dS^T Q for keys [kg * 16, +16) x dims [dp * kDPerWarp, +kDPerWarp).
    {
      const int kg = warp % T::kKeyGroups, dp = warp / T::kKeyGroups;
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) {
        const int arow = kg * 16 + (lane % 8) + ((lane / 8) % 2) * 8, acol = kk * 16 + (lane / 16) * 8;
        uint32_t pa[4], dsa[4];
        ldmatrix_x4(pa, sP + arow * kPRow + acol);
        ldmatrix_x4(dsa, sDs + arow * kPRow + acol);
#pragma unroll
        for (int jd = 0; jd < T::kDPerWarp / 16; ++jd) {
          // B fragments (k = queries, n = dims) through the transposing load: queries +0/+8, dims +0/+8.
          const int qrow = kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8);
          const int dim = dp * T::kDPerWarp + jd * 16 + (lane / 16) * 8;
          uint32_t bo[4], bq[4];
          ldmatrix_x4_trans(bo, sDo + qrow * kRow + dim);
          ldmatrix_x4_trans(bq, sQ + qrow * kRow + dim);
          mma<kBf16>(dv[2 * jd], pa, bo[0], bo[1]);
          mma<kBf16>(dv[2 * jd + 1], pa, bo[2], bo[3]);
          mma<kBf16>(dk[2 * jd], dsa, bq[0], bq[1]);
          mma<kBf16>(dk[2 * jd + 1], dsa, bq[2], bq[3]);
        }
      }
    }

    // Phase 3: dQ[queries rg * 16 .. +16][dims dq_part * kDqDims ..] += dS K, atomically, in chunks of at
    // most 64 dims (at head dim 256 a 128-dim accumulator next to dK/dV would spill).
    {
      const int rg = warp % T::kDqRowGroups, dq_part = warp / T::kDqRowGroups;
      constexpr int kChunk = T::kDqDims < 64 ? T::kDqDims : 64;
      float* const dq_rows = a.dq_accum + ((int64_t{b} * a.n_head + h) * a.seqlen_q + m0) * HD;
#pragma unroll
      for (int chunk = 0; chunk < T::kDqDims / kChunk; ++chunk) {
        const int dim0 = dq_part * T::kDqDims + chunk * kChunk;
        float acc[kChunk / 8][4];
#pragma unroll
        for (int j = 0; j < kChunk / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kBc / 16; ++kk) {
          // A = dS (rows = queries, k = keys) from the stored dS^T [key][query]: transposing load,
          // matrices keys +0/+8 x queries +0/+8 in a0..a3 order.
          const int akey = kk * 16 + (lane / 16) * 8 + (lane % 8), aq = rg * 16 + ((lane / 8) % 2) * 8;
          uint32_t da[4];
          ldmatrix_x4_trans(da, sDs + akey * kPRow + aq);
#pragma unroll
          for (int jd = 0; jd < kChunk / 16; ++jd) {
            const int krow = kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8);
            const int dim = dim0 + jd * 16 + (lane / 16) * 8;
            uint32_t bk[4];
            ldmatrix_x4_trans(bk, sK + krow * kRow + dim);
            mma<kBf16>(acc[2 * jd], da, bk[0], bk[1]);
            mma<kBf16>(acc[2 * jd + 1], da, bk[2], bk[3]);
          }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int q = rg * 16 + g + 8 * half;
          if (m0 + q < a.seqlen_q) {
#pragma unroll
            for (int j = 0; j < kChunk / 8; ++j) {
              add_pair(dq_rows + int64_t{q} * HD + dim0 + j * 8 + 2 * c, acc[j][2 * half], acc[j][2 * half + 1]);
            }
          }
        }
      }
    }
    __syncthreads();  // the next step's prefetch overwrites this step's Q/dO buffer, P^T and dS^T
  }

  cp_async_wait<0>();  // a CTA with no query block still has its K/V copies in flight

  // dK = scale * dS^T Q summed over the steps, dV = P^T dO: keys [kg * 16, +16) x dims [dp * kDPerWarp, ...).
  const int kg = warp % T::kKeyGroups, dp = warp / T::kKeyGroups;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = n0 + kg * 16 + g + 8 * half;
    if (key < a.seqlen_k) {
      uint16_t* const dk_row = a.dk + b * a.dk_st.batch + int64_t{key} * a.dk_st.seq + hk * a.dk_st.head;
      uint16_t* const dv_row = a.dv + b * a.dv_st.batch + int64_t{key} * a.dv_st.seq + hk * a.dv_st.head;
#pragma unroll
      for (int j = 0; j < T::kDPerWarp / 8; ++j) {
        const int d = dp * T::kDPerWarp + j * 8 + 2 * c;
        *reinterpret_cast<uint32_t*>(dk_row + d) =
            pack2<kBf16>(dk[j][2 * half] * a.scale, dk[j][2 * half + 1] * a.scale);
        *reinterpret_cast<uint32_t*>(dv_row + d) = pack2<kBf16>(dv[j][2 * half], dv[j][2 * half + 1]);
      }
    }
  }
}

// Launches the three kernels for head dim HD (flash_bwd_hd*.cu instantiate it).
template <int HD>
cudaError_t launch_bwd(const BwdArgs& args, bool bf16, cudaStream_t stream);

template <bool kBf16, int HD>
cudaError_t launch_bwd_instance(const BwdArgs& args, cudaStream_t stream) {
  using T = BwdTraits<HD>;
  static_assert(T::kSmemBytes <= 227 * 1024, "shared memory per CTA");
  const auto main_kernel = flash_bwd_main<kBf16, HD>;
  static const cudaError_t attr_status = cudaFuncSetAttribute(
      main_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(T::kSmemBytes));
  if (attr_status != cudaSuccess) return attr_status;
  const int64_t rows = int64_t{args.batch} * args.seqlen_q * args.n_head;
  const unsigned row_blocks = static_cast<unsigned>((rows + 7) / 8);  // 8 warps of 256 threads, one row each
  flash_bwd_preprocess<kBf16, HD><<<row_blocks, 256, 0, stream>>>(args);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((args.seqlen_k + T::kBc - 1) / T::kBc), static_cast<unsigned>(args.n_head_kv),
                  static_cast<unsigned>(args.batch));
  main_kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(args);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  flash_bwd_convert_dq<kBf16, HD><<<row_blocks, 256, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace ga::cuda::flash_bwd
