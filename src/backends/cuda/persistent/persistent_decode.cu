// The persistent decode kernel (persistent_decode.h): the producer warp's weight stream, the consumers'
// instruction loop, and the four instruction kinds of plan.h.
#include "backends/cuda/persistent/persistent_decode.h"

#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/gemv_int8.cuh"
#include "backends/cuda/kernels/gemv_kernel.cuh"
#include "backends/cuda/kernels/step_math.cuh"

namespace ga::cuda::persistent {
namespace {

using namespace ga::cuda::detail;

constexpr int kConsumerThreads = kConsumerWarps * 32;
static_assert(kXInt8BlockBytes == kXBlockBytes, "plan.h's size of an int8 x block is x_int8.cuh's");

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

// An L2 policy that evicts the lines it is attached to first: the weights are read once a step, so they must not
// push the KV cache, the norms' weights and the activations out of L2, whose loads wait on the step's critical path
// (from DRAM they queue behind the weight stream of every SM: microseconds).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy = 0;
#if GA_PDK_BULK
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// A bulk copy of `bytes` into shared memory completing on the barrier; with a policy (non-zero) its L2 lines carry it.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
#if GA_PDK_BULK
  if (policy != 0) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
            smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
        : "memory");
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
  }
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

// Trace mode: stamp `which` of the instruction (plan.h's TraceStamp), when tracing.
__device__ __forceinline__ void stamp_now(uint64_t* stamp, int which) {
  if (stamp != nullptr) stamp[which] = global_time();
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

// Consumer thread 0 spins until every dependency of `in` is done (then a consumer barrier publishes it); stamps
// the moment. Diagnostics (StepArgs::ignore_deps) skip the wait.
__device__ void wait_dependencies(const Instr& in, const StepArgs& a, uint64_t* stamp) {
  if (threadIdx.x == 0 && !a.ignore_deps) {
    for (int d = 0; d < in.n_deps; ++d) {
      const int32_t j = a.deps[in.dep_begin + d];
      const uint32_t need = static_cast<uint32_t>(arrivals_of(a.instrs[j], static_cast<int32_t>(gridDim.x)));
      while (load_acquire(a.counters + j) < need) {
      }
    }
  }
  stamp_now(stamp, kStampMet);
  consumer_sync();
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
  const int blocks = min(g.seg_blocks, g.blocks_per_row - s * g.seg_blocks);
  const uint8_t* first = row + static_cast<int64_t>(s) * g.seg_blocks * g.block_bytes;
  Span sp;
  sp.shift = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(first) & 15);
  sp.src = first - sp.shift;
  // up to 15 bytes past the segment: within the next row or the weight buffer's 16 bytes of slack
  sp.bytes = (sp.shift + static_cast<uint32_t>(blocks * g.block_bytes) + 15u) & ~15u;
  return sp;
}

static_assert(kConsumerWarps * kMaxWarpRows <= 64, "the producer copies at most two slot rows per lane");

