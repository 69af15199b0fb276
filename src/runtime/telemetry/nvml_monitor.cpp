// NVML through dlopen. The types below mirror the few parts of nvml.h this file uses (a stable C
// ABI since NVML 1.0): the return code is an int (0 = success), a device is an opaque pointer, and
// the structs are plain C structs of unsigned fields.
#include "runtime/telemetry/nvml_monitor.h"

#include <dlfcn.h>

#include <algorithm>

#include "gpu_accel/error.h"

namespace ga::telemetry {
namespace {

using nvmlReturn = int;
constexpr nvmlReturn kNvmlSuccess = 0;
struct nvmlDeviceOpaque;
using nvmlDevice = nvmlDeviceOpaque*;
struct nvmlUtilization {
  unsigned gpu;
  unsigned memory;
};
struct nvmlMemory {  // the v1 struct of nvmlDeviceGetMemoryInfo
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int kNvmlTemperatureGpu = 0;                                  // nvmlTemperatureSensors_t
constexpr int kNvmlClockSm = 1, kNvmlClockMem = 2;                      // nvmlClockType_t
constexpr unsigned kNvmlNameBuffer = 96;                                // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr double kMilliwattsPerWatt = 1000.0;

}  // namespace

struct NvmlMonitor::Api {
  nvmlReturn (*init)() = nullptr;
  nvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn) = nullptr;
  nvmlReturn (*get_count)(unsigned*) = nullptr;
  nvmlReturn (*get_handle)(unsigned, nvmlDevice*) = nullptr;
  nvmlReturn (*get_name)(nvmlDevice, char*, unsigned) = nullptr;
  nvmlReturn (*get_utilization)(nvmlDevice, nvmlUtilization*) = nullptr;
  nvmlReturn (*get_memory)(nvmlDevice, nvmlMemory*) = nullptr;
  nvmlReturn (*get_temperature)(nvmlDevice, int, unsigned*) = nullptr;
  nvmlReturn (*get_power)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn (*get_power_limit)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn (*get_clock)(nvmlDevice, int, unsigned*) = nullptr;
  nvmlReturn (*get_max_clock)(nvmlDevice, int, unsigned*) = nullptr;
  nvmlReturn (*get_bus_width)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn (*get_compute_capability)(nvmlDevice, int*, int*) = nullptr;
  nvmlReturn (*get_cores)(nvmlDevice, unsigned*) = nullptr;

  std::string describe(nvmlReturn code) const {
    const char* text = error_string ? error_string(code) : nullptr;
    return text ? ga::str(text, " (NVML error ", code, ")") : ga::str("NVML error ", code);
  }
};

namespace {

template <typename Fn>
void bind(void* handle, Fn& fn, const char* symbol) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
}

// Calls an optional query; the figure stays empty when the entry point is missing or NVML declines.
template <typename T, typename Fn, typename... Args>
std::optional<T> query(Fn fn, nvmlDevice device, Args... args) {
  if (!fn) return std::nullopt;
  T value{};
  if (fn(device, args..., &value) != kNvmlSuccess) return std::nullopt;
  return value;
}

}  // namespace

NvmlMonitor::NvmlMonitor(const std::string& library) : api_(std::make_unique<Api>()) {
  handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* err = dlerror();
    reason_ = ga::str("NVML not found: dlopen(", library, ") failed: ", err ? err : "unknown error",
                      " (no NVIDIA driver on this machine?)");
    return;
  }
  Api& a = *api_;
  bind(handle_, a.init, "nvmlInit_v2");
  bind(handle_, a.shutdown, "nvmlShutdown");
  bind(handle_, a.error_string, "nvmlErrorString");
  bind(handle_, a.get_count, "nvmlDeviceGetCount_v2");
  bind(handle_, a.get_handle, "nvmlDeviceGetHandleByIndex_v2");
  bind(handle_, a.get_name, "nvmlDeviceGetName");
  bind(handle_, a.get_utilization, "nvmlDeviceGetUtilizationRates");
  bind(handle_, a.get_memory, "nvmlDeviceGetMemoryInfo");
  bind(handle_, a.get_temperature, "nvmlDeviceGetTemperature");
  bind(handle_, a.get_power, "nvmlDeviceGetPowerUsage");
  bind(handle_, a.get_power_limit, "nvmlDeviceGetEnforcedPowerLimit");
  bind(handle_, a.get_clock, "nvmlDeviceGetClockInfo");
  bind(handle_, a.get_max_clock, "nvmlDeviceGetMaxClockInfo");
  bind(handle_, a.get_bus_width, "nvmlDeviceGetMemoryBusWidth");
  bind(handle_, a.get_compute_capability, "nvmlDeviceGetCudaComputeCapability");
  bind(handle_, a.get_cores, "nvmlDeviceGetNumGpuCores");
  if (!a.init || !a.shutdown || !a.get_count || !a.get_handle) {
    reason_ = ga::str(library, " lacks nvmlInit_v2/nvmlDeviceGetCount_v2/nvmlDeviceGetHandleByIndex_v2 (driver too old)");
    return;
  }
  if (nvmlReturn rc = a.init(); rc != kNvmlSuccess) {
    reason_ = "nvmlInit failed: " + a.describe(rc);
    return;
  }
  initialized_ = true;
  unsigned count = 0;
  if (nvmlReturn rc = a.get_count(&count); rc != kNvmlSuccess) {
    reason_ = "nvmlDeviceGetCount failed: " + a.describe(rc);
    return;
  }
  if (count == 0) {
    reason_ = "NVML reports no GPU";
    return;
  }
  device_count_ = static_cast<int>(count);
  available_ = true;
}

