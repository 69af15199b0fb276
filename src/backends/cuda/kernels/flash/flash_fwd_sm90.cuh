// FlashAttention-3-class forward kernel for Hopper (sm_90a): TMA loads completing on mbarriers, wgmma
// with Q and K from shared memory for S = Q K^T and P from registers for O += P V, a producer warp and
// two consumer warpgroups with setmaxnreg, a multi-stage K/V pipeline and the online softmax in registers.
//
// CTA = 3 warpgroups (384 threads; 4 with kSchedThreeWG, below); a tile of work = one (batch, head, 128-row query
// block):
//   warpgroup 0: producer. Gives its registers away (setmaxnreg 24); one thread issues every TMA copy:
//     Q once per tile, then K and V tiles of kBlockN keys into a ring of kStages slots, in the order
//     K_0, K_1, V_0, K_2, V_1, ... so that the K the next S = Q K^T needs is never queued behind a V.
//     K and V have separate full/empty mbarriers per slot: full = completed by the copy engine's byte
//     count; empty = 8 arrivals, one per consumer warp. K_j's slot is released as soon as S_j is done
//     (not when PV_j is: with the overlapped schedules PV_j finishes one iteration later, and a shared
//     K/V release left the producer no slack at all with 2 stages: the first version's overlapped
//     schedules lost 15-35% at head dim 128/256 to exactly that stall). Q has full/empty barriers too,
//     so a persistent CTA loads the next tile's Q while its consumers finish the current one.
//   warpgroups 1, 2: consumers (setmaxnreg 240), 64 query rows each. Per key tile: S = Q K^T (wgmma SS),
//     mask, online softmax (row max/sum via quad shuffles; exp2 with the scale folded into one FFMA),
//     P to 16-bit A fragments in registers, O = O * corr + P V (wgmma RS, V read N-major with the
//     transpose bit, so V needs no transpose pass).
// Schedules (template kSched, measured against each other on the H200: flash_fwd_launch.h default_variant):
//   0 serial: S GEMM, wait, softmax, PV GEMM, wait (the FA2 order on wgmma).
//   1 intra-warpgroup overlap (FA3 section 3.2): issue S_{j} = Q K_j and O += P_{j-1} V_{j-1} together,
//     wait for S_j only, run its softmax while the PV wgmma still runs, then wait for PV. (That is the source
//     order; ptxas moves the PV wait above the softmax unless kSchedPinPvWait pins it, below: the default kernels
//     issue both GEMMs together and wait for both. The pinned form measured no faster at the defaults.)
//   2 = 1 plus ping-pong between the two consumer warpgroups (FA3 section 3.1): named barriers make the
//     two warpgroups take strict turns issuing their GEMMs (one issues while the other does softmax).
//     The turns run on across tiles of a persistent CTA, so each arrival is matched before the next.
//   3 = 0 plus ping-pong: each GEMM (S, then PV) is one turn, so the tensor cores run S_a, S_b, PV_a, PV_b
//     and each warpgroup's softmax sits under the other's GEMM. Written for FP8 at head dim 256, where the
//     overlapped consumer does not fit in 240 registers (O 128 + S 64 + P 16); it lost, and FP8
//     hd 256 runs the overlap schedule anyway (ptxas spills 36 bytes, and it is 9-17% faster than serial).
//   + kSchedPolyExp (16): a quarter of the softmax exp2 on the FMA pipes (poly_exp2), for FP8 at hd 128.
//   + kSchedLazyRescale (32), kSchedQReg (64; Q as register A fragments: S = Q K^T reads only K from shared
//     memory, 16 KB less shared-memory traffic per warpgroup and key tile; 32 registers at hd 128): 16-bit
//     overlap-schedule candidates (flash_fwd_launch.h variants 14-17, 19-20).
// Tile scheduler (kPersistent): grid = min(#SMs, tiles); 16-bit: rounds of `grid` tiles dealt in snake order
// (cta_tile). FP8: dynamic (dynamic_tiles): CTA b starts with tile b, then the producer takes the next tile
// number from a global counter (in the FP8 workspace, zeroed by the V^T pre-pass) and passes it to the
// consumers through shared memory with the Q barrier; -1 ends the CTA. The static split of long causal tiles
// was up to 30% slower than one tile per CTA; a counter hands them out as CTAs free up. Tiles are numbered
// query-block-fastest within a head (neighbouring CTAs share one head's K/V in L2), heaviest first for causal.
// Non-persistent: one tile per CTA.
// Causal is bottom-right aligned (query i sees key j <= i + seqlen_k - seqlen_q). Keys past seqlen_k
// arrive from TMA as zeros and are masked to -inf in S.
//
// FP8 (ElemKind::kE4m3, FA3 section 3.3): the same pipeline with 1-byte elements (a 128-byte swizzle row holds
// 128 of them) and k = 32 per wgmma. 8-bit wgmma reads both operands K-major only, so V arrives as V^T
// [head_dim][keys] (a pre-pass in flash_fp8.cu writes it to the workspace): O += P V^T^T then reads B K-major
// along the keys. P goes to e4m3 in registers for the register-A operand. The accumulator layout of S (thread
// holds keys 2c, 2c+1, 8+2c, 9+2c of each 16) differs from the 8-bit A layout (keys 4c..4c+3 of each 16);
// instead of shuffling P across the quad per tile (FA3), the pre-pass stores V^T's keys in the permuted
// order (fp8_key_of_column), so each thread packs its own four S values into one register as they are. The
// dequantization scales fold into the softmax scale (descale_q * descale_k) and the epilogue (descale_v).
// FP8 at head dim 128 defaults to FA3's 224-key tile (fp8_wide_block_n; V^T tile = two 128-key swizzle blocks, ring
// slots of max(K, V^T) bytes) with the row max / row sum in 4 independent partial chains (kSchedFp8TreeSoftmax:
// the consumers are latency bound, and one serial FMNMX / FADD chain per row was on the critical path). The
// candidates measured against it (flash_fwd_launch.h 28, 32-34): the tile alone, ping-pong, a deeper ring, the lazy rescale.
//
// Variable-length batches (FwdArgs::varlen, FlashAttention's varlen API; FA3 does the same): the maps view the
// packed q / k / v as one batch of total rows, and a tile's coordinates start at its sequence's offset
// (cu_seqlens). A 128-row query block or a key tile that runs past its sequence's end still loads whole boxes:
// the extra query rows (the next sequence's) are computed but never stored, the extra keys are masked in S, and
// because P = 0 times a non-finite V would still be NaN, the consumers zero the V rows past the sequence's end
// in the last tile (only that tile can cross it) before O += P V. Tiles are (batch, head, query block of the
// longest sequence); blocks past a shorter sequence's end are skipped by producer and consumers alike.
// Paged KV (FwdArgs::paged): the K/V maps are 4-D [page][row in page][head][dim]; a key tile of N keys is
// N / page_size boxes of one page each (pages of >= N keys: one box inside the page), 1024-byte aligned in
// shared memory so the 128-byte swizzle of the boxes is the swizzle of the whole tile. Lane i of the producer
// warp reads the i-th page id of the tile and issues that page's copies, so the block-table loads and the TMA
// issues of one tile go out in parallel instead of one after another. Keys past the sequence read page
// n_pages (out of bounds: zeros).
//
// Sliding windows (flash_attention.h): a work item's key tiles are [j0, j0 + n_tiles) from its first row's window to
// its last row's diagonal or window end (decode_tile, for the producer and the consumers alike), so tiles outside are
// never loaded; key tiles keep their numbers from key 0 (the ring position is kv_base + j) and each consumer thread
// derives both rows' bounds from one register (Consumer::diag_key) and the arguments, masking only the tiles that
// straddle one. Soft-capping is compiled into variant 59 only (kSchedSoftcap). How the default kernels were kept as
// they were: no per-element code is added to unmasked tiles, no soft-cap code at all, and ptxas -v before and after
// for every default variant (each .cu at -arch=sm_90a): 168 registers (setmaxnreg 240 / 24), no new spill (16-bit 0
// bytes throughout; the split tail's 21 / 24 from 16 to 8; FP8 hd 128's 29: 0). FP8 hd 256's 39, which spilled 24
// bytes before, stores 36 (loads 52 as before) and refuses windows: the window's bounds there cost more.
//
// Split tail (kSchedSplitTail): flash_fwd_split_tail.cuh.
//
// Tile traits and the consumer warpgroup's steps (GEMM issue, online softmax): flash_fwd_consumer.cuh.
//
// Epilogue (the register store, and kSchedTmaStore's TMA store staged in the last V slot): flash_fwd_epilogue.cuh.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/tile/hopper.cuh"
#include "backends/cuda/kernels/tile/hopper_wide.cuh"
#include "backends/cuda/kernels/tile/hopper_wide_fp8.cuh"
#include "backends/cuda/kernels/flash/flash_fwd_args.h"
#include "backends/cuda/kernels/flash/flash_fwd_consumer.cuh"
#include "backends/cuda/kernels/flash/flash_fwd_epilogue.cuh"
#include "backends/cuda/kernels/flash/flash_fp8_vt.cuh"
#include "backends/cuda/kernels/flash/flash_fwd_split_tail.cuh"
#include "backends/cuda/kernels/flash/flash_tile_order.h"

