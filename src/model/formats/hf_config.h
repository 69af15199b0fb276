// Hugging Face config.json -> ga::ModelConfig for the Llama family (Llama, Mistral, Qwen2).
//
// The mapping follows transformers' own defaults per architecture, so a config.json that leaves a
// field out means what transformers would make of it. Both spellings of the RoPE settings are read:
// transformers 4.x writes "rope_theta" + "rope_scaling" ({"type"|"rope_type": ...}), 5.x writes one
// "rope_parameters" object holding rope_theta and rope_type. Every HF model uses rotate_half RoPE,
// so rope_mode is NeoX (GGUF converters permute the Q/K rows instead and use the Normal mode; the
// HF loader keeps HF's row order and must not permute).
//
// Anything we cannot run faithfully is refused with Unsupported naming the field: another
// architecture, an activation other than SiLU, biases on o_proj or the MLP, partial rotary, and
// RoPE scaling types other than linear and llama3.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/model.h"

namespace ga::hf {

struct HfConfig {
  ModelConfig model;
  std::string architecture;    // "LlamaForCausalLM", "MistralForCausalLM" or "Qwen2ForCausalLM"
  int64_t sliding_window = 0;  // > 0: the model was trained with windowed attention of this size
  // Every top-level key of config.json, rendered as JSON ("config.<key>"), for `inspect`.
  std::vector<MetadataEntry> entries;
};

// Parses the text of a config.json; `source` names it in error messages.
HfConfig parse_config(std::string_view json_text, const std::string& source);
HfConfig read_config(const std::string& path);

// The GGUF name of a Hugging Face tensor name of the Llama family (model.embed_tokens.weight ->
// token_embd.weight, model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight, ...);
// nullopt for a name outside the scheme. The layer index is copied, not checked.
std::optional<std::string> gguf_tensor_name(std::string_view hf_name);

}  // namespace ga::hf
