// See api_server.h.
#include "server/api_server.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <new>
#include <optional>
#include <thread>
#include <utility>

#include <httplib.h>

#include "gpu_accel/dtype.h"
#include "runtime/engine/batch_backend.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/completion_route.h"
#include "core/log.h"
#include "server/dashboard_routes.h"
#include "server/host_routes.h"
#include "server/http_connection.h"

namespace ga::server {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr size_t kMaxLoggedPathBytes = 200;
// Idle keep-alive connections hold a worker thread, and a stopping server waits for them: keep it short.
constexpr time_t kKeepAliveSeconds = 2;
constexpr auto kStreamGoodbyeTimeout = std::chrono::seconds(2);
constexpr auto kStopPollInterval = std::chrono::milliseconds(10);

// httplib serves a connection on one worker thread from request line to logger call, so the start
// time of the request being served can live in a thread_local (set by the pre-routing handler).
thread_local Clock::time_point t_request_start;
thread_local bool t_request_started = false;
thread_local RequestTimes t_request_times;  // ServerOptions::trace_timing
thread_local Clock::time_point t_bytes_arrived, t_hint_given;  // the same, before the head is parsed
// The scheduler was already told of the request being served on this thread, from its first bytes
// (ConnectionServer::on_request_bytes): the pre-routing handler need not tell it again.
thread_local bool t_scheduler_hinted = false;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.retry_after_seconds() > 0) res.set_header("Retry-After", std::to_string(e.retry_after_seconds()));
  if (e.status() == http_status::kUnauthorized) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(dump_json(e.to_json()), "application/json");
}

ApiError internal_error(const std::string& message) {
  return ApiError(http_status::kInternalServerError, message, "server_error", {}, "internal_error");
}

using Route = std::function<void(const httplib::Request&, httplib::Response&)>;
using PostRoute = std::function<void(const httplib::Request&, const std::string& body, httplib::Response&)>;

// The one place where exceptions stop: every route runs inside it.
template <typename Fn>
void run_guarded(httplib::Response& res, Fn&& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, api_error_from(e));
  } catch (const std::bad_alloc&) {
    send_error(res, internal_error("out of memory"));
  } catch (const std::exception& e) {
    send_error(res, internal_error(e.what()));
  } catch (...) {
    send_error(res, internal_error("unknown error"));
  }
}

void check_api_key(const ServerContext& ctx, const httplib::Request& req) {
  if (ctx.options.api_key.empty()) return;
  const std::string& header = req.get_header_value("Authorization");
  if (authorized(header, ctx.options.api_key)) return;
  if (!ctx.options.host_admin_key.empty() && authorized(header, ctx.options.host_admin_key)) return;
  const bool missing = req.get_header_value("Authorization").empty();
  throw ApiError(http_status::kUnauthorized,
                 missing ? "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'."
                         : "Incorrect API key provided.",
                 "invalid_request_error", {}, "invalid_api_key");
}

httplib::Server::Handler guarded(ServerContext& ctx, bool needs_key, Route route) {
  return [&ctx, needs_key, route = std::move(route)](const httplib::Request& req, httplib::Response& res) {
    run_guarded(res, [&] {
      if (needs_key) check_api_key(ctx, req);
      route(req, res);
    });
  };
}

ApiError body_too_large(size_t max_body_bytes) {
  return ApiError(http_status::kPayloadTooLarge,
                  "The request body is larger than the limit of " + std::to_string(max_body_bytes) + " bytes.",
                  "invalid_request_error", {}, "request_too_large");
}

