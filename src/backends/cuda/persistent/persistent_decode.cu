// The persistent decode kernel (persistent_decode.h): the producer warp's weight stream, the consumers'
// instruction loop, and the four instruction kinds of plan.h.
#include "backends/cuda/persistent/persistent_decode.h"

#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/gemv_kernel.cuh"
#include "backends/cuda/kernels/step_math.cuh"

namespace ga::cuda::persistent {
namespace {

using namespace ga::cuda::detail;

constexpr int kConsumerThreads = kConsumerWarps * 32;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GA_PDK_DEVICE 1
#else
#define GA_PDK_DEVICE 0
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GA_PDK_BULK 1
#else
#define GA_PDK_BULK 0
#endif

// ---- PTX: mbarriers (sm_80+), bulk copies (sm_90), GPU-scope counters ----

#if GA_PDK_DEVICE
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
#endif

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#if GA_PDK_DEVICE
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if GA_PDK_DEVICE
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared.b64 state, [%0];\n}" ::"r"(smem_addr(bar)) : "memory");
#endif
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if GA_PDK_BULK
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra wait_%=;\n}" ::"r"(
          smem_addr(bar)),
      "r"(parity)
      : "memory");
#elif GA_PDK_DEVICE
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\nmbarrier.test_wait.parity.shared.b64 done, [%0], %1;\n@!done bra wait_%=;\n}" ::"r"(
          smem_addr(bar)),
      "r"(parity)
      : "memory");
#endif
}

// The producer's arrival that announces `bytes` of bulk copies completing on the barrier (sm_90).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if GA_PDK_BULK
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if GA_PDK_BULK
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#endif
}

// The barrier's arrival once this thread's cp.async copies so far have landed (sm_80).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
#if GA_PDK_DEVICE
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
#endif
}

__device__ __forceinline__ void fence_barrier_init() {
#if GA_PDK_BULK
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v = 0;
#if GA_PDK_DEVICE
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#endif
  return v;
}

__device__ __forceinline__ void add_release(uint32_t* p, uint32_t v) {
#if GA_PDK_DEVICE
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}

__device__ __forceinline__ uint64_t global_time() {
  uint64_t t = 0;
#if GA_PDK_DEVICE
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
#endif
  return t;
}

// The consumer warps' own barrier (the producer never joins it).
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory"); }

// Sum over the consumer threads; every one gets the total.
__device__ __forceinline__ float consumer_sum(float v, float* red) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  consumer_sync();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kConsumerWarps; ++w) total += red[w];
  consumer_sync();  // red may be written again by the next call
  return total;
}

// Activations another CTA of this launch may have written: read from L2 (the acquire that met the dependency
// orders these loads after the writes; L1 may still hold an older copy of the line).
__device__ __forceinline__ float load_act(const float* p) { return __ldcg(p); }

// The positions a token at `pos` attends to ([start, pos], a window of window_left before it when >= 0) and the
// chunks the attention splits them into: the attention instruction and the merge in its reader agree on both.
struct AttnSpan {
  int64_t start = 0, count = 0;
  int n_eff = 1;
};

__device__ __forceinline__ AttnSpan attention_span(int64_t pos, int window_left, int n_chunks) {
  AttnSpan s;
  s.start = window_left >= 0 && pos > window_left ? pos - window_left : 0;
  s.count = pos + 1 - s.start;
  const int64_t chunks = (s.count + kAttnMinChunk - 1) / kAttnMinChunk;
  s.n_eff = static_cast<int>(chunks < n_chunks ? chunks : n_chunks);
  return s;
}

// ---- the weight stream ----

// Row i of a GEMV tile in its slot: tile rows of w, or for kGlu gate rows then up rows (clamped to the last row:
// a tail tile reads and decodes it again and never stores it).
__device__ __forceinline__ const uint8_t* tile_row(const GemvInstr& g, int tile, int i) {
  if (g.epi == Epilogue::kGlu) {
    const bool up = i >= g.tile_rows;
    const int r = min(tile * g.tile_rows + (up ? i - g.tile_rows : i), g.rows - 1);
    return (up ? g.w2 : g.w) + static_cast<int64_t>(r) * g.row_bytes;
  }
  return g.w + static_cast<int64_t>(min(tile * g.tile_rows + i, g.rows - 1)) * g.row_bytes;
}

