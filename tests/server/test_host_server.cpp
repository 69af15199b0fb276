// The host assistant inside a running server (in-process ApiServer on a free port, httplib's client), on
// the CPU: stories260K is the main model, the tiny RWKV-5.2 the host.
//
// What is checked is never the host model's words (a 730K-parameter model writes noise) but what the
// server computes around them: the prompt the host was given (captured through HostService's
// prompt_observer) holds the live figures and log lines, the stream lists the same figures, roles are
// enforced, bad requests get their 4xx, the report's table is the figures, housekeeping frees what it
// says, and a host job gives way to a main request within one host step (counted by
// HostAssistant::steps(), not timed).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "common/stories_scheduler.h"
#include "common/test_data.h"
#include "server/api_server.h"
#include "server/host_assistant.h"

namespace ga::server {
namespace {

using nlohmann::json;

constexpr const char* kUserKey = "user-key";
constexpr const char* kAdminKey = "admin-key";
constexpr const char* kMetricsPrefix = "gpu_accel_";  // metrics.cpp's
constexpr int64_t kHostCtx = 1536;  // the byte-vocabulary host: ~1100 tokens of figures + question + answer

const LoadedModel& host_model() {
  static const LoadedModel model = load_model(test::shared_path("models/rwkv-tiny/tiny-rwkv-5v2-730K-FP32.bin"));
  return model;
}

const Tokenizer& host_tokenizer() {
  static const Tokenizer tok(host_model().vocab);
  return tok;
}

std::string log_path() {
  const auto dir = std::filesystem::temp_directory_path() / ("ga_host_server_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / "serve.log").string();
}

// The dispatched "data" payloads of an SSE body.
std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) events.push_back(line.substr(6));
  }
  return events;
}