namespace ga::cuda::flash_detail {

using tile::ElemKind;

// Staging slots of V tiles for the in-kernel V^T (kSchedFp8VtInKernel, below).
constexpr int kVtRawStages = 2;

// Barrier layout in shared memory (FwdTraits::kBarriers slots of 8 bytes).
template <int kStages>
struct FwdBarriers {
  uint64_t* base;
  __device__ uint64_t* q_full() const { return base; }
  __device__ uint64_t* q_empty() const { return base + 1; }
  __device__ uint64_t* k_full(int s) const { return base + 2 + s; }
  __device__ uint64_t* v_full(int s) const { return base + 2 + kStages + s; }
  __device__ uint64_t* k_empty(int s) const { return base + 2 + 2 * kStages + s; }
  __device__ uint64_t* v_empty(int s) const { return base + 2 + 3 * kStages + s; }
  __device__ int* tile_slot() const { return reinterpret_cast<int*>(base + 2 + 4 * kStages); }
  // kSchedFp8VtInKernel: the V staging ring's barriers (full: TMA bytes; empty: one arrival per transposing warp) and
  // one stop flag per staging slot (flash_fwd_sm90.cuh transposer_main), after the tile slot's 16 bytes.
  __device__ uint64_t* raw_full(int s) const { return base + 4 + 4 * kStages + s; }
  __device__ uint64_t* raw_empty(int s) const { return base + 4 + 4 * kStages + kVtRawStages + s; }
  __device__ volatile int* raw_stop(int s) const {
    return reinterpret_cast<volatile int*>(base + 4 + 4 * kStages + 2 * kVtRawStages) + s;
  }
};

// The k-th tile of this CTA, or -1 when it has no more. Persistent: rounds of gridDim.x tiles, dealt
// in snake order (CTA b takes index b of even rounds and gridDim.x - 1 - b of odd ones) so the causal
// work per CTA evens out instead of CTA 0 always drawing the longest tile of a round.
template <bool kPersistent>
__device__ __forceinline__ int cta_tile(const FwdArgs& a, int k) {
  const int b = static_cast<int>(blockIdx.x), g = static_cast<int>(gridDim.x);
  if (!kPersistent) return k == 0 ? b : -1;
  const int64_t t = int64_t{k} * g + ((k & 1) ? g - 1 - b : b);
  return t < a.total_tiles ? static_cast<int>(t) : -1;
}

// The k-th work item of this CTA: a whole tile (cta_tile), or with the split tail on (kSplit and a.split_tail)
// after the full rounds a piece of a tail tile (flash_fwd_split_tail.cuh).
template <bool kPersistent, bool kSplit>
__device__ __forceinline__ WorkItem cta_work(const FwdArgs& a, int k) {
  if constexpr (kSplit) {
    if (a.split_tail && k >= a.full_rounds) return split_tail_piece(a, k - a.full_rounds);
  }
  return {cta_tile<kPersistent>(a, k), 0, -1};
}

struct FwdTile {
  int m0, head, batch, n_tiles;  // n_tiles: key tiles of kBlockN this work item covers (from key tile j0 on)
  int j0;                        // the first key tile (split tail pieces; else 0)
  int seqlen_q, seqlen_k;        // this sequence's (varlen: from cu_seqlens / seqused)
  int q_off, k_off;              // varlen: its first row in the packed q/o and k/v (0 dense and paged)
  bool skip;                     // varlen: the query block lies past the sequence's end (no work at all)
};

// Tile t -> (query block, head, batch). Non-causal: the query blocks of one head next to each other (they read the
// same K/V from L2). Causal (a.section_bh > 1): heaviest query block first across a section of section_bh (batch,
// head) pairs, then the next heaviest of each, ... (longest-processing-time first, so the tiles that start last are
// light and the SMs finish together), the section small enough that its K/V stays in L2 (FA3's L2-aware LPT order;
// heaviest-first across all heads measured 3-10% slower at 16k causal: the running CTAs then stream every head's
// K/V at once). section_bh <= 1: heaviest first within one head at a time (the order before the sections; there the last head's
// heaviest tile starts when little else is left, and its CTA finishes long after the others). The sections pay where
// tiles go to whichever CTA frees up first: FP8's dynamic counter (+1-9% causal, 4k-16k) and one tile
// per CTA (the hardware's block scheduler; bf16 hd 256 8k / 16k +5-7%). The 16-bit persistent kernels' static rounds
// (cta_tile) run one head at a time (launch_fwd_instance): each CTA takes every 132nd tile, which samples a section's
// long heavy-to-light ramp so coarsely that the CTAs' sums drift apart (bf16 8-30% slower at 4k-8k with sections).
// kWindow: the kernel has sliding windows (window_kernel); without, an item's key tiles are [0, the causal end).
template <class T, bool kWindow = true>
__device__ __forceinline__ FwdTile decode_tile(const FwdArgs& a, int t, int jb = 0, int je = -1) {
  const TileOrder o = tile_order(t, a.m_blocks, a.n_head * a.batch, a.section_bh);  // flash_tile_order.h
  const int bh = o.bh;
  const int m_block = a.causal ? a.m_blocks - 1 - o.rank : o.rank;
  FwdTile f;
  f.m0 = m_block * T::kBlockM;
  f.head = bh % a.n_head;
  f.batch = bh / a.n_head;
  f.seqlen_q = a.seqlen_q;
  f.seqlen_k = a.seqlen_k;
  f.q_off = f.k_off = 0;
  if (a.varlen) {
    f.q_off = __ldg(a.cu_q + f.batch);
    f.seqlen_q = a.used_q != nullptr ? __ldg(a.used_q + f.batch) : __ldg(a.cu_q + f.batch + 1) - f.q_off;
    if (!a.paged) f.k_off = __ldg(a.cu_k + f.batch);
    f.seqlen_k = a.used_k != nullptr ? __ldg(a.used_k + f.batch) : __ldg(a.cu_k + f.batch + 1) - f.k_off;
    f.seqlen_q = max(f.seqlen_q, 0);
    f.seqlen_k = max(f.seqlen_k, 0);
  }
  f.skip = f.m0 >= f.seqlen_q && a.varlen;
  // Keys [kv_begin, kv_end) are visible to some row of the block: up to the last row's diagonal (causal) or its
  // window's right end, from the first row's window's left end (sliding window). Key tiles outside are not loaded.
  // (FwdArgs::win_left / win_right: kNoWindow where unbounded, so these are plain sums; causal: win_right 0)
  const int diag = f.seqlen_k - f.seqlen_q;
  const int kv_end = kWindow ? min(f.seqlen_k, f.m0 + T::kBlockM + diag + a.win_right)
                              : a.causal ? min(f.seqlen_k, f.m0 + T::kBlockM + diag) : f.seqlen_k;
  const int j_first = kWindow ? max(f.m0 + diag - a.win_left, 0) / T::kBlockN : 0;
  const int j_end = kv_end > 0 && !f.skip ? (kv_end + T::kBlockN - 1) / T::kBlockN : 0;
  f.n_tiles = max(j_end - j_first, 0);
  f.j0 = f.n_tiles > 0 ? j_first : 0;
  if (je >= 0) {  // a split tail piece (dense non-causal only: every tile has kv_blocks key tiles)
    f.j0 = jb;
    f.n_tiles = je - jb;
  }
  return f;
}

// kSched: the schedule (0-3, above), plus kSchedPolyExp for a quarter of the exp2 by poly_exp2, plus
// kSchedLazyRescale (overlap schedule, 16-bit) for FlashAttention-3's order of the O rescale: O *= corr_{j-1}
// right after S_j is issued (the tensor cores are busy with S_j meanwhile) instead of after PV_{j-1} is waited
// (where it delays the next issue), and skipped when this warp's row maxima did not move (rescale_o_lazy).
constexpr int kSchedPolyExp = 16;
constexpr int kSchedLazyRescale = 32;
// + kSchedQReg (16-bit, 128-key tiles): Q in registers (Consumer::kQReg), its slot released once they are loaded.
constexpr int kSchedQReg = 64;
// + kSchedSplitTail (16-bit, persistent): the last round's key blocks cut evenly between all CTAs when the host
// turns it on (FwdArgs::split_tail; flash_fwd_split_tail.cuh).
constexpr int kSchedSplitTail = 128;
// Whether a kernel runs the split tail (consumer and producer must agree on every work item).
__host__ __device__ constexpr bool split_tail_sched(int sched, bool persistent) {
  return (sched & kSchedSplitTail) != 0 && persistent;
}
// + kSchedTmaStore (16-bit dense, overlap schedule): O staged in the V slot of the tile's last key block and written
// by the producer's TMA stores (flash_fwd_epilogue.cuh); such a kernel has no register store for O.
constexpr int kSchedTmaStore = 256;
// + kSchedFp8TreeSoftmax (FP8): row max / row sum by partial chains (Consumer::softmax_fp8_split). (512 named
// kSchedCrossTile, a cross-tile start measured 5-8% slower than variant 24, not kept.)
constexpr int kSchedFp8TreeSoftmax = 1024;
// + kSchedPinPvWait (overlap schedule): the wait for PV_{j-1} stays below S_j's softmax. An Nsight Compute
// source view of 29 found that ptxas had hoisted that WARPGROUP.DEPBAR above the softmax, to the top of its basic
// block (the P conversion writes the registers PV_{j-1} reads, and the scheduler interleaves it with the exp2), so as
// compiled the default overlap kernels (16-bit and FP8) wait for PV before the softmax instead of running it under
// the PV GEMM.
// A never-taken branch after the softmax (Consumer::end_block) ends the block there. Measured on the H200
// (docs/performance.md, "Tried, measured, not kept"): with two consumer warpgroups the other warpgroup's GEMMs
// already fill the tensor cores during a softmax, and the real overlap was no faster (FP8) or within a few %
// (16-bit): benchmark variants only (flash_fwd_launch.h 43, 51, 52).
constexpr int kSchedPinPvWait = 2048;
// + kSchedThreeWG (FP8 hd 128, 128-key tiles): three consumer warpgroups, a 192-row query tile (FwdTraits).
constexpr int kSchedThreeWG = 8192;
// (4096: kSchedDynamicTiles, flash_fwd_consumer.cuh.)
__host__ __device__ constexpr int sched_wgs(int sched) { return (sched & kSchedThreeWG) != 0 ? 3 : 2; }
// + kSchedFp8VtInKernel (FP8, persistent, 2 consumer warpgroups): V^T made in the kernel instead of by the pre-pass.
// The producer warp loads V tiles as they are stored (K's map and layout) into a ring of kVtRawStages staging slots;
// two more warps of the producer warpgroup (its 24 registers: 24 + 2 x 240 per thread is the CTA's whole pool of 168 x
// 384, and the consumers' setmaxnreg.inc waits forever for registers the pool does not have) transpose each into the
// V^T ring slot the consumers read (transpose_v_tile, flash_fp8_vt.cuh) and complete its full barrier
// (kVtTransposeWarps arrivals instead of TMA bytes). FA3's design: no pass over V in global memory before the kernel
// (3.7-6.5% of the FP8 time at 4k keys) and no V-sized workspace; measured slower than the pre-pass
// (flash_fwd_launch.h, variants 57 / 58).
constexpr int kSchedFp8VtInKernel = 16384;
template <ElemKind E, int kSched>
__host__ __device__ constexpr bool vt_in_kernel() {
  return E == ElemKind::kE4m3 && (kSched & kSchedFp8VtInKernel) != 0;
}
// Shared memory of a forward kernel: FwdTraits' plus, with the in-kernel V^T, the staging ring, its full / empty
// barriers and 16 bytes of stop flags (FwdBarriers::raw_*).
template <class T, ElemKind E, int kSched>
__host__ __device__ constexpr size_t fwd_smem_bytes() {
  return T::kSmemBytes + (vt_in_kernel<E, kSched>() ? size_t{kVtRawStages} * T::kKBytes + 8 * (2 * kVtRawStages + 2)
                                                    : 0);
}

template <ElemKind E, int HD, int kSched, bool kPersistent, int kStages, int kBN = 0>
__device__ __forceinline__ void consumer_main(const FwdArgs& a, unsigned char* sq, unsigned char* sk,
                                              unsigned char* sv, FwdBarriers<kStages> bars) {
  using T = FwdTraits<HD, kStages, elem_bytes<E>(), kBN, sched_wgs(kSched)>;
  const int cwg = static_cast<int>(threadIdx.x) / 128 - 1;  // consumer warpgroup 0, 1 (2: kSchedThreeWG)
  const int wtid = static_cast<int>(threadIdx.x) % 128;
  const int warp = wtid / 32, lane = wtid % 32, g = lane / 4, c = lane % 4;
  const int wg_row_base = cwg * 64;
  const uint32_t k_base = tile::smem_u32(sk), v_base = tile::smem_u32(sv);

  // Ping-pong (kSched 2, 3): named barrier 1 = "warpgroup 0 may issue", 2 = "warpgroup 1 may issue". Strict
  // alternation 0, 1, 0, 1, ... over every GEMM issue point of every tile (both warpgroups see the same
  // tiles, so the same number of turns); warpgroup 0 consumes warpgroup 1's last arrival at the end.
  constexpr int kBase = kSched & (kSchedPolyExp - 1);
  constexpr bool kPingPong = kBase == 2 || kBase == 3;
  constexpr bool kSerial = kBase == 0 || kBase == 3;
  constexpr bool kLazy = (kSched & kSchedLazyRescale) != 0;
  static_assert(!kLazy || !kSerial, "lazy rescale: overlap schedules");
  constexpr bool kPinWait = (kSched & kSchedPinPvWait) != 0;
  static_assert(!kPinWait || (!kLazy && !kSerial), "pinned PV wait: the plain overlap schedule");
  constexpr bool kQReg = (kSched & kSchedQReg) != 0;
  constexpr bool kSplit = split_tail_sched(kSched, kPersistent);
  static_assert(!kSplit || E != ElemKind::kE4m3, "split tail: 16-bit");
  constexpr bool kTmaStore = (kSched & kSchedTmaStore) != 0;
  static_assert(!kTmaStore || (E != ElemKind::kE4m3 && kBase == 1 && T::kBlockN == T::kBlockM),
                "O staged in V: 16-bit, overlap schedule, 128 x HD V slots");
  using C = Consumer<E, HD, (kSched & kSchedPolyExp) != 0, kBN, kQReg,
                     E == ElemKind::kE4m3 && (kSched & kSchedFp8TreeSoftmax) != 0, sched_wgs(kSched),
                     softcap_sched<E, kSched>()>;
  static_assert(T::kConsumerWGs == 2 || (!kPingPong && !kSplit && !kTmaStore), "3 warpgroups: no 2-way turns");
  bool first_turn = true;
  auto turn_begin = [&]() {
    if constexpr (kPingPong) {
      if (cwg == 1) tile::named_barrier_sync(2, 256);
      else if (!first_turn) tile::named_barrier_sync(1, 256);
    }
  };
  auto turn_end = [&]() {
    if constexpr (kPingPong) tile::named_barrier_arrive(cwg == 0 ? 2 : 1, 256);
    first_turn = false;
  };
  auto arrive = [&](uint64_t* bar) {
    __syncwarp();
    if (lane == 0) tile::mbar_arrive(bar);
  };
  // Q's slot goes back to the producer after the tile's last S GEMM, or (kQReg) once Q is in registers.
  auto release_q_after_s = [&]() {
    if constexpr (!kQReg) arrive(bars.q_empty());
  };

  // Varlen: rows [valid, N) of the V tile in `stage` hold keys past the sequence's end (the next sequence's,
  // or a page's unwritten slots): zeroed so P = 0 times them is 0 even if they are not finite. Both consumer
  // warpgroups write the same zeros; the slot is not released to the producer before both have arrived.
  auto zero_v_tail = [&](int stage, int valid) {
    if constexpr (E != ElemKind::kE4m3) {
      if (!a.varlen || valid >= T::kBlockN) return;
      unsigned char* slot = sv + stage * T::kTileBytes + valid * 128;
      const int chunks = (T::kBlockN - valid) * 8;  // 16-byte chunks per 128-byte column block
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb)
        for (int i = wtid; i < chunks; i += 128)
          *reinterpret_cast<uint4*>(slot + cb * (T::kBlockN * 128) + i * 16) = make_uint4(0u, 0u, 0u, 0u);
      tile::fence_proxy_async_smem();
      tile::named_barrier_sync(3 + cwg, 128);
    }
  };

