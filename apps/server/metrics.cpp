// See metrics.h.
#include "server/metrics.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace ga::server {

namespace {

// Seconds. Completions on a CPU run from tens of milliseconds to minutes.
const std::vector<double> kDurationBuckets = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
const std::vector<double> kTtftBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

constexpr const char* kPrefix = "gpu_accel_";

class Writer {
 public:
  void family(const std::string& name, const char* type, const char* help) {
    os_ << "# HELP " << kPrefix << name << ' ' << help << '\n' << "# TYPE " << kPrefix << name << ' ' << type << '\n';
  }
  void sample(const std::string& name, double value, const std::string& labels = {}) {
    os_ << kPrefix << name;
    if (!labels.empty()) os_ << '{' << labels << '}';
    os_ << ' ' << prometheus_number(value) << '\n';
  }
  void single(const std::string& name, const char* type, const char* help, double value) {
    family(name, type, help);
    sample(name, value);
  }
  void histogram(const std::string& name, const char* help, const Histogram& h) {
    family(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.counts().size(); ++i) {
      cumulative += h.counts()[i];
      const double le = i < h.upper_bounds().size() ? h.upper_bounds()[i] : INFINITY;
      sample(name + "_bucket", static_cast<double>(cumulative), "le=\"" + prometheus_number(le) + "\"");
    }
    sample(name + "_sum", h.sum());
    sample(name + "_count", static_cast<double>(h.count()));
  }
  std::string text() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;  // le: a value equal to a bound falls in it
  ++counts_[i];
  sum_ += value;
  ++count_;
}

ServerMetrics::ServerMetrics() : data_{{}, Histogram(kDurationBuckets), Histogram(kTtftBuckets)} {}

void ServerMetrics::record_response(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++data_.responses_by_status[status];
}

void ServerMetrics::record_completion(double total_seconds, double time_to_first_token_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  data_.request_duration.observe(total_seconds);
  data_.time_to_first_token.observe(time_to_first_token_seconds);
}

ServerMetrics::Snapshot ServerMetrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return data_;
}

std::string prometheus_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);  // shortest round-trip form
  return std::string(buffer, result.ptr);
}

std::string prometheus_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string render_prometheus(const ServerMetrics::Snapshot& http, const SchedulerStats& s, int max_running,
                              const HostMetrics* host, const ModelLabels* model) {
  Writer w;
  if (model != nullptr) {
    w.family("model_info", "gauge", "The served model: its name, architecture and the precision its weights run in.");
    w.sample("model_info", 1.0,
             "model=\"" + prometheus_label_value(model->name) + "\",architecture=\"" +
                 prometheus_label_value(model->architecture) + "\",precision=\"" +
                 prometheus_label_value(model->precision) + "\"");
  }
  w.family("http_requests_total", "counter", "HTTP requests answered, by status code.");
  for (const auto& [status, n] : http.responses_by_status) {
    w.sample("http_requests_total", static_cast<double>(n), "status=\"" + std::to_string(status) + "\"");
  }
  const auto d = [](uint64_t v) { return static_cast<double>(v); };
  w.single("requests_finished_total", "counter", "Completion requests the scheduler finished.", d(s.requests_finished));
  w.single("requests_cancelled_total", "counter", "Completion requests cancelled (client gone, shutdown).",
           d(s.requests_cancelled));
  w.single("prompt_tokens_total", "counter", "Prompt tokens processed.", d(s.prompt_tokens_total));
  w.single("generated_tokens_total", "counter", "Tokens generated.", d(s.generated_tokens_total));
  w.single("requests_running", "gauge", "Sequences in the running batch.", s.running);
  w.single("requests_queued", "gauge", "Requests waiting for a batch slot or KV blocks.", s.queued);
  w.single("max_running", "gauge", "Batch size limit (sequences decoded together).", max_running);
  w.single("kv_blocks_used", "gauge", "KV cache blocks in use.", static_cast<double>(s.kv_blocks_used));
  w.single("kv_blocks_cached", "gauge", "KV cache blocks held only by the prefix cache (reusable).",
           static_cast<double>(s.kv_blocks_cached));
  w.single("prompt_states_cached", "gauge", "Recurrent models: prompt states kept for reuse (prompt-state cache).",
           static_cast<double>(s.prompt_states));
  w.single("prompt_state_cache_hits_total", "counter", "Recurrent models: prompts that started from a kept state.",
           d(s.prompt_state_hits));
  w.single("kv_blocks_total", "gauge", "KV cache blocks in the pool.", static_cast<double>(s.kv_blocks_total));
  w.single("prompt_tokens_per_second", "gauge", "Prompt processing throughput over a recent window.",
           s.prompt_tokens_per_second);
  w.single("generation_tokens_per_second", "gauge", "Generation throughput over a recent window.",
           s.generation_tokens_per_second);
  w.single("model_weight_bytes", "gauge", "Bytes of model weights.", d(s.weight_bytes));
  w.histogram("request_duration_seconds", "Completion request latency, submit to last token.", http.request_duration);
  w.histogram("time_to_first_token_seconds", "Completion request time to the first token.", http.time_to_first_token);
  if (host) {
    w.single("host_steps_total", "counter", "Host assistant steps (a prompt chunk or a token), run only while idle.",
             d(host->steps));
    w.single("host_pauses_total", "counter", "Times a host job paused for main work.", d(host->pauses));
    w.family("host_jobs_total", "counter", "Host jobs (answers, brief summaries) ended, by result.");
    w.sample("host_jobs_total", d(host->jobs_finished), "result=\"finished\"");
    w.sample("host_jobs_total", d(host->jobs_cancelled), "result=\"cancelled\"");
    w.single("host_jobs_queued", "gauge", "Host jobs waiting.", host->queued);
    w.single("host_paused", "gauge", "1 while a host job waits for the main work to finish.", host->paused ? 1 : 0);
  }
  return w.text();
}

}  // namespace ga::server
