// The last finished completion requests, for the dashboard's request table.
//
// A small ring (newest last) filled from the scheduler's done-callback: pushing is a lock and a
// copy of a few numbers, quick enough for the scheduler thread (see scheduler.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_accel/scheduler.h"

namespace ga::server {

struct FinishedRequest {
  std::string id;
  int64_t finished_unix_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double ttft_ms = 0;
  double total_ms = 0;
  std::string finish_reason;
};

class RecentRequests {
 public:
  static constexpr size_t kCapacity = 100;

  void add(FinishedRequest request);
  // [{"id","finished_unix_ms","prompt_tokens","completion_tokens","ttft_ms","total_ms","finish_reason"}]
  nlohmann::json to_json() const;
  std::vector<FinishedRequest> snapshot() const;  // oldest first

 private:
  mutable std::mutex mutex_;
  std::deque<FinishedRequest> requests_;
};

// A scheduler result as a table row; now_unix_ms: the time it finished.
FinishedRequest finished_request(const std::string& id, const CompletionResult& result, int64_t now_unix_ms);

int64_t unix_ms_now();

}  // namespace ga::server