  float s[T::kSAcc];
  uint32_t pa[T::kKSteps][4];
  float corr[2];
  constexpr bool kDynamic = dynamic_tiles<E, kPersistent, kSched>();
  int kv_count = 0;  // K/V tiles consumed by this CTA so far (ring position)
  int q_count = 0;   // tiles with a Q load (skipped varlen tiles have none): the Q barriers' phase
  for (int local = 0;; ++local) {
    int t, jb = 0, je = -1;
    if constexpr (kDynamic) {  // the producer wrote the tile number before this phase of Q's barrier (FP8 only:
                               // no varlen, so no skipped tile and q_count == local)
      tile::mbar_wait(bars.q_full(), q_count & 1);
      // Lane 0 reads it for the warp: lane 0 is the thread that later releases Q (q_empty), and that arrival
      // is what orders this read before the producer's next write (racecheck flagged the other lanes' reads,
      // which only __syncwarp orders).
      int slot = 0;
      if (lane == 0) slot = *bars.tile_slot();
      t = __shfl_sync(0xffffffffu, slot, 0);
    } else {
      const WorkItem w = cta_work<kPersistent, kSplit>(a, local);
      t = w.t;
      jb = w.jb;
      je = w.je;
    }
    if (t < 0) break;
    const FwdTile f = decode_tile<T, window_kernel<E, HD>()>(a, t, jb, je);
    if (f.skip) continue;
    // Key tiles keep their numbers from key 0: this work item covers tiles [j0, jend) (j0 > 0: a sliding window's first
    // tile, a split tail piece's). Tile j's ring position is kv_base + j, so no offset stays live across the key loop,
    // and a dense item's key count stays the kernel argument, not a register (the hd 256 kernels had no room for one).
    const int row0 = f.m0 + wg_row_base + warp * 16 + g;
    const int j0 = f.j0, jend = f.j0 + f.n_tiles;
    const int kv_base = kv_count - j0;
    C st;
    st.init(a, row0, wg_row_base, sq, f.seqlen_q, f.seqlen_k);
    if constexpr (!kDynamic) tile::mbar_wait(bars.q_full(), q_count & 1);
    if constexpr (kQReg) {
      st.load_q_regs(warp, lane);
      arrive(bars.q_empty());  // the ldmatrix reads are done before lane 0's release (__syncwarp in arrive)
    }
    auto stage_of = [&](int j) { return (kv_base + j) % kStages; };
    auto parity_of = [&](int j) { return static_cast<uint32_t>(((kv_base + j) / kStages) & 1); };

    if constexpr (kSerial) {
      for (int j = j0; j < jend; ++j) {
        const int stage = stage_of(j);
        tile::mbar_wait(bars.k_full(stage), parity_of(j));
        turn_begin();
        st.issue_s(s, k_base + stage * T::kTileBytes);
        turn_end();
        tile::wgmma_wait<0>();
        tile::fence_regs(s);
        arrive(bars.k_empty(stage));
        if (j == jend - 1) release_q_after_s();
        st.softmax(s, j * T::kBlockN, c, a, f.seqlen_k, corr);
        st.rescale_o(corr);
        C::to_a_fragments(s, pa);
        tile::mbar_wait(bars.v_full(stage), parity_of(j));
        if (j == jend - 1) zero_v_tail(stage, f.seqlen_k - j * T::kBlockN);
        turn_begin();
        st.issue_pv(pa, v_base + stage * T::kTileBytes);
        turn_end();
        tile::wgmma_wait<0>();
        st.fence_o();
        arrive(bars.v_empty(stage));
      }
      if (jend == j0) release_q_after_s();
    } else {
      if (jend > j0) {
        tile::mbar_wait(bars.k_full(stage_of(j0)), parity_of(j0));
        turn_begin();
        st.issue_s(s, k_base + stage_of(j0) * T::kTileBytes);
        turn_end();
        tile::wgmma_wait<0>();
        tile::fence_regs(s);
        arrive(bars.k_empty(stage_of(j0)));
        if (jend == j0 + 1) release_q_after_s();
        st.softmax(s, j0 * T::kBlockN, c, a, f.seqlen_k, corr);  // O is zero: no rescale needed
        C::to_a_fragments(s, pa);
        for (int j = j0 + 1; j < jend; ++j) {
          const int stage = stage_of(j), prev = stage_of(j - 1);
          tile::mbar_wait(bars.k_full(stage), parity_of(j));
          if constexpr (!kLazy) tile::mbar_wait(bars.v_full(prev), parity_of(j - 1));
          turn_begin();
          st.issue_s(s, k_base + stage * T::kTileBytes);
          if constexpr (kLazy) {  // O (PV_{j-2} waited) to the max of tile j-1 while S_j runs
            st.rescale_o_lazy(corr);
            tile::mbar_wait(bars.v_full(prev), parity_of(j - 1));
          }
          st.issue_pv(pa, v_base + prev * T::kTileBytes);
          turn_end();
          tile::wgmma_wait<1>();  // S_j done; PV_{j-1} may still run (it reads pa and writes O)
          tile::fence_regs(s);
          arrive(bars.k_empty(stage));
          if (j == jend - 1) release_q_after_s();
          st.softmax(s, j * T::kBlockN, c, a, f.seqlen_k, corr);
          if constexpr (kPinWait) st.end_block();  // the PV wait below stays below the softmax
          tile::wgmma_wait<0>();
          st.fence_o();
          tile::fence_regs(pa);  // PV_{j-1} read pa until here
          arrive(bars.v_empty(prev));
          if constexpr (!kLazy) st.rescale_o(corr);
          C::to_a_fragments(s, pa);
        }
        if constexpr (kLazy) st.rescale_o_lazy(corr);  // (n == 1: O is zero, corr 0 or 1: harmless)
        const int last = stage_of(jend - 1);
        tile::mbar_wait(bars.v_full(last), parity_of(jend - 1));
        zero_v_tail(last, f.seqlen_k - (jend - 1) * T::kBlockN);
        turn_begin();
        st.issue_pv(pa, v_base + last * T::kTileBytes);
        turn_end();
        tile::wgmma_wait<0>();
        st.fence_o();
        // kTmaStore: a tile whose O is stored (split tail: not a later piece) releases the slot once O is staged in it.
        if (!kTmaStore || (kSplit && jb > 0)) arrive(bars.v_empty(last));
      } else {
        release_q_after_s();
      }
    }
    kv_count = kv_base + jend;  // (+= the item's tiles, without keeping kv_count live across the key loop)
    ++q_count;
    if constexpr (kSplit) {
      const int ctid = cwg * 128 + wtid;
      const WorkItem w = cta_work<kPersistent, kSplit>(a, local);  // again: cheaper than keeping it in registers
      if (w.jb > 0) {  // a later piece of a split tile: partial to this CTA's slot, flag, no store
        st.save_partial(a.split_partials + size_t{blockIdx.x} * split_slot_float4s(HD), ctid);
        __threadfence();
        tile::named_barrier_sync(5, 256);  // every consumer thread's partial is out
        if (ctid == 0) st_release_gpu(a.split_flags + blockIdx.x, 1);
        continue;
      }
      if (w.je >= 0 && w.je < a.kv_blocks) {  // the first piece of a split tile: fold in the later ones (higher CTAs)
        const int g = static_cast<int>(gridDim.x);
        const int tile_end = (w.t - a.tail_first_tile + 1) * a.kv_blocks;  // in the tail's key-block units
        for (int b2 = static_cast<int>(blockIdx.x) + 1; b2 < g && split_range_start(b2, a.tail_units, g) < tile_end;
             ++b2) {
          while (ld_acquire_gpu(a.split_flags + b2) == 0) {
          }
          st.merge_partial(a.split_partials + size_t(b2) * split_slot_float4s(HD), ctid, a.scale_log2);
        }
      }
    }
    if constexpr (kTmaStore) {  // (dense non-causal 16-bit: the host runs these kernels nowhere else; n > 0)
      // O into the V slot of the tile's last key block once both warpgroups' last PV GEMMs have read all of it; its
      // release tells the producer O is staged there (the producer stores it: flash_fwd_epilogue.cuh).
      const int last = (kv_count - 1) % kStages;
      tile::named_barrier_sync(10, 256);
      const uint32_t so_wg = tile::smem_u32(sv + last * T::kTileBytes) + static_cast<uint32_t>(wg_row_base) * 128u;
      stage_o_smem(st, so_wg, warp, g, c);
      tile::fence_proxy_async_smem();  // the st.shared above before the copy engine's reads
      arrive(bars.v_empty(last));
      store_lse_dense(st, a, c, f.batch, f.head, row0, f.seqlen_q);
      continue;
    }
    store_o_regs(st, a, f.batch, f.head, row0, c, f.seqlen_q, f.q_off);
  }
  if constexpr (kPingPong) {
    if (cwg == 0 && !first_turn) tile::named_barrier_sync(1, 256);  // warpgroup 1's final arrival
  }
}

