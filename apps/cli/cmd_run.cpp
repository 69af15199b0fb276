// gpu-accel run: load a model, generate a continuation of a prompt, stream it to stdout.
//
// stdout carries ONLY the generated text, flushed per piece, so the output can be piped or compared
// byte for byte; everything else (model, device, seed, timings) goes to stderr. Defaults follow
// llama.cpp's sampling defaults (temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty off),
// except -n: llama-cli's default (-1, until the context is full) can run for a very long time, so
// gpu-accel generates 128 tokens unless told otherwise (-n -1 restores llama-cli's behaviour).
// Without --seed the seed comes from the clock and is printed, so any run can be reproduced.
// The start-up (session creation, warm-up) is timed on stderr; --time-prompt-again N repeats the prompt's
// prefill N times afterwards and prints the median, the warm reference for the first prompt time (after
// the warm-up the two agree: docs/results/2026-11-22-h200-serving.md, "First prefill of a new length").
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <cstring>
#include <string>
#include <vector>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "gpu_accel/generate.h"

namespace ga::cli {

namespace {

constexpr int64_t kDefaultMaxTokens = 128;

struct RunArgs {
  std::string model;
  std::string prompt;
  int64_t n_predict = kDefaultMaxTokens;
  int64_t n_ctx = 0;
  int32_t threads = 0;
  std::string device = "cpu";
  SamplerParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool no_bos = false;
  bool parse_special = false;
  bool host_sampling = false;
  bool no_warmup = false;
  int64_t prompt_repeats = 0;
  int64_t prefill_graphs = SessionOptions{}.prefill_graph_max_tokens;
};

uint64_t clock_seed() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::random_device device;  // mixes in entropy so two runs in the same nanosecond still differ
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()) ^
         (static_cast<uint64_t>(device()) << 32);
}

