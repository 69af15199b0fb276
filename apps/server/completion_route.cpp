// See completion_route.h.
#include "server/completion_route.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>

#include <httplib.h>

#include "core/spin_wait.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/connection_probe.h"
#include "server/http_connection.h"
#include "server/responses.h"
#include "server/sse.h"

namespace ga::server {

namespace {

using Clock = std::chrono::steady_clock;
// How often waiting threads look at ServerContext::stopping.
constexpr auto kPollInterval = std::chrono::milliseconds(100);
// How often a whole answer's wait looks at its connection (a recv(MSG_PEEK) each time).
constexpr auto kProbeInterval = std::chrono::milliseconds(20);
// Idle time after which a stream writes a comment line (to notice a client that went away).
constexpr auto kKeepAliveInterval = std::chrono::seconds(1);

// What the scheduler's callbacks hand over to the HTTP thread.
struct RequestChannel {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<TokenEvent> events;  // not yet taken by the HTTP thread
  // Bumped (under the mutex) with every event and with done: a thread busy-waiting for the first token
  // watches it without the mutex (spin_for_first_token).
  std::atomic<uint64_t> posted{0};
  Clock::time_point first_posted{};  // the first event's arrival (ServerOptions::trace_timing)
  bool done = false;
  CompletionResult result;
  std::exception_ptr error;
  std::atomic<bool> client_gone{false};
};

// check_content_type's text handling, without a copy (it runs on every completion's way in): the C locale's
// white space and ASCII case, as std::isspace / std::tolower in the C locale, which the server never changes.
bool is_c_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_c_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_c_space(s.back())) s.remove_suffix(1);
  return s;
}

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// `lower` is already lower case.
bool equal_ignoring_ascii_case(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (ascii_lower(s[i]) != lower[i]) return false;
  }
  return true;
}

CompletionRequest scheduler_request(const ParsedRequest& p, std::vector<int32_t> prompt, int64_t max_tokens) {
  CompletionRequest r;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = p.sampling;
  if (!p.seed_given) r.sampling.seed = random_u64();
  r.stop = p.stop;
  r.ignore_eos = p.ignore_eos;
  r.logprobs = p.logprobs;
  r.top_logprobs = p.top_logprobs;
  return r;
}

// Submits; the callbacks capture the channel (shared: the scheduler may call them after the HTTP
// side is gone) and only copy into it.
uint64_t submit(ServerContext& ctx, CompletionRequest request, const std::shared_ptr<RequestChannel>& channel,
                bool keep_events, const std::string& response_id) {
  auto on_token = [channel, keep_events](const TokenEvent& event) {
    if (channel->client_gone.load()) return false;
    {
      std::lock_guard<std::mutex> lock(channel->mutex);
      if (keep_events) channel->events.push_back(event);
      // The count last: a thread spinning on it (spin_for_first_token) takes the mutex as soon as it sees it
      // move, and would sleep on the mutex (a wake-up on the first token's way out) while this one still holds it.
      const uint64_t posted = channel->posted.load(std::memory_order_relaxed);  // only changed under the mutex
      if (posted == 0) channel->first_posted = Clock::now();
      channel->posted.store(posted + 1, std::memory_order_release);
    }
    channel->cv.notify_all();  // no system call when the HTTP thread is busy-waiting rather than sleeping
    return true;
  };
  ServerContext* context = &ctx;
  auto on_done = [channel, context, response_id](const CompletionResult& result, std::exception_ptr error) {
    if (!error) {
      context->metrics.record_completion(result.total_seconds, result.time_to_first_token);
      context->recent.add(finished_request(response_id, result, unix_ms_now()));
    }
    {
      std::lock_guard<std::mutex> lock(channel->mutex);
      channel->result = result;
      channel->error = error;
      channel->done = true;
      channel->posted.fetch_add(1, std::memory_order_release);
    }
    channel->cv.notify_all();
  };
  try {
    return ctx.scheduler.submit(std::move(request), std::move(on_token), std::move(on_done));
  } catch (const Error& e) {
    throw api_error_from(e);
  }
}

ApiError shutting_down() {
  return ApiError(http_status::kServiceUnavailable, "The server is shutting down.", "server_error", {},
                  "server_shutting_down")
      .with_retry_after(1);
}

