// Attention benchmark on the GPU (backends/cuda/kernels/attention.h) for the Llama-2-7B heads (32
// query / 32 KV heads) and the Llama-3-8B heads (32 / 8), head_dim 128, f16 KV cache:
//  * decode: 1 query token (and 8 for the Llama-3 shape) over a cache of 4096 and 32768 positions,
//    reported as GB/s of K/V bytes read and as a fraction of the device-to-device copy bandwidth
//    measured in the same run (decode is a stream over the cache: the copy is its ceiling);
//  * prefill: 512 and 2048 causal tokens from position 0 (and 512 after 3584 cached positions), reported as TFLOP/s (4 * head_dim FLOPs per
//    visible (query head, key) pair: Q K^T and P V) and as a fraction of a cuBLAS f16 GEMM
//    (8192^3, f32 accumulate) measured in the same run, a practical mma ceiling;
//  * paged (the multi-sequence form the Scheduler uses): batches of 1, 16, 32, 64 one-token decode
//    runs over 4096 positions each, Llama-3 heads (32/8), block_size 16 with shuffled block tables,
//    as KV-read GB/s and % of the copy bandwidth (the target: >= 80% at batch >= 16), the default
//    next to the workspace merge (the A/B of the cluster merge, AttentionParams::decode_merge), each with
//    a per-CTA timeline of one call (AttentionParams::decode_trace: entry, first tile, loop end, exit;
//    GA_BENCH_TRACE_DIR=dir also writes the raw records as CSV); a sweep of merge x forced split counts
//    (the data behind the split policy); a mixed step (63 decode runs + one 512-token prompt chunk) and a
//    paged 2048-token prefill next to its contiguous twin;
//  * sliding window (AttentionParams::window_left; GA_BENCH_WINDOW=W positions, default 4096, 0: off): decode
//    b1 / b8 over a 32768-position cache with a window of W next to the full 32768 and a cache of W (contiguous,
//    and paged b16 bs 16), and the ratio "window over 32k / cache of W": about 1 when the kernels read only the
//    window's key tiles (the split count and workspace follow the window), about 32768 / W if they read it all.
//    Rates of windowed rows count the bytes of the window (what must be read), not of the cache.
//  * FP8 KV cache (AttentionParams::kv_dtype kFp8: E4M3 codes + a float scale per position and KV head): decode b1
//    (Llama-2 and Llama-3 heads) and b8 (Llama-3) over 32768 positions, contiguous, each next to the same call over
//    an F16 cache in this process, and the ratio FP8 time / F16 time (the target: <= 0.6; the bytes are ~0.52x);
//    rates count the FP8 call's own bytes (codes + scales).
//
// Method (as bench_gemv.cu): decode rotates over enough KV caches (>= 4x the L2 size in total) that
// no launch finds its cache in L2; the launches are captured in one CUDA graph (the decode loop's
// launch gaps), warmed up, and the median of 30 graph launches is divided by the launches per graph.
// Inputs are hashed values in [-1, 1): timing does not depend on them; correctness is the parity
// test's job (tests/cuda/test_cuda_attention.cpp).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/stream.h"
#include "backends/cuda/cuda_forward.h"
#include "gpu_accel/device.h"
#include "gpu_accel/error.h"
#include "bench_util.cuh"

namespace {

using namespace ga;
using ga::cuda::CachingAllocator;
using ga::cuda::DeviceBuffer;
using ga::bench::capture;
using ga::bench::median;

constexpr int kSamples = 30;
constexpr int kWarmup = 3;
constexpr double kGB = 1e9;

// Median milliseconds of one launch of `graph`.
double time_graph(cudaGraphExec_t graph, cudaStream_t stream) {
  return ga::bench::time_graph(graph, stream, kWarmup, kSamples);
}
constexpr int kHeadDim = 128;

__device__ float hashed_unit(size_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
  h ^= h >> 15;
  h *= 0x85EBCA77u;
  h ^= h >> 13;
  return static_cast<float>(h & 0xFFFF) / 32768.0f - 1.0f;
}

__global__ void fill_half(__half* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = __float2half(hashed_unit(i, seed));
  }
}

// E4M3 codes of hashed values (bit 0 cleared: never the NaN codes 0x7F / 0xFF).
__global__ void fill_codes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = static_cast<uint8_t>(static_cast<int>((hashed_unit(i, seed) + 1.0f) * 127.0f)) & 0xFEu;
  }
}

__global__ void fill_float(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = hashed_unit(i, seed);
  }
}

struct Heads {
  const char* model;
  int n_head, n_head_kv;
};

struct Row {
  std::string what;
  double us, rate, fraction;  // rate: GB/s (decode) or TFLOP/s (prefill)
  bool decode;
};