// "2" and "0.95", not std::to_string's "2.000000".
std::string number_text(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void validate(const ArgParser& parser, const RunArgs& a) {
  require(parser.given("-m"), "missing -m MODEL (a .gguf file or a Hugging Face folder)");
  require(parser.given("-p"), "missing -p PROMPT");
  require(a.n_predict >= -1, "-n must be -1 (until the context is full) or >= 0, got " + std::to_string(a.n_predict));
  require(a.n_ctx >= 0, "--ctx must be >= 0 (0: the model's context), got " + std::to_string(a.n_ctx));
  require(a.prompt_repeats >= 0, "--time-prompt-again must be >= 0, got " + std::to_string(a.prompt_repeats));
  require(a.threads >= 0, "--threads must be >= 0 (0: all cores), got " + std::to_string(a.threads));
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
}

double per_second(size_t n, double seconds) { return seconds > 0 ? static_cast<double>(n) / seconds : 0.0; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// --time-prompt-again: the same prompt's prefill `repeats` more times on the emptied session, as
// generate() timed the first one; the median is the warm reference for the first one's time (a first
// prefill much slower than it paid one-time costs the warm-up should have taken).
double median_prompt_seconds(Session& session, const std::vector<int32_t>& prompt, int64_t repeats) {
  std::vector<double> times;
  for (int64_t i = 0; i < repeats; ++i) {
    session.reset();
    const auto t0 = std::chrono::steady_clock::now();
    session.eval_for_sampling(prompt);
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int cmd_run(int argc, char** argv) {
  RunArgs a;
  ArgParser parser("run", "-m MODEL -p PROMPT [options]",
                   "Generates a continuation of PROMPT and streams it to stdout (only the generated text);\n"
                   "logs and timings go to stderr.");
  parser.option("-m,--model", &a.model, "MODEL", "a .gguf file or a Hugging Face model folder");
  parser.option("-p,--prompt", &a.prompt, "PROMPT", "the text to continue (may be empty: \"\")");
  parser.option("-n,--n-predict", &a.n_predict, "N", "tokens to generate; -1: until the context is full");
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
  parser.option("-c,--ctx", &a.n_ctx, "N", "context size in tokens; 0: the model's (capped at 4096)");
  parser.option("--stop", &a.stop, "STR", "stop before this text (repeatable); it is not printed");
  parser.flag("--ignore-eos", &a.ignore_eos, "keep generating after an end-of-generation token");
  parser.flag("--no-bos", &a.no_bos, "do not add BOS/EOS to the prompt");
  parser.flag("--parse-special", &a.parse_special, "text spelling a special token becomes that token");
  parser.flag("--host-sampling", &a.host_sampling, "CUDA: copy the logits to the host and sample there (comparison)");
  parser.option("--time-prompt-again", &a.prompt_repeats, "N",
                "after generating, time the prompt's prefill N more times and print the median (the warm "
                "reference for the first prompt time)");
  parser.flag("--no-warmup", &a.no_warmup, "skip the warm-up forward before the prompt (as llama.cpp's; the prompt "
              "time then includes the device's one-time costs)");
  parser.option("--prefill-graphs", &a.prefill_graphs, "N",
                "CUDA: prompts of 9..N tokens replay a graph captured per length bucket at the warm-up; 0: off");
  if (!parser.parse(argc, argv)) return 0;
  require(a.prefill_graphs >= 0, "--prefill-graphs must be >= 0 (0: off), got " + std::to_string(a.prefill_graphs));
  validate(parser, a);
  if (!parser.given("--seed") && !parser.given("-s")) a.sampling.seed = clock_seed();

  const LoadedModel model = load_model_verbose(a.model);
  const Tokenizer tokenizer(model.vocab);
  SessionOptions session_options;
  session_options.n_ctx = a.n_ctx;
  session_options.n_threads = a.threads;
  session_options.device = a.device;
  session_options.gpu_sampling = !a.host_sampling;
  session_options.prefill_graph_max_tokens = a.prefill_graphs;
  const auto session_start = std::chrono::steady_clock::now();
  Session session(model, session_options);
  const double setup_seconds = seconds_since(session_start);
  const auto warm_up_start = std::chrono::steady_clock::now();
  if (!a.no_warmup) session.warm_up();
  const double warm_up_seconds = a.no_warmup ? 0.0 : seconds_since(warm_up_start);
  std::fprintf(stderr, "start-up: session %.1f ms (upload, allocation), warm-up %.1f ms%s\n", setup_seconds * 1e3,
               warm_up_seconds * 1e3, a.no_warmup ? " (skipped)" : "");
  std::fprintf(stderr, "device: %s, context: %lld\n", session.device_description().c_str(),
               static_cast<long long>(session.n_ctx()));
  std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(a.sampling.seed));

  GenerateOptions options;
  options.max_tokens = a.n_predict;
  options.sampling = a.sampling;
  options.stop = a.stop;
  options.ignore_eos = a.ignore_eos;
  options.add_special = !a.no_bos;
  options.parse_special = a.parse_special;

  // A failed write stops the generation. The reader of a pipe going away (`| head`) is a normal
  // way to end, like for any Unix filter; any other write error is reported.
  int write_errno = 0;
  const GenerateResult r = generate(session, tokenizer, a.prompt, options, [&](std::string_view text) {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
      write_errno = errno != 0 ? errno : EIO;
      return false;
    }
    return true;
  });
  std::fflush(stdout);

  if (stderr_is_tty()) std::fprintf(stderr, "\n");  // the text has no final newline; keep the log readable
  std::fprintf(stderr, "prompt: %zu tokens in %.2f ms (%.1f tok/s)\n", r.prompt_tokens.size(),
               r.prompt_seconds * 1e3, per_second(r.prompt_tokens.size(), r.prompt_seconds));
  // The prompt time above is the forward alone; a server's time to first token also covers the first token's
  // sampling, so this is the like-for-like reference for it (bench/serve, tools/dev/serve_http.sh).
  if (r.first_token_seconds > 0) {
    std::fprintf(stderr, "first token: %.2f ms after the prompt's start (prefill + first sample)\n",
                 r.first_token_seconds * 1e3);
  }
  std::fprintf(stderr, "generated: %zu tokens in %.1f ms (%.1f tok/s), finish: %s\n", r.tokens.size(),
               r.gen_seconds * 1e3, per_second(r.tokens.size(), r.gen_seconds), finish_reason_name(r.finish));
  if (a.prompt_repeats > 0) {
    const double warm = median_prompt_seconds(session, r.prompt_tokens, a.prompt_repeats);
    std::fprintf(stderr, "prompt again: %zu tokens in %.2f ms (median of %lld); first / again = %.3f\n",
                 r.prompt_tokens.size(), warm * 1e3, static_cast<long long>(a.prompt_repeats),
                 warm > 0 ? r.prompt_seconds / warm : 0.0);
  }
  if (write_errno != 0 && write_errno != EPIPE) {
    std::fprintf(stderr, "error: writing the generated text to stdout failed: %s\n", std::strerror(write_errno));
    return 1;
  }
  return 0;
}

}  // namespace ga::cli
