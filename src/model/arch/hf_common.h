// What every decoder family reads the same way from a Hugging Face config.json: sizes, norms, RoPE in both
// of transformers' spellings, windowed layers. Each family calls read_hf_common with transformers' own
// defaults for it (so a config that leaves a field out means what transformers would make of it) and then
// reads its own fields.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "gpu_accel/model.h"
#include "model/arch/architecture.h"
#include "model/formats/hf_config.h"

namespace ga::arch {

struct HfDefaults {
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::string_view hidden_act = "silu";  // transformers' default for the family
  std::string_view act_key = "hidden_act";
  bool tie_word_embeddings = false;
};

// vocab_size, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size,
// max_position_embeddings, head_dim, rms_norm_eps, tie_word_embeddings, the activation (SiLU or GELU-tanh;
// others refused), RoPE (NeoX order: HF's rotate_half) and `layer_types`. Refuses MLP / o_proj biases.
void read_hf_common(const hf::JsonReader& r, ModelConfig& m, const HfDefaults& d);

// One RoPE parameter object (4.x "rope_scaling", 5.x "rope_parameters" or one of its per-layer-type members):
// its rope_theta (else `theta`) and scaling. `top` is the config root, for fields 4.x keeps at the top
// (original_max_position_embeddings). Refuses types it cannot run exactly (dynamic NTK, ...).
struct HfRope {
  double theta = 10000.0;
  RopeScaling scaling;
};
HfRope read_hf_rope(const hf::JsonReader& params, const hf::JsonReader& top, double theta);

// The RoPE parameter object of the config (5.x rope_parameters, else 4.x rope_scaling) and, when 5.x nests
// one per layer type ({"full_attention": {...}, "sliding_attention": {...}}), the member for `layer_type`.
std::optional<hf::JsonReader> hf_rope_object(const hf::JsonReader& r, std::string_view layer_type);

// `layer_types` (transformers 5: "sliding_attention" / "full_attention" per layer) into swa_layers;
// false when the config has none.
bool read_hf_layer_types(const hf::JsonReader& r, ModelConfig& m);

}  // namespace ga::arch

namespace ga::arch {

// A family's Hugging Face tensor naming: top-level names, names after "model.layers.N." and, for MoE
// checkpoints with one tensor per expert, names after "model.layers.N.<experts_prefix>.E.".
struct HfRename {
  std::string_view hf;
  std::string_view gguf;
};
struct HfNameScheme {
  std::span<const HfRename> top;
  std::span<const HfRename> layer;
  std::span<const std::string_view> experts_prefixes;  // "mlp.experts", "block_sparse_moe.experts"
  std::span<const HfRename> expert;  // "gate_proj.weight" -> "ffn_gate_exps.weight"
};
// nullopt for a name outside the scheme. The layer index is copied, not checked. transformers 5's fused
// expert tensors (experts.gate_up_proj / experts.down_proj) are recognized under the experts prefixes too.
std::optional<HfTensorName> map_hf_tensor_name(std::string_view hf_name, const HfNameScheme& scheme);

// The Llama-family names (embed_tokens, input_layernorm, self_attn.{q,k,v,o}_proj (+ biases),
// post_attention_layernorm -> ffn_norm, mlp.{gate,up,down}_proj, norm, lm_head).
extern const HfNameScheme kLlamaHfNames;

}  // namespace ga::arch

namespace ga::arch {

// Adds (or replaces) a float32 tensor whose bytes the model keeps in its storage (RoPE factors HF derives from
// the config, norm weights a family stores differently from GGUF).
void put_f32_tensor(LoadedModel& model, const std::string& name, std::vector<float> values,
                    std::vector<uint64_t> ne);
// A 1-D tensor's values as floats (F32 / F16 / BF16 checkpoints).
std::vector<float> tensor_f32(const WeightView& w);

}  // namespace ga::arch
