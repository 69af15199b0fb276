// gpu-accel bench: prompt processing (pp) and token generation (tg) throughput, like llama-bench,
// quoted against ceilings measured in the same run.
//
// Method: for each thread count, the device's ceilings are measured first (CPU: memcpy bandwidth,
// read + written bytes; dense float32 matmul FLOP/s through our own cpu::matmul, our kernel's peak).
// Then, per model, r repetitions of
//   pp: a prompt of p tokens in ONE eval on a fresh session (the batched prefill path);
//   tg: a short prompt (not timed), then n single-token decode steps (each feeds back the argmax).
// tok/s is reported as mean ± sample stddev over the repetitions; achieved GB/s = weight bytes read
// per token x tg tok/s, TFLOP/s = 2 x matmul parameters x pp tok/s. The token embedding is a lookup
// (one row read per token, no FLOPs), so it counts neither as matmul parameters nor as bytes read
// unless it is tied to the output. Results go to stdout as markdown; logs go to stderr.
//
// Devices are behind BenchDevice: the CPU reference backend and CUDA (ceilings: device-to-device copy
// and a cuBLAS f16 GEMM at 8192^3; one Session per model kept across repetitions and reset, since
// uploading a 7B model takes seconds; eval() returns after the device finished, so wall-clock
// time around it is the device time plus the small launch/copy overhead a user also sees).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "backends/cuda/cuda_forward.h"
#include "gpu_accel/device.h"
#include "gpu_accel/error.h"
#include "gpu_accel/session.h"
#include "model/tools/cpu_ceilings.h"

namespace ga::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kTgPromptTokens = 8;  // the short prompt before the timed decode steps
constexpr double kGB = 1e9;
constexpr double kTFLOP = 1e12;

struct Ceilings {
  double bytes_per_s = 0.0;  // copy bandwidth, read + written
  double flops_per_s = 0.0;
  std::string bandwidth_method, flops_method;
};