class HostServer : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions so;
    so.n_ctx = 256;
    so.n_threads = 1;
    so.block_size = 16;
    scheduler_ = std::make_unique<Scheduler>(test::stories(), test::tokenizer(), so);
    ServerOptions o;
    o.model_id = "stories260K.gguf";
    o.api_key = kUserKey;
    o.host_admin_key = kAdminKey;
    o.log_requests = false;
    o.http_threads = 8;
    o.log.path = log_path();
    o.host.schedule.housekeeping_every_minutes = 0;  // only when a test asks
    o.host.max_answer_tokens = 24;
    o.host.summary_tokens = 16;
    std::filesystem::remove(o.log.path);
    std::filesystem::remove(o.log.path + ".1");
    api_ = std::make_unique<ApiServer>(*scheduler_, o);
    HostAssistantOptions ho;
    ho.n_threads = 1;
    ho.n_ctx = kHostCtx;
    api_->attach_host_model(std::make_unique<HostAssistant>(host_model(), host_tokenizer(), *scheduler_, ho));
    api_->context().host->prompt_observer = [this](const std::string& prompt) {
      std::lock_guard<std::mutex> lock(mu_);
      prompts_.push_back(prompt);
    };
    port_ = api_->bind("127.0.0.1", 0);
    server_thread_ = std::thread([this] { api_->run(); });
  }

  void TearDown() override {
    api_->stop();
    server_thread_.join();
    api_.reset();
    scheduler_.reset();
  }

  httplib::Result post(const std::string& path, const std::string& body, const std::string& key = kUserKey) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120);
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    return c.Post(path, h, body, "application/json");
  }

  httplib::Result get(const std::string& path, const std::string& key = kUserKey) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120);
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    return c.Get(path, h);
  }

  void complete(const std::string& prompt, int max_tokens = 4) {
    const json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
    auto r = post("/v1/completions", body.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    // The answer reaches the client from on_done, before the scheduler publishes the step's stats: the
    // figures are the scheduler's snapshot, so wait for it.
    test::wait_idle(*scheduler_);
    // And the request's log line is written after its response (httplib's logger): wait for that too.
    const std::string logged = "POST /v1/completions 200";
    for (int i = 0; i < 1000 && !logged_since(logged, finished_completions_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(logged_since(logged, finished_completions_)) << "no log line for the completion";
    ++finished_completions_;
  }

  // Whether more than `seen` lines of the server log's ring start with `prefix`.
  bool logged_since(const std::string& prefix, int seen) {
    int n = 0;
    for (const std::string& line : api_->context().log.recent(ServerLogOptions{}.ring_lines))
      n += line.rfind(prefix, 0) == 0;
    return n > seen;
  }

  std::vector<std::string> prompts() {
    std::lock_guard<std::mutex> lock(mu_);
    return prompts_;
  }

  // "- label: value unit" for every figure of a figures event / report.
  static std::vector<std::string> prompt_lines_of(const json& figures) {
    std::vector<std::string> lines;
    for (const json& f : figures) {
      const std::string value = f["value"], unit = f["unit"];
      lines.push_back("- " + f["label"].get<std::string>() + ": " + value +
                      (unit.empty() || value == "n/a" ? "" : " " + unit));
    }
    return lines;
  }

  static std::string figure(const json& figures, const std::string& key) {
    for (const json& f : figures) {
      if (f["key"] == key) return f["value"];
    }
    ADD_FAILURE() << "no figure " << key;
    return {};
  }

  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ApiServer> api_;
  int port_ = 0;
  std::thread server_thread_;
  std::mutex mu_;
  std::vector<std::string> prompts_;
  int finished_completions_ = 0;
};

TEST_F(HostServer, AskStreamsAnAnswerWhosePromptHeldTheLiveFigures) {
  complete("Once upon a time");
  const std::string question = "How many requests have finished?";
  auto r = post("/v1/host/ask", json{{"question", question}}.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = sse_events(r->body);
  ASSERT_GE(events.size(), 3u) << r->body;
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events.front());
  EXPECT_EQ(first["object"], "host.answer.figures");
  EXPECT_EQ(figure(first["figures"], "requests_finished"), "1");
  EXPECT_EQ(figure(first["figures"], "recent_requests"), "1");
  const json done = json::parse(events[events.size() - 2]);
  EXPECT_EQ(done["object"], "host.answer.done");
  EXPECT_GT(done["completion_tokens"].get<int>(), 0);
  std::string streamed;
  for (size_t i = 1; i + 2 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    EXPECT_EQ(e["object"], "host.answer.delta");
    streamed += e["text"].get<std::string>();
  }
  EXPECT_FALSE(streamed.empty());

  // The prompt the host model was given: every figure the stream listed, the question, the log line of the
  // completion that ran before.
  const std::vector<std::string> seen = prompts();
  ASSERT_EQ(seen.size(), 1u);
  for (const std::string& line : prompt_lines_of(first["figures"])) {
    EXPECT_NE(seen[0].find(line + "\n"), std::string::npos) << "missing from the prompt: " << line;
  }
  EXPECT_NE(seen[0].find("- requests finished: 1\n"), std::string::npos);
  EXPECT_NE(seen[0].find("Question: " + question), std::string::npos);
  EXPECT_NE(seen[0].find("POST /v1/completions 200"), std::string::npos);
  bool listed = false;
  for (const json& line : first["log_lines"])
    listed = listed || line.get<std::string>().find("POST /v1/completions 200") == 0;
  EXPECT_TRUE(listed) << first["log_lines"].dump();

  // Live: after another completion the next prompt holds the new count.
  complete("The little dog");
  auto again = post("/v1/host/ask", json{{"question", question}, {"stream", false}}.dump());
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200) << again->body;
  const json whole = json::parse(again->body);
  EXPECT_EQ(whole["object"], "host.answer");
  EXPECT_EQ(figure(whole["figures"], "requests_finished"), "2");
  EXPECT_TRUE(whole["answer"].is_string());
  ASSERT_EQ(prompts().size(), 2u);
  EXPECT_NE(prompts()[1].find("- requests finished: 2\n"), std::string::npos);
}

// /metrics carries the host's counters: the steps an answer took, as its done event says.
TEST_F(HostServer, MetricsCountTheHostsSteps) {
  auto r = post("/v1/host/ask", json{{"question", "Busy?"}, {"max_tokens", 3}, {"stream", false}}.dump());
  ASSERT_EQ(r->status, 200) << r->body;
  const int64_t steps = json::parse(r->body)["host_steps"];
  ASSERT_GT(steps, 0);
  const std::string text = get("/metrics")->body;
  const auto value = [&](const std::string& sample) {
    const size_t at = text.find("\n" + sample + " ");
    EXPECT_NE(at, std::string::npos) << sample;
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + sample.size() + 2));
  };
  EXPECT_EQ(value(std::string(kMetricsPrefix) + "host_steps_total"), static_cast<double>(steps));
  EXPECT_EQ(value(std::string(kMetricsPrefix) + "host_jobs_total{result=\"finished\"}"), 1.0);
  EXPECT_EQ(value(std::string(kMetricsPrefix) + "host_paused"), 0.0);
  EXPECT_NE(text.find("# TYPE " + std::string(kMetricsPrefix) + "host_pauses_total counter"), std::string::npos);
}

