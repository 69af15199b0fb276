// Hopper flash backward, head dim 128: the two consumer warpgroups out of lockstep (schedules 16-21 of
// flash_bwd_sm90.cuh; 19, consumer_pingpong_shared_dq at the end of this file, is also the kernel of the default, 26;
// included by flash_bwd_sm90.cuh after the pieces this file uses: Traits, Args, Work, Bars, softmax_grad,
// store_dk_dv, to_a_fragments).
//
// Why: in schedule 1 both consumer warpgroups meet at the dS barrier every step (dQ = dS K sums over both
// warpgroups' keys), so their exp / dS phases coincide and the tensor cores idle while both do them. Nsight Compute
// on schedule 1 at 4k tokens (H200): tensor pipe 54.5% of cycles, shared memory 56%, L2 reductions 31%, issue
// slots 32%, 0.43 eligible warps per scheduler: bound by the latency of that lockstep chain, not by a pipe.
//
// What: each warpgroup computes dQ over its own 64 keys for all 128 columns (split dQ: dQ_w = dS_w K_w, SS wgmma
// m64n128 k64 with dS read M-major from the warpgroup's own dS^T tile and K_w read N-major), stages its 32 KB f32
// partial in shared memory and adds it into the workspace tile with its own bulk reduce, so nothing ties the two
// warpgroups together inside a step (twice the L2 reductions of schedule 1: they were at 31%). dK = dS^T Q reads dS^T
// from the same tile (SS; its A fragments would be 16 more live registers beside dQ's 64 accumulators, dK's and
// dV's 128 and P^T's 16). Schedule 16 adds an explicit ping-pong: a warpgroup issues a GEMM group (S^T and dP^T, or
// dV, dQ and dK) only when it holds the turn, and hands the turn to the other right after issuing, so the tensor
// cores take the two warpgroups' groups alternately and each one's exp / dS / dQ-staging phase runs under the
// other's GEMMs (FA3's forward ping-pong, with named barriers 4 and 5: warpgroup w syncs on 4 + w, the other
// arrives). Schedule 17 is the same code without the turns (split dQ alone: measured 3-6% slower in a schedule that
// waited for dK and dV before dQ and did not overlap the staging), to measure what the order buys;
// schedule 18 is 16 without the dQ staging and bulk reduce (wrong dQ: a timing of what the doubled reduction costs).
//
// Per step and warpgroup: q_full -> [turn] S^T = K_w Q^T, dP^T = V_w dO^T -> [hand over] -> P^T, dS^T (registers,
// softmax_grad) -> dS^T to the warpgroup's tile -> [turn] dV += P^T dO (RS), dQ_w = dS_w K_w, dK += dS^T Q ->
// [hand over] -> wait dV, dQ -> dQ_w to the staging buffer (under dK) -> wait dK, free the Q/dO stage -> barrier ->
// one thread issues the 32 KB bulk reduce. The turn barrier (all 128 threads of the warpgroup sync on it) also
// orders the warpgroup's dS^T stores before the wgmmas that read them, and thread 0's wait for the previous bulk
// read before the staging writes. dS^T and the staging buffer are single per warpgroup: only their own warpgroup
// reads them, and the step's end barrier comes after the wgmmas that read dS^T were waited for.
// Registers (240 per consumer thread): dK, dV 128 + dQ 64 + P^T 16 at the second GEMM group; dK, dV + S^T, dP^T 64
// during the exp phase.
#pragma once

