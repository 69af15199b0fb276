// Internal seam between the host API (flash_forward.cu) and the per-head-dim instantiation files
// (flash_fwd_hd*.cu): one .cu per head dim keeps each translation unit small and lets the build
// compile them in parallel (DESIGN.md: sharded instantiations).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernels/flash/flash_attention.h"
#include "backends/cuda/kernels/flash/flash_fwd_sm90.cuh"
#include "backends/cuda/kernels/flash/flash_tile_order.h"

namespace ga::cuda::flash_detail {

// Kernel variants flash_forward_with_schedule can pick (flash_fwd_sm90.cuh): consumer schedule
// (0 serial, 1 intra-warpgroup overlap, 2 overlap + ping-pong, 3 serial + ping-pong), persistent tile
// scheduler or one tile per CTA, default or deep K/V ring. Measured against each other on the H200
// (default_variant below). Variants 7-10 exist for FP8 only: serial + ping-pong (7, 8) and
// overlap + ping-pong with a quarter of the exp2 on the FMA pipes (9, 10: flash_fwd_sm90.cuh poly_exp2).
// Variants 12-17 (16-bit only, after the mma.sync forward's 11 so its number stays): FlashAttention-3's wide key
// tiles (wide_block_n: 176 keys at hd 128, 80 at hd 256, 192 at hd 64) and/or the lazy O rescale
// (kSchedLazyRescale), on the overlap schedule. Paged KV keeps the default key tile (pages must divide it): a
// wide variant given paged KV runs its narrow counterpart (paged_variant). 12 and 13 are in every build (the
// defaults at head dims 64 and 256); 14-17 only in benchmark builds. Variants 19-20 (after the sm_75 build's 18, so
// its number stays; benchmark builds only): Q kept in registers (kSchedQReg) on the overlap schedule, one tile per
// CTA / persistent; head dim 128 only (64 and 256 run their counterpart 1 / 4: head_dim_variant). Variant 21
// (kSplitTailVariant): variant 4 with the split tail (flash_fwd_split_tail.cuh: the last round of tiles cut in key
// blocks between all CTAs, merged by LSE), head dim 128, dense non-causal, with flash_plan's workspace; anything
// else runs it as variant 4. Variant 24 (kStageInVVariant): 21 with the TMA-store epilogue (kSchedTmaStore: O
// staged in the last key block's V slot and written by the producer's TMA stores; flash_fwd_epilogue.cuh), for dense
// non-causal 16-bit O of the input dtype at head dim 128; elsewhere (varlen, paged, f32 O, causal, a refused O map)
// it runs 21, and off head dim 128 it runs 4. Numbers 22, 23 and 25 are retired (diagnostics of the TMA-store work: a
// dedicated 32 KB staging tile, its register-store twin, 21 with that tile's shared memory; measured on the
// H200); they answer "not compiled".
struct FwdVariant {
  int sched;
  bool persistent;
  bool deep;
  bool poly_exp = false;
  bool wide = false;
  bool lazy = false;
};
constexpr int kFwdVariants = 11;   // 0-10; kFlashSm80Variant (11) follows them
constexpr int k16BitVariants = 7;  // 0-6: the 16-bit kernels' variants
constexpr int kFirstTileVariant = 12, kFwdVariantsEnd = 18;  // 12-17: wide tiles / lazy rescale
constexpr int kFirstQRegVariant = 19, kQRegVariantsEnd = 21;  // 19-20: Q in registers (18: the sm_75 build)
constexpr int kSplitTailVariant = 21;                          // 21: split tail
constexpr int kStageInVVariant = 24;  // 24: 21 + TMA store staged in V (22, 23: retired)
// FP8-only variants 28-33 (head dim 128; flash_fwd_fp8_wide_hd128.cu), all the persistent overlap kernel (4)
// with FA3's 224-key FP8 tile (fp8_wide_block_n): 28 alone; 29 = 28 + the split-chain softmax (kSchedFp8TreeSoftmax),
// the hd 128 FP8 default (every build); 32 = 29 + ping-pong (schedule 2); 33 = 29 with a 3-deep K/V ring; 34 = 29 + the
// lazy O rescale (kSchedLazyRescale: O *= corr while S runs, skipped when no row max moved). 28, 32-34 are
// benchmark-only (GA_FLASH_FP8_WIDE). 30 and 31 are retired (exp2 on f16 pairs, 20-30% slower). 25-27
// are 16-bit numbers (25 retired; 26 named a cross-tile start, 5-8% slower than 24, not kept; 27 unused).
constexpr int kFp8WideVariant = 28, kFp8TreeVariant = 29, kFp8PingPongVariant = 32, kFp8DeepVariant = 33;
constexpr int kFp8LazyVariant = 34;
// FP8 head dim 256 (flash_fwd_fp8_hd256.cu): 39 = the persistent overlap schedule (4's) with the
// split-chain softmax, the hd 256 FP8 default (every build): +9-17% over the persistent serial 3 at 4k-16k, full and
// causal, in the same run. Numbers 35-38 are retired (an S lookahead; a stale-max softmax and a
// quarter of the exp2 on the FMA pipes at hd 128, 7-15% slower than 29, and both together). (40 once named another
// kernel, 3 with the split chains: 5-6% slower than 3; the number now names 39's one-tile twin.)
constexpr int kFp8Hd256OverlapVariant = 39;
// Benchmark builds (GA_FLASH_FP8_WIDE): 40 = 39 with one tile per CTA, 41 = 39 with a 3-deep K/V ring (225 KB).
// (42: 29 with the row sums on the tensor cores, ones rows after V^T and N = 136, was within 3% of 29
// and less accurate: sums of e4m3-rounded P renormalize away the P values e4m3 flushes to zero. Not kept.)
constexpr int kFp8Hd256OneTileVariant = 40, kFp8Hd256DeepVariant = 41;
// Benchmark builds (GA_FLASH_FP8_WIDE): 43 = 29 with the PV wait pinned below the softmax
// (kSchedPinPvWait: in 29 as compiled, ptxas had hoisted that wait above the softmax, so the softmax never overlapped
// the PV GEMM; pinned, the overlap is real, and 43 was 9% slower to 1% faster than 29). 48 = three consumer warpgroups
// (kSchedThreeWG: 192 x 128 tiles, setmaxnreg 160, three warps per scheduler), serial schedule, split chains: 5-14%
// slower than 29 (docs/performance.md, "Tried, measured, not kept"). Retired after the same run: 44 (43 at 192
// keys), 45 / 46 (39 + the pin at 128 / 96 keys), 47 (48 on the overlap schedule: 164 bytes of spills), 49 / 50
// (43 / 44 + ping-pong, FA3's FP8 schedule: 12-20% slower).
constexpr int kFp8PinVariant = 43, kFp8ThreeWGVariant = 48;
// 16-bit (GA_FLASH_FWD_PIN): the 16-bit overlap kernels had the same hoisted wait; 51 = 4 + the pinned PV wait, 52 =
// 13 (wide key tile, persistent) + the pinned PV wait. At hd 128, 52 was 0-4% ahead of the default at 4k-8k and 2%
// behind at 16k (9 paired rounds), 51 within 3% of 4: kept as benchmark variants, not defaults.
constexpr int kPinVariant = 51, kWidePinVariant = 52;
// 55 = 4 and 56 = 13 (wide key tile) taking their tiles from a global counter (kSchedDynamicTiles) instead
// of static rounds, so causal tiles go out longest-first across L2-sized sections of heads (decode_tile) to whichever
// CTA frees up: the persistent kernels' hidden prologues with the one-tile kernels' balance. Dense batches with
// flash_plan's workspace (the counter, zeroed before the launch); otherwise they run 4 / 13. 55 is built in every build
// at head dims 64 and 128 (a causal default there, default_variant); 56 only with GA_FLASH_FWD_DYNAMIC (within 3% of
// the defaults in its one run).
// (53 and 54 named the FP8 softmax turns: within noise, not kept; docs/performance.md, "Tried, measured, not kept".)
constexpr int kDynamicVariant = 55, kWideDynamicVariant = 56;
constexpr bool dynamic_variant(int variant) { return variant == kDynamicVariant || variant == kWideDynamicVariant; }
// What a dynamic-tile variant runs without a counter (no workspace, varlen, paged): its static counterpart.
constexpr int static_variant(int variant) {
  return variant == kDynamicVariant ? 4 : variant == kWideDynamicVariant ? 13 : variant;
}
// Benchmark builds (GA_FLASH_FP8_WIDE): 57 = 39 (FP8 hd 256) and 58 = 29 (FP8 hd 128, 224-key tile) with
// V^T made in the kernel (kSchedFp8VtInKernel: two spare warps of the producer warpgroup transpose each staged V tile
// with ldmatrix / stmatrix) instead of by the pre-pass over V in the workspace. Measured against the defaults in the
// same run (docs/performance.md, "Tried, measured, not kept"): 58 at 0.88-0.95x of 29 from 4k to 16k keys
// (1.03-1.04x at 1k), 57 at 0.69-0.80x of 39: the transposing warps' instructions and shared-memory traffic cost
// more than the pre-pass (0.8-3.9% at 4k-16k). Not defaults.
constexpr int kFp8Hd256VtVariant = 57, kFp8VtVariant = 58;
constexpr bool fp8_vt_in_kernel_variant(int variant) {
  return variant == kFp8Hd256VtVariant || variant == kFp8VtVariant;
}
// 59 (kSoftcapVariant, every build; 16-bit): 4 (persistent overlap, default key tile) with logit soft-capping in the
// softmax (kSchedSoftcap). The only 16-bit kernel with soft-cap code: a call with FlashParams::softcap > 0 runs it
// whatever variant it names (softcap_variant), so the other kernels' key loops stay the plain softmax (with the cap's
// exp2 and reciprocal per score compiled in behind a uniform test, the hd 256 80-key kernels spilled 4-20 bytes).
constexpr int kSoftcapVariant = 59;
constexpr int kFwdAllVariantsEnd = 60;
// What a 16-bit Hopper variant runs for these parameters: itself, or 59 when they soft-cap.
constexpr int softcap_variant(int variant, bool softcap) { return softcap ? kSoftcapVariant : variant; }
// The kernels built on the split tail (21, 24): they take its plan and workspace, and run 4 off head dim 128.
constexpr bool split_tail_kernel(int variant) { return variant == kSplitTailVariant || variant == kStageInVVariant; }
// The default build compiles only the variants default_variant picks (4, 12, 13, 24, 55), 24's fallback 21 and 1 (what
// paged KV runs for 12): every instantiation is a heavy wgmma kernel and CI compiles them on two cores.
// -DGA_FLASH_ALL_VARIANTS=ON adds the others for benchmarking them against each other.
#ifndef GA_FLASH_ALL_VARIANTS
#define GA_FLASH_ALL_VARIANTS 0
#endif
// GA_FLASH_FP8_ALL_VARIANTS (default: GA_FLASH_ALL_VARIANTS) adds only the FP8 candidates, so a benchmark run can
// compare them without compiling every 16-bit variant.
#ifndef GA_FLASH_FP8_ALL_VARIANTS
#define GA_FLASH_FP8_ALL_VARIANTS GA_FLASH_ALL_VARIANTS
#endif
// GA_FLASH_FWD_CANDIDATES adds the variants 14-17 that are not defaults (benchmark builds: CMAKE_CUDA_FLAGS
// -DGA_FLASH_FWD_CANDIDATES=1; GA_FLASH_ALL_VARIANTS, e.g. tools/device/attention.sh's ALL_VARIANTS=1, adds them too).
#ifndef GA_FLASH_FWD_CANDIDATES
#define GA_FLASH_FWD_CANDIDATES GA_FLASH_ALL_VARIANTS
#endif
// GA_FLASH_FWD_QREG adds the Q-in-registers variants 19-20 (default: with the other candidates; alone, a benchmark
// build compiles 2 kernels per 16-bit dtype more instead of 10).
#ifndef GA_FLASH_FWD_QREG
#define GA_FLASH_FWD_QREG GA_FLASH_FWD_CANDIDATES
#endif
// GA_FLASH_FWD_SPLIT: the split-tail variant 21 (2 kernels: hd 128 bf16 / fp16), in every build since it is the hd
// 128 non-causal default (-DGA_FLASH_FWD_SPLIT=0 leaves it out; default_variant then picks 4).
#ifndef GA_FLASH_FWD_SPLIT
#define GA_FLASH_FWD_SPLIT 1
#endif
// GA_FLASH_FWD_STAGE_IN_V: variant 24 (2 kernels: hd 128 bf16 / fp16), in every build since it is the hd 128
// non-causal default (-DGA_FLASH_FWD_STAGE_IN_V=0 leaves it out; default_variant then picks 21).
#ifndef GA_FLASH_FWD_STAGE_IN_V
#define GA_FLASH_FWD_STAGE_IN_V 1
#endif
// GA_FLASH_FWD_PIN: the 16-bit pinned-wait candidates 51, 52 (default: with the other candidates).
#ifndef GA_FLASH_FWD_PIN
#define GA_FLASH_FWD_PIN GA_FLASH_FWD_CANDIDATES
#endif
// GA_FLASH_FWD_DYNAMIC: the 16-bit dynamic-tile candidate 56 (default: with the other candidates; 55: every build).
#ifndef GA_FLASH_FWD_DYNAMIC
#define GA_FLASH_FWD_DYNAMIC GA_FLASH_FWD_CANDIDATES
#endif
constexpr bool variant_compiled(int variant) {
  return variant == 1 || variant == 4 || variant == 12 || variant == 13 || variant == kSoftcapVariant ||
         (GA_FLASH_FWD_PIN && (variant == kPinVariant || variant == kWidePinVariant)) ||
         variant == kDynamicVariant || (GA_FLASH_FWD_DYNAMIC && variant == kWideDynamicVariant) ||
         (GA_FLASH_ALL_VARIANTS && variant >= 0 && variant < k16BitVariants) ||
         (GA_FLASH_FWD_CANDIDATES && variant >= kFirstTileVariant && variant < kFwdVariantsEnd) ||
         (GA_FLASH_FWD_QREG && variant >= kFirstQRegVariant && variant < kQRegVariantsEnd) ||
         (GA_FLASH_FWD_SPLIT && variant == kSplitTailVariant) ||
         (GA_FLASH_FWD_STAGE_IN_V && variant == kStageInVVariant);
}
// What a head-dim-128-only variant runs at head dim HD: itself at 128; elsewhere its plain counterpart. Q in
// registers (19 / 20) -> 1 / 4 (hd 64: the 128-key tile would fit too but is not the target; hd 256: O alone is 128
// registers); the split tail (21) and 24 built on it -> 4 (its workspace slots are sized for head dim 128's O
// fragments). And 55 (dynamic tiles) at head dim 256 -> 4.
template <int HD>
constexpr int head_dim_variant(int variant) {
  if (HD == 256 && variant == kDynamicVariant) return 4;  // 55 is built at head dims 64 and 128 (where it is a default)
  if (HD == 128) return variant;
  if (split_tail_kernel(variant)) return 4;
  if (variant < kFirstQRegVariant || variant >= kQRegVariantsEnd) return variant;
  return variant == kFirstQRegVariant ? 1 : 4;
}
// The split tail's schedule for these parameters (flash_fwd_split_tail.cuh) on a grid of num_sms CTAs: on only for
// 16-bit dense non-causal head dim 128 with more tiles than CTAs, a partial last round, at least one key block of it
// per CTA (every CTA's range is then non-empty, which the merge's partner walk relies on), and a gain worth the
// merge: each CTA's share at most 3/4 of a tile (a last round that is nearly full would only add pieces). bytes: the
// workspace it needs.
struct SplitTailPlan {
  bool on = false;
  int full_rounds = 0, first_tile = 0, units = 0, kv_blocks = 0;
  size_t bytes = 0;
};
inline SplitTailPlan split_tail_plan(const FlashParams& p, int num_sms) {
  SplitTailPlan sp;
  // (a sliding window gives tiles of different key counts: no even split; head dim 96 runs as 128 but its
  // workspace plan is head dim 128's only when asked as such)
  if (p.head_dim != 128 || p.dtype == FlashDtype::kFp8E4m3 || p.causal || p.cu_seqlens_q != nullptr ||
      p.window_left >= 0 || p.window_right >= 0 || num_sms < 1) {
    return sp;
  }
  constexpr int kBlockM = FwdTraits<128>::kBlockM, kBlockN = FwdTraits<128>::kBlockN;
  const int64_t tiles = int64_t{(p.seqlen_q + kBlockM - 1) / kBlockM} * p.n_head * p.batch;
  const int64_t n = (p.seqlen_k + kBlockN - 1) / kBlockN, rem = tiles % num_sms;
  // (the kernel computes b * units / grid in 32 bits)
  if (tiles <= num_sms || rem == 0 || rem * n < num_sms || rem * n * (num_sms + 1) > INT32_MAX) return sp;
  if ((rem * n + num_sms - 1) / num_sms * 4 > 3 * n) return sp;
  sp.on = true;
  sp.full_rounds = static_cast<int>(tiles / num_sms);
  sp.first_tile = static_cast<int>(tiles - rem);
  sp.units = static_cast<int>(rem * n);
  sp.kv_blocks = static_cast<int>(n);
  sp.bytes = split_flag_bytes(num_sms) + size_t(num_sms) * split_slot_float4s(128) * 16;
  return sp;
}

constexpr FwdVariant kFwdVariantTable[kFwdVariantsEnd] = {
    {0, false, false}, {1, false, false}, {2, false, false},  // 0-2: the first version's schedules
    {0, true, false},  {1, true, false},  {2, true, false},   // 3-5: persistent
    {2, true, true},                                          // 6: persistent ping-pong, deep ring
    {3, false, false}, {3, true, false},                      // 7-8: serial + ping-pong (FP8)
    {2, false, false, true}, {2, true, false, true},          // 9-10: 2 and 5 with poly_exp2 (FP8)
    {-1, false, false},                                       // 11: kFlashSm80Variant (not a Hopper kernel)
    {1, false, false, false, true},  {1, true, false, false, true},   // 12-13: wide key tile
    {1, false, false, false, false, true},                            // 14: lazy rescale
    {1, false, false, false, true, true}, {1, true, false, false, true, true},  // 15-16: wide + lazy
    {1, true, false, false, false, true},                             // 17: lazy rescale, persistent
};
// What a variant runs with paged KV: the wide ones their narrow counterpart (pages divide the default tile).
constexpr int paged_variant(int variant) {
  return variant == 12 ? 1 : variant == 13 ? 4 : variant == 15 ? 14 : variant == 16 ? 17 :
         variant == kWidePinVariant ? kPinVariant : dynamic_variant(variant) ? paged_variant(static_variant(variant)) :
         variant;
}
// Keys per tile of a 16-bit variant (the TMA boxes of K and V are this many rows); paged: of paged_variant.
template <int HD>
constexpr int variant_block_n(int variant, bool paged) {
  const bool wide = (variant >= kFirstTileVariant && variant < kFwdVariantsEnd && kFwdVariantTable[variant].wide) ||
                    variant == kWidePinVariant || variant == kWideDynamicVariant;
  return wide && !paged
             ? wide_block_n<HD>()
             : FwdTraits<HD>::kBlockN;
}

// What flash_forward runs: the fastest variant of the H200 measurements (docs/performance.md, "Method":
// FA3 methodology, medians of interleaved rounds). Short key ranges: persistent (4, 13): the per-tile
// prologue/epilogue is a large share of a short tile and the persistent CTA hides it. Long causal ones: one tile
// per CTA (1, 12): the static persistent split of long causal tiles is uneven (up to 35% slower at 16k) and the
// hardware block scheduler balances them. Head dim 256: FA3's 80-key tile (13 / 12: +4-18% over 64 keys);
// head dim 64: the 192-key tile above 4k keys (+2-5%; at <= 4k it lost). Head dim 128 keeps 128 keys (176 was
// within noise); non-causal: persistent at every length (15 paired rounds: 4 ahead of 1 by 1-4% at
// 4k-16k, and of 13 by 0-2%; equal tiles, so the static split is even). Ping-pong (2, 5, 6) was never more than
// 2% ahead of overlap alone and often behind; the lazy rescale (14-17) and Q in registers (19-20) within noise.
// hd 128 non-causal runs 21 (= 4 plus the split tail, where split_tail_plan turns it on and the caller
// gives flash_plan's workspace; otherwise it is 4): paired per round ahead of 4 by 0.5 / 2.0 / 1.0% at 4k / 8k / 16k.
// Then 24 (21 + the TMA-store epilogue staged in V), paired per round ahead of 21 by 1.2 / 0.5 / 1.9% at
// 4k / 8k / 16k (25 rounds; 7 rounds: 1.0 / 0.1 / 1.6 / 2.4% at 2k-16k); where it cannot store by TMA it runs 21.
// With the causal tiles heaviest-first across sections of heads (decode_tile), hd 128 causal past 8k keys
// runs the 176-key tile one per CTA (12): paired per round ahead of 1 by 5.5% (7 rounds), 5.6% (15) and 2.7% (11) at
// 16k in three runs; at 8k 4, 1 and 12 are within 2%. And causal past 2k keys up to 8k (hd 128) / 4k (hd 64) runs 4
// with dynamic tiles (55; with flash_plan's workspace, else 4): the persistent kernel's hidden prologues and the
// longest-first order's balance; paired per round against 4 in three runs (5, 11, 5 rounds): hd 128 +2.9 / +2.6 /
// +1.5% at 4k, +4.1 / +5.5 / +0.6% at 8k, hd 64 +2.1 / +3.3 / -0.4% at 4k; at 2k it was 2-4% behind.
constexpr int default_variant(int head_dim, bool causal, int seqlen_k) {
  if (head_dim == 256) return seqlen_k <= (causal ? 4096 : 8192) ? 13 : 12;
  if (head_dim == 64) return seqlen_k <= 4096 ? (causal && seqlen_k > 2048 ? kDynamicVariant : 4) : 12;
  if (!causal) return GA_FLASH_FWD_STAGE_IN_V ? kStageInVVariant : GA_FLASH_FWD_SPLIT ? kSplitTailVariant : 4;
  return seqlen_k <= 2048 ? 4 : seqlen_k <= 8192 ? kDynamicVariant : 12;
}

// FP8 variants (flash_fwd_fp8_hd*.cu compile only these; GA_FLASH_FP8_ALL_VARIANTS adds the candidates that lost,
// for benchmarks). fp8_default_variant, the fastest in the H200 runs (figures: docs/performance.md, "FP8 e4m3
// forward"): hd 128 runs 29 (FA3's 224-key tile + the split-chain softmax), ahead of 4 by 8-15% at 4k-16k, full and
// causal, in the same run; hd 256 runs 39 (the overlap schedule with the split chains, persistent), ahead of 3 by
// 9-17%. Both grew from the persistent kernels with the dynamic tile scheduler, overlap (4) at hd 128 and serial (3)
// at hd 256 (with the static split, long causal lost up to 45% to one tile per CTA; with the counter it is even or
// ahead: hd 128 16k causal 810 vs 772, hd 256 8k causal 877 vs 858). One tile per CTA (1, 0) stays compiled for the
// tests and for comparison. Measured and not kept: ping-pong (2, 5; 7, 8 = serial + ping-pong) 0-15% slower,
// poly_exp2 (9, 10) within noise of 2/5.
// GA_FLASH_FP8_WIDE (default: GA_FLASH_FP8_ALL_VARIANTS) compiles the 224-key candidates 28, 32-34 (their own
// translation unit, flash_fwd_fp8_wide_hd128.cu, beside the default 29), variant 4, which 29 replaced, and 3, which
// 39 replaced.
#ifndef GA_FLASH_FP8_WIDE
#define GA_FLASH_FP8_WIDE GA_FLASH_FP8_ALL_VARIANTS
#endif
constexpr int fp8_default_variant(int head_dim, bool /*causal*/, int /*seqlen_k*/) {
  return head_dim == 256 ? kFp8Hd256OverlapVariant : kFp8TreeVariant;
}
constexpr bool fp8_variant_compiled(int head_dim, int variant) {
  if (head_dim == 128) {
    const bool candidate = variant == 2 || variant == 5 || (variant >= 7 && variant <= 10);
    const bool wide = variant == 4 || variant == kFp8WideVariant || (variant >= kFp8PingPongVariant &&
                                                                     variant <= kFp8LazyVariant) ||
                      variant == kFp8PinVariant || variant == kFp8ThreeWGVariant || variant == kFp8VtVariant;
    return variant == 1 || variant == kFp8TreeVariant || (GA_FLASH_FP8_ALL_VARIANTS && candidate) ||
           (GA_FLASH_FP8_WIDE && wide);
  }
  if (head_dim == 256) {
    const bool twin = variant == 3 || variant == kFp8Hd256OneTileVariant || variant == kFp8Hd256DeepVariant ||
                      variant == kFp8Hd256VtVariant;
    return variant == 0 || variant == kFp8Hd256OverlapVariant || (GA_FLASH_FP8_WIDE && twin) ||
           (GA_FLASH_FP8_ALL_VARIANTS && (variant == 7 || variant == 8));
  }
  return false;
}

// (batch, head) pairs per section of the causal tile order (FlashParams::causal_section_heads; 0 when not causal;
// flash_tile_order.h).
inline int causal_section_bh(const FlashParams& p) {
  if (!p.causal) return 0;
  return causal_section_pairs(p.n_head, p.n_head_kv, p.batch, p.seqlen_k, p.head_dim,
                              p.dtype == FlashDtype::kFp8E4m3 ? 1 : 2, p.causal_section_heads, kCausalSectionL2Bytes);
}

// The scales of S every forward launch fills alike: `scale` turns a raw q.k into the softmax's score (softmax_scale;
// FP8: times descale_q * descale_k). With soft-capping the consumers replace S by tanh(scale q.k / softcap)
// (softcap_k2: attention_softcap.cuh's factor) and the cap moves into scale (the LSE) and scale_log2 (the exp2).
inline void set_fwd_scales(FwdArgs& a, const FlashParams& p, float scale) {
  constexpr float kLog2e = 1.4426950408889634f;
  if (p.softcap > 0.0f) {
    a.softcap_k2 = 2.0f * kLog2e * scale / p.softcap;
    a.scale = p.softcap;
    a.scale_log2 = p.softcap * kLog2e;
  } else {
    a.softcap_k2 = 0.0f;
    a.scale = scale;
    a.scale_log2 = scale * kLog2e;
  }
}

// The problem fields every forward launch fills alike (16-bit and FP8): o and its strides, the LSE, the lengths,
// the heads and GQA group, the window, and the tile count for query tiles of block_m rows.
inline void set_fwd_problem(FwdArgs& a, const FlashParams& p, int block_m) {
  a.o = p.o;
  a.lse = p.lse;
  a.o_batch_stride = p.o_batch_stride;
  a.o_seq_stride = p.o_seq_stride;
  a.o_head_stride = p.o_head_stride;
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.n_head = p.n_head;
  a.group = p.n_head / p.n_head_kv;
  a.m_blocks = (p.seqlen_q + block_m - 1) / block_m;
  a.causal = p.causal ? 1 : 0;
  a.batch = p.batch;
  a.total_tiles = a.m_blocks * p.n_head * p.batch;
  a.section_bh = causal_section_bh(p);
  a.win_left = p.window_left >= 0 ? std::min(p.window_left, kNoWindow) : kNoWindow;
  a.win_right = p.causal ? 0 : p.window_right >= 0 ? std::min(p.window_right, kNoWindow) : kNoWindow;
  a.o_cols = p.head_dim;
}

// Launches the forward of head dim HD; num_sms sizes the persistent grid.
template <int HD>
cudaError_t launch_fwd(const FwdArgs& args, bool bf16, int variant, int num_sms, cudaStream_t stream);
// FP8 e4m3 (args.tm_v maps V^T in the workspace): head dims 128 and 256 only (flash_fwd_fp8_hd*.cu), the
// variants fp8_variant_compiled names: the sizes, and the CI build stays lean.
template <int HD>
cudaError_t launch_fwd_fp8(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream);

// The FP8 head dim 128 variants 28, 29, 32-34 (flash_fwd_fp8_wide_hd128.cu).
cudaError_t launch_fwd_fp8_wide(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream);
// Keys per tile of an FP8 variant at head dim HD (the TMA box of K is this many rows).
template <int HD>
constexpr int fp8_variant_block_n(int variant) {
  const bool wide = variant == kFp8WideVariant || variant == kFp8TreeVariant ||
                    (variant >= kFp8PingPongVariant && variant <= kFp8LazyVariant) || variant == kFp8PinVariant ||
                    variant == kFp8VtVariant;
  return HD == 128 && wide ? fp8_wide_block_n() : 128;
}

// Query rows per tile of an FP8 variant (the TMA box of Q): 64 per consumer warpgroup.
template <int HD>
constexpr int fp8_variant_block_m(int variant) { return HD == 128 && variant == kFp8ThreeWGVariant ? 192 : 128; }

// The variants 12-17 (flash_fwd_wide_hd*.cu: their own translation units, compiled in parallel).
template <int HD>
cudaError_t launch_fwd_tiles(const FwdArgs& args, bool bf16, int variant, int num_sms, cudaStream_t stream);

template <ElemKind E, int HD, int kSched, bool kPersistent, int kStages, int kBN = 0>
cudaError_t launch_fwd_instance(const FwdArgs& given, int num_sms, cudaStream_t stream) {
  FwdArgs args = given;
  // Static rounds (cta_tile) keep the causal tiles one head at a time (decode_tile explains why).
  if constexpr (kPersistent && !dynamic_tiles<E, kPersistent, kSched>()) args.section_bh = 0;
  const auto kernel = flash_fwd_sm90_kernel<E, HD, kSched, kPersistent, kStages, kBN>;
  using T = FwdTraits<HD, kStages, elem_bytes<E>(), kBN, sched_wgs(kSched)>;
  constexpr size_t smem = fwd_smem_bytes<T, E, kSched>();
  static_assert(smem <= 227 * 1024, "shared memory per CTA");
  static const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr_status != cudaSuccess) return attr_status;
  const int ctas = kPersistent ? (args.total_tiles < num_sms ? args.total_tiles : num_sms) : args.total_tiles;
  if (args.split_tail) {
    // The split tail's merge has CTAs wait on flags set by higher-numbered CTAs (flash_fwd_split_tail.cuh), which
    // is only safe when every CTA of the grid is resident at once. A cooperative launch guarantees that or fails
    // (MPS / green-context limits, another context holding SMs): then the same kernel runs without the split, as
    // its persistent counterpart.
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(ctas));
    cfg.blockDim = dim3(T::kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute cooperative{};
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    cfg.attrs = &cooperative;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args);
    if (e != cudaErrorCooperativeLaunchTooLarge) return e;
    (void)cudaGetLastError();  // not sticky: clear it and run unsplit
    FwdArgs unsplit = args;
    unsplit.split_tail = 0;
    kernel<<<dim3(static_cast<unsigned>(ctas)), T::kThreads, smem, stream>>>(unsplit);
    return cudaGetLastError();
  }
  kernel<<<dim3(static_cast<unsigned>(ctas)), T::kThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