// POST routes read their body themselves so that its size is bounded whatever its framing: httplib
// enforces the limit on Content-Length bodies only, a chunked body would otherwise grow without end.
// The body is read before anything is refused (key, content type), so the connection stays in step
// for the next request; a body left unread (multipart, too large) closes the connection instead.
httplib::Server::HandlerWithContentReader guarded_post(ServerContext& ctx, PostRoute route) {
  return [&ctx, route = std::move(route)](const httplib::Request& req, httplib::Response& res,
                                          const httplib::ContentReader& read_content) {
    if (ctx.options.trace_timing) t_request_times.routed = Clock::now();
    run_guarded(res, [&] {
      const size_t limit = ctx.options.max_body_bytes;
      // Looked up once: a header lookup in httplib's case-insensitive map costs ~1-2 us on a lone request's cold
      // way in.
      const std::string content_type = req.get_header_value("Content-Type");
      if (is_multipart_form_data(content_type)) {
        res.set_header("Connection", "close");
        check_content_type(content_type);  // throws 415
      }
      std::string body;
      bool too_large = false;
      const bool complete = read_content([&](const char* data, size_t n) {
        if (body.size() + n > limit) {
          too_large = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      if (too_large || res.status == http_status::kPayloadTooLarge) {
        res.set_header("Connection", "close");
        throw body_too_large(limit);
      }
      if (!complete) {
        res.set_header("Connection", "close");
        throw invalid_request("The request body could not be read (malformed chunked encoding or a short body).");
      }
      if (ctx.options.trace_timing) t_request_times.body_read = Clock::now();
      check_api_key(ctx, req);
      check_content_type(content_type);
      route(req, body, res);
    });
  };
}

Route method_not_allowed(const char* allowed) {
  return [allowed](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Allow", allowed);
    throw ApiError(http_status::kMethodNotAllowed, "Method " + req.method + " is not allowed on " + req.path +
                                                       " (use " + allowed + ").",
                   "invalid_request_error", {}, "method_not_allowed");
  };
}

// httplib's own refusals, in the same error shape as ours.
httplib::Server::HandlerResponse on_http_error(size_t max_body_bytes, const httplib::Request& req,
                                               httplib::Response& res) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a route already answered
  std::string message, code;
  switch (res.status) {
    case http_status::kNotFound:
      message = "Unknown request URL: " + req.method + " " + req.path + ".";
      code = "unknown_url";
      break;
    case http_status::kPayloadTooLarge:
      res.set_content(dump_json(body_too_large(max_body_bytes).to_json()), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    default:
      message = "The HTTP request could not be handled (status " + std::to_string(res.status) + ").";
      break;
  }
  const std::string type = res.status >= http_status::kInternalServerError ? "server_error" : "invalid_request_error";
  res.set_content(dump_json(ApiError(res.status, message, type, {}, code).to_json()), "application/json");
  return httplib::Server::HandlerResponse::Handled;
}

// Paths may hold any bytes a client sent; the log stays one printable line.
std::string loggable(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMaxLoggedPathBytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (text.size() > kMaxLoggedPathBytes) out += "...";
  return out;
}

json model_object(const ServerContext& ctx, int64_t created) {
  return {{"id", ctx.options.model_id}, {"object", "model"}, {"created", created}, {"owned_by", "gpu-accel"}};
}

}  // namespace

ServerContext::ServerContext(Scheduler& s, ServerOptions o)
    : scheduler(s),
      options(std::move(o)),
      chat(std::make_unique<ChatPrompter>(s.tokenizer())),
      log(options.log),
      model_info(model_info_json(s.model(), s.n_ctx())),
      telemetry(std::make_unique<telemetry::Telemetry>()),
      host(std::make_unique<HostService>(*this, options.host)) {}

ServerContext::~ServerContext() = default;

bool authorized(const std::string& authorization_header, const std::string& api_key) {
  const std::string prefix = "Bearer ";
  if (authorization_header.size() != prefix.size() + api_key.size()) return false;
  if (authorization_header.compare(0, prefix.size(), prefix) != 0) return false;
  unsigned char difference = 0;  // constant time: no early exit on the first differing byte
  for (size_t i = 0; i < api_key.size(); ++i) {
    difference |= static_cast<unsigned char>(authorization_header[prefix.size() + i] ^ api_key[i]);
  }
  return difference == 0;
}

json model_info_json(const LoadedModel& model, int64_t n_ctx) {
  uint64_t n_params = 0;
  json weight_types = json::object();
  for (const auto& [name, w] : model.weights) {
    uint64_t n = 1;
    for (const uint64_t d : w.ne) n *= d;
    n_params += n;
    const std::string type = dtype_name(w.type);
    weight_types[type] = weight_types.value(type, 0) + 1;
  }
  return {{"name", model.config.name},       {"arch", model.config.arch}, {"path", model.path},
          {"format", model.format},          {"n_params", n_params},      {"weight_bytes", model.weight_bytes()},
          {"n_ctx", n_ctx},                  {"n_vocab", model.config.n_vocab},
          {"weight_types", weight_types},    {"precision", model.precision.mode},
          {"precision_detail", model.precision.detail}};
}

json scheduler_stats_json(const SchedulerStats& s, int max_running) {
  return {{"running", s.running},
          {"queued", s.queued},
          {"kv_type", s.kv_type},
          {"kv_blocks_total", s.kv_blocks_total},
          {"kv_blocks_used", s.kv_blocks_used},
          {"kv_blocks_cached", s.kv_blocks_cached},
          {"recurrent_state", s.recurrent_state},
          {"prompt_states_cached", s.prompt_states},
          {"prompt_state_bytes", s.prompt_state_bytes},
          {"prompt_state_hits", s.prompt_state_hits},
          {"requests_finished", s.requests_finished},
          {"requests_cancelled", s.requests_cancelled},
          {"prompt_tokens_total", s.prompt_tokens_total},
          {"generated_tokens_total", s.generated_tokens_total},
          {"prompt_tokens_per_second", s.prompt_tokens_per_second},
          {"generation_tokens_per_second", s.generation_tokens_per_second},
          {"weight_bytes", s.weight_bytes},
          {"device", s.device},
          {"max_running", max_running}};
}

std::chrono::steady_clock::time_point request_head_time() {
  return t_request_started ? t_request_start : Clock::now();
}

const RequestTimes& request_times() { return t_request_times; }

namespace {

// The automatic (-1) busy-wait settings: on when the scheduler runs on a GPU (the scheduler's own rule, as
// SchedulerOptions::poll_us's automatic value), off on the CPU, whose forward needs every core.
ServerOptions resolve_automatic(ServerOptions o, Scheduler& scheduler) {
  const bool gpu = engine::cuda_device_index(scheduler.stats().device) >= 0;
  if (o.first_token_poll_ms < 0) o.first_token_poll_ms = gpu ? ServerOptions::kAutoFirstTokenPollMs : 0;
  if (o.keep_alive_poll_us < 0) o.keep_alive_poll_us = gpu ? ServerOptions::kAutoKeepAlivePollUs : 0;
  return o;
}

std::unique_ptr<ConnectionServer> make_http_server(const ServerOptions& o) {
  ConnectionWaitOptions wait;
  wait.spin_us = o.keep_alive_poll_us;
  wait.max_spinners = o.max_keep_alive_spinners;
  return std::make_unique<ConnectionServer>(wait);
}

}  // namespace

ApiServer::ApiServer(Scheduler& scheduler, ServerOptions options)
    : ctx_(std::make_unique<ServerContext>(scheduler, resolve_automatic(std::move(options), scheduler))),
      http_(make_http_server(ctx_->options)) {
  ServerLog* log = &ctx_->log;
  set_log_observer([log](LogLevel, const std::string& line) { log->printed_line(line); });
  configure();
  register_routes();
}

ApiServer::~ApiServer() {
  stop();
  set_log_observer({});
}

void ApiServer::attach_host_model(std::unique_ptr<HostAssistant> assistant) {
  ctx_->host->attach_assistant(std::move(assistant));
}

void ApiServer::configure() {
  ServerContext& ctx = *ctx_;
  const int threads = ctx.options.http_threads;
  http_->new_task_queue = [threads] { return new LifoThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(ctx.options.max_body_bytes);
  http_->set_keep_alive_timeout(kKeepAliveSeconds);
  // A streamed token is one small write: Nagle's algorithm would hold it until the previous one is
  // acknowledged (up to the client's delayed-ACK timeout), so every write goes out at once.
  http_->set_tcp_nodelay(true);
  const size_t max_body = ctx.options.max_body_bytes;
  http_->set_error_handler(httplib::Server::HandlerWithResponse(
      [max_body](const httplib::Request& req, httplib::Response& res) { return on_http_error(max_body, req, res); }));
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, internal_error("unexpected error while handling the request"));
  });
  // A completion's first bytes ("POST /v1/completions ...") wake the scheduler before httplib parses the head:
  // its wake-up (tens of microseconds on a VM) then overlaps the head, the body, the JSON and the checks. The
  // pre-routing handler below gives the same hint once the head is parsed, for requests whose first bytes did
  // not show their request line (split in transit, or pipelined behind an earlier request).
  http_->on_request_bytes = [&ctx](std::string_view first) {
    const bool tracing = ctx.options.trace_timing;
    if (tracing) t_bytes_arrived = Clock::now();
    t_scheduler_hinted =
        first.rfind("POST /v1/completions ", 0) == 0 || first.rfind("POST /v1/chat/completions ", 0) == 0;
    if (t_scheduler_hinted) ctx.scheduler.expect_request();
    if (tracing) t_hint_given = Clock::now();
  };
  http_->set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response&) {
    t_request_start = Clock::now();
    t_request_started = true;
    if (ctx.options.trace_timing) {
      t_request_times = {connection_readable_time(), t_request_start, {}, {}, t_bytes_arrived, t_hint_given};
      t_bytes_arrived = t_hint_given = {};
    }
    // httplib calls this once the request head is parsed, before the body is read: a completion is on
    // its way, so the scheduler thread gets up now (SchedulerOptions::poll_us) and its wake-up overlaps
    // the body, the JSON parsing and the tokenization instead of following the submit. Only a hint: a
    // request refused later (key, JSON, limits) just ends the scheduler's short busy-wait. Not twice for one
    // request: the scheduler's mutex, which a second hint takes, is the one its thread takes as it wakes.
    const bool hinted = std::exchange(t_scheduler_hinted, false);
    if (!hinted && req.method == "POST" && (req.path == "/v1/completions" || req.path == "/v1/chat/completions")) {
      ctx.scheduler.expect_request();
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
    ctx.metrics.record_response(res.status);
    const double ms =
        t_request_started ? std::chrono::duration<double, std::milli>(Clock::now() - t_request_start).count() : 0.0;
    t_request_started = false;
    char timing[48];
    std::snprintf(timing, sizeof(timing), " %d %.1f ms", res.status, ms);
    ctx.log.request_line(loggable(req.method) + " " + loggable(req.path) + timing, ctx.options.log_requests);
  });
}