// The error a finished request carries (its exception, or a cancellation by shutdown).
ApiError finished_with_error(const RequestChannel& channel) {
  if (channel.error) {
    try {
      std::rethrow_exception(channel.error);
    } catch (const Error& e) {
      return api_error_from(e);
    } catch (const std::exception& e) {
      return ApiError(http_status::kInternalServerError, e.what(), "server_error", {}, "internal_error");
    } catch (...) {
      return ApiError(http_status::kInternalServerError, "unknown error", "server_error", {}, "internal_error");
    }
  }
  return shutting_down();
}

bool failed(const RequestChannel& channel) {
  return channel.error || channel.result.finish == FinishReason::Cancelled;
}

// A whole answer: wait for the result, then answer once. Meanwhile, every kProbeInterval, a client that
// hung up (connection_probe.h) or a stopping server cancels the request (done follows, Cancelled).
void answer_whole(ServerContext& ctx, uint64_t id, const ResponseHeader& header,
                  const std::shared_ptr<RequestChannel>& channel, const ConnectionProbe& probe,
                  httplib::Response& res) {
  std::unique_lock<std::mutex> lock(channel->mutex);
  while (!channel->cv.wait_for(lock, kProbeInterval, [&] { return channel->done; })) {
    if (ctx.stopping.load()) {
      ctx.scheduler.cancel(id);
    } else if (!channel->client_gone.load() && probe.peer_closed()) {
      channel->client_gone = true;
      ctx.scheduler.cancel(id);
    }
  }
  if (failed(*channel)) throw finished_with_error(*channel);
  res.status = http_status::kOk;
  res.set_content(dump_json(full_response(header, channel->result, channel->events)), "application/json");
}

// The state of one SSE stream between calls of httplib's content provider.
struct StreamState {
  ServerContext* ctx = nullptr;
  uint64_t id = 0;
  ResponseHeader header;
  std::optional<DeltaEventTemplate> deltas;  // the text deltas' events, when they carry no logprobs
  std::shared_ptr<RequestChannel> channel;
  bool started = false;
  size_t text_offset = 0;  // completion bytes sent so far (legacy logprobs' text_offset)
  Clock::time_point last_write = Clock::now();
  // Until the first event is taken, the wait for it may busy-wait until this time (spin_for_first_token).
  bool first_taken = false;
  Clock::time_point spin_deadline;
  uint64_t seen_posted = 0;  // channel->posted when events were last taken
  // ServerOptions::trace_timing: the request's way in (request_times(), its JSON parsed, its submit); traced
  // once its first token is written.
  RequestTimes way_in;
  Clock::time_point head, parsed, submitted;
  Clock::time_point taken, built;  // the first token's event taken from the channel, its SSE chunk built
  bool traced = false;
};

double monotonic_seconds(Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

// One line per stream (ServerOptions::trace_timing), once its first token is written.
void trace_first_token(StreamState& s) {
  s.traced = true;
  Clock::time_point first_token;
  {
    std::lock_guard<std::mutex> lock(s.channel->mutex);
    first_token = s.channel->first_posted;
  }
  // The four first fields are the format tools/device/serve.sh reads; the rest split the way in further.
  std::fprintf(stderr,
               "timing %s: head %.7f submit %.7f first_token %.7f written %.7f readable %.7f routed %.7f body %.7f "
               "parsed %.7f taken %.7f built %.7f arrived %.7f hinted %.7f\n",
               s.header.id.c_str(), monotonic_seconds(s.head), monotonic_seconds(s.submitted),
               monotonic_seconds(first_token), monotonic_seconds(Clock::now()), monotonic_seconds(s.way_in.readable),
               monotonic_seconds(s.way_in.routed), monotonic_seconds(s.way_in.body_read),
               monotonic_seconds(s.parsed), monotonic_seconds(s.taken), monotonic_seconds(s.built),
               monotonic_seconds(s.way_in.arrived), monotonic_seconds(s.way_in.hinted));
}

// The first token's hand-off without a wake-up. A lone request's first token is what its client waits
// for longest, and each thread hand-off on its way costs a wake-up (tens of microseconds to ~0.1 ms on a
// VM); this thread would sleep on the channel's condition variable while the prompt is processed, so the
// scheduler's notify would wake it. Instead, for at most first_token_poll_ms after the submit, it watches
// channel->posted and writes the event as soon as it exists. At most max_first_token_spinners streams
// spin at once (the others sleep as before: with many clients the first tokens come in batches anyway,
// and 64 clients must not take 64 cores); no thread spins once its first token was taken.
void spin_for_first_token(StreamState& s) {
  std::atomic<int>& spinners = s.ctx->first_token_spinners;
  int n = spinners.load(std::memory_order_relaxed);
  do {
    if (n >= s.ctx->options.max_first_token_spinners) return;
  } while (!spinners.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel));
  const uint64_t seen = s.seen_posted;
  const RequestChannel& channel = *s.channel;
  spin_until([&] { return channel.posted.load(std::memory_order_acquire) != seen; }, s.spin_deadline);
  spinners.fetch_sub(1, std::memory_order_acq_rel);
}

