// The Qwen family beyond Qwen2: GGUF "qwen3" / HF Qwen3ForCausalLM (per-head RMSNorm of q and k before RoPE,
// head_dim independent of hidden_size), "qwen2moe" / Qwen2MoeForCausalLM (q/k/v biases, routed experts that
// are not renormalized, and a shared expert gated by sigmoid(w . x)) and "qwen3moe" / Qwen3MoeForCausalLM
// (Qwen3's attention, routed experts renormalized: norm_topk_prob). All rotate_half (NeoX). HF defaults are
// transformers' Qwen3Config / Qwen2MoeConfig / Qwen3MoeConfig; in GGUF, llama.cpp renormalizes qwen3moe's top-k
// and never qwen2moe's, whatever the original config said, and so do we for GGUF files.
#include "gpu_accel/error.h"
#include "model/arch/families.h"
#include "model/arch/gguf_common.h"
#include "model/arch/hf_common.h"

namespace ga::arch {
namespace {

constexpr HfRename kQwenLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};
constexpr std::string_view kQwenExperts[] = {"mlp.experts"};
constexpr HfRename kQwenExpert[] = {
    {"gate_proj.weight", "ffn_gate_exps.weight"},
    {"up_proj.weight", "ffn_up_exps.weight"},
    {"down_proj.weight", "ffn_down_exps.weight"},
};
const HfNameScheme kQwenHfNames{kLlamaHfNames.top, kQwenLayer, kQwenExperts, kQwenExpert};

std::optional<HfTensorName> qwen_hf_name(std::string_view hf_name) { return map_hf_tensor_name(hf_name, kQwenHfNames); }

void read_qwen3_gguf(const GgufKeys& hp, ModelConfig& c) {
  read_gguf_common(hp, c);
  c.rope_mode = RopeMode::NeoX;
  c.transformer.qk_norm = true;
}

void read_qwen2moe_gguf(const GgufKeys& hp, ModelConfig& c) {
  read_gguf_common(hp, c, false);
  c.rope_mode = RopeMode::NeoX;
  read_gguf_experts(hp, c);
  GA_CHECK(c.transformer.n_expert > 0, InvalidFormat, "gguf: ", hp.key("expert_count"), " is missing");
  c.transformer.expert_norm_topk = false;
}

void read_qwen3moe_gguf(const GgufKeys& hp, ModelConfig& c) {
  read_gguf_common(hp, c, false);
  c.rope_mode = RopeMode::NeoX;
  c.transformer.qk_norm = true;
  read_gguf_experts(hp, c);
  GA_CHECK(c.transformer.n_expert > 0, InvalidFormat, "gguf: ", hp.key("expert_count"), " is missing");
  c.transformer.expert_norm_topk = true;
}

// Qwen windows (use_sliding_window, max_window_layers) as Qwen2's, and the experts' fields.
void read_qwen_common_hf(const hf::JsonReader& r, ModelConfig& m, bool qwen3) {
  HfDefaults d;
  d.max_position_embeddings = 32768;
  read_hf_common(r, m, d);
  if (qwen3 && !r.has("head_dim")) {
    m.head_dim = 128;  // Qwen3Config / Qwen3MoeConfig default, independent of hidden_size
    m.n_rot = m.head_dim;
  }
  TransformerParams& tp = m.transformer;
  if (!r.boolean("use_sliding_window", false)) {
    tp.swa_layers.clear();
  } else {
    tp.sliding_window = r.positive_int("sliding_window", int64_t{4096});
    if (tp.swa_layers.empty()) {
      const int64_t first = r.integer("max_window_layers", 28);
      tp.swa_layers.assign(static_cast<size_t>(m.n_layer), 0);
      for (int64_t il = first; il < m.n_layer; ++il) tp.swa_layers[static_cast<size_t>(il)] = 1;
    }
  }
}

void read_moe_hf(const hf::JsonReader& r, ModelConfig& m, int64_t experts, int64_t used, int64_t ff_exp,
                 bool norm_default) {
  TransformerParams& tp = m.transformer;
  // transformers 5's Qwen3MoeConfig calls it num_local_experts, Qwen2MoeConfig num_experts
  tp.n_expert = r.positive_int("num_experts", r.positive_int("num_local_experts", experts));
  tp.n_expert_used = r.positive_int("num_experts_per_tok", used);
  tp.n_ff_exp = r.positive_int("moe_intermediate_size", ff_exp);
  tp.expert_norm_topk = r.boolean("norm_topk_prob", norm_default);
  GA_CHECK(r.integer("decoder_sparse_step", 1) == 1, Unsupported, r.source(),
           ": decoder_sparse_step other than 1 (dense layers between the MoE ones) is not supported");
  GA_CHECK(!r.has("mlp_only_layers") || r.integers("mlp_only_layers").empty(), Unsupported, r.source(),
           ": mlp_only_layers (dense layers among the MoE ones) is not supported");
}

void read_qwen3_hf(const hf::HfConfig& cfg, ModelConfig& m) {
  m.arch = "qwen3";
  read_qwen_common_hf(cfg.root, m, true);
  m.transformer.qk_norm = true;
}

void read_qwen2moe_hf(const hf::HfConfig& cfg, ModelConfig& m) {
  const hf::JsonReader& r = cfg.root;
  m.arch = "qwen2moe";
  read_qwen_common_hf(r, m, false);
  m.qkv_bias = true;  // Qwen2MoeAttention has q/k/v biases
  read_moe_hf(r, m, 60, 4, 1408, false);
  m.transformer.n_ff_shexp = r.positive_int("shared_expert_intermediate_size", int64_t{5632});
}

void read_qwen3moe_hf(const hf::HfConfig& cfg, ModelConfig& m) {
  const hf::JsonReader& r = cfg.root;
  m.arch = "qwen3moe";
  read_qwen_common_hf(r, m, true);
  m.transformer.qk_norm = true;
  read_moe_hf(r, m, 128, 8, 768, false);
}

// HF stores the shared expert's gate as a [1, hidden] linear; GGUF as a [hidden] vector.
void qwen2moe_hf_fixup(const hf::HfConfig& /*cfg*/, LoadedModel& model) {
  for (auto& [name, w] : model.weights) {
    if (name.ends_with(".ffn_gate_inp_shexp.weight") && w.ne.size() == 2 && w.ne[1] == 1) w.ne.resize(1);
  }
}

void write_qwen_gguf(const ModelConfig& c, gguf::Writer& w) {
  write_gguf_common(c, w);
  write_gguf_experts(c, w);
}

}  // namespace

