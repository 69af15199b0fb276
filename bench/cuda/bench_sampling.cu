// GPU sampling benchmark (backends/cuda/kernels/sampling.h): the candidate selection kernel versus
// what it replaces, the device-to-host copy of the whole logits rows, for 1/16/64 rows of the
// Llama-2 (32000) and Llama-3 (128256) vocabularies.
//
// Columns:
//  * kernel us: the two kernels of one sampling_select launch, captured 20 times in a CUDA graph
//    (launch gaps excluded), median of 30 graph launches / 20. "cold": the launches rotate over
//    enough logits copies (>= 4x L2) that none is found in L2; "hot": the same buffer each time (a
//    decode step's logits were just written by the LM head, so they usually are in L2);
//    Each timing is preceded by >= 30 ms of the same graph, so the SM clock has left its idle state
//    (a decode step's sampling runs right after the forward pass, at the boost clock); "SM MHz" is
//    the clock read (clock64 against %globaltimer) right after the cold timing;
//  * GB/s: logits bytes read by the cold kernel (two passes: select and sums) per second, and that
//    as a fraction of the device-to-device copy bandwidth measured in the same run;
//  * select() us: the whole host call of CudaSampling::select (parameter upload, kernels, packed
//    candidate download, stream sync), median host wall time of 30 calls;
//  * D2H copy us: cudaMemcpyAsync of the rows into pinned host memory + sync, median of 30, the
//    cost every sampled token pays today.
// Two parameter sets: greedy (k 20, no penalties) and the default sampler (k 256, temperature
// 0.8, 64 penalized tokens per row). Timing does not depend on the values; correctness is
// tests/cuda/test_cuda_sampling.cpp's job.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_forward.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/kernels/sampling.h"
#include "backends/cuda/kernels/sampling_device.h"
#include "backends/cuda/stream.h"
#include "bench_util.cuh"
#include "gpu_accel/device.h"
#include "gpu_accel/error.h"

namespace {

using ga::bench::capture;
using ga::bench::median;
using ga::bench::time_graph;

struct Result {
  std::string what;
  double kernel_cold_us, kernel_hot_us, gbps, select_us, copy_us, sm_mhz;
};

// SM clock in MHz: cycles of one SM over ~200 us of the global nanosecond timer.
__global__ void clock_probe_kernel(double* mhz) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < 200000ull);
  const long long c1 = clock64();
  *mhz = static_cast<double>(c1 - c0) * 1e3 / static_cast<double>(t1 - t0);
}

double sm_mhz_now(cudaStream_t stream) {
  double* d = nullptr;
  double h = 0;
  GA_CUDA_CHECK(cudaMalloc(&d, sizeof(double)));
  clock_probe_kernel<<<1, 1, 0, stream>>>(d);
  GA_CUDA_CHECK(cudaGetLastError());
  GA_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof(double), cudaMemcpyDeviceToHost, stream));
  GA_CUDA_CHECK(cudaStreamSynchronize(stream));
  GA_CUDA_CHECK(cudaFree(d));
  return h;
}

