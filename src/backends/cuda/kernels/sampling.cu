// Candidate selection for GPU sampling (contract and algorithm: sampling.h).
//
// Why radix select over 64-bit keys: a key is (order-preserving float bits << 32) | ~id, so keys are
// unique, "larger key" is exactly the CPU sampler's order (logit desc, id asc), and selecting the k
// largest keys needs no tie pass. The select walks the key from the top byte down: a 256-bin
// histogram (warp-aggregated shared atomics, since logits crowd into few top-byte bins) of the keys
// that still match the prefix found so far, then one warp finds the bin holding the k-th key. It
// stops as soon as that bin is taken whole, usually after 3-5 of the 8 bytes. The k survivors are
// compacted and bitonic-sorted in shared memory (k <= 1024).
//
// Exactness: the penalty arithmetic uses explicit round-to-nearest intrinsics (no FMA contraction),
// as the host computes it; -0.0 gets the key of +0.0 because the CPU compares them equal (ties then
// go to the lower id). The exp terms are summed in double from the same float differences the CPU
// rounds, so only the summation order differs.
#include <cfloat>
#include <climits>
#include <cmath>

#include "backends/cuda/kernels/sampling.h"

namespace ga::cuda {
namespace detail {
namespace {

using Key = unsigned long long;

constexpr int kSelectThreads = 256;  // per chunk of kSamplingChunk logits: 16 per thread
constexpr int kMergeThreads = 512;   // per row, over n_chunks * k chunk candidates
constexpr unsigned kFullMask = 0xffffffffu;

struct ChunkInfo {  // workspace [n_rows][n_chunks]
  float raw_max;
  float pen_max;
  int32_t nan;
  int32_t pad;
};

struct SelectShared {
  unsigned hist[256];
  Key prefix;
  Key mask;
  unsigned remaining;
  unsigned done;
  unsigned count;
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
template <int kThreads>
__device__ void apply_penalties(float* vals, int64_t base, int len, const SamplingSelectParams& p,
                                const SamplingRowParams& rp) {
  for (int j = threadIdx.x; j < rp.penalty_count; j += kThreads) {
    const int64_t local = static_cast<int64_t>(p.penalty_ids[rp.penalty_begin + j]) - base;
    if (local >= 0 && local < len) vals[local] = penalize(vals[local], p.penalty_counts[rp.penalty_begin + j], rp);
  }
}

template <int kThreads>
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

template <int kThreads>
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
// merge) waits for one round of L2 latency per batch instead of one per key.
constexpr int kKeyBatch = 8;

template <int kThreads, class KeyAt>
__device__ __forceinline__ void load_keys(int n, int base, KeyAt key_at, Key (&keys)[kKeyBatch]) {
#pragma unroll
  for (int j = 0; j < kKeyBatch; ++j) {
    const int i = base + j * kThreads + static_cast<int>(threadIdx.x);
    keys[j] = i < n ? key_at(i) : Key{0};
  }
}

// One radix step: the histogram of byte `shift` of the keys that match st.prefix under st.mask,
// then warp 0 narrows the prefix to the bin holding the st.remaining-th largest key.
template <int kThreads, class KeyAt>
__device__ void radix_step(int n, int shift, KeyAt key_at, SelectShared& st) {
  for (int i = threadIdx.x; i < 256; i += kThreads) st.hist[i] = 0;
  __syncthreads();
  const Key prefix = st.prefix, mask = st.mask;
  const int lane = threadIdx.x & 31;
  for (int base = 0; base < n; base += kThreads * kKeyBatch) {  // uniform trip count: the warp votes together
    Key keys[kKeyBatch];
    load_keys<kThreads>(n, base, key_at, keys);
#pragma unroll
    for (int j = 0; j < kKeyBatch; ++j) {
      const int i = base + j * kThreads + static_cast<int>(threadIdx.x);
      const bool match = i < n && (keys[j] & mask) == prefix;
      const unsigned digit = static_cast<unsigned>(keys[j] >> shift) & 0xffu;
      const unsigned active = __ballot_sync(kFullMask, match);
      if (match) {
        const unsigned peers = __match_any_sync(active, digit);
        if (lane == __ffs(peers) - 1) atomicAdd(&st.hist[digit], static_cast<unsigned>(__popc(peers)));
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    // Lane l owns bins 255-8l .. 255-8l-7 (descending), so an inclusive scan over lanes counts the
    // keys above each lane's bins.
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

// out[0..k_pad) = the k largest of key_at(0..n) sorted descending, then zero keys (below any real
// key). k <= n, k_pad a power of two >= k. Every thread of the block must call it.
template <int kThreads, class KeyAt>
__device__ void block_select_sorted(int n, int k, int k_pad, KeyAt key_at, SelectShared& st, Key* out) {
  if (threadIdx.x == 0) {
    st.prefix = 0;
    st.mask = 0;  // with mask 0 every key passes: n == k selects all
    st.remaining = static_cast<unsigned>(k);
    st.done = 0;
    st.count = 0;
  }
  __syncthreads();
  if (k < n) {
    for (int shift = 56; shift >= 0; shift -= 8) {
      radix_step<kThreads>(n, shift, key_at, st);
      if (st.done) break;  // uniform: read after radix_step's final barrier
    }
  }
  // Compaction: keys whose determined bytes are >= the prefix are exactly the k largest.
  const Key prefix = st.prefix, mask = st.mask;
  const int lane = threadIdx.x & 31;
  for (int base = 0; base < n; base += kThreads * kKeyBatch) {
    Key keys[kKeyBatch];
    load_keys<kThreads>(n, base, key_at, keys);
#pragma unroll
    for (int j = 0; j < kKeyBatch; ++j) {
      const int i = base + j * kThreads + static_cast<int>(threadIdx.x);
      const bool take = i < n && (keys[j] & mask) >= prefix;
      const unsigned votes = __ballot_sync(kFullMask, take);
      unsigned warp_base = 0;
      if (lane == 0 && votes != 0) warp_base = atomicAdd(&st.count, static_cast<unsigned>(__popc(votes)));
      warp_base = __shfl_sync(kFullMask, warp_base, 0);
      if (take) out[warp_base + __popc(votes & ((1u << lane) - 1u))] = keys[j];
    }
  }
  __syncthreads();
  for (int i = static_cast<int>(st.count) + threadIdx.x; i < k_pad; i += kThreads) out[i] = 0;
  __syncthreads();
  // Bitonic sort, descending.
  for (int size = 2; size <= k_pad; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < k_pad / 2; t += kThreads) {
        const int lo = 2 * t - (t & (stride - 1));
        const int hi = lo + stride;
        const bool descending = (lo & size) == 0;
        const Key a = out[lo], b = out[hi];
        if ((a < b) == descending) {
          out[lo] = b;
          out[hi] = a;
        }
      }
      __syncthreads();
    }
  }
}

__host__ __device__ inline int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// A chunk's logits into registers, all loads issued before any is used (one DRAM latency per chunk,
// not one per element).
constexpr int kPerThread = kSamplingChunk / kSelectThreads;

__device__ __forceinline__ void load_chunk(const float* x, int len, float (&v)[kPerThread]) {
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kSelectThreads + static_cast<int>(threadIdx.x);
    v[j] = i < len ? __ldg(x + i) : 0.0f;
  }
}

struct Workspace {
  Key* chunk_keys;       // [n_rows][n_chunks][k]
  ChunkInfo* info;       // [n_rows][n_chunks]
  double* partials;      // [n_rows][n_chunks][3]: sum_exp, sum_exp_temp, raw_sum_exp
};

__host__ __device__ inline size_t align256(size_t v) { return (v + 255) & ~size_t{255}; }

__host__ __device__ inline Workspace carve(void* base, int64_t n_rows, int64_t n_chunks, int32_t k) {
  char* p = static_cast<char*>(base);
  Workspace w;
  w.chunk_keys = reinterpret_cast<Key*>(p);
  p += align256(static_cast<size_t>(n_rows * n_chunks * k) * sizeof(Key));
  w.info = reinterpret_cast<ChunkInfo*>(p);
  p += align256(static_cast<size_t>(n_rows * n_chunks) * sizeof(ChunkInfo));
  w.partials = reinterpret_cast<double*>(p);
  return w;
}

int64_t chunks_of(int64_t n_vocab) { return (n_vocab + kSamplingChunk - 1) / kSamplingChunk; }

// ---- 1. per chunk: penalize, select the chunk's k best, chunk maxima and NaN flag ----
__global__ void __launch_bounds__(kSelectThreads) select_chunk_kernel(const SamplingSelectParams p, Workspace w) {
  extern __shared__ __align__(16) unsigned char dyn_smem[];
  Key* sorted = reinterpret_cast<Key*>(dyn_smem);                   // [k_pad]
  float* vals = reinterpret_cast<float*>(sorted + next_pow2(p.k));  // [kSamplingChunk]
  __shared__ SelectShared st;
  __shared__ float reduce_scratch[kSelectThreads / 32];
  const int n_chunks = static_cast<int>(gridDim.x);
  const int64_t row = blockIdx.y, chunk = blockIdx.x;
  const int64_t base = chunk * kSamplingChunk;
  const int len = static_cast<int>(min(static_cast<int64_t>(kSamplingChunk), p.n_vocab - base));
  const SamplingRowParams rp = p.rows[row];
  const float* x = p.logits + row * p.ld + base;

  float raw_max = -INFINITY;
  int nan = 0;
  float v[kPerThread];
  load_chunk(x, len, v);
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kSelectThreads + static_cast<int>(threadIdx.x);
    if (i < len) {
      vals[i] = v[j];
      nan |= isnan(v[j]) ? 1 : 0;
      raw_max = fmaxf(raw_max, v[j]);
    }
  }
  nan = __syncthreads_or(nan);
  raw_max = block_max<kSelectThreads>(raw_max, reduce_scratch);
  apply_penalties<kSelectThreads>(vals, base, len, p, rp);
  __syncthreads();

  const int kc = min(p.k, len);
  block_select_sorted<kSelectThreads>(len, kc, next_pow2(kc),
                                      [&](int i) { return make_key(vals[i], static_cast<int32_t>(base + i)); }, st,
                                      sorted);
  Key* out = w.chunk_keys + (row * n_chunks + chunk) * p.k;
  for (int i = threadIdx.x; i < p.k; i += kSelectThreads) out[i] = i < kc ? sorted[i] : Key{0};
  if (threadIdx.x == 0) w.info[row * n_chunks + chunk] = {raw_max, key_logit(sorted[0]), nan, 0};
}

// ---- 2. per chunk: the exp sums against the row's maxima, in double ----
__global__ void __launch_bounds__(kSelectThreads) sums_chunk_kernel(const SamplingSelectParams p, Workspace w) {
  __shared__ float vals[kSamplingChunk];
  __shared__ float max_scratch[kSelectThreads / 32];
  __shared__ double sum_scratch[kSelectThreads / 32];
  const int n_chunks = static_cast<int>(gridDim.x);
  const int64_t row = blockIdx.y, chunk = blockIdx.x;
  const int64_t base = chunk * kSamplingChunk;
  const int len = static_cast<int>(min(static_cast<int64_t>(kSamplingChunk), p.n_vocab - base));
  const SamplingRowParams rp = p.rows[row];
  const float* x = p.logits + row * p.ld + base;

  float pen_max = -INFINITY, raw_max = -INFINITY;
  for (int c = threadIdx.x; c < n_chunks; c += kSelectThreads) {
    pen_max = fmaxf(pen_max, w.info[row * n_chunks + c].pen_max);
    raw_max = fmaxf(raw_max, w.info[row * n_chunks + c].raw_max);
  }
  pen_max = block_max<kSelectThreads>(pen_max, max_scratch);
  raw_max = block_max<kSelectThreads>(raw_max, max_scratch);

  double raw_sum = 0.0;
  float v[kPerThread];
  load_chunk(x, len, v);
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kSelectThreads + static_cast<int>(threadIdx.x);
    if (i < len) {
      vals[i] = v[j];
      if (rp.raw_stats) raw_sum += exp(__dsub_rn(static_cast<double>(v[j]), static_cast<double>(raw_max)));
    }
  }
  __syncthreads();
  apply_penalties<kSelectThreads>(vals, base, len, p, rp);
  __syncthreads();
  const bool at_temperature = rp.temperature > 0.0f && rp.temperature != 1.0f;
  const double temperature = static_cast<double>(rp.temperature);
  double sum = 0.0, sum_temp = 0.0;
  for (int i = threadIdx.x; i < len; i += kSelectThreads) {
    const double d = static_cast<double>(__fsub_rn(vals[i], pen_max));  // rounded in float, as the CPU does
    sum += exp(d);
    if (at_temperature) sum_temp += exp(__ddiv_rn(d, temperature));
  }
  sum = block_sum<kSelectThreads>(sum, sum_scratch);
  sum_temp = at_temperature ? block_sum<kSelectThreads>(sum_temp, sum_scratch) : sum;
  raw_sum = rp.raw_stats ? block_sum<kSelectThreads>(raw_sum, sum_scratch) : 0.0;
  if (threadIdx.x == 0) {
    double* out = w.partials + (row * n_chunks + chunk) * 3;
    out[0] = sum;
    out[1] = sum_temp;
    out[2] = raw_sum;
  }
}

// ---- 3. per row: the k best of the chunks' candidates, the outputs, the row's sums ----
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const SamplingSelectParams p, Workspace w, int n_chunks) {
  extern __shared__ __align__(16) unsigned char dyn_smem[];
  Key* sorted = reinterpret_cast<Key*>(dyn_smem);  // [k_pad]
  __shared__ SelectShared st;
  const int64_t row = blockIdx.x;
  const Key* keys = w.chunk_keys + row * n_chunks * p.k;
  block_select_sorted<kMergeThreads>(n_chunks * p.k, p.k, next_pow2(p.k), [&](int i) { return keys[i]; }, st,
                                     sorted);
  for (int i = threadIdx.x; i < p.k; i += kMergeThreads) {
    const Key key = sorted[i];
    const int32_t id = key_id(key);
    p.out_ids[row * p.k + i] = id;
    p.out_logits[row * p.k + i] = key_logit(key);
    p.out_raw_logits[row * p.k + i] = p.logits[row * p.ld + id];
  }
  if (threadIdx.x == 0) {
    SamplingRowStats s;
    s.max = -INFINITY;
    s.raw_max = -INFINITY;
    for (int c = 0; c < n_chunks; ++c) {  // fixed order: the same sums on every run
      const ChunkInfo info = w.info[row * n_chunks + c];
      const double* part = w.partials + (row * n_chunks + c) * 3;
      s.max = fmaxf(s.max, info.pen_max);
      s.raw_max = fmaxf(s.raw_max, info.raw_max);
      s.nan |= info.nan;
      s.sum_exp += part[0];
      s.sum_exp_temp += part[1];
      s.raw_sum_exp += part[2];
    }
    p.out_stats[row] = s;
  }
}

}  // namespace
}  // namespace detail

