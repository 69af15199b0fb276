// Candidate selection for GPU sampling (contract and algorithm: sampling.h).
//
// Why two kernels and not one or three: the exp terms must be rounded against the ROW's penalized
// max (the CPU rounds float(q - max) with the global max; a per-chunk max with a later rescale is
// not exact), so every block of a row has to wait for the whole row's max. A grid-wide wait inside
// one kernel needs co-residency guarantees; a second launch costs about a microsecond and is always
// safe. The former third launch (the merge) is gone: the last block of each row to finish kernel 2
// (an atomic ticket) merges the row's chunk candidates while the other blocks have already retired.
//
// Why radix select over 64-bit keys: a key is (order-preserving float bits << 32) | ~id, so keys are
// unique, "larger key" is exactly the CPU sampler's order (logit desc, id asc), and selecting the k
// largest keys needs no tie pass. The select walks the key from the top byte down with a 256-bin
// shared histogram (plain shared atomics: __match_any_sync aggregation was the slow part of v1/v2)
// and stops as soon as the bin holding the k-th key is taken whole, usually after 3 of the 8 bytes.
// Chunk blocks leave their k survivors unsorted; only the row's final k are sorted (rank sort for
// k <= 128: one barrier instead of a bitonic network's 15-55).
//
// Why the merge filters first: every full chunk (>= k logits) contributes k keys, so the row's k-th
// key is at least the largest of those chunks' k-th keys (T). Keys below T cannot be selected; the
// survivors (typically 1-3 k) are staged in shared memory, so the merge's radix passes read shared
// memory instead of L2. More survivors than the staging holds: the merge reads the chunk lists in L2.
//
// Chunk length: 4096 logits per block for large batches; halved (down to 1024) while the launch would
// have fewer than kTargetBlocks blocks and the row's n_chunks * k candidates still fit the merge's
// shared staging, so one row still spreads its double-precision exp work over tens of SMs.
//
// Exactness: the penalty arithmetic uses explicit round-to-nearest intrinsics (no FMA contraction),
// as the host computes it; -0.0 gets the key of +0.0 because the CPU compares them equal (ties then
// go to the lower id). The exp terms are summed in double from the same float differences the CPU
// rounds, so only the summation order differs.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>

#include "backends/cuda/kernels/sampling.h"

namespace ga::cuda {
namespace detail {
namespace {

using Key = unsigned long long;

constexpr int kThreads = 256;                        // every kernel: one block per (chunk, row)
constexpr int kPerThread = kSamplingChunk / kThreads;  // logits per thread at the largest chunk
constexpr int kMinChunk = 1024;
constexpr int64_t kTargetBlocks = 256;               // about two blocks per SM of an H100/H200
constexpr int kMaxStage = 4096;                      // survivor keys the merge stages in shared memory (32 KB)
constexpr int kRankSortMax = 128;
constexpr unsigned kFullMask = 0xffffffffu;

struct ChunkMax {  // kernel 1 -> kernel 2, [n_rows][n_chunks]
  float raw_max;
  float pen_max;
  int32_t nan;
  int32_t pad;
};

struct ChunkPart {  // kernel 2 -> the row's merging block, [n_rows][n_chunks]
  Key kth;          // the chunk's smallest selected key (meaningful when the chunk holds >= k logits)
  double sum_exp;
  double sum_exp_temp;
  double raw_sum_exp;
};

struct SelectShared {
  unsigned hist[256];
  Key prefix;
  Key mask;
  Key min_key;
  unsigned remaining;
  unsigned done;
  unsigned count;
  unsigned last;
};

__device__ __forceinline__ Key make_key(float v, int32_t id) {
  const unsigned bits = __float_as_uint(v == 0.0f ? 0.0f : v);  // -0 == +0 for the CPU comparison
  const unsigned ord = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<Key>(ord) << 32) | static_cast<Key>(~static_cast<unsigned>(id));
}
__device__ __forceinline__ float key_logit(Key key) {
  const unsigned ord = static_cast<unsigned>(key >> 32);
  return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7fffffffu) : ~ord);
}
__device__ __forceinline__ int32_t key_id(Key key) {
  return static_cast<int32_t>(~static_cast<unsigned>(key & 0xffffffffull));
}