NvmlMonitor::~NvmlMonitor() {
  if (initialized_) api_->shutdown();
  if (handle_) dlclose(handle_);
}

std::optional<GpuSnapshot> NvmlMonitor::sample(int index) {
  if (!available_) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  const Api& a = *api_;
  GpuSnapshot s;
  s.index = std::clamp(index, 0, device_count_ - 1);
  s.device_count = device_count_;
  nvmlDevice device = nullptr;
  if (a.get_handle(static_cast<unsigned>(s.index), &device) != kNvmlSuccess) return std::nullopt;

  char name[kNvmlNameBuffer] = {};
  if (a.get_name && a.get_name(device, name, kNvmlNameBuffer) == kNvmlSuccess) s.name = name;
  if (auto util = query<nvmlUtilization>(a.get_utilization, device)) {
    s.utilization_gpu_percent = util->gpu;
    s.utilization_memory_percent = util->memory;
  }
  if (auto mem = query<nvmlMemory>(a.get_memory, device)) {
    s.memory_used_bytes = mem->used;
    s.memory_total_bytes = mem->total;
  }
  s.temperature_c = query<unsigned>(a.get_temperature, device, kNvmlTemperatureGpu);
  if (auto mw = query<unsigned>(a.get_power, device)) s.power_w = *mw / kMilliwattsPerWatt;
  if (auto mw = query<unsigned>(a.get_power_limit, device)) s.power_limit_w = *mw / kMilliwattsPerWatt;
  s.sm_clock_mhz = query<unsigned>(a.get_clock, device, kNvmlClockSm);
  s.sm_clock_max_mhz = query<unsigned>(a.get_max_clock, device, kNvmlClockSm);
  s.memory_clock_mhz = query<unsigned>(a.get_clock, device, kNvmlClockMem);
  s.memory_clock_max_mhz = query<unsigned>(a.get_max_clock, device, kNvmlClockMem);
  s.memory_bus_width_bits = query<unsigned>(a.get_bus_width, device);
  s.cuda_cores = query<unsigned>(a.get_cores, device);
  int major = 0, minor = 0;
  if (a.get_compute_capability && a.get_compute_capability(device, &major, &minor) == kNvmlSuccess) {
    s.compute_capability_major = major;
    s.compute_capability_minor = minor;
  }
  return s;
}

std::optional<double> peak_memory_gbs(const GpuSnapshot& gpu) {
  if (!gpu.memory_clock_max_mhz || !gpu.memory_bus_width_bits) return std::nullopt;
  constexpr double kDataRate = 2.0;  // two transfers per clock (DDR / HBM)
  constexpr double kBitsPerByte = 8.0, kHzPerMhz = 1e6, kBytesPerGb = 1e9;
  return *gpu.memory_clock_max_mhz * kHzPerMhz * kDataRate * (*gpu.memory_bus_width_bits / kBitsPerByte) /
         kBytesPerGb;
}

std::optional<double> peak_fp16_tflops(const GpuSnapshot& gpu) {
  if (!gpu.compute_capability_major || !gpu.compute_capability_minor || !gpu.cuda_cores || !gpu.sm_clock_max_mhz) {
    return std::nullopt;
  }
  // FP32 cores per SM (to turn NVML's core count into SMs) and dense FP16 tensor FLOPs per clock per
  // SM, from the Volta/Turing/Ampere/Ada/Hopper whitepapers. GeForce Ampere/Ada halve the rate with
  // FP32 accumulation; the figure here is the FP16-accumulate one those papers quote.
  struct ArchRate {
    int major, minor, cores_per_sm, fp16_flops_per_clock_per_sm;
  };
  static constexpr ArchRate kRates[] = {
      {7, 0, 64, 1024},   // V100: 8 tensor cores x 64 FMA x 2
      {7, 5, 64, 1024},   // Turing: 8 x 64 x 2
      {8, 0, 64, 2048},   // A100: 4 x 256 x 2
      {8, 6, 128, 1024},  // GA10x: 4 x 128 x 2
      {8, 9, 128, 1024},  // Ada: 4 x 128 x 2
      {9, 0, 128, 4096},  // Hopper: 4 x 512 x 2
  };
  for (const ArchRate& r : kRates) {
    if (r.major != *gpu.compute_capability_major || r.minor != *gpu.compute_capability_minor) continue;
    double sms = static_cast<double>(*gpu.cuda_cores / static_cast<unsigned>(r.cores_per_sm));
    constexpr double kHzPerMhz = 1e6, kFlopsPerTflop = 1e12;
    return sms * r.fp16_flops_per_clock_per_sm * (*gpu.sm_clock_max_mhz * kHzPerMhz) / kFlopsPerTflop;
  }
  return std::nullopt;
}

}  // namespace ga::telemetry