// Params of one call over a cache of `capacity` positions; pointers are set by the caller.
ga::cuda::AttentionParams params_for(const Heads& h, int n_tokens, int64_t pos0, int64_t capacity) {
  ga::cuda::AttentionParams p;
  p.n_tokens = n_tokens;
  p.n_head = h.n_head;
  p.n_head_kv = h.n_head_kv;
  p.head_dim = kHeadDim;
  p.q_token_stride = p.out_token_stride = int64_t{h.n_head} * kHeadDim;
  p.kv_pos_stride = int64_t{h.n_head_kv} * kHeadDim;
  p.pos0 = pos0;
  p.max_kv_positions = capacity;
  p.scale = 1.0f / std::sqrt(float(kHeadDim));
  return p;
}

// window_left >= 0: a sliding window (decode rows count the bytes of the window's keys). fp8: an FP8 cache (codes
// and per-(position, KV head) scales) instead of f16.
Row bench_case(CachingAllocator& alloc, cudaStream_t stream, const Heads& h, int n_tokens, int64_t kv_len,
               bool decode, size_t l2_bytes, double copy_gbs, double gemm, int window_left = -1, bool fp8 = false) {
  const int64_t pos0 = kv_len - n_tokens;
  ga::cuda::AttentionParams p = params_for(h, n_tokens, pos0, kv_len);
  p.window_left = window_left;
  const size_t kv_elems = static_cast<size_t>(kv_len) * static_cast<size_t>(p.kv_pos_stride);
  const size_t n_scales = static_cast<size_t>(kv_len) * static_cast<size_t>(h.n_head_kv);
  // K and V: f16 values, or FP8 codes and their float scales
  const size_t kv_bytes = fp8 ? 2 * (kv_elems + n_scales * sizeof(float)) : 2 * kv_elems * sizeof(__half);
  // the keys the call must read: the cache, or the window of its first token on (and its tokens)
  const int64_t read_keys = window_left >= 0 ? std::min<int64_t>(kv_len, window_left + n_tokens) : kv_len;
  const size_t read_bytes = kv_bytes / static_cast<size_t>(kv_len) * static_cast<size_t>(read_keys);
  const int n_buf = decode ? static_cast<int>(std::clamp<size_t>((4 * l2_bytes + kv_bytes - 1) / kv_bytes, 2, 32)) : 1;
  const size_t q_elems = static_cast<size_t>(n_tokens) * static_cast<size_t>(p.q_token_stride);
  DeviceBuffer q(alloc, q_elems * 4), out(alloc, q_elems * 4);
  fill_float<<<256, 256, 0, stream>>>(q.as<float>(), q_elems, 3);
  std::vector<DeviceBuffer> ks, vs, kss, vss;  // f16 values, or FP8 codes (ks, vs) and scales (kss, vss)
  for (int i = 0; i < n_buf; ++i) {
    ks.emplace_back(alloc, kv_elems * (fp8 ? 1 : 2));
    vs.emplace_back(alloc, kv_elems * (fp8 ? 1 : 2));
    if (fp8) {
      kss.emplace_back(alloc, n_scales * sizeof(float));
      vss.emplace_back(alloc, n_scales * sizeof(float));
      fill_codes<<<1024, 256, 0, stream>>>(ks.back().as<uint8_t>(), kv_elems, 10u + i);
      fill_codes<<<1024, 256, 0, stream>>>(vs.back().as<uint8_t>(), kv_elems, 50u + i);
      fill_float<<<256, 256, 0, stream>>>(kss.back().as<float>(), n_scales, 70u + i);
      fill_float<<<256, 256, 0, stream>>>(vss.back().as<float>(), n_scales, 90u + i);
    } else {
      fill_half<<<1024, 256, 0, stream>>>(ks.back().as<__half>(), kv_elems, 10u + i);
      fill_half<<<1024, 256, 0, stream>>>(vs.back().as<__half>(), kv_elems, 50u + i);
    }
  }
  // buffer i of the rotation into p
  const auto point = [&](ga::cuda::AttentionParams& q, int i) {
    const size_t b = static_cast<size_t>(i);
    if (fp8) {
      q.kv_dtype = ga::cuda::AttentionParams::KvDType::kFp8;
      q.k_fp8 = ks[b].as<uint8_t>();
      q.v_fp8 = vs[b].as<uint8_t>();
      q.k_scale = kss[b].as<float>();
      q.v_scale = vss[b].as<float>();
    } else {
      q.k = ks[b].as<__half>();
      q.v = vs[b].as<__half>();
    }
  };
  GA_CUDA_CHECK_LAUNCH();
  const size_t ws_bytes = ga::cuda::attention_workspace_bytes(p);
  DeviceBuffer ws(alloc, std::max<size_t>(ws_bytes, 16));
  GA_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws.size(), stream));  // attention.h: zero-filled before the first call
  p.q = q.as<float>();
  p.out = out.as<float>();
  p.workspace = ws.data();
  p.workspace_bytes = ws_bytes;
  point(p, 0);
  if (const char* why = ga::cuda::attention_unsupported_reason(p)) GA_THROW(Internal, "bench case rejected: ", why);
  cudaGraphExec_t graph = capture(stream, n_buf, [&](int i) {
    point(p, i);
    return ga::cuda::attention(p, stream);
  });
  const double us = time_graph(graph, stream) * 1e3 / n_buf;
  const int splits = ga::cuda::attention_decode_splits(p);
  GA_CUDA_CHECK(cudaGraphExecDestroy(graph));
  ks.clear();
  vs.clear();
  kss.clear();
  vss.clear();
  alloc.release_cached();

  Row r;
  r.decode = decode;
  r.us = us;
  r.what = std::string(h.model) + " (" + std::to_string(h.n_head) + "/" + std::to_string(h.n_head_kv) + ") " +
           (fp8 ? "FP8 KV " : "") +
           (decode ? "decode b" + std::to_string(n_tokens) + " kv " + std::to_string(kv_len) +
                         (window_left >= 0 ? " window " + std::to_string(window_left + 1) : std::string()) + " (" +
                         std::to_string(splits) + " splits)"
                   : "prefill " + std::to_string(n_tokens) + (pos0 > 0 ? " at pos0 " + std::to_string(pos0) : ""));
  if (decode) {
    r.rate = static_cast<double>(read_bytes) / (us * 1e-6) / kGB;
    r.fraction = r.rate / copy_gbs;
  } else {
    // visible (token, key) pairs: sum over t of (pos0 + t + 1)
    const double pairs = double(n_tokens) * double(pos0) + double(n_tokens) * (n_tokens + 1) / 2.0;
    r.rate = 4.0 * kHeadDim * h.n_head * pairs / (us * 1e-6) / 1e12;
    r.fraction = gemm > 0 ? r.rate / gemm : 0.0;
  }
  std::printf("%s: %.2f us\n", r.what.c_str(), r.us);
  return r;
}

