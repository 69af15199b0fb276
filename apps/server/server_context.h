// State shared by the routes of one server: the scheduler, the options, and what the HTTP layer
// counts. Routes get it by reference; it outlives the httplib::Server that calls them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gpu_accel/scheduler.h"
#include "server/metrics.h"
#include "server/recent_requests.h"

namespace ga::server {

class ChatPrompter;

struct ServerOptions {
  std::string model_id;  // what /v1/models lists and "model" must name: the model's file/folder name
  std::string api_key;   // non-empty: /v1/*, /metrics and /api/* need "Authorization: Bearer <key>"
  size_t max_body_bytes = size_t{1} << 20;  // larger bodies get 413
  int http_threads = 64;  // connections served at once (each stream holds one for its duration)
  int max_running = 16;   // the scheduler's batch size, for the stats
  bool log_requests = true;  // one line per request on stderr
};

struct ServerContext {
  ServerContext(Scheduler& s, ServerOptions o);
  ~ServerContext();

  Scheduler& scheduler;
  ServerOptions options;
  std::unique_ptr<ChatPrompter> chat;  // the model's chat template, parsed once
  ServerMetrics metrics;
  RecentRequests recent;
  std::atomic<bool> stopping{false};  // set by ApiServer::stop(): waiting routes cancel their requests
  std::atomic<int> open_streams{0};   // SSE responses not yet ended (stop() lets them say goodbye)
};

}  // namespace ga::server