double wall_us(const std::chrono::steady_clock::time_point& a, const std::chrono::steady_clock::time_point& b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

Result run_case(int64_t n_rows, int64_t n_vocab, bool greedy, size_t l2_bytes, cudaStream_t stream) {
  const int32_t k = greedy ? 20 : 256;
  const size_t row_bytes = static_cast<size_t>(n_rows * n_vocab) * sizeof(float);
  const int copies = static_cast<int>(std::clamp<size_t>((4 * l2_bytes + row_bytes - 1) / row_bytes, 2, 256));
  std::vector<float> host(static_cast<size_t>(n_rows * n_vocab));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (auto& v : host) v = normal(rng);
  float* logits = nullptr;
  GA_CUDA_CHECK(cudaMalloc(&logits, row_bytes * static_cast<size_t>(copies)));
  for (int c = 0; c < copies; ++c) {
    GA_CUDA_CHECK(cudaMemcpy(logits + static_cast<size_t>(c) * host.size(), host.data(), row_bytes,
                             cudaMemcpyHostToDevice));
  }

  // Per-row parameters and penalties, uploaded once (the graph replays the kernels only).
  std::vector<ga::cuda::SamplingRowParams> rows(static_cast<size_t>(n_rows));
  std::vector<int32_t> pen_ids, pen_counts;
  std::vector<ga::cuda::SamplingRowRequest> requests(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    auto& rp = rows[static_cast<size_t>(r)];
    auto& req = requests[static_cast<size_t>(r)];
    rp.temperature = req.temperature = greedy ? 0.0f : 0.8f;
    if (!greedy) {
      rp.repeat_penalty = req.repeat_penalty = 1.1f;
      rp.penalty_begin = static_cast<int32_t>(pen_ids.size());
      for (int i = 0; i < 64; ++i) {
        const int32_t id = static_cast<int32_t>((r * 977 + i * 1999) % n_vocab);
        if (std::find(pen_ids.begin() + rp.penalty_begin, pen_ids.end(), id) != pen_ids.end()) continue;
        pen_ids.push_back(id);
        pen_counts.push_back(1 + i % 3);
        req.penalties.emplace_back(id, 1 + i % 3);
      }
      rp.penalty_count = static_cast<int32_t>(pen_ids.size()) - rp.penalty_begin;
    }
  }
  ga::cuda::SamplingRowParams* d_rows = nullptr;
  int32_t* d_pen = nullptr;
  GA_CUDA_CHECK(cudaMalloc(&d_rows, rows.size() * sizeof(rows[0])));
  GA_CUDA_CHECK(cudaMemcpy(d_rows, rows.data(), rows.size() * sizeof(rows[0]), cudaMemcpyHostToDevice));
  GA_CUDA_CHECK(cudaMalloc(&d_pen, 2 * std::max<size_t>(pen_ids.size(), 1) * sizeof(int32_t)));
  if (!pen_ids.empty()) {
    GA_CUDA_CHECK(cudaMemcpy(d_pen, pen_ids.data(), pen_ids.size() * 4, cudaMemcpyHostToDevice));
    GA_CUDA_CHECK(cudaMemcpy(d_pen + pen_ids.size(), pen_counts.data(), pen_ids.size() * 4, cudaMemcpyHostToDevice));
  }
  const size_t ws_bytes = ga::cuda::sampling_workspace_bytes(n_rows, n_vocab, k);
  void* ws = nullptr;
  unsigned char* out = nullptr;
  const size_t nk = static_cast<size_t>(n_rows * k);
  GA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  GA_CUDA_CHECK(cudaMalloc(&out, nk * 12 + static_cast<size_t>(n_rows) * sizeof(ga::cuda::SamplingRowStats) + 16));
  ga::cuda::SamplingSelectParams p;
  p.n_rows = n_rows;
  p.n_vocab = n_vocab;
  p.ld = n_vocab;
  p.rows = d_rows;
  p.penalty_ids = d_pen;
  p.penalty_counts = d_pen + pen_ids.size();
  p.k = k;
  p.workspace = ws;
  p.workspace_bytes = ws_bytes;
  p.out_ids = reinterpret_cast<int32_t*>(out);
  p.out_logits = reinterpret_cast<float*>(out + nk * 4);
  p.out_raw_logits = reinterpret_cast<float*>(out + nk * 8);
  p.out_stats = reinterpret_cast<ga::cuda::SamplingRowStats*>(out + ((nk * 12 + 15) & ~size_t{15}));

  constexpr int kPerGraph = 20;
  auto timed = [&](bool rotate) {
    cudaGraphExec_t graph = capture(stream, kPerGraph, [&](int i) {
      ga::cuda::SamplingSelectParams q = p;
      q.logits = logits + (rotate ? static_cast<size_t>(i % copies) * host.size() : 0);
      return ga::cuda::sampling_select(q, stream);
    });
    const auto spin_start = std::chrono::steady_clock::now();
    do {  // leave the idle clock before timing (see the header)
      GA_CUDA_CHECK(cudaGraphLaunch(graph, stream));
      GA_CUDA_CHECK(cudaStreamSynchronize(stream));
    } while (wall_us(spin_start, std::chrono::steady_clock::now()) < 30000.0);
    const double ms = time_graph(graph, stream, 3, 30);
    GA_CUDA_CHECK(cudaGraphExecDestroy(graph));
    return ms * 1000.0 / kPerGraph;
  };
  Result r;
  r.what = std::string(greedy ? "greedy k20" : "sample k256+pen") + ", " + std::to_string(n_rows) + " x " +
           std::to_string(n_vocab);
  r.kernel_cold_us = timed(true);
  r.sm_mhz = sm_mhz_now(stream);
  r.kernel_hot_us = timed(false);
  r.gbps = 2.0 * static_cast<double>(row_bytes) / (r.kernel_cold_us * 1e3);

  // The host call the runtime makes.
  auto sampling = ga::cuda::make_cuda_sampling(0, n_rows, n_vocab, k, stream);
  std::vector<ga::cuda::SamplingRowCandidates> cands;
  std::vector<double> select_us, copy_us;
  float* pinned = nullptr;
  GA_CUDA_CHECK(cudaMallocHost(&pinned, row_bytes));
  for (int i = 0; i < 33; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    sampling->select(logits, n_vocab, requests, k, cands);
    const auto t1 = std::chrono::steady_clock::now();
    GA_CUDA_CHECK(cudaMemcpyAsync(pinned, logits, row_bytes, cudaMemcpyDeviceToHost, stream));
    GA_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto t2 = std::chrono::steady_clock::now();
    if (i >= 3) {
      select_us.push_back(wall_us(t0, t1));
      copy_us.push_back(wall_us(t1, t2));
    }
  }
  r.select_us = median(select_us);
  r.copy_us = median(copy_us);
  GA_CUDA_CHECK(cudaFreeHost(pinned));
  GA_CUDA_CHECK(cudaFree(out));
  GA_CUDA_CHECK(cudaFree(ws));
  GA_CUDA_CHECK(cudaFree(d_pen));
  GA_CUDA_CHECK(cudaFree(d_rows));
  GA_CUDA_CHECK(cudaFree(logits));
  return r;
}

}  // namespace

