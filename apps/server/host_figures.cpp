// See host_figures.h.
#include "server/host_figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ga::server {

namespace {

using nlohmann::json;

constexpr double kPercent = 100.0;
constexpr double kBytesPerMiB = 1024.0 * 1024.0;
constexpr const char* kUnknown = "n/a";
constexpr int kClientErrorFirst = 400, kServerErrorFirst = 500, kStatusEnd = 600;

std::string fixed(double value, int decimals) {
  if (!std::isfinite(value)) return kUnknown;
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

std::string integer(int64_t value) {
  return std::to_string(value);
}

// A number from telemetry JSON, or n/a when the field is absent or null.
std::string json_number(const json& object, const char* field, double scale, int decimals) {
  if (!object.is_object() || !object.contains(field) || !object[field].is_number()) return kUnknown;
  return fixed(object[field].get<double>() * scale, decimals);
}

std::string percent_of(int64_t part, int64_t whole) {
  return whole > 0 ? fixed(kPercent * static_cast<double>(part) / static_cast<double>(whole), 1) : kUnknown;
}

uint64_t responses_between(const std::map<int, uint64_t>& by_status, int first, int end) {
  uint64_t n = 0;
  for (const auto& [status, count] : by_status) {
    if (status >= first && status < end) n += count;
  }
  return n;
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / kPercent * static_cast<double>(values.size()));
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size()))) - 1;
  return values[index];
}

