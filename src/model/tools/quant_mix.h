// Which type each tensor gets when a model is quantized: llama.cpp's file types (llama_ftype) and
// the k-quant mixtures of its llama_tensor_get_type(), re-implemented for Llama-family models.
//
// A file type names a default type for the weight matrices (Q4_K_M -> Q4_K) plus rules that give a
// few sensitive tensors more bits. The numbering of the file types is llama.cpp's, because it is
// written to general.file_type and other tools read it. Rules implemented (llama-quant.cpp,
// single-expert models; "use_more_bits(i, n)" = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2):
//   output.weight (or token_embd.weight when the output is tied): Q6_K unless the default is Q8_0,
//     Q8_0 when its rows are not a multiple of the default's block;
//   attn_v:  Q2_K -> Q4_K if n_head/n_head_kv >= 4 else Q3_K; Q3_K_M -> Q5_K for layers 0-1, else Q4_K;
//            Q3_K_L -> Q5_K; Q4_K_M, Q5_K_M -> Q6_K where use_more_bits; Q4_K_S -> Q5_K for layers 0-3;
//            80-layer models (llama.cpp's 70B rule): Q3_K/Q4_K -> Q5_K;
//   ffn_down: Q2_K -> Q3_K; Q3_K_M -> Q5_K for layers < n/16, else Q4_K; Q3_K_L -> Q5_K;
//            Q4_K_M, Q5_K_M -> Q6_K where use_more_bits; Q4_K_S -> Q5_K for layers < n/8;
//   attn_output: Q2_K -> Q3_K, Q3_K_M -> Q4_K, Q3_K_L -> Q5_K;
//   attn_qkv (fused): Q3_K_M/L -> Q4_K, Q4_K_M -> Q5_K, Q5_K_M -> Q6_K.
// MXFP4 and NVFP4 (file types 38 and 39, llama.cpp's MXFP4_MOE and NVFP4) give every matrix the FP4 type
// and the classifier Q8_0, as llama.cpp does for those two; llama.cpp's MXFP4_MOE is meant for the experts
// of MoE models, ours quantizes the dense matrices too (a dense FP4 model for benchmarks).
// Not implemented: the IQ* types, mixture-of-experts rules, Falcon's variants, importance
// matrices (Q2_K_S needs one, so it is not offered). As in llama-quantize, Q3_K / Q4_K / Q5_K are
// the _M mixes; --pure gives every matrix the default type.
//
// A row length that is not a multiple of the chosen type's block falls back like llama.cpp:
// Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 if still not a multiple. llama.cpp uses IQ4_NL
// for Q2_K/Q3_K; we have no IQ4_NL quantizer and use Q4_0 (same block size and bits) instead. NVFP4
// (blocks of 64) falls back to MXFP4 (the same levels in blocks of 32).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gpu_accel/dtype.h"

namespace ga::tools {

struct FileType {
  const char* name = "";  // "Q4_K_M"
  uint32_t id = 0;        // llama_ftype, the value of general.file_type
  DType base = DType::F32;  // the default type of the weight matrices
};

// Case-insensitive; accepts llama-quantize's aliases (Q4_K = Q4_K_M, ...). nullopt when unknown.
std::optional<FileType> file_type_from_name(std::string_view name);
// "F32, F16, BF16, Q8_0, ..." for help texts and error messages.
std::string file_type_names();

// What the rules need to know about the model.
struct MixContext {
  int64_t n_layer = 0;     // <arch>.block_count
  int64_t n_gqa = 1;       // n_head / n_head_kv
  int64_t n_attn_v = 0;    // number of attn_v (or attn_qkv) tensors
  bool has_output = true;  // a separate output.weight exists (else token_embd is the classifier)
};

// llama-quantize's test: a weight matrix (name ends in "weight", >= 2 dims), not a norm, not a
// small special tensor. Other tensors are copied unchanged.
bool should_quantize(std::string_view name, size_t n_dims);

// convert_hf_to_gguf.py's F32 list among 2-D tensors (RWKV's time_first, the v6 LoRAs and v7's decay LoRA, the
// fused lerp stack): what stays F32 in an F16 conversion. Its other 2-D tensors get the conversion's type.
bool converter_keeps_f32(std::string_view name);

// The type of one tensor that should_quantize() accepted, with row length ne0. `pure` keeps the
// default type for every matrix. When the row length forces a fallback, *fallback_note (if given)
// receives a one-line explanation for the log.
DType choose_tensor_type(const FileType& ftype, const MixContext& ctx, std::string_view name, uint64_t ne0,
                         bool pure, std::string* fallback_note = nullptr);

// The layer index of "blk.N.xxx", or -1.
int64_t layer_of(std::string_view name);

}  // namespace ga::tools
