// The OpenAI-compatible HTTP server: routes, authentication, limits, logging, lifecycle.
//
// Built on cpp-httplib's thread-per-connection server, with our own wait for a connection's next request
// (http_connection.h: httplib's sleeps between polls cost a lone request its latency). Every route runs inside one guard that
// checks the API key and turns any exception into an OpenAI-style error object, so no input can
// take the process down; httplib's own refusals (404 route, 413 body too large, 400 unparsable
// request) get the same JSON error shape from the error handler. POST routes read their bodies
// themselves, bounded by max_body_bytes whatever the framing (chunked included). Routes:
//   POST /v1/chat/completions, POST /v1/completions   completion_route.cpp
//   GET  /v1/models, /v1/models/{id}                  the served model
//   GET  /health                                       {"status":"ok"} (no key needed: for probes)
//   GET  /metrics                                      Prometheus text (metrics.h)
//   GET  /, /api/stats                                 the dashboard (dashboard_routes.h)
//   /v1/host/*                                         the host assistant (host_routes.h)
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu_accel/scheduler.h"
#include "server/host_assistant.h"
#include "server/server_context.h"


namespace ga::server {

class ConnectionServer;  // httplib's server with our connection loop (http_connection.h)

class ApiServer {
 public:
  ApiServer(Scheduler& scheduler, ServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds host:port (port 0: any free port) and returns the port; throws ga::Error(Io) on failure.
  int bind(const std::string& host, int port);
  // Serves until stop(). Returns after the in-flight requests have ended.
  void run();
  // Thread-safe; callable before run() too. In-flight generations are cancelled.
  void stop();

  ServerContext& context() { return *ctx_; }
  // Gives the host its model (serve --host-model); before run().
  void attach_host_model(std::unique_ptr<HostAssistant> assistant);

 private:
  std::unique_ptr<ServerContext> ctx_;
  std::unique_ptr<ConnectionServer> http_;
  void configure();
  void register_routes();
  void register_host_routes();
};

// The dashboard's JSON sources (see dashboard_routes.h).
nlohmann::json model_info_json(const LoadedModel& model, int64_t n_ctx);
nlohmann::json scheduler_stats_json(const SchedulerStats& stats, int max_running);

// Whether an Authorization header carries the key ("Bearer <key>"), compared in constant time.
bool authorized(const std::string& authorization_header, const std::string& api_key);

}  // namespace ga::server
