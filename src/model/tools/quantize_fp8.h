// `gpu-accel quantize IN_DIR OUT_DIR fp8`: a Hugging Face folder (F32 / F16 / BF16 safetensors) rewritten as an FP8
// checkpoint in the layouts the FP8 loader (model/loader/hf_fp8.h), transformers and vLLM read:
//   block (default)  transformers' "fp8": every linear weight in F8_E4M3 with a float32 `weight_scale_inv` per
//                    128 x 128 block (DeepSeek-V3's and Qwen3-FP8's layout), quantization_config
//                    {quant_method "fp8", weight_block_size [128, 128], activation_scheme "dynamic"};
//   channel, tensor  compressed-tensors' float-quantized layout: `weight_scale` per output row ([rows, 1]) or per
//                    tensor ([1]), quantization_config {quant_method "compressed-tensors", format "float-quantized"}.
// A scale is the block's (row's, tensor's) largest magnitude / 448 (E4M3's largest finite value), so no weight
// saturates; a code is the weight / scale rounded to nearest even. What is quantized: the 2-D `*.weight` tensors of
// linear layers — not the token embeddings, the LM head or a MoE router (kept in their type, listed in the config's
// ignore list), nor 1-D tensors. GGUF has no FP8 type, so FP8 output is an HF folder only. Other files of the
// folder (tokenizer, generation config, vocabularies) are copied; the weights go to one model.safetensors.
#pragma once

#include <cstdint>
#include <string>

namespace ga::tools {

enum class Fp8Scales { kBlock128, kChannel, kTensor };

struct Fp8QuantizeSummary {
  int n_tensors = 0;
  int n_quantized = 0;  // weights written in F8_E4M3
  uint64_t input_bytes = 0;
  uint64_t output_bytes = 0;
  double seconds = 0.0;
};

// Parses "block" / "channel" / "tensor"; InvalidArgument otherwise.
Fp8Scales fp8_scales_from_name(const std::string& name);

// Writes the FP8 folder out_dir (created; an existing model.safetensors there is replaced) from the HF folder in_dir.
// InvalidArgument when in_dir is not an HF folder; Unsupported when a weight is not F32 / F16 / BF16 (an already
// quantized checkpoint).
Fp8QuantizeSummary quantize_hf_fp8(const std::string& in_dir, const std::string& out_dir, Fp8Scales scales);

}  // namespace ga::tools