__device__ __forceinline__ int slot_rows_of(const GemvInstr& g) {
  return g.epi == Epilogue::kGlu ? 2 * g.tile_rows : g.tile_rows;
}

// Segment s of a row: the 16-byte aligned span that covers its blocks, and where its first block sits in it.
struct Span {
  const uint8_t* src;
  uint32_t bytes;
  uint32_t shift;
};

__device__ __forceinline__ Span segment_span(const GemvInstr& g, const uint8_t* row, int s) {
  const int64_t bpb = g.row_bytes / g.blocks_per_row;
  const int blocks = min(g.seg_blocks, g.blocks_per_row - s * g.seg_blocks);
  const uint8_t* first = row + static_cast<int64_t>(s) * g.seg_blocks * bpb;
  Span sp;
  sp.shift = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(first) & 15);
  sp.src = first - sp.shift;
  // up to 15 bytes past the segment: within the next row or the weight buffer's 16 bytes of slack
  sp.bytes = (sp.shift + static_cast<uint32_t>(blocks * bpb) + 15u) & ~15u;
  return sp;
}

__device__ void produce(const StepArgs& a, uint8_t* ring, uint64_t* full, uint64_t* empty) {
  const int lane = threadIdx.x & 31;
  uint32_t k = 0;
  for (int i = 0; i < a.n_instrs; ++i) {
    const Instr& in = a.instrs[i];
    if (in.kind != OpKind::kGemv) continue;
    const GemvInstr& g = in.gemv;
    const TileRange tr = tiles_of(in, static_cast<int32_t>(blockIdx.x), static_cast<int32_t>(gridDim.x));
    const int rows = slot_rows_of(g);
    const uint32_t region = kSlotBytes / rows;
    for (int t = tr.first; t < tr.first + tr.count; ++t) {
      for (int s = 0; s < g.n_segs; ++s, ++k) {
        const uint32_t slot = k % a.n_slots;
        if (k >= static_cast<uint32_t>(a.n_slots)) mbar_wait(&empty[slot], ((k / a.n_slots) - 1) & 1u);
        uint8_t* base = ring + slot * kSlotBytes;
        if (a.bulk_copies) {
          Span sp{nullptr, 0, 0};
          if (lane < rows) sp = segment_span(g, tile_row(g, t, lane), s);
          uint32_t total = sp.bytes;
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
          if (lane == 0) mbar_arrive_expect_tx(&full[slot], total);
          __syncwarp();
          if (lane < rows) bulk_copy(base + lane * region, sp.src, sp.bytes, &full[slot]);
        } else {
          for (int r = 0; r < rows; ++r) {
            const Span sp = segment_span(g, tile_row(g, t, r), s);
            uint4* dst = reinterpret_cast<uint4*>(base + r * region);
            for (uint32_t c = lane; c < sp.bytes / 16; c += 32) copy_chunk_async(dst + c, sp.src + 16 * c, 16);
          }
          cp_async_arrive(&full[slot]);
        }
      }
    }
  }
  if (!a.bulk_copies) copy_wait<0>();  // no copy outlives its thread
}

// ---- GEMV ----

// The x of a GEMV into shared memory (cols floats), as its xload says.
__device__ void stage_x(const GemvInstr& g, const StepArgs& a, float* xs, float* red) {
  const int tid = threadIdx.x;
  if (g.xload == XLoad::kAttnMerge) {
    const int hd = g.merge_head_dim;
    const int n_eff = attention_span(*a.pos, g.merge_window, g.merge_chunks).n_eff;
    const int64_t head_stride = hd + 2, chunk_stride = int64_t{g.merge_heads} * head_stride;
    for (int e = tid; e < g.cols; e += kConsumerThreads) {
      const int h = e / hd, d = e - h * hd;
      const float* part = g.x + h * head_stride;
      float m = -INFINITY;
      for (int c = 0; c < n_eff; ++c) m = fmaxf(m, load_act(part + c * chunk_stride + hd));
      float num = 0.0f, den = 0.0f;
      for (int c = 0; c < n_eff; ++c) {
        const float w = expf(load_act(part + c * chunk_stride + hd) - m);
        num = fmaf(w, load_act(part + c * chunk_stride + d), num);
        den = fmaf(w, load_act(part + c * chunk_stride + hd + 1), den);
      }
      xs[e] = num / den;
    }
    consumer_sync();
    return;
  }
  float sum_sq = 0.0f;
  for (int e = tid; e < g.cols; e += kConsumerThreads) {
    const float v = load_act(g.x + e);
    xs[e] = v;
    sum_sq = fmaf(v, v, sum_sq);
  }
  if (g.xload == XLoad::kRmsNorm) {
    const float inv = inv_rms(consumer_sum(sum_sq, red), g.cols, g.eps);
    for (int e = tid; e < g.cols; e += kConsumerThreads) xs[e] = xs[e] * inv * g.norm_w[e];
  }
  consumer_sync();
}

