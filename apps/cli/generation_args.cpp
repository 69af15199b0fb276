// See generation_args.h.
//
// Defaults follow llama.cpp's sampling defaults (temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty
// off: SamplerParams). Without --seed the seed comes from the clock and is printed, so any run can be
// reproduced.
#include "generation_args.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>

namespace ga::cli {

namespace {

uint64_t clock_seed() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::random_device device;  // mixes in entropy so two runs in the same nanosecond still differ
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()) ^
         (static_cast<uint64_t>(device()) << 32);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string number_text(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void add_generation_options(ArgParser& parser, GenerationArgs& a, const std::string& n_predict_help) {
  parser.option("-m,--model", &a.model, "MODEL", "a .gguf file or a Hugging Face model folder");
  parser.option("-n,--n-predict", &a.n_predict, "N", n_predict_help);
  parser.option("--temp", &a.sampling.temperature, "T", "temperature; 0: greedy (argmax)");
  parser.option("--top-k", &a.sampling.top_k, "K", "keep the K most likely tokens; 0: off");
  parser.option("--top-p", &a.sampling.top_p, "P", "keep the smallest set with probability >= P; 1: off");
  parser.option("--min-p", &a.sampling.min_p, "P", "keep tokens with p >= P * p_max; 0: off");
  parser.option("--repeat-penalty", &a.sampling.repeat_penalty, "X", "penalize repeated tokens; 1: off");
  parser.option("--repeat-last-n", &a.sampling.repeat_last_n, "N", "tokens the penalties look back on; -1: all");
  parser.option("--frequency-penalty", &a.sampling.frequency_penalty, "X", "subtract X per occurrence");
  parser.option("--presence-penalty", &a.sampling.presence_penalty, "X", "subtract X once if present");
  parser.option("-s,--seed", &a.sampling.seed, "S", "sampling seed (default: from the clock, printed to stderr)");
  parser.option("-t,--threads", &a.threads, "N", "CPU threads; 0: all cores");
  parser.option("--device", &a.device, "DEVICE", "cpu, cuda (cuda:N) or auto (cuda when a GPU can run the model)");
  add_precision_options(parser, a.precision);
  add_kv_type_option(parser, a.kv_type);
  parser.option("-c,--ctx", &a.n_ctx, "N", "context size in tokens; 0: the model's (capped at 4096)");
  parser.option("--stop", &a.stop, "STR", "stop before this text (repeatable); it is not printed");
  parser.flag("--ignore-eos", &a.ignore_eos, "keep generating after an end-of-generation token");
  parser.flag("--host-sampling", &a.host_sampling, "CUDA: copy the logits to the host and sample there (comparison)");
  parser.flag("--no-warmup", &a.no_warmup, "skip the warm-up forward before the prompt (as llama.cpp's; the prompt "
              "time then includes the device's one-time costs)");
  parser.option("--tensor-parallel", &a.tensor_parallel, "N",
                "split the model over N ranks (CPU: threads of this process; heads and FFN width divide by N)");
  parser.option("--context-parallel", &a.context_parallel, "M",
                "shard the sequence's positions and KV cache over M ranks (CPU: threads of this process; ring "
                "attention for the prompt, a merged pass-Q attention for decode)");
  parser.option("--prefill-graphs", &a.prefill_graphs, "N",
                "CUDA: prompts of 9..N tokens replay a graph captured per length bucket at the warm-up; 0: off");
}

void finish_generation_options(const ArgParser& parser, GenerationArgs& a) {
  require(parser.given("-m"), "missing -m MODEL (a .gguf file or a Hugging Face folder)");
  require(a.n_predict >= -1, "-n must be -1 (until the context is full) or >= 0, got " + std::to_string(a.n_predict));
  require(a.n_ctx >= 0, "--ctx must be >= 0 (0: the model's context), got " + std::to_string(a.n_ctx));
  require(a.threads >= 0, "--threads must be >= 0 (0: all cores), got " + std::to_string(a.threads));
  require(a.tensor_parallel >= 1 && a.tensor_parallel <= 64,
          "--tensor-parallel must be in 1..64, got " + std::to_string(a.tensor_parallel));
  require(a.context_parallel >= 1 && a.context_parallel <= 64,
          "--context-parallel must be in 1..64, got " + std::to_string(a.context_parallel));
  require(a.tensor_parallel == 1 || a.context_parallel == 1,
          "--tensor-parallel and --context-parallel together are not built yet: use one of them");
  require(a.prefill_graphs >= 0, "--prefill-graphs must be >= 0 (0: off), got " + std::to_string(a.prefill_graphs));
  const SamplerParams& s = a.sampling;
  require(s.temperature >= 0.0f, "--temp must be >= 0 (0: greedy), got " + number_text(s.temperature));
  require(s.top_k >= 0, "--top-k must be >= 0 (0: off), got " + std::to_string(s.top_k));
  require(s.top_p >= 0.0f && s.top_p <= 1.0f, "--top-p must be in [0, 1], got " + number_text(s.top_p));
  require(s.min_p >= 0.0f && s.min_p <= 1.0f, "--min-p must be in [0, 1], got " + number_text(s.min_p));
  require(s.repeat_penalty > 0.0f, "--repeat-penalty must be > 0 (1: off), got " + number_text(s.repeat_penalty));
  require(s.repeat_last_n >= -1, "--repeat-last-n must be >= -1 (-1: all), got " + std::to_string(s.repeat_last_n));
  for (const auto& stop : a.stop) require(!stop.empty(), "--stop needs a non-empty string");
  require(a.device == "cpu" || a.device == "cuda" || a.device == "auto" || a.device.rfind("cuda:", 0) == 0,
          "--device must be cpu, cuda, cuda:N or auto, got '" + a.device + "'");
  precision_options(a.precision);  // UsageError naming the option before any work
  kv_type_option(a.kv_type, a.device, KvType::F32);
  if (!parser.given("--seed") && !parser.given("-s")) a.sampling.seed = clock_seed();
}

SessionOptions session_options(const GenerationArgs& a) {
  SessionOptions o;
  o.n_ctx = a.n_ctx;
  o.n_threads = a.threads;
  o.device = a.device;
  o.kv_type = kv_type_option(a.kv_type, a.device, KvType::F32);  // F32 is kept as F16 on a GPU
  o.gpu_sampling = !a.host_sampling;
  o.prefill_graph_max_tokens = a.prefill_graphs;
  o.tensor_parallel = a.tensor_parallel;
  o.context_parallel = a.context_parallel;
  return o;
}

GenerateOptions generate_options(const GenerationArgs& a) {
  GenerateOptions o;
  o.max_tokens = a.n_predict;
  o.sampling = a.sampling;
  o.stop = a.stop;
  o.ignore_eos = a.ignore_eos;
  return o;
}

Session start_session(const LoadedModel& model, const GenerationArgs& a) {
  const auto session_start = std::chrono::steady_clock::now();
  Session session(model, session_options(a));
  const double setup_seconds = seconds_since(session_start);
  const auto warm_up_start = std::chrono::steady_clock::now();
  if (!a.no_warmup) session.warm_up();
  const double warm_up_seconds = a.no_warmup ? 0.0 : seconds_since(warm_up_start);
  std::fprintf(stderr, "start-up: session %.1f ms (upload, allocation), warm-up %.1f ms%s\n", setup_seconds * 1e3,
               warm_up_seconds * 1e3, a.no_warmup ? " (skipped)" : "");
  std::fprintf(stderr, "device: %s, context: %lld, KV cache: %s\n", session.device_description().c_str(),
               static_cast<long long>(session.n_ctx()), kv_type_name(session.kv_type()));
  std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(a.sampling.seed));
  return session;
}

}  // namespace ga::cli