// The sampler's penalty, rounded step by step like the host (sampler.cpp penalize_logit).
__device__ __forceinline__ float penalize(float logit, int32_t count, const SamplingRowParams& rp) {
  const float scaled = logit > 0.0f ? __fdiv_rn(logit, rp.repeat_penalty) : __fmul_rn(logit, rp.repeat_penalty);
  const float subtract = __fadd_rn(__fmul_rn(static_cast<float>(count), rp.frequency_penalty), rp.presence_penalty);
  return __fsub_rn(scaled, subtract);
}

// vals[0..len) are logits base..base+len of a row: applies the row's penalty entries that fall there.
__device__ void apply_penalties(float* vals, int64_t base, int len, const SamplingSelectParams& p,
                                const SamplingRowParams& rp) {
  for (int j = threadIdx.x; j < rp.penalty_count; j += kThreads) {
    const int64_t local = static_cast<int64_t>(p.penalty_ids[rp.penalty_begin + j]) - base;
    if (local >= 0 && local < len) vals[local] = penalize(vals[local], p.penalty_counts[rp.penalty_begin + j], rp);
  }
}

__device__ float block_max(float v, float* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = -INFINITY;
  for (int w = 0; w < kThreads / 32; ++w) v = fmaxf(v, scratch[w]);
  __syncthreads();  // scratch is reused by the caller
  return v;
}

__device__ double block_sum(double v, double* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) v += scratch[w];  // fixed order: deterministic
  __syncthreads();
  return v;
}

// Keys are read kKeyBatch per thread before any is used, so a pass over keys in global memory (the
// merge's fallback) waits for one round of L2 latency per batch instead of one per key.
constexpr int kKeyBatch = 8;

template <class KeyAt>
__device__ __forceinline__ void load_keys(int n, int base, KeyAt key_at, Key (&keys)[kKeyBatch]) {
#pragma unroll
  for (int j = 0; j < kKeyBatch; ++j) {
    const int i = base + j * kThreads + static_cast<int>(threadIdx.x);
    keys[j] = i < n ? key_at(i) : Key{0};
  }
}

// One radix step: the histogram of byte `shift` of the keys that match st.prefix under st.mask,
// then warp 0 narrows the prefix to the bin holding the st.remaining-th largest key.
template <class KeyAt>
__device__ void radix_step(int n, int shift, KeyAt key_at, SelectShared& st) {
  st.hist[threadIdx.x] = 0;  // kThreads == 256 bins
  __syncthreads();
  const Key prefix = st.prefix, mask = st.mask;
  for (int base = 0; base < n; base += kThreads * kKeyBatch) {
    Key keys[kKeyBatch];
    load_keys(n, base, key_at, keys);
#pragma unroll
    for (int j = 0; j < kKeyBatch; ++j) {
      const int i = base + j * kThreads + static_cast<int>(threadIdx.x);
      if (i < n && (keys[j] & mask) == prefix) atomicAdd(&st.hist[static_cast<unsigned>(keys[j] >> shift) & 0xffu], 1u);
    }
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    // Lane l owns bins 255-8l .. 255-8l-7 (descending), so an inclusive scan over lanes counts the
    // keys above each lane's bins.
    const int lane = static_cast<int>(threadIdx.x);
    unsigned local = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) local += st.hist[255 - 8 * lane - j];
    unsigned inclusive = local;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const unsigned t = __shfl_up_sync(kFullMask, inclusive, off);
      if (lane >= off) inclusive += t;
    }
    const unsigned remaining = st.remaining;
    const unsigned owner = __ffs(__ballot_sync(kFullMask, inclusive >= remaining)) - 1;
    __syncwarp();  // every lane has read st.remaining before the owner rewrites it
    if (static_cast<unsigned>(lane) == owner) {
      unsigned above = inclusive - local;
      for (int j = 0; j < 8; ++j) {
        const unsigned bin = 255 - 8 * lane - j;
        const unsigned h = st.hist[bin];
        if (above + h >= remaining) {
          st.prefix |= static_cast<Key>(bin) << shift;
          st.mask |= Key{0xff} << shift;
          st.remaining = remaining - above;
          st.done = h == remaining - above;  // the whole bin is taken: the prefix decides
          break;
        }
        above += h;
      }
    }
  }
  __syncthreads();
}