TEST_F(HostServer, RolesAreEnforced) {
  const std::string question = json{{"question", "Is the GPU busy?"}, {"max_tokens", 2}}.dump();
  EXPECT_EQ(post("/v1/host/ask", question)->status, 200);             // the API key may ask
  EXPECT_EQ(post("/v1/host/ask", question, kAdminKey)->status, 200);  // so may the admin
  EXPECT_EQ(post("/v1/host/ask", question, "")->status, 401);         // no key
  EXPECT_EQ(post("/v1/host/ask", question, "guess")->status, 401);    // an unknown key
  EXPECT_EQ(get("/v1/host/status")->status, 200);
  EXPECT_EQ(get("/v1/host/status", "guess")->status, 401);

  auto forbidden = post("/v1/host/housekeeping", "{}");
  ASSERT_TRUE(forbidden);
  EXPECT_EQ(forbidden->status, 403);
  EXPECT_EQ(json::parse(forbidden->body)["error"]["code"], "host_admin_required");
  EXPECT_EQ(post("/v1/host/housekeeping", "{}", "")->status, 401);
  EXPECT_EQ(post("/v1/host/housekeeping", "{}", "guess")->status, 401);
  EXPECT_EQ(post("/v1/host/housekeeping", "{}", kAdminKey)->status, 200);

  const std::string schedule = json{{"report_every_minutes", 30}}.dump();
  EXPECT_EQ(post("/v1/host/schedule", schedule)->status, 403);
  EXPECT_EQ(json::parse(get("/v1/host/schedule")->body)["report_every_minutes"], 0);  // unchanged
  auto changed = post("/v1/host/schedule", schedule, kAdminKey);
  ASSERT_EQ(changed->status, 200) << changed->body;
  EXPECT_EQ(json::parse(get("/v1/host/schedule")->body)["report_every_minutes"], 30);

  // The admin key is a key like the API key for everything else.
  EXPECT_EQ(post("/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 1}}.dump(), kAdminKey)->status, 200);
}

TEST_F(HostServer, MalformedAndTooLongQuestionsAreRefused) {
  const auto status_and_code = [&](const std::string& body) {
    auto r = post("/v1/host/ask", body);
    const json j = json::parse(r->body);
    return std::to_string(r->status) + " " +
           (j["error"]["code"].is_string() ? j["error"]["code"].get<std::string>() : "");
  };
  EXPECT_EQ(status_and_code("{not json"), "400 invalid_json");
  EXPECT_EQ(status_and_code("[1, 2]"), "400 invalid_json");
  EXPECT_EQ(status_and_code("{}"), "400 missing_required_parameter");
  EXPECT_EQ(status_and_code(R"({"question": 7})"), "400 invalid_type");
  EXPECT_EQ(status_and_code(R"({"question": "  "})"), "400 invalid_value");
  EXPECT_EQ(status_and_code(R"({"question": "hi", "max_tokens": 0})"), "400 invalid_value");
  EXPECT_EQ(status_and_code(R"({"question": "hi", "max_tokens": 1000})"),
            "400 invalid_value");  // over --host-max-tokens
  EXPECT_EQ(status_and_code(R"({"question": "hi", "max_tokens": 1.5})"), "400 invalid_type");
  EXPECT_EQ(status_and_code(R"({"question": "hi", "temperature": -1})"), "400 invalid_value");
  EXPECT_EQ(status_and_code(R"({"question": "hi", "model": "x"})"), "400 unknown_parameter");
  EXPECT_EQ(status_and_code(json{{"question", std::string(2001, 'q')}}.dump()), "413 question_too_long");
  // Within the byte limit but not within the host's context beside the figures: 400, nothing started.
  EXPECT_EQ(status_and_code(json{{"question", std::string(1000, 'q')}}.dump()), "400 context_length_exceeded");
  EXPECT_TRUE(prompts().empty());
  EXPECT_EQ(api_->context().host->assistant()->stats().steps, 0u);
  auto wrong_type = post("/v1/host/housekeeping", R"({"cached_idle_seconds": "soon"})", kAdminKey);
  EXPECT_EQ(wrong_type->status, 400);
  EXPECT_EQ(post("/v1/host/schedule", R"({"report_every_minutes": -5})", kAdminKey)->status, 400);
  EXPECT_EQ(get("/v1/host/report?format=pdf")->status, 400);
  EXPECT_EQ(get("/v1/host/ask")->status, 405);
}

TEST_F(HostServer, ReportIsTheFiguresTableWithTheSummaryBeneath) {
  complete("Once upon a time");
  EXPECT_EQ(get("/v1/host/report?latest=1")->status, 404);  // none made yet
  auto r = get("/v1/host/report");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json brief = json::parse(r->body);
  EXPECT_EQ(brief["object"], "host.report");
  EXPECT_EQ(brief["trigger"], "request");
  EXPECT_EQ(brief["summary_status"], "generated");
  ASSERT_TRUE(brief["summary"].is_string());
  EXPECT_EQ(figure(brief["figures"], "requests_finished"), "1");
  // The table is the figures, row for row, computed.
  const std::string table = brief["table_markdown"];
  std::istringstream rows(table);
  std::string row;
  std::vector<std::string> lines;
  while (std::getline(rows, row)) lines.push_back(row);
  ASSERT_EQ(lines.size(), brief["figures"].size() + 2);
  EXPECT_EQ(lines[0], "| figure | value |");
  EXPECT_NE(table.find("| requests finished | 1 |"), std::string::npos);
  // Markdown: the table, then the summary beneath it.
  const std::string md = brief["markdown"];
  const size_t table_at = md.find(table), summary_at = md.find("## Summary");
  ASSERT_NE(table_at, std::string::npos);
  ASSERT_NE(summary_at, std::string::npos);
  EXPECT_LT(table_at, summary_at);
  EXPECT_NE(md.find(brief["summary"].get<std::string>(), summary_at), std::string::npos);
  // The summary's prompt held the same figures.
  ASSERT_EQ(prompts().size(), 1u);
  for (const std::string& line : prompt_lines_of(brief["figures"])) {  // one snapshot for both
    EXPECT_NE(prompts()[0].find(line + "\n"), std::string::npos) << line;
  }
  // The brief is logged, but its generated summary never comes back as a "log line" in the host's prompts.
  bool logged = false;  // the brief's line, and the report request's (written after its response)
  for (int i = 0; i < 1000 && !logged; ++i) {
    logged = logged_since("host brief (request): ", 0) && logged_since("GET /v1/host/report 200", 0);
    if (!logged) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(logged);
  ASSERT_EQ(post("/v1/host/ask", json{{"question", "Anything wrong?"}, {"max_tokens", 2}}.dump())->status, 200);
  ASSERT_EQ(prompts().size(), 2u);
  EXPECT_EQ(prompts()[1].find("host brief ("), std::string::npos);
  EXPECT_NE(prompts()[1].find("GET /v1/host/report 200"), std::string::npos);  // the other lines are there

  auto latest = get("/v1/host/report?latest=1&format=markdown");
  ASSERT_EQ(latest->status, 200);
  EXPECT_EQ(latest->get_header_value("Content-Type"), "text/markdown; charset=utf-8");
  EXPECT_EQ(latest->body, md);
}

TEST_F(HostServer, HousekeepingFreesPrefixCacheEntriesUnusedForAWhile) {
  complete(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with "
      "her friends. One day, she saw a big dog");
  const int64_t cached = test::wait_idle(*scheduler_).kv_blocks_cached;
  ASSERT_GT(cached, 0);
  auto young = post("/v1/host/housekeeping", R"({"cached_idle_seconds": 3600})", kAdminKey);
  ASSERT_EQ(young->status, 200) << young->body;
  EXPECT_EQ(json::parse(young->body)["actions"][0]["changed"], false);
  EXPECT_EQ(scheduler_->stats().kv_blocks_cached, cached);  // younger than an hour: kept

  auto all = post("/v1/host/housekeeping", R"({"cached_idle_seconds": 0})", kAdminKey);
  ASSERT_EQ(all->status, 200) << all->body;
  const json report = json::parse(all->body);
  EXPECT_EQ(report["object"], "host.housekeeping");
  std::map<std::string, json> actions;
  for (const json& a : report["actions"]) actions[a["action"]] = a;
  ASSERT_EQ(actions.count("free_idle_prefix_cache"), 1u);
  EXPECT_EQ(actions["free_idle_prefix_cache"]["changed"], true);
  EXPECT_EQ(actions["free_idle_prefix_cache"]["detail"].get<std::string>().rfind(
                "freed " + std::to_string(cached) + " of " + std::to_string(cached) + " ", 0),
            0u)
      << actions["free_idle_prefix_cache"]["detail"];
  EXPECT_EQ(scheduler_->stats().kv_blocks_cached, 0);
  EXPECT_EQ(scheduler_->stats().kv_blocks_used, 0);
  // The log file was rotated: the requests so far are in PATH.1.
  ASSERT_EQ(actions.count("rotate_log"), 1u);
  EXPECT_EQ(actions["rotate_log"]["changed"], true) << actions["rotate_log"]["detail"];
  EXPECT_TRUE(std::filesystem::exists(log_path() + ".1"));
  // The next brief says what was done.
  const json brief = json::parse(get("/v1/host/report")->body);
  ASSERT_TRUE(brief["housekeeping"].is_object());
  EXPECT_EQ(brief["housekeeping"]["created_unix_ms"], report["created_unix_ms"]);
  EXPECT_NE(figure(brief["figures"], "last_housekeeping").find("freed " + std::to_string(cached)), std::string::npos);
}

TEST_F(HostServer, PeriodicBriefFollowsTheScheduleTheAdminSets) {
  ASSERT_EQ(post("/v1/host/schedule", R"({"report_every_minutes": 0.005})", kAdminKey)->status, 200);  // 0.3 s
  json latest;
  for (int i = 0; i < 200 && latest.is_null(); ++i) {
    auto r = get("/v1/host/report?latest=1");
    if (r->status == 200) latest = json::parse(r->body);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(latest.is_object()) << "no periodic brief within 10 s";
  EXPECT_EQ(latest["trigger"], "schedule");
  EXPECT_EQ(latest["summary_status"], "generated");
  ASSERT_EQ(post("/v1/host/schedule", R"({"report_every_minutes": 0})", kAdminKey)->status, 200);
  const json status = json::parse(get("/v1/host/status")->body);
  EXPECT_EQ(status["enabled"], true);
  EXPECT_EQ(status["schedule"]["report_every_minutes"], 0);
  EXPECT_TRUE(status["latest_brief"].is_object());
}

// The host gives way: a main request submitted while a host job is mid-generation gets its first token
// (and its whole answer) while the host runs at most the one step it had already started; the host job
// then resumes and ends as it would have without the interruption.
TEST_F(HostServer, HostJobYieldsToAMainRequestWithinOneStep) {
  HostAssistant& host = *api_->context().host->assistant();
  const auto run_job = [&](const std::function<void(int64_t generated)>& on_progress) {
    HostJob job;
    job.prompt_tokens = host_tokenizer().encode(std::string(200, 'x') + " The host answers: ", true);
    job.generation.max_tokens = 120;
    job.generation.ignore_eos = true;
    job.generation.sampling.temperature = 0.0f;
    auto done = std::make_shared<std::promise<HostJobResult>>();
    std::atomic<int64_t> pieces{0};
    job.on_text = [&, on_progress](const std::string&) {
      on_progress(++pieces);
      return true;
    };
    job.on_done = [done](const HostJobResult& r, std::exception_ptr) { done->set_value(r); };
    host.submit(std::move(job));
    return done->get_future().get();
  };
  const HostJobResult alone = run_job([](int64_t) {});
  ASSERT_EQ(alone.completion_tokens, 120);
  EXPECT_EQ(alone.pauses, 0);

  std::atomic<uint64_t> at_submit{0}, at_first_token{0}, at_done{0};
  std::atomic<bool> submitted{false}, first_token_seen{false};
  std::mutex m;
  std::condition_variable cv;
  bool main_done = false;
  const HostJobResult interrupted = run_job([&](int64_t generated) {
    if (generated != 10 || submitted.exchange(true)) return;  // mid-generation: a main request arrives
    // (on the host's worker thread, between two host steps; submit from another thread as a client would)
    std::thread([&] {
      CompletionRequest req;
      req.prompt_tokens = test::tokenizer().encode("Once upon a time", true);
      req.max_tokens = 200;  // long enough to be running when the host looks again (a tiny model is fast)
      req.ignore_eos = true;
      req.sampling.temperature = 0.0f;
      scheduler_->submit(
          std::move(req),
          [&](const TokenEvent& e) {
            if (e.token >= 0 && !first_token_seen.exchange(true)) at_first_token = host.steps();
            return true;
          },
          [&](const CompletionResult&, std::exception_ptr) {
            at_done = host.steps();
            std::lock_guard<std::mutex> lock(m);
            main_done = true;
            cv.notify_all();
          });
      at_submit = host.steps();
    }).join();
  });
  {
    std::unique_lock<std::mutex> lock(m);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return main_done; }));
  }
  ASSERT_TRUE(submitted.load());
  EXPECT_LE(at_first_token.load() - at_submit.load(), 1u) << "host steps between the submit and the first token";
  EXPECT_LE(at_done.load() - at_submit.load(), 1u) << "host steps while the main request ran";
  EXPECT_GE(interrupted.pauses, 1);  // it paused, then resumed:
  EXPECT_EQ(interrupted.finish, alone.finish);
  EXPECT_EQ(interrupted.text, alone.text);  // the same answer as uninterrupted
  EXPECT_EQ(interrupted.steps, alone.steps);
}

}  // namespace
}  // namespace ga::server
