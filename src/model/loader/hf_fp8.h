// FP8 checkpoints of Hugging Face folders, read by dequantizing their weights once at load.
//
// Two layouts ship today: transformers' "fp8" quantization_config (DeepSeek-V3, Qwen3-FP8: `*.weight` in
// F8_E4M3 with a float `*.weight_scale_inv` per weight_block_size block, 128x128 by default) and
// compressed-tensors' float-quantized layout (`*.weight` in F8_E4M3 with `*.weight_scale` per tensor or per
// output channel; `*.input_scale`, the static activation scale, is not needed by a float forward). In both
// the weight is value(e4m3) * scale. The loader turns each such matrix into F32 (one f32 rounding of the
// product, as the reference dequantizers do), so every backend runs it as it runs an F32 checkpoint; reading
// FP8 directly (GEMV/GEMM) comes with the GPU paths.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/formats/hf_config.h"
#include "model/formats/safetensors.h"

namespace ga::hf {

struct Fp8Layout {
  int64_t block_out = 0, block_in = 0;  // weight_block_size; 0: from each scale tensor's shape
};

// The FP8 layout config.json declares; nullopt for a checkpoint that is not FP8.
std::optional<Fp8Layout> fp8_layout(const HfConfig& config);

// A scale tensor of an FP8 weight (weight_scale_inv, weight_scale, input_scale): consumed with its weight.
bool is_fp8_scale_name(std::string_view hf_name);

// The F32 values of the F8_E4M3 weight `hf_name` ([rows][cols] in torch order) times its scale tensor
// (looked up beside it). InvalidFormat naming the tensor when its scale is missing or misshaped.
std::vector<float> dequantize_fp8_weight(const safetensors::Checkpoint& ckpt, const std::string& hf_name,
                                         const Fp8Layout& layout);

}  // namespace ga::hf
