// Live CPU figures for the dashboard: process RSS, process and machine CPU utilization, core
// count, and a memory-copy bandwidth measured once (the CPU's "ceiling" for bandwidth-bound decode).
//
// Utilization is a rate, so it needs two readings of the cumulative tick counters. CpuMonitor keeps
// the previous reading and recomputes the rates only when at least min_interval has passed: several
// browser tabs polling every second would otherwise measure over a few milliseconds (all noise). In
// between, it returns the last rates. Thread-safe (HTTP handlers run on several threads).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>

#include "runtime/telemetry/proc_stats.h"

namespace ga::telemetry {

struct CpuSnapshot {
  int cores = 1;                          // usable logical CPUs
  std::optional<uint64_t> rss_bytes;      // resident memory of this process
  std::optional<uint64_t> mem_total_bytes;
  std::optional<uint64_t> mem_available_bytes;
  // 100 = one core busy (like top); up to 100 x cores.
  std::optional<double> process_cpu_percent;
  // 0..100 over all of the machine's CPUs.
  std::optional<double> machine_cpu_percent;
};

class CpuMonitor {
 public:
  explicit CpuMonitor(std::chrono::milliseconds min_interval = std::chrono::milliseconds(500));
  CpuSnapshot sample();

 private:
  struct Reading {
    std::chrono::steady_clock::time_point when;
    std::optional<ProcessCpuTicks> process;
    std::optional<MachineCpuTicks> machine;
  };
  static Reading read_now();

  std::chrono::milliseconds min_interval_;
  std::mutex mutex_;
  Reading previous_;
  std::optional<double> process_percent_;
  std::optional<double> machine_percent_;
  int64_t ticks_per_second_;
};

// Utilization rates between two readings (pure, for tests). nullopt when either reading is missing
// or no time/ticks passed.
std::optional<double> process_cpu_percent(const ProcessCpuTicks& before, const ProcessCpuTicks& after,
                                          double seconds, int64_t ticks_per_second);
std::optional<double> machine_cpu_percent(const MachineCpuTicks& before, const MachineCpuTicks& after);

struct CopyBandwidth {
  double gb_per_second = 0;  // (bytes read + bytes written) / best time, in 1e9 bytes/s
  uint64_t buffer_bytes = 0;
  int repeats = 0;
};

// memcpy of `bytes` between two freshly allocated buffers, best of `repeats` timed copies after one
// untimed copy that faults the pages in. Counts read + write traffic (2 x bytes), as STREAM's Copy
// does. Throws ga::Error (OutOfMemory) when the buffers cannot be allocated.
CopyBandwidth measure_copy_bandwidth(uint64_t bytes = uint64_t{256} << 20, int repeats = 3);

}  // namespace ga::telemetry
