// Timing helpers shared by the GPU micro-benchmarks: graph capture of many launches (so launch gaps
// do not count), median-of-samples timing with CUDA events. The ceilings (copy bandwidth, cuBLAS
// GEMM) come from ga::cuda::measure_cuda_ceilings, the same function `gpu-accel bench` uses. Each
// benchmark's main() starts with open_bench_device(): it prints SKIPPED and exits 0 without a GPU.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/stream.h"
#include "gpu_accel/device.h"

namespace ga::bench {

// Without a CUDA device: prints "SKIPPED: no CUDA device (why)" and returns false (main returns 0).
// With one: prints the device summary and returns true.
inline bool open_bench_device() {
  std::string reason;
  if (ga::cuda::device_count(&reason) == 0) {
    std::printf("SKIPPED: no CUDA device (%s)\n", reason.c_str());
    return false;
  }
  std::printf("%s\n", ga::cuda_device_summary().c_str());
  return true;
}

// "1,2,512" -> {1, 2, 512}: the benchmarks' list arguments (token counts, lengths).
inline std::vector<int64_t> parse_int_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(std::stoll(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

#if defined(__CUDACC__)  // (the .cpp benchmarks include this header too)
// Pseudo-random bytes (a hash of the index), written on the device: no host transfer of GBs. Weights of
// random bytes time like real ones (a NaN scale is harmless to a timing).
static __global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x85EBCA77u;
    h ^= h >> 13;
    p[i] = static_cast<uint8_t>(h);
  }
}
#endif

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of one launch of `graph`, after `warmup` untimed launches.
inline double time_graph(cudaGraphExec_t graph, cudaStream_t stream, int warmup, int samples) {
  ga::cuda::Event start, stop;
  for (int i = 0; i < warmup; ++i) GA_CUDA_CHECK(cudaGraphLaunch(graph, stream));
  std::vector<double> ms;
  for (int i = 0; i < samples; ++i) {
    start.record(stream);
    GA_CUDA_CHECK(cudaGraphLaunch(graph, stream));
    stop.record(stream);
    stop.synchronize();
    ms.push_back(ga::cuda::Event::elapsed_ms(start, stop));
  }
  return median(ms);
}

// Captures launch(0) .. launch(n-1) into one executable graph. `launch` may return a cudaError_t
// (checked) or nothing (it throws on failure); either way a failed capture leaves the stream usable.
template <class F>
cudaGraphExec_t capture(cudaStream_t stream, int n, F&& launch) {
  cudaGraph_t graph = nullptr;
  GA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<std::invoke_result_t<F&, int>, cudaError_t>) {
        GA_CUDA_CHECK(launch(i));
      } else {
        launch(i);
      }
    }
  } catch (...) {
    (void)cudaStreamEndCapture(stream, &graph);  // leave the stream usable, drop the partial graph
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  GA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  GA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  GA_CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

}  // namespace ga::bench