void ApiServer::register_routes() {
  ServerContext& ctx = *ctx_;
  const int64_t created = unix_ms_now() / 1000;
  for (const auto& [path, endpoint] : {std::pair{"/v1/chat/completions", Endpoint::ChatCompletions},
                                       std::pair{"/v1/completions", Endpoint::Completions}}) {
    const Endpoint e = endpoint;
    http_->Post(path, guarded_post(ctx, [&ctx, e](const httplib::Request&, const std::string& body,
                                                  httplib::Response& res) { handle_completion(ctx, e, body, res); }));
    http_->Get(path, guarded(ctx, true, method_not_allowed("POST")));
  }
  http_->Get("/v1/models", guarded(ctx, true, [&ctx, created](const httplib::Request&, httplib::Response& res) {
               const json list = {{"object", "list"}, {"data", json::array({model_object(ctx, created)})}};
               res.set_content(dump_json(list), "application/json");
             }));
  http_->Get(R"(/v1/models/(.+))",
             guarded(ctx, true, [&ctx, created](const httplib::Request& req, httplib::Response& res) {
               const std::string id = req.matches[1];
               if (id != ctx.options.model_id) {
                 throw ApiError(http_status::kNotFound, "The model '" + id + "' does not exist.",
                                "invalid_request_error", "model", "model_not_found");
               }
               res.set_content(dump_json(model_object(ctx, created)), "application/json");
             }));
  http_->Get("/health", guarded(ctx, false, [&ctx](const httplib::Request&, httplib::Response& res) {
               if (ctx.stopping.load()) {
                 res.status = http_status::kServiceUnavailable;
                 res.set_content(R"({"status":"shutting down"})", "application/json");
                 return;
               }
               res.set_content(R"({"status":"ok"})", "application/json");
             }));
  http_->Get("/metrics", guarded(ctx, true, [&ctx](const httplib::Request&, httplib::Response& res) {
               std::optional<HostMetrics> host;
               if (const HostAssistant* assistant = ctx.host->assistant()) {
                 const HostAssistantStats a = assistant->stats();
                 host = HostMetrics{a.steps, a.pauses, a.jobs_finished, a.jobs_cancelled, a.queued, a.state == "paused"};
               }
               const ModelLabels model{ctx.model_info.value("name", ""), ctx.model_info.value("arch", ""),
                                       ctx.model_info.value("precision", "native")};
               const std::string text = render_prometheus(ctx.metrics.snapshot(), ctx.scheduler.stats(),
                                                          ctx.options.max_running, host ? &*host : nullptr, &model);
               res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
             }));

  register_host_routes();

  DashboardSources sources;
  const json info = ctx.model_info;
  sources.model_info = [info] { return info; };
  sources.telemetry = ctx.telemetry.get();
  sources.host_status = [&ctx] { return ctx.host->status_json(); };
  sources.host_admin_key = ctx.options.host_admin_key;
  sources.scheduler_stats = [&ctx] { return scheduler_stats_json(ctx.scheduler.stats(), ctx.options.max_running); };
  sources.recent_requests = [&ctx] { return ctx.recent.to_json(); };
  sources.api_key = ctx.options.api_key;
  register_dashboard_routes(*http_, std::move(sources));
}

