// SSE framing, read back with a parser written from the WHATWG EventSource rules (lines, "data:" with one
// optional space, ':' comments, a blank line dispatches); and the Prometheus text format 0.0.4, read back
// with a parser of its grammar (# HELP / # TYPE before a family's samples, name{labels} value).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/metrics.h"
#include "server/sse.h"

namespace ga::server {
namespace {

// Dispatched "data" payloads of an event stream.
std::vector<std::string> parse_sse(const std::string& stream) {
  std::vector<std::string> events;
  std::string data;
  bool have_data = false;
  std::istringstream in(stream);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) {
      if (have_data) events.push_back(data);
      data.clear();
      have_data = false;
      continue;
    }
    if (line[0] == ':') continue;
    const size_t colon = line.find(':');
    const std::string name = line.substr(0, colon);
    std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    if (name == "data") {
      if (have_data) data += '\n';
      data += value;
      have_data = true;
    }
  }
  return events;
}

TEST(Sse, EventsRoundTrip) {
  const nlohmann::json a = {{"text", "line one\nline two\r\n"}, {"n", 1}};
  const nlohmann::json b = {{"unicode", "h\u00e9llo \U0001F600"}};
  const std::string stream = sse_data(a) + sse_comment("wait\ning") + sse_data(b) + sse_done();
  const std::vector<std::string> events = parse_sse(stream);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(events[0]), a);  // newlines in values stay escaped: one data line
  EXPECT_EQ(nlohmann::json::parse(events[1]), b);
  EXPECT_EQ(events[2], "[DONE]");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(stream.find("\n\n\n"), std::string::npos);
}

TEST(Sse, InvalidUtf8BecomesReplacementCharacter) {
  const nlohmann::json partial = {{"token", std::string("\xe2\x82")}};  // half of a 3-byte sequence
  const std::vector<std::string> events = parse_sse(sse_data(partial));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(events[0])["token"], "\xef\xbf\xbd");  // U+FFFD
}

struct Sample {
  std::string labels;
  double value;
};
struct Family {
  std::string type, help;
  std::vector<std::pair<std::string, Sample>> samples;  // (sample name, sample)
};

double parse_value(const std::string& text) {
  if (text == "+Inf") return INFINITY;
  if (text == "-Inf") return -INFINITY;
  if (text == "NaN") return NAN;
  size_t used = 0;
  const double v = std::stod(text, &used);
  EXPECT_EQ(used, text.size()) << text;
  return v;
}

// Families by name; fails the test on lines that break the format.
std::map<std::string, Family> parse_prometheus(const std::string& text) {
  std::map<std::string, Family> families;
  std::string current;
  std::istringstream in(text);
  std::string line;
  EXPECT_EQ(text.back(), '\n');
  while (std::getline(in, line)) {
    EXPECT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string rest = line.substr(7);
      current = rest.substr(0, rest.find(' '));
      EXPECT_EQ(families.count(current), 0u) << "family declared twice: " << current;
      families[current].help = rest.substr(rest.find(' ') + 1);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream fields(line.substr(7));
      std::string name, type;
      fields >> name >> type;
      EXPECT_EQ(name, current) << "TYPE must follow its HELP";
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << type;
      families[name].type = type;
      continue;
    }
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    const std::string name = line.substr(0, std::min(brace, space));
    std::string labels;
    if (brace != std::string::npos) labels = line.substr(brace + 1, line.rfind('}') - brace - 1);
    EXPECT_EQ(name.rfind(current, 0), 0u) << "sample " << name << " outside its family " << current;
    for (char c : name) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':') << name;
    families[current].samples.push_back({name, {labels, parse_value(line.substr(space + 1))}});
  }
  return families;
}