// The producer warp: every TMA copy of every tile of this CTA, K_j ahead of V_{j-1}. Lane 0 does the barrier
// work and the dense copies; with paged KV lane i < kv_boxes also reads the i-th page id of each key tile and
// issues that page's copies (the page ids of K_j are kept for V_j one step later). FP8 reads V^T (tm_v over the
// workspace, [batch][n_head_kv][HD][keys]): one box of HD rows x 128 keys per tile.
template <ElemKind E, int HD, int kSched, bool kPersistent, int kStages, int kBN = 0>
__device__ __forceinline__ void producer_main(const FwdArgs& a, unsigned char* sq, unsigned char* sk,
                                              unsigned char* sv, unsigned char* sraw, FwdBarriers<kStages> bars) {
  using T = FwdTraits<HD, kStages, elem_bytes<E>(), kBN, sched_wgs(kSched)>;
  constexpr int N = T::kBlockN;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const bool leader = lane == 0;
  if (leader) {
    tile::tma_prefetch_map(&a.tm_q);
    tile::tma_prefetch_map(&a.tm_k);
    tile::tma_prefetch_map(&a.tm_v);
    if ((kSched & kSchedTmaStore) != 0 && a.o_tma) tile::tma_prefetch_map(&a.tm_o);
  }
  // One key tile of K or V into `dst`: dense/packed = one box column per 128-byte block at row k_row; paged =
  // this lane's page (page id `page`, rows from `row_in_page`) when it has one.
  auto load_kv = [&](unsigned char* dst, const CUtensorMap* map, uint64_t* bar, int k_row, int kv_z, int kv_head,
                     int page, int row_in_page) {
    if (!a.paged) {
      if (leader) {
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
          tile::tma_load_4d(dst + cb * (N * 128), map, bar, cb * T::kColElems, k_row, kv_head, kv_z);
      }
    } else if (lane < a.kv_boxes) {
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb)
        tile::tma_load_4d(dst + cb * (N * 128) + lane * a.kv_box_rows * 128, map, bar, cb * T::kColElems, row_in_page,
                          kv_head, page);
    }
  };
  constexpr bool kDynamic = dynamic_tiles<E, kPersistent, kSched>();
  constexpr bool kTmaStore = (kSched & kSchedTmaStore) != 0;
  constexpr bool kVtIn = vt_in_kernel<E, kSched>();
  int kv_count = 0, q_count = 0;
  // kTmaStore: the last work item whose O the consumers stage in the V slot of its last key block (ring position
  // kv_count - 1 until the next item's loads are counted), not stored yet; its slot's release means "staged".
  int o_tile = -1;
  auto store_staged_o = [&]() {
    if constexpr (kTmaStore) {
      if (o_tile >= 0) {
        const int idx = kv_count - 1, stage = idx % kStages;
        tile::mbar_wait(bars.v_empty(stage), (idx / kStages) & 1);
        if (leader) {
          const FwdTile p = decode_tile<T>(a, o_tile);
          store_staged_o_tile<T>(a, sv + stage * T::kTileBytes, p.m0, p.head, p.batch);
        }
        o_tile = -1;
      }
    }
  };
  for (int local = 0;; ++local) {
    int t, jb = 0, je = -1;
    if constexpr (kDynamic) {  // FP8 only: no varlen, every tile has a Q load
      // The next tile is taken once this CTA's previous one is fully queued (its last V load issued), and the
      // atomic's latency overlaps the wait for the consumers to release Q. The leader takes it for the warp.
      int taken = 0;
      if (leader) {
        taken = local == 0 ? static_cast<int>(blockIdx.x) : atomicAdd(a.tile_counter, 1) + static_cast<int>(gridDim.x);
      }
      t = __shfl_sync(0xffffffffu, taken, 0);
      if (t >= a.total_tiles) t = -1;
      if (q_count > 0) tile::mbar_wait(bars.q_empty(), (q_count - 1) & 1);
      if (t < 0) {
        if (leader) {
          *bars.tile_slot() = t;
          tile::mbar_arrive(bars.q_full());  // completes the phase without bytes: the consumers see -1 and stop
        }
        break;
      }
      // published by the leader's arrival on Q's barrier below (release), read after its wait
      if (leader) *bars.tile_slot() = t;
    } else {
      const WorkItem w = cta_work<kPersistent, split_tail_sched(kSched, kPersistent)>(a, local);
      t = w.t;
      jb = w.jb;
      je = w.je;
      if (t < 0) break;
    }
    const FwdTile f = decode_tile<T, window_kernel<E, HD>()>(a, t, jb, je);
    if (f.skip) continue;
    const int kv_head = f.head / a.group;
    const int q_row = a.varlen ? f.q_off + f.m0 : f.m0, z = a.varlen ? 0 : f.batch;
    // K/V row of this work item's first key (k_off is 0 unless packed varlen, so paged and FP8 count keys from it
    // too; f.j0: split tail pieces). One register: the producer keeps 24.
    const int k_row0 = f.k_off + f.j0 * N;
    if (!kDynamic && q_count > 0) tile::mbar_wait(bars.q_empty(), (q_count - 1) & 1);
    if (leader) {
      tile::mbar_arrive_expect_tx(bars.q_full(), T::kQBytes);
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb)
        tile::tma_load_4d(sq + cb * (T::kBlockM * 128), &a.tm_q, bars.q_full(), cb * T::kColElems, q_row, f.head, z);
    }
    int page = 0, row_in_page = 0, prev_page = 0, prev_row = 0;
    for (int j = 0; j <= f.n_tiles; ++j) {
      // The previous item's O goes out before K_2 (whose slot waits for S_0, so the consumers have staged O by then),
      // and its slot is refilled with V_1 just after (n == 1: before V_0).
      if (kTmaStore && j == min(2, f.n_tiles)) store_staged_o();
      if (j < f.n_tiles) {
        if constexpr (E != ElemKind::kE4m3) {
          if (a.paged && lane < a.kv_boxes) {
            const int key = k_row0 + j * N + lane * a.kv_box_rows, logical = key / a.page_size;
            page = key < f.seqlen_k && logical < a.block_table_stride
                       ? __ldg(a.block_table + f.batch * a.block_table_stride + logical)
                       : a.n_pages;  // past the sequence: out of the map's bounds, zeros
            row_in_page = key % a.page_size;
          }
        }
        const int idx = kv_count + j, stage = idx % kStages;
        if (idx >= kStages) tile::mbar_wait(bars.k_empty(stage), ((idx / kStages) + 1) & 1);
        if (leader) tile::mbar_arrive_expect_tx(bars.k_full(stage), T::kKBytes);
        __syncwarp();
        load_kv(sk + stage * T::kTileBytes, &a.tm_k, bars.k_full(stage), k_row0 + j * N, z, kv_head, page,
                row_in_page);
      }
      if (kVtIn && j > 0) {  // V_{j-1} as stored, into a staging slot; the transposing warps make its V^T
        const int idx = kv_count + j - 1, rs = idx % kVtRawStages;
        if (idx >= kVtRawStages) tile::mbar_wait(bars.raw_empty(rs), ((idx / kVtRawStages) + 1) & 1);
        if (leader) tile::mbar_arrive_expect_tx(bars.raw_full(rs), T::kKBytes);
        __syncwarp();
        load_kv(sraw + rs * T::kKBytes, &a.tm_v, bars.raw_full(rs), k_row0 + (j - 1) * N, z, kv_head, 0, 0);
      } else if (j > 0) {
        const int idx = kv_count + j - 1, stage = idx % kStages;
        if (idx >= kStages) tile::mbar_wait(bars.v_empty(stage), ((idx / kStages) + 1) & 1);
        if (kTmaStore && leader) tile::bulk_wait_read<0>();  // a staged O's store has read the slot
        if (leader) tile::mbar_arrive_expect_tx(bars.v_full(stage), T::kVBytes);
        __syncwarp();
        if constexpr (E == ElemKind::kE4m3) {
          if (leader) {  // V^T: one box of HD rows x 128 keys per column block
#pragma unroll
            for (int vb = 0; vb < T::kVtBlocks; ++vb) {
              tile::tma_load_4d(sv + stage * T::kTileBytes + vb * (HD * 128), &a.tm_v, bars.v_full(stage),
                                k_row0 + (j - 1) * N + vb * 128, 0, kv_head, f.batch);
            }
          }
        } else {
          load_kv(sv + stage * T::kTileBytes, &a.tm_v, bars.v_full(stage), k_row0 + (j - 1) * N, z, kv_head,
                  prev_page, prev_row);
        }
      }
      prev_page = page;
      prev_row = row_in_page;
    }
    kv_count += f.n_tiles;
    ++q_count;
    if constexpr (kTmaStore) o_tile = jb == 0 ? t : -1;  // (split tail: only the piece that starts a tile stores)
  }
  if constexpr (kTmaStore) {
    store_staged_o();
    if (leader) tile::bulk_wait<0>();  // shared memory stays valid (and O written) until the last store is done
  }
  if constexpr (kVtIn) {  // no more V tiles: the next staging phase completes without bytes, its stop flag set
    const int rs = kv_count % kVtRawStages;
    if (kv_count >= kVtRawStages) tile::mbar_wait(bars.raw_empty(rs), ((kv_count / kVtRawStages) + 1) & 1);
    if (leader) {
      *bars.raw_stop(rs) = 1;
      tile::mbar_arrive(bars.raw_full(rs));
    }
  }
}

