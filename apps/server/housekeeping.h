// The server's housekeeping: what the host does on its schedule and on an admin's request. Every
// action is code with a measured outcome; the host's brief reports these outcomes, it does not make
// them up.
//
// Actions, in order:
//   1. free prefix-cache blocks unused for cached_idle_seconds (Scheduler::housekeep, on the
//      scheduler's thread; blocks held by running sequences, and RWKV state slots, are never touched;
//      a recurrent model's prompt-state cache entries unused as long are dropped instead);
//   2. compact the KV block free list (lowest ids first again, the prefix index rehashed);
//   3. rotate the server's log file (ServerLog::rotate: PATH -> PATH.1 ...; the schedule's, daily);
//   4. return the heap memory the server freed to the operating system (glibc's malloc_trim), with the
//      resident set size before and after.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_accel/scheduler.h"
#include "server/server_log.h"

namespace ga::server {

struct HousekeepingRequest {
  double cached_idle_seconds = 600;
  bool compact = true;
  bool rotate_logs = true;
  // Rotate only a log file started at least this long ago; 0: now. The schedule rotates daily (a log
  // rotated at every 10-minute housekeeping would keep only its last few intervals).
  double rotate_logs_older_than_hours = 0;
  bool trim_heap = true;
  std::string trigger = "request";  // "request" (POST /v1/host/housekeeping) or "schedule"
};

struct HousekeepingAction {
  std::string action;    // "free_idle_prefix_cache", "compact_free_list", "rotate_log", "trim_heap"
  bool changed = false;  // whether it changed anything
  std::string detail;    // what it did, in figures
};

struct HousekeepingReport {
  int64_t unix_ms = 0;
  std::string trigger;
  std::vector<HousekeepingAction> actions;
  int64_t cached_blocks_freed = 0;
  bool log_rotated = false;
};

HousekeepingReport run_housekeeping(Scheduler& scheduler, ServerLog& log, const HousekeepingRequest& request);

// {"object":"host.housekeeping","created_unix_ms","trigger","actions":[{"action","changed","detail"}]}
nlohmann::json housekeeping_json(const HousekeepingReport& report);
// One line for figures and logs: "freed 3 prefix-cache blocks; log rotated (...)".
std::string housekeeping_summary(const HousekeepingReport& report);

}  // namespace ga::server
