// See host_service.h.
#include "server/host_service.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string_view>

#include "gpu_accel/error.h"
#include "server/api_error.h"
#include "server/api_server.h"
#include "server/chat_prompt.h"
#include "server/server_context.h"

namespace ga::server {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// How often the schedule thread looks at the clock (a brief every 0.01 minutes is allowed, for tests).
constexpr auto kScheduleTick = std::chrono::milliseconds(200);
// How often a wait for a summary looks at the stop flag.
constexpr auto kSummaryRecheck = std::chrono::milliseconds(100);
// A log line longer than this is cut in the prompt (a client-chosen URL must not fill the host's context).
constexpr size_t kMaxPromptLogLineBytes = 240;
constexpr double kSecondsPerMinute = 60.0;
constexpr double kScheduledLogRotationHours = 24;  // the schedule rotates the log daily (and at its size limit)

constexpr const char* kAskInstructions =
    "You are the host of a language-model server. You watch the server and answer its operators. "
    "Answer the operator's question briefly, using only the figures and log lines below.";
constexpr const char* kBriefInstructions =
    "You are the host of a language-model server. Write a short report brief (two or three sentences) "
    "on the server's state, using only the figures and log lines below.";
constexpr const char* kBriefRequest = "Write the brief.";
// How a brief's log line starts (its summary is generated text, which later prompts leave out).
constexpr std::string_view kBriefLogPrefix = "host brief (";

std::string iso_utc(int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string cut(const std::string& line) {
  return line.size() <= kMaxPromptLogLineBytes ? line : line.substr(0, kMaxPromptLogLineBytes) + "...";
}

Clock::duration minutes(double m) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(m * kSecondsPerMinute));
}

// What a host job hands back to a thread that waits for it.
struct SummaryWait {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  HostJobResult result;
  std::exception_ptr error;
};

std::string error_text(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

HostService::HostService(ServerContext& ctx, HostServiceOptions options) : ctx_(ctx), options_(std::move(options)) {
  last_report_ = last_housekeeping_time_ = started_;
  scheduler_thread_ = std::thread([this] { schedule_loop(); });
}

HostService::~HostService() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  assistant_.reset();  // cancels its jobs before the context goes
}

void HostService::attach_assistant(std::unique_ptr<HostAssistant> assistant) {
  assistant_ = std::move(assistant);
}

HostInputs HostService::inputs() const {
  HostInputs in;
  in.model_id = ctx_.options.model_id;
  in.uptime_seconds = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started_).count();
  in.scheduler = ctx_.scheduler.stats();
  in.max_running = ctx_.options.max_running;
  in.responses_by_status = ctx_.metrics.snapshot().responses_by_status;
  if (ctx_.telemetry) {
    in.machine = ctx_.telemetry->snapshot(ctx_.model_info, scheduler_stats_json(in.scheduler, in.max_running));
  }
  in.recent = ctx_.recent.snapshot();
  in.log_error_lines = ctx_.log.error_lines_total();
  std::lock_guard<std::mutex> lock(mutex_);
  if (last_housekeeping_) {
    in.last_housekeeping = iso_utc(last_housekeeping_->unix_ms) + ", " + housekeeping_summary(*last_housekeeping_);
  }
  return in;
}

std::vector<HostFigure> HostService::figures() const {
  return host_figures(inputs());
}

HostPrompt HostService::build_prompt(const std::string& instructions, const std::string& question,
                                     int64_t max_tokens) const {
  if (!assistant_) {
    throw ApiError(http_status::kNotFound,
                   "This server runs no host model: start it with --host-model SMALL (e.g. an RWKV or a small GGUF "
                   "model) to ask the host.",
                   "invalid_request_error", {}, "host_model_not_loaded");
  }
  const Tokenizer& tokenizer = assistant_->tokenizer();
  const bool chat = !assistant_->model().vocab.chat_template.empty();
  HostPrompt p;
  p.figures = figures();
  p.max_tokens = max_tokens;
  std::vector<std::string> logs;
  for (const std::string& line : ctx_.log.recent(ServerLogOptions{}.ring_lines)) {
    if (line.rfind(kBriefLogPrefix, 0) == 0) continue;  // the host's own words: never fed back as facts
    logs.push_back(cut(line));
  }
  if (logs.size() > options_.log_lines_in_prompt) {
    logs.erase(logs.begin(), logs.end() - static_cast<std::ptrdiff_t>(options_.log_lines_in_prompt));
  }
  const int64_t n_ctx = assistant_->n_ctx();
  std::unique_ptr<ChatPrompter> prompter;
  if (chat) prompter = std::make_unique<ChatPrompter>(tokenizer);
  while (true) {
    std::string context =
        instructions + "\n\nFigures (measured by the server now):\n" + figures_prompt_lines(p.figures);
    if (!logs.empty()) {
      context += "\nRecent log lines (oldest first):\n";
      for (const std::string& line : logs) context += line + "\n";
    }
    if (chat) {
      const std::vector<ChatMessage> messages = {{"system", context}, {"user", question}};
      p.text = prompter->render(messages);
      p.tokens = prompter->tokens(messages);
    } else {
      const bool brief = question == kBriefRequest;
      p.text = context + "\n" + (brief ? std::string("Brief:") : "Question: " + question + "\nAnswer:");
      p.tokens = tokenizer.encode(p.text, true);
    }
    const int64_t n = static_cast<int64_t>(p.tokens.size());
    if (n + max_tokens <= n_ctx) break;
    if (logs.empty()) {
      throw invalid_request("The host model's context is " + std::to_string(n_ctx) +
                                " tokens, but its prompt (the "
                                "figures and the question) has " +
                                std::to_string(n) + " tokens and the answer needs " + std::to_string(max_tokens) +
                                " more. Shorten the question or lower max_tokens.",
                            "question", "context_length_exceeded");
    }
    logs.erase(logs.begin());  // the oldest log line gives way first
  }
  p.log_lines = std::move(logs);
  return p;
}