// The tiles [tr.first, tr.first + tr.count) of a GEMV: R rows of decoder D per ring slot.
template <class D, int R>
__device__ void gemv_tiles(const GemvInstr& g, TileRange tr, uint32_t& k, const StepArgs& a, uint64_t* full,
                           uint64_t* empty, const float* xs, float (&partial)[2][kConsumerWarps][kMaxTileRows],
                           int& pb) {
  constexpr int kE = D::kElems;
  constexpr int kG = D::kGroups;
  constexpr int kBlocksPerIter = 32 / D::kLanesPerBlock;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane % D::kLanesPerBlock;
  constexpr uint32_t kRegion = kSlotBytes / R;
  for (int t = tr.first; t < tr.first + tr.count; ++t) {
    float acc[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.0f;
    for (int s = 0; s < g.n_segs; ++s, ++k) {
      const uint32_t slot = k % a.n_slots;
      mbar_wait(&full[slot], (k / a.n_slots) & 1u);
      const int n_blocks = min(g.seg_blocks, g.blocks_per_row - s * g.seg_blocks);
      uint32_t row_stage[R];
      bool aligned = true;  // every row's segment starts on 16 bytes (float rows of whole chunks always do)
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const Span sp = segment_span(g, tile_row(g, t, i), s);
        row_stage[i] = slot * kSlotBytes + i * kRegion + sp.shift;
        aligned = aligned && sp.shift == 0;
      }
      for (int b = warp * kBlocksPerIter + lane / D::kLanesPerBlock; b < n_blocks;
           b += kConsumerWarps * kBlocksPerIter) {
        const int64_t gb = static_cast<int64_t>(s) * g.seg_blocks + b;
        float xv[kE], x_sum[kG];
        gemv_load_x<D>(xs + gb * D::kBlockElems, part, xv, x_sum);
#pragma unroll
        for (int i = 0; i < R; ++i) {
          float q[kE], scale[kG], offset[kG];
          if constexpr (D::kUnitScale) {
            if (aligned) {  // one 16-byte shared-memory load per chunk instead of four unaligned words
              const uint4 c = *reinterpret_cast<const uint4*>(StageBytes::base() + row_stage[i] + b * D::kBlockBytes);
              const uint32_t words[4] = {c.x, c.y, c.z, c.w};
              D::decode_words(words, q);
            } else {
              gemv_decode<D>(row_stage[i] + b * D::kBlockBytes, part, q, scale, offset);
            }
          } else {
            gemv_decode<D>(row_stage[i] + b * D::kBlockBytes, part, q, scale, offset);
          }
          acc[i] = gemv_block_dot<D>(q, scale, offset, xv, x_sum, acc[i]);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const float v = warp_sum(acc[i]);
      if (lane == 0) partial[pb][warp][i] = v;
    }
    consumer_sync();
    const int outs = g.epi == Epilogue::kGlu ? R / 2 : R;
    const int tid = threadIdx.x;
    if (tid < outs) {
      const int row = t * g.tile_rows + tid;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) sum += partial[pb][w][tid];
      if (row < g.rows) {
        switch (g.epi) {
          case Epilogue::kStore: g.y[row] = sum; break;
          case Epilogue::kAccumulate: g.y[row] = load_act(g.y + row) + sum; break;
          case Epilogue::kSoftcap: g.y[row] = g.softcap * tanhf(sum / g.softcap); break;
          case Epilogue::kGlu: {
            float up = 0.0f;
#pragma unroll
            for (int w = 0; w < kConsumerWarps; ++w) up += partial[pb][w][tid + R / 2];
            g.y[row] = glu_activate(static_cast<GluAct>(g.act), sum) * up;
            break;
          }
        }
      }
    }
    pb ^= 1;  // the next tile's partials go to the other buffer: no second barrier
  }
}

__device__ void run_gemv(const GemvInstr& g, TileRange tr, uint32_t& k, const StepArgs& a, uint64_t* full,
                         uint64_t* empty, const float* xs, float (&partial)[2][kConsumerWarps][kMaxTileRows],
                         int& pb) {
#define GA_PDK_GEMV(T, D, R) \
  case DType::T:             \
    gemv_tiles<D, R>(g, tr, k, a, full, empty, xs, partial, pb); \
    break;
  switch (g.type) {
    GA_PDK_GEMV(F32, DecodeF32, 4)
    GA_PDK_GEMV(F16, DecodeF16, 4)
    GA_PDK_GEMV(BF16, DecodeBF16, 4)
    GA_PDK_GEMV(Q4_0, DecodeQ4_0, kMaxTileRows)
    GA_PDK_GEMV(Q4_1, DecodeQ4_1, kMaxTileRows)
    GA_PDK_GEMV(Q5_0, DecodeQ5_0, kMaxTileRows)
    GA_PDK_GEMV(Q5_1, DecodeQ5_1, kMaxTileRows)
    GA_PDK_GEMV(Q8_0, DecodeQ8_0, kMaxTileRows)
    GA_PDK_GEMV(Q2_K, DecodeQ2_K, kMaxTileRows)
    GA_PDK_GEMV(Q3_K, DecodeQ3_K, kMaxTileRows)
    GA_PDK_GEMV(Q4_K, DecodeQ4_K, kMaxTileRows)
    GA_PDK_GEMV(Q5_K, DecodeQ5_K, kMaxTileRows)
    GA_PDK_GEMV(Q6_K, DecodeQ6_K, kMaxTileRows)
    GA_PDK_GEMV(F8_B128, DecodeF8B128, kMaxTileRows)
    default: __trap();  // the builder admits only the types above
  }
#undef GA_PDK_GEMV
}

// ---- attention ----

// One head vector of the token into shared memory: + bias, per-head RMSNorm, RoPE (one warp).
__device__ void prepare_head(const float* src, const float* bias, const float* norm_w, float eps, const AttnInstr& at,
                             bool rope, int64_t pos, float scale, float* dst) {
  const int lane = threadIdx.x & 31, hd = at.head_dim;
  float ss = 0.0f;
  for (int d = lane; d < hd; d += 32) {
    const float v = load_act(src + d) + (bias != nullptr ? bias[d] : 0.0f);
    dst[d] = v;
    ss = fmaf(v, v, ss);
  }
  if (norm_w != nullptr) {
    const float inv = inv_rms(warp_sum(ss), hd, eps);
    for (int d = lane; d < hd; d += 32) dst[d] = dst[d] * inv * norm_w[d];
  }
  __syncwarp();
  if (rope) {
    for (int pair = lane; pair < hd / 2; pair += 32) {
      const RopePair rp = rope_pair(pair, at.n_rot, at.neox, pos, at.inv_freq, at.mscale);
      float x0 = dst[rp.d0], x1 = dst[rp.d1];
      rope_apply(rp, x0, x1);
      dst[rp.d0] = x0;
      dst[rp.d1] = x1;
    }
    __syncwarp();
  }
  if (scale != 1.0f) {
    for (int d = lane; d < hd; d += 32) dst[d] *= scale;
    __syncwarp();
  }
}

template <int DPL>
__device__ void attention_tile(const AttnInstr& at, int t, const StepArgs& a, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
  const int hd = at.head_dim, group = at.n_head / at.n_head_kv;
  const int kvh = t % at.n_head_kv, c = t / at.n_head_kv;
  const int64_t pos = *a.pos;
  const AttnSpan sp = attention_span(pos, at.window_left, at.n_chunks);
  if (c >= sp.n_eff) return;  // uniform over the CTA
  const int64_t len = (sp.count + sp.n_eff - 1) / sp.n_eff;
  const int64_t p0 = sp.start + c * len, p1 = p0 + len < pos + 1 ? p0 + len : pos + 1;
  const bool last = p1 == pos + 1;
  float* qs = scratch;              // [group][hd], times the scale
  float* kn = qs + group * hd;      // the token's k and v
  float* vn = kn + hd;
  float* wacc = vn + hd;            // [warps][group][hd + 2]
  const int64_t kv_dim = int64_t{at.n_head_kv} * hd;
  for (int j = warp; j < group + (last ? 2 : 0); j += kConsumerWarps) {
    if (j < group) {
      const int h = kvh * group + j;
      prepare_head(at.q + h * hd, at.bq != nullptr ? at.bq + h * hd : nullptr, at.q_norm, at.norm_eps, at, true, pos,
                   at.scale, qs + j * hd);
    } else if (j == group) {
      prepare_head(at.k + kvh * hd, at.bk != nullptr ? at.bk + kvh * hd : nullptr, at.k_norm, at.norm_eps, at, true,
                   pos, 1.0f, kn);
    } else {
      prepare_head(at.v + kvh * hd, at.bv != nullptr ? at.bv + kvh * hd : nullptr, nullptr, 0.0f, at, false, pos,
                   1.0f, vn);
    }
  }
  consumer_sync();
  if (last) {  // the token's K/V into its cache row (its own position is read from kn / vn below)
    const int64_t row = a.slot != nullptr ? int64_t{*a.slot} : pos;
    __half* kc = reinterpret_cast<__half*>(at.k_cache) + row * kv_dim + kvh * hd;
    __half* vc = reinterpret_cast<__half*>(at.v_cache) + row * kv_dim + kvh * hd;
    for (int d = tid; d < hd; d += kConsumerThreads) {
      kc[d] = __float2half_rn(kn[d]);
      vc[d] = __float2half_rn(vn[d]);
    }
  }
  // Each warp runs the online softmax over positions warp, warp + W, ... of the chunk; lane owns dims
  // [lane * DPL, lane * DPL + DPL) (lanes past a head of < 32 dims own none).
  float m[kAttnMaxGroup], l[kAttnMaxGroup], acc[kAttnMaxGroup][DPL];
#pragma unroll
  for (int g = 0; g < kAttnMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < DPL; ++j) acc[g][j] = 0.0f;
  }
  const int d0 = lane * DPL;
  const bool owns = d0 < hd;
  for (int64_t p = p0 + warp; p < p1; p += kConsumerWarps) {
    float kv[DPL], vv[DPL];
    if (p == pos) {
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        kv[j] = owns ? kn[d0 + j] : 0.0f;
        vv[j] = owns ? vn[d0 + j] : 0.0f;
      }
    } else {
      const int64_t row = a.block_table != nullptr
                              ? int64_t{a.block_table[p / a.block_size]} * a.block_size + p % a.block_size
                              : p;
      const __half* kr = reinterpret_cast<const __half*>(at.k_cache) + row * kv_dim + kvh * hd + d0;
      const __half* vr = reinterpret_cast<const __half*>(at.v_cache) + row * kv_dim + kvh * hd + d0;
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        kv[j] = owns ? __half2float(kr[j]) : 0.0f;
        vv[j] = owns ? __half2float(vr[j]) : 0.0f;
      }
    }
