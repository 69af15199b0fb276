// See recent_requests.h.
#include "server/recent_requests.h"

#include <chrono>

#include "server/responses.h"

namespace ga::server {

void RecentRequests::add(FinishedRequest request) {
  std::lock_guard<std::mutex> lock(mutex_);
  requests_.push_back(std::move(request));
  while (requests_.size() > kCapacity) requests_.pop_front();
}

nlohmann::json RecentRequests::to_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json out = nlohmann::json::array();
  for (const FinishedRequest& r : requests_) {
    out.push_back({{"id", r.id},
                   {"finished_unix_ms", r.finished_unix_ms},
                   {"prompt_tokens", r.prompt_tokens},
                   {"completion_tokens", r.completion_tokens},
                   {"ttft_ms", r.ttft_ms},
                   {"total_ms", r.total_ms},
                   {"finish_reason", r.finish_reason}});
  }
  return out;
}

std::vector<FinishedRequest> RecentRequests::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {requests_.begin(), requests_.end()};
}

FinishedRequest finished_request(const std::string& id, const CompletionResult& result, int64_t now_unix_ms) {
  constexpr double kMsPerSecond = 1e3;
  return {id,
          now_unix_ms,
          result.prompt_tokens,
          result.completion_tokens,
          result.time_to_first_token * kMsPerSecond,
          result.total_seconds * kMsPerSecond,
          openai_finish_reason(result.finish)};
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ga::server