// The timed regions every device shares, so pp and tg mean the same thing on each:
// one eval of the whole prompt; and n_steps single-token evals after an untimed eval of the prompt,
// each feeding back the argmax of the previous logits.
double time_prompt_eval(Session& session, const std::vector<int32_t>& prompt) {
  const auto t0 = Clock::now();
  session.eval(prompt);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double time_greedy_steps(Session& session, const std::vector<int32_t>& prompt, int64_t n_steps) {
  std::vector<float> logits = session.eval(prompt);
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n_steps; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    logits = session.eval(std::span<const int32_t>(&next, 1));
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One device's timing path. Times are seconds of the measured region only.
class BenchDevice {
 public:
  virtual ~BenchDevice() = default;
  virtual std::string name() const = 0;
  virtual Ceilings measure_ceilings() = 0;
  // One eval of n_tokens on a fresh session.
  virtual double time_prefill(const LoadedModel& model, const std::vector<int32_t>& prompt) = 0;
  // n_steps single-token evals after the (untimed) prompt.
  virtual double time_decode(const LoadedModel& model, const std::vector<int32_t>& prompt, int64_t n_steps) = 0;
  // The model is about to be destroyed: drop anything that refers to it.
  virtual void release_model() {}
};

class CpuBenchDevice : public BenchDevice {
 public:
  CpuBenchDevice(int n_threads, KvType kv_type) : n_threads_(n_threads), kv_type_(kv_type) {}
  std::string name() const override { return "cpu"; }

  Ceilings measure_ceilings() override {
    ThreadPool pool(n_threads_);
    const tools::CpuCeilings c = tools::measure_cpu_ceilings(pool);
    Ceilings out;
    out.bytes_per_s = c.copy_bytes_per_s;
    out.flops_per_s = c.matmul_flops_per_s;
    out.bandwidth_method = str("memcpy of ", c.copy_buffer_bytes >> 20, " MiB, read + written, best of 5");
    out.flops_method = str("F32 matmul through our cpu::matmul, M=", c.matmul_m, " N=", c.matmul_n, " K=", c.matmul_k,
                           ", best of 3 (our kernel's peak, not the hardware's)");
    return out;
  }

  double time_prefill(const LoadedModel& model, const std::vector<int32_t>& prompt) override {
    Session session(model, options(static_cast<int64_t>(prompt.size())));
    return time_prompt_eval(session, prompt);
  }

  double time_decode(const LoadedModel& model, const std::vector<int32_t>& prompt, int64_t n_steps) override {
    Session session(model, options(static_cast<int64_t>(prompt.size()) + n_steps));
    return time_greedy_steps(session, prompt, n_steps);
  }

 private:
  SessionOptions options(int64_t n_ctx) const {
    SessionOptions o;
    o.n_ctx = n_ctx;
    o.n_threads = n_threads_;
    o.kv_type = kv_type_;  // f16 by default: llama-bench's default cache type
    o.device = "cpu";
    return o;
  }
  int n_threads_;
  KvType kv_type_;
};

class CudaBenchDevice : public BenchDevice {
 public:
  explicit CudaBenchDevice(KvType kv_type) : kv_type_(kv_type) {
    if (cuda_device_count() == 0) {
      const std::string why = cuda_device_summary();
      GA_CHECK(why != "no CUDA", Unsupported, "--device cuda: the CUDA backend is not available in this build");
      GA_THROW(Unsupported, "--device cuda: ", why);
    }
  }
  std::string name() const override { return "cuda"; }

  Ceilings measure_ceilings() override {
    const cuda::CudaCeilings c = cuda::measure_cuda_ceilings(0);
    GA_LOG(Info, "bench: ", c.device_name);
    Ceilings out;
    out.bytes_per_s = c.copy_gbps * kGB;
    out.flops_per_s = c.gemm_tflops * kTFLOP;
    out.bandwidth_method = str(c.device_name, ": cudaMemcpy device-to-device of 1 GiB, read + written, best of 3");
    out.flops_method = str("cuBLAS f16 GEMM, f32 accumulate, M=N=K=", c.gemm_size, ", best of 3");
    return out;
  }

  double time_prefill(const LoadedModel& model, const std::vector<int32_t>& prompt) override {
    Session& session = session_for(model, static_cast<int64_t>(prompt.size()));
    session.reset();
    return time_prompt_eval(session, prompt);
  }

  double time_decode(const LoadedModel& model, const std::vector<int32_t>& prompt, int64_t n_steps) override {
    Session& session = session_for(model, static_cast<int64_t>(prompt.size()) + n_steps);
    session.reset();
    return time_greedy_steps(session, prompt, n_steps);
  }

  void release_model() override {
    session_.reset();
    model_ = nullptr;
  }

 private:
  // One session per model, rebuilt only when a test needs a longer context than it has.
  Session& session_for(const LoadedModel& model, int64_t n_ctx) {
    if (session_ == nullptr || model_ != &model || session_->n_ctx() < n_ctx) {
      session_.reset();  // free the device memory before the new upload
      SessionOptions o;
      o.n_ctx = std::max<int64_t>(n_ctx, kMinContext);
      o.kv_type = kv_type_;
      o.device = "cuda";
      session_ = std::make_unique<Session>(model, o);
      model_ = &model;
      GA_LOG(Info, "bench: ", session_->device_description());
    }
    return *session_;
  }
  static constexpr int64_t kMinContext = 1024;  // pp and tg of one model share the session
  KvType kv_type_;
  std::unique_ptr<Session> session_;
  const LoadedModel* model_ = nullptr;
};

std::unique_ptr<BenchDevice> make_device(const std::string& device, int n_threads, KvType kv_type) {
  if (device == "cpu") return std::make_unique<CpuBenchDevice>(n_threads, kv_type);
  if (device == "cuda") return std::make_unique<CudaBenchDevice>(kv_type);
  throw UsageError("unknown --device '" + device + "' (cpu or cuda)");
}

struct Stats {
  double mean = 0.0, stddev = 0.0;
};

Stats stats(const std::vector<double>& v) {
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double sq = 0.0;
    for (double x : v) sq += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(sq / static_cast<double>(v.size() - 1));
  }
  return s;
}

// What one token costs: bytes of weights read and parameters multiplied (see the file comment). Of a mixture
// of experts' stacks, the routed experts' share (n_expert_used of n_expert): what a token reads at batch 1.
struct ModelCost {
  uint64_t bytes_per_token = 0;
  uint64_t matmul_params = 0;
  uint64_t file_weight_bytes = 0;
};

ModelCost model_cost(const LoadedModel& model) {
  ModelCost c;
  for (const auto& [name, w] : model.weights) {
    c.file_weight_bytes += w.nbytes;
    // the token embedding (GGUF's token_embd, RWKV state dicts' emb) is a row lookup unless it is also the classifier
    const bool lookup_only = (name == "token_embd.weight" || name == "emb.weight") && !model.config.tied_embeddings;
    if (lookup_only) {
      c.bytes_per_token += w.nbytes / static_cast<uint64_t>(std::max<int64_t>(1, w.rows()));
      continue;
    }
    if (w.ne.size() == 3) {
      // an expert stack: a token reads (and multiplies by) the n_expert_used experts it is routed to
      const TransformerParams& tp = model.config.transformer;
      const uint64_t n_expert = w.ne[2], used = static_cast<uint64_t>(std::max<int64_t>(tp.n_expert_used, 1));
      c.bytes_per_token += w.nbytes / n_expert * used;
      c.matmul_params += w.ne[0] * w.ne[1] * used;
      continue;
    }
    c.bytes_per_token += w.nbytes;
    if (w.ne.size() >= 2) c.matmul_params += static_cast<uint64_t>(w.rows()) * static_cast<uint64_t>(w.cols());
  }
  return c;
}

// The type most of the model's matrices have, for the table ("Q4_K" for a Q4_K_M mix, "Q4_0" for a
// Q4_0 file whose output.weight is Q6_K).
std::string main_type(const LoadedModel& model) {
  std::map<std::string, int> counts;
  for (const auto& [name, w] : model.weights) {
    if (w.ne.size() >= 2) ++counts[dtype_name(w.type)];
  }
  if (counts.empty()) return "-";
  auto by_count = [](const auto& a, const auto& b) { return a.second < b.second; };
  return std::max_element(counts.begin(), counts.end(), by_count)->first;
}

std::vector<int32_t> bench_tokens(int64_t n, int64_t n_vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  constexpr int64_t kStride = 7919;  // a prime: a spread of ordinary token ids, reproducible
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((1 + i * kStride) % n_vocab);
  return ids;
}

std::vector<int> parse_thread_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string piece;
  while (std::getline(in, piece, ',')) {
    const int64_t t = parse_int(piece, "--threads");
    require(t >= 0 && t <= 4096, "--threads values must be in [0, 4096]");
    out.push_back(static_cast<int>(t));
  }
  require(!out.empty(), "--threads holds no thread count");
  return out;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string size_text(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30)) return fmt("%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return fmt("%.2f MiB", static_cast<double>(bytes) / (1ull << 20));
}