int main() try {
  if (!ga::bench::open_bench_device()) return 0;
  const ga::cuda::CudaCeilings ceilings = ga::cuda::measure_cuda_ceilings(0);
  const std::vector<ga::CudaDeviceInfo> devices = ga::cuda_devices();
  const size_t l2 = devices.empty() ? (50u << 20) : static_cast<size_t>(devices[0].l2_bytes);
  ga::cuda::Stream stream(0);
  std::vector<Result> results;
  for (const bool greedy : {true, false}) {
    for (const int64_t vocab : {int64_t{32000}, int64_t{128256}}) {
      for (const int64_t rows : {int64_t{1}, int64_t{16}, int64_t{64}}) {
        results.push_back(run_case(rows, vocab, greedy, l2, stream.get()));
        const Result& r = results.back();
        std::printf("%s: kernel %.2f us (hot %.2f), select() %.1f us, D2H copy %.1f us, SM %.0f MHz\n",
                    r.what.c_str(), r.kernel_cold_us, r.kernel_hot_us, r.select_us, r.copy_us, r.sm_mhz);
      }
    }
  }
  std::printf("\nGPU sampling selection on %s; device-to-device copy (read + write): %.0f GB/s\n",
              ceilings.device_name.c_str(), ceilings.copy_gbps);
  std::printf("| case | kernel us (L2 cold) | kernel us (L2 hot) | read GB/s | of copy | select() us | "
              "full D2H copy us |"
              " SM MHz |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Result& r : results) {
    std::printf("| %s | %.2f | %.2f | %.0f | %.0f%% | %.1f | %.1f | %.0f |\n", r.what.c_str(), r.kernel_cold_us,
                r.kernel_hot_us, r.gbps, 100.0 * r.gbps / ceilings.copy_gbps, r.select_us, r.copy_us, r.sm_mhz);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ga_bench_sampling: %s\n", e.what());
  return 1;
}