TEST(Prometheus, NumbersAndLabels) {
  EXPECT_EQ(prometheus_number(0), "0");
  EXPECT_EQ(prometheus_number(42), "42");
  EXPECT_EQ(prometheus_number(0.25), "0.25");
  EXPECT_EQ(prometheus_number(1e21), "1e+21");
  EXPECT_EQ(prometheus_number(INFINITY), "+Inf");
  EXPECT_EQ(prometheus_number(-INFINITY), "-Inf");
  EXPECT_EQ(prometheus_number(NAN), "NaN");
  EXPECT_EQ(parse_value(prometheus_number(0.1 + 0.2)), 0.1 + 0.2);  // round-trips exactly
  EXPECT_EQ(prometheus_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

// The host assistant's families follow the same grammar (HELP/TYPE first, counters end in _total), and only
// a server with a host has them.
TEST(Prometheus, HostFamiliesWhenThereIsAHost) {
  ServerMetrics metrics;
  const SchedulerStats s;
  EXPECT_EQ(parse_prometheus(render_prometheus(metrics.snapshot(), s, 4)).count("gpu_accel_host_steps_total"), 0u);
  HostMetrics host;
  host.steps = 123;
  host.pauses = 4;
  host.jobs_finished = 5;
  host.jobs_cancelled = 1;
  host.queued = 2;
  host.paused = true;
  const auto families = parse_prometheus(render_prometheus(metrics.snapshot(), s, 4, &host));
  const auto sample = [&](const std::string& family, const std::string& labels = {}) {
    for (const auto& [name, smp] : families.at(family).samples) {
      if (smp.labels == labels) return smp.value;
    }
    ADD_FAILURE() << family << "{" << labels << "}";
    return std::nan("");
  };
  EXPECT_EQ(families.at("gpu_accel_host_steps_total").type, "counter");
  EXPECT_EQ(sample("gpu_accel_host_steps_total"), 123);
  EXPECT_EQ(sample("gpu_accel_host_pauses_total"), 4);
  EXPECT_EQ(sample("gpu_accel_host_jobs_total", "result=\"finished\""), 5);
  EXPECT_EQ(sample("gpu_accel_host_jobs_total", "result=\"cancelled\""), 1);
  EXPECT_EQ(families.at("gpu_accel_host_jobs_queued").type, "gauge");
  EXPECT_EQ(sample("gpu_accel_host_jobs_queued"), 2);
  EXPECT_EQ(sample("gpu_accel_host_paused"), 1);
}

TEST(Prometheus, ModelInfoCarriesThePrecision) {
  ServerMetrics metrics;
  const SchedulerStats s;
  EXPECT_EQ(parse_prometheus(render_prometheus(metrics.snapshot(), s, 4)).count("gpu_accel_model_info"), 0u);
  const ModelLabels model{"random \"llama\"", "llama", "fp8"};
  const auto families = parse_prometheus(render_prometheus(metrics.snapshot(), s, 4, nullptr, &model));
  const auto& info = families.at("gpu_accel_model_info");
  EXPECT_EQ(info.type, "gauge");
  ASSERT_EQ(info.samples.size(), 1u);
  EXPECT_EQ(info.samples[0].second.labels, "model=\"random \\\"llama\\\"\",architecture=\"llama\",precision=\"fp8\"");
  EXPECT_EQ(info.samples[0].second.value, 1.0);
}

TEST(Prometheus, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1, 10});
  for (const double v : {0.05, 0.1, 0.5, 5.0, 50.0, 500.0}) h.observe(v);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 1, 1, 2}));  // le: 0.1 falls in the 0.1 bucket
  EXPECT_EQ(h.count(), 6u);
  EXPECT_DOUBLE_EQ(h.sum(), 555.65);
}