// ---- paged form ----

constexpr int kPagedKv = 4096;
constexpr int kBlockSize = 16;

// A pool holding n_sets x n_seqs sequences of kv positions in shuffled blocks, and n_sets block-table
// sets (set i: sequences i * n_seqs ..): the graph rotates over the sets so no launch finds its
// K/V in L2.
struct PagedPool {
  int n_seqs = 0, n_sets = 0;
  int64_t blocks_per_seq = 0, n_blocks = 0, kv_stride = 0;
  std::vector<DeviceBuffer> buffers;  // k, v, tables, q_start, pos0
  __half* k = nullptr;
  __half* v = nullptr;
  int32_t* tables = nullptr;  // [n_sets][n_seqs][blocks_per_seq]

  PagedPool(CachingAllocator& alloc, cudaStream_t stream, const Heads& h, int seqs, int64_t kv, size_t l2_bytes) {
    n_seqs = seqs;
    kv_stride = int64_t{h.n_head_kv} * kHeadDim;
    blocks_per_seq = (kv + kBlockSize - 1) / kBlockSize;
    const size_t call_bytes = static_cast<size_t>(seqs) * static_cast<size_t>(kv * kv_stride) * 2 * sizeof(__half);
    n_sets = static_cast<int>(std::clamp<size_t>((4 * l2_bytes + call_bytes - 1) / call_bytes, 2, 32));
    n_blocks = blocks_per_seq * seqs * n_sets;
    const size_t elems = static_cast<size_t>(n_blocks * kBlockSize * kv_stride);
    buffers.emplace_back(alloc, elems * sizeof(__half));
    buffers.emplace_back(alloc, elems * sizeof(__half));
    k = buffers[0].as<__half>();
    v = buffers[1].as<__half>();
    fill_half<<<2048, 256, 0, stream>>>(k, elems, 10u);
    fill_half<<<2048, 256, 0, stream>>>(v, elems, 50u);
    GA_CUDA_CHECK_LAUNCH();
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    uint64_t state = 0x9E3779B97F4A7C15ull;  // Fisher-Yates with a fixed xorshift: reproducible tables
    for (size_t i = ids.size() - 1; i > 0; --i) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      std::swap(ids[i], ids[state % (i + 1)]);
    }
    buffers.emplace_back(alloc, ids.size() * sizeof(int32_t));
    tables = buffers[2].as<int32_t>();
    GA_CUDA_CHECK(cudaMemcpy(tables, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  const int32_t* table_set(int i) const { return tables + int64_t{i} * n_seqs * blocks_per_seq; }
};

// Median milliseconds of one launch of `graph` with the GPU kept busy: one untimed launch queued
// before the start event, then kSteadyRepeats launches back to back. time_graph's start event fires
// on an idle stream before the host has submitted the graph, so it also counts the host's
// cudaGraphLaunch latency (several us), which a graph of 2 attention launches (the paged b16..b64
// cases: 2 pool sets) spreads over only 2 calls. Both are printed; the kernel's own cost (what a
// decode step's graph pays, the launches back to back) is this one.
constexpr int kSteadyRepeats = 4;
double time_graph_steady(cudaGraphExec_t graph, cudaStream_t stream) {
  ga::cuda::Event start, stop;
  for (int i = 0; i < kWarmup; ++i) GA_CUDA_CHECK(cudaGraphLaunch(graph, stream));
  std::vector<double> ms;
  for (int i = 0; i < kSamples; ++i) {
    GA_CUDA_CHECK(cudaGraphLaunch(graph, stream));  // keeps the GPU busy while the timed launches are submitted
    start.record(stream);
    for (int r = 0; r < kSteadyRepeats; ++r) GA_CUDA_CHECK(cudaGraphLaunch(graph, stream));
    stop.record(stream);
    stop.synchronize();
    ms.push_back(ga::cuda::Event::elapsed_ms(start, stop) / kSteadyRepeats);
  }
  return median(ms);
}

struct PagedTime {
  double us = 0.0;         // time_graph: the method of the earlier runs (host launch latency included)
  double steady_us = 0.0;  // time_graph_steady: launches back to back
  bool cluster = false;    // the decode merged its splits in a cluster (AttentionParams::decode_merge)
  std::string timeline;    // PagedOptions::trace: the per-CTA timeline's summary (decode_timeline)
};

using DecodeMerge = ga::cuda::AttentionParams::DecodeMerge;
struct PagedOptions {
  int splits = 0;                       // forced decode split count (0: the policy's)
  int window_left = -1;                 // AttentionParams::window_left (-1: no window)
  int stages = 0;                       // forced decode stage count (0: the default)
  DecodeMerge merge = DecodeMerge::kAuto;
  bool trace = false;                   // also replay the graph once with AttentionParams::decode_trace set
  std::string trace_csv;                // with trace: where to write the raw per-CTA records (empty: nowhere)
};

// Summary of one call's per-CTA records ([ctas][8]: globaltimer at entry, after the PDL wait, first tile
// landed, last tile done, exit; SM id; tiles; see AttentionParams::decode_trace), in us from the first
// CTA's release from the PDL wait (the call's own start: CTAs enter while the previous kernel still runs):
// where the call's time goes. CTAs without tile marks (empty splits) count for release / exit only.
std::string decode_timeline(const std::vector<unsigned long long>& rec, const std::string& csv_path) {
  const size_t n = rec.size() / 8;
  unsigned long long base = ~0ull, t_end = 0, last_loop_end = 0;
  std::vector<double> early, release, first, loop_end, tail;
  for (size_t i = 0; i < n; ++i) {
    if (rec[8 * i + 4] != 0) base = std::min(base, rec[8 * i + 1]);
  }
  for (size_t i = 0; i < n; ++i) {
    const unsigned long long* r = &rec[8 * i];
    if (r[4] == 0) continue;  // left early (not a decode run)
    t_end = std::max(t_end, r[4]);
    early.push_back((double(r[1]) - double(r[0])) * 1e-3);
    release.push_back((double(r[1]) - double(base)) * 1e-3);
    if (r[2] != 0 && r[3] != 0) {
      first.push_back((double(r[2]) - double(r[1])) * 1e-3);
      loop_end.push_back((double(r[3]) - double(base)) * 1e-3);
      last_loop_end = std::max(last_loop_end, r[3]);
    }
    if (r[3] != 0) tail.push_back((double(r[4]) - double(r[3])) * 1e-3);
  }
  if (!csv_path.empty()) {
    if (FILE* f = std::fopen(csv_path.c_str(), "w")) {
      std::fprintf(f, "cta,entry,after_wait,first_tile,loop_end,exit,sm,tiles\n");
      for (size_t i = 0; i < n; ++i) {
        const unsigned long long* r = &rec[8 * i];
        std::fprintf(f, "%zu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", i, r[0], r[1], r[2], r[3], r[4], r[5], r[6]);
      }
      std::fclose(f);
    }
  }
  if (release.empty()) return "no records";
  auto q = [](std::vector<double> v, double f) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(f * double(v.size() - 1))];
  };
  char buf[640];
  std::snprintf(buf, sizeof(buf),
                "release -> last exit %.1f us | entered before release p50 %.1f | release spread max %.1f | "
                "first tile after release p50 %.1f max %.1f | loop end min %.1f p10 %.1f p50 %.1f p90 %.1f max %.1f | "
                "exit - loop end p50 %.1f max %.1f | last exit - last loop end %.1f (%zu CTAs)",
                (double(t_end) - double(base)) * 1e-3, q(early, 0.5), q(release, 1.0), q(first, 0.5), q(first, 1.0),
                q(loop_end, 0.0), q(loop_end, 0.1), q(loop_end, 0.5), q(loop_end, 0.9), q(loop_end, 1.0), q(tail, 0.5),
                q(tail, 1.0), last_loop_end != 0 ? (double(t_end) - double(last_loop_end)) * 1e-3 : 0.0,
                release.size());
  return buf;
}

