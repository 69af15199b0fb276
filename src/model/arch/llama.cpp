// The Llama family: GGUF "llama" (Llama 1/2/3, Mistral, SmolLM, TinyLlama, and Mixtral: "llama" with
// ffn_*_exps) and "qwen2"; Hugging Face LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM and
// Qwen2ForCausalLM. The baseline of the decoder (decoder.h): pre-norm, SwiGLU, RoPE; Qwen2 adds q/k/v biases
// and HF's rotate_half order (NeoX), Mistral a sliding window on every layer, Mixtral the experts.
//
// HF defaults are transformers' LlamaConfig / MistralConfig / MixtralConfig / Qwen2Config. GGUF files of this
// family store q/k rows permuted for llama.cpp's adjacent-pair RoPE (Normal mode); HF folders keep HF's order
// and run NeoX. llama.cpp ignores Mistral's window for GGUF "llama" (the file has no such key); an HF folder
// that declares one gets it.
#include "gpu_accel/error.h"
#include "model/arch/families.h"
#include "model/arch/gguf_common.h"
#include "model/arch/hf_common.h"

namespace ga::arch {
namespace {

constexpr std::string_view kMixtralExperts[] = {"block_sparse_moe.experts", "mlp.experts"};
constexpr HfRename kMixtralExpert[] = {
    {"w1.weight", "ffn_gate_exps.weight"},
    {"w3.weight", "ffn_up_exps.weight"},
    {"w2.weight", "ffn_down_exps.weight"},
    {"gate_proj.weight", "ffn_gate_exps.weight"},
    {"up_proj.weight", "ffn_up_exps.weight"},
    {"down_proj.weight", "ffn_down_exps.weight"},
};
constexpr HfRename kMixtralLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
};
const HfNameScheme kMixtralHfNames{kLlamaHfNames.top, kMixtralLayer, kMixtralExperts, kMixtralExpert};

void read_llama_gguf(const GgufKeys& hp, ModelConfig& c) {
  read_gguf_common(hp, c);
  c.rope_mode = RopeMode::Normal;
  read_gguf_experts(hp, c);  // Mixtral: the experts' length is feed_forward_length
  if (c.transformer.n_expert > 0) c.transformer.expert_norm_topk = true;  // llama.cpp's build_moe_ffn for llama
}

void read_qwen2_gguf(const GgufKeys& hp, ModelConfig& c) {
  read_gguf_common(hp, c);
  c.rope_mode = RopeMode::NeoX;
}

void read_llama_hf(const hf::HfConfig& cfg, ModelConfig& m) {
  const hf::JsonReader& r = cfg.root;
  const bool mistral = cfg.architecture == "MistralForCausalLM" || cfg.model_type == "mistral";
  const bool mixtral = cfg.architecture == "MixtralForCausalLM" || cfg.model_type == "mixtral";
  HfDefaults d;
  if (mistral || mixtral) {
    d.max_position_embeddings = 4096 * 32;
    d.rms_norm_eps = mixtral ? 1e-5 : 1e-6;
    d.rope_theta = mixtral ? 1e6 : 10000.0;
  }
  m.arch = "llama";
  read_hf_common(r, m, d);
  // Mistral's and Mixtral's window covers every layer unless layer_types says otherwise. Absent: the
  // config class's default (MistralConfig 4096, MixtralConfig none); null: no window.
  if (mistral || mixtral) {
    TransformerParams& tp = m.transformer;
    if (r.has("sliding_window")) {
      tp.sliding_window = r.positive_int("sliding_window");
    } else if (!r.contains("sliding_window") && mistral) {
      tp.sliding_window = 4096;
    }
    if (tp.sliding_window > 0 && tp.swa_layers.empty()) tp.swa_layers.assign(static_cast<size_t>(m.n_layer), 1);
  }
  if (mixtral) {
    TransformerParams& tp = m.transformer;
    tp.n_expert = r.positive_int("num_local_experts", int64_t{8});
    tp.n_expert_used = r.positive_int("num_experts_per_tok", int64_t{2});
    tp.n_ff_exp = m.n_ff;
    tp.expert_norm_topk = true;  // MixtralSparseMoeBlock renormalizes its top-k
  }
}

void read_qwen2_hf(const hf::HfConfig& cfg, ModelConfig& m) {
  const hf::JsonReader& r = cfg.root;
  HfDefaults d;
  d.max_position_embeddings = 32768;
  m.arch = "qwen2";
  read_hf_common(r, m, d);
  m.qkv_bias = true;  // Qwen2Attention always has q/k/v biases
  TransformerParams& tp = m.transformer;
  if (!r.boolean("use_sliding_window", false)) {
    tp.swa_layers.clear();  // layer_types may list windows that use_sliding_window switches off
    return;
  }
  tp.sliding_window = r.positive_int("sliding_window", int64_t{4096});
  if (tp.swa_layers.empty()) {  // transformers: layers from max_window_layers on use the window
    const int64_t first = r.integer("max_window_layers", 28);
    tp.swa_layers.assign(static_cast<size_t>(m.n_layer), 0);
    for (int64_t il = first; il < m.n_layer; ++il) tp.swa_layers[static_cast<size_t>(il)] = 1;
  }
}

std::optional<HfTensorName> llama_hf_name(std::string_view hf_name) {
  if (auto n = map_hf_tensor_name(hf_name, kLlamaHfNames)) return n;
  return map_hf_tensor_name(hf_name, kMixtralHfNames);
}

void write_llama_gguf(const ModelConfig& c, gguf::Writer& w) {
  write_gguf_common(c, w);
  write_gguf_experts(c, w);
}

}  // namespace

std::vector<ArchInfo> llama_family() {
  ArchInfo llama = decoder_arch("llama");
  llama.hf_classes = {"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM"};
  llama.hf_model_types = {"llama", "mistral", "mixtral"};
  llama.read_gguf = read_llama_gguf;
  llama.write_gguf = write_llama_gguf;
  llama.read_hf = read_llama_hf;
  llama.hf_tensor_name = llama_hf_name;

  ArchInfo qwen2 = decoder_arch("qwen2");
  qwen2.hf_classes = {"Qwen2ForCausalLM"};
  qwen2.hf_model_types = {"qwen2"};
  qwen2.read_gguf = read_qwen2_gguf;
  qwen2.write_gguf = write_llama_gguf;
  qwen2.read_hf = read_qwen2_hf;
  qwen2.hf_tensor_name = [](std::string_view n) { return map_hf_tensor_name(n, kLlamaHfNames); };
  return {llama, qwen2};
}

}  // namespace ga::arch
