// FlashAttention forward on mma.sync (FlashAttention-2's algorithm, arXiv 2307.08691 section 3.1): the library's
// path for sm_80/86/89 GPUs, which also runs on Hopper (flash_forward_with_schedule(p, kFlashSm80Variant, ...)).
//
// One CTA per (128-row query block, query head, batch). Each warp owns kWarpRows consecutive query rows
// (32 = two m16 tiles with 4 warps at head dims 64/128, 16 with 8 warps at 256) and walks every key block of kBlockN
// keys the block can see, from the last to the first (so the masked blocks come first and the rest run unmasked):
//   S = Q K^T        Q and K from shared memory with ldmatrix (A: Q rows; B: K rows, K's [key][dim] layout is
//                    already the "col" operand), f32 accumulators in registers;
//   online softmax   per row: running max m, rescale O and the running sum by exp2((m_old - m_new) scale log2 e),
//                    P = exp2(S scale log2 e - m scale log2 e) (one FFMA per score); the 4 lanes of a row reduce
//                    the max with two shuffles, the sum only once at the end;
//   O += P V         P never leaves the registers: the S accumulators of two adjacent n8 tiles are exactly the A
//                    fragment of one k16 step once packed to 16 bits; V's B fragments come from ldmatrix.trans.
// Why the numbers: FA2's tile choices on A100/H100 (128 x 128 keys at hd64, 128 x 64 at hd128, 128 x 64 with 8
// warps at hd256): two m16 tiles per warp halve the K/V shared-memory reads per mma, and the register file then
// holds O (64 / 128 / 128 f32 per thread) and S (128 / 64 / 32) with no spill; 2 CTAs per SM at hd64/128.
//
// Memory pipeline (FA2's): Q, K and V each have one shared buffer, in a 128-byte XOR swizzle (16-byte chunk c of
// row r lives at chunk c ^ (r % 8)), so the 8 row addresses of every ldmatrix and of every cp.async row hit 8
// different bank groups with no padding. The K and V loads alternate as the two halves of a double buffer:
// V[n] is copied (cp.async) while S = Q K[n]^T runs, K[n-1] while the softmax and O += P V[n] run; two barriers
// per key block make the reuse safe (a buffer is overwritten only after every warp has finished reading it).
// Rows and keys past the ends are zero-filled by cp.async (src-size 0): finite garbage never becomes a NaN
// through 0 * NaN in P V, and the masked scores are replaced (not added) by -inf.
//
// Epilogue: O / rowsum rounded to the input dtype is staged through the warp's own rows of the Q buffer (only
// that warp ever read them) so the global stores are whole 16-byte chunks of a row; LSE = m scale + ln(sum).
// A row that sees no key (causal, seqlen_q > seqlen_k) keeps m = -inf and sum = 0: zeros and LSE = -inf.
//
// Sliding windows and soft-capping (flash_attention.h): the key blocks a query block's window leaves out are not
// walked (the loop runs from the block of its last row's right end down to that of its first row's left end), the
// blocks that straddle a row's window are masked with the causal ones; soft-capping turns S into
// tanh(softmax_scale q.k / softcap) (attention_softcap.cuh) before the mask, the cap then being the softmax's scale.
// Both tests are uniform per key block, outside the per-element loops; soft-capping has its own instantiations
// (kSoftcap), so the plain kernels carry no code of it.
// Head dim 96 (Phi-3): shared-memory rows of 128 columns (kPitch: the swizzle permutes chunks within 128-byte
// groups), of which the copies fill and the k-loops step the first 96 only.
//
// Arch: cp.async and bf16 mma.sync need sm_80; the kTuring instantiation (below) is the same kernel with only
// sm_75 instructions. The sm_80 instantiations' bodies compile to a trap in the sm_75 build; the host
// (flash_forward.cu) never launches them there.
//
// Turing (sm_75, kTuring = true; variant kFlashSm75Variant, fp16 only): three template-selected differences, the
// rest of the kernel is shared. (1) Load path: no cp.async, so TileCopy stages a tile through registers: fetch()
// issues the 16-byte global loads of the NEXT tile into registers before the current tile's math, land() stores
// them to the swizzled shared tile after it (the same two points in the loop where the sm_80 build issues and
// waits for its cp.async groups; the loads' latency hides behind the math in both). (2) MMA shape: Turing has
// m16n8k8 only: every m16n8k16 becomes two m16n8k8 on the two halves of the same fragments (flash_mma_sm80.cuh).
// (3) Tiles: at most 64 KB of shared memory per block (and per SM): 64 query rows (4 warps x one m16 tile) and
// 64 / 32 / 32 keys at head dim 64 / 128 / 256 (24 / 32 / 64 KB: 2, 2, 1 CTAs per SM); one m16 tile per warp also
// leaves room in the registers for the staged tile (4-8 chunks of 16 bytes per thread).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/attention_detail.cuh"
#include "backends/cuda/kernels/flash/flash_mma_sm80.cuh"

