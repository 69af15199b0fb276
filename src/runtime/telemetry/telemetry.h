// The dashboard's machine figures in one object: CPU (from /proc), GPU (NVML, when present), the
// achieved throughput of the model and the ceiling it is compared with, as JSON.
//
// Telemetry owns the long-lived monitors (NVML stays initialized; CpuMonitor keeps the previous
// tick reading) and measures the CPU's memory-copy bandwidth once, on a background thread started
// by the constructor, so the server answers its first requests without waiting ~0.5 s for it; the
// CPU ceiling reads null ("measuring") until then. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/telemetry/cpu_monitor.h"
#include "runtime/telemetry/nvml_monitor.h"

namespace ga::telemetry {

struct TelemetryOptions {
  std::string nvml_library = "libnvidia-ml.so.1";
  bool measure_copy_bandwidth = true;
  uint64_t copy_bytes = uint64_t{256} << 20;  // large enough to defeat every cache level
  int copy_repeats = 3;
};

// "cpu" -> {"cpu", -1}; "cuda" -> {"cuda", 0}; "cuda:1" -> {"cuda", 1}. Anything else keeps its
// name before ':' as the kind.
struct DeviceRef {
  std::string kind;
  int index = -1;
};
DeviceRef parse_device(const std::string& device);

class Telemetry {
 public:
  explicit Telemetry(TelemetryOptions options = {});
  ~Telemetry();  // waits for the bandwidth measurement
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  // {"device": {...}, "gpu": {...}|null, "cpu": {...}, "throughput": {...}} for a model that runs
  // on `scheduler["device"]`. `model` gives "n_params" (and "weight_bytes" when the scheduler does
  // not); `scheduler` gives the token rates, "running" and "weight_bytes". Missing fields count as 0.
  nlohmann::json snapshot(const nlohmann::json& model, const nlohmann::json& scheduler);

  bool gpu_available() const { return nvml_.available(); }
  const std::string& gpu_unavailable_reason() const { return nvml_.reason(); }
  std::optional<CopyBandwidth> copy_bandwidth() const;
  std::optional<std::string> copy_bandwidth_error() const;
  void wait_for_copy_bandwidth();  // joins the measuring thread (tests)

 private:
  TelemetryOptions options_;
  NvmlMonitor nvml_;
  CpuMonitor cpu_;
  std::optional<std::string> cpu_model_name_;
  mutable std::mutex copy_mutex_;
  std::optional<CopyBandwidth> copy_;
  std::optional<std::string> copy_error_;
  std::thread copy_thread_;
  std::mutex join_mutex_;
};

// JSON of the snapshots (absent figures become null), for tests and the route.
nlohmann::json gpu_to_json(const GpuSnapshot& gpu);
nlohmann::json cpu_to_json(const CpuSnapshot& cpu);

}  // namespace ga::telemetry