std::vector<HostFigure> host_figures(const HostInputs& in) {
  const SchedulerStats& s = in.scheduler;
  std::vector<HostFigure> f;
  const auto add = [&f](std::string key, std::string label, std::string value, std::string unit = {}) {
    f.push_back({std::move(key), std::move(label), std::move(value), std::move(unit)});
  };
  add("model", "main model", in.model_id.empty() ? kUnknown : in.model_id);
  add("device", "main device", s.device.empty() ? kUnknown : s.device);
  add("uptime", "uptime", integer(in.uptime_seconds), "s");
  add("requests_running", "requests running", integer(s.running));
  add("requests_queued", "requests queued", integer(s.queued));
  add("max_running", "batch size (max running)", integer(in.max_running));
  // A recurrent model (RWKV) holds one state slot per sequence in the first block of its table.
  const std::string memory = s.recurrent_state ? "state blocks" : "KV blocks";
  add("kv_blocks_used", memory + " in use", integer(s.kv_blocks_used) + " of " + integer(s.kv_blocks_total));
  add("kv_used_percent", memory + " in use (share)", percent_of(s.kv_blocks_used, s.kv_blocks_total), "%");
  add("kv_blocks_cached", "prefix-cache blocks (unused, reusable)", integer(s.kv_blocks_cached));
  if (s.recurrent_state) {  // the prompt-state cache stands in for the prefix cache
    add("prompt_states", "prompt states kept (reusable)",
        integer(s.prompt_states) + " (" + fixed(static_cast<double>(s.prompt_state_bytes) / (1 << 20), 1) + " MiB)");
    add("prompt_state_hits", "prompts started from a kept state", integer(static_cast<int64_t>(s.prompt_state_hits)));
  }
  add("requests_finished", "requests finished", integer(static_cast<int64_t>(s.requests_finished)));
  add("requests_cancelled", "requests cancelled", integer(static_cast<int64_t>(s.requests_cancelled)));
  add("preemptions", "preemptions", integer(static_cast<int64_t>(s.preemptions)));
  add("prompt_tps", "prompt throughput (recent)", fixed(s.prompt_tokens_per_second, 1), "tok/s");
  add("generation_tps", "generation throughput (recent)", fixed(s.generation_tokens_per_second, 1), "tok/s");

  std::vector<double> ttft, total;
  for (const FinishedRequest& r : in.recent) {
    ttft.push_back(r.ttft_ms);
    total.push_back(r.total_ms);
  }
  const bool any = !in.recent.empty();
  add("recent_requests", "recent requests measured", integer(static_cast<int64_t>(in.recent.size())));
  add("ttft_p50_ms", "time to first token p50", any ? fixed(percentile(ttft, 50), 1) : kUnknown, "ms");
  add("ttft_p95_ms", "time to first token p95", any ? fixed(percentile(ttft, 95), 1) : kUnknown, "ms");
  add("latency_p50_ms", "request latency p50", any ? fixed(percentile(total, 50), 1) : kUnknown, "ms");
  add("http_4xx", "client errors (4xx)",
      integer(static_cast<int64_t>(responses_between(in.responses_by_status, kClientErrorFirst, kServerErrorFirst))));
  add("http_5xx", "server errors (5xx)",
      integer(static_cast<int64_t>(responses_between(in.responses_by_status, kServerErrorFirst, kStatusEnd))));
  add("log_errors", "error lines logged", integer(static_cast<int64_t>(in.log_error_lines)));

  const json& gpu = in.machine.is_object() && in.machine.contains("gpu") ? in.machine["gpu"] : json();
  if (gpu.is_object()) {
    add("gpu_name", "GPU", gpu.value("name", std::string(kUnknown)));
    add("gpu_util_percent", "GPU utilization", json_number(gpu, "utilization_gpu_percent", 1, 0), "%");
    add("gpu_mem_used_mib", "GPU memory used", json_number(gpu, "memory_used_bytes", 1 / kBytesPerMiB, 0), "MiB");
    add("gpu_mem_total_mib", "GPU memory total", json_number(gpu, "memory_total_bytes", 1 / kBytesPerMiB, 0), "MiB");
    add("gpu_temp_c", "GPU temperature", json_number(gpu, "temperature_c", 1, 0), "C");
    add("gpu_power_w", "GPU power", json_number(gpu, "power_w", 1, 0), "W");
  } else {
    add("gpu_name", "GPU", "none visible (no NVML)");
  }
  const json& cpu = in.machine.is_object() && in.machine.contains("cpu") ? in.machine["cpu"] : json();
  add("cpu_machine_percent", "CPU utilization (machine)", json_number(cpu, "machine_cpu_percent", 1, 0), "%");
  add("cpu_process_percent", "CPU utilization (server)", json_number(cpu, "process_cpu_percent", 1, 0), "%");
  add("rss_mib", "server memory (RSS)", json_number(cpu, "process_rss_bytes", 1 / kBytesPerMiB, 0), "MiB");
  add("mem_available_mib", "machine memory available", json_number(cpu, "mem_available_bytes", 1 / kBytesPerMiB, 0),
      "MiB");
  add("last_housekeeping", "last housekeeping", in.last_housekeeping.empty() ? "none yet" : in.last_housekeeping);
  return f;
}

std::string figure_text(const HostFigure& figure) {
  if (figure.unit.empty() || figure.value == kUnknown) return figure.value;
  return figure.value + " " + figure.unit;
}

std::string figures_table_markdown(const std::vector<HostFigure>& figures) {
  std::string out = "| figure | value |\n|---|---|\n";
  const auto cell = [](std::string text) {
    for (char& c : text) {
      if (c == '|' || c == '\n') c = ' ';  // a cell stays one cell
    }
    return text;
  };
  for (const HostFigure& f : figures) out += "| " + cell(f.label) + " | " + cell(figure_text(f)) + " |\n";
  return out;
}

std::string figures_prompt_lines(const std::vector<HostFigure>& figures) {
  std::string out;
  for (const HostFigure& f : figures) out += "- " + f.label + ": " + figure_text(f) + "\n";
  return out;
}

json figures_json(const std::vector<HostFigure>& figures) {
  json out = json::array();
  for (const HostFigure& f : figures) {
    out.push_back({{"key", f.key}, {"label", f.label}, {"value", f.value}, {"unit", f.unit}});
  }
  return out;
}

}  // namespace ga::server