// Leaves in (st.prefix, st.mask) the test "(key & mask) >= prefix" that holds for exactly the k
// largest of key_at(0..n). k <= n. Every thread of the block must call it.
template <class KeyAt>
__device__ void radix_threshold(int n, int k, KeyAt key_at, SelectShared& st) {
  if (threadIdx.x == 0) {
    st.prefix = 0;
    st.mask = 0;  // with mask 0 every key passes: n == k selects all
    st.remaining = static_cast<unsigned>(k);
    st.done = 0;
  }
  __syncthreads();
  if (k < n) {
    for (int shift = 56; shift >= 0; shift -= 8) {
      radix_step(n, shift, key_at, st);
      if (st.done) break;  // uniform: read after radix_step's final barrier
    }
  }
}

// Calls sink(slot, key) for every key of key_at(0..n) with take(key), slots 0, 1, ... in no
// particular order; st.count ends as the number taken. Every thread must call it.
template <class KeyAt, class Take, class Sink>
__device__ void block_compact(int n, KeyAt key_at, Take take, Sink sink, SelectShared& st) {
  if (threadIdx.x == 0) st.count = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int base = 0; base < n; base += kThreads * kKeyBatch) {
    Key keys[kKeyBatch];
    load_keys(n, base, key_at, keys);
#pragma unroll
    for (int j = 0; j < kKeyBatch; ++j) {
      const int i = base + j * kThreads + static_cast<int>(threadIdx.x);
      const bool taken = i < n && take(keys[j]);
      const unsigned votes = __ballot_sync(kFullMask, taken);
      unsigned warp_base = 0;
      if (lane == 0 && votes != 0) warp_base = atomicAdd(&st.count, static_cast<unsigned>(__popc(votes)));
      warp_base = __shfl_sync(kFullMask, warp_base, 0);
      if (taken) sink(warp_base + __popc(votes & ((1u << lane) - 1u)), keys[j]);
    }
  }
  __syncthreads();
}

// The k largest of key_at(0..n) into sel[0..k), unsorted. k <= n.
template <class KeyAt>
__device__ void block_select(int n, int k, KeyAt key_at, SelectShared& st, Key* sel) {
  radix_threshold(n, k, key_at, st);
  const Key prefix = st.prefix, mask = st.mask;
  block_compact(
      n, key_at, [&](Key key) { return (key & mask) >= prefix; }, [&](unsigned slot, Key key) { sel[slot] = key; },
      st);
}

// keys[0..k) (unique) sorted descending, returned in place or in `spare` ([k] when k <= kRankSortMax).
__device__ Key* block_sort_desc(Key* keys, int k, Key* spare) {
  if (k <= kRankSortMax) {
    for (int i = threadIdx.x; i < k; i += kThreads) {
      const Key x = keys[i];
      int rank = 0;
      for (int j = 0; j < k; ++j) rank += keys[j] > x ? 1 : 0;
      spare[rank] = x;
    }
    __syncthreads();
    return spare;
  }
  int k_pad = 1;
  while (k_pad < k) k_pad <<= 1;
  for (int i = k + threadIdx.x; i < k_pad; i += kThreads) keys[i] = 0;  // below any real key
  __syncthreads();
  for (int size = 2; size <= k_pad; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < k_pad / 2; t += kThreads) {
        const int lo = 2 * t - (t & (stride - 1));
        const int hi = lo + stride;
        const bool descending = (lo & size) == 0;
        const Key a = keys[lo], b = keys[hi];
        if ((a < b) == descending) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
      __syncthreads();
    }
  }
  return keys;
}

