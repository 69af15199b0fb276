// gpu-accel run: load a model, generate a continuation of a prompt, stream it to stdout.
//
// stdout carries ONLY the generated text, flushed per piece, so the output can be piped or compared
// byte for byte; everything else (model, device, seed, timings) goes to stderr. Sampling defaults are
// llama.cpp's (generation_args.cpp), except -n: llama-cli's default (-1, until the context is full) can run
// for a very long time, so gpu-accel generates 128 tokens unless told otherwise (-n -1 restores llama-cli's
// behaviour). The start-up (session creation, warm-up) is timed on stderr; --time-prompt-again N repeats the
// prompt's prefill N times afterwards and prints the median, the warm reference for the first prompt time
// (after the warm-up the two agree).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "generation_args.h"
#include "gpu_accel/generate.h"

namespace ga::cli {

namespace {

constexpr int64_t kDefaultMaxTokens = 128;

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
  GenerationArgs a;
  a.n_predict = kDefaultMaxTokens;
  std::string prompt;
  bool no_bos = false;
  bool parse_special = false;
  int64_t prompt_repeats = 0;
  ArgParser parser("run", "-m MODEL -p PROMPT [options]",
                   "Generates a continuation of PROMPT and streams it to stdout (only the generated text);\n"
                   "logs and timings go to stderr.");
  parser.option("-p,--prompt", &prompt, "PROMPT", "the text to continue (may be empty: \"\")");
  add_generation_options(parser, a, "tokens to generate; -1: until the context is full");
  parser.flag("--no-bos", &no_bos, "do not add BOS/EOS to the prompt");
  parser.flag("--parse-special", &parse_special, "text spelling a special token becomes that token");
  parser.option("--time-prompt-again", &prompt_repeats, "N",
                "after generating, time the prompt's prefill N more times and print the median (the warm "
                "reference for the first prompt time)");
  if (!parser.parse(argc, argv)) return 0;
  finish_generation_options(parser, a);
  require(parser.given("-p"), "missing -p PROMPT");
  require(prompt_repeats >= 0, "--time-prompt-again must be >= 0, got " + std::to_string(prompt_repeats));

  const LoadedModel model = load_model_verbose(a.model, a.precision, a.device);
  const Tokenizer tokenizer(model.vocab);
  Session session = start_session(model, a);

  GenerateOptions options = generate_options(a);
  options.add_special = !no_bos;
  options.parse_special = parse_special;

  TextOut out;
  const GenerateResult r =
      generate(session, tokenizer, prompt, options, [&](std::string_view text) { return out.write(text); });
  std::fflush(stdout);

  if (stderr_is_tty()) std::fprintf(stderr, "\n");  // the text has no final newline; keep the log readable
  std::fprintf(stderr, "prompt: %zu tokens in %.2f ms (%.1f tok/s)\n", r.prompt_tokens.size(),
               r.prompt_seconds * 1e3, per_second(r.prompt_tokens.size(), r.prompt_seconds));
  // The prompt time above is the forward alone; a server's time to first token also covers the first token's
  // sampling, so this is the like-for-like reference for it (bench/serve, tools/device/serve.sh).
  if (r.first_token_seconds > 0) {
    std::fprintf(stderr, "first token: %.2f ms after the prompt's start (prefill + first sample)\n",
                 r.first_token_seconds * 1e3);
  }
  std::fprintf(stderr, "generated: %zu tokens in %.1f ms (%.1f tok/s), finish: %s\n", r.tokens.size(),
               r.gen_seconds * 1e3, per_second(r.tokens.size(), r.gen_seconds), finish_reason_name(r.finish));
  if (prompt_repeats > 0) {
    const double warm = median_prompt_seconds(session, r.prompt_tokens, prompt_repeats);
    std::fprintf(stderr, "prompt again: %zu tokens in %.2f ms (median of %lld); first / again = %.3f\n",
                 r.prompt_tokens.size(), warm * 1e3, static_cast<long long>(prompt_repeats),
                 warm > 0 ? r.prompt_seconds / warm : 0.0);
  }
  return out.report_error() ? 1 : 0;
}

}  // namespace ga::cli
