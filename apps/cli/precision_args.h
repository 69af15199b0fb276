// --precision and --precision-keep, shared by run, chat, bench, serve and inspect (gpu_accel/precision.h), and
// --kv-type (the KV cache's element type, gpu_accel/session.h KvType) of run, chat, bench, bench-serve and serve.
#pragma once

#include <string>

#include "args.h"
#include "gpu_accel/precision.h"
#include "gpu_accel/session.h"

namespace ga::cli {

struct PrecisionArgs {
  std::string mode = "native";  // as stored, as vLLM's --dtype auto: a lower precision is asked for, never implied
  std::string keep = "0,-1";
};

void add_precision_options(ArgParser& parser, PrecisionArgs& a);

// The options parsed; UsageError naming the option and its value when one is malformed.
PrecisionOptions precision_options(const PrecisionArgs& a);

// --kv-type TYPE bound to `text` ("" until given: the command's default).
void add_kv_type_option(ArgParser& parser, std::string& text);
// The KV type for `device` (cpu, cuda, cuda:N, auto): `text` parsed, or `fallback` when it is empty. UsageError
// listing the choices for an unknown name, and for f32 on a CUDA device (the GPU keeps f16 or fp8 caches).
KvType kv_type_option(const std::string& text, const std::string& device, KvType fallback);

}  // namespace ga::cli