__host__ __device__ inline int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// A chunk's logits into registers, all loads issued before any is used (one DRAM latency per chunk,
// not one per element).
__device__ __forceinline__ void load_chunk(const float* x, int len, float (&v)[kPerThread]) {
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    v[j] = i < len ? __ldg(x + i) : 0.0f;
  }
}

struct Workspace {
  Key* chunk_keys;   // [n_rows][n_chunks][k], unsorted, zero keys past a short chunk's length
  ChunkMax* maxima;  // [n_rows][n_chunks]
  ChunkPart* parts;  // [n_rows][n_chunks]
  unsigned* tickets; // [n_rows]: blocks of the row done with kernel 2 (zeroed by kernel 1)
};

__host__ __device__ inline size_t align256(size_t v) { return (v + 255) & ~size_t{255}; }

inline int64_t chunks_of(int64_t n_vocab, int64_t chunk) { return (n_vocab + chunk - 1) / chunk; }

int chunk_length(int64_t n_rows, int64_t n_vocab, int32_t k) {
  int chunk = kSamplingChunk;
  while (chunk > kMinChunk && chunk / 2 >= k && n_rows * chunks_of(n_vocab, chunk) < kTargetBlocks &&
         chunks_of(n_vocab, chunk / 2) * k <= kMaxStage) {
    chunk /= 2;  // more blocks per row, as long as the row's merge input still fits the shared staging
  }
  return chunk;
}

// Chunk slots any launch of <= n_rows rows needs: halving happens only below kTargetBlocks blocks,
// and each halving at most doubles them, so a halved plan has < 2 * kTargetBlocks slots.
int64_t slot_bound(int64_t n_rows, int64_t n_vocab) {
  return std::max(n_rows * chunks_of(n_vocab, kSamplingChunk),
                  std::min(n_rows * chunks_of(n_vocab, kMinChunk), 2 * kTargetBlocks));
}

Workspace carve(void* base, int64_t slots, int64_t n_rows, int32_t k) {
  char* p = static_cast<char*>(base);
  Workspace w;
  w.chunk_keys = reinterpret_cast<Key*>(p);
  p += align256(static_cast<size_t>(slots * k) * sizeof(Key));
  w.maxima = reinterpret_cast<ChunkMax*>(p);
  p += align256(static_cast<size_t>(slots) * sizeof(ChunkMax));
  w.parts = reinterpret_cast<ChunkPart*>(p);
  p += align256(static_cast<size_t>(slots) * sizeof(ChunkPart));
  w.tickets = reinterpret_cast<unsigned*>(p);
  (void)n_rows;
  return w;
}

size_t workspace_bytes(int64_t slots, int64_t n_rows, int32_t k) {
  return align256(static_cast<size_t>(slots * k) * sizeof(Key)) +
         align256(static_cast<size_t>(slots) * sizeof(ChunkMax)) +
         align256(static_cast<size_t>(slots) * sizeof(ChunkPart)) + static_cast<size_t>(n_rows) * sizeof(unsigned);
}

// The merge stages up to stage_cap survivor keys in the space the chunk's floats used: all of the
// row's n_chunks * k keys when they fit in 2048..kMaxStage, else what the floor filter leaves.
__host__ __device__ inline int stage_capacity(int64_t n_chunks, int32_t k) {
  return static_cast<int>(n_chunks * k < 2048 ? 2048 : (n_chunks * k > kMaxStage ? kMaxStage : n_chunks * k));
}
__host__ __device__ inline size_t region_bytes(int chunk_len, int stage_cap) {
  const size_t floats = static_cast<size_t>(chunk_len) * sizeof(float);
  const size_t keys = static_cast<size_t>(stage_cap) * sizeof(Key);
  return floats > keys ? floats : keys;
}