template <ElemKind E, int HD>
cudaError_t launch_fwd_variant(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream) {
  constexpr int kDefault = default_stages<HD>(), kDeep = deep_stages<HD>();
  (void)kDeep;
  if (variant == kSoftcapVariant) {
    return launch_fwd_instance<E, HD, 1 | kSchedSoftcap, true, kDefault>(args, num_sms, stream);
  }
  if (variant >= kFirstTileVariant) return launch_fwd_tiles<HD>(args, E == ElemKind::kBf16, variant, num_sms, stream);
  switch (variant) {
    case 1: return launch_fwd_instance<E, HD, 1, false, kDefault>(args, num_sms, stream);
    case 4: return launch_fwd_instance<E, HD, 1, true, kDefault>(args, num_sms, stream);
#if GA_FLASH_ALL_VARIANTS
    case 0: return launch_fwd_instance<E, HD, 0, false, kDefault>(args, num_sms, stream);
    case 2: return launch_fwd_instance<E, HD, 2, false, kDefault>(args, num_sms, stream);
    case 3: return launch_fwd_instance<E, HD, 0, true, kDefault>(args, num_sms, stream);
    case 5: return launch_fwd_instance<E, HD, 2, true, kDefault>(args, num_sms, stream);
    case 6: return launch_fwd_instance<E, HD, 2, true, kDeep>(args, num_sms, stream);
#endif
    default: return cudaErrorNotSupported;  // not compiled in this build (flash_variant_compiled)
  }
}