namespace ga::cuda::flash_bwd_sm90 {

constexpr int kPingPongSched = 16;  // split dQ with the warpgroups' GEMM groups in alternating turns
constexpr int kSplitDqSched = 17;   // split dQ, no turns (the A/B of the ping-pong order)
constexpr int kPingPongNoDqSched = 18;  // 16 without the dQ staging and reduce (timing only: dQ stays zero)
constexpr int kPingPongSharedDqSched = 19;  // the ping-pong with schedule 1's shared dQ, warpgroup 0's a step late
constexpr int kPingPongRotatedSched = 20;   // 19 with each CTA's query blocks rotated (Args::rotate_m)
constexpr int kPingPongEarlyDvSched = 21;   // 19 with dV issued before the dS^T store, outside the turn
// Schedule 19's kernel with another launch (no kernel of their own, so every build has them; launch_instance):
constexpr int kLptSched = 22;     // the causal work order (Args::lpt_heads, Work)
constexpr int kPdlSched = 23;     // main and convert launched behind the kernel before them (pdl.cuh)
constexpr int kLptPdlSched = 24;  // both
constexpr int kPersistentSched = 25;  // 19's steps in persistent CTAs (one per SM, tiles in the causal work order)
constexpr int kTmaDkDvSched = 26;     // 19's kernel with dK and dV written by TMA stores (Args::tma_dkdv)
constexpr int kWarpgroupBarrier = 2;  // + cwg: the warpgroup's own 128 threads (2, 3)
constexpr int kTurnBarrier = 4;       // + cwg: warpgroup cwg's turn to issue (4, 5)
constexpr int kEpilogueBarrier = 6;   // both consumer warpgroups, before schedule 26's dK/dV staging

__host__ __device__ constexpr bool is_split_dq_sched(int sched) {
  return sched == kPingPongSched || sched == kSplitDqSched || sched == kPingPongNoDqSched;
}
__host__ __device__ constexpr bool is_shared_dq_pingpong_sched(int sched) {
  return sched == kPingPongSharedDqSched || sched == kPingPongRotatedSched || sched == kPingPongEarlyDvSched ||
         sched == kPersistentSched;
}

template <ElemKind E, int HD, int kSched>
__device__ __forceinline__ void consumer_pingpong(const Args& a, unsigned char* smem, Bars bars) {
  using T = Traits<HD>;
  constexpr bool kTurns = kSched != kSplitDqSched;
  constexpr bool kReduceDq = kSched != kPingPongNoDqSched;
  const Work w(a);
  const int cwg = static_cast<int>(threadIdx.x) / 128 - 1;  // consumer warpgroup: keys [64 cwg, 64 cwg + 64)
  const int wtid = static_cast<int>(threadIdx.x) % 128;
  const int warp = wtid / 32, lane = wtid % 32, g = lane / 4, c = lane % 4;
  const uint32_t base = tile::smem_u32(smem);
  const uint32_t k_addr = base, v_addr = base + T::kOffV;
  const int key_lo = cwg * 64 + warp * 16 + g;  // accumulator rows: keys n0 + key_lo, + 8 (S^T, dP^T, dK, dV)
  const int row_lo = warp * 16 + g;             // the same rows in the warpgroup's dS^T tile
  unsigned char* const ds_tile = smem + T::kOffPpDs + cwg * T::kPpDsBytes;  // dS^T [64 keys][64 queries], 16-bit
  const uint32_t ds_addr = tile::smem_u32(ds_tile);
  float* const stage_dq = reinterpret_cast<float*>(smem + T::kOffPpDq + cwg * T::kPpDqBytes);  // [16][128][4] f32
  const int my_turn = kTurnBarrier + cwg, other_turn = kTurnBarrier + 1 - cwg;

  // LSE * log2 e and D: as consumer_main (thread wtid loads element wtid of step s + 1 during step s and stores it
  // before the barrier that ends step s, into buffer (s + 1) % 2 of [LSE 64][D 64]).
  float* const vecs = reinterpret_cast<float*>(smem + T::kOffVec + cwg * 2 * T::kVecBytes);
  if (w.steps > 0) vecs[wtid] = load_step_vec(a, w, 0, wtid);
  tile::named_barrier_sync(kWarpgroupBarrier + cwg, 128);
  // Warpgroup 0 takes the first turn. Each warpgroup syncs on its turn barrier twice per step and the other arrives
  // after each of its two issues; warpgroup 1's first arrival is this one, so it skips its last (after its final
  // GEMM group) and every barrier ends complete.
  if (kTurns && cwg == 1 && w.steps > 0) tile::named_barrier_arrive(kTurnBarrier, 256);

  float dv[64], dk[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) dv[i] = dk[i] = 0.0f;
  uint32_t pa[4][4];  // P^T as 16-bit A fragments of the dV GEMM
  tile::mbar_wait(bars.kv_full(), 0);

  for (int s = 0; s < w.steps; ++s) {
    const StepTiles<HD> st_tiles(base, vecs, s, s);
    const int stage = st_tiles.stage;
    const uint32_t q_addr = st_tiles.q_addr, do_addr = st_tiles.do_addr;
    const int h = w.head(a, s), m0 = w.m0(s);
    const float vec_next = s + 1 < w.steps ? load_step_vec(a, w, s + 1, wtid) : 0.0f;
    tile::mbar_wait(bars.q_full(stage), st_tiles.full_parity());

    // Group 1: S^T = K_w Q^T and dP^T = V_w dO^T, [64 keys][64 queries] each, two commit groups.
    float st[32], dpt[32];
    tile::fence_regs(st);
    tile::fence_regs(dpt);
    if constexpr (kTurns) tile::named_barrier_sync(my_turn, 256);
    tile::wgmma_fence();
    issue_keys_by_queries<E, HD>(st, k_addr, q_addr, cwg);
    tile::wgmma_commit();
    issue_keys_by_queries<E, HD>(dpt, v_addr, do_addr, cwg);
    tile::wgmma_commit();
    if constexpr (kTurns) tile::named_barrier_arrive(other_turn, 256);

    softmax_grad<T::kBlockN>(a, w, m0, key_lo, c, st_tiles.lse, st_tiles.dsum, st, dpt);
    to_a_fragments<E>(st, pa);
    store_ds_t<E>(ds_tile, row_lo, c, dpt);  // the warpgroup's own [64 keys][64 queries] tile
    tile::fence_async_shared();
    if (kReduceDq && wtid == 0 && s > 0) tile::bulk_wait_read<0>();  // the previous step's staging was read
    if constexpr (kTurns) {
      tile::named_barrier_sync(my_turn, 256);
    } else {
      tile::named_barrier_sync(kWarpgroupBarrier + cwg, 128);
    }

    // Group 2: dV += P^T dO (k = the step's 64 queries), dQ_w[64 queries][128] = dS_w[64][64 keys] K_w[64 keys][128]
    // (one commit group), then dK += dS^T Q (its own group: the dQ staging runs under it).
    float dq[64];
    tile::fence_regs(dv);
    tile::fence_regs(dk);
    tile::fence_regs(dq);
    tile::wgmma_fence();
    issue_dv<E, HD>(dv, pa, do_addr);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t da = tile::desc_mn_major(ds_addr + kk * 2048, T::kPpDsBytes);
      const uint64_t db = tile::desc_mn_major(k_addr + cwg * (64 * 128) + kk * 2048, T::kBlockN * 128);
      tile::Wgmma<128, E>::template ss<1, 1>(dq, da, db, kk > 0 ? 1 : 0);
    }
    tile::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t db = tile::desc_mn_major(q_addr + kk * 2048, T::kBlockM * 128);
      tile::Wgmma<128, E>::template ss<1>(dk, tile::desc_k_major(ds_addr + kk * 32), db, 1);
    }
    tile::wgmma_commit();
    if constexpr (kTurns) {
      if (cwg == 0 || s + 1 < w.steps) tile::named_barrier_arrive(other_turn, 256);
    }

