// gpu-accel bench-serve: continuous-batching throughput and time to first token, in process.
//
// What it answers: with N concurrent streaming clients, how many tokens per second does
// the Scheduler generate in aggregate, against one client; and how long does a lone client wait for
// its first token, against a plain Session prefill of the same prompt (what `gpu-accel run` does).
//
// Method. First the references, on a Session on the same device: the prefill of one prompt (one
// eval, median of kRefRepetitions on a reset session) and the single-sequence decode rate (the
// CUDA-graph decode on a GPU; max_tokens steps after the prompt). The Session is destroyed before
// the Scheduler starts, so both get the device memory they would get alone. Then one Scheduler
// (max_running = the largest client count) serves one warm-up request and, per client count N, N
// requests submitted at once: distinct random prompts (seeded per round and client, so no round
// reuses another's prefix blocks), greedy, EOS ignored, exactly max_tokens tokens each; the token
// callback only timestamps (it is what a streaming HTTP handler's copy costs, minus the socket).
// Per round: aggregate tok/s = all generated tokens / (last done - submit), steady decode tok/s =
// tokens generated after the last first-token / the time after it (every client decoding), and
// time to first token (mean, max). No HTTP: the client side is in process (see the results file
// for why), so these figures are the engine's, without socket and JSON costs. Each round also
// reports the scheduler thread's time per step (SchedulerStats) split into the forward pass and
// sampling; --profile-steps times the batched CUDA forward alone on decode steps, so the
// scheduler's own overhead is the difference.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "backends/cuda/cuda_forward.h"
#include "cli_common.h"
#include "commands.h"
#include "core/env.h"
#include "gpu_accel/error.h"
#include "gpu_accel/scheduler.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"
#include "model/arch/architecture.h"
#include "runtime/engine/batch_backend.h"
#include "runtime/telemetry/nvml_monitor.h"

namespace ga::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kRefRepetitions = 3;
constexpr auto kIdleGap = std::chrono::milliseconds(20);
constexpr auto kWakeSpin = std::chrono::microseconds(300);
constexpr int kIdleRepetitions = 7;

void busy_wait(std::chrono::steady_clock::duration d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}
constexpr int kMaxClients = 4096;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    int v = 0;
    try {
      v = std::stoi(item);
    } catch (const std::exception&) {
      v = 0;
    }
    require(v >= 1 && v <= kMaxClients, "--clients takes counts in [1, 4096] separated by commas, got '" + text + "'");
    out.push_back(v);
  }
  require(!out.empty(), "--clients needs at least one count");
  return out;
}

// A prompt of n ids drawn from the vocabulary (BOS first when the model has one), seeded.
std::vector<int32_t> random_prompt(const Tokenizer& tok, int64_t n_vocab, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, static_cast<int32_t>(n_vocab - 1));  // skip the usual specials
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t& t : p) t = id(rng);
  if (tok.bos() >= 0) p[0] = tok.bos();
  return p;
}

struct ReferenceFigures {
  double prefill_seconds = 0;  // median, back to back
  double idle_prefill_seconds = 0;  // median, each after kIdleGap without GPU work (a lone request's case)
  // Where the idle prefill's extra time comes from (medians, each after kIdleGap without GPU work): the
  // calling thread busy the whole gap (a host that stayed awake), asleep then busy for kWakeSpin (what the
  // server's busy-wait on a request's arrival gives), asleep then one decode step on the GPU just before.
  double idle_spinning_prefill_seconds = 0;
  double idle_then_spin_prefill_seconds = 0;
  double idle_then_step_prefill_seconds = 0;
  double decode_tok_s = 0;
  std::string device;
};

// GA_PREFILL_GPU_TIMING=1 (the CUDA forward then times each prefill replay on the GPU, one stderr line each): the
// reference's phases are named on stderr too, and one more phase reads the SM clock (NVML) after each idle pause
// and right after the prefill that follows it (is the idle prefill's extra time the GPU's or the host's?).
bool gpu_timing_diagnostic() { return env_flag("GA_PREFILL_GPU_TIMING"); }

void phase(const char* name) {
  if (gpu_timing_diagnostic()) std::fprintf(stderr, "reference phase: %s\n", name);
}