// kSchedFp8VtInKernel: warps 1 and 2 of the producer warpgroup (kVtTransposeWarps). Every V tile the producer stages
// becomes the V^T tile of the same ring position (the consumers' V slots, as the pre-pass's TMA copies filled them):
// wait for the staged V and for the consumers to free the V^T slot, transpose (transpose_v_tile), make the stores
// visible to wgmma (the async proxy), then one arrival per warp on the slot's full barrier and on the staging slot's
// empty one. The tile sequence
// needs no decoding here: V tiles arrive in ring order, and the producer ends it with a staging phase whose stop flag
// is set (per slot: the flag of a slot is written only after the warps released that slot's previous phase, so a warp
// still busy with the other slot never sees it early).
template <int HD, int kStages, class T>
__device__ __forceinline__ void transposer_main(unsigned char* sraw, unsigned char* sv, FwdBarriers<kStages> bars) {
  const int warp = static_cast<int>(threadIdx.x) / 32 - 1, lane = static_cast<int>(threadIdx.x) % 32;
  const uint32_t raw_base = tile::smem_u32(sraw), vt_base = tile::smem_u32(sv);
  for (int idx = 0;; ++idx) {
    const int rs = idx % kVtRawStages, stage = idx % kStages;
    tile::mbar_wait(bars.raw_full(rs), (idx / kVtRawStages) & 1);
    // Lane 0 reads the flag for the warp: its arrival on raw_empty below is what orders the read before the
    // producer's write of the slot's flag (as the consumers' read of the tile slot; racecheck tracks it so).
    int stop = 0;
    if (lane == 0) stop = *bars.raw_stop(rs);
    if (__shfl_sync(0xffffffffu, stop, 0) != 0) break;
    if (idx >= kStages) tile::mbar_wait(bars.v_empty(stage), ((idx / kStages) + 1) & 1);
    transpose_v_tile<HD, T::kBlockN>(raw_base + static_cast<uint32_t>(rs) * T::kKBytes,
                                     vt_base + static_cast<uint32_t>(stage) * T::kTileBytes, warp, lane);
    tile::fence_proxy_async_smem();  // this thread's V^T stores before the consumers' wgmma reads
    __syncwarp();
    if (lane == 0) {
      tile::mbar_arrive(bars.v_full(stage));
      tile::mbar_arrive(bars.raw_empty(rs));
    }
  }
}