namespace ga::cuda::flash_sm80 {

struct Strides {
  int64_t batch, seq, head;  // elements
};

// What the kernel receives: validated 16-bit FlashParams (tensors as raw bits).
struct FwdSm80Args {
  const uint16_t *q, *k, *v;
  uint16_t* o;
  float* lse;  // optional [batch][n_head][seqlen_q]
  Strides q_st, k_st, v_st, o_st;
  int seqlen_q, seqlen_k, n_head, group;  // group = n_head / n_head_kv
  int causal;
  // Query row i sees keys i + diag_lo .. i + diag_hi (causal: diag_hi = seqlen_k - seqlen_q; a window's sides;
  // clamped to -seqlen_q / seqlen_k where unbounded, so they never mask); windowed: diag_lo bounds (window_left).
  int diag_lo, diag_hi, windowed;
  float scale, scale_log2;  // softmax scale (the LSE's), and times log2(e); soft-capping: the cap
  float softcap_k2;         // 0, or 2 log2(e) softmax_scale / softcap (attention_softcap.cuh)
};

// Tile shapes. kTuring: the sm_75 build (64 KB of shared memory per block, m16n8k8, no cp.async; see the top).
template <int HD, bool kTuring = false>
struct FwdSm80Traits {
  static constexpr int kPitch = HD == 96 ? 128 : HD;  // shared-memory row (elements): whole 128-byte swizzle groups
  static constexpr int kBlockM = kTuring ? 64 : 128;  // query rows per CTA
  static constexpr int kBlockN = kTuring ? (HD == 64 ? 64 : 32) : (HD == 64 ? 128 : 64);  // keys per block
  static constexpr int kWarps = (HD == 256 && !kTuring) ? 8 : 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = kBlockM / kWarps;  // 32 or 16
  static constexpr int kMTiles = kWarpRows / 16;      // m16 tiles per warp
  static constexpr int kMinBlocks = HD == 256 ? 1 : 2;  // CTAs per SM the registers must allow
  static constexpr bool kRegisterStaged = kTuring;      // global -> registers -> shared (no cp.async)
  static constexpr bool kMmaK8 = kTuring;               // m16n8k8 pairs instead of m16n8k16
  // Shared memory (halves): Q [kBlockM][kPitch], K [kBlockN][kPitch], V [kBlockN][kPitch], each swizzled.
  static constexpr int kOffK = kBlockM * kPitch;
  static constexpr int kOffV = kOffK + kBlockN * kPitch;
  static constexpr size_t kSmemBytes = size_t{kOffV + kBlockN * kPitch} * 2;
  static_assert(kPitch % 64 == 0 && HD % 16 == 0, "the swizzle permutes 16-byte chunks within 128-byte groups");
  static_assert(kMTiles >= 1 && kWarpRows % 16 == 0, "whole m16 tiles per warp");
  static_assert(!kTuring || kSmemBytes <= 64 * 1024, "sm_75: at most 64 KB of shared memory per block");
};

// Offset (halves) of element (row, col) of a swizzled [rows][P] tile (P: the row pitch, a multiple of 64).
template <int P>
__device__ __forceinline__ int swz(int row, int col) {
  return row * P + ((((col >> 3) ^ row) & 7) | ((col >> 3) & ~7)) * 8 + (col & 7);
}

// Rows [0, kRows) of a [rows][HD] global tile (row pitch row_stride elements) into a swizzled shared tile of row pitch
// P with cp.async; rows at or past `valid` become zeros. Every thread of the CTA takes part; the caller commits. When
// the threads cover whole rows (HD / 8 chunks divide kThreads), a thread copies the same chunk column of rows r0,
// r0 + kRowStep, ...: kRowStep is a multiple of 8, so the swizzle is the same for all of them and the shared
// addresses differ by immediates. Head dim 96 (12 chunks a row): chunk i of the tile is thread i % kThreads's.
template <int HD, int P, int kRows, int kThreads>
__device__ __forceinline__ void load_tile(uint16_t* dst, const uint16_t* src, int64_t row_stride, int valid) {
  constexpr int kChunksPerRow = HD / 8;
  if constexpr (kThreads % kChunksPerRow == 0) {
    constexpr int kRowStep = kThreads / kChunksPerRow;
    static_assert(kRowStep % 8 == 0 && kRows % kRowStep == 0, "copy tiling");
    const int r0 = static_cast<int>(threadIdx.x) / kChunksPerRow;
    const int col = static_cast<int>(threadIdx.x) % kChunksPerRow * 8;
    uint16_t* const d = dst + swz<P>(r0, col);
    const uint16_t* s = src + r0 * row_stride + col;
    const int64_t step = kRowStep * row_stride;
#pragma unroll
    for (int n = 0; n < kRows / kRowStep; ++n) {
      const bool ok = r0 + n * kRowStep < valid;
      detail::cp_async_16(d + n * kRowStep * P, ok ? s : src, ok ? 16 : 0);
      s += step;
    }
  } else {
    static_assert(kRows * kChunksPerRow % kThreads == 0, "copy tiling");
#pragma unroll
    for (int n = 0; n < kRows * kChunksPerRow / kThreads; ++n) {
      const int i = n * kThreads + static_cast<int>(threadIdx.x);
      const int r = i / kChunksPerRow, col = i % kChunksPerRow * 8;
      const bool ok = r < valid;
      detail::cp_async_16(dst + swz<P>(r, col), ok ? src + r * row_stride + col : src, ok ? 16 : 0);
    }
  }
}

// A [kRows][HD] tile from global to a swizzled shared tile `dst` in two steps around the math of the current
// tile: fetch() starts the reads (rows at or past `valid` become zeros), land() makes the tile complete in shared
// memory for this thread's part (the caller's barrier then publishes it to the CTA).
//   cp.async (sm_80+): fetch issues and commits a group straight into shared memory; land waits for it.
//   register-staged (sm_75): fetch loads this thread's 16-byte chunks into registers; land stores them.
template <int HD, int P, int kRows, int kThreads, bool kRegisterStaged>
struct TileCopy;

template <int HD, int P, int kRows, int kThreads>
struct TileCopy<HD, P, kRows, kThreads, false> {
  uint16_t* dst;
  __device__ __forceinline__ void fetch(const uint16_t* src, int64_t row_stride, int valid) {
    load_tile<HD, P, kRows, kThreads>(dst, src, row_stride, valid);
    detail::cp_async_commit();
  }
  __device__ __forceinline__ void land() { detail::cp_async_wait<0>(); }
};

// Chunk n of this thread is chunk n * kThreads + threadIdx.x of the tile (row-major, HD / 8 chunks a row): whole rows
// per thread step where HD / 8 divides kThreads, the same chunk order otherwise (head dim 96).
template <int HD, int P, int kRows, int kThreads>
struct TileCopy<HD, P, kRows, kThreads, true> {
  static constexpr int kChunksPerRow = HD / 8;
  static constexpr int kPerThread = kRows * kChunksPerRow / kThreads;
  static_assert(kRows * kChunksPerRow % kThreads == 0, "copy tiling");
  uint16_t* dst;
  uint4 chunk[kPerThread];
  __device__ __forceinline__ void fetch(const uint16_t* src, int64_t row_stride, int valid) {
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int i = n * kThreads + static_cast<int>(threadIdx.x);
      const int r = i / kChunksPerRow, col = i % kChunksPerRow * 8;
      // Rows past the end are zeros, never loaded: finite values keep 0 * x out of P V (see the top).
      chunk[n] = r < valid ? __ldg(reinterpret_cast<const uint4*>(src + r * row_stride + col)) : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void land() {
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int i = n * kThreads + static_cast<int>(threadIdx.x);
      *reinterpret_cast<uint4*>(dst + swz<P>(i / kChunksPerRow, i % kChunksPerRow * 8)) = chunk[n];
    }
  }
};

// ldmatrix on a shared-memory byte address (the fragment loops below add only immediates to a few of these).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Fragment addresses in a swizzled [rows][HD] tile for a lane that reads row `row` (row % 8 fixed by the lane) and
// chunk 2 k + `odd` of k16 step k: the physical chunk is ((2 k) % 8 ^ x) + 8 (k / 4) with x = odd ^ (row % 8), so
// four per-thread bases (k % 4) plus immediates ((k / 4) * 128 bytes, and whole rows) cover every step.
template <int P>
struct FragAddr {
  uint32_t base[4];
  __device__ __forceinline__ FragAddr(const uint16_t* tile, int row, int odd) {
    const uint32_t row_addr = detail::smem_addr(tile + row * P);
    const int x = odd ^ (row & 7);
#pragma unroll
    for (int t = 0; t < 4; ++t) base[t] = row_addr + static_cast<uint32_t>(((2 * t) ^ x) * 16);
  }
  // Step k of rows `row + rows` (rows a multiple of 8).
  __device__ __forceinline__ uint32_t at(int k, int rows) const {
    return base[k % 4] + static_cast<uint32_t>((k / 4) * 128 + rows * P * 2);
  }
};

// The arch this compilation pass targets (the host pass: above every device arch, like the kernels' #if tests).
#if defined(__CUDA_ARCH__)
#define GA_FLASH_SM80_PASS_ARCH __CUDA_ARCH__
#else
#define GA_FLASH_SM80_PASS_ARCH 1000
#endif

// The whole forward of one CTA (the kernel below calls it where the pass's arch has the instructions).
// kSoftcap: the kernel soft-caps S (a.softcap_k2 != 0; its own instantiation: the cap's exp2 and reciprocal per
// score in every kernel made head dim 128 spill 60 bytes instead of 8).
template <bool kBf16, int HD, bool kTuring, bool kSoftcap>
__device__ __forceinline__ void flash_fwd_sm80_cta(const FwdSm80Args& a) {
  using T = FwdSm80Traits<HD, kTuring>;
  constexpr bool kK8 = T::kMmaK8;
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, kMT = T::kMTiles, P = T::kPitch;
  constexpr int kSN = kBlockN / 8;  // n8 tiles of S per m16 tile
  constexpr int kON = HD / 8;       // n8 tiles of O per m16 tile
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* const sQ = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* const sK = sQ + T::kOffK;
  uint16_t* const sV = sQ + T::kOffV;

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, c = lane % 4;
  // Later query blocks first: with a causal mask they see the most keys, and starting them early shortens the tail.
  const int m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const int hk = h / a.group;
  const int m0 = m_block * kBlockM;
  const int rows_valid = min(kBlockM, a.seqlen_q - m0);
  // Query i sees keys i + diag_lo .. i + diag_hi (flash_forward.cu clamps the unbounded sides): the block sees keys
  // [key_begin, key_end), key blocks [n_first, n_blocks).
  const int key_end = min(a.seqlen_k, m0 + kBlockM + a.diag_hi);
  const int key_begin = max(m0 + a.diag_lo, 0);
  const int n_blocks = key_end > 0 ? (key_end + kBlockN - 1) / kBlockN : 0;
  const int n_first = min(key_begin / kBlockN, n_blocks);
  uint16_t* const o_tile = a.o + b * a.o_st.batch + int64_t{m0} * a.o_st.seq + h * a.o_st.head;
  float* const lse_rows = a.lse == nullptr ? nullptr : a.lse + (int64_t{b} * a.n_head + h) * a.seqlen_q + m0;

  if (n_blocks == n_first) {  // no row of this block sees a key (causal with seqlen_q > seqlen_k, a window)
    for (int i = static_cast<int>(threadIdx.x); i < rows_valid * (HD / 8); i += T::kThreads) {
      const int r = i / (HD / 8), col = (i % (HD / 8)) * 8;
      *reinterpret_cast<uint4*>(o_tile + r * a.o_st.seq + col) = make_uint4(0, 0, 0, 0);
    }
    if (lse_rows != nullptr) {
      for (int r = static_cast<int>(threadIdx.x); r < rows_valid; r += T::kThreads) lse_rows[r] = -INFINITY;
    }
    return;
  }

  const uint16_t* const k_head = a.k + b * a.k_st.batch + hk * a.k_st.head;
  const uint16_t* const v_head = a.v + b * a.v_st.batch + hk * a.v_st.head;
  TileCopy<HD, P, kBlockN, T::kThreads, T::kRegisterStaged> k_copy{sK}, v_copy{sV};
  auto fetch_k = [&](int n) {
    k_copy.fetch(k_head + int64_t{n} * kBlockN * a.k_st.seq, a.k_st.seq, a.seqlen_k - n * kBlockN);
  };
  auto fetch_v = [&](int n) {
    v_copy.fetch(v_head + int64_t{n} * kBlockN * a.v_st.seq, a.v_st.seq, a.seqlen_k - n * kBlockN);
  };
  {
    TileCopy<HD, P, kBlockM, T::kThreads, T::kRegisterStaged> q_copy{sQ};
    q_copy.fetch(a.q + b * a.q_st.batch + int64_t{m0} * a.q_st.seq + h * a.q_st.head, a.q_st.seq, rows_valid);
    fetch_k(n_blocks - 1);
    q_copy.land();  // cp.async: waits for Q and K[last] together; registers: Q's stores (K lands in the loop)
  }

  // Thread's rows: warp * kWarpRows + mt * 16 + g + 8 * half (half 0 holds accumulator elements 0/1, half 1: 2/3).
  const int warp_row0 = warp * T::kWarpRows;
  float o[kMT][kON][4];
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int j = 0; j < kON; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][j][e] = 0.0f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.0f;
  }

  // ldmatrix x4 lane addresses. Q (A operand, step kk): matrices rows +0/+8 x dims +0/+8 in a0..a3 order.
  // K (B operand of S, step kk, keys j * 16): keys +0 x dims +0/+8 (b0, b1 of keys +0), keys +8 x dims +0/+8.
  // V (B operand of O through .trans, keys kk * 16, dims jd * 16): keys +0/+8 x dims +0 (b0, b1), then dims +8.
  const FragAddr<P> q_frag(sQ, warp_row0 + (lane % 8) + ((lane / 8) % 2) * 8, lane / 16);
  const FragAddr<P> k_frag(sK, (lane / 16) * 8 + (lane % 8), (lane / 8) % 2);
  const FragAddr<P> v_frag(sV, ((lane / 8) % 2) * 8 + (lane % 8), lane / 16);

  for (int n = n_blocks - 1; n >= n_first; --n) {
    k_copy.land();  // K[n], fetched before the previous block's softmax (or in the prologue)
    __syncthreads();  // K[n] (and Q) landed; every warp is done with V[n + 1]
    fetch_v(n);

    // S = Q K^T: [kMT x 16 rows][kBlockN keys] per warp.
    float s[kMT][kSN][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < kSN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t qa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) ldsm_x4(qa[mt], q_frag.at(kk, mt * 16));
#pragma unroll
      for (int j = 0; j < kBlockN / 16; ++j) {
        uint32_t kb[4];
        ldsm_x4(kb, k_frag.at(kk, j * 16));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma<kBf16, kK8>(s[mt][2 * j], qa[mt], kb[0], kb[1]);
          mma<kBf16, kK8>(s[mt][2 * j + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }

    v_copy.land();
    __syncthreads();  // V[n] landed; every warp is done with K[n]
    if (n > n_first) fetch_k(n - 1);  // lands at the top of the next block, after this block's softmax and P V

    if constexpr (kSoftcap) {  // S = tanh(softmax_scale q.k / softcap); the cap is in scale_log2
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kSN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][j][e] = detail::softcap_tanh(s[mt][j][e] * a.softcap_k2);
    }
    const int key0 = n * kBlockN;
    // keys past seqlen_k, past the first row's right end (causal diagonal or window), below the last row's left end
    const bool need_mask = key0 + kBlockN > a.seqlen_k || key0 + kBlockN - 1 > m0 + a.diag_hi ||
                           (a.windowed && key0 < m0 + kBlockM - 1 + a.diag_lo);
    // The per-element mask with a left bound only where a window has one (a uniform branch): the plain causal mask
    // keeps its two tests (with the third in every kernel, head dim 128 spilled 20 bytes more).
    auto mask = [&](auto lower) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kSN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = m0 + warp_row0 + mt * 16 + g + 8 * (e / 2);
            const int key = key0 + j * 8 + 2 * c + (e % 2);
            if (key >= a.seqlen_k || key > row + a.diag_hi || (decltype(lower)::value && key < row + a.diag_lo)) {
              s[mt][j][e] = -INFINITY;
            }
          }
    };
    if (need_mask) {
      if (a.windowed) {
        mask(std::true_type{});
      } else {
        mask(std::false_type{});
      }
    }

    // Online softmax; P overwrites S.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float mx = row_max[mt][half];