TEST(Prometheus, RendersTheServerState) {
  ServerMetrics metrics;
  metrics.record_response(200);
  metrics.record_response(200);
  metrics.record_response(400);
  metrics.record_completion(0.3, 0.02);
  metrics.record_completion(400.0, 7.0);
  SchedulerStats s;
  s.running = 3;
  s.queued = 5;
  s.kv_blocks_total = 1024;
  s.kv_blocks_used = 77;
  s.kv_blocks_cached = 9;
  s.prompt_states = 4;
  s.prompt_state_hits = 6;
  s.requests_finished = 11;
  s.requests_cancelled = 2;
  s.prompt_tokens_total = 1234;
  s.generated_tokens_total = 5678;
  s.prompt_tokens_per_second = 250.5;
  s.generation_tokens_per_second = 31.25;
  s.weight_bytes = 1u << 20;
  const auto families = parse_prometheus(render_prometheus(metrics.snapshot(), s, 16));

  const auto value = [&](const std::string& family, const std::string& sample,
                         const std::string& labels = {}) -> double {
    const auto it = families.find(family);
    if (it == families.end()) {
      ADD_FAILURE() << "missing family " << family;
      return std::nan("");
    }
    for (const auto& [name, smp] : it->second.samples) {
      if (name == sample && smp.labels == labels) return smp.value;
    }
    ADD_FAILURE() << "missing sample " << sample << "{" << labels << "}";
    return std::nan("");
  };
  for (const auto& [name, f] : families) {
    EXPECT_FALSE(f.help.empty()) << name;
    EXPECT_FALSE(f.type.empty()) << name;
    if (f.type == "counter") {
      EXPECT_EQ(name.substr(name.size() - 6), "_total") << name;
    }
  }
  EXPECT_EQ(value("gpu_accel_http_requests_total", "gpu_accel_http_requests_total", "status=\"200\""), 2);
  EXPECT_EQ(value("gpu_accel_http_requests_total", "gpu_accel_http_requests_total", "status=\"400\""), 1);
  EXPECT_EQ(value("gpu_accel_requests_running", "gpu_accel_requests_running"), 3);
  EXPECT_EQ(value("gpu_accel_requests_queued", "gpu_accel_requests_queued"), 5);
  EXPECT_EQ(value("gpu_accel_max_running", "gpu_accel_max_running"), 16);
  EXPECT_EQ(value("gpu_accel_kv_blocks_used", "gpu_accel_kv_blocks_used"), 77);
  EXPECT_EQ(value("gpu_accel_kv_blocks_total", "gpu_accel_kv_blocks_total"), 1024);
  EXPECT_EQ(value("gpu_accel_kv_blocks_cached", "gpu_accel_kv_blocks_cached"), 9);
  EXPECT_EQ(value("gpu_accel_prompt_states_cached", "gpu_accel_prompt_states_cached"), 4);
  EXPECT_EQ(value("gpu_accel_prompt_state_cache_hits_total", "gpu_accel_prompt_state_cache_hits_total"), 6);
  EXPECT_EQ(value("gpu_accel_prompt_tokens_total", "gpu_accel_prompt_tokens_total"), 1234);
  EXPECT_EQ(value("gpu_accel_generated_tokens_total", "gpu_accel_generated_tokens_total"), 5678);
  EXPECT_EQ(value("gpu_accel_requests_finished_total", "gpu_accel_requests_finished_total"), 11);
  EXPECT_EQ(value("gpu_accel_requests_cancelled_total", "gpu_accel_requests_cancelled_total"), 2);
  EXPECT_EQ(value("gpu_accel_prompt_tokens_per_second", "gpu_accel_prompt_tokens_per_second"), 250.5);
  EXPECT_EQ(value("gpu_accel_generation_tokens_per_second", "gpu_accel_generation_tokens_per_second"), 31.25);

  // The latency histogram: cumulative, ending at le="+Inf" == _count, and _sum the total.
  const Family& h = families.at("gpu_accel_request_duration_seconds");
  EXPECT_EQ(h.type, "histogram");
  double previous = 0, previous_le = -INFINITY;
  for (const auto& [name, smp] : h.samples) {
    if (name != "gpu_accel_request_duration_seconds_bucket") continue;
    ASSERT_EQ(smp.labels.rfind("le=\"", 0), 0u);
    const double le = parse_value(smp.labels.substr(4, smp.labels.size() - 5));
    EXPECT_GT(le, previous_le);
    EXPECT_GE(smp.value, previous);
    if (le >= 0.3 && previous_le < 0.3) {
      EXPECT_EQ(smp.value, 1);  // the 0.3 s request is in its first bucket
    }
    previous = smp.value;
    previous_le = le;
  }
  EXPECT_TRUE(std::isinf(previous_le));
  EXPECT_EQ(previous, 2);  // the 400 s request is only in +Inf
  EXPECT_EQ(value("gpu_accel_request_duration_seconds", "gpu_accel_request_duration_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(value("gpu_accel_request_duration_seconds", "gpu_accel_request_duration_seconds_sum"), 400.3);
  EXPECT_EQ(value("gpu_accel_time_to_first_token_seconds", "gpu_accel_time_to_first_token_seconds_count"), 2);
}

}  // namespace
}  // namespace ga::server
