// /metrics in the Prometheus text exposition format 0.0.4, and the counters behind it.
//
// The scheduler already counts tokens, requests and KV blocks (SchedulerStats); the server adds what
// only the HTTP layer sees: answers by status code and latency histograms. Rendering is a pure
// function of a snapshot, so the format is unit-tested without a server. Every family gets its
// # HELP and # TYPE lines; counters end in _total; histograms have cumulative _bucket{le=..} lines
// ending with le="+Inf", then _sum and _count.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/scheduler.h"

namespace ga::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void observe(double value);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket (not cumulative), +Inf last
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// The HTTP layer's counters (thread-safe).
class ServerMetrics {
 public:
  ServerMetrics();
  void record_response(int status);
  void record_completion(double total_seconds, double time_to_first_token_seconds);

  struct Snapshot {
    std::map<int, uint64_t> responses_by_status;
    Histogram request_duration;
    Histogram time_to_first_token;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mutex_;
  Snapshot data_;
};

// The host assistant's counters (HostAssistantStats' figures), when the server runs one.
struct HostMetrics {
  uint64_t steps = 0;
  uint64_t pauses = 0;
  uint64_t jobs_finished = 0;
  uint64_t jobs_cancelled = 0;
  int queued = 0;
  bool paused = false;
};

// The served model, as an info metric's labels (`gpu_accel_model_info{...} 1`, Prometheus's *_info convention).
struct ModelLabels {
  std::string name;
  std::string architecture;
  std::string precision;  // LoadedModel::precision.mode: native, bf16 or fp8
};

// The whole /metrics page; host: the host assistant's families, when there is one; model: the model_info family.
std::string render_prometheus(const ServerMetrics::Snapshot& http, const SchedulerStats& scheduler, int max_running,
                              const HostMetrics* host = nullptr, const ModelLabels* model = nullptr);

// Pieces, for tests: numbers as Prometheus reads them ("+Inf", "NaN", shortest round-trip digits),
// label values escaped (\\, \", \n).
std::string prometheus_number(double value);
std::string prometheus_label_value(std::string_view value);

}  // namespace ga::server