// One call of the content provider: write what is new; false ends the response (the client is gone).
bool stream_step(StreamState& s, httplib::DataSink& sink) {
  const auto write = [&](const std::string& data) {
    if (!sink.write(data.data(), data.size())) {
      s.channel->client_gone = true;
      s.ctx->scheduler.cancel(s.id);
      return false;
    }
    s.last_write = Clock::now();
    return true;
  };
  if (!s.started) {
    s.started = true;
    // The chat stream opens with the assistant's role (OpenAI's first chunk); completions have no such
    // chunk, but the comment still sends the headers at once.
    return write(s.header.endpoint == Endpoint::ChatCompletions ? sse_data(chat_role_chunk(s.header))
                                                                : sse_comment("started"));
  }
  std::vector<TokenEvent> batch;
  bool done = false;
  if (!s.first_taken && Clock::now() < s.spin_deadline) spin_for_first_token(s);
  {
    std::unique_lock<std::mutex> lock(s.channel->mutex);
    s.channel->cv.wait_for(lock, kPollInterval, [&] { return !s.channel->events.empty() || s.channel->done; });
    batch.swap(s.channel->events);
    done = s.channel->done;  // taken with the events: after done, no event is left behind
    s.seen_posted = s.channel->posted.load(std::memory_order_relaxed);
  }
  if (!batch.empty() || done) s.first_taken = true;
  const bool tracing = s.ctx->options.trace_timing && !s.traced;
  if (tracing) s.taken = Clock::now();
  if (!done && s.ctx->stopping.load()) s.ctx->scheduler.cancel(s.id);
  if (!batch.empty()) {
    std::string text;
    for (const TokenEvent& e : batch) text += e.text;
    if (!text.empty() || s.header.logprobs) {
      const std::string chunk =
          s.deltas ? s.deltas->event(text) : sse_data(delta_chunk(s.header, text, batch, s.text_offset));
      if (tracing) s.built = Clock::now();
      if (!write(chunk)) return false;
      if (tracing) trace_first_token(s);
    }
    for (const TokenEvent& e : batch) s.text_offset += e.chosen.text.size();
  } else if (!done && Clock::now() - s.last_write > kKeepAliveInterval) {
    if (!write(sse_comment("waiting"))) return false;
  }
  if (!done) return true;
  if (failed(*s.channel)) {
    if (!write(sse_data(finished_with_error(*s.channel).to_json()))) return false;
  } else {
    if (!write(sse_data(finish_chunk(s.header, s.channel->result.finish)))) return false;
    if (s.header.include_usage && !write(sse_data(usage_chunk(s.header, s.channel->result)))) return false;
  }
  if (!write(sse_done())) return false;
  sink.done();
  return true;
}

void answer_stream(ServerContext& ctx, uint64_t id, const ResponseHeader& header,
                   const std::shared_ptr<RequestChannel>& channel, Clock::time_point parsed,
                   Clock::time_point submitted, httplib::Response& res) {
  auto state = std::make_shared<StreamState>();
  state->head = request_head_time();
  if (ctx.options.trace_timing) state->way_in = request_times();
  state->parsed = parsed;
  state->submitted = submitted;
  state->ctx = &ctx;
  state->id = id;
  state->header = header;
  if (!header.logprobs) state->deltas.emplace(header);  // made while the prompt is processed, not per token
  state->channel = channel;
  state->spin_deadline = Clock::now() + std::chrono::milliseconds(ctx.options.first_token_poll_ms);
  ++ctx.open_streams;
  res.status = http_status::kOk;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies (nginx) must not buffer the stream
  res.set_chunked_content_provider(
      "text/event-stream", [state](size_t, httplib::DataSink& sink) { return stream_step(*state, sink); },
      [state](bool success) {
        // The response ended without the stream's end being written (write failure, timeout,
        // server stopping): make sure the scheduler lets go of the request.
        if (!success) {
          state->channel->client_gone = true;
          state->ctx->scheduler.cancel(state->id);
        }
        --state->ctx->open_streams;
      });
}

}  // namespace