void ApiServer::register_host_routes() {
  ServerContext& ctx = *ctx_;
  http_->Post("/v1/host/ask", guarded_post(ctx, [&ctx](const httplib::Request&, const std::string& body,
                                                      httplib::Response& res) { handle_host_ask(ctx, body, res); }));
  http_->Get("/v1/host/ask", guarded(ctx, true, method_not_allowed("POST")));
  http_->Get("/v1/host/report", guarded(ctx, true, [&ctx](const httplib::Request& req, httplib::Response& res) {
               handle_host_report(ctx, req, res);
             }));
  http_->Post("/v1/host/housekeeping",
              guarded_post(ctx, [&ctx](const httplib::Request& req, const std::string& body, httplib::Response& res) {
                handle_host_housekeeping(ctx, req, body, res);
              }));
  http_->Get("/v1/host/housekeeping", guarded(ctx, true, method_not_allowed("POST")));
  http_->Get("/v1/host/schedule", guarded(ctx, true, [&ctx](const httplib::Request&, httplib::Response& res) {
               handle_host_schedule_get(ctx, res);
             }));
  http_->Post("/v1/host/schedule",
              guarded_post(ctx, [&ctx](const httplib::Request& req, const std::string& body, httplib::Response& res) {
                handle_host_schedule_post(ctx, req, body, res);
              }));
  http_->Get("/v1/host/status", guarded(ctx, true, [&ctx](const httplib::Request&, httplib::Response& res) {
               handle_host_status(ctx, res);
             }));
}

int ApiServer::bind(const std::string& host, int port) {
  const int bound = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  GA_CHECK(bound > 0, Io, "cannot listen on ", host, ":", port, " (address in use, or not allowed?)");
  return bound;
}

void ApiServer::run() { http_->listen_after_bind(); }

void ApiServer::stop() {
  // Streams end with an error event and [DONE] instead of a cut connection: their routes see
  // `stopping`, cancel their requests and write the end; httplib stops calling them once stopped.
  ctx_->stopping = true;
  const auto deadline = Clock::now() + kStreamGoodbyeTimeout;
  while (ctx_->open_streams.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(kStopPollInterval);
  http_->stop();
}

}  // namespace ga::server
