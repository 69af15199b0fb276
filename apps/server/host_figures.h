// The figures the host assistant is given: what the server knows about itself right now, computed
// from its counters (never generated), in the three forms they are used in: the lines of the host's
// prompt, the table of a report brief (Markdown) and JSON for clients and the dashboard.
//
// Every figure has a stable key (what tests and clients look up), a label (what the model and the
// reader see), a value already formatted, and a unit. A figure the server cannot know (no GPU, no
// request finished yet) reads "n/a" rather than disappearing, so a brief's table keeps its shape.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_accel/scheduler.h"
#include "server/metrics.h"
#include "server/recent_requests.h"

namespace ga::server {

struct HostFigure {
  std::string key;    // "requests_running"
  std::string label;  // "requests running"
  std::string value;  // "3", "41.2", "n/a"
  std::string unit;   // "", "%", "ms", "tok/s", "MiB"
};

// What the figures are computed from (one snapshot of each source).
struct HostInputs {
  std::string model_id;
  int64_t uptime_seconds = 0;
  SchedulerStats scheduler;
  int max_running = 0;
  std::map<int, uint64_t> responses_by_status;  // ServerMetrics::Snapshot's
  nlohmann::json machine;                       // telemetry::Telemetry::snapshot(): "gpu" (null without NVML), "cpu"
  std::vector<FinishedRequest> recent;          // oldest first
  uint64_t log_error_lines = 0;
  std::string last_housekeeping;  // one line; "" when none ran yet
};

std::vector<HostFigure> host_figures(const HostInputs& inputs);

// "value unit" ("41.2 ms", "3"): how a figure reads in a sentence or a table cell.
std::string figure_text(const HostFigure& figure);
// "| figure | value |" with one row per figure.
std::string figures_table_markdown(const std::vector<HostFigure>& figures);
// "- label: value unit" per line: the prompt's form.
std::string figures_prompt_lines(const std::vector<HostFigure>& figures);
// [{"key","label","value","unit"}]
nlohmann::json figures_json(const std::vector<HostFigure>& figures);

// The nearest-rank percentile p (0..100] of `values` (unsorted); 0 for none.
double percentile(std::vector<double> values, double p);

}  // namespace ga::server
