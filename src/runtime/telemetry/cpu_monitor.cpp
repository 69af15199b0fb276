// CpuMonitor and the one-time memcpy bandwidth measurement; see cpu_monitor.h for why the rates are
// computed over a minimum interval.
#include "runtime/telemetry/cpu_monitor.h"

#include <cstring>
#include <memory>
#include <new>

#include "gpu_accel/error.h"

namespace ga::telemetry {

std::optional<double> process_cpu_percent(const ProcessCpuTicks& before, const ProcessCpuTicks& after,
                                          double seconds, int64_t ticks_per_second) {
  if (seconds <= 0 || ticks_per_second <= 0 || after.total() < before.total()) return std::nullopt;
  double cpu_seconds = static_cast<double>(after.total() - before.total()) / static_cast<double>(ticks_per_second);
  return 100.0 * cpu_seconds / seconds;
}

std::optional<double> machine_cpu_percent(const MachineCpuTicks& before, const MachineCpuTicks& after) {
  if (after.total() <= before.total() || after.busy < before.busy) return std::nullopt;
  return 100.0 * static_cast<double>(after.busy - before.busy) / static_cast<double>(after.total() - before.total());
}

CpuMonitor::Reading CpuMonitor::read_now() {
  return Reading{std::chrono::steady_clock::now(), read_process_cpu_ticks(), read_machine_cpu_ticks()};
}

CpuMonitor::CpuMonitor(std::chrono::milliseconds min_interval)
    : min_interval_(min_interval), previous_(read_now()), ticks_per_second_(clock_ticks_per_second()) {}

CpuSnapshot CpuMonitor::sample() {
  CpuSnapshot snap;
  snap.cores = usable_cpu_count();
  snap.rss_bytes = read_process_rss_bytes();
  if (auto mem = read_meminfo()) {
    snap.mem_total_bytes = mem->total_bytes;
    snap.mem_available_bytes = mem->available_bytes;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto now = std::chrono::steady_clock::now();
  if (now - previous_.when >= min_interval_) {
    Reading current = read_now();
    double seconds = std::chrono::duration<double>(current.when - previous_.when).count();
    if (previous_.process && current.process) {
      process_percent_ = process_cpu_percent(*previous_.process, *current.process, seconds, ticks_per_second_);
    }
    if (previous_.machine && current.machine) {
      auto rate = machine_cpu_percent(*previous_.machine, *current.machine);
      if (rate) machine_percent_ = rate;  // an interval shorter than one tick keeps the last rate
    }
    previous_ = current;
  }
  snap.process_cpu_percent = process_percent_;
  snap.machine_cpu_percent = machine_percent_;
  return snap;
}

CopyBandwidth measure_copy_bandwidth(uint64_t bytes, int repeats) {
  GA_CHECK(bytes > 0 && repeats > 0, InvalidArgument, "copy bandwidth needs bytes > 0 and repeats > 0");
  std::unique_ptr<char[]> src(new (std::nothrow) char[bytes]);
  std::unique_ptr<char[]> dst(new (std::nothrow) char[bytes]);
  GA_CHECK(src && dst, OutOfMemory, "cannot allocate 2 x ", bytes, " bytes to measure memory bandwidth");
  // Writing the source and one untimed copy fault every page in, so the timed copies measure DRAM
  // traffic rather than the kernel's page-fault path.
  std::memset(src.get(), 1, bytes);
  std::memcpy(dst.get(), src.get(), bytes);
  double best_seconds = 0;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    std::memcpy(dst.get(), src.get(), bytes);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i == 0 || seconds < best_seconds) best_seconds = seconds;
  }
  // Keep the compiler from treating the copies as dead stores.
  volatile char sink = dst[bytes / 2];
  (void)sink;
  constexpr double kBytesPerGb = 1e9;
  CopyBandwidth result;
  result.buffer_bytes = bytes;
  result.repeats = repeats;
  result.gb_per_second = best_seconds > 0 ? 2.0 * static_cast<double>(bytes) / best_seconds / kBytesPerGb : 0;
  return result;
}

}  // namespace ga::telemetry
