// Precision selection at load (`--precision auto|native|bf16|fp8`, `--precision-keep LAYERS`): the float weight
// matrices of a loaded model converted once, before a backend uploads them.
//
//   native  the weights as stored (the default: a checkpoint runs as it ships, as vLLM's --dtype auto).
//   bf16    F32 / F16 matrices become BF16 (vLLM's --dtype bfloat16); vectors (norms, biases) stay float32.
//   fp8     the layer matrices (F32 / F16 / BF16) become F8_B128 blocks (128 E4M3 codes under one float32 scale,
//           amax / 448), what an FP8 checkpoint loads as; kept as stored: the token embeddings, the output head,
//           the norms, MoE routers and the layers of keep_layers (by default the first and the last, the most
//           sensitive ones). A matrix whose row length is not a multiple of 128 stays as stored.
//   auto    fp8 where it is measured faster (auto_picks_fp8): a Hopper GPU (sm_90) and layer matrices of 16/32-bit
//           floats holding at least kAutoFp8MinWeights weights; native otherwise (the CPU, other GPUs, small models,
//           an already quantized model), with the reason in the log line.
// Quantized matrices (Q4_0, ..., an FP8 checkpoint's F8_B128) stay as they are under every mode. Which tensors are
// "matrices" is what the architecture's Program binds as matrices, so every architecture is covered without a
// name list.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/model.h"

namespace ga {

enum class Precision { Auto, Native, Bf16, Fp8 };

struct PrecisionOptions {
  Precision mode = Precision::Native;
  // fp8: layers kept as stored; negative indices count from the end (-1: the last layer).
  std::vector<int64_t> keep_layers = {0, -1};
};

// What `auto` needs to know about the device the model will run on.
struct PrecisionTarget {
  bool gpu = false;
  int cc_major = 0, cc_minor = 0;  // compute capability, for a GPU
  bool has_fp8_tensor_cores() const { return gpu && (cc_major > 8 || (cc_major == 8 && cc_minor >= 9)); }
  std::string name() const;        // "cpu" or "sm_90"
};

// Whether auto converts to fp8 a model whose layer matrices hold `layer_float_weights` float weights. Measured on
// the H200 (2026-12-04, docs/performance.md): Llama-3-8B under FP8 decodes at 1.17x and prefills (pp2048) at 1.22x
// of BF16, while Llama-3.2-1B decodes at 0.95x (its 2048-wide matrices leave the FP8 GEMV's fixed costs exposed)
// and prefills at 1.12x. Hopper only: the FP8 prefill is cuBLASLt's 128-block scaling, which exists on sm_90 alone
// (elsewhere FP8 prefills dequantize to f16, 0.74x), and no other GPU with FP8 tensor cores was measured.
inline constexpr int64_t kAutoFp8MinWeights = 3'000'000'000;
bool auto_picks_fp8(const PrecisionTarget& target, int64_t layer_float_weights);

// "auto", "native", "bf16", "fp8" (case-insensitive). InvalidArgument naming the value and the choices otherwise.
Precision precision_from_name(std::string_view name);
const char* precision_name(Precision p);
// "0,-1", "0,1,-2", "none" or "" (no layer kept). InvalidArgument naming the value for anything else.
std::vector<int64_t> parse_layer_list(std::string_view text);

// The device a model will run on, from a Session / Scheduler device string ("cpu", "cuda", "cuda:N", "auto": cuda:0
// when a GPU exists). Without CUDA (build or driver) every GPU string gives the CPU target.
PrecisionTarget precision_target(const std::string& device);

// Converts model's matrices for options under target and records the outcome in model.precision (its detail is
// the line to log). InvalidArgument when keep_layers names a layer the model does not have.
void apply_precision(LoadedModel& model, const PrecisionOptions& options, const PrecisionTarget& target);

}  // namespace ga
