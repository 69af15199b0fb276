// gpu-accel quantize: re-quantize a GGUF model (llama-quantize's job), through
// ga::tools::quantize_model. The command only parses arguments and reports: one summary line on
// stdout, fallbacks (and, with --verbose, every tensor) on stderr.
#include <cstdio>
#include <string>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/log.h"
#include "model/tools/quantize_fp8.h"
#include "model/tools/quantize_model.h"

namespace ga::cli {

namespace {

// TYPE fp8: an HF folder into an FP8 HF folder (GGUF has no FP8 type; model/tools/quantize_fp8.h).
int quantize_fp8(const std::string& input, const std::string& output, const std::string& scales_name) {
  require_exists(input);
  const tools::Fp8Scales scales = tools::fp8_scales_from_name(scales_name);
  const tools::Fp8QuantizeSummary s = tools::quantize_hf_fp8(input, output, scales);
  std::printf("quantized %s -> %s: FP8 E4M3 (%s scales), %d tensors (%d in FP8), %.2f MiB -> %.2f MiB in %.2f s\n",
              input.c_str(), output.c_str(), scales_name.c_str(), s.n_tensors, s.n_quantized,
              static_cast<double>(s.input_bytes) / (1 << 20), static_cast<double>(s.output_bytes) / (1 << 20),
              s.seconds);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  std::string input, output, type, fp8_scales = "block";
  bool pure = false, verbose = false;
  int32_t n_threads = 0;
  ArgParser parser("quantize", "IN.gguf OUT.gguf TYPE [--pure] [--threads N] | IN_DIR OUT_DIR fp8 [--scales S]",
                   "Re-quantizes a GGUF model like llama-quantize: weight matrices are decoded to float32 and encoded "
                   "as TYPE with llama.cpp's rounding; norms and other 1-D tensors and all metadata are copied. "
                   "TYPE is one of " + tools::file_type_names() +
                   ". The k-quant mixes give output.weight, attn_v and ffn_down more bits in some layers "
                   "(llama.cpp's rules); --pure gives every matrix TYPE's base type. TYPE fp8 writes a Hugging Face "
                   "folder (F32/F16/BF16 safetensors) as an FP8 E4M3 checkpoint (GGUF has no FP8 type): 128x128 "
                   "block scales (transformers' fp8 layout) or per-channel / per-tensor scales (compressed-tensors).");
  parser.positional("IN", &input, "the model to quantize: a GGUF file (any supported tensor types), or an HF folder for fp8");
  parser.positional("OUT", &output, "where to write the result (a folder for fp8)");
  parser.positional("TYPE", &type, "the target file type, e.g. Q4_K_M, Q8_0, F16, or fp8");
  parser.flag("--pure", &pure, "no k-quant mixture: every matrix gets TYPE's base type (llama-quantize --pure)");
  parser.option("--scales", &fp8_scales, "S", "fp8 only: block (128x128, default), channel or tensor");
  parser.option("-t,--threads", &n_threads, "N", "CPU threads (0: all)");
  parser.flag("-v,--verbose", &verbose, "log every tensor's type change");
  if (!parser.parse(argc, argv)) return 0;
  require(!input.empty() && !output.empty() && !type.empty(), "usage: gpu-accel quantize IN.gguf OUT.gguf TYPE");
  if (type == "fp8" || type == "FP8") return quantize_fp8(input, output, fp8_scales);
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
