// See housekeeping.h.
#include "server/housekeeping.h"

#include <chrono>
#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "runtime/telemetry/proc_stats.h"
#include "server/recent_requests.h"

namespace ga::server {

namespace {

constexpr double kBytesPerMiB = 1024.0 * 1024.0;

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / kBytesPerMiB);
  return text;
}

HousekeepingAction trim_heap() {
  HousekeepingAction a;
  a.action = "trim_heap";
#if defined(__GLIBC__)
  const std::optional<uint64_t> before = telemetry::read_process_rss_bytes();
  const bool released = malloc_trim(0) != 0;
  const std::optional<uint64_t> after = telemetry::read_process_rss_bytes();
  a.changed = released;
  a.detail = released ? "returned freed heap memory to the system" : "no freed heap memory to return";
  if (before && after) a.detail += "; resident " + mib(*before) + " -> " + mib(*after);
#else
  a.detail = "not available with this C library";
#endif
  return a;
}

}  // namespace

HousekeepingReport run_housekeeping(Scheduler& scheduler, ServerLog& log, const HousekeepingRequest& request) {
  HousekeepingReport report;
  report.unix_ms = unix_ms_now();
  report.trigger = request.trigger;

  HousekeepingOptions options;
  options.cached_idle_seconds = request.cached_idle_seconds;
  options.compact = request.compact;
  const HousekeepingResult r = scheduler.housekeep(options);
  report.cached_blocks_freed = r.cached_blocks_freed;
  HousekeepingAction cache;
  cache.action = "free_idle_prefix_cache";
  cache.changed = r.cached_blocks_freed > 0 || r.prompt_states_freed > 0;
  char idle[32];
  std::snprintf(idle, sizeof(idle), "%g", request.cached_idle_seconds);
  if (r.recurrent_state) {
    cache.detail = "recurrent-state model: freed " + std::to_string(r.prompt_states_freed) +
                   " prompt states idle for >= " + idle + " s (" + std::to_string(r.prompt_states_after) + " kept); " +
                   std::to_string(r.running) + " state slots in use by running requests (kept), " +
                   std::to_string(r.free_blocks_after) + " blocks free";
  } else {
    cache.detail = "freed " + std::to_string(r.cached_blocks_freed) + " of " + std::to_string(r.cached_blocks_before) +
                   " unused prefix-cache blocks idle for >= " + idle + " s; " + std::to_string(r.free_blocks_after) +
                   " blocks free, " + std::to_string(r.running) + " requests running (their blocks kept)";
  }
  report.actions.push_back(cache);

  if (request.compact) {
    HousekeepingAction compact;
    compact.action = "compact_free_list";
    compact.changed = r.free_list_reordered;
    compact.detail = r.free_list_reordered ? "free blocks reordered: the lowest ids are handed out first again"
                                           : "free list already in order";
    report.actions.push_back(compact);
  }

  if (request.rotate_logs) {
    HousekeepingAction rotate;
    rotate.action = "rotate_log";
    constexpr double kSecondsPerHour = 3600;
    const LogRotation rotation =
        request.rotate_logs_older_than_hours > 0
            ? log.rotate_if_older(
                  std::chrono::seconds(static_cast<int64_t>(request.rotate_logs_older_than_hours * kSecondsPerHour)))
            : log.rotate();
    rotate.changed = rotation.rotated;
    report.log_rotated = rotation.rotated;
    if (!rotation.error.empty()) {
      rotate.detail = rotation.error;
    } else if (!rotation.skipped.empty()) {
      rotate.detail = rotation.path + " not due: " + rotation.skipped;
    } else if (!rotation.rotated) {
      rotate.detail = rotation.path + " is empty: nothing to rotate";
    } else {
      rotate.detail = "rotated " + rotation.path + " (" + std::to_string(rotation.bytes) + " bytes) to " +
                      (rotation.kept.empty() ? std::string("nothing (keep 0)") : rotation.kept.front()) + "; " +
                      std::to_string(rotation.kept.size()) + " rotated files kept";
    }
    report.actions.push_back(rotate);
  }

  if (request.trim_heap) report.actions.push_back(trim_heap());
  return report;
}

nlohmann::json housekeeping_json(const HousekeepingReport& report) {
  nlohmann::json actions = nlohmann::json::array();
  for (const HousekeepingAction& a : report.actions) {
    actions.push_back({{"action", a.action}, {"changed", a.changed}, {"detail", a.detail}});
  }
  return {{"object", "host.housekeeping"},
          {"created_unix_ms", report.unix_ms},
          {"trigger", report.trigger},
          {"actions", actions}};
}

std::string housekeeping_summary(const HousekeepingReport& report) {
  std::string out = "freed " + std::to_string(report.cached_blocks_freed) + " prefix-cache blocks";
  out += report.log_rotated ? ", log rotated" : ", log not rotated";
  out += " (" + report.trigger + ")";
  return out;
}

}  // namespace ga::server