// ---- 1. per chunk: raw and penalized maxima, NaN flag; resets the row's ticket ----
__global__ void __launch_bounds__(kThreads) chunk_max_kernel(const SamplingSelectParams p, Workspace w, int chunk_len) {
  __shared__ float vals[kSamplingChunk];
  __shared__ float scratch[kThreads / 32];
  const int n_chunks = static_cast<int>(gridDim.x);
  const int64_t row = blockIdx.y, chunk = blockIdx.x;
  const int64_t base = chunk * chunk_len;
  const int len = static_cast<int>(min(static_cast<int64_t>(chunk_len), p.n_vocab - base));
  const SamplingRowParams rp = p.rows[row];
  float v[kPerThread];
  load_chunk(p.logits + row * p.ld + base, len, v);
  float raw_max = -INFINITY;
  int nan = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    if (i < len) {
      nan |= isnan(v[j]) ? 1 : 0;
      raw_max = fmaxf(raw_max, v[j]);
    }
  }
  nan = __syncthreads_or(nan);
  raw_max = block_max(raw_max, scratch);
  float pen_max = raw_max;
  if (rp.penalty_count > 0) {  // uniform per block
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = j * kThreads + static_cast<int>(threadIdx.x);
      if (i < len) vals[i] = v[j];
    }
    __syncthreads();
    apply_penalties(vals, base, len, p, rp);
    __syncthreads();
    pen_max = -INFINITY;
    for (int i = threadIdx.x; i < len; i += kThreads) pen_max = fmaxf(pen_max, vals[i]);
    pen_max = block_max(pen_max, scratch);
  }
  if (threadIdx.x == 0) {
    w.maxima[row * n_chunks + chunk] = {raw_max, pen_max, nan, 0};
    if (chunk == 0) w.tickets[row] = 0;
  }
}