std::string params_text(uint64_t n) {
  if (n >= 1000000000ull) return fmt("%.2f B", static_cast<double>(n) / 1e9);
  return fmt("%.2f M", static_cast<double>(n) / 1e6);
}

// Other processes compete for the CPU: the load average goes into the report so a reader can
// judge the numbers ("" where /proc/loadavg does not exist).
std::string host_load_line() {
  std::ifstream in("/proc/loadavg");
  double one = 0, five = 0, fifteen = 0;
  if (!(in >> one >> five >> fifteen)) return "";
  const int n_hw = static_cast<int>(std::thread::hardware_concurrency());
  return str("host: ", n_hw, " hardware threads, load average ", fmt("%.2f", one), " / ", fmt("%.2f", five), " / ",
             fmt("%.2f", fifteen), " (1 / 5 / 15 min) at start\n\n");
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  std::vector<std::string> models;
  int64_t n_prompt = 512, n_gen = 128, reps = 3;
  std::string threads_text = "0", device = "cpu";
  PrecisionArgs precision;
  std::string kv_type_text;
  ArgParser parser("bench",
                   "-m MODEL [-m MODEL ...] [-p 512] [-n 128] [-r 3] [--threads 1,2] [--device cpu] [--kv-type f16]",
                   "Measures prompt processing (pp: p tokens in one eval) and token generation (tg: n single-token "
                   "steps) like llama-bench, after measuring the device's ceilings in the same run, and prints a "
                   "markdown table: tok/s (mean ± stddev over r runs), GB/s (weight bytes read per token x tg tok/s), "
                   "TFLOP/s (2 x matmul params x pp tok/s) and their fractions of the ceilings.");
  parser.option("-m,--model", &models, "MODEL", "a .gguf file or Hugging Face folder (repeatable)");
  parser.option("-p,--n-prompt", &n_prompt, "N", "prompt tokens of the pp test (0: skip pp)");
  parser.option("-n,--n-gen", &n_gen, "N", "generated tokens of the tg test (0: skip tg)");
  parser.option("-r,--repetitions", &reps, "R", "repetitions of each test");
  parser.option("-t,--threads", &threads_text, "LIST", "CPU thread counts, comma-separated (0: all)");
  parser.option("--device", &device, "DEVICE", "cpu or cuda (GPU 0; --threads is ignored)");
  add_precision_options(parser, precision);
  add_kv_type_option(parser, kv_type_text);
  if (!parser.parse(argc, argv)) return 0;
  precision_options(precision);  // a malformed --precision fails before the ceilings are measured
  const KvType kv_type = kv_type_option(kv_type_text, device, KvType::F16);
  require(!models.empty(), "missing -m MODEL");
  require(n_prompt >= 0 && n_gen >= 0 && n_prompt + n_gen > 0, "-p and -n must be >= 0 and not both 0");
  require(reps >= 1 && reps <= 1000, "-r must be in [1, 1000]");
  const std::vector<int> thread_counts = parse_thread_list(threads_text);
  for (const auto& m : models) require_exists(m);
  make_device(device, thread_counts.front(), kv_type);  // an unavailable device fails before any work
  const std::string load_line = host_load_line();
  if (!load_line.empty()) GA_LOG(Info, "bench: ", load_line.substr(0, load_line.size() - 1));

  std::vector<std::string> ceiling_rows, result_rows;
  for (const int n_threads : thread_counts) {
    std::unique_ptr<BenchDevice> dev = make_device(device, n_threads, kv_type);
    const int shown_threads = n_threads > 0 ? n_threads : static_cast<int>(std::thread::hardware_concurrency());
    GA_LOG(Info, "bench: measuring ", dev->name(), " ceilings with ", shown_threads, " threads");
    const Ceilings ceil = dev->measure_ceilings();
    ceiling_rows.push_back(str("| ", dev->name(), " | ", shown_threads, " | ", fmt("%.2f", ceil.bytes_per_s / kGB),
                               " | ", ceil.bandwidth_method, " | ", fmt("%.4f", ceil.flops_per_s / kTFLOP), " | ",
                               ceil.flops_method, " |"));
    for (const auto& path : models) {
      const LoadedModel model = load_model_verbose(path, precision, device);
      const ModelCost cost = model_cost(model);
      const std::string label = std::filesystem::path(path).filename().string();
      const std::string prefix = str("| ", label, " | ", main_type(model), " | ", kv_type_name(kv_type), " | ",
                                     size_text(cost.file_weight_bytes),
                                     " | ", params_text(cost.matmul_params), " | ", dev->name(), " | ", shown_threads,
                                     " | ");
      if (n_prompt > 0) {
        const std::vector<int32_t> prompt = bench_tokens(n_prompt, model.config.n_vocab);
        dev->time_prefill(model, prompt);  // warm-up: page in the weights, allocate
        std::vector<double> rates;
        for (int64_t r = 0; r < reps; ++r) {
          rates.push_back(static_cast<double>(n_prompt) / dev->time_prefill(model, prompt));
        }
        const Stats s = stats(rates);
        const double flops = 2.0 * static_cast<double>(cost.matmul_params) * s.mean;
        result_rows.push_back(str(prefix, "pp", n_prompt, " | ", fmt("%.2f", s.mean), " ± ", fmt("%.2f", s.stddev),
                                  " | - | - | ", fmt("%.4f", flops / kTFLOP), " | ",
                                  fmt("%.1f%%", 100.0 * flops / ceil.flops_per_s), " |"));
        GA_LOG(Info, "bench: ", label, " pp", n_prompt, " ", fmt("%.2f", s.mean), " tok/s (KV ", kv_type_name(kv_type),
               ")");
      }
      if (n_gen > 0) {
        const std::vector<int32_t> prompt = bench_tokens(kTgPromptTokens, model.config.n_vocab);
        dev->time_decode(model, prompt, std::min<int64_t>(n_gen, kTgPromptTokens));  // warm-up
        std::vector<double> rates;
        for (int64_t r = 0; r < reps; ++r) {
          rates.push_back(static_cast<double>(n_gen) / dev->time_decode(model, prompt, n_gen));
        }
        const Stats s = stats(rates);
        const double bytes = static_cast<double>(cost.bytes_per_token) * s.mean;
        result_rows.push_back(str(prefix, "tg", n_gen, " | ", fmt("%.2f", s.mean), " ± ", fmt("%.2f", s.stddev), " | ",
                                  fmt("%.2f", bytes / kGB), " | ", fmt("%.1f%%", 100.0 * bytes / ceil.bytes_per_s),
                                  " | - | - |"));
        GA_LOG(Info, "bench: ", label, " tg", n_gen, " ", fmt("%.2f", s.mean), " tok/s (KV ", kv_type_name(kv_type),
               ")");
      }
      dev->release_model();  // `model` dies here
    }
  }
  std::string out = load_line;
  out += "| device | threads | copy GB/s | copy method | matmul TFLOP/s | matmul method |\n"
         "|---|---:|---:|---|---:|---|\n";
  for (const auto& r : ceiling_rows) out += r + "\n";
  out += "\n| model | type | kv | size | matmul params | device | threads | test | tok/s | GB/s | % of copy BW | "
         "TFLOP/s | % of matmul peak |\n|---|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|\n";
  for (const auto& r : result_rows) out += r + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace ga::cli
