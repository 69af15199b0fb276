// Assembles the dashboard's machine JSON from the monitors; see telemetry.h.
#include "runtime/telemetry/telemetry.h"

#include <charconv>
#include <exception>

#include "gpu_accel/error.h"
#include "runtime/telemetry/throughput.h"

namespace ga::telemetry {
namespace {

using nlohmann::json;

template <typename T>
json or_null(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

double number_or_zero(const json& object, const char* key) {
  if (!object.is_object()) return 0;
  auto it = object.find(key);
  return (it != object.end() && it->is_number()) ? it->get<double>() : 0;
}

}  // namespace

DeviceRef parse_device(const std::string& device) {
  DeviceRef ref;
  size_t colon = device.find(':');
  ref.kind = device.substr(0, colon);
  if (ref.kind == "cuda") ref.index = 0;
  if (colon != std::string::npos) {
    int index = 0;
    const char* begin = device.data() + colon + 1;
    const char* end = device.data() + device.size();
    auto [ptr, ec] = std::from_chars(begin, end, index);
    if (ec == std::errc() && ptr == end && index >= 0) ref.index = index;
  }
  return ref;
}

json gpu_to_json(const GpuSnapshot& g) {
  json cc = nullptr;
  if (g.compute_capability_major && g.compute_capability_minor) {
    cc = std::to_string(*g.compute_capability_major) + "." + std::to_string(*g.compute_capability_minor);
  }
  return json{{"index", g.index},
              {"count", g.device_count},
              {"name", g.name},
              {"utilization_gpu_percent", or_null(g.utilization_gpu_percent)},
              {"utilization_memory_percent", or_null(g.utilization_memory_percent)},
              {"memory_used_bytes", or_null(g.memory_used_bytes)},
              {"memory_total_bytes", or_null(g.memory_total_bytes)},
              {"temperature_c", or_null(g.temperature_c)},
              {"power_w", or_null(g.power_w)},
              {"power_limit_w", or_null(g.power_limit_w)},
              {"sm_clock_mhz", or_null(g.sm_clock_mhz)},
              {"sm_clock_max_mhz", or_null(g.sm_clock_max_mhz)},
              {"memory_clock_mhz", or_null(g.memory_clock_mhz)},
              {"memory_clock_max_mhz", or_null(g.memory_clock_max_mhz)},
              {"memory_bus_width_bits", or_null(g.memory_bus_width_bits)},
              {"compute_capability", cc},
              {"cuda_cores", or_null(g.cuda_cores)}};
}

json cpu_to_json(const CpuSnapshot& c) {
  return json{{"cores", c.cores},
              {"process_rss_bytes", or_null(c.rss_bytes)},
              {"process_cpu_percent", or_null(c.process_cpu_percent)},
              {"machine_cpu_percent", or_null(c.machine_cpu_percent)},
              {"mem_total_bytes", or_null(c.mem_total_bytes)},
              {"mem_available_bytes", or_null(c.mem_available_bytes)}};
}

Telemetry::Telemetry(TelemetryOptions options)
    : options_(std::move(options)), nvml_(options_.nvml_library), cpu_model_name_(read_cpu_model_name()) {
  if (options_.measure_copy_bandwidth) {
    copy_thread_ = std::thread([this] {
      try {
        CopyBandwidth measured = measure_copy_bandwidth(options_.copy_bytes, options_.copy_repeats);
        std::lock_guard<std::mutex> lock(copy_mutex_);
        copy_ = measured;
      } catch (const std::exception& e) {  // e.g. not enough memory: the ceiling stays unknown
        std::lock_guard<std::mutex> lock(copy_mutex_);
        copy_error_ = e.what();
      }
    });
  }
}

Telemetry::~Telemetry() { wait_for_copy_bandwidth(); }

void Telemetry::wait_for_copy_bandwidth() {
  std::lock_guard<std::mutex> lock(join_mutex_);
  if (copy_thread_.joinable()) copy_thread_.join();
}

std::optional<CopyBandwidth> Telemetry::copy_bandwidth() const {
  std::lock_guard<std::mutex> lock(copy_mutex_);
  return copy_;
}

std::optional<std::string> Telemetry::copy_bandwidth_error() const {
  std::lock_guard<std::mutex> lock(copy_mutex_);
  return copy_error_;
}

json Telemetry::snapshot(const json& model, const json& scheduler) {
  std::string device_name = "cpu";
  if (scheduler.is_object() && scheduler.contains("device") && scheduler["device"].is_string()) {
    device_name = scheduler["device"].get<std::string>();
  }
  DeviceRef device = parse_device(device_name);
  bool on_gpu = device.kind == "cuda";

  // The GPU panel shows the model's GPU, or GPU 0 when the model runs on the CPU of a GPU machine.
  std::optional<GpuSnapshot> gpu = nvml_.sample(on_gpu ? device.index : 0);
  CpuSnapshot cpu = cpu_.sample();
  std::optional<CopyBandwidth> copy = copy_bandwidth();

  json out;
  json device_json{{"kind", on_gpu ? "cuda" : device.kind},
                   {"id", device_name},
                   {"gpu_available", nvml_.available()},
                   {"reason", nvml_.available() ? json(nullptr) : json(nvml_.reason())}};
  if (on_gpu) {
    device_json["name"] = gpu ? json(gpu->name) : json(device_name);
  } else {
    device_json["name"] = cpu_model_name_ ? json(*cpu_model_name_) : json("CPU");
  }
  out["device"] = device_json;
  out["gpu"] = gpu ? gpu_to_json(*gpu) : json(nullptr);
  json cpu_json = cpu_to_json(cpu);
  cpu_json["model_name"] = or_null(cpu_model_name_);
  cpu_json["copy_bandwidth_gbs"] = copy ? json(copy->gb_per_second) : json(nullptr);
  out["cpu"] = cpu_json;

  ThroughputInputs in;
  in.prompt_tokens_per_second = number_or_zero(scheduler, "prompt_tokens_per_second");
  in.generation_tokens_per_second = number_or_zero(scheduler, "generation_tokens_per_second");
  in.running = static_cast<int>(number_or_zero(scheduler, "running"));
  double weight_bytes = number_or_zero(scheduler, "weight_bytes");
  if (weight_bytes <= 0) weight_bytes = number_or_zero(model, "weight_bytes");
  in.weight_bytes = static_cast<uint64_t>(weight_bytes);
  in.n_params = static_cast<uint64_t>(number_or_zero(model, "n_params"));
  AchievedThroughput achieved = achieved_throughput(in);

  json throughput{{"achieved_gbs", achieved.gb_per_second},
                  {"achieved_tflops", achieved.tflops_per_second},
                  {"decode_steps_per_second", achieved.decode_steps_per_second},
                  {"ceiling_gbs", nullptr},
                  {"ceiling_tflops", nullptr}};
  if (on_gpu) {
    std::optional<double> gbs = gpu ? peak_memory_gbs(*gpu) : std::nullopt;
    std::optional<double> tflops = gpu ? peak_fp16_tflops(*gpu) : std::nullopt;
    throughput["ceiling_gbs"] = or_null(gbs);
    throughput["ceiling_tflops"] = or_null(tflops);
    throughput["ceiling_source"] =
        gbs ? "NVML: 2 x max memory clock x bus width; FP16 tensor peak at max SM clock"
            : (gpu ? "NVML does not report the memory clock or bus width" : "no NVML: " + nvml_.reason());
  } else if (copy) {
    throughput["ceiling_gbs"] = copy->gb_per_second;
    throughput["ceiling_source"] = ga::str("memcpy of ", copy->buffer_bytes >> 20, " MiB at start, best of ",
                                           copy->repeats, " (read + write bytes)");
  } else {
    std::optional<std::string> error = copy_bandwidth_error();
    throughput["ceiling_source"] = error ? "memcpy measurement failed: " + *error
                                         : (options_.measure_copy_bandwidth ? std::string("measuring memcpy bandwidth")
                                                                            : std::string("not measured"));
  }
  out["throughput"] = throughput;
  return out;
}

}  // namespace ga::telemetry
