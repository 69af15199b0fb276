// RWKV-7 as a Hugging Face folder in flash-linear-attention's layout: fla's RWKV7ForCausalLM (model_type "rwkv7",
// fla/models/rwkv7 and fla/layers/rwkv7.py), the layout of the fla-hub/rwkv7-*-world models.
//
// Its state dict is BlinkDL's (what rwkv.cpp's v7 files and llama.cpp's rwkv7 GGUF hold) under other names and
// shapes, with the same values:
//   model.embeddings / model.norm / lm_head              emb / ln_out / head
//   model.layers.0.pre_norm, .N.attn_norm, .N.ffn_norm  blocks.0.ln0, blocks.N.ln1, blocks.N.ln2
//   attn.{r,k,v,o}_proj                                 att.{receptance,key,value,output}
//   attn.x_{r,w,k,v,a,g} [1, 1, C]                      att.x_* [C] (older checkpoints: one x_x [6, C])
//   attn.r_k [H, S]                                     att.r_k [C]
//   attn.{w,a,v,g}_lora.lora.0.weight [D, C]            att.{w,a,v,g}1 (already nn.Linear's [out, in]: no transpose)
//   attn.{w,a,v}_lora.lora.2.weight [C, D] and .bias    att.{w,a,v}2 and att.{w,a,v}0 (the LoRA's bias is BlinkDL's
//                                                       w0 / a0 / v0; g_lora has none); layer 0 has no v_lora
//   attn.g_norm                                         att.ln_x, a group norm whose eps is head_dim * norm_eps
//   ffn.{x_k, key, value}                               ffn.{x_k, key, value}
// fla's decay exp(-0.6065 sigmoid(w_lora(xw))) is BlinkDL's exp(-exp(-softplus(-(w0 + ...)) - 0.5)) written
// another way, so the one RWKV forward (rwkv.cpp) runs it unchanged. Hybrid configs (`attn`: softmax attention
// in some layers), other activations and value_dim != hidden_size are refused by name.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "model/arch/architecture.h"

namespace ga::arch {

void read_rwkv7_hf(const hf::HfConfig& config, ModelConfig& c);
std::optional<HfTensorName> rwkv7_hf_tensor_name(std::string_view hf_name);
void rwkv7_hf_fixup(const hf::HfConfig& config, LoadedModel& model);

// The fla name of one of the forward's tensors ("blocks.3.att.w1" -> "model.layers.3.attn.w_lora.lora.0.weight");
// nullopt for a name outside the table. The fixup's error messages name tensors by it.
std::optional<std::string> rwkv7_fla_name(std::string_view blink_name);

}  // namespace ga::arch