HostPrompt HostService::ask_prompt(const std::string& question, int64_t max_tokens) const {
  return build_prompt(kAskInstructions, question, max_tokens);
}

HousekeepingReport HostService::housekeep(HousekeepingRequest request) {
  HousekeepingReport report = run_housekeeping(ctx_.scheduler, ctx_.log, request);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_housekeeping_ = report;
    last_housekeeping_time_ = Clock::now();
  }
  ctx_.log.request_line("host housekeeping: " + housekeeping_summary(report), ctx_.options.log_requests);
  return report;
}

HostBrief HostService::make_brief(const std::string& trigger, std::chrono::milliseconds timeout) {
  HostBrief b;
  b.unix_ms = unix_ms_now();
  b.trigger = trigger;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    b.housekeeping = last_housekeeping_;
  }
  if (!assistant_) {
    b.figures = figures();
    b.summary_status = "no host model (serve --host-model)";
  } else {
    try {
      const HostPrompt p = build_prompt(kBriefInstructions, kBriefRequest, options_.summary_tokens);
      b.figures = p.figures;
      if (prompt_observer) prompt_observer(p.text);
      auto wait = std::make_shared<SummaryWait>();
      HostJob job;
      job.prompt_tokens = p.tokens;
      job.generation.max_tokens = p.max_tokens;
      job.generation.sampling.temperature = 0.0f;  // a brief is reproducible from its figures
      job.generation.stop = {"\n\n"};
      job.on_done = [wait](const HostJobResult& r, std::exception_ptr error) {
        std::lock_guard<std::mutex> lock(wait->mutex);
        wait->result = r;
        wait->error = error;
        wait->done = true;
        wait->cv.notify_all();
      };
      const uint64_t id = assistant_->submit(std::move(job));
      const Clock::time_point deadline = Clock::now() + timeout;
      std::unique_lock<std::mutex> lock(wait->mutex);
      while (!wait->done && Clock::now() < deadline) {
        wait->cv.wait_for(lock, kSummaryRecheck);
        if (ctx_.stopping.load()) break;  // the server is stopping: its HTTP threads must not wait on the host
        std::lock_guard<std::mutex> stop_lock(mutex_);
        if (stop_) break;
      }
      if (!wait->done) {
        assistant_->cancel(id);
        b.summary_status = "deferred: the main work kept the host paused";
      } else if (wait->error) {
        b.summary_status = "failed: " + error_text(wait->error);
      } else if (wait->result.finish == FinishReason::Cancelled) {
        b.summary_status = "failed: cancelled (the server is stopping)";
      } else {
        b.summary = wait->result.text;
        b.summary_status = "generated";
        b.finish_reason = finish_reason_name(wait->result.finish);
      }
    } catch (const ApiError& e) {
      if (b.figures.empty()) b.figures = figures();
      b.summary_status = "failed: " + e.message();
    } catch (const std::exception& e) {
      if (b.figures.empty()) b.figures = figures();
      b.summary_status = "failed: " + std::string(e.what());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    briefs_.push_back(b);
    while (briefs_.size() > kBriefsKept) briefs_.pop_front();
    last_report_ = Clock::now();
  }
  std::string line = b.summary_status == "generated" ? b.summary : b.summary_status;
  std::replace(line.begin(), line.end(), '\n', ' ');
  ctx_.log.request_line(std::string(kBriefLogPrefix) + trigger + "): " + line, ctx_.options.log_requests);
  return b;
}

