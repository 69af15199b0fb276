// gpu-accel quantize: re-quantize a GGUF model (llama-quantize's job), through
// ga::tools::quantize_model. The command only parses arguments and reports: one summary line on
// stdout, fallbacks (and, with --verbose, every tensor) on stderr.
#include <cstdio>
#include <string>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/log.h"
#include "model/tools/quantize_model.h"

namespace ga::cli {

int cmd_quantize(int argc, char** argv) {
  std::string input, output, type;
  bool pure = false, verbose = false;
  int32_t n_threads = 0;
  ArgParser parser("quantize", "IN.gguf OUT.gguf TYPE [--pure] [--threads N]",
                   "Re-quantizes a GGUF model like llama-quantize: weight matrices are decoded to float32 and encoded "
                   "as TYPE with llama.cpp's rounding; norms and other 1-D tensors and all metadata are copied. "
                   "TYPE is one of " + tools::file_type_names() +
                   ". The k-quant mixes give output.weight, attn_v and ffn_down more bits in some layers "
                   "(llama.cpp's rules); --pure gives every matrix TYPE's base type.");
  parser.positional("IN.gguf", &input, "the model to quantize (any supported tensor types)");
  parser.positional("OUT.gguf", &output, "where to write the result");
  parser.positional("TYPE", &type, "the target file type, e.g. Q4_K_M, Q8_0, F16");
  parser.flag("--pure", &pure, "no k-quant mixture: every matrix gets TYPE's base type (llama-quantize --pure)");
  parser.option("-t,--threads", &n_threads, "N", "CPU threads (0: all)");
  parser.flag("-v,--verbose", &verbose, "log every tensor's type change");
  if (!parser.parse(argc, argv)) return 0;
  require(!input.empty() && !output.empty() && !type.empty(), "usage: gpu-accel quantize IN.gguf OUT.gguf TYPE");
  require(n_threads >= 0, "--threads must be >= 0");
  const auto ftype = tools::file_type_from_name(type);
  require(ftype.has_value(), "unknown TYPE '" + type + "' (one of " + tools::file_type_names() + ")");
  require_exists(input);
  if (verbose) set_log_level(LogLevel::Debug);

  tools::QuantizeOptions options;
  options.type = type;
  options.pure = pure;
  options.n_threads = n_threads;
  const tools::QuantizeSummary s = tools::quantize_model(input, output, options);
  std::printf("quantized %s -> %s: %s%s (file_type %u), %d tensors (%d converted, %d fallbacks), %.2f MiB -> %.2f MiB "
              "in %.2f s\n",
              input.c_str(), output.c_str(), s.ftype.name, pure ? " pure" : "", s.ftype.id, s.n_tensors, s.n_converted,
              s.n_fallback, static_cast<double>(s.input_bytes) / (1 << 20),
              static_cast<double>(s.output_bytes) / (1 << 20), s.seconds);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace ga::cli