__device__ void produce(const StepArgs& a, uint8_t* ring, uint64_t* full, uint64_t* empty) {
  const int lane = threadIdx.x & 31;
  const uint64_t policy = a.weights_evict_first ? evict_first_policy() : 0;
  uint32_t k = 0;
  for (int i = 0; i < a.n_instrs; ++i) {
    const Instr& in = a.instrs[i];
    if (in.kind != OpKind::kGemv) continue;
    const GemvInstr& g = in.gemv;
    const TileRange tr = tiles_of(in, static_cast<int32_t>(blockIdx.x), static_cast<int32_t>(gridDim.x));
    const int rows = slot_rows_of(g);
    const auto region = static_cast<uint32_t>(g.slot_region);
    for (int t = tr.first; t < tr.first + tr.count; ++t) {
      for (int s = 0; s < g.n_segs; ++s, ++k) {
        const uint32_t slot = k % a.n_slots;
        if (k >= static_cast<uint32_t>(a.n_slots)) mbar_wait(&empty[slot], ((k / a.n_slots) - 1) & 1u);
        uint8_t* base = ring + slot * kSlotBytes;
        if (a.bulk_copies && g.packed && (t + 1) * g.tile_rows <= g.rows) {
          // the whole tile as it lies in memory (a tail tile, whose rows are clamped, takes the per-row path)
          const auto span = static_cast<uint32_t>(g.tile_rows * g.row_bytes);
          const int64_t first = static_cast<int64_t>(t) * g.tile_rows * g.row_bytes;
          if (lane == 0) {
            mbar_arrive_expect_tx(&full[slot], g.epi == Epilogue::kGlu ? 2 * span : span);
            bulk_copy(base, g.w + first, span, &full[slot], policy);
            if (g.epi == Epilogue::kGlu) bulk_copy(base + span, g.w2 + first, span, &full[slot], policy);
          }
          __syncwarp();
        } else if (a.bulk_copies) {
          // lane l copies slot rows l, l + 32, ...; the barrier expects their bytes before any copy is issued
          Span sp[2] = {{nullptr, 0, 0}, {nullptr, 0, 0}};
          uint32_t total = 0;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (lane + 32 * j < rows) sp[j] = segment_span(g, tile_row(g, t, lane + 32 * j), s);
            total += sp[j].bytes;
          }
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
          if (lane == 0) mbar_arrive_expect_tx(&full[slot], total);
          __syncwarp();
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (lane + 32 * j < rows) bulk_copy(base + (lane + 32 * j) * region, sp[j].src, sp[j].bytes, &full[slot], policy);
          }
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

// Loads a consumer thread keeps in flight at once while staging: activations come from L2, where the weight stream
// of every SM queues ahead of them (a load takes microseconds), so no load may wait for another.
constexpr int kStageLoads = 8;    // float4 of x per thread
constexpr int kMergeChunks = 2;   // attention chunks whose partials the merge loads at once (more would spill)

// x[0, cols) into xs; returns this thread's part of the sum of squares.
__device__ float stage_plain(const float* x, int cols, float* xs) {
  const int tid = threadIdx.x;
  float sum_sq = 0.0f;
  if (cols % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const int n4 = cols / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* s4 = reinterpret_cast<float4*>(xs);
    for (int base = tid; base < n4; base += kStageLoads * kConsumerThreads) {
      float4 v[kStageLoads];
#pragma unroll
      for (int u = 0; u < kStageLoads; ++u) {
        const int i = base + u * kConsumerThreads;
        v[u] = i < n4 ? __ldcg(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kStageLoads; ++u) {
        const int i = base + u * kConsumerThreads;
        if (i < n4) s4[i] = v[u];
        sum_sq = fmaf(v[u].x, v[u].x, fmaf(v[u].y, v[u].y, fmaf(v[u].z, v[u].z, fmaf(v[u].w, v[u].w, sum_sq))));
      }
    }
    return sum_sq;
  }
  constexpr int kLoads = 4 * kStageLoads;
  for (int base = tid; base < cols; base += kLoads * kConsumerThreads) {
    float v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int i = base + u * kConsumerThreads;
      v[u] = i < cols ? load_act(x + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int i = base + u * kConsumerThreads;
      if (i < cols) xs[i] = v[u];
      sum_sq = fmaf(v[u], v[u], sum_sq);
    }
  }
  return sum_sq;
}

// The attention instruction's per-chunk partials ([chunk][head][head_dim + 2]: unnormalized output, max, sum)
// merged by their log-sum-exp into xs[0, cols). A thread takes runs of kMergeRun outputs of one head (head dims are
// multiples of 8: the builder admits no others) and, for kMergeRuns runs and kMergeChunks chunks at once, loads
// each chunk's run (float2 loads) with its (max, sum) pair before using any: one round of loads for every shape up
// to 2 * 8 * 256 = 4096 outputs and 2 chunks (64 positions); the chunks are folded in order with a running max.
constexpr int kMergeRun = 8;
constexpr int kMergeRuns = 2;

__device__ void stage_merge(const GemvInstr& g, int64_t pos, float* xs) {
  const int tid = threadIdx.x, hd = g.merge_head_dim;
  const int n_eff = attention_span(pos, g.merge_window, g.merge_chunks).n_eff;
  const int64_t head_stride = hd + 2, chunk_stride = int64_t{g.merge_heads} * head_stride;
  const int n_runs = g.cols / kMergeRun;
  for (int r0 = tid; r0 < n_runs; r0 += kMergeRuns * kConsumerThreads) {
    float m[kMergeRuns], den[kMergeRuns], num[kMergeRuns][kMergeRun];
    int64_t at[kMergeRuns];  // the run's offset in a chunk's partials
#pragma unroll
    for (int u = 0; u < kMergeRuns; ++u) {
      const int e = (r0 + u * kConsumerThreads) * kMergeRun, h = e / hd;
      at[u] = h * head_stride + (e - h * hd);
      m[u] = -INFINITY;
      den[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < kMergeRun; ++j) num[u][j] = 0.0f;
    }
    for (int c0 = 0; c0 < n_eff; c0 += kMergeChunks) {
      float2 v[kMergeRuns][kMergeChunks][kMergeRun / 2], ms[kMergeRuns][kMergeChunks];
#pragma unroll
      for (int u = 0; u < kMergeRuns; ++u) {
        const bool run_in = r0 + u * kConsumerThreads < n_runs;
#pragma unroll
        for (int cc = 0; cc < kMergeChunks; ++cc) {
          const bool in = run_in && c0 + cc < n_eff;
          const float* base = g.x + (c0 + cc) * chunk_stride + at[u];
          const float* stats = base - (at[u] % head_stride) + hd;  // the head's (max, sum)
#pragma unroll
          for (int j = 0; j < kMergeRun / 2; ++j) {
            v[u][cc][j] = in ? __ldcg(reinterpret_cast<const float2*>(base) + j) : make_float2(0.0f, 0.0f);
          }
          ms[u][cc] = in ? __ldcg(reinterpret_cast<const float2*>(stats)) : make_float2(-INFINITY, 0.0f);
        }
      }
#pragma unroll
      for (int u = 0; u < kMergeRuns; ++u) {
#pragma unroll
        for (int cc = 0; cc < kMergeChunks; ++cc) {
          if (c0 + cc >= n_eff) break;
          const float m_new = fmaxf(m[u], ms[u][cc].x);
          const float corr = expf(m[u] - m_new), w = expf(ms[u][cc].x - m_new);
          den[u] = fmaf(den[u], corr, w * ms[u][cc].y);
#pragma unroll
          for (int j = 0; j < kMergeRun / 2; ++j) {
            num[u][2 * j] = fmaf(num[u][2 * j], corr, w * v[u][cc][j].x);
            num[u][2 * j + 1] = fmaf(num[u][2 * j + 1], corr, w * v[u][cc][j].y);
          }
          m[u] = m_new;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kMergeRuns; ++u) {
      const int r = r0 + u * kConsumerThreads;
      if (r >= n_runs) continue;
      const float inv = 1.0f / den[u];  // the chunk of the largest max has a sum >= 1
#pragma unroll
      for (int j = 0; j < kMergeRun; ++j) xs[r * kMergeRun + j] = num[u][j] * inv;
    }
  }
  consumer_sync();
}

// rmsnorm(x) * norm_w into xs when a thread's share fits one batch (cols <= kNormLoads * 4 * threads: hidden sizes
// up to 4096; wider ones take stage_plain's rounds): x and the norm's weights are loaded in the same round, the
// weights kept in registers (kNormLoads is half of kNormLoads: the registers of both stay within the kernel's cap).
constexpr int kNormLoads = 4;

__device__ bool stage_norm_one_round(const GemvInstr& g, float* xs, float* red) {
  const int tid = threadIdx.x, n4 = g.cols / 4;
  if (g.cols % 4 != 0 || n4 > kNormLoads * kConsumerThreads || reinterpret_cast<uintptr_t>(g.x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(g.norm_w) % 16 != 0) {
    return false;
  }
  const float4* x4 = reinterpret_cast<const float4*>(g.x);
  const float4* w4 = reinterpret_cast<const float4*>(g.norm_w);
  float4 v[kNormLoads], w[kNormLoads];
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int u = 0; u < kNormLoads; ++u) {
    const int i = tid + u * kConsumerThreads;
    v[u] = i < n4 ? __ldcg(x4 + i) : zero;
    w[u] = i < n4 ? __ldg(w4 + i) : zero;
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int u = 0; u < kNormLoads; ++u) {
    sum_sq = fmaf(v[u].x, v[u].x, fmaf(v[u].y, v[u].y, fmaf(v[u].z, v[u].z, fmaf(v[u].w, v[u].w, sum_sq))));
  }
  const float inv = inv_rms(consumer_sum(sum_sq, red), g.cols, g.eps);
  float4* s4 = reinterpret_cast<float4*>(xs);
#pragma unroll
  for (int u = 0; u < kNormLoads; ++u) {
    const int i = tid + u * kConsumerThreads;
    if (i < n4) {
      s4[i] = make_float4(v[u].x * inv * w[u].x, v[u].y * inv * w[u].y, v[u].z * inv * w[u].z, v[u].w * inv * w[u].w);
    }
  }
  return true;
}

// The x of a GEMV into shared memory (cols floats), as its xload says (pos: the token's position).
__device__ void stage_x(const GemvInstr& g, int64_t pos, float* xs, float* red) {
  if (g.xload == XLoad::kAttnMerge) {
    stage_merge(g, pos, xs);
    return;
  }
  if (g.xload == XLoad::kRmsNorm && stage_norm_one_round(g, xs, red)) {
    consumer_sync();
    return;
  }
  const float sum_sq = stage_plain(g.x, g.cols, xs);
  if (g.xload == XLoad::kRmsNorm) {  // consumer_sum's barrier also orders the xs writes before the reads below
    const float inv = inv_rms(consumer_sum(sum_sq, red), g.cols, g.eps);
    for (int e = threadIdx.x; e < g.cols; e += kConsumerThreads) xs[e] = xs[e] * inv * g.norm_w[e];
  }
  consumer_sync();
}

// For the int8 dot: x (staged in xs) as int8 digits and (d_x, sum) per block of 32 at xq (x_int8.cuh's layout and
// rounding, the per-op int8 GEMV's).
__device__ void quantize_x(const GemvInstr& g, const float* xs, int8_t* xq) {
  const int nb = g.cols / 32;
  float2* ds = x_int8_scales(xq, nb);
  for (int b = threadIdx.x; b < nb; b += kConsumerThreads) {
    gemv_quantize_x_block(xs + 32 * b, xq + static_cast<int64_t>(b) * kXBlockBytes, ds + b);
  }
  consumer_sync();
}

// Consumer warp w owns output rows [w * rpw, (w + 1) * rpw) of every tile of a GEMV and reads them (for kGlu their
// gate rows, then their up rows) from every slot of the tile: its lanes split a row's blocks, one x load serves all
// its rows, and a row's sum is one warp reduction. No barrier across warps: a warp releases a slot when it is done
// with it and runs ahead into the next one.
struct WarpRows {
  int rpw = 0;     // output rows
  int n_rows = 0;  // slot rows it reads, <= kMaxWarpRows: rpw, or 2 rpw for kGlu
  int slot_row[kMaxWarpRows];  // gate (or plain) rows w * rpw + j, for kGlu then up rows tile_rows + w * rpw + j
};

__device__ __forceinline__ WarpRows warp_rows(const GemvInstr& g) {
  const int warp = threadIdx.x >> 5;
  WarpRows wr;
  wr.rpw = g.rows_per_warp;
  wr.n_rows = g.epi == Epilogue::kGlu ? 2 * wr.rpw : wr.rpw;
#pragma unroll
  for (int i = 0; i < kMaxWarpRows; ++i) {
    wr.slot_row[i] = i < wr.rpw ? warp * wr.rpw + i : g.tile_rows + warp * wr.rpw + (i - wr.rpw);
  }
  return wr;
}

// Where the warp's rows of segment s of tile t start in the slot (byte offsets of the dynamic shared memory), at
// the shift the producer's segment_span copied them with; true when every one starts on 16 bytes.
__device__ __forceinline__ bool stage_rows(const GemvInstr& g, const WarpRows& wr, int t, int s, uint32_t slot,
                                           uint32_t (&row_stage)[kMaxWarpRows]) {
  bool aligned = true;
#pragma unroll
  for (int i = 0; i < kMaxWarpRows; ++i) {
    const uint32_t shift = i < wr.n_rows ? segment_span(g, tile_row(g, t, wr.slot_row[i]), s).shift : 0u;
    row_stage[i] = slot * kSlotBytes + wr.slot_row[i] * static_cast<uint32_t>(g.slot_region) + shift;
    aligned = aligned && shift == 0;
  }
  return aligned;
}

// The warp's sums of tile t into y: lane j stores output row j of the warp (for kGlu with its up row j + rpw).
__device__ __forceinline__ void store_warp_rows(const GemvInstr& g, const WarpRows& wr, int t,
                                                float (&acc)[kMaxWarpRows]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kMaxWarpRows; ++i) acc[i] = warp_sum(acc[i]);
  if (lane >= wr.rpw) return;
  float sum = 0.0f, up = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxWarpRows; ++i) {  // constant indices keep acc in registers
    if (i == lane) sum = acc[i];
    if (i == lane + wr.rpw) up = acc[i];
  }
  const int row = t * g.tile_rows + warp * wr.rpw + lane;
  if (row >= g.rows) return;
  switch (g.epi) {
    case Epilogue::kStore: g.y[row] = sum; break;
    case Epilogue::kAccumulate: g.y[row] = load_act(g.y + row) + sum; break;
    case Epilogue::kSoftcap: g.y[row] = g.softcap * tanhf(sum / g.softcap); break;
    case Epilogue::kGlu: g.y[row] = glu_activate(static_cast<GluAct>(g.act), sum) * up; break;
  }
}

// The tiles [tr.first, tr.first + tr.count) of a GEMV with decoder D on float x (staged in xs).
template <class D>
__device__ void gemv_tiles(const GemvInstr& g, TileRange tr, uint32_t& k, const StepArgs& a, uint64_t* full,
                           uint64_t* empty, const float* xs, uint64_t* stamp) {
  constexpr int kE = D::kElems;
  constexpr int kG = D::kGroups;
  constexpr int kBlocksPerIter = 32 / D::kLanesPerBlock;
  const int lane = threadIdx.x & 31;
  const int part = lane % D::kLanesPerBlock;
  const WarpRows wr = warp_rows(g);
  for (int t = tr.first; t < tr.first + tr.count; ++t) {
    float acc[kMaxWarpRows];
#pragma unroll
    for (int i = 0; i < kMaxWarpRows; ++i) acc[i] = 0.0f;
    for (int s = 0; s < g.n_segs; ++s, ++k) {
      const uint32_t slot = k % a.n_slots;
      const int n_blocks = min(g.seg_blocks, g.blocks_per_row - s * g.seg_blocks);
      uint32_t row_stage[kMaxWarpRows];
      // every row's segment starts on 16 bytes (float rows of whole chunks always do)
      const bool aligned = stage_rows(g, wr, t, s, slot, row_stage);
      mbar_wait(&full[slot], (k / a.n_slots) & 1u);
      if (t == tr.first && s == 0) stamp_now(stamp, kStampFirst);
#pragma unroll 2
      for (int b = lane / D::kLanesPerBlock; b < (a.stream_only ? 0 : n_blocks); b += kBlocksPerIter) {
        const int64_t gb = static_cast<int64_t>(s) * g.seg_blocks + b;
        float xv[kE], x_sum[kG];
        gemv_load_x<D>(xs + gb * D::kBlockElems, part, xv, x_sum);
#pragma unroll
        for (int i = 0; i < kMaxWarpRows; ++i) {
          if (i >= wr.n_rows) break;
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
    store_warp_rows(g, wr, t, acc);
  }
}

// Sub-block `sub` of the weight block staged at byte `addr` of the dynamic shared memory, for the int8 dot: its 8
// code words, scale and offset, by gemv_int8.cuh's Int8Traits math. Classic blocks (18-34 bytes) sit at any even
// offset: their words are read aligned and funnel-shifted; Q4_K super-blocks are 16-byte aligned (the builder
// admits only such rows), so a lane reads the head and its sub-block's 32 qs bytes with three 16-byte loads.
template <class D>
__device__ __forceinline__ void int8_block(uint32_t addr, int sub, uint32_t* codes, float& d, float& o) {
  using T = Int8Traits<D>;
  if constexpr (T::kSubBlocks == 1) {
    constexpr int kWords = (D::kBlockBytes + 3) / 4;
    const uint32_t* words = reinterpret_cast<const uint32_t*>(StageBytes::base()) + (addr >> 2);
    const uint32_t shift = (addr & 3u) * 8u;
    uint32_t u[kWords + 1];
#pragma unroll
    for (int j = 0; j < kWords; ++j) u[j] = __funnelshift_r(words[j], words[j + 1], shift);
    u[kWords] = 0u;  // never a field's byte; keeps unit_word's u[w + 1] in bounds
    T::block(u, 0, codes, d, o);
  } else {
    const uint4* blk = reinterpret_cast<const uint4*>(StageBytes::base() + addr);
    const uint4 h = blk[0], q0 = blk[1 + 2 * (sub >> 1)], q1 = blk[2 + 2 * (sub >> 1)];
    const uint32_t head[4] = {h.x, h.y, h.z, h.w};
    const uint32_t qs[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    q4k_sub_block(head, qs, sub, codes, d, o);
  }
}

// The tiles of a GEMV with decoder D on int8 x (quantize_x): lane l takes x block l, l + 32, ... of the segment
// (block of 32 weights; for Q4_K sub-block l % 8 of super-block l / 8), loads its digits once and runs the two
// DP4A dots of gemv_int8.cuh against each of the warp's rows.
template <class D>
__device__ void gemv_tiles_int8(const GemvInstr& g, TileRange tr, uint32_t& k, const StepArgs& a, uint64_t* full,
                                uint64_t* empty, const int8_t* xq, uint64_t* stamp) {
  using T = Int8Traits<D>;
  constexpr int kSub = T::kSubBlocks;
  const int lane = threadIdx.x & 31;
  const float2* ds = x_int8_scales(const_cast<int8_t*>(xq), g.cols / 32);
  const WarpRows wr = warp_rows(g);
  for (int t = tr.first; t < tr.first + tr.count; ++t) {
    float acc[kMaxWarpRows];
#pragma unroll
    for (int i = 0; i < kMaxWarpRows; ++i) acc[i] = 0.0f;
    for (int s = 0; s < g.n_segs; ++s, ++k) {
      const uint32_t slot = k % a.n_slots;
      const int n_x = min(g.seg_blocks, g.blocks_per_row - s * g.seg_blocks) * kSub;
      uint32_t row_stage[kMaxWarpRows];
      stage_rows(g, wr, t, s, slot, row_stage);
      mbar_wait(&full[slot], (k / a.n_slots) & 1u);
      if (t == tr.first && s == 0) stamp_now(stamp, kStampFirst);
      for (int xb = lane; xb < (a.stream_only ? 0 : n_x); xb += 32) {
        const int wb = xb / kSub, sub = xb - wb * kSub;
        const int gx = s * g.seg_blocks * kSub + xb;
        const uint4* q = reinterpret_cast<const uint4*>(xq + static_cast<int64_t>(gx) * kXBlockBytes);
        const uint4 x0 = q[0], x1 = q[1], x2 = q[2], x3 = q[3];
        const float2 xd = ds[gx];
#pragma unroll
        for (int i = 0; i < kMaxWarpRows; ++i) {
          if (i >= wr.n_rows) break;
          uint32_t codes[8];
          float d, o;
          int8_block<D>(row_stage[i] + wb * D::kBlockBytes, sub, codes, d, o);
          const int dot1 = dot_block_words(codes, x0, x1);
          const int dot2 = dot_block_words(codes, x2, x3);
          // |dot| <= 32 * 128 * 127 < 2^22: exact as float either way
          const float dot = fmaf(small_int_to_float(dot2), 1.0f / kResidualSteps, small_int_to_float(dot1));
          float acc_i = acc[i];
          if constexpr (T::kHasOffset) acc_i = fmaf(o, xd.y, acc_i);
          acc[i] = fmaf(d, xd.x * dot, acc_i);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
    }
    store_warp_rows(g, wr, t, acc);
  }
}

// stamp: the instruction's trace stamps, given to consumer thread 0 only (or null).
__device__ void run_gemv(const GemvInstr& g, TileRange tr, uint32_t& k, const StepArgs& a, uint64_t* full,
                         uint64_t* empty, const float* xs, const int8_t* xq, uint64_t* stamp) {
  if (g.int8_x) {
#define GA_PDK_GEMV_INT8(T, D)                          \
  case DType::T:                                        \
    gemv_tiles_int8<D>(g, tr, k, a, full, empty, xq, stamp); \
    return;
    switch (g.type) {
      GA_PDK_GEMV_INT8(Q4_0, DecodeQ4_0)
      GA_PDK_GEMV_INT8(Q4_1, DecodeQ4_1)
      GA_PDK_GEMV_INT8(Q5_0, DecodeQ5_0)
      GA_PDK_GEMV_INT8(Q5_1, DecodeQ5_1)
      GA_PDK_GEMV_INT8(Q8_0, DecodeQ8_0)
      GA_PDK_GEMV_INT8(Q4_K, DecodeQ4_K)
      default: __trap();  // the builder sets int8_x only for the types above
    }
#undef GA_PDK_GEMV_INT8
  }
#define GA_PDK_GEMV(T, D)                           \
  case DType::T:                                    \
    gemv_tiles<D>(g, tr, k, a, full, empty, xs, stamp); \
    break;
  switch (g.type) {
    GA_PDK_GEMV(F32, DecodeF32)
    GA_PDK_GEMV(F16, DecodeF16)
    GA_PDK_GEMV(BF16, DecodeBF16)
    GA_PDK_GEMV(Q4_0, DecodeQ4_0)
    GA_PDK_GEMV(Q4_1, DecodeQ4_1)
    GA_PDK_GEMV(Q5_0, DecodeQ5_0)
    GA_PDK_GEMV(Q5_1, DecodeQ5_1)
    GA_PDK_GEMV(Q8_0, DecodeQ8_0)
    GA_PDK_GEMV(Q2_K, DecodeQ2_K)
    GA_PDK_GEMV(Q3_K, DecodeQ3_K)
    GA_PDK_GEMV(Q4_K, DecodeQ4_K)
    GA_PDK_GEMV(Q5_K, DecodeQ5_K)
    GA_PDK_GEMV(Q6_K, DecodeQ6_K)
    GA_PDK_GEMV(F8_B128, DecodeF8B128)
    default: __trap();  // the builder admits only the types above
  }
#undef GA_PDK_GEMV
}

// ---- attention ----

// One head vector of the token into shared memory: + bias, per-head RMSNorm, RoPE (one warp). Its loads (at most
// kMaxPerLane a lane: the attention tile's dims per lane) are all issued before any is used.
template <int kMaxPerLane>
__device__ void prepare_head(const float* src, const float* bias, const float* norm_w, float eps, const AttnInstr& at,
                             bool rope, int64_t pos, float scale, float* dst) {
  const int lane = threadIdx.x & 31, hd = at.head_dim;
  float v[kMaxPerLane], b[kMaxPerLane];
#pragma unroll
  for (int u = 0; u < kMaxPerLane; ++u) {
    const int d = lane + 32 * u;
    v[u] = d < hd ? load_act(src + d) : 0.0f;
    b[u] = d < hd && bias != nullptr ? bias[d] : 0.0f;
  }
  float ss = 0.0f;
#pragma unroll
  for (int u = 0; u < kMaxPerLane; ++u) {
    const int d = lane + 32 * u;
    v[u] += b[u];
    if (d < hd) dst[d] = v[u];
    ss = fmaf(v[u], v[u], ss);
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

// Cache positions a warp loads at once: 4, or 2 for head dims of 256 (whose 8 dims a lane keep 64 accumulators live).
template <int DPL>
__host__ __device__ constexpr int attn_batch() {
  return DPL <= 4 ? 4 : 2;
}

// DPL consecutive f16 of a cache row as floats: one 4-, 8- or 16-byte load where DPL allows (a lane's dims start
// at a multiple of DPL halves, and rows at multiples of the head dim).
template <int DPL>
__device__ __forceinline__ void load_halves(const __half* p, float (&out)[DPL]) {
  if constexpr (DPL == 2 || DPL == 4 || DPL == 8) {
    uint32_t w[DPL / 2];
    if constexpr (DPL == 2) {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    } else if constexpr (DPL == 4) {
      const uint2 v = *reinterpret_cast<const uint2*>(p);
      w[0] = v.x;
      w[1] = v.y;
    } else {
      const uint4 v = *reinterpret_cast<const uint4*>(p);
      w[0] = v.x;
      w[1] = v.y;
      w[2] = v.z;
      w[3] = v.w;
    }
    halves_to_floats<DPL / 2>(w, out);
  } else {
#pragma unroll
    for (int j = 0; j < DPL; ++j) out[j] = __half2float(p[j]);
  }
}

// A batch of attention_batch positions of a warp (pb, pb + W, ...) from the cache into registers: zeros where the
// position is past the chunk, is the token's own (read from shared memory once it is prepared) or the lane owns no
// dims. The cache rows of earlier positions depend on nothing this step writes.
template <int DPL, int B>
__device__ __forceinline__ void load_cache_batch(const AttnInstr& at, const StepArgs& a, int64_t pb, int64_t p1,
                                                 int64_t pos, int kvh, int d0, bool owns, float (&kv)[B][DPL],
                                                 float (&vv)[B][DPL]) {
  const int64_t kv_dim = int64_t{at.n_head_kv} * at.head_dim;
#pragma unroll
  for (int u = 0; u < B; ++u) {
    const int64_t p = pb + u * kConsumerWarps;
    if (p >= p1 || p == pos || !owns) {
#pragma unroll
      for (int j = 0; j < DPL; ++j) kv[u][j] = vv[u][j] = 0.0f;
      continue;
    }
    const int64_t row =
        a.block_table != nullptr ? int64_t{a.block_table[p / a.block_size]} * a.block_size + p % a.block_size : p;
    const int64_t off = row * kv_dim + int64_t{kvh} * at.head_dim + d0;
    load_halves<DPL>(reinterpret_cast<const __half*>(at.k_cache) + off, kv[u]);
    load_halves<DPL>(reinterpret_cast<const __half*>(at.v_cache) + off, vv[u]);
  }
}

// Tile t of the attention instruction `in`. With wait (the CTA's first tile) the dependencies are waited on here,
// after the first batch of cache rows has been requested: those loads, the longest of the tile under the weight
// stream, overlap the wait for the q/k/v GEMV. Later batches are requested before the current one is folded.
template <int DPL>
__device__ void attention_tile(const Instr& in, int t, const StepArgs& a, int64_t pos, float* scratch, uint64_t* stamp,
                               bool wait) {
  const AttnInstr at = in.attn;  // in registers: the cache stores below cannot alias it
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
  const int hd = at.head_dim, group = at.n_head / at.n_head_kv;
  const int kvh = t % at.n_head_kv, c = t / at.n_head_kv;
  const AttnSpan sp = attention_span(pos, at.window_left, at.n_chunks);
  const bool active = c < sp.n_eff;  // uniform over the CTA
  const int64_t len = (sp.count + sp.n_eff - 1) / sp.n_eff;
  const int64_t p0 = sp.start + c * len, p1 = active ? (p0 + len < pos + 1 ? p0 + len : pos + 1) : p0;
  const bool last = active && p1 == pos + 1;
  const int d0 = lane * DPL;
  const bool owns = d0 < hd;
  constexpr int kAttnBatch = attn_batch<DPL>();
  // query heads a lane keeps accumulators for: the builder admits group * DPL <= kAttnMaxGroupDims
  constexpr int kG = kAttnMaxGroup < kAttnMaxGroupDims / DPL ? kAttnMaxGroup : kAttnMaxGroupDims / DPL;
  float kv[kAttnBatch][DPL], vv[kAttnBatch][DPL];
  load_cache_batch<DPL, kAttnBatch>(at, a, p0 + warp, p1, pos, kvh, d0, owns, kv, vv);
  if (wait) wait_dependencies(in, a, stamp);
  if (!active) return;
  float* qs = scratch;              // [group][hd], times the scale
  float* kn = qs + group * hd;      // the token's k and v
  float* vn = kn + hd;
  float* wacc = vn + hd;            // [warps][group][hd + 2]
  const int64_t kv_dim = int64_t{at.n_head_kv} * hd;
  for (int j = warp; j < group + (last ? 2 : 0); j += kConsumerWarps) {
    if (j < group) {
      const int h = kvh * group + j;
      prepare_head<DPL>(at.q + h * hd, at.bq != nullptr ? at.bq + h * hd : nullptr, at.q_norm, at.norm_eps, at, true, pos,
                   at.scale, qs + j * hd);
    } else if (j == group) {
      prepare_head<DPL>(at.k + kvh * hd, at.bk != nullptr ? at.bk + kvh * hd : nullptr, at.k_norm, at.norm_eps, at, true,
                   pos, 1.0f, kn);
    } else {
      prepare_head<DPL>(at.v + kvh * hd, at.bv != nullptr ? at.bv + kvh * hd : nullptr, nullptr, 0.0f, at, false, pos,
                   1.0f, vn);
    }
  }
  consumer_sync();
  stamp_now(stamp, kStampStaged);
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
  float m[kG], l[kG], acc[kG][DPL];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < DPL; ++j) acc[g][j] = 0.0f;
  }
  // attn_batch() positions per warp at a time, every load issued before any is used: under the weight stream a
  // cache row's load takes microseconds, so a warp's positions must not wait for each other. (The order each warp
  // folds its positions in is unchanged.)
  // Up to head dim 64 the next batch is requested before this one is folded (double-buffered registers); wider heads
  // would spill, and request theirs at the top of the iteration.
  constexpr bool kPipelined = DPL <= 2;
  constexpr int kNext = kPipelined ? kAttnBatch : 1;
  constexpr int64_t kStride = int64_t{kAttnBatch} * kConsumerWarps;
  for (int64_t pb = p0 + warp; pb < p1; pb += kStride) {
    float k_next[kNext][DPL], v_next[kNext][DPL];
    if constexpr (kPipelined) {
      if (pb + kStride < p1) load_cache_batch<DPL, kNext>(at, a, pb + kStride, p1, pos, kvh, d0, owns, k_next, v_next);
    } else {
      if (pb != p0 + warp) load_cache_batch<DPL, kAttnBatch>(at, a, pb, p1, pos, kvh, d0, owns, kv, vv);
    }
#pragma unroll
    for (int u = 0; u < kAttnBatch; ++u) {
      if (pb + u * kConsumerWarps == pos && owns) {  // the token's own k / v, from shared memory
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
          kv[u][j] = kn[d0 + j];
          vv[u][j] = vn[d0 + j];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kAttnBatch; ++u) {
      if (pb + u * kConsumerWarps >= p1) break;
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        if (g >= group) break;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < DPL; ++j) s = fmaf(owns ? qs[g * hd + d0 + j] : 0.0f, kv[u][j], s);
        s = warp_sum(s);
        if (at.softcap > 0.0f) s = at.softcap * tanhf(s / at.softcap);
        const float m_new = fmaxf(m[g], s);
        const float corr = expf(m[g] - m_new), pe = expf(s - m_new);
        l[g] = fmaf(l[g], corr, pe);
#pragma unroll
        for (int j = 0; j < DPL; ++j) acc[g][j] = fmaf(acc[g][j], corr, pe * vv[u][j]);
        m[g] = m_new;
      }
    }
    if (pb == p0 + warp) stamp_now(stamp, kStampFirst);  // the first batch's loads have been used: they arrived
    if constexpr (kPipelined) {
#pragma unroll
      for (int u = 0; u < kAttnBatch; ++u) {
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
          kv[u][j] = k_next[u][j];
          vv[u][j] = v_next[u][j];
        }
      }
    }
  }
  const int stride = hd + 2;
#pragma unroll
  for (int g = 0; g < kG; ++g) {
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

// stamp: as run_gemv's; the phases of the first tile are stamped. The dependencies are waited on inside the first
// tile (attention_tile); a CTA without a tile skips the instruction (consume).
__device__ void run_attention(const Instr& in, TileRange tr, const StepArgs& a, int64_t pos, float* scratch,
                              uint64_t* stamp) {
  const int hd = in.attn.head_dim;
  for (int i = 0; i < tr.count; ++i) {
    const int t = tr.first + i * tr.step;
    uint64_t* st = i == 0 ? stamp : nullptr;
    const bool wait = i == 0;
    if (hd <= 32) {
      attention_tile<1>(in, t, a, pos, scratch, st, wait);
    } else if (hd == 64) {
      attention_tile<2>(in, t, a, pos, scratch, st, wait);
    } else if (hd == 96) {
      attention_tile<3>(in, t, a, pos, scratch, st, wait);
    } else if (hd == 128) {
      attention_tile<4>(in, t, a, pos, scratch, st, wait);
    } else {
      attention_tile<8>(in, t, a, pos, scratch, st, wait);
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

__device__ void consume(const StepArgs& a, uint64_t* full, uint64_t* empty, float* xs, float* red) {
  const int tid = threadIdx.x;
  const auto cta = static_cast<int32_t>(blockIdx.x), grid = static_cast<int32_t>(gridDim.x);
  // the token's position, read once: later reads of it could miss L1 (the cache rows pass through it) and put an
  // L2 round trip in front of the loads that depend on it
  const int64_t pos = *a.pos;
  uint32_t k = 0;
  for (int i = 0; i < a.n_instrs; ++i) {
    const Instr& in = a.instrs[i];
    const TileRange tr = tiles_of(in, cta, grid);
    if (tr.count == 0) continue;
    uint64_t* stamp = a.trace != nullptr && tid == 0
                          ? a.trace + (static_cast<int64_t>(cta) * a.n_instrs + i) * kTraceStamps
                          : nullptr;  // consumer thread 0 stamps
    stamp_now(stamp, kStampStart);
    if (in.kind != OpKind::kAttention) wait_dependencies(in, a, stamp);  // the attention waits inside its first tile
    switch (in.kind) {
      case OpKind::kGemv: {
        const GemvInstr g = in.gemv;  // in registers: the stores through g.y cannot alias it
        stage_x(g, pos, xs, red);
        int8_t* xq = reinterpret_cast<int8_t*>(xs) + a.x_int8_offset;
        if (g.int8_x) quantize_x(g, xs, xq);
        stamp_now(stamp, kStampStaged);
        run_gemv(g, tr, k, a, full, empty, xs, xq, stamp);
        break;
      }
      case OpKind::kAttention:
        run_attention(in, tr, a, pos, xs, stamp);
        break;
      case OpKind::kRmsNorm:
        run_norm(in.norm, red);
        break;
      case OpKind::kGlu:
        run_glu(in.glu, tr);
        break;
    }
    // Each warp releases its own writes as soon as it is done (a release at GPU scope, cumulative over the warp's
    // lanes through __syncwarp): its fence waits for its stores alone, beside the other warps' fences. Shared
    // memory is not reused before the next instruction's barrier (wait_dependencies).
    __syncwarp();
    stamp_now(stamp, kStampComputed);
    if ((tid & 31) == 0) add_release(a.counters + i, 1);
    stamp_now(stamp, kStampDone);
  }
}

__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(const StepArgs a) {
#if !GA_PDK_DEVICE
  __trap();  // the host refuses devices below sm_80 (persistent_decode_unsupported_reason)
#endif
  extern __shared__ uint4 gemv_dynamic_smem[];  // the ring at offset 0 (StageBytes reads it), then x
  __shared__ uint64_t full[kMaxSlots], empty[kMaxSlots];
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
    consume(a, full, empty, reinterpret_cast<float*>(ring + a.x_offset), red);
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
    // The cooperative launch needs a CTA on every SM: registers and shared memory must leave room for one.
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_decode_kernel, kThreads,
                                                      static_cast<size_t>(limits->smem_bytes)) != cudaSuccess ||
        per_sm < 1) {
      (void)cudaGetLastError();
      return "the persistent decode kernel does not fit an SM (registers or shared memory)";
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
    status = cudaMemsetAsync(args.trace, 0, static_cast<size_t>(grid) * args.n_instrs * kTraceStamps * sizeof(uint64_t),
                             stream);
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
