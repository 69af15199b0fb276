// The options `gpu-accel run` and `gpu-accel chat` share: the model, the device and context, sampling, stop
// conditions, and the session's start-up (warm-up, prefill graphs).
//
// One declaration for both commands, so that a sampling option, its default, its help text and its range
// check cannot drift between them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "precision_args.h"
#include "gpu_accel/generate.h"
#include "gpu_accel/session.h"

namespace ga::cli {

struct GenerationArgs {
  std::string model;
  int64_t n_predict = 0;  // the command's default, set before add_generation_options
  int64_t n_ctx = 0;
  int32_t threads = 0;
  std::string device = "cpu";
  PrecisionArgs precision;
  std::string kv_type;  // --kv-type ("": f32 on the CPU, f16 on a GPU)
  SamplerParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool host_sampling = false;
  bool no_warmup = false;
  int64_t prefill_graphs = SessionOptions{}.prefill_graph_max_tokens;
  int32_t tensor_parallel = 1;
  int32_t context_parallel = 1;
};

// Declares -m, -n (described by n_predict_help), the sampling options, --threads, --device, --precision,
// --precision-keep, --kv-type, --ctx, --stop,
// --ignore-eos, --host-sampling, --no-warmup and --prefill-graphs, bound to `a`.
void add_generation_options(ArgParser& parser, GenerationArgs& a, const std::string& n_predict_help);

// Range checks after parse() (UsageError), and the seed drawn from the clock when --seed was not given.
void finish_generation_options(const ArgParser& parser, GenerationArgs& a);

SessionOptions session_options(const GenerationArgs& a);
GenerateOptions generate_options(const GenerationArgs& a);

// Creates the session, warms it up unless --no-warmup, and logs the start-up time, device, context and seed
// on stderr.
Session start_session(const LoadedModel& model, const GenerationArgs& a);

// "2" and "0.95", not std::to_string's "2.000000".
std::string number_text(float v);

}  // namespace ga::cli