#pragma unroll
    for (int g = 0; g < kAttnMaxGroup; ++g) {
      if (g >= group) break;
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < DPL; ++j) s = fmaf(owns ? qs[g * hd + d0 + j] : 0.0f, kv[j], s);
      s = warp_sum(s);
      if (at.softcap > 0.0f) s = at.softcap * tanhf(s / at.softcap);
      const float m_new = fmaxf(m[g], s);
      const float corr = expf(m[g] - m_new), pe = expf(s - m_new);
      l[g] = fmaf(l[g], corr, pe);
#pragma unroll
      for (int j = 0; j < DPL; ++j) acc[g][j] = fmaf(acc[g][j], corr, pe * vv[j]);
      m[g] = m_new;
    }
  }
  const int stride = hd + 2;
#pragma unroll
  for (int g = 0; g < kAttnMaxGroup; ++g) {
    if (g >= group) break;
    float* w = wacc + (warp * group + g) * stride;
    if (owns) {
#pragma unroll
      for (int j = 0; j < DPL; ++j) w[d0 + j] = acc[g][j];
    }
    if (lane == 0) {
      w[hd] = m[g];
      w[hd + 1] = l[g];
    }
  }
  consumer_sync();
  float* out = at.partials + (int64_t{c} * at.n_head + int64_t{kvh} * group) * stride;
  for (int e = tid; e < group * hd; e += kConsumerThreads) {
    const int g = e / hd, d = e - g * hd;
    float mx = -INFINITY;
    for (int w = 0; w < kConsumerWarps; ++w) mx = fmaxf(mx, wacc[(w * group + g) * stride + hd]);
    float o = 0.0f, sum = 0.0f;
    for (int w = 0; w < kConsumerWarps; ++w) {
      const float* ww = wacc + (w * group + g) * stride;
      const float f = ww[hd] == -INFINITY ? 0.0f : expf(ww[hd] - mx);  // a warp with no position counts 0
      o = fmaf(f, ww[d], o);
      sum = fmaf(f, ww[hd + 1], sum);
    }
    out[g * stride + d] = o;
    if (d == 0) {
      out[g * stride + hd] = mx;
      out[g * stride + hd + 1] = sum;
    }
  }
  consumer_sync();  // the scratch is reused by the next tile
}