// kBN: keys per tile (0 = FwdTraits' default; the wide variants pass wide_block_n<HD>()).
template <ElemKind E, int HD, int kSched, bool kPersistent, int kStages, int kBN = 0>
__global__ void __launch_bounds__(FwdTraits<HD, kStages, elem_bytes<E>(), kBN, sched_wgs(kSched)>::kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ FwdArgs a) {
#if GA_SM90A_DEVICE
  using T = FwdTraits<HD, kStages, elem_bytes<E>(), kBN, sched_wgs(kSched)>;
  extern __shared__ unsigned char flash_smem_raw[];
  // 128-byte swizzled tiles must start on 1024-byte boundaries.
  unsigned char* smem = flash_smem_raw + ((1024 - (tile::smem_u32(flash_smem_raw) & 1023)) & 1023);
  unsigned char* sq = smem;                              // [kColBlocks][kBlockM][64]
  unsigned char* sk = sq + T::kQBytes;                   // [kStages][kColBlocks][kBlockN][64]
  unsigned char* sv = sk + kStages * T::kTileBytes;      // same (FP8: V^T [kVtBlocks][HD][128])
  constexpr bool kVtIn = vt_in_kernel<E, kSched>();
  static_assert(!kVtIn || (kPersistent && T::kConsumerWGs == 2 && (kSched & kSchedTmaStore) == 0),
                "in-kernel V^T: the persistent FP8 kernels with two consumer warpgroups");
  unsigned char* sraw = sv + kStages * T::kTileBytes;    // kVtIn: [kVtRawStages] V tiles as K's layout
  const FwdBarriers<kStages> bars{
      reinterpret_cast<uint64_t*>(sraw + (kVtIn ? kVtRawStages * T::kKBytes : 0))};

  if (threadIdx.x == 0) {
    tile::mbar_init(bars.q_full(), 1);
    constexpr int kConsumerWarps = 4 * T::kConsumerWGs;  // each releases Q and every K / V slot
    tile::mbar_init(bars.q_empty(), kConsumerWarps);
    for (int s = 0; s < kStages; ++s) {
      tile::mbar_init(bars.k_full(s), 1);
      tile::mbar_init(bars.v_full(s), kVtIn ? kVtTransposeWarps : 1);
      tile::mbar_init(bars.k_empty(s), kConsumerWarps);
      tile::mbar_init(bars.v_empty(s), kConsumerWarps);
    }
    if constexpr (kVtIn) {
      for (int s = 0; s < kVtRawStages; ++s) {
        tile::mbar_init(bars.raw_full(s), 1);
        tile::mbar_init(bars.raw_empty(s), kVtTransposeWarps);
        *bars.raw_stop(s) = 0;
      }
    }
    tile::mbar_fence_init();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    tile::regs_release<24>();
    if (threadIdx.x < 32) {
      producer_main<E, HD, kSched, kPersistent, kStages, kBN>(a, sq, sk, sv, sraw, bars);
    } else if constexpr (kVtIn) {
      if (threadIdx.x < 32 * (1 + kVtTransposeWarps)) transposer_main<HD, kStages, T>(sraw, sv, bars);
    }
  } else {
    tile::regs_acquire<T::kConsumerRegs>();
    consumer_main<E, HD, kSched, kPersistent, kStages, kBN>(a, sq, sk, sv, bars);
  }
#else
  (void)a;
  __trap();
#endif
}

}  // namespace ga::cuda::flash_detail
