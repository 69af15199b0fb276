// --precision and --precision-keep, shared by run, chat, bench, serve and inspect (gpu_accel/precision.h).
#pragma once

#include <string>

#include "args.h"
#include "gpu_accel/precision.h"

namespace ga::cli {

struct PrecisionArgs {
  std::string mode = "native";  // as stored, as vLLM's --dtype auto: a lower precision is asked for, never implied
  std::string keep = "0,-1";
};

void add_precision_options(ArgParser& parser, PrecisionArgs& a);

// The options parsed; UsageError naming the option and its value when one is malformed.
PrecisionOptions precision_options(const PrecisionArgs& a);

}  // namespace ga::cli
