// RWKV-4 as a Hugging Face folder: transformers' RwkvForCausalLM (model_type "rwkv", models/rwkv/modeling_rwkv.py).
//
// Its state dict is BlinkDL's under other names (rwkv.blocks.N.attention.* for att.*, feed_forward.* for ffn.*,
// rwkv.embeddings for emb, pre_ln for ln0); two values differ from an rwkv.cpp file: time_decay is stored as
// trained (w; the forward uses -exp(w), as rwkv.cpp's converter stores it), and in eval mode transformers
// divides layer il's attention.output and feed_forward.value by 2^(il / rescale_every) and halves the hidden
// state after every rescale_every-th layer. Both are done here the same way, so the logits are transformers'.
#pragma once

#include <optional>
#include <string_view>

#include "model/arch/architecture.h"

namespace ga::arch {

void read_rwkv4_hf(const hf::HfConfig& config, ModelConfig& c);
std::optional<HfTensorName> rwkv4_hf_tensor_name(std::string_view hf_name);
void rwkv4_hf_fixup(const hf::HfConfig& config, LoadedModel& model);

}  // namespace ga::arch
