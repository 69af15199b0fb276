// GPU figures through NVML (NVIDIA's management library), loaded with dlopen at run time.
//
// Why dlopen: the dashboard must work in the CPU-only build and on machines without a driver, and
// a link dependency on libnvidia-ml would make the binary refuse to start there. So no NVML header
// and no link flag: the few entry points used are declared by hand in nvml_monitor.cpp and looked up
// with dlsym. When the library is missing, nvmlInit fails or no device exists, available() is false
// and reason() says why; the page shows that reason instead of GPU panels.
//
// Each figure is optional: NVML answers NOT_SUPPORTED for some queries on some boards (power on
// many consumer cards, utilization under MIG), and one missing figure must not hide the others.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace ga::telemetry {

struct GpuSnapshot {
  int index = 0;
  int device_count = 0;
  std::string name;
  std::optional<unsigned> utilization_gpu_percent;     // time a kernel was running, last sample period
  std::optional<unsigned> utilization_memory_percent;  // time device memory was read or written
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<unsigned> temperature_c;
  std::optional<double> power_w;
  std::optional<double> power_limit_w;
  std::optional<unsigned> sm_clock_mhz;
  std::optional<unsigned> sm_clock_max_mhz;
  std::optional<unsigned> memory_clock_mhz;
  std::optional<unsigned> memory_clock_max_mhz;
  std::optional<unsigned> memory_bus_width_bits;
  std::optional<int> compute_capability_major;
  std::optional<int> compute_capability_minor;
  std::optional<unsigned> cuda_cores;  // nvmlDeviceGetNumGpuCores (drivers >= 520)
};

class NvmlMonitor {
 public:
  // Loads and initializes NVML from `library` (a soname or path). Never throws: failures are kept
  // in reason().
  explicit NvmlMonitor(const std::string& library = "libnvidia-ml.so.1");
  ~NvmlMonitor();
  NvmlMonitor(const NvmlMonitor&) = delete;
  NvmlMonitor& operator=(const NvmlMonitor&) = delete;

  bool available() const { return available_; }
  const std::string& reason() const { return reason_; }
  int device_count() const { return device_count_; }

  // Figures of GPU `index` (clamped into [0, device_count)); nullopt when !available().
  std::optional<GpuSnapshot> sample(int index);

 private:
  struct Api;
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
  bool available_ = false;
  bool initialized_ = false;
  std::string reason_;
  int device_count_ = 0;
  std::mutex mutex_;  // NVML is thread-safe, but the cached device handles are not worth racing on
};

// Peak memory bandwidth from NVML's figures: max memory clock x 2 (double data rate) x bus width.
// This is the usual derivation (it gives 3.35 TB/s for H100 SXM, 2.04 TB/s for A100 80GB, 936 GB/s
// for RTX 3090); nullopt when a figure is missing.
std::optional<double> peak_memory_gbs(const GpuSnapshot& gpu);

// Dense FP16 tensor-core peak in TFLOP/s: SMs x FLOPs per clock per SM x max SM clock. The per-SM
// rate comes from NVIDIA's architecture whitepapers for compute capabilities 7.0 - 9.0 (dense,
// FP32 accumulate on data-center parts); nullopt for others or when a figure is missing.
std::optional<double> peak_fp16_tflops(const GpuSnapshot& gpu);

}  // namespace ga::telemetry