    tile::wgmma_wait<1>();  // dV and dQ done, dK running
    tile::fence_regs(dq);
    tile::fence_regs(pa);
    tile::fence_regs(dv);
    // dQ_w fragments -> staging in the workspace tile's order (float4 J of thread wtid = accumulators 4J..4J+3;
    // columns 8J.. of the tile's [column half][j][thread][4] layout are exactly float4 J * 128 + wtid).
    if constexpr (kReduceDq) stage_dq_fragments(stage_dq, wtid, dq);
    tile::wgmma_wait<0>();  // dK done: Q, dO and dS^T of this step are no longer read
    tile::fence_regs(dk);
    __syncwarp();
    if (lane == 0) tile::mbar_arrive(bars.q_empty(stage));
    if (s + 1 < w.steps) vecs[((s + 1) % 2) * (2 * T::kBlockM) + wtid] = vec_next;
    tile::named_barrier_sync(kWarpgroupBarrier + cwg, 128);  // staging written; next step's LSE/D published
    if (kReduceDq && wtid == 0) {
      float* const dq_tile = a.dq_accum + ((int64_t{w.b} * a.n_head + h) * a.m_blocks + m0 / 64) * T::kDqTileFloats;
      tile::bulk_reduce_add_f32(dq_tile, stage_dq, T::kPpDqBytes);
      tile::bulk_commit();
    }
  }
  if (kReduceDq && wtid == 0) tile::bulk_wait<0>();  // the reductions end before the shared memory goes away
  store_dk_dv<E, HD>(a, w, key_lo, c, dk, dv);
}

