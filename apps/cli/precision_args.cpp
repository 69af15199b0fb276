// See precision_args.h.
#include "precision_args.h"

#include "gpu_accel/error.h"

namespace ga::cli {

void add_precision_options(ArgParser& parser, PrecisionArgs& a) {
  parser.option("--precision", &a.mode, "MODE",
                "weights at load: native (as stored), bf16, fp8 (layer matrices as F8_B128 blocks) or auto (fp8 on a "
                "Hopper GPU for a 16/32-bit float model of at least 3B layer weights, where it is measured faster; "
                "native otherwise)");
  parser.option("--precision-keep", &a.keep, "LAYERS",
                "fp8: layers kept as stored, a comma list (negatives from the end; 'none': none)");
}

PrecisionOptions precision_options(const PrecisionArgs& a) {
  PrecisionOptions o;
  try {
    o.mode = precision_from_name(a.mode);
  } catch (const Error& e) {
    throw UsageError("--precision: " + e.message());
  }
  try {
    o.keep_layers = parse_layer_list(a.keep);
  } catch (const Error& e) {
    throw UsageError("--precision-keep: " + e.message());
  }
  return o;
}

void add_kv_type_option(ArgParser& parser, std::string& text) {
  parser.option("--kv-type", &text, "TYPE",
                "KV cache type: f16, fp8 (E4M3 codes + a float scale per position and KV head: ~half the bytes, ~2x "
                "the positions in the same memory) or f32 (the CPU only). Default: f32 on the CPU (bench: f16), "
                "f16 on a GPU");
}

KvType kv_type_option(const std::string& text, const std::string& device, KvType fallback) {
  if (text.empty()) return fallback;
  const std::optional<KvType> t = kv_type_from_name(text);
  if (!t) throw UsageError("--kv-type: unknown KV cache type '" + text + "' (choices: " + kKvTypeChoices + ")");
  if (*t == KvType::F32 && device.rfind("cuda", 0) == 0) {
    throw UsageError("--kv-type f32 on " + device + ": the GPU keeps its KV cache in f16 or fp8 (choices there: f16, fp8)");
  }
  return *t;
}

}  // namespace ga::cli
