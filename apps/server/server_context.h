// State shared by the routes of one server: the scheduler, the options, and what the HTTP layer
// counts. Routes get it by reference; it outlives the httplib::Server that calls them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu_accel/scheduler.h"
#include "runtime/telemetry/telemetry.h"
#include "server/host_service.h"
#include "server/metrics.h"
#include "server/recent_requests.h"
#include "server/server_log.h"

namespace ga::server {

class ChatPrompter;

struct ServerOptions {
  std::string model_id;  // what /v1/models lists and "model" must name: the model's file/folder name
  std::string api_key;   // non-empty: /v1/*, /metrics and /api/* need "Authorization: Bearer <key>"
  // non-empty: the host's admin routes (housekeeping, schedule changes) need this key; other keys may only
  // ask and read (403 otherwise). It is accepted wherever api_key is. Empty: whoever passes api_key is admin.
  std::string host_admin_key;
  ServerLogOptions log;      // the request log's ring and file (serve --log-file)
  HostServiceOptions host;   // the host's limits and schedule
  size_t max_body_bytes = size_t{1} << 20;  // larger bodies get 413
  int http_threads = 64;  // connections served at once (each stream holds one for its duration)
  int max_running = 16;   // the scheduler's batch size, for the stats
  bool log_requests = true;  // one line per request on stderr
  // A stream's HTTP thread busy-waits for its first token for at most this long after the submit
  // (then sleeps on the channel as for every later token), so the first token is written without a
  // thread wake-up; at most max_first_token_spinners streams spin at once (64 clients must not take 64
  // cores). 0: never busy-wait; -1 (automatic): kAutoFirstTokenPollMs when the scheduler runs on a GPU, 0 on
  // the CPU (whose forward needs every core). completion_route.cpp says why.
  int first_token_poll_ms = -1;
  static constexpr int kAutoFirstTokenPollMs = 20;
  int max_first_token_spinners = 2;
  // A connection's worker busy-waits up to this long for the connection's next request (after the accept and
  // after each response) before it sleeps in poll, so a request that follows at once is read without the
  // kernel's wake-up of the worker; at most max_keep_alive_spinners connections spin at once. 0: never; -1
  // (automatic): kAutoKeepAlivePollUs on a GPU, 0 on the CPU (as first_token_poll_ms). http_connection.h says why.
  int keep_alive_poll_us = -1;
  static constexpr int kAutoKeepAlivePollUs = 2000;
  int max_keep_alive_spinners = 2;
  // One stderr line per stream with the CLOCK_MONOTONIC times (s) of its way to the first token: request head
  // parsed, submit, first token from the scheduler, first token written (`serve --trace-timing`; a client on the
  // same machine can add its send and receive times: bench/serve/bench_http.py, tools/device/serve.sh).
  bool trace_timing = false;
};

// When the request being served on this HTTP thread had its head parsed (httplib's pre-routing handler).
std::chrono::steady_clock::time_point request_head_time();

// The way in of the request being served on this HTTP thread (ServerOptions::trace_timing): its connection
// found readable (http_connection.h; the epoch when the wait did not run, e.g. pipelined bytes), its head
// parsed, its route entered, its body read; and between readable and head: its first bytes read from the socket
// (`arrived`) and the scheduler's wake-up hint given (`hinted`), the epoch when no hint ran.
struct RequestTimes {
  std::chrono::steady_clock::time_point readable, head, routed, body_read, arrived, hinted;
};
const RequestTimes& request_times();

struct ServerContext {
  ServerContext(Scheduler& s, ServerOptions o);
  ~ServerContext();

  Scheduler& scheduler;
  ServerOptions options;
  std::unique_ptr<ChatPrompter> chat;  // the model's chat template, parsed once
  ServerMetrics metrics;
  RecentRequests recent;
  ServerLog log;
  nlohmann::json model_info;  // model_info_json of the served model, made once
  std::unique_ptr<telemetry::Telemetry> telemetry;  // the machine figures (dashboard, host)
  std::atomic<bool> stopping{false};  // set by ApiServer::stop(): waiting routes cancel their requests
  std::atomic<int> open_streams{0};   // SSE responses not yet ended (stop() lets them say goodbye)
  std::atomic<int> first_token_spinners{0};  // streams busy-waiting for their first token now
  std::unique_ptr<HostService> host;  // last: its schedule thread reads everything above
};

}  // namespace ga::server