#pragma unroll
        for (int j = 0; j < kSN; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * half], s[mt][j][2 * half + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // A row with no visible key yet keeps mx = -inf: subtract 0 so P = exp2(-inf) = 0, never NaN.
        const float mx_scaled = mx == -INFINITY ? 0.0f : mx * a.scale_log2;
        const float alpha = fast_exp2(row_max[mt][half] * a.scale_log2 - mx_scaled);  // 0 while the old max is -inf
        row_max[mt][half] = mx;
        row_sum[mt][half] *= alpha;
#pragma unroll
        for (int j = 0; j < kON; ++j) {
          o[mt][j][2 * half] *= alpha;
          o[mt][j][2 * half + 1] *= alpha;
        }
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kSN; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = fast_exp2(fmaf(s[mt][j][2 * half + e], a.scale_log2, -mx_scaled));
            s[mt][j][2 * half + e] = p;
            sum += p;
          }
        row_sum[mt][half] += sum;
      }

    // O += P V: k16 step kk takes the S tiles 2 kk and 2 kk + 1 as its A fragment.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t pa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        pa[mt][0] = pack2<kBf16>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack2<kBf16>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack2<kBf16>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack2<kBf16>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int jd = 0; jd < HD / 16; ++jd) {
        uint32_t vb[4];
        ldsm_x4_trans(vb, v_frag.at(jd, kk * 16));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma<kBf16, kK8>(o[mt][2 * jd], pa[mt], vb[0], vb[1]);
          mma<kBf16, kK8>(o[mt][2 * jd + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
  }

  // Epilogue: normalize, LSE, stage the warp's rows of O (16-bit) in its own rows of the Q buffer.
  __syncwarp();  // this warp's last Q fragments are read (the rows belong to no other warp)
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = row_sum[mt][half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const int row = warp_row0 + mt * 16 + g + 8 * half;
      if (lse_rows != nullptr && c == 0 && row < rows_valid) {
        lse_rows[row] = sum > 0.0f ? row_max[mt][half] * a.scale + logf(sum) : -INFINITY;
      }
#pragma unroll
      for (int j = 0; j < kON; ++j) {
        *reinterpret_cast<uint32_t*>(sQ + swz<P>(row, j * 8 + 2 * c)) =
            pack2<kBf16>(o[mt][j][2 * half] * inv, o[mt][j][2 * half + 1] * inv);
      }
    }
  __syncwarp();
  constexpr int kChunksPerRow = HD / 8;
#pragma unroll
  for (int i = lane; i < T::kWarpRows * kChunksPerRow; i += 32) {
    const int r = warp_row0 + i / kChunksPerRow, col = (i % kChunksPerRow) * 8;
    if (r < rows_valid) {
      *reinterpret_cast<uint4*>(o_tile + r * a.o_st.seq + col) = *reinterpret_cast<const uint4*>(sQ + swz<P>(r, col));
    }
  }
}