bool is_multipart_form_data(std::string_view content_type) { return content_type.starts_with("multipart/form-data"); }

void check_content_type(const std::string& content_type) {
  if (content_type.empty()) return;
  const std::string_view media = trimmed(std::string_view(content_type).substr(0, content_type.find(';')));
  constexpr std::string_view json_type = "application/json", json_suffix = "+json";
  const bool is_json = equal_ignoring_ascii_case(media, json_type) ||
                       (media.size() > json_suffix.size() &&
                        equal_ignoring_ascii_case(media.substr(media.size() - json_suffix.size()), json_suffix));
  if (!is_json) {
    throw ApiError(http_status::kUnsupportedMediaType,
                   "Unsupported Content-Type '" + content_type + "': send JSON with 'Content-Type: application/json'.",
                   "invalid_request_error", {}, "unsupported_media_type");
  }
}

int64_t resolve_max_tokens(const ParsedRequest& request, int64_t n_prompt, int64_t n_ctx) {
  const std::string prompt_param = request.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
  if (n_prompt >= n_ctx) {
    throw invalid_request("This model's maximum context length is " + std::to_string(n_ctx) +
                              " tokens, but the prompt has " + std::to_string(n_prompt) +
                              " tokens, which leaves no room for a completion. Please shorten the prompt.",
                          prompt_param, "context_length_exceeded");
  }
  const int64_t room = n_ctx - n_prompt;
  if (request.max_tokens) {
    if (*request.max_tokens > room) {
      throw invalid_request("This model's maximum context length is " + std::to_string(n_ctx) +
                                " tokens. However, you requested " + std::to_string(n_prompt + *request.max_tokens) +
                                " tokens (" + std::to_string(n_prompt) + " in the prompt, " +
                                std::to_string(*request.max_tokens) +
                                " for the completion). Please reduce the prompt or max_tokens.",
                            "max_tokens", "context_length_exceeded");
    }
    return *request.max_tokens;
  }
  // Chat: no limit but the context (OpenAI's behaviour); completions: OpenAI's default of 16.
  if (request.endpoint == Endpoint::ChatCompletions) return room;
  return std::min(kCompletionsDefaultMaxTokens, room);
}

void handle_completion(ServerContext& ctx, Endpoint endpoint, const std::string& body, httplib::Response& res) {
  const ParsedRequest request = parse_request(endpoint, body);
  const Clock::time_point parsed = ctx.options.trace_timing ? Clock::now() : Clock::time_point{};
  if (!request.model.empty() && request.model != ctx.options.model_id) {
    throw ApiError(http_status::kNotFound,
                   "The model '" + request.model + "' does not exist. This server serves '" + ctx.options.model_id +
                       "' (GET /v1/models).",
                   "invalid_request_error", "model", "model_not_found");
  }
  if (ctx.stopping.load()) throw shutting_down();

  const Tokenizer& tokenizer = ctx.scheduler.tokenizer();
  std::vector<int32_t> prompt = endpoint == Endpoint::ChatCompletions ? ctx.chat->tokens(request.messages)
                                                                      : completion_prompt_tokens(tokenizer, request);
  if (prompt.empty()) {
    throw invalid_request("The prompt is empty (and this model adds no BOS token): nothing to continue from.",
                          "prompt");
  }
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t max_tokens = resolve_max_tokens(request, n_prompt, ctx.scheduler.n_ctx());

  ResponseHeader header;
  header.endpoint = endpoint;
  header.id = new_completion_id(endpoint);
  header.created = unix_ms_now() / 1000;
  header.model = ctx.options.model_id;
  header.logprobs = request.logprobs;
  header.include_usage = request.include_usage;

  auto channel = std::make_shared<RequestChannel>();
  const bool keep_events = request.stream || request.logprobs;
  CompletionRequest scheduled = scheduler_request(request, std::move(prompt), max_tokens);
  const Clock::time_point submitted = Clock::now();
  const uint64_t id = submit(ctx, std::move(scheduled), channel, keep_events, header.id);
  if (request.stream) {
    answer_stream(ctx, id, header, channel, parsed, submitted, res);
  } else {
    const ConnectionProbe probe(current_connection_socket());
    answer_whole(ctx, id, header, channel, probe, res);
  }
}

}  // namespace ga::server
