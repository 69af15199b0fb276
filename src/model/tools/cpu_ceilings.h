// The CPU's ceilings, measured in the same run as a benchmark so that throughput can be quoted as a
// fraction of what this machine, at this moment, can do (the load of other processes included).
//
// - copy bandwidth: a threaded memcpy of a buffer far larger than the caches; bytes read + bytes
//   written per second (the convention of the GPU anchors' device-to-device copy);
// - matmul FLOP/s: a dense float32 product through our own cpu::matmul (the prefill path), 2*M*N*K
//   FLOPs per call. This is our kernel's peak, not the silicon's: labelled as such in reports.
// Both report the best of several repetitions (the least disturbed).
#pragma once

#include <cstdint>

namespace ga {
class ThreadPool;
}

namespace ga::tools {

struct CpuCeilings {
  double copy_bytes_per_s = 0.0;  // read + written
  uint64_t copy_buffer_bytes = 0;
  double matmul_flops_per_s = 0.0;
  int64_t matmul_m = 0, matmul_n = 0, matmul_k = 0;  // tokens, rows, cols
  int n_threads = 0;
};

struct CeilingOptions {
  uint64_t copy_bytes = uint64_t{256} << 20;  // per buffer (two buffers)
  int copy_reps = 5;
  int64_t matmul_tokens = 128;  // M
  int64_t matmul_size = 1024;   // N = K
  int matmul_reps = 3;
};

CpuCeilings measure_cpu_ceilings(ThreadPool& pool, const CeilingOptions& options = {});

}  // namespace ga::tools