std::optional<HostBrief> HostService::latest_brief() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (briefs_.empty()) return std::nullopt;
  return briefs_.back();
}

HostSchedule HostService::schedule() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return options_.schedule;
}

void HostService::set_schedule(const HostSchedule& schedule) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    options_.schedule = schedule;
  }
  wake_.notify_all();
}

void HostService::schedule_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, kScheduleTick);
    if (stop_) break;
    const HostSchedule s = options_.schedule;
    const Clock::time_point now = Clock::now();
    const bool housekeeping_due =
        s.housekeeping_every_minutes > 0 && now - last_housekeeping_time_ >= minutes(s.housekeeping_every_minutes);
    const bool report_due = s.report_every_minutes > 0 && now - last_report_ >= minutes(s.report_every_minutes);
    if (!housekeeping_due && !report_due) continue;
    lock.unlock();
    // Only while the main work is idle; otherwise the next tick tries again.
    if (ctx_.scheduler.idle()) {
      try {
        if (housekeeping_due) {
          HousekeepingRequest request;
          request.trigger = "schedule";
          request.cached_idle_seconds = s.cached_idle_seconds;
          request.rotate_logs_older_than_hours = kScheduledLogRotationHours;
          housekeep(request);
        }
        // A scheduled brief waits for its summary as long as the main work needs (the stop flag ends it).
        if (report_due) make_brief("schedule", std::chrono::hours(24));
      } catch (const std::exception& e) {
        ctx_.log.request_line(std::string("error: host schedule: ") + e.what(), true);
        std::lock_guard<std::mutex> relock(mutex_);
        last_report_ = last_housekeeping_time_ = Clock::now();  // do not retry at every tick
      }
    }
    lock.lock();
  }
}

json HostService::status_json() const {
  json s = {{"enabled", assistant_ != nullptr}};
  if (assistant_) {
    const HostAssistantStats a = assistant_->stats();
    s["model"] = assistant_->model().config.name.empty() ? assistant_->model().path : assistant_->model().config.name;
    s["arch"] = assistant_->model().config.arch;
    s["device"] = assistant_->device_description();
    s["n_ctx"] = assistant_->n_ctx();
    s["state"] = a.state;
    s["steps"] = a.steps;
    s["pauses"] = a.pauses;
    s["jobs_finished"] = a.jobs_finished;
    s["jobs_cancelled"] = a.jobs_cancelled;
    s["queued"] = a.queued;
  }
  const HostSchedule sched = schedule();
  s["schedule"] = {{"report_every_minutes", sched.report_every_minutes},
                   {"housekeeping_every_minutes", sched.housekeeping_every_minutes},
                   {"cached_idle_seconds", sched.cached_idle_seconds}};
  std::lock_guard<std::mutex> lock(mutex_);
  s["last_housekeeping"] = last_housekeeping_ ? housekeeping_json(*last_housekeeping_) : json(nullptr);
  s["latest_brief"] = briefs_.empty() ? json(nullptr) : brief_json(briefs_.back());
  return s;
}

json brief_json(const HostBrief& b) {
  return {{"object", "host.report"},
          {"created_unix_ms", b.unix_ms},
          {"created", iso_utc(b.unix_ms)},
          {"trigger", b.trigger},
          {"figures", figures_json(b.figures)},
          {"table_markdown", figures_table_markdown(b.figures)},
          {"housekeeping", b.housekeeping ? housekeeping_json(*b.housekeeping) : json(nullptr)},
          {"summary", b.summary_status == "generated" ? json(b.summary) : json(nullptr)},
          {"summary_status", b.summary_status},
          {"summary_finish_reason", b.finish_reason.empty() ? json(nullptr) : json(b.finish_reason)},
          {"markdown", brief_markdown(b)}};
}

std::string brief_markdown(const HostBrief& b) {
  std::string out = "# Host brief, " + iso_utc(b.unix_ms) + " (" + b.trigger + ")\n\n";
  out += "## Figures (computed by the server)\n\n" + figures_table_markdown(b.figures) + "\n";
  out += "## Housekeeping\n\n";
  if (b.housekeeping) {
    out += "Last run " + iso_utc(b.housekeeping->unix_ms) + " (" + b.housekeeping->trigger + "):\n\n";
    for (const HousekeepingAction& a : b.housekeeping->actions) out += "- " + a.action + ": " + a.detail + "\n";
  } else {
    out += "None run yet.\n";
  }
  out += "\n## Summary (written by the host model)\n\n";
  out += b.summary_status == "generated" ? b.summary + "\n" : "(" + b.summary_status + ")\n";
  return out;
}

}  // namespace ga::server
