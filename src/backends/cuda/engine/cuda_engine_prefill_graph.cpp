// CudaEngine's prefill graphs: a prompt step of L tokens (8 < L <= layout_.prefill_graph_max_tokens,
// no all-logits, in the paged layout one run alone with one logits row: a lone request's prefill) replays a
// CUDA graph captured once for the GEMM bucket of L (gemm_bucket: 16, 20, 24, 28, 32, 40, ..., 448, 512).
//
// Why: a short prefill is bound by its launches, not by the GPU. A 1B layer is ~12 kernels (norms, the
// cuBLASLt GEMMs, RoPE + KV store, attention, SwiGLU), 16 layers ~200 launches at a few microseconds of
// host time each; the 128-token prefill takes ~1.7 ms warm and ~0.15 ms more when the host's launch path
// has gone cold (an idle server). One graph launch replaces them all.
//
// Why one graph per bucket and not per length: every host-known value of the step (the GEMMs' n, the
// attention's grid, the logits row) must be the same for every L the graph serves. So the graph runs the
// bucket's row count b >= L, and everything that depends on L is in the step's device metadata:
//   * rows L..b-1 are padding: id 0, positions continuing after the prompt, slot -1, so the fused
//     RoPE + KV store writes no K/V for them (qkv_rope_store.cu skips negative slots; the contiguous layout
//     takes the slots path too for these steps: StepShape::pad_rows). Their attention reads positions past
//     the prompt (stale cache rows, or in the paged layout stale block-table entries, always valid block ids)
//     and their outputs go nowhere: causal attention never lets a real row see a later position, and the
//     norms and GEMMs are row by row.
//   * the logits row is gathered by the index in the metadata (logit_rows[0] = L - 1), as a mixed batch's
//     scattered rows are; the paged run's length (seq_q_start[1] = b) and pos0 are device values already.
//   * the paged attention is captured with the sequence-end bound at max_seq_positions (as the decode graphs),
//     so pos0 + b <= max_seq_positions is the one condition on where the prompt starts; contiguous: pos0 + b
//     <= n_ctx (the padded rows' positions must exist in the cache).
// The GEMMs run b rows with the algorithm the bucket already uses for every L in it (gemm.h), so the
// padding costs what those rows compute (at most a quarter of L above 16 tokens) and nothing else.
// Captured by warm_up_matmuls() (after its GEMM warm-up, so no heuristic runs inside a capture) for every
// bucket, each uploaded; a step whose graph is missing (no warm-up) captures it first.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/engine/cuda_engine.h"
#include "backends/cuda/stream.h"
#include "core/env.h"
#include "gpu_accel/error.h"

namespace ga::cuda::engine {

int64_t CudaEngine::prefill_graph_bucket(int64_t n, int64_t pos0) const {
  if (!prefill_graphs_allowed_ || layout_.prefill_graph_max_tokens <= 0 || n <= kGemvMaxTokens) return 0;
  const int64_t bucket = gemm_bucket(n);
  if (bucket > layout_.prefill_graph_max_tokens || bucket > layout_.max_batch) return 0;
  const int64_t end = layout_.paged ? layout_.max_seq_positions : n_slots_;
  if (pos0 < 0 || pos0 + bucket > end) return 0;
  return bucket;
}

std::vector<int64_t> CudaEngine::prefill_graph_buckets() const {
  std::vector<int64_t> out;
  const int64_t limit = std::min(layout_.prefill_graph_max_tokens, layout_.max_batch);
  if (limit <= kGemvMaxTokens) return out;
  for (const int64_t n : gemm_bucket_warm_up_tokens(kGemvMaxTokens + 1, limit)) {
    const int64_t bucket = prefill_graph_bucket(n, 0);
    if (bucket > 0 && (out.empty() || out.back() != bucket)) out.push_back(bucket);
  }
  return out;
}

StepShape CudaEngine::prefill_shape(int64_t bucket) const {
  StepShape shape;
  shape.n_tokens = bucket;
  shape.paged = layout_.paged;
  shape.n_seqs = 1;
  shape.max_seq_tokens = bucket;
  shape.max_kv_positions = layout_.paged ? layout_.max_seq_positions : 0;
  shape.first_logit_row = 0;
  shape.n_logits = 1;
  shape.gather_logits = true;
  shape.pad_rows = true;
  return shape;
}

void CudaEngine::pad_prefill_metadata(int64_t n, int64_t bucket) {
  int32_t* const ids = host_staging_;
  int32_t* const positions = host_staging_ + off_positions();
  int32_t* const slots = host_staging_ + off_slots();
  const int32_t last = positions[n - 1];
  for (int64_t t = n; t < bucket; ++t) {
    ids[t] = 0;
    positions[t] = last + static_cast<int32_t>(t - n + 1);
    slots[t] = -1;  // no K/V store
  }
  if (layout_.paged) host_staging_[off_q_start() + 1] = static_cast<int32_t>(bucket);  // the one run spans the bucket
}

void CudaEngine::capture_prefill_graph(int64_t bucket) {
  if (prefill_graphs_.count(bucket) != 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  cudaStream_t s = stream_.get();
  size_t free_before = 0, free_after = 0, total = 0;
  GA_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  // The GEMMs' algorithms of this bucket chosen outside the capture (warm_up_matmuls did them all already;
  // a lazy capture runs them here once, on the scratch).
  if (!gemms_warm_) warm_up_matmuls_at(bucket);
  CapturedStep g;
  capture_into(g, prefill_shape(bucket));
  prefill_graphs_[bucket] = g;  // owned from here (destroy_graphs)
  GA_CUDA_CHECK(cudaGraphUpload(g.exec, s));  // the first replay pays no upload
  stream_.synchronize();
  GA_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  ++prefill_stats_.captured;
  prefill_stats_.capture_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (free_before > free_after) prefill_stats_.device_bytes += static_cast<int64_t>(free_before - free_after);
}

namespace {

// GA_PREFILL_GPU_TIMING=1: a diagnostic. Each replay is timed
// on the GPU (events right before and after the graph on its stream) and on the host (the cudaGraphLaunch call; from
// its return to the stop event seen complete), one line on stderr each. It answers whether a prefill after an idle
// pause is slower on the GPU itself (clocks, power state) or on the host's way to it. It waits for the replay
// (the caller would wait right after anyway), so it is off unless asked for.
bool time_prefill_replays() {
  static const bool on = env_flag("GA_PREFILL_GPU_TIMING");
  return on;
}

}  // namespace

void CudaEngine::launch_prefill_graph(int64_t n, int64_t bucket) {
  capture_prefill_graph(bucket);
  if (time_prefill_replays()) {
    Event start, stop;
    start.record(stream_.get());
    const auto t0 = std::chrono::steady_clock::now();
    GA_CUDA_CHECK(cudaGraphLaunch(prefill_graphs_.at(bucket).exec, stream_.get()));
    const auto t1 = std::chrono::steady_clock::now();
    stop.record(stream_.get());
    stop.synchronize();
    const auto t2 = std::chrono::steady_clock::now();
    const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::fprintf(stderr,
                 "prefill replay %lld rows (bucket %lld): gpu %.4f ms, launch call %.4f ms, launch to done %.4f ms\n",
                 static_cast<long long>(n), static_cast<long long>(bucket), Event::elapsed_ms(start, stop), ms(t1 - t0),
                 ms(t2 - t1));
  } else {
    GA_CUDA_CHECK(cudaGraphLaunch(prefill_graphs_.at(bucket).exec, stream_.get()));
  }
  ++prefill_stats_.replays;
  prefill_stats_.padded_rows += bucket - n;
}

}  // namespace ga::cuda::engine