// Times one paged call: runs (n_q, pos0) over the pool (one sequence per run, kPagedKv positions),
// with forced split / stage counts and merge (0 / kAuto: the defaults). Returns microseconds per call.
PagedTime time_paged(CachingAllocator& alloc, cudaStream_t stream, const Heads& h, const PagedPool& pool,
                     const std::vector<std::pair<int, int64_t>>& runs, const PagedOptions& opt,
                     int* splits_used = nullptr) {
  const int forced_splits = opt.splits, stages = opt.stages;
  std::vector<int32_t> q_start{0}, pos0;
  int max_q = 0;
  int64_t max_kv = 0;
  for (const auto& r : runs) {
    q_start.push_back(q_start.back() + r.first);
    pos0.push_back(static_cast<int32_t>(r.second));
    max_q = std::max(max_q, r.first);
    max_kv = std::max(max_kv, r.second + r.first);
  }
  const int n_tokens = q_start.back();
  const size_t q_elems = static_cast<size_t>(n_tokens) * h.n_head * kHeadDim;
  DeviceBuffer q(alloc, q_elems * 4), out(alloc, q_elems * 4), d_start(alloc, q_start.size() * 4),
      d_pos0(alloc, pos0.size() * 4);
  fill_float<<<256, 256, 0, stream>>>(q.as<float>(), q_elems, 3);
  GA_CUDA_CHECK_LAUNCH();
  GA_CUDA_CHECK(cudaMemcpy(d_start.data(), q_start.data(), q_start.size() * 4, cudaMemcpyHostToDevice));
  GA_CUDA_CHECK(cudaMemcpy(d_pos0.data(), pos0.data(), pos0.size() * 4, cudaMemcpyHostToDevice));
  ga::cuda::AttentionParams p = params_for(h, n_tokens, 0, max_kv);
  p.n_seqs = static_cast<int>(runs.size());
  p.seq_q_start = d_start.as<int32_t>();
  p.seq_pos0 = d_pos0.as<int32_t>();
  p.block_table = pool.table_set(0);
  p.block_table_stride = pool.blocks_per_seq;
  p.block_size = kBlockSize;
  p.n_kv_blocks = pool.n_blocks;
  p.max_seq_tokens = max_q;
  p.decode_splits = forced_splits;
  p.decode_stages = stages;
  p.decode_merge = opt.merge;
  p.window_left = opt.window_left;
  p.k = pool.k;
  p.v = pool.v;
  p.q = q.as<float>();
  p.out = out.as<float>();
  const size_t ws_bytes = ga::cuda::attention_workspace_bytes(p);
  DeviceBuffer ws(alloc, std::max<size_t>(ws_bytes, 16));
  GA_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws.size(), stream));
  p.workspace = ws.data();
  p.workspace_bytes = ws.size();
  if (const char* why = ga::cuda::attention_unsupported_reason(p)) {
    if (opt.merge == DecodeMerge::kCluster) return PagedTime{};  // e.g. more than 8 splits: the sweep prints "-"
    GA_THROW(Internal, "paged bench case rejected: ", why);
  }
  if (splits_used != nullptr) *splits_used = ga::cuda::attention_decode_splits(p);
  PagedTime t;
  t.cluster = ga::cuda::attention_decode_merges_in_cluster(p);
  cudaGraphExec_t graph = capture(stream, pool.n_sets, [&](int i) {
    p.block_table = pool.table_set(i);
    return ga::cuda::attention(p, stream);
  });
  t.us = time_graph(graph, stream) * 1e3 / pool.n_sets;
  t.steady_us = time_graph_steady(graph, stream) * 1e3 / pool.n_sets;
  GA_CUDA_CHECK(cudaGraphExecDestroy(graph));
  if (opt.trace) {  // the same graph with the timeline recorded; the last launch's records are kept
    const int splits = ga::cuda::attention_decode_splits(p);
    const size_t ctas = static_cast<size_t>(splits) * h.n_head_kv * runs.size() * 4;  // z <= n_seqs * row tiles
    DeviceBuffer rec(alloc, ctas * 8 * sizeof(unsigned long long));
    GA_CUDA_CHECK(cudaMemsetAsync(rec.data(), 0, rec.size(), stream));
    p.decode_trace = rec.as<unsigned long long>();
    cudaGraphExec_t traced = capture(stream, pool.n_sets, [&](int i) {
      p.block_table = pool.table_set(i);
      return ga::cuda::attention(p, stream);
    });
    for (int r = 0; r < 3; ++r) GA_CUDA_CHECK(cudaGraphLaunch(traced, stream));
    GA_CUDA_CHECK(cudaStreamSynchronize(stream));
    GA_CUDA_CHECK(cudaGraphExecDestroy(traced));
    const size_t used = static_cast<size_t>(splits) * h.n_head_kv * runs.size();  // one row tile: 1-token runs
    std::vector<unsigned long long> host(used * 8);
    GA_CUDA_CHECK(
        cudaMemcpy(host.data(), rec.data(), host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    t.timeline = decode_timeline(host, opt.trace_csv);
  }
  return t;
}

// Whether this build has the 3-stage paged decode kernel (GA_ATTN_DECODE_VARIANTS or the default).
bool have_decode_stages3(const Heads& h) {
  ga::cuda::AttentionParams p = params_for(h, 1, 0, kPagedKv);
  alignas(16) static float dummy_f[4];
  p.q = p.out = dummy_f;  // only non-null for the check; nothing is launched
  p.k = p.v = reinterpret_cast<const __half*>(dummy_f);
  p.n_seqs = 1;
  static int32_t dummy_i[2] = {0, 1};
  p.seq_q_start = p.seq_pos0 = p.block_table = dummy_i;
  p.block_table_stride = kPagedKv / kBlockSize;
  p.block_size = kBlockSize;
  p.n_kv_blocks = kPagedKv / kBlockSize;
  p.max_seq_tokens = 1;
  p.decode_splits = 1;  // no workspace needed
  p.decode_stages = 3;
  return ga::cuda::attention_unsupported_reason(p) == nullptr;
}

}  // namespace