// Schedule 26's epilogue: dK, dV of this warpgroup's 64 keys staged in shared memory and written by TMA stores
// instead of store_dk_dv's 4-byte register stores (each a half-used 32-byte sector, 64 per thread). The caller has
// made every wgmma of both consumer warpgroups complete (the staging overwrites the Q/dO ring: warpgroup w's dK in
// Q stage w, its dV in dO stage w, each [2 column blocks][64 rows][128 bytes] in the maps' 128-byte swizzle; a
// warp's 32 four-byte writes land in 32 banks). One thread per warpgroup issues the 4 stores (2 tensors x 2 column
// blocks); TMA clips keys past seqlen_k, as store_dk_dv skips them. The caller waits for the stores' reads before
// the shared memory goes away.
template <ElemKind E, int HD>
__device__ __forceinline__ void store_dk_dv_tma(const Args& a, const Work& w, unsigned char* smem, int cwg, int wtid,
                                                const float (&dk)[64], const float (&dv)[64]) {
  using T = Traits<HD>;
  static_assert(HD == 128 && T::kQBytes == 2 * 64 * 128, "a warpgroup's dK (or dV) is one Q (or dO) stage");
  const int warp = wtid / 32, g = (wtid % 32) / 4, c = wtid % 4;
  unsigned char* const dk_stage = smem + T::kOffQ + cwg * T::kQBytes;
  unsigned char* const dv_stage = smem + T::kOffDo + cwg * T::kQBytes;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = warp * 16 + g + 8 * half;  // row of the warpgroup's 64 keys
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      const int i = 4 * j + 2 * half;
      const int offset = (j / 8) * (64 * 128) + r * 128 + (((j % 8) ^ (r % 8)) * 16) + 4 * c;
      *reinterpret_cast<uint32_t*>(dk_stage + offset) =
          flash_detail::pack2<E>(dk[i] * a.scale, dk[i + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(dv_stage + offset) = flash_detail::pack2<E>(dv[i], dv[i + 1]);
    }
  }
  tile::fence_async_shared();
  tile::named_barrier_sync(kWarpgroupBarrier + cwg, 128);
  if (wtid == 0) {
#pragma unroll
    for (int cb = 0; cb < 2; ++cb) {
      tile::tma_store_4d(&a.tm_dk, dk_stage + cb * (64 * 128), cb * 64, w.n0 + 64 * cwg, w.hk, w.b);
      tile::tma_store_4d(&a.tm_dv, dv_stage + cb * (64 * 128), cb * 64, w.n0 + 64 * cwg, w.hk, w.b);
    }
    tile::bulk_commit();
  }
}