__device__ void run_attention(const AttnInstr& at, TileRange tr, const StepArgs& a, float* scratch) {
  const int hd = at.head_dim;
  for (int i = 0; i < tr.count; ++i) {
    const int t = tr.first + i * tr.step;
    if (hd <= 32) {
      attention_tile<1>(at, t, a, scratch);
    } else if (hd == 64) {
      attention_tile<2>(at, t, a, scratch);
    } else if (hd == 96) {
      attention_tile<3>(at, t, a, scratch);
    } else if (hd == 128) {
      attention_tile<4>(at, t, a, scratch);
    } else {
      attention_tile<8>(at, t, a, scratch);
    }
  }
}

// ---- the standalone norm and GLU ----

__device__ void run_norm(const NormInstr& nm, float* red) {
  float sum_sq = 0.0f;
  for (int e = threadIdx.x; e < nm.n; e += kConsumerThreads) {
    float v = load_act(nm.x + e);
    if (nm.residual != nullptr) {
      v += load_act(nm.residual + e);
      nm.residual[e] = v;
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  const float inv = inv_rms(consumer_sum(sum_sq, red), nm.n, nm.eps);
  for (int e = threadIdx.x; e < nm.n; e += kConsumerThreads) {
    // each thread re-reads what it wrote (or read) above
    const float v = nm.residual != nullptr ? nm.residual[e] : load_act(nm.x + e);
    nm.out[e] = v * inv * nm.w[e];
  }
}

__device__ void run_glu(const GluInstr& gl, TileRange tr) {
  for (int i = 0; i < tr.count; ++i) {
    const int t = tr.first + i * tr.step;
    const int end = min(gl.n, (t + 1) * kGluTileCols);
    for (int e = t * kGluTileCols + threadIdx.x; e < end; e += kConsumerThreads) {
      gl.out[e] = glu_activate(static_cast<GluAct>(gl.act), load_act(gl.gate + e)) * load_act(gl.up + e);
    }
  }
}

// ---- the consumers' loop ----

__device__ void consume(const StepArgs& a, uint64_t* full, uint64_t* empty, float* xs,
                        float (&partial)[2][kConsumerWarps][kMaxTileRows], float* red) {
  const int tid = threadIdx.x;
  const auto cta = static_cast<int32_t>(blockIdx.x), grid = static_cast<int32_t>(gridDim.x);
  uint32_t k = 0;
  int pb = 0;
  for (int i = 0; i < a.n_instrs; ++i) {
    const Instr& in = a.instrs[i];
    const TileRange tr = tiles_of(in, cta, grid);
    if (tr.count == 0) continue;
    uint64_t* stamp = a.trace != nullptr ? a.trace + (static_cast<int64_t>(cta) * a.n_instrs + i) * 3 : nullptr;
    if (stamp != nullptr && tid == 0) stamp[0] = global_time();
    if (tid == 0) {
      for (int d = 0; d < in.n_deps; ++d) {
        const int32_t j = a.deps[in.dep_begin + d];
        const uint32_t need = static_cast<uint32_t>(arrivals_of(a.instrs[j], grid));
        while (load_acquire(a.counters + j) < need) {
        }
      }
      if (stamp != nullptr) stamp[1] = global_time();
    }
    consumer_sync();
    switch (in.kind) {
      case OpKind::kGemv: {
        const GemvInstr g = in.gemv;  // in registers: the stores through g.y cannot alias it
        stage_x(g, a, xs, red);
        run_gemv(g, tr, k, a, full, empty, xs, partial, pb);
        break;
      }
      case OpKind::kAttention: {
        const AttnInstr at = in.attn;
        run_attention(at, tr, a, xs);
        break;
      }
      case OpKind::kRmsNorm:
        run_norm(in.norm, red);
        break;
      case OpKind::kGlu:
        run_glu(in.glu, tr);
        break;
    }
    consumer_sync();  // every consumer's writes of this instruction come before the arrival
    if (tid == 0) {
      __threadfence();
      add_release(a.counters + i, 1);
      if (stamp != nullptr) stamp[2] = global_time();
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(const StepArgs a) {
#if !GA_PDK_DEVICE
  __trap();  // the host refuses devices below sm_80 (persistent_decode_unsupported_reason)
#endif
  extern __shared__ uint4 gemv_dynamic_smem[];  // the ring at offset 0 (StageBytes reads it), then x
  __shared__ uint64_t full[kMaxSlots], empty[kMaxSlots];
  __shared__ float partial[2][kConsumerWarps][kMaxTileRows];
  __shared__ float red[kConsumerWarps];
  uint8_t* ring = reinterpret_cast<uint8_t*>(gemv_dynamic_smem);
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.n_slots; ++s) {
      mbar_init(&full[s], a.bulk_copies ? 1u : 32u);
      mbar_init(&empty[s], kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x >= kConsumerThreads) {
    produce(a, ring, full, empty);
  } else {
    consume(a, full, empty, reinterpret_cast<float*>(ring + a.x_offset), partial, red);
  }
}

}  // namespace

const char* persistent_decode_unsupported_reason(int device, DeviceLimits* limits) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "the device's properties could not be read";
  }
  if (prop.major < 8) return "the persistent decode kernel needs compute capability 8.0 or newer (mbarriers, cp.async)";
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, persistent_decode_kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return "the persistent decode kernel has no code for this device";
  }
  if (attr.binaryVersion < 80) return "the build has no sm_80+ code of the persistent decode kernel for this device";
  if (limits != nullptr) {
    limits->grid = prop.multiProcessorCount;
    limits->smem_bytes = static_cast<int64_t>(prop.sharedMemPerBlockOptin) - static_cast<int64_t>(attr.sharedSizeBytes);
    // set once here, outside any graph capture, for every launch after
    if (cudaFuncSetAttribute(persistent_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(limits->smem_bytes)) != cudaSuccess) {
      (void)cudaGetLastError();
      return "the persistent decode kernel could not be given the device's shared memory";
    }
    const char* copies = std::getenv("GA_PERSISTENT_COPIES");
    const bool force_cp_async = copies != nullptr && std::strcmp(copies, "cp.async") == 0;
    limits->bulk_copies = prop.major >= 9 && attr.binaryVersion >= 90 && !force_cp_async;
  }
  return nullptr;
}

cudaError_t persistent_decode(const StepArgs& args, int32_t grid, int64_t smem_bytes, cudaStream_t stream) {
  if (args.instrs == nullptr || args.counters == nullptr || args.pos == nullptr || args.n_instrs <= 0 || grid <= 0 ||
      args.n_slots < 2 || args.n_slots > kMaxSlots) {
    return cudaErrorInvalidValue;
  }
  cudaError_t status = cudaMemsetAsync(args.counters, 0, static_cast<size_t>(args.n_instrs) * sizeof(uint32_t), stream);
  if (status != cudaSuccess) return status;
  if (args.trace != nullptr) {  // CTAs without a tile of an instruction leave its stamps at 0
    status = cudaMemsetAsync(args.trace, 0, static_cast<size_t>(grid) * args.n_instrs * 3 * sizeof(uint64_t), stream);
    if (status != cudaSuccess) return status;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;  // every CTA resident at once: they wait for each other
  attribute.val.cooperative = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, persistent_decode_kernel, args);
}

}  // namespace ga::cuda::persistent
