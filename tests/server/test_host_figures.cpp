// The host's computed pieces without a model: the figures from hand-made inputs (values, units, "n/a" for
// what the server cannot know), their table and prompt forms, the percentile, the housekeeping report's
// JSON, and the server log's ring and rotation (PATH -> PATH.1 -> PATH.2, the oldest deleted).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <unistd.h>

#include "server/host_figures.h"
#include "server/housekeeping.h"
#include "server/server_log.h"

namespace ga::server {
namespace {

std::map<std::string, HostFigure> by_key(const std::vector<HostFigure>& figures) {
  std::map<std::string, HostFigure> out;
  for (const HostFigure& f : figures) {
    EXPECT_TRUE(out.emplace(f.key, f).second) << "duplicate key " << f.key;
  }
  return out;
}

HostInputs sample_inputs() {
  HostInputs in;
  in.model_id = "stories260K.gguf";
  in.uptime_seconds = 42;
  in.scheduler.device = "cpu";
  in.scheduler.running = 3;
  in.scheduler.queued = 2;
  in.scheduler.kv_blocks_total = 200;
  in.scheduler.kv_blocks_used = 50;
  in.scheduler.kv_blocks_cached = 7;
  in.scheduler.requests_finished = 11;
  in.scheduler.generation_tokens_per_second = 123.45;
  in.max_running = 16;
  in.responses_by_status = {{200, 9}, {400, 2}, {413, 1}, {503, 4}};
  for (int i = 1; i <= 20; ++i) {
    FinishedRequest r;
    r.ttft_ms = i;
    r.total_ms = 10.0 * i;
    in.recent.push_back(r);
  }
  in.log_error_lines = 5;
  in.machine = {{"gpu", nullptr}, {"cpu", {{"machine_cpu_percent", 37.6}, {"process_rss_bytes", 100 * 1024 * 1024}}}};
  return in;
}

TEST(HostFigures, ComputedFromTheInputs) {
  const auto f = by_key(host_figures(sample_inputs()));
  EXPECT_EQ(f.at("model").value, "stories260K.gguf");
  EXPECT_EQ(f.at("requests_running").value, "3");
  EXPECT_EQ(f.at("requests_queued").value, "2");
  EXPECT_EQ(f.at("kv_blocks_used").value, "50 of 200");
  EXPECT_EQ(f.at("kv_used_percent").value, "25.0");
  EXPECT_EQ(f.at("kv_used_percent").unit, "%");
  EXPECT_EQ(f.at("kv_blocks_cached").value, "7");
  EXPECT_EQ(f.at("generation_tps").value, "123.5");
  EXPECT_EQ(f.at("ttft_p50_ms").value, "10.0");  // nearest rank of 1..20
  EXPECT_EQ(f.at("ttft_p95_ms").value, "19.0");
  EXPECT_EQ(f.at("latency_p50_ms").value, "100.0");
  EXPECT_EQ(f.at("http_4xx").value, "3");
  EXPECT_EQ(f.at("http_5xx").value, "4");
  EXPECT_EQ(f.at("log_errors").value, "5");
  EXPECT_EQ(f.at("gpu_name").value, "none visible (no NVML)");
  EXPECT_EQ(f.at("cpu_machine_percent").value, "38");
  EXPECT_EQ(f.at("rss_mib").value, "100");
  EXPECT_EQ(f.at("cpu_process_percent").value, "n/a");  // absent from the telemetry
  EXPECT_EQ(f.at("last_housekeeping").value, "none yet");
}

TEST(HostFigures, UnknownsReadNotAvailableAndRecurrentModelsSayState) {
  HostInputs in;
  in.scheduler.recurrent_state = true;
  in.scheduler.kv_blocks_total = 0;
  const auto f = by_key(host_figures(in));
  EXPECT_EQ(f.at("ttft_p50_ms").value, "n/a");
  EXPECT_EQ(f.at("kv_used_percent").value, "n/a");
  EXPECT_EQ(f.at("kv_blocks_used").label, "state blocks in use");
  EXPECT_EQ(f.at("prompt_states").value, "0 (0.0 MiB)");
  EXPECT_EQ(f.at("prompt_state_hits").value, "0");
  EXPECT_EQ(by_key(host_figures(sample_inputs())).count("prompt_states"), 0u);  // attention models: prefix blocks
  EXPECT_EQ(figure_text(f.at("ttft_p50_ms")), "n/a");  // no unit after n/a
}

TEST(HostFigures, TableAndPromptForms) {
  const std::vector<HostFigure> figures = {{"a", "alpha", "1.5", "ms"}, {"b", "beta | pipe", "x|y", ""}};
  EXPECT_EQ(figures_table_markdown(figures),
            "| figure | value |\n|---|---|\n| alpha | 1.5 ms |\n| beta   pipe | x y |\n");
  EXPECT_EQ(figures_prompt_lines(figures), "- alpha: 1.5 ms\n- beta | pipe: x|y\n");
  const nlohmann::json j = figures_json(figures);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0], (nlohmann::json{{"key", "a"}, {"label", "alpha"}, {"value", "1.5"}, {"unit", "ms"}}));
}