size_t sampling_workspace_bytes(int64_t n_rows, int64_t n_vocab, int32_t k) {
  const int64_t n_chunks = detail::chunks_of(n_vocab);
  return detail::align256(static_cast<size_t>(n_rows * n_chunks * k) * sizeof(detail::Key)) +
         detail::align256(static_cast<size_t>(n_rows * n_chunks) * sizeof(detail::ChunkInfo)) +
         static_cast<size_t>(n_rows * n_chunks * 3) * sizeof(double);
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
  const int64_t n_chunks = detail::chunks_of(p.n_vocab);
  const detail::Workspace w = detail::carve(p.workspace, p.n_rows, n_chunks, p.k);
  const size_t sorted_bytes = static_cast<size_t>(detail::next_pow2(p.k)) * sizeof(detail::Key);
  const dim3 chunk_grid(static_cast<unsigned>(n_chunks), static_cast<unsigned>(p.n_rows));
  detail::select_chunk_kernel<<<chunk_grid, detail::kSelectThreads, sorted_bytes + kSamplingChunk * sizeof(float),
                                stream>>>(p, w);
  detail::sums_chunk_kernel<<<chunk_grid, detail::kSelectThreads, 0, stream>>>(p, w);
  detail::merge_kernel<<<static_cast<unsigned>(p.n_rows), detail::kMergeThreads, sorted_bytes, stream>>>(
      p, w, static_cast<int>(n_chunks));
  return cudaGetLastError();
}

}  // namespace ga::cuda
