// See host_routes.h. The streaming follows completion_route.cpp's pattern, smaller: the host's worker
// appends text to a channel and returns; the HTTP thread writes what is new, a comment line every second
// while nothing is (so a departed client is noticed and its job cancelled), and the job is cancelled when
// a write fails or the server stops.
#include "server/host_routes.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/api_server.h"
#include "server/responses.h"
#include "server/server_context.h"
#include "server/sse.h"

namespace ga::server {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kKeepAliveInterval = std::chrono::seconds(1);
constexpr double kMaxTemperature = 2.0;
constexpr double kMaxScheduleMinutes = 7 * 24 * 60;  // a week
constexpr double kMaxIdleSeconds = 365.0 * 24 * 3600;

json parse_object(const std::string& body, bool empty_is_object) {
  if (empty_is_object && body.find_first_not_of(" \t\r\n") == std::string::npos) return json::object();
  json value;
  try {
    value = json::parse(body);
  } catch (const json::parse_error& e) {
    throw invalid_request(std::string("The request body is not valid JSON: ") + e.what(), {}, "invalid_json");
  }
  if (!value.is_object()) throw invalid_request("The request body must be a JSON object.", {}, "invalid_json");
  return value;
}

void reject_unknown(const json& body, std::initializer_list<const char*> known) {
  for (const auto& [key, value] : body.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) throw invalid_request("Unknown parameter: '" + key + "'.", key, "unknown_parameter");
  }
}

double number_in(const json& body, const char* key, double lo, double hi, double fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_number())
    throw invalid_request(std::string("'") + key + "' must be a number.", key, "invalid_type");
  const double v = body[key].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    char range[96];
    std::snprintf(range, sizeof(range), "[%g, %g]", lo, hi);
    throw invalid_request(std::string("'") + key + "' must be in " + range + ", got " + body[key].dump() + ".", key,
                          "invalid_value");
  }
  return v;
}

bool bool_or(const json& body, const char* key, bool fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_boolean())
    throw invalid_request(std::string("'") + key + "' must be a boolean.", key, "invalid_type");
  return body[key].get<bool>();
}

HostService& host_of(ServerContext& ctx) {
  if (!ctx.host) throw ApiError(http_status::kNotFound, "The host is not available.", "invalid_request_error");
  return *ctx.host;
}

const char* host_finish_reason(FinishReason r) {
  return r == FinishReason::Length ? "length" : "stop";
}

// What the host's worker hands over to the HTTP thread.
struct HostChannel {
  std::mutex mutex;
  std::condition_variable cv;
  std::string text;  // not yet taken
  bool done = false;
  HostJobResult result;
  std::exception_ptr error;
  std::atomic<bool> client_gone{false};
};

struct AskStream {
  ServerContext* ctx = nullptr;
  HostAssistant* assistant = nullptr;
  uint64_t job = 0;
  std::string id;
  json figures_event;
  std::shared_ptr<HostChannel> channel;
  bool started = false;
  Clock::time_point last_write = Clock::now();
};