std::vector<ArchInfo> qwen_family() {
  ArchInfo qwen3 = decoder_arch("qwen3");
  qwen3.hf_classes = {"Qwen3ForCausalLM"};
  qwen3.hf_model_types = {"qwen3"};
  qwen3.read_gguf = read_qwen3_gguf;
  qwen3.write_gguf = write_qwen_gguf;
  qwen3.read_hf = read_qwen3_hf;
  qwen3.hf_tensor_name = qwen_hf_name;

  ArchInfo qwen2moe = decoder_arch("qwen2moe");
  qwen2moe.hf_classes = {"Qwen2MoeForCausalLM"};
  qwen2moe.hf_model_types = {"qwen2_moe"};
  qwen2moe.read_gguf = read_qwen2moe_gguf;
  qwen2moe.write_gguf = write_qwen_gguf;
  qwen2moe.read_hf = read_qwen2moe_hf;
  qwen2moe.hf_tensor_name = qwen_hf_name;
  qwen2moe.hf_fixup = qwen2moe_hf_fixup;

  ArchInfo qwen3moe = decoder_arch("qwen3moe");
  qwen3moe.hf_classes = {"Qwen3MoeForCausalLM"};
  qwen3moe.hf_model_types = {"qwen3_moe"};
  qwen3moe.read_gguf = read_qwen3moe_gguf;
  qwen3moe.write_gguf = write_qwen_gguf;
  qwen3moe.read_hf = read_qwen3moe_hf;
  qwen3moe.hf_tensor_name = qwen_hf_name;
  return {qwen3, qwen2moe, qwen3moe};
}

}  // namespace ga::arch
