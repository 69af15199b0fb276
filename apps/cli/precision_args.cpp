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

}  // namespace ga::cli