template <bool kBf16, int HD, bool kTuring = false, bool kSoftcap = false>
__global__ void __launch_bounds__(FwdSm80Traits<HD, kTuring>::kThreads, FwdSm80Traits<HD, kTuring>::kMinBlocks)
    flash_fwd_sm80_kernel(FwdSm80Args a) {
  static_assert(!(kTuring && kBf16), "sm_75 tensor cores have no bf16 mma: the Turing forward is fp16 only");
  // A pass below the instantiation's arch (sm_75 for the cp.async build) compiles a trap only: the host never
  // launches it there (flash_forward.cu), and the build stays lean. A template-dependent `if constexpr`, since the
  // preprocessor cannot see kTuring.
  if constexpr (GA_FLASH_SM80_PASS_ARCH < (kTuring ? 750 : 800)) {
    (void)a;
    __trap();
  } else {
    flash_fwd_sm80_cta<kBf16, HD, kTuring, kSoftcap>(a);
  }
}

// Launches the forward of head dim HD (flash_fwd_sm80_hd*.cu instantiate it).
template <int HD>
cudaError_t launch_fwd_sm80(const FwdSm80Args& args, bool bf16, int batch, cudaStream_t stream);
// The sm_75 (Turing) build of the same kernel, fp16 only (flash_fwd_sm75.cu instantiates it).
template <int HD>
cudaError_t launch_fwd_sm75(const FwdSm80Args& args, int batch, cudaStream_t stream);