// Schedule 19: the ping-pong of schedule 16 with schedule 1's shared dQ (one 16 KB bulk reduce per warpgroup and
// step, half of 16's: on the H200 16 measured 0.86-0.90x schedule 1 but 18, i.e. 16 without its dQ
// reduction, at 1.2-1.4x, so the doubled staging and reduction was what lost). dQ[:, 64 cwg ..] of a step needs both
// warpgroups' dS^T halves; in the turn order (0.G1(s), 1.G1(s), 0.G2(s), 1.G2(s), 0.G1(s + 1), ...) warpgroup 1's
// dS^T(s) exists only after warpgroup 0's second turn of step s, so warpgroup 1 adds its columns of step s's dQ in
// its own second turn and warpgroup 0 its columns of step s - 1's (a tail turn after the loop adds the last step's).
// The turns themselves order every dS^T access: a warpgroup writes its half of buffer s % 2 only after the turn that
// followed the last reads of step s - 2's dS^T (warpgroup 1's in its G2(s - 2), warpgroup 0's in its G2(s - 1)),
// and reads the other half only after the other's hand-over that followed its write. Registers as schedule 1 (dK,
// dV 128 + dQ 32 + P^T and dS^T fragments 32 at the second group); shared memory is schedule 1's layout.
// kEarlyDv (schedule 21): dV is issued as soon as P^T exists, before the dS^T store and outside the turn (FA3's
// order inside a step: the store runs under dV), the turn then covers dQ and dK.
template <ElemKind E, int HD, bool kEarlyDv, bool kPersistent>
__device__ __forceinline__ void consumer_pingpong_shared_dq(const Args& a, unsigned char* smem, Bars bars) {
  using T = Traits<HD>;
  const int cwg = static_cast<int>(threadIdx.x) / 128 - 1;  // consumer warpgroup: keys [64 cwg, 64 cwg + 64)
  const int wtid = static_cast<int>(threadIdx.x) % 128;
  const int warp = wtid / 32, lane = wtid % 32, g = lane / 4, c = lane % 4;
  const uint32_t base = tile::smem_u32(smem);
  const uint32_t k_addr = base, v_addr = base + T::kOffV;
  const int key_lo = cwg * 64 + warp * 16 + g;  // accumulator rows: keys n0 + key_lo, + 8; also dS^T tile rows
  float* const stage_dq = reinterpret_cast<float*>(smem + T::kOffDq + cwg * T::kDqHalfBytes);  // [8][128][4] f32
  const int my_turn = kTurnBarrier + cwg, other_turn = kTurnBarrier + 1 - cwg;

  float* const vecs = reinterpret_cast<float*>(smem + T::kOffVec + cwg * 2 * T::kVecBytes);  // as consumer_main
  // Launched behind the preprocess (schedules 23, 24): its LSE, D and zeroed dQ tiles are ready from here; the
  // producer's loads of Q, K, V and dO (inputs, complete before the preprocess started) did not wait.
  detail::pdl_wait_prior_grid();

  // One work tile; j and g0: the CTA's tiles and ring steps before it (persistent CTAs run it per tile).
  const auto run_tile = [&](const Work& w, int j, int g0) {
    if (w.steps > 0) vecs[wtid] = load_step_vec(a, w, 0, wtid);
    tile::named_barrier_sync(kWarpgroupBarrier + cwg, 128);
    // Warpgroup 0 syncs on its turn 2 steps + 1 times (the tail), warpgroup 1 arrives once here and after each of its
    // 2 steps issues; warpgroup 1 syncs 2 steps times, warpgroup 0 arrives after each of its 2 steps issues. So each
    // tile's turns are balanced. A persistent CTA's warpgroup 1 opens a tile's turns only once its K/V arrived (below),
    // which the producer loads only after both warpgroups released the last tile's (kv_empty, after warpgroup 0's tail
    // turn): so its opening arrive never meets warpgroup 0's last turn of the tile before.
    if (!kPersistent && cwg == 1 && w.steps > 0) tile::named_barrier_arrive(kTurnBarrier, 256);

    // dQ[64 queries][64 cwg .. + 64] from dS^T buffer `buf`.
    const auto issue_dq = [&](float(&dq)[32], int buf) {
      issue_dq_shared<E, HD>(dq, base + T::kOffDs + buf * T::kDsBytes, k_addr, cwg);
    };
    // The staged dQ columns of step t -> its accumulator tile (one thread, after the warpgroup's barrier).
    const auto reduce_dq = [&](int t) {
      float* const dq_tile = a.dq_accum +
                             ((int64_t{w.b} * a.n_head + w.head(a, t)) * a.m_blocks + w.m0(t) / 64) * T::kDqTileFloats +
                             cwg * 4096;
      tile::bulk_reduce_add_f32(dq_tile, stage_dq, T::kDqHalfBytes);
      tile::bulk_commit();
    };

    float dv[64], dk[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) dv[i] = dk[i] = 0.0f;
    uint32_t pa[4][4], dsa[4][4];  // P^T and dS^T as 16-bit A fragments of the dV and dK GEMMs
    tile::mbar_wait(bars.kv_full(), j & 1);
    if (kPersistent && cwg == 1 && w.steps > 0) tile::named_barrier_arrive(kTurnBarrier, 256);

    for (int s = 0; s < w.steps; ++s) {
      const StepTiles<HD> st_tiles(base, vecs, g0 + s, s);
      const int stage = st_tiles.stage;
      const uint32_t q_addr = st_tiles.q_addr, do_addr = st_tiles.do_addr;
      const float vec_next = s + 1 < w.steps ? load_step_vec(a, w, s + 1, wtid) : 0.0f;
      tile::mbar_wait(bars.q_full(stage), st_tiles.full_parity());

      // Group 1: S^T = K_w Q^T and dP^T = V_w dO^T.
      float st[32], dpt[32];
      tile::fence_regs(st);
      tile::fence_regs(dpt);
      tile::named_barrier_sync(my_turn, 256);
      tile::wgmma_fence();
      issue_keys_by_queries<E, HD>(st, k_addr, q_addr, cwg);
      tile::wgmma_commit();
      issue_keys_by_queries<E, HD>(dpt, v_addr, do_addr, cwg);
      tile::wgmma_commit();
      tile::named_barrier_arrive(other_turn, 256);

      softmax_grad<T::kBlockN>(a, w, w.m0(s), key_lo, c, st_tiles.lse, st_tiles.dsum, st, dpt);
      to_a_fragments<E>(st, pa);
      to_a_fragments<E>(dpt, dsa);
      if constexpr (kEarlyDv) {
        tile::fence_regs(dv);
        tile::wgmma_fence();
        issue_dv<E, HD>(dv, pa, do_addr);
        tile::wgmma_commit();
      }
      // dS^T (16-bit) into this warpgroup's rows of buffer s % 2 (schedule 1's [128 keys][64 queries] tile).
      unsigned char* ds_tile = smem + T::kOffDs + (s % 2) * T::kDsBytes;
      store_ds_t<E>(ds_tile, key_lo, c, dpt);
      tile::fence_async_shared();
      if (wtid == 0) tile::bulk_wait_read<0>();  // the previous staging was read by the copy engine
      tile::named_barrier_sync(my_turn, 256);

      // Group 2: dV += P^T dO, dQ columns of step t (warpgroup 1: this step; 0: the previous one), then dK += dS^T Q.
      // Warpgroup 0 issues its dQ GEMM at step 0 too (on buffer 1, which nothing writes before its step-1 turn), and
      // drops the result: a wgmma under a condition made ptxas serialize every wgmma of the kernel (C7520).
      const int t = cwg == 0 ? s - 1 : s;
      float dq[32];
      tile::fence_regs(dv);
      tile::fence_regs(dk);
      tile::fence_regs(dq);
      tile::wgmma_fence();
      if constexpr (!kEarlyDv) issue_dv<E, HD>(dv, pa, do_addr);
      issue_dq(dq, (s + 1 - cwg) % 2);  // buffer t % 2
      tile::wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        tile::Wgmma<128, E>::template rs<1>(dk, dsa[kk], tile::desc_mn_major(q_addr + kk * 2048, T::kBlockM * 128), 1);
      tile::wgmma_commit();
      tile::named_barrier_arrive(other_turn, 256);

      tile::wgmma_wait<1>();  // dV and dQ done (kEarlyDv: their two groups), dK running
      tile::fence_regs(dq);
      tile::fence_regs(pa);
      tile::fence_regs(dv);
      if (t >= 0) stage_dq_fragments(stage_dq, wtid, dq);
      tile::wgmma_wait<0>();
      tile::fence_regs(dk);
      tile::fence_regs(dsa);
      __syncwarp();
      if (lane == 0) tile::mbar_arrive(bars.q_empty(stage));  // Q and dO of this stage are free
      if (s + 1 < w.steps) vecs[((s + 1) % 2) * (2 * T::kBlockM) + wtid] = vec_next;
      tile::named_barrier_sync(kWarpgroupBarrier + cwg, 128);  // staging written; next step's LSE/D published
      if (t >= 0 && wtid == 0) reduce_dq(t);
    }
    if (cwg == 0 && w.steps > 0) {  // the tail turn: the last step's dQ columns 0..63, after warpgroup 1's dS^T half
      const int t = w.steps - 1;
      if (wtid == 0) tile::bulk_wait_read<0>();
      tile::named_barrier_sync(my_turn, 256);
      float dq[32];
      tile::fence_regs(dq);
      tile::wgmma_fence();
      issue_dq(dq, t % 2);
      tile::wgmma_commit();
      tile::wgmma_wait<0>();
      tile::fence_regs(dq);
      stage_dq_fragments(stage_dq, wtid, dq);
      tile::named_barrier_sync(kWarpgroupBarrier + cwg, 128);
      if (wtid == 0) reduce_dq(t);
    }
    if constexpr (kPersistent) {  // every wgmma reading this tile's K/V was waited for: the next tile's may come
      __syncwarp();
      if (lane == 0) tile::mbar_arrive(bars.kv_empty());
    } else {
      if (wtid == 0) tile::bulk_wait<0>();  // the reductions end before the shared memory goes away
    }
    if (!kPersistent && a.tma_dkdv) {  // schedule 26: after both warpgroups' last wgmmas (the staging reuses the ring)
      tile::named_barrier_sync(kEpilogueBarrier, 256);
      store_dk_dv_tma<E, HD>(a, w, smem, cwg, wtid, dk, dv);
      if (wtid == 0) tile::bulk_wait_read<0>();  // the stores have read the staging before the CTA ends
    } else {
      store_dk_dv<E, HD>(a, w, key_lo, c, dk, dv);
    }
  };

  if constexpr (!kPersistent) {
    run_tile(Work(a), 0, 0);
  } else {
    int g0 = 0;
    for (int j = 0; persistent_tile(j) < a.tiles; ++j) {
      const Work w = persistent_work(a, persistent_tile(j));
      run_tile(w, j, g0);
      g0 += w.steps;
    }
    if (wtid == 0) tile::bulk_wait<0>();  // the reductions end before the shared memory goes away
  }
}

}  // namespace ga::cuda::flash_bwd_sm90