// Variants 12-17, 19-20, 21 and 24 of one element type (flash_fwd_wide_hd*.cu instantiate it; each kernel lives only
// there).
// Paged KV never reaches the wide kernels: flash_forward.cu maps the variant through paged_variant first.
template <ElemKind E, int HD>
cudaError_t launch_fwd_tiles_of(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream) {
  constexpr int kS = default_stages<HD>(), kW = wide_block_n<HD>(), kLazy = 1 | kSchedLazyRescale;
  if (!variant_compiled(variant)) return cudaErrorNotSupported;
  if (variant == kSplitTailVariant) {  // head dim 128 only (flash_forward.cu maps the others to 4)
#if GA_FLASH_FWD_SPLIT
    if constexpr (HD == 128) return launch_fwd_instance<E, HD, 1 | kSchedSplitTail, true, kS>(args, num_sms, stream);
#endif
    return cudaErrorNotSupported;
  }
  if (variant == kStageInVVariant) {  // head dim 128 only (flash_forward.cu maps the others)
#if GA_FLASH_FWD_STAGE_IN_V
    constexpr int kSched = 1 | kSchedSplitTail | kSchedTmaStore;
    if constexpr (HD == 128) return launch_fwd_instance<E, HD, kSched, true, kS>(args, num_sms, stream);
#endif
    return cudaErrorNotSupported;
  }
  if (variant == kPinVariant || variant == kWidePinVariant) {
#if GA_FLASH_FWD_PIN
    if (variant == kPinVariant) return launch_fwd_instance<E, HD, 1 | kSchedPinPvWait, true, kS>(args, num_sms, stream);
    if (args.paged) return cudaErrorInvalidValue;
    return launch_fwd_instance<E, HD, 1 | kSchedPinPvWait, true, kS, kW>(args, num_sms, stream);
#endif
    return cudaErrorNotSupported;
  }
  if (dynamic_variant(variant)) {  // dense, with a zeroed tile counter (flash_forward.cu runs 4 / 13 otherwise)
    constexpr int kDyn = 1 | kSchedDynamicTiles;
    if (args.varlen || args.paged || args.tile_counter == nullptr) return cudaErrorInvalidValue;
    if (variant == kDynamicVariant) {  // every build at head dims 64 and 128 (head_dim_variant runs 4 at 256)
      if constexpr (HD != 256) return launch_fwd_instance<E, HD, kDyn, true, kS>(args, num_sms, stream);
      return cudaErrorNotSupported;
    }
#if GA_FLASH_FWD_DYNAMIC
    return launch_fwd_instance<E, HD, kDyn, true, kS, kW>(args, num_sms, stream);
#endif
    return cudaErrorNotSupported;
  }
  if (variant >= kFirstQRegVariant) {  // Q in registers: head dim 128 only (flash_forward.cu maps the others)
#if GA_FLASH_FWD_QREG
    if constexpr (HD == 128) {
      constexpr int kQReg = 1 | kSchedQReg;
      if (variant == kFirstQRegVariant) return launch_fwd_instance<E, HD, kQReg, false, kS>(args, num_sms, stream);
      return launch_fwd_instance<E, HD, kQReg, true, kS>(args, num_sms, stream);
    }
#endif
    return cudaErrorNotSupported;
  }
  if (args.paged && kFwdVariantTable[variant].wide) return cudaErrorInvalidValue;
  switch (variant) {
    case 12: return launch_fwd_instance<E, HD, 1, false, kS, kW>(args, num_sms, stream);
    case 13: return launch_fwd_instance<E, HD, 1, true, kS, kW>(args, num_sms, stream);
#if GA_FLASH_FWD_CANDIDATES
    case 14: return launch_fwd_instance<E, HD, kLazy, false, kS>(args, num_sms, stream);
    case 15: return launch_fwd_instance<E, HD, kLazy, false, kS, kW>(args, num_sms, stream);
    case 16: return launch_fwd_instance<E, HD, kLazy, true, kS, kW>(args, num_sms, stream);
    case 17: return launch_fwd_instance<E, HD, kLazy, true, kS>(args, num_sms, stream);
#endif
    default: (void)kLazy; return cudaErrorNotSupported;
  }
}

}  // namespace ga::cuda::flash_detail