template <bool kBf16, int HD, bool kTuring, bool kSoftcap>
cudaError_t launch_fwd_sm80_kernel(const FwdSm80Args& args, int batch, cudaStream_t stream) {
  using T = FwdSm80Traits<HD, kTuring>;
  static_assert(T::kSmemBytes <= 227 * 1024, "shared memory per CTA");
  const auto kernel = flash_fwd_sm80_kernel<kBf16, HD, kTuring, kSoftcap>;
  static const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(T::kSmemBytes));
  if (attr_status != cudaSuccess) return attr_status;
  const dim3 grid(static_cast<unsigned>((args.seqlen_q + T::kBlockM - 1) / T::kBlockM),
                  static_cast<unsigned>(args.n_head), static_cast<unsigned>(batch));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

// The soft-capping instantiation where the call soft-caps (FwdSm80Args::softcap_k2), the plain one otherwise.
template <bool kBf16, int HD, bool kTuring = false>
cudaError_t launch_fwd_sm80_instance(const FwdSm80Args& args, int batch, cudaStream_t stream) {
  return args.softcap_k2 != 0.0f ? launch_fwd_sm80_kernel<kBf16, HD, kTuring, true>(args, batch, stream)
                                 : launch_fwd_sm80_kernel<kBf16, HD, kTuring, false>(args, batch, stream);
}

}  // namespace ga::cuda::flash_sm80