int main() try {
  if (!ga::bench::open_bench_device()) return 0;
  const CudaDeviceInfo dev = ga::cuda::device_info(0);
  CachingAllocator alloc(0);
  ga::cuda::Stream stream(0);
  const ga::cuda::CudaCeilings ceilings = ga::cuda::measure_cuda_ceilings(0);  // as gpu-accel bench measures them
  const double copy_gbs = ceilings.copy_gbps;
  const double gemm = ceilings.gemm_tflops;
  alloc.release_cached();

  const Heads llama2{"Llama-2-7B", 32, 32}, llama3{"Llama-3-8B", 32, 8};
  std::vector<Row> rows;
  for (const Heads& h : {llama2, llama3}) {
    for (int64_t kv : {4096, 32768}) rows.push_back(bench_case(alloc, stream.get(), h, 1, kv, true, dev.l2_bytes, copy_gbs, gemm));
  }
  rows.push_back(bench_case(alloc, stream.get(), llama3, 8, 32768, true, dev.l2_bytes, copy_gbs, gemm));
  for (const Heads& h : {llama2, llama3}) {
    for (int t : {512, 2048}) rows.push_back(bench_case(alloc, stream.get(), h, t, t, false, dev.l2_bytes, copy_gbs, gemm));
  }
  // a prompt continuing a cache (chunked prefill): 512 tokens after 3584 cached positions
  rows.push_back(bench_case(alloc, stream.get(), llama3, 512, 4096, false, dev.l2_bytes, copy_gbs, gemm));
  GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));

  // Sliding window (GA_BENCH_WINDOW positions, default 4096; 0: off): decode over a 32k cache with the window, next
  // to the full 32k cache and a cache of the window's length (same shapes: the kernels should read only the window).
  const char* window_env = std::getenv("GA_BENCH_WINDOW");
  const int64_t window = window_env != nullptr ? std::strtoll(window_env, nullptr, 10) : 4096;
  constexpr int64_t kWindowCache = 32768;
  std::vector<std::string> window_lines;
  auto window_ratio = [&](const std::string& what, double windowed_us, double full_us, double short_us) {
    char line[256];
    std::snprintf(line, sizeof(line), "| %s | %.2f | %.2f | %.2f | %.2f | %.2f |", what.c_str(), full_us, windowed_us,
                  short_us, windowed_us / short_us, full_us / windowed_us);
    window_lines.push_back(line);
  };
  if (window > 0 && window < kWindowCache) {
    const int wl = static_cast<int>(window - 1);
    const std::pair<Heads, int> shapes[] = {{llama2, 1}, {llama3, 1}, {llama3, 8}};
    for (const auto& [h, n_tokens] : shapes) {
      const Row full = bench_case(alloc, stream.get(), h, n_tokens, kWindowCache, true, dev.l2_bytes, copy_gbs, gemm);
      const Row windowed =
          bench_case(alloc, stream.get(), h, n_tokens, kWindowCache, true, dev.l2_bytes, copy_gbs, gemm, wl);
      const Row short_cache = bench_case(alloc, stream.get(), h, n_tokens, window, true, dev.l2_bytes, copy_gbs, gemm);
      rows.push_back(windowed);
      window_ratio(std::string(h.model) + " decode b" + std::to_string(n_tokens), windowed.us, full.us, short_cache.us);
    }
    GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  }

  // FP8 KV cache: decode over 32k positions, each next to its F16 twin in this process (the ratio's target: <= 0.6).
  std::vector<std::string> fp8_lines;
  {
    const std::pair<Heads, int> shapes[] = {{llama2, 1}, {llama3, 1}, {llama3, 8}};
    for (const auto& [h, n_tokens] : shapes) {
      const Row f16 = bench_case(alloc, stream.get(), h, n_tokens, 32768, true, dev.l2_bytes, copy_gbs, gemm);
      const Row f8 = bench_case(alloc, stream.get(), h, n_tokens, 32768, true, dev.l2_bytes, copy_gbs, gemm, -1, true);
      rows.push_back(f8);
      char line[256];
      std::snprintf(line, sizeof(line), "| %s decode b%d kv 32768 | %.2f | %.2f | %.3f | %.0f%% | %.0f%% |", h.model,
                    n_tokens, f16.us, f8.us, f8.us / f16.us, 100.0 * f16.fraction, 100.0 * f8.fraction);
      fp8_lines.push_back(line);
    }
    GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  }

  // Paged decode: batches of one-token runs over 4096 positions each (Llama-3 heads, block_size 16).
  struct PagedRow {
    std::string what;
    PagedTime t;
    double bytes;
  };
  std::vector<PagedRow> paged_rows;
  std::vector<std::string> sweep_lines;
  const bool stages3 = have_decode_stages3(llama3);
  const size_t seq_kv_bytes = size_t{kPagedKv} * llama3.n_head_kv * kHeadDim * 2 * sizeof(__half);
  auto pct = [&](double bytes, double us) { return 100.0 * bytes / (us * 1e-6) / kGB / copy_gbs; };
  std::vector<std::string> timelines;
  const char* trace_dir = std::getenv("GA_BENCH_TRACE_DIR");  // where the raw per-CTA records go (optional)
  for (int batch : {1, 16, 32, 64}) {
    PagedPool pool(alloc, stream.get(), llama3, batch, kPagedKv, dev.l2_bytes);
    const std::vector<std::pair<int, int64_t>> runs(static_cast<size_t>(batch), {1, kPagedKv - 1});
    const double bytes = double(seq_kv_bytes) * batch;
    // the default, then the same with the workspace merge (the A/B of the cluster merge, same run), each
    // once more with the per-CTA timeline recorded
    for (DecodeMerge merge : {DecodeMerge::kAuto, DecodeMerge::kWorkspace}) {
      PagedOptions opt;
      opt.merge = merge;
      opt.trace = true;
      const std::string tag = "b" + std::to_string(batch) + (merge == DecodeMerge::kAuto ? "_default" : "_workspace");
      if (trace_dir != nullptr) opt.trace_csv = std::string(trace_dir) + "/trace_" + tag + ".csv";
      int auto_splits = 0;
      const PagedTime t = time_paged(alloc, stream.get(), llama3, pool, runs, opt, &auto_splits);
      paged_rows.push_back({"paged decode b" + std::to_string(batch) + " kv 4096 bs 16 (" +
                                (merge == DecodeMerge::kAuto ? "default: " : "workspace merge: ") +
                                std::to_string(auto_splits) + " splits" +
                                (auto_splits > 1 ? (t.cluster ? ", cluster merge)" : ", workspace merge)") : ")"),
                            t, bytes});
      std::printf("%s: %.2f us (steady %.2f us)\n", paged_rows.back().what.c_str(), t.us, t.steady_us);
      timelines.push_back("b" + std::to_string(batch) + " " + paged_rows.back().what + ": " + t.timeline);
      std::printf("  timeline: %s\n", t.timeline.c_str());
    }
    // the sweep: forced split counts (0 = the policy's) x merge, at this build's stage count, both timing
    // methods per cell
    for (DecodeMerge merge : {DecodeMerge::kWorkspace, DecodeMerge::kCluster}) {
      std::string line = "| b" + std::to_string(batch) + " | " + (stages3 ? "3" : "2") + " | " +
                         (merge == DecodeMerge::kCluster ? "cluster" : "workspace") + " |";
      for (int splits : {0, 1, 2, 3, 4, 6, 8, 16}) {
        PagedOptions opt;
        opt.splits = splits;
        opt.merge = merge;
        int used = 0;
        const PagedTime st = time_paged(alloc, stream.get(), llama3, pool, runs, opt, &used);
        if (st.us <= 0.0) {  // refused (the cluster merge takes 1..8 splits)
          line += " - |";
          continue;
        }
        char policy[16] = "";
        if (splits == 0) std::snprintf(policy, sizeof(policy), "(%d) ", used);
        char cell[96];
        std::snprintf(cell, sizeof(cell), " %s%.1f us %.0f%% / %.1f us %.0f%% |", policy, st.us, pct(bytes, st.us),
                      st.steady_us, pct(bytes, st.steady_us));
        line += cell;
      }
      sweep_lines.push_back(line);
      std::printf("%s\n", line.c_str());
    }
    if (batch == 64) {  // the Scheduler's mixed step: 63 decode runs + one 512-token chunk from position 0
      std::vector<std::pair<int, int64_t>> mixed(63, {1, kPagedKv - 1});
      mixed.insert(mixed.begin() + 31, {512, 0});
      const PagedTime mt = time_paged(alloc, stream.get(), llama3, pool, mixed, PagedOptions{});
      paged_rows.push_back({"paged mixed: 63 decode runs (kv 4096) + 512-token chunk (GB/s of the decode KV)", mt,
                            double(seq_kv_bytes) * 63});
      std::printf("%s: %.2f us\n", paged_rows.back().what.c_str(), mt.us);
    }
    alloc.release_cached();
  }
  // The paged form of the window comparison: 16 one-token runs over 32k positions each with the window, the same
  // without it, and 16 runs over caches of the window's length.
  if (window > 0 && window < kWindowCache) {
    PagedPool long_pool(alloc, stream.get(), llama3, 16, kWindowCache, dev.l2_bytes);
    const std::vector<std::pair<int, int64_t>> long_runs(16, {1, kWindowCache - 1});
    PagedOptions windowed;
    windowed.window_left = static_cast<int>(window - 1);
    int splits_full = 0, splits_window = 0, splits_short = 0;
    const PagedTime full = time_paged(alloc, stream.get(), llama3, long_pool, long_runs, PagedOptions{}, &splits_full);
    const PagedTime win = time_paged(alloc, stream.get(), llama3, long_pool, long_runs, windowed, &splits_window);
    alloc.release_cached();
    PagedPool short_pool(alloc, stream.get(), llama3, 16, window, dev.l2_bytes);
    const std::vector<std::pair<int, int64_t>> short_runs(16, {1, window - 1});
    const PagedTime shrt = time_paged(alloc, stream.get(), llama3, short_pool, short_runs, PagedOptions{}, &splits_short);
    alloc.release_cached();
    window_ratio("paged decode b16 bs 16 (splits " + std::to_string(splits_full) + " / " +
                     std::to_string(splits_window) + " / " + std::to_string(splits_short) + ")",
                 win.us, full.us, shrt.us);
    std::printf("paged decode b16 kv 32768 window %lld: %.2f us (full %.2f us, kv %lld %.2f us)\n",
                static_cast<long long>(window), win.us, full.us, static_cast<long long>(window), shrt.us);
  }
  PagedTime paged_prefill;
  {
    PagedPool pool(alloc, stream.get(), llama3, 1, 2048, dev.l2_bytes);
    paged_prefill = time_paged(alloc, stream.get(), llama3, pool, {{2048, 0}}, PagedOptions{});
    alloc.release_cached();
  }
  const double paged_prefill_us = paged_prefill.us;
  GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));

  std::printf("\nAttention, head_dim %d, f16 KV; device-to-device copy (read + write): %.0f GB/s; cuBLAS f16 GEMM "
              "8192^3: %.0f TFLOP/s\n\n", kHeadDim, copy_gbs, gemm);
  std::printf("| case | time us | rate | of same-run ceiling |\n|---|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf(r.decode ? "| %s | %.2f | %.0f GB/s | %.0f%% of copy |\n" : "| %s | %.2f | %.1f TFLOP/s | %.0f%% of GEMM |\n",
                r.what.c_str(), r.us, r.rate, 100.0 * r.fraction);
  }
  const double prefill_flops = 4.0 * kHeadDim * llama3.n_head * (2048.0 * 2049.0 / 2.0);
  std::printf("| Llama-3-8B (32/8) paged prefill 2048 bs 16 | %.2f | %.1f TFLOP/s | %.0f%% of GEMM |\n", paged_prefill_us,
              prefill_flops / (paged_prefill_us * 1e-6) / 1e12, 100.0 * prefill_flops / (paged_prefill_us * 1e-6) / 1e12 / gemm);
  for (const PagedRow& r : paged_rows) {
    std::printf("| Llama-3-8B (32/8) %s | %.2f | %.0f GB/s | %.0f%% of copy |\n", r.what.c_str(), r.t.us,
                r.bytes / (r.t.us * 1e-6) / kGB, pct(r.bytes, r.t.us));
    std::printf("| Llama-3-8B (32/8) %s, steady | %.2f | %.0f GB/s | %.0f%% of copy |\n", r.what.c_str(), r.t.steady_us,
                r.bytes / (r.t.steady_us * 1e-6) / kGB, pct(r.bytes, r.t.steady_us));
  }
  std::printf("\nFP8 KV cache vs F16 KV cache, decode over 32768 positions, same process (time us; FP8 / F16 "
              "target <= 0.6)\n\n| case | F16 | FP8 | FP8 / F16 | F16 % of copy | FP8 % of copy |\n"
              "|---|---:|---:|---:|---:|---:|\n");
  for (const std::string& line : fp8_lines) std::printf("%s\n", line.c_str());
  if (!window_lines.empty()) {
    std::printf("\nSliding window %lld over a %lld-position cache (decode, time us): the window next to the whole "
                "cache and to a cache of the window's length; windowed / short near 1 means only the window's key "
                "tiles are read\n\n", static_cast<long long>(window), static_cast<long long>(kWindowCache));
    std::printf("| case | full 32k | window over 32k | cache of the window | windowed / short | full / windowed |\n"
                "|---|---:|---:|---:|---:|---:|\n");
    for (const std::string& line : window_lines) std::printf("%s\n", line.c_str());
  }
  std::printf("\nPaged decode (32/8, kv 4096 per run, bs 16): merge x forced split counts ((n) = the policy's "
              "count); per cell time and %% of copy, time_graph / steady (launches back to back)\n\n");
  std::printf("| batch | stages | merge | policy | 1 | 2 | 3 | 4 | 6 | 8 | 16 |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& line : sweep_lines) std::printf("%s\n", line.c_str());
  std::printf("\nPer-CTA timelines (globaltimer, us from the first CTA's release from the PDL wait; one call "
              "replayed in its graph):\n");
  for (const std::string& line : timelines) std::printf("%s\n", line.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ga_bench_attention: %s\n", e.what());
  return 1;
}