ReferenceFigures measure_reference(const LoadedModel& model, const std::string& device, KvType kv_type,
                                   int64_t n_ctx,
                                   const std::vector<int32_t>& prompt, int64_t decode_steps) {
  SessionOptions so;
  so.device = device;
  so.n_ctx = n_ctx;
  so.kv_type = kv_type;
  Session session(model, so);
  ReferenceFigures r;
  r.device = session.device_description();
  std::vector<double> times;
  std::vector<float> logits;
  phase("back to back (the first one warms up)");
  for (int i = 0; i <= kRefRepetitions; ++i) {  // the first one warms up (cuBLAS, allocator)
    session.reset();
    const auto t0 = Clock::now();
    logits = session.eval(prompt);
    if (i > 0) times.push_back(seconds(t0, Clock::now()));
  }
  std::sort(times.begin(), times.end());
  r.prefill_seconds = times[times.size() / 2];
  // A lone request finds the GPU idle (and `gpu-accel run` prefills once, after the upload): the same
  // prefill after a pause, which may find the GPU's clocks lowered.
  // Each pause is followed by the timed prefill of the reset session.
  const auto after_pause = [&](const auto& pause) {
    times.clear();
    for (int i = 0; i < kIdleRepetitions; ++i) {
      session.reset();
      pause();
      session.reset();
      const auto t0 = Clock::now();
      logits = session.eval(prompt);
      times.push_back(seconds(t0, Clock::now()));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  phase("after 20 ms asleep");
  r.idle_prefill_seconds = after_pause([] { std::this_thread::sleep_for(kIdleGap); });
  phase("thread busy-waiting through 20 ms");
  r.idle_spinning_prefill_seconds = after_pause([] { busy_wait(kIdleGap); });
  phase("asleep, then busy");
  r.idle_then_spin_prefill_seconds = after_pause([] {
    std::this_thread::sleep_for(kIdleGap);
    busy_wait(kWakeSpin);
  });
  phase("asleep, then one decode step");
  r.idle_then_step_prefill_seconds = after_pause([&] {
    std::this_thread::sleep_for(kIdleGap);
    session.eval(std::vector<int32_t>{prompt[0]});  // one token's forward: the GPU and the host both work
  });
  if (gpu_timing_diagnostic()) {
    phase("after 20 ms asleep, SM clock read before and after (NVML)");
    telemetry::NvmlMonitor nvml;
    const int gpu = std::max(engine::cuda_device_index(device), 0);
    const auto sm_clock = [&] {
      const std::optional<telemetry::GpuSnapshot> g = nvml.sample(gpu);
      return g && g->sm_clock_mhz ? static_cast<int>(*g->sm_clock_mhz) : -1;
    };
    for (int i = 0; i < kIdleRepetitions; ++i) {
      session.reset();
      std::this_thread::sleep_for(kIdleGap);
      const int idle_mhz = sm_clock();
      const auto t0 = Clock::now();
      logits = session.eval(prompt);
      const double t = seconds(t0, Clock::now());
      const int busy_mhz = sm_clock();
      std::fprintf(stderr, "idle SM clock %d MHz, prefill %.4f ms, SM clock after it %d MHz%s\n", idle_mhz, t * 1e3,
                   busy_mhz, nvml.available() ? "" : (" (NVML: " + nvml.reason() + ")").c_str());
    }
  }
  phase("the reference's decode steps, then the rounds (the Scheduler's batched forward)");
  int32_t next = argmax(logits);
  session.eval(std::vector<int32_t>{next});  // the graph capture is not timed
  const auto t0 = Clock::now();
  for (int64_t i = 1; i < decode_steps; ++i) next = argmax(session.eval(std::vector<int32_t>{next}));
  r.decode_tok_s = static_cast<double>(decode_steps - 1) / seconds(t0, Clock::now());
  return r;
}

struct RoundFigures {
  int clients = 0;
  int64_t tokens = 0;
  double wall = 0;
  double aggregate_tok_s = 0;
  double steady_tok_s = 0;
  double ttft_mean = 0, ttft_max = 0;
  int failed = 0;
  // scheduler thread, per step with a forward pass (SchedulerStats deltas over the round)
  uint64_t steps = 0;
  double step_ms = 0, forward_ms = 0, sample_ms = 0;
};

// N requests at once; waits for all of them.
RoundFigures run_round(Scheduler& sched, const Tokenizer& tok, int clients, int64_t prompt_tokens, int64_t max_tokens,
                       uint64_t seed) {
  struct Client {
    Clock::time_point first, done;
    bool has_first = false;
    int64_t tokens = 0;
    bool failed = false;
  };
  std::vector<Client> c(static_cast<size_t>(clients));
  const SchedulerStats before = sched.stats();
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<std::vector<Clock::time_point>> stamps(static_cast<size_t>(clients));
  const auto start = Clock::now();
  for (int i = 0; i < clients; ++i) {
    CompletionRequest req;
    req.prompt_tokens = random_prompt(tok, sched.model().config.n_vocab, prompt_tokens, seed + static_cast<uint64_t>(i));
    req.max_tokens = max_tokens;
    req.ignore_eos = true;
    req.sampling.temperature = 0.0f;
    stamps[static_cast<size_t>(i)].reserve(static_cast<size_t>(max_tokens));
    sched.submit(
        std::move(req),
        [&, i](const TokenEvent& e) {
          if (e.token >= 0) stamps[static_cast<size_t>(i)].push_back(Clock::now());  // scheduler thread only
          return true;
        },
        [&, i](const CompletionResult& res, std::exception_ptr error) {
          std::lock_guard<std::mutex> lock(mu);
          Client& cl = c[static_cast<size_t>(i)];
          cl.done = Clock::now();
          cl.tokens = res.completion_tokens;
          cl.failed = error != nullptr || res.finish != FinishReason::Length;
          ++finished;
          cv.notify_all();
        });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return finished == clients; });
  }
  SchedulerStats after = sched.stats();  // published after the step that finished the last request
  for (int i = 0; i < 1000 && (after.running > 0 || after.queued > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    after = sched.stats();
  }
  RoundFigures f;
  f.clients = clients;
  f.steps = after.steps - before.steps;
  if (f.steps > 0) {
    const double per_step = 1e3 / static_cast<double>(f.steps);
    f.step_ms = (after.step_seconds - before.step_seconds) * per_step;
    f.forward_ms = (after.forward_seconds - before.forward_seconds) * per_step;
    f.sample_ms = (after.sample_seconds - before.sample_seconds) * per_step;
  }
  Clock::time_point last_done = start, last_first = start;
  for (int i = 0; i < clients; ++i) {
    Client& cl = c[static_cast<size_t>(i)];
    const std::vector<Clock::time_point>& st = stamps[static_cast<size_t>(i)];
    f.tokens += cl.tokens;
    f.failed += cl.failed ? 1 : 0;
    last_done = std::max(last_done, cl.done);
    if (!st.empty()) {
      const double ttft = seconds(start, st.front());
      f.ttft_mean += ttft / clients;
      f.ttft_max = std::max(f.ttft_max, ttft);
      last_first = std::max(last_first, st.front());
    }
  }
  int64_t steady_tokens = 0;
  for (const auto& st : stamps) {
    for (const Clock::time_point& t : st) steady_tokens += t > last_first ? 1 : 0;
  }
  f.wall = seconds(start, last_done);
  f.aggregate_tok_s = static_cast<double>(f.tokens) / f.wall;
  const double steady_span = seconds(last_first, last_done);
  f.steady_tok_s = steady_span > 0 ? static_cast<double>(steady_tokens) / steady_span : 0.0;
  return f;
}

constexpr int kProfileWarmup = 3, kProfileTimed = 20;

// A batched CUDA forward of its own (not the scheduler's) with max_n sequences of n_ctx positions in
// 16-position blocks, and their block tables.
struct ProfileForward {
  std::unique_ptr<cuda::CudaBatchForward> fwd;
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::span<const int32_t>> spans;

  ProfileForward(const LoadedModel& model, int device, int max_n, int64_t n_ctx, bool graphs) {
    const int64_t bs = 16, per_seq = (n_ctx + bs - 1) / bs;
    cuda::CudaBatchForwardParams p;
    p.device = device;
    p.block_size = bs;
    p.n_blocks = max_n * per_seq;
    p.max_batch_tokens = std::max<int64_t>(512, std::max<int64_t>(max_n, n_ctx));
    p.max_seqs = max_n;
    p.max_seq_positions = n_ctx;
    p.use_cuda_graph = graphs;
    fwd = cuda::make_cuda_batch_forward(model, *arch::make_program_factory(model), p);
    tables.resize(static_cast<size_t>(max_n));
    for (int s = 0; s < max_n; ++s) {
      for (int64_t b = 0; b < per_seq; ++b) tables[static_cast<size_t>(s)].push_back(static_cast<int32_t>(s * per_seq + b));
      spans.emplace_back(tables[static_cast<size_t>(s)]);
    }
  }
};

// Median ms of forward() (device work + the logits rows' copy to the host).
double median_forward_ms(cuda::CudaBatchForward& fwd, const std::vector<cuda::BatchEntry>& batch,
                         std::span<const std::span<const int32_t>> tables) {
  std::vector<double> ms;
  for (int i = 0; i < kProfileWarmup + kProfileTimed; ++i) {
    const auto t0 = Clock::now();
    fwd.forward(batch, tables);
    if (i >= kProfileWarmup) ms.push_back(seconds(t0, Clock::now()) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The prompt's prefill through the batched forward alone (one sequence, the last row's logits to the
// host), what the scheduler's first step for a lone request runs: the 1-client TTFT minus this is the
// scheduler's own cost (wake-up, admission, sampling, the callback), this minus the Session prefill is
// the paged path's.
void profile_prefill(const LoadedModel& model, int device, const std::vector<int32_t>& prompt, int64_t n_ctx,
                     double session_prefill_ms, double one_client_ttft_ms) {
  const ProfileForward pf(model, device, 1, n_ctx, true);
  std::vector<cuda::BatchEntry> batch;
  const int64_t n = static_cast<int64_t>(prompt.size());
  for (int64_t t = 0; t < n; ++t) batch.push_back(cuda::BatchEntry{prompt[static_cast<size_t>(t)], t, 0, t == n - 1});
  const double m = median_forward_ms(*pf.fwd, batch, pf.spans);
  std::printf("\nprefill of the %lld-token prompt through the batched forward alone (median of %d): %.3f ms; "
              "Session prefill %.3f ms, 1-client TTFT %.3f ms: paged path %+.3f ms, scheduler %+.3f ms\n",
              static_cast<long long>(n), kProfileTimed, m, session_prefill_ms, one_client_ttft_ms,
              m - session_prefill_ms, one_client_ttft_ms - m);
}

// The batched CUDA forward alone on decode steps of n one-token runs (no scheduler): median ms per
// forward() (device work + logits copy) with and without the decode graphs, at position `pos` of
// every sequence. What the scheduler adds per step is its row's ms/step minus this.
void profile_decode_steps(const LoadedModel& model, int device, const std::vector<int>& counts, int64_t n_ctx,
                          int64_t pos) {
  const int max_n = *std::max_element(counts.begin(), counts.end());
  std::printf("\ndecode step of the batched CUDA forward alone (position %lld of every sequence, median of %d):\n\n"
              "| batch | graphs | ms/step | tok/s | weight GB/s |\n|---|---|---:|---:|---:|\n",
              static_cast<long long>(pos), kProfileTimed);
  for (const bool graphs : {true, false}) {
    const ProfileForward pf(model, device, max_n, n_ctx, graphs);
    const std::unique_ptr<cuda::CudaBatchForward>& fwd = pf.fwd;
    const std::vector<std::span<const int32_t>>& spans = pf.spans;
    // n one-token runs (decode), then one run of n tokens with one logits row: the same matrices,
    // another attention, no graph; the difference points at the attention or the graph.
    std::vector<std::pair<int, bool>> shapes;
    for (const int n : counts) shapes.emplace_back(n, true);
    if (graphs) {
      for (const int n : counts) shapes.emplace_back(n, false);
    }
    for (const auto& [n, decode] : shapes) {
      std::vector<cuda::BatchEntry> batch;
      for (int s = 0; s < n; ++s) {
        batch.push_back(decode ? cuda::BatchEntry{1 + s, pos, s, true} : cuda::BatchEntry{1 + s, s, 0, s == n - 1});
      }
      const double m = median_forward_ms(*fwd, batch, spans);
      std::printf("| %d %s | %s | %.3f | %.1f | %.1f |\n", n, decode ? "x 1 token" : "tokens, 1 run", graphs ? "on" : "off",
                  m, n / m * 1e3, static_cast<double>(model.weight_bytes()) / (m * 1e-3) / 1e9);
    }
  }
}

}  // namespace

int cmd_bench_serve(int argc, char** argv) {
  std::string model_path, clients_text = "1,16,64", device = "auto";
  int64_t prompt_tokens = 128, max_tokens = 128, n_ctx = 0, max_batch_tokens = 512;
  int32_t threads = 0;
  bool skip_reference = false, no_graphs = false, profile_steps = false, host_sampling = false;
  PrecisionArgs precision;
  std::string kv_type_text;
  ArgParser parser("bench-serve", "-m MODEL [--clients 1,16,64] [--prompt-tokens N] [--max-tokens N] [--device D]",
                   "Drives the continuous-batching Scheduler with N concurrent streaming requests in process and "
                   "reports aggregate generation tok/s and time to first token, against a plain Session prefill "
                   "and decode of the same prompt on the same device.");
  parser.option("-m,--model", &model_path, "MODEL", "a .gguf file or a Hugging Face model folder");
  parser.option("--clients", &clients_text, "N,N,...", "concurrent client counts, one round each");
  parser.option("--prompt-tokens", &prompt_tokens, "N", "prompt length of every request");
  parser.option("--max-tokens", &max_tokens, "N", "tokens generated by every request (EOS ignored)");
  parser.option("--device", &device, "DEVICE", "cpu, cuda (cuda:N) or auto");
  add_precision_options(parser, precision);
  add_kv_type_option(parser, kv_type_text);
  parser.option("-c,--ctx", &n_ctx, "N", "context per sequence; 0: prompt + max tokens");
  parser.option("--max-batch-tokens", &max_batch_tokens, "N", "tokens per scheduler step");
  parser.option("-t,--threads", &threads, "N", "CPU threads; 0: all cores");
  parser.flag("--no-reference", &skip_reference, "skip the Session prefill/decode reference");
  parser.flag("--profile-steps", &profile_steps,
              "CUDA: also time the batched forward alone on the prompt's prefill and on decode steps");
  parser.flag("--no-cuda-graphs", &no_graphs, "CUDA: enqueue every step (no decode graphs), for comparison");
  parser.flag("--host-sampling", &host_sampling, "CUDA: copy the logits rows to the host and sample there (comparison)");
  if (!parser.parse(argc, argv)) return 0;
  require(parser.given("-m"), "missing -m MODEL");
  require(prompt_tokens >= 1 && max_tokens >= 2, "--prompt-tokens must be >= 1 and --max-tokens >= 2");
  precision_options(precision);
  const KvType kv_type = kv_type_option(kv_type_text, device, KvType::F16);
  const std::vector<int> counts = parse_counts(clients_text);
  const int max_clients = *std::max_element(counts.begin(), counts.end());
  if (n_ctx == 0) n_ctx = prompt_tokens + max_tokens;
  require(n_ctx >= prompt_tokens + max_tokens, "--ctx must hold prompt + max tokens");
  max_batch_tokens = std::max<int64_t>(max_batch_tokens, max_clients);

  const LoadedModel model = load_model_verbose(model_path, precision, device);
  const Tokenizer tokenizer(model.vocab);
  const std::vector<int32_t> ref_prompt = random_prompt(tokenizer, model.config.n_vocab, prompt_tokens, 1);

  ReferenceFigures ref;
  if (!skip_reference) {
    ref = measure_reference(model, device, kv_type, n_ctx, ref_prompt, max_tokens);
    std::fprintf(stderr, "reference session: %s\n", ref.device.c_str());
  }

  SchedulerOptions so;
  so.max_running = max_clients;
  so.max_queued = kMaxClients;
  so.n_ctx = n_ctx;
  so.max_batch_tokens = max_batch_tokens;
  so.n_threads = threads;
  so.device = device;
  so.kv_type = kv_type;
  so.cuda_graphs = !no_graphs;
  so.gpu_sampling = !host_sampling;
  Scheduler sched(model, tokenizer, so);
  const SchedulerStats s0 = sched.stats();
  std::fprintf(stderr, "scheduler: device %s, %lld KV blocks (%s), max_running %d, max_batch_tokens %lld\n",
               s0.device.c_str(), static_cast<long long>(s0.kv_blocks_total), s0.kv_type.c_str(), max_clients,
               static_cast<long long>(max_batch_tokens));
  run_round(sched, tokenizer, 1, prompt_tokens, std::min<int64_t>(max_tokens, 8), 7);  // warm-up

  std::vector<RoundFigures> rounds;
  for (size_t r = 0; r < counts.size(); ++r) {
    rounds.push_back(run_round(sched, tokenizer, counts[r], prompt_tokens, max_tokens, 1000 * (r + 1)));
    const RoundFigures& f = rounds.back();
    std::fprintf(stderr, "clients %d: %lld tokens in %.3f s\n", f.clients, static_cast<long long>(f.tokens), f.wall);
  }

  std::printf("## bench-serve: %s, device %s%s, prompt %lld tokens, %lld generated per client\n\n",
              model_path.c_str(), s0.device.c_str(),
              (std::string(no_graphs ? " (no CUDA graphs)" : "") + (host_sampling ? " (host sampling)" : "")).c_str(),
              static_cast<long long>(prompt_tokens), static_cast<long long>(max_tokens));
  if (!skip_reference) {
    std::printf("reference Session (%s): prefill %.2f ms (%.0f tok/s), decode %.1f tok/s\n", ref.device.c_str(),
                ref.prefill_seconds * 1e3, static_cast<double>(prompt_tokens) / ref.prefill_seconds, ref.decode_tok_s);
    std::printf("reference Session prefill after %lld ms idle: %.2f ms\n", static_cast<long long>(kIdleGap.count()),
                ref.idle_prefill_seconds * 1e3);
    std::printf("idle prefill, where the extra time is (median of %d each): the thread busy-waiting through the gap "
                "(GPU idle) %.3f ms; asleep, then %lld us busy %.3f ms; asleep, then one decode step %.3f ms\n\n",
                kIdleRepetitions, ref.idle_spinning_prefill_seconds * 1e3,
                static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(kWakeSpin).count()),
                ref.idle_then_spin_prefill_seconds * 1e3, ref.idle_then_step_prefill_seconds * 1e3);
  }
  std::printf("| clients | generated | wall s | aggregate tok/s | steady decode tok/s | TTFT mean ms | TTFT max ms | "
              "failed | steps | ms/step | forward ms | sample ms |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
              "---:|\n");
  for (const RoundFigures& f : rounds) {
    std::printf("| %d | %lld | %.3f | %.1f | %.1f | %.2f | %.2f | %d | %llu | %.3f | %.3f | %.3f |\n", f.clients,
                static_cast<long long>(f.tokens), f.wall, f.aggregate_tok_s, f.steady_tok_s, f.ttft_mean * 1e3,
                f.ttft_max * 1e3, f.failed, static_cast<unsigned long long>(f.steps), f.step_ms, f.forward_ms,
                f.sample_ms);
  }
  const auto one = std::find_if(rounds.begin(), rounds.end(), [](const RoundFigures& f) { return f.clients == 1; });
  if (one != rounds.end()) {
    std::printf("\n");
    for (const RoundFigures& f : rounds) {
      if (f.clients == 1) continue;
      std::printf("aggregate %d clients / 1 client (scheduler): %.2fx", f.clients, f.aggregate_tok_s / one->aggregate_tok_s);
      if (!skip_reference) std::printf(", / Session decode: %.2fx", f.aggregate_tok_s / ref.decode_tok_s);
      std::printf("\n");
    }
    if (!skip_reference) {
      std::printf("TTFT 1 client / Session prefill: %.3f (%.2f ms vs %.2f ms); / prefill after idle: %.3f\n",
                  one->ttft_mean / ref.prefill_seconds, one->ttft_mean * 1e3, ref.prefill_seconds * 1e3,
                  one->ttft_mean / ref.idle_prefill_seconds);
    }
  }
  const int gpu = engine::cuda_device_index(s0.device);  // the scheduler is idle now; its memory stays
  if (gpu >= 0 && profile_steps) {
    if (one != rounds.end() && !skip_reference) {
      profile_prefill(model, gpu, ref_prompt, n_ctx, ref.prefill_seconds * 1e3, one->ttft_mean * 1e3);
    }
    profile_decode_steps(model, gpu, counts, n_ctx, prompt_tokens + max_tokens / 2);
  }
  int failed = 0;
  for (const RoundFigures& f : rounds) failed += f.failed;
  return failed == 0 ? 0 : 1;
}

}  // namespace ga::cli
