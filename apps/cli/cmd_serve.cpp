// gpu-accel serve: an OpenAI-compatible HTTP server over one model (apps/server).
//
// Loads the model, starts a continuous-batching Scheduler and serves until SIGINT or SIGTERM. The
// signals are blocked in every thread (the mask is set before any thread starts, and threads inherit
// it) and taken by one watcher thread with sigwait(), so shutdown runs as ordinary code, not in a
// signal handler: the server stops accepting, in-flight generations are cancelled, the scheduler is
// destroyed, and the process exits 0. Binds 127.0.0.1 unless told otherwise: a model server should
// not be reachable from the network by accident. --port 0 picks a free port; the "listening on" line
// on stderr says which (tests use that).
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "gpu_accel/scheduler.h"
#include "server/api_server.h"

namespace ga::cli {

namespace {

constexpr int kMaxPort = 65535;
constexpr const char* kApiKeyEnv = "GPU_ACCEL_API_KEY";
constexpr const char* kHostAdminKeyEnv = "GPU_ACCEL_HOST_ADMIN_KEY";
constexpr double kMaxScheduleMinutes = 7 * 24 * 60;  // a week

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int64_t port = 8080;
  std::string api_key;
  int32_t max_batch = 16;
  int64_t n_ctx = 0;
  int32_t threads = 0;
  std::string device = "auto";  // the GPU when one can run the model, as users of vLLM expect
  PrecisionArgs precision;
  std::string kv_type;  // --kv-type ("": f32 on the CPU, f16 on a GPU)
  int32_t max_queue = 256;
  int64_t kv_blocks = 0;
  int64_t prompt_state_cache_mib = SchedulerOptions{}.prompt_state_cache_mib;
  int32_t http_threads = 64;
  int64_t max_body = 1 << 20;
  bool quiet = false;
  bool no_warmup = false;
  int64_t poll_us = SchedulerOptions{}.poll_us;
  int32_t first_token_poll_ms = server::ServerOptions{}.first_token_poll_ms;
  int32_t keep_alive_poll_us = server::ServerOptions{}.keep_alive_poll_us;
  bool trace_timing = false;
  int64_t prefill_graphs = SchedulerOptions{}.prefill_graph_max_tokens;
  // The host assistant (server/host_service.h).
  std::string host_model;
  std::string host_device = "cpu";  // the main model keeps the GPU; the host runs beside it
  int32_t host_threads = 0;
  int64_t host_ctx = 0;
  std::string host_admin_key;
  float host_report_every = static_cast<float>(server::HostSchedule{}.report_every_minutes);
  float host_housekeeping_every = static_cast<float>(server::HostSchedule{}.housekeeping_every_minutes);
  float host_cache_idle = static_cast<float>(server::HostSchedule{}.cached_idle_seconds);
  int64_t host_max_tokens = server::HostServiceOptions{}.max_answer_tokens;
  std::string log_file;
  int64_t log_max_bytes = static_cast<int64_t>(server::ServerLogOptions{}.max_bytes);
  int32_t log_keep = server::ServerLogOptions{}.keep;
};

// The id clients name the model by: the file or folder name ("stories260K.gguf", "Qwen2-0.5B").
std::string model_id_of(const std::string& path) {
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return p.filename().string();
}

// Stops the server on the first SIGINT/SIGTERM. The loop covers a signal that arrives before the
// server is listening (a stop() then would be forgotten by the listen that follows).
void watch_signals(const sigset_t& signals, server::ApiServer& api, const std::atomic<bool>& finished) {
  int signal_number = 0;
  if (sigwait(&signals, &signal_number) != 0) return;
  if (finished.load()) return;  // woken by main() after the server ended on its own
  std::fprintf(stderr, "received %s: shutting down\n", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  while (!finished.load()) {
    api.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  ServeArgs a;
  ArgParser parser("serve", "-m MODEL [options]",
                   "Serves MODEL over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions,\n"
                   "/v1/models), with /health, /metrics (Prometheus) and a dashboard at /. Requests are logged\n"
                   "to stderr. With --host-model, a small host model answers /v1/host/ask and writes briefs\n"
                   "(/v1/host/report) while the main work is idle. Stops on SIGINT/SIGTERM.");
  parser.option("-m,--model", &a.model, "MODEL", "a .gguf file or a Hugging Face model folder");
  parser.option("--host", &a.host, "HOST", "address to bind (0.0.0.0: every interface)");
  parser.option("--port", &a.port, "PORT", "TCP port; 0: any free port (printed)");
  parser.option("--api-key", &a.api_key, "KEY",
                std::string("require 'Authorization: Bearer KEY' (default: $") + kApiKeyEnv + ", else none)");
  parser.option("--max-batch", &a.max_batch, "N", "sequences decoded together");
  parser.option("-c,--ctx", &a.n_ctx, "N", "context per sequence in tokens; 0: the model's (capped at 4096)");
  parser.option("-t,--threads", &a.threads, "N", "CPU threads (the CPU forward, sampling); 0: all cores");
  parser.option("--device", &a.device, "DEVICE",
                "cpu, cuda (cuda:N) or auto (cuda when a GPU can run the model); the GPU keeps an f16 KV pool "
                "unless --kv-type fp8");
  add_precision_options(parser, a.precision);
  add_kv_type_option(parser, a.kv_type);
  parser.option("--max-queue", &a.max_queue, "N", "waiting requests beyond which requests get 503");
  parser.option("--kv-blocks", &a.kv_blocks, "N",
                "KV cache blocks (16 tokens each); 0: max-batch full contexts (cpu), free GPU memory (cuda)");
  parser.option("--prompt-state-cache", &a.prompt_state_cache_mib, "MIB",
                "recurrent models (RWKV): host memory for states kept after prompts, reused by a prompt that starts "
                "with the same tokens; 0: off");
  parser.option("--http-threads", &a.http_threads, "N", "connections served at once (a stream holds one)");
  parser.option("--max-body", &a.max_body, "BYTES", "largest request body; larger ones get 413");
  parser.option("--poll-us", &a.poll_us, "US",
                "when a completion request arrives, the idle scheduler thread busy-waits up to US microseconds for "
                "its submit instead of sleeping (a lone request's time to first token); 0: never; -1: " +
                    std::to_string(SchedulerOptions::kAutoPollMicroseconds) + " on a GPU, 0 on the CPU");
  parser.option("--first-token-poll-ms", &a.first_token_poll_ms, "MS",
                "a stream's thread busy-waits up to MS ms for its first token (at most 2 streams at once); 0: never; "
                "-1: " + std::to_string(server::ServerOptions::kAutoFirstTokenPollMs) + " on a GPU, 0 on the CPU");
  parser.option("--keep-alive-poll-us", &a.keep_alive_poll_us, "US",
                "a connection's thread busy-waits up to US microseconds for the connection's next request (after "
                "the accept and after each response; at most 2 connections at once) before sleeping; 0: never; -1: " +
                    std::to_string(server::ServerOptions::kAutoKeepAlivePollUs) + " on a GPU, 0 on the CPU");
  parser.flag("--trace-timing", &a.trace_timing,
              "per stream, one stderr line with the monotonic times of its head, submit, first token and its write");
  parser.option("--prefill-graphs", &a.prefill_graphs, "N",
                "CUDA: a lone prompt of 9..N tokens replays a graph captured per length bucket at the warm-up; 0: off");
  parser.option("--host-model", &a.host_model, "SMALL",
                "a small model (any supported file: RWKV, GGUF, HF folder) that runs as the host assistant: "
                "/v1/host/ask, /v1/host/report, the dashboard's Host panel; it computes only while no request "
                "is queued or running");
  parser.option("--host-device", &a.host_device, "DEVICE", "where the host model runs: cpu, cuda, cuda:N");
  parser.option("--host-threads", &a.host_threads, "N", "CPU threads of the host model; 0: all cores");
  parser.option("--host-ctx", &a.host_ctx, "N", "the host model's context; 0: its own (capped at 4096)");
  parser.option("--host-max-tokens", &a.host_max_tokens, "N", "the longest host answer in tokens");
  parser.option("--host-admin-key", &a.host_admin_key, "KEY",
                std::string("the key that may run housekeeping and change the host's schedule (default: $") +
                    kHostAdminKeyEnv + "); other keys may only ask");
  parser.option("--host-report-every", &a.host_report_every, "MIN", "a host brief every MIN minutes; 0: on request only");
  parser.option("--host-housekeeping-every", &a.host_housekeeping_every, "MIN",
                "housekeeping (idle prefix-cache blocks freed, the log rotated daily) every MIN minutes; 0: on request only");
  parser.option("--host-cache-idle", &a.host_cache_idle, "SEC",
                "housekeeping frees prefix-cache blocks unused for SEC seconds");
  parser.option("--log-file", &a.log_file, "PATH", "also append the request and engine log to PATH (rotated)");
  parser.option("--log-max-bytes", &a.log_max_bytes, "BYTES", "rotate the log file when it reaches BYTES");
  parser.option("--log-keep", &a.log_keep, "N", "rotated log files kept (PATH.1 .. PATH.N)");
  parser.flag("-q,--quiet", &a.quiet, "do not log requests");
  parser.flag("--no-warmup", &a.no_warmup, "skip the warm-up forward at start (the first request pays the device's "
              "one-time costs then)");
  if (!parser.parse(argc, argv)) return 0;
  require(parser.given("-m"), "missing -m MODEL (a .gguf file or a Hugging Face folder)");
  require(a.port >= 0 && a.port <= kMaxPort, "--port must be in [0, 65535], got " + std::to_string(a.port));
  require(a.max_batch >= 1, "--max-batch must be >= 1, got " + std::to_string(a.max_batch));
  require(a.n_ctx >= 0, "--ctx must be >= 0 (0: the model's context), got " + std::to_string(a.n_ctx));
  require(a.threads >= 0, "--threads must be >= 0 (0: all cores), got " + std::to_string(a.threads));
  require(a.device == "cpu" || a.device == "cuda" || a.device == "auto" || a.device.rfind("cuda:", 0) == 0,
          "--device must be cpu, cuda, cuda:N or auto, got '" + a.device + "'");
  require(a.max_queue >= 0, "--max-queue must be >= 0, got " + std::to_string(a.max_queue));
  require(a.kv_blocks >= 0, "--kv-blocks must be >= 0 (0: automatic), got " + std::to_string(a.kv_blocks));
  require(a.prompt_state_cache_mib >= 0 && a.prompt_state_cache_mib <= (int64_t{1} << 30),
          "--prompt-state-cache must be in [0, 2^30] MiB (0: off), got " + std::to_string(a.prompt_state_cache_mib));
  require(a.http_threads >= 1, "--http-threads must be >= 1, got " + std::to_string(a.http_threads));
  require(a.prefill_graphs >= 0, "--prefill-graphs must be >= 0 (0: off), got " + std::to_string(a.prefill_graphs));
  require(a.max_body >= 1, "--max-body must be >= 1, got " + std::to_string(a.max_body));
  require(a.poll_us >= -1 && a.poll_us <= 1000000, "--poll-us must be in [-1, 1000000], got " + std::to_string(a.poll_us));
  require(a.first_token_poll_ms >= -1 && a.first_token_poll_ms <= 1000,
          "--first-token-poll-ms must be in [-1, 1000], got " + std::to_string(a.first_token_poll_ms));
  require(a.keep_alive_poll_us >= -1 && a.keep_alive_poll_us <= 1000000,
          "--keep-alive-poll-us must be in [-1, 1000000], got " + std::to_string(a.keep_alive_poll_us));
  if (!parser.given("--api-key")) {
    if (const char* key = std::getenv(kApiKeyEnv)) a.api_key = key;
  }
  if (!parser.given("--host-admin-key")) {
    if (const char* key = std::getenv(kHostAdminKeyEnv)) a.host_admin_key = key;
  }
  const auto minutes_ok = [](float m) { return std::isfinite(m) && m >= 0 && m <= kMaxScheduleMinutes; };
  require(minutes_ok(a.host_report_every), "--host-report-every must be in [0, 10080] minutes");
  require(minutes_ok(a.host_housekeeping_every), "--host-housekeeping-every must be in [0, 10080] minutes");
  require(std::isfinite(a.host_cache_idle) && a.host_cache_idle >= 0, "--host-cache-idle must be >= 0 seconds");
  require(a.host_device == "cpu" || a.host_device == "cuda" || a.host_device.rfind("cuda:", 0) == 0,
          "--host-device must be cpu, cuda or cuda:N, got '" + a.host_device + "'");
  require(a.host_threads >= 0, "--host-threads must be >= 0 (0: all cores)");
  require(a.host_ctx >= 0, "--host-ctx must be >= 0 (0: the model's)");
  require(a.host_max_tokens >= 1, "--host-max-tokens must be >= 1");
  require(a.log_max_bytes >= 1, "--log-max-bytes must be >= 1");
  require(a.log_keep >= 0, "--log-keep must be >= 0");
  precision_options(a.precision);  // UsageError naming the option, before the model loads
  const KvType kv_type = kv_type_option(a.kv_type, a.device, KvType::F32);
  require(!a.host_admin_key.empty() || !parser.given("--host-admin-key"), "--host-admin-key must not be empty");

  // Before any thread exists (the scheduler starts some), so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const LoadedModel model = load_model_verbose(a.model, a.precision, a.device);
  const Tokenizer tokenizer(model.vocab);
  // The host's model lives beside the main one (and outlives the server that uses it); loaded before the
  // main scheduler's warm-up, so that a wrong path fails at once.
  std::optional<LoadedModel> host_model;
  std::unique_ptr<Tokenizer> host_tokenizer;
  if (!a.host_model.empty()) {
    host_model.emplace(load_model_verbose(a.host_model));
    host_tokenizer = std::make_unique<Tokenizer>(host_model->vocab);
  }
  SchedulerOptions scheduler_options;
  scheduler_options.max_running = a.max_batch;
  scheduler_options.max_queued = a.max_queue;
  scheduler_options.n_ctx = a.n_ctx;
  scheduler_options.kv_blocks = a.kv_blocks;
  scheduler_options.prompt_state_cache_mib = a.prompt_state_cache_mib;
  scheduler_options.n_threads = a.threads;
  scheduler_options.device = a.device;
  scheduler_options.kv_type = kv_type;
  scheduler_options.warm_up = !a.no_warmup;
  scheduler_options.poll_us = a.poll_us;
  scheduler_options.prefill_graph_max_tokens = a.prefill_graphs;
  Scheduler scheduler(model, tokenizer, scheduler_options);

  server::ServerOptions options;
  options.model_id = model_id_of(a.model);
  options.api_key = a.api_key;
  options.http_threads = a.http_threads;
  options.max_body_bytes = static_cast<size_t>(a.max_body);
  options.max_running = a.max_batch;
  options.log_requests = !a.quiet;
  options.first_token_poll_ms = a.first_token_poll_ms;
  options.keep_alive_poll_us = a.keep_alive_poll_us;
  options.trace_timing = a.trace_timing;
  options.host_admin_key = a.host_admin_key;
  options.log.path = a.log_file;
  options.log.max_bytes = static_cast<uint64_t>(a.log_max_bytes);
  options.log.keep = a.log_keep;
  options.host.schedule.report_every_minutes = a.host_report_every;
  options.host.schedule.housekeeping_every_minutes = a.host_housekeeping_every;
  options.host.schedule.cached_idle_seconds = a.host_cache_idle;
  options.host.max_answer_tokens = a.host_max_tokens;
  server::ApiServer api(scheduler, options);
  if (host_model) {
    server::HostAssistantOptions host_options;
    host_options.device = a.host_device;
    host_options.n_threads = a.host_threads;
    host_options.n_ctx = a.host_ctx;
    auto assistant = std::make_unique<server::HostAssistant>(*host_model, *host_tokenizer, scheduler, host_options);
    std::fprintf(stderr, "host model: %s on %s, context %lld (runs only while the main work is idle)\n",
                 model_id_of(a.host_model).c_str(), assistant->device_description().c_str(),
                 static_cast<long long>(assistant->n_ctx()));
    api.attach_host_model(std::move(assistant));
  }
  const int port = api.bind(a.host, static_cast<int>(a.port));
  const SchedulerStats stats = scheduler.stats();
  std::fprintf(stderr, "device: %s, context: %lld, batch: %d, kv blocks: %lld (%s)\n", stats.device.c_str(),
               static_cast<long long>(scheduler.n_ctx()), a.max_batch, static_cast<long long>(stats.kv_blocks_total),
               stats.kv_type.c_str());
  std::fprintf(stderr, "serving '%s'%s%s\n", options.model_id.c_str(), a.api_key.empty() ? "" : " (API key required)",
               a.host_admin_key.empty() ? "" : " (host admin key set)");
  std::fprintf(stderr, "listening on http://%s:%d\n", a.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> finished{false};
  std::thread watcher([&] { watch_signals(signals, api, finished); });
  api.run();
  finished = true;
  pthread_kill(watcher.native_handle(), SIGTERM);  // wakes sigwait if the server ended on its own
  watcher.join();
  std::fprintf(stderr, "server stopped\n");
  return 0;
}

}  // namespace ga::cli
