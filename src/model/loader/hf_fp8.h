// FP8 checkpoints of Hugging Face folders, read by dequantizing their weights once at load.
//
// Two layouts ship today: transformers' "fp8" quantization_config (DeepSeek-V3, Qwen3-FP8: `*.weight` in
// F8_E4M3 with a float `*.weight_scale_inv` per weight_block_size block, 128x128 by default) and
// compressed-tensors' float-quantized layout (`*.weight` in F8_E4M3 with `*.weight_scale` per tensor or per
// output channel; `*.input_scale`, the static activation scale, is not needed by a float forward). In both
// the weight is value(e4m3) * scale. The loader keeps each such matrix in FP8 as DType::F8_B128 blocks (1.03
// bytes a weight; the CPU and the CUDA GEMV read them directly) where its scales tile
// runs of 128 columns, and turns it into F32 (one f32 rounding of the product, as the reference dequantizers do)
// where they do not.
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

// The same weight kept in FP8: DType::F8_B128 blocks (128 codes and the float32 scale they share), row by row, when
// every run of 128 columns lies inside one scale block (per-tensor and per-channel scales, 128x128 and wider
// blocks, cols a multiple of 128); nullopt otherwise (the caller dequantizes). dequantize_row of these blocks gives
// dequantize_fp8_weight's values bit for bit.
std::optional<std::vector<uint8_t>> fp8_weight_blocks(const safetensors::Checkpoint& ckpt, const std::string& hf_name,
                                                      const Fp8Layout& layout);

}  // namespace ga::hf