std::string error_message(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

json done_event(const std::string& id, const HostJobResult& r) {
  return {{"object", "host.answer.done"},
          {"id", id},
          {"finish_reason", host_finish_reason(r.finish)},
          {"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"host_steps", r.steps},
          {"pauses", r.pauses}};
}

json stream_error(const std::string& message) {
  return ApiError(http_status::kInternalServerError, message, "server_error", {}, "host_failed").to_json();
}

bool ask_stream_step(AskStream& s, httplib::DataSink& sink) {
  const auto write = [&](const std::string& data) {
    if (!sink.write(data.data(), data.size())) {
      s.channel->client_gone = true;
      s.assistant->cancel(s.job);
      return false;
    }
    s.last_write = Clock::now();
    return true;
  };
  if (!s.started) {
    s.started = true;
    return write(sse_data(s.figures_event));
  }
  std::string text;
  bool done = false;
  {
    std::unique_lock<std::mutex> lock(s.channel->mutex);
    s.channel->cv.wait_for(lock, kPollInterval, [&] { return !s.channel->text.empty() || s.channel->done; });
    text.swap(s.channel->text);
    done = s.channel->done;
  }
  if (!done && s.ctx->stopping.load()) s.assistant->cancel(s.job);
  if (!text.empty() && !write(sse_data({{"object", "host.answer.delta"}, {"id", s.id}, {"text", text}}))) return false;
  if (!done) {
    if (text.empty() && Clock::now() - s.last_write > kKeepAliveInterval) {
      const bool paused = s.assistant->stats().state == "paused";
      return write(sse_comment(paused ? "host paused: the main work has priority" : "host working"));
    }
    return true;
  }
  const HostChannel& c = *s.channel;
  if (c.error) {
    if (!write(sse_data(stream_error(error_message(c.error))))) return false;
  } else if (c.result.finish == FinishReason::Cancelled) {
    if (!write(sse_data(stream_error("the host's answer was cancelled (the server is stopping)")))) return false;
  } else if (!write(sse_data(done_event(s.id, c.result)))) {
    return false;
  }
  if (!write(sse_done())) return false;
  sink.done();
  return true;
}

std::string new_host_id() {
  char text[40];
  std::snprintf(text, sizeof(text), "hostask-%016llx", static_cast<unsigned long long>(random_u64()));
  return text;
}

}  // namespace

void require_host_admin(const ServerContext& ctx, const httplib::Request& req) {
  const std::string& admin = ctx.options.host_admin_key;
  if (admin.empty() || authorized(req.get_header_value("Authorization"), admin)) return;
  throw ApiError(http_status::kForbidden,
                 "This action needs the host admin key (serve --host-admin-key): the API key may only ask the host and "
                 "read its reports.",
                 "permission_error", {}, "host_admin_required");
}

void handle_host_ask(ServerContext& ctx, const std::string& body_text, httplib::Response& res) {
  HostService& host = host_of(ctx);
  const json body = parse_object(body_text, false);
  reject_unknown(body, {"question", "max_tokens", "stream", "temperature"});
  if (!body.contains("question")) {
    throw invalid_request("Missing required parameter: 'question'.", "question", "missing_required_parameter");
  }
  if (!body["question"].is_string()) throw invalid_request("'question' must be a string.", "question", "invalid_type");
  const std::string question = body["question"].get<std::string>();
  if (question.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw invalid_request("'question' is empty.", "question", "invalid_value");
  }
  const size_t limit = host.options().max_question_bytes;
  if (question.size() > limit) {
    throw ApiError(http_status::kPayloadTooLarge,
                   "The question has " + std::to_string(question.size()) + " bytes; the host takes at most " +
                       std::to_string(limit) + ".",
                   "invalid_request_error", "question", "question_too_long");
  }
  const int64_t max_answer = host.options().max_answer_tokens;
  if (body.contains("max_tokens") && !body["max_tokens"].is_null() && !body["max_tokens"].is_number_integer()) {
    throw invalid_request("'max_tokens' must be an integer.", "max_tokens", "invalid_type");
  }
  const auto max_tokens = static_cast<int64_t>(
      number_in(body, "max_tokens", 1, static_cast<double>(max_answer), static_cast<double>(max_answer)));
  const bool stream = bool_or(body, "stream", true);
  const double temperature = number_in(body, "temperature", 0, kMaxTemperature, 0);
  if (ctx.stopping.load()) {
    throw ApiError(http_status::kServiceUnavailable, "The server is shutting down.", "server_error", {},
                   "server_shutting_down");
  }

  const HostPrompt prompt = host.ask_prompt(question, max_tokens);
  if (host.prompt_observer) host.prompt_observer(prompt.text);
  HostAssistant& assistant = *host.assistant();
  const std::string id = new_host_id();
  const json figures_event = {{"object", "host.answer.figures"},         {"id", id},
                              {"created", unix_ms_now() / 1000},         {"host_model", assistant.model().config.name},
                              {"figures", figures_json(prompt.figures)}, {"log_lines", prompt.log_lines},
                              {"prompt_tokens", prompt.tokens.size()}};

  auto channel = std::make_shared<HostChannel>();
  HostJob job;
  job.prompt_tokens = prompt.tokens;
  job.generation.max_tokens = prompt.max_tokens;
  job.generation.sampling.temperature = static_cast<float>(temperature);
  job.generation.sampling.seed = random_u64();
  job.generation.stop = {"\nQuestion:", "\n\n\n"};
  job.on_text = [channel](const std::string& text) {
    if (channel->client_gone.load()) return false;
    {
      std::lock_guard<std::mutex> lock(channel->mutex);
      channel->text += text;
    }
    channel->cv.notify_all();
    return true;
  };
  job.on_done = [channel](const HostJobResult& r, std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(channel->mutex);
      channel->result = r;
      channel->error = error;
      channel->done = true;
    }
    channel->cv.notify_all();
  };
  uint64_t job_id = 0;
  try {
    job_id = assistant.submit(std::move(job));
  } catch (const Error& e) {
    throw api_error_from(e);
  }

  if (!stream) {
    std::unique_lock<std::mutex> lock(channel->mutex);
    while (!channel->cv.wait_for(lock, kPollInterval, [&] { return channel->done; })) {
      if (ctx.stopping.load()) assistant.cancel(job_id);
    }
    if (channel->error)
      throw ApiError(http_status::kInternalServerError, error_message(channel->error), "server_error");
    if (channel->result.finish == FinishReason::Cancelled) {
      throw ApiError(http_status::kServiceUnavailable, "The server is shutting down.", "server_error", {},
                     "server_shutting_down");
    }
    json answer = figures_event;
    answer["object"] = "host.answer";
    answer["answer"] = channel->result.text;
    answer["finish_reason"] = host_finish_reason(channel->result.finish);
    answer["completion_tokens"] = channel->result.completion_tokens;
    answer["host_steps"] = channel->result.steps;
    answer["pauses"] = channel->result.pauses;
    res.set_content(dump_json(answer), "application/json");
    return;
  }

  auto state = std::make_shared<AskStream>();
  state->ctx = &ctx;
  state->assistant = &assistant;
  state->job = job_id;
  state->id = id;
  state->figures_event = figures_event;
  state->channel = channel;
  ++ctx.open_streams;
  res.status = http_status::kOk;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [state](size_t, httplib::DataSink& sink) { return ask_stream_step(*state, sink); },
      [state](bool success) {
        if (!success) {
          state->channel->client_gone = true;
          state->assistant->cancel(state->job);
        }
        --state->ctx->open_streams;
      });
}

