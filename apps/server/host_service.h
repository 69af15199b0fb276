// The host: what the server's /v1/host/* routes and its schedule run on. It joins the server's
// figures (host_figures.h), its housekeeping (housekeeping.h) and, when `serve --host-model` loaded
// one, the host model (host_assistant.h), and keeps the schedule of periodic briefs and housekeeping.
//
// Prompts: the host model is given the figures (computed now) and the most recent log lines, then the
// operator's question. When the whole does not fit the host's context beside the answer, the oldest
// log lines are left out first; a question that still does not fit is the client's error (400). The
// figures and log lines actually given are returned with every answer, so an operator can check what
// the host's words rest on.
//
// Schedule: one thread wakes every few seconds; housekeeping and briefs that are due run only while the
// main scheduler is idle (they wait for it), like every host step. Briefs are kept (the latest
// kBriefsKept) for GET /v1/host/report?latest=1, and each is logged as one line.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/host_assistant.h"
#include "server/host_figures.h"
#include "server/housekeeping.h"

namespace ga::server {

struct ServerContext;

struct HostSchedule {
  double report_every_minutes = 0;         // 0: no periodic brief
  double housekeeping_every_minutes = 10;  // 0: housekeeping only on request
  double cached_idle_seconds = 600;        // prefix-cache blocks unused this long are freed
};

struct HostServiceOptions {
  HostSchedule schedule;
  int64_t max_answer_tokens = 128;   // an answer's default and largest max_tokens
  int64_t summary_tokens = 96;       // a brief's summary
  size_t max_question_bytes = 2000;  // longer questions: 413
  size_t log_lines_in_prompt = 8;
  // A brief asked for over HTTP waits this long for its summary while the main work keeps the host
  // paused; then it answers with the table and says the summary was deferred.
  std::chrono::milliseconds summary_timeout{60000};
};

// What a prompt was built from, and its tokens.
struct HostPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<HostFigure> figures;
  std::vector<std::string> log_lines;  // the ones given (oldest first)
  int64_t max_tokens = 0;
};

struct HostBrief {
  int64_t unix_ms = 0;
  std::string trigger;  // "request" or "schedule"
  std::vector<HostFigure> figures;
  std::optional<HousekeepingReport> housekeeping;  // the last one before the brief
  std::string summary;
  std::string summary_status;  // "generated", "no host model", "deferred: ...", "failed: ..."
  std::string finish_reason;   // the summary's, when generated
};

class HostService {
 public:
  static constexpr size_t kBriefsKept = 16;

  HostService(ServerContext& ctx, HostServiceOptions options);
  ~HostService();  // stops the schedule thread (the assistant stops with it)
  HostService(const HostService&) = delete;
  HostService& operator=(const HostService&) = delete;

  // Gives the host its model (serve --host-model); before the server runs.
  void attach_assistant(std::unique_ptr<HostAssistant> assistant);
  HostAssistant* assistant() { return assistant_.get(); }
  const HostServiceOptions& options() const { return options_; }

  std::vector<HostFigure> figures() const;
  // The question's prompt (throws ApiError: 404 without a host model, 400 when it cannot fit).
  HostPrompt ask_prompt(const std::string& question, int64_t max_tokens) const;
  // Housekeeping now; remembered as the last one.
  HousekeepingReport housekeep(HousekeepingRequest request);
  // A brief now: the figures, the last housekeeping and the host's summary (waits up to `timeout` for it).
  HostBrief make_brief(const std::string& trigger, std::chrono::milliseconds timeout);
  std::optional<HostBrief> latest_brief() const;

  HostSchedule schedule() const;
  void set_schedule(const HostSchedule& schedule);  // validated by the caller (host_routes.cpp)

  nlohmann::json status_json() const;  // the dashboard's Host panel

  // Test hook: called with every prompt text given to the host model (ask and brief), before it runs.
  std::function<void(const std::string& prompt)> prompt_observer;

 private:
  HostInputs inputs() const;
  HostPrompt build_prompt(const std::string& instructions, const std::string& question, int64_t max_tokens) const;
  void schedule_loop();
  void wait_for_main_idle();

  ServerContext& ctx_;
  HostServiceOptions options_;
  std::unique_ptr<HostAssistant> assistant_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::optional<HousekeepingReport> last_housekeeping_;
  std::deque<HostBrief> briefs_;
  std::chrono::steady_clock::time_point last_report_, last_housekeeping_time_;
  std::thread scheduler_thread_;
};

nlohmann::json brief_json(const HostBrief& brief);
std::string brief_markdown(const HostBrief& brief);

}  // namespace ga::server