TEST(HostFigures, Percentile) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({5}, 95), 5);
  EXPECT_EQ(percentile({3, 1, 2, 4}, 50), 2);
  EXPECT_EQ(percentile({3, 1, 2, 4}, 100), 4);
}

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("ga_host_log_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ServerLog, RingKeepsTheLastLinesAndCountsErrors) {
  ServerLogOptions o;
  o.ring_lines = 3;
  ServerLog log(o);
  for (int i = 0; i < 5; ++i) log.printed_line("line " + std::to_string(i));
  log.printed_line("error: something failed");
  EXPECT_EQ(log.recent(10), (std::vector<std::string>{"line 3", "line 4", "error: something failed"}));
  EXPECT_EQ(log.recent(1), (std::vector<std::string>{"error: something failed"}));
  EXPECT_EQ(log.lines_total(), 6u);
  EXPECT_EQ(log.error_lines_total(), 1u);
  EXPECT_FALSE(log.rotate().error.empty());  // no file: says so
}

TEST(ServerLog, RotatesBySizeAndOnRequestKeepingN) {
  const std::string path = temp_path("server.log");
  for (const char* suffix : {"", ".1", ".2", ".3"}) std::filesystem::remove(path + suffix);
  ServerLogOptions o;
  o.path = path;
  o.keep = 2;
  o.max_bytes = 20;
  {
    ServerLog log(o);
    log.printed_line("first line 0123");   // 16 bytes
    log.printed_line("second line 0123");  // would pass 20: the file rotates first
    EXPECT_EQ(contents(path), "second line 0123\n");
    EXPECT_EQ(contents(path + ".1"), "first line 0123\n");
    const LogRotation r = log.rotate();
    EXPECT_TRUE(r.rotated) << r.error;
    EXPECT_EQ(r.bytes, 17u);
    EXPECT_EQ(r.kept, (std::vector<std::string>{path + ".1", path + ".2"}));
    EXPECT_EQ(contents(path + ".1"), "second line 0123\n");
    EXPECT_EQ(contents(path + ".2"), "first line 0123\n");
    EXPECT_FALSE(log.rotate().rotated);  // empty: nothing to rotate
    log.printed_line("third");
    EXPECT_TRUE(log.rotate().rotated);
    EXPECT_EQ(contents(path + ".1"), "third\n");
    EXPECT_EQ(contents(path + ".2"), "second line 0123\n");
    EXPECT_FALSE(std::filesystem::exists(path + ".3"));  // keep 2: the oldest is gone
    log.printed_line("fourth");
  }
  EXPECT_EQ(contents(path), "fourth\n");
}

TEST(ServerLog, ScheduledRotationWaitsUntilTheFileIsOldEnough) {
  const std::string path = temp_path("daily.log");
  for (const char* suffix : {"", ".1"}) std::filesystem::remove(path + suffix);
  ServerLogOptions o;
  o.path = path;
  ServerLog log(o);
  log.printed_line("a line");
  const LogRotation early = log.rotate_if_older(std::chrono::hours(24));
  EXPECT_FALSE(early.rotated);
  EXPECT_FALSE(early.skipped.empty());
  EXPECT_FALSE(std::filesystem::exists(path + ".1"));
  EXPECT_TRUE(log.rotate_if_older(std::chrono::seconds(0)).rotated);
  EXPECT_EQ(contents(path + ".1"), "a line\n");
}

TEST(Housekeeping, ReportJsonAndSummary) {
  HousekeepingReport r;
  r.unix_ms = 1700000000000;
  r.trigger = "schedule";
  r.cached_blocks_freed = 3;
  r.log_rotated = true;
  r.actions.push_back({"free_idle_prefix_cache", true, "freed 3 of 4"});
  const nlohmann::json j = housekeeping_json(r);
  EXPECT_EQ(j["object"], "host.housekeeping");
  EXPECT_EQ(j["trigger"], "schedule");
  ASSERT_EQ(j["actions"].size(), 1u);
  EXPECT_EQ(j["actions"][0]["action"], "free_idle_prefix_cache");
  EXPECT_EQ(j["actions"][0]["changed"], true);
  EXPECT_EQ(housekeeping_summary(r), "freed 3 prefix-cache blocks, log rotated (schedule)");
}

}  // namespace
}  // namespace ga::server