void handle_host_report(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  HostService& host = host_of(ctx);
  const std::string format = req.has_param("format") ? req.get_param_value("format") : "json";
  if (format != "json" && format != "markdown") {
    throw invalid_request("'format' must be json or markdown, got '" + format + "'.", "format", "invalid_value");
  }
  const std::string latest = req.has_param("latest") ? req.get_param_value("latest") : "0";
  if (latest != "0" && latest != "1") throw invalid_request("'latest' must be 0 or 1.", "latest", "invalid_value");
  HostBrief brief;
  if (latest == "1") {
    const std::optional<HostBrief> last = host.latest_brief();
    if (!last) {
      throw ApiError(http_status::kNotFound, "No brief was made yet (GET /v1/host/report makes one now).",
                     "invalid_request_error", {}, "no_brief_yet");
    }
    brief = *last;
  } else {
    brief = host.make_brief("request", host.options().summary_timeout);
  }
  res.set_header("Cache-Control", "no-store");
  if (format == "markdown") {
    res.set_content(brief_markdown(brief), "text/markdown; charset=utf-8");
  } else {
    res.set_content(dump_json(brief_json(brief)), "application/json");
  }
}

void handle_host_housekeeping(ServerContext& ctx, const httplib::Request& req, const std::string& body_text,
                              httplib::Response& res) {
  require_host_admin(ctx, req);
  HostService& host = host_of(ctx);
  const json body = parse_object(body_text, true);
  reject_unknown(body, {"cached_idle_seconds", "compact", "rotate_logs", "trim_heap"});
  HousekeepingRequest request;
  request.trigger = "request";
  request.cached_idle_seconds =
      number_in(body, "cached_idle_seconds", 0, kMaxIdleSeconds, host.schedule().cached_idle_seconds);
  request.compact = bool_or(body, "compact", true);
  request.rotate_logs = bool_or(body, "rotate_logs", true);
  request.trim_heap = bool_or(body, "trim_heap", true);
  HousekeepingReport report;
  try {
    report = host.housekeep(request);
  } catch (const Error& e) {
    throw api_error_from(e);
  }
  res.set_content(dump_json(housekeeping_json(report)), "application/json");
}

namespace {

json schedule_json(const HostSchedule& s) {
  return {{"object", "host.schedule"},
          {"report_every_minutes", s.report_every_minutes},
          {"housekeeping_every_minutes", s.housekeeping_every_minutes},
          {"cached_idle_seconds", s.cached_idle_seconds}};
}

}  // namespace

void handle_host_schedule_get(ServerContext& ctx, httplib::Response& res) {
  res.set_content(dump_json(schedule_json(host_of(ctx).schedule())), "application/json");
}

void handle_host_schedule_post(ServerContext& ctx, const httplib::Request& req, const std::string& body_text,
                               httplib::Response& res) {
  require_host_admin(ctx, req);
  HostService& host = host_of(ctx);
  const json body = parse_object(body_text, false);
  reject_unknown(body, {"report_every_minutes", "housekeeping_every_minutes", "cached_idle_seconds"});
  HostSchedule s = host.schedule();
  s.report_every_minutes = number_in(body, "report_every_minutes", 0, kMaxScheduleMinutes, s.report_every_minutes);
  s.housekeeping_every_minutes =
      number_in(body, "housekeeping_every_minutes", 0, kMaxScheduleMinutes, s.housekeeping_every_minutes);
  s.cached_idle_seconds = number_in(body, "cached_idle_seconds", 0, kMaxIdleSeconds, s.cached_idle_seconds);
  host.set_schedule(s);
  ctx.log.request_line("host schedule: report every " + std::to_string(s.report_every_minutes) +
                           " min, housekeeping every " + std::to_string(s.housekeeping_every_minutes) + " min",
                       ctx.options.log_requests);
  res.set_content(dump_json(schedule_json(s)), "application/json");
}

void handle_host_status(ServerContext& ctx, httplib::Response& res) {
  res.set_header("Cache-Control", "no-store");
  res.set_content(dump_json(host_of(ctx).status_json()), "application/json");
}

}  // namespace ga::server