// ---- 2. per chunk: exp sums against the row's maxima, the chunk's k best; the row's last block merges ----
// 4 blocks per SM: 64 registers, no spills (5 would spill).
__global__ void __launch_bounds__(kThreads, 4)
    select_sum_kernel(const SamplingSelectParams p, Workspace w, int chunk_len, int stage_cap) {
  // Dynamic shared memory (select_sum_smem): [chunk floats | merge survivors] then the final selection [k_pad].
  extern __shared__ __align__(16) unsigned char dyn_smem[];
  float* vals = reinterpret_cast<float*>(dyn_smem);
  Key* staged = reinterpret_cast<Key*>(dyn_smem);
  Key* sel = reinterpret_cast<Key*>(dyn_smem + region_bytes(chunk_len, stage_cap));
  __shared__ SelectShared st;
  __shared__ float max_scratch[kThreads / 32];
  __shared__ double sum_scratch[kThreads / 32];
  const int n_chunks = static_cast<int>(gridDim.x);
  const int64_t row = blockIdx.y, chunk = blockIdx.x;
  const int64_t base = chunk * chunk_len;
  const int len = static_cast<int>(min(static_cast<int64_t>(chunk_len), p.n_vocab - base));
  const SamplingRowParams rp = p.rows[row];
  const int k = p.k;

  float v[kPerThread];
  load_chunk(p.logits + row * p.ld + base, len, v);
  float pen_max = -INFINITY, raw_max = -INFINITY;
  for (int c = threadIdx.x; c < n_chunks; c += kThreads) {
    const ChunkMax m = w.maxima[row * n_chunks + c];
    pen_max = fmaxf(pen_max, m.pen_max);
    raw_max = fmaxf(raw_max, m.raw_max);
  }
  pen_max = block_max(pen_max, max_scratch);
  raw_max = block_max(raw_max, max_scratch);

  double raw_sum = 0.0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    if (i < len) {
      vals[i] = v[j];
      if (rp.raw_stats) raw_sum += exp(__dsub_rn(static_cast<double>(v[j]), static_cast<double>(raw_max)));
    }
  }
  __syncthreads();
  apply_penalties(vals, base, len, p, rp);
  __syncthreads();
  const bool at_temperature = rp.temperature > 0.0f && rp.temperature != 1.0f;
  const double temperature = static_cast<double>(rp.temperature);
  double sum = 0.0, sum_temp = 0.0;
  for (int i = threadIdx.x; i < len; i += kThreads) {
    const double d = static_cast<double>(__fsub_rn(vals[i], pen_max));  // rounded in float, as the CPU does
    sum += exp(d);
    if (at_temperature) sum_temp += exp(__ddiv_rn(d, temperature));
  }
  sum = block_sum(sum, sum_scratch);
  sum_temp = at_temperature ? block_sum(sum_temp, sum_scratch) : sum;
  raw_sum = rp.raw_stats ? block_sum(raw_sum, sum_scratch) : 0.0;

  // The chunk's k best, unsorted, straight into its workspace slot.
  const int kc = min(k, len);
  Key* out = w.chunk_keys + (row * n_chunks + chunk) * k;
  auto chunk_key = [&](int i) { return make_key(vals[i], static_cast<int32_t>(base + i)); };
  radix_threshold(len, kc, chunk_key, st);
  if (threadIdx.x == 0) st.min_key = ~Key{0};
  const Key prefix = st.prefix, mask = st.mask;  // radix_threshold ended with a barrier
  block_compact(
      len, chunk_key, [&](Key key) { return (key & mask) >= prefix; },
      [&](unsigned slot, Key key) {
        out[slot] = key;
        atomicMin(&st.min_key, key);
      },
      st);
  for (int i = kc + static_cast<int>(threadIdx.x); i < k; i += kThreads) out[i] = 0;
  if (threadIdx.x == 0) w.parts[row * n_chunks + chunk] = {st.min_key, sum, sum_temp, raw_sum};

  // Ticket: the row's last block to get here sees every other block's slot (fence before, fence after).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) st.last = atomicAdd(&w.tickets[row], 1u) == static_cast<unsigned>(n_chunks - 1);
  __syncthreads();
  if (!st.last) return;
  __threadfence();

  // ---- the row's merge ----
  const ChunkPart* parts = w.parts + row * n_chunks;
  const Key* row_keys = w.chunk_keys + row * n_chunks * k;
  Key floor_key = 0;  // the largest k-th key of the full chunks: no row candidate lies below it
  for (int c = threadIdx.x; c < n_chunks; c += kThreads) {
    const int64_t c_len = min(static_cast<int64_t>(chunk_len), p.n_vocab - c * static_cast<int64_t>(chunk_len));
    if (c_len >= k) floor_key = max(floor_key, __ldcg(&parts[c].kth));
  }
  if (threadIdx.x == 0) st.min_key = 0;
  __syncthreads();
  atomicMax(&st.min_key, floor_key);
  __syncthreads();
  floor_key = st.min_key;
  const int n = n_chunks * k;
  auto global_key = [&](int i) { return __ldcg(row_keys + i); };
  block_compact(
      n, global_key, [&](Key key) { return key >= floor_key; },
      [&](unsigned slot, Key key) {
        if (slot < static_cast<unsigned>(stage_cap)) staged[slot] = key;
      },
      st);
  const int n_staged = static_cast<int>(st.count);
  if (n_staged <= stage_cap) {
    block_select(n_staged, k, [&](int i) { return staged[i]; }, st, sel);
  } else {
    block_select(n, k, global_key, st, sel);
  }
  const Key* sorted = block_sort_desc(sel, k, staged);  // staged is free again

  for (int i = threadIdx.x; i < k; i += kThreads) {
    const Key key = sorted[i];
    const int32_t id = key_id(key);
    p.out_ids[row * k + i] = id;
    p.out_logits[row * k + i] = key_logit(key);
    p.out_raw_logits[row * k + i] = p.logits[row * p.ld + id];
  }
  __syncthreads();  // the rank sort's output lives in `staged`
  // The row's sums: the chunk partials are loaded by all threads at once (one L2 round trip, not
  // n_chunks), then added in chunk order (the same sums on every run). `staged` is free again.
  double* partial_sums = reinterpret_cast<double*>(staged);  // [3][n_chunks] when it fits
  const bool fits = 3 * n_chunks * sizeof(double) <= region_bytes(chunk_len, stage_cap);
  int nan = 0;
  for (int c = threadIdx.x; c < n_chunks; c += kThreads) {
    nan |= w.maxima[row * n_chunks + c].nan;
    if (fits) {
      partial_sums[c] = __ldcg(&parts[c].sum_exp);
      partial_sums[n_chunks + c] = __ldcg(&parts[c].sum_exp_temp);
      partial_sums[2 * n_chunks + c] = __ldcg(&parts[c].raw_sum_exp);
    }
  }
  nan = __syncthreads_or(nan);
  if (threadIdx.x == 0) {
    SamplingRowStats s;
    s.max = pen_max == 0.0f ? 0.0f : pen_max;  // -0.0 reported as +0.0, like the candidates
    s.raw_max = raw_max;
    s.nan = nan;
    for (int c = 0; c < n_chunks; ++c) {
      s.sum_exp += fits ? partial_sums[c] : __ldcg(&parts[c].sum_exp);
      s.sum_exp_temp += fits ? partial_sums[n_chunks + c] : __ldcg(&parts[c].sum_exp_temp);
      s.raw_sum_exp += fits ? partial_sums[2 * n_chunks + c] : __ldcg(&parts[c].raw_sum_exp);
    }
    p.out_stats[row] = s;
  }
}

}  // namespace
}  // namespace detail

size_t sampling_workspace_bytes(int64_t n_rows, int64_t n_vocab, int32_t k) {
  return detail::workspace_bytes(detail::slot_bound(n_rows, n_vocab), n_rows, k);
}

const char* sampling_select_unsupported_reason(const SamplingSelectParams& p) {
  if (p.logits == nullptr || p.rows == nullptr) return "logits and rows must be device pointers";
  if (p.out_ids == nullptr || p.out_logits == nullptr || p.out_raw_logits == nullptr || p.out_stats == nullptr) {
    return "every output must be a device pointer";
  }
  if (p.n_rows < 1 || p.n_rows > 65535) return "n_rows must be in [1, 65535]";
  if (p.n_vocab < 1 || p.n_vocab > kSamplingMaxVocab) return "n_vocab must be in [1, 4194304]";
  if (p.ld < p.n_vocab) return "ld < n_vocab";
  if (p.k < 1 || p.k > kSamplingMaxCandidates || p.k > p.n_vocab) return "k must be in [1, min(n_vocab, 1024)]";
  if (p.workspace == nullptr || p.workspace_bytes < sampling_workspace_bytes(p.n_rows, p.n_vocab, p.k)) {
    return "workspace smaller than sampling_workspace_bytes()";
  }
  if (reinterpret_cast<uintptr_t>(p.workspace) % 16 != 0) return "workspace must be 16-byte aligned";
  return nullptr;
}

cudaError_t sampling_select(const SamplingSelectParams& p, cudaStream_t stream) {
  if (sampling_select_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  const int chunk_len = detail::chunk_length(p.n_rows, p.n_vocab, p.k);
  const int64_t n_chunks = detail::chunks_of(p.n_vocab, chunk_len);
  const detail::Workspace w =
      detail::carve(p.workspace, detail::slot_bound(p.n_rows, p.n_vocab), p.n_rows, p.k);
  const dim3 grid(static_cast<unsigned>(n_chunks), static_cast<unsigned>(p.n_rows));
  detail::chunk_max_kernel<<<grid, detail::kThreads, 0, stream>>>(p, w, chunk_len);
  const int stage_cap = detail::stage_capacity(n_chunks, p.k);
  const size_t smem = detail::region_bytes(chunk_len, stage_cap) +
                      static_cast<size_t>(detail::next_pow2(p.k)) * sizeof(detail::Key);
  detail::select_sum_kernel<<<grid, detail::kThreads, smem, stream>>>(p, w, chunk_len, stage_cap);
  return cudaGetLastError();
}

}  // namespace ga::cuda
