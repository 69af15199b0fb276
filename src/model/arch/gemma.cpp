// The Gemma family: GGUF "gemma2" / HF Gemma2ForCausalLM and "gemma3" / HF Gemma3ForCausalLM (the text model).
//
// What Gemma changes in the decoder (decoder.h): embeddings times sqrt(n_embd); RMSNorm weights used as
// (1 + w) (GGUF converters store w + 1, so the HF loader adds 1 here and the forward sees one convention);
// norms before and after attention and the FFN; GeGLU (gelu_pytorch_tanh); scores scaled by
// query_pre_attn_scalar^-1/2. Gemma 2: soft-capped attention scores and logits, every other layer windowed
// (even ones). Gemma 3: q/k RMSNorm, five windowed layers to one global, the windowed layers on their own
// RoPE base (10000) without the global layers' scaling.
//
// GGUF follows llama.cpp: attention scale 1/sqrt(head_dim) except for the 27B shapes (46 and 62 layers),
// where it is 1/sqrt(n_embd / n_head); Gemma 2's soft-caps default to 50 / 30 and its window to 4096 when
// the keys are absent; Gemma 3's window period is 6 unless attention.sliding_window_pattern says otherwise.
#include <cmath>

#include "gpu_accel/error.h"
#include "model/arch/families.h"
#include "model/arch/gguf_common.h"
#include "model/arch/hf_common.h"

namespace ga::arch {
namespace {

constexpr HfRename kGemmaLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
const HfNameScheme kGemmaHfNames{kLlamaHfNames.top, kGemmaLayer, {}, {}};

constexpr int64_t kGemma2Layers27B = 46;
constexpr int64_t kGemma3Layers27B = 62;

void set_gemma_common(ModelConfig& c) {
  TransformerParams& tp = c.transformer;
  tp.post_norms = true;
  tp.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.n_embd)));
  tp.ffn_act = FfnActivation::GeluTanh;
}

// llama.cpp's Gemma attention scale (gemma_pytorch's config: the 27B models scale by n_embd / n_head).
void set_gguf_attn_scale(ModelConfig& c, int64_t layers_27b) {
  const double d = c.n_layer == layers_27b ? static_cast<double>(c.n_embd / c.n_head) : static_cast<double>(c.head_dim);
  c.transformer.attn_scale = static_cast<float>(1.0 / std::sqrt(d));
}

void read_gemma2_gguf(const GgufKeys& hp, ModelConfig& c) {
  read_gguf_common(hp, c);
  c.rope_mode = RopeMode::NeoX;
  set_gemma_common(c);
  TransformerParams& tp = c.transformer;
  tp.attn_softcap = static_cast<float>(hp.optional_float("attn_logit_softcapping").value_or(50.0));
  tp.final_softcap = static_cast<float>(hp.optional_float("final_logit_softcapping").value_or(30.0));
  tp.sliding_window = hp.optional_int("attention.sliding_window").value_or(4096);
  set_swa_period(hp, c, 2);
  tp.rope_freq_base_swa = static_cast<float>(hp.optional_float("rope.freq_base_swa").value_or(c.rope_freq_base));
  tp.rope_scaling_swa = true;  // llama.cpp: the windowed layers keep the train-time scale too
  set_gguf_attn_scale(c, kGemma2Layers27B);
}

void read_gemma3_gguf(const GgufKeys& hp, ModelConfig& c) {
  read_gguf_common(hp, c);
  c.rope_mode = RopeMode::NeoX;
  set_gemma_common(c);
  TransformerParams& tp = c.transformer;
  tp.qk_norm = true;
  tp.final_softcap = static_cast<float>(hp.optional_float("final_logit_softcapping").value_or(0.0));
  tp.sliding_window = hp.optional_int("attention.sliding_window").value_or(0);
  if (tp.sliding_window > 0) set_swa_period(hp, c, 6);
  tp.rope_freq_base_swa = static_cast<float>(hp.optional_float("rope.freq_base_swa").value_or(10000.0));
  tp.rope_scaling_swa = false;
  set_gguf_attn_scale(c, kGemma3Layers27B);
}

void read_gemma_hf(const hf::HfConfig& cfg, ModelConfig& m, bool gemma3) {
  const hf::JsonReader& r = cfg.root;
  HfDefaults d;
  d.max_position_embeddings = gemma3 ? 131072 : 8192;
  d.rope_theta = gemma3 ? 1e6 : 10000.0;
  d.hidden_act = "gelu_pytorch_tanh";
  d.act_key = "hidden_activation";
  d.tie_word_embeddings = true;
  m.arch = gemma3 ? "gemma3" : "gemma2";
  read_hf_common(r, m, d);
  if (!r.has("head_dim")) {
    m.head_dim = 256;  // Gemma2Config / Gemma3TextConfig default
    m.n_rot = m.head_dim;
  }
  set_gemma_common(m);
  TransformerParams& tp = m.transformer;
  tp.qk_norm = gemma3;
  tp.attn_scale = static_cast<float>(1.0 / std::sqrt(r.number("query_pre_attn_scalar", 256.0)));
  // Absent: the config class's default; null: none.
  const auto cap = [&](std::string_view key, double fallback) {
    if (r.has(key)) return static_cast<float>(r.number(key, fallback));
    return r.contains(key) ? 0.0f : static_cast<float>(fallback);
  };
  tp.attn_softcap = cap("attn_logit_softcapping", gemma3 ? 0.0 : 50.0);
  tp.final_softcap = cap("final_logit_softcapping", gemma3 ? 0.0 : 30.0);
  tp.sliding_window = r.has("sliding_window") ? r.positive_int("sliding_window") : (r.contains("sliding_window") ? 0 : 4096);
  if (tp.swa_layers.empty()) {  // transformers 4.x: the pattern; 5.x writes layer_types
    const int64_t period = gemma3 ? r.positive_int("sliding_window_pattern", int64_t{6}) : 2;
    tp.swa_layers.assign(static_cast<size_t>(m.n_layer), 0);
    for (int64_t il = 0; il < m.n_layer; ++il) tp.swa_layers[static_cast<size_t>(il)] = (il + 1) % period != 0 ? 1 : 0;
  }
  if (!gemma3) {
    tp.rope_freq_base_swa = m.rope_freq_base;
    tp.rope_scaling_swa = true;
    return;
  }
  // Gemma 3's windowed layers: their own base, no scaling (4.x rope_local_base_freq; 5.x the
  // "sliding_attention" member of rope_parameters).
  tp.rope_scaling_swa = false;
  tp.rope_freq_base_swa = static_cast<float>(r.number("rope_local_base_freq", 10000.0));
  if (const std::optional<hf::JsonReader> params = r.object("rope_parameters"); params && params->is_object_of_objects()) {
    if (const std::optional<hf::JsonReader> local = hf_rope_object(r, "sliding_attention")) {
      const HfRope lr = read_hf_rope(*local, r, tp.rope_freq_base_swa);
      GA_CHECK(lr.scaling.type == RopeScalingType::None, Unsupported, r.source(),
               ": RoPE scaling on Gemma 3's sliding-window layers is not supported");
      tp.rope_freq_base_swa = static_cast<float>(lr.theta);
    }
  }
}

// HF stores the norm weights as w (the forward multiplies by 1 + w); GGUF and our forward use 1 + w.
void gemma_hf_fixup(const hf::HfConfig& /*cfg*/, LoadedModel& model) {
  std::vector<std::string> norms;
  for (const auto& [name, w] : model.weights) {
    if (name.ends_with("norm.weight") && w.ne.size() == 1) norms.push_back(name);
  }
  for (const std::string& name : norms) {
    std::vector<float> v = tensor_f32(model.weights.at(name));
    for (float& x : v) x += 1.0f;
    const std::vector<uint64_t> ne = model.weights.at(name).ne;
    put_f32_tensor(model, name, std::move(v), ne);
  }
}

void refuse_multimodal(const hf::HfConfig& cfg, ModelConfig&) {
  GA_THROW(Unsupported, cfg.root.source(), ": ", cfg.architecture,
           " is a vision-language checkpoint; gpu_accel runs the text model alone (Gemma3ForCausalLM)");
}

void write_gemma_gguf(const ModelConfig& c, gguf::Writer& w) {
  write_gguf_common(c, w);
  const TransformerParams& tp = c.transformer;
  const std::string a = c.arch + ".";
  if (c.arch == "gemma2") w.set(a + "attn_logit_softcapping", gguf::Value::f32(tp.attn_softcap));
  if (c.arch == "gemma2" || tp.final_softcap > 0) w.set(a + "final_logit_softcapping", gguf::Value::f32(tp.final_softcap));
  if (tp.sliding_window > 0) w.set(a + "attention.sliding_window", gguf::Value::u32(static_cast<uint32_t>(tp.sliding_window)));
  if (c.arch == "gemma3") w.set(a + "rope.freq_base_swa", gguf::Value::f32(tp.rope_freq_base_swa));
}

}  // namespace

std::vector<ArchInfo> gemma_family() {
  ArchInfo gemma2 = decoder_arch("gemma2");
  gemma2.hf_classes = {"Gemma2ForCausalLM"};
  gemma2.hf_model_types = {"gemma2"};
  gemma2.read_gguf = read_gemma2_gguf;
  gemma2.write_gguf = write_gemma_gguf;
  gemma2.read_hf = [](const hf::HfConfig& cfg, ModelConfig& m) { read_gemma_hf(cfg, m, false); };
  gemma2.hf_tensor_name = [](std::string_view n) { return map_hf_tensor_name(n, kGemmaHfNames); };
  gemma2.hf_fixup = gemma_hf_fixup;

  ArchInfo gemma3 = gemma2;
  gemma3.name = "gemma3";
  gemma3.hf_classes = {"Gemma3ForCausalLM"};
  gemma3.hf_model_types = {"gemma3_text"};
  gemma3.read_gguf = read_gemma3_gguf;
  gemma3.read_hf = [](const hf::HfConfig& cfg, ModelConfig& m) { read_gemma_hf(cfg, m, true); };

  // Recognized so that the error says what is supported instead of "unknown architecture".
  ArchInfo gemma3_vl = gemma3;
  gemma3_vl.name = "gemma3-vision";
  gemma3_vl.hf_classes = {"Gemma3ForConditionalGeneration"};
  gemma3_vl.hf_model_types = {"gemma3"};
  gemma3_vl.read_gguf = nullptr;
  gemma3_vl.write_gguf = nullptr;
  gemma3_vl.read_hf = refuse_multimodal;
  return {gemma2, gemma3, gemma3_vl};
}

}  // namespace ga::arch
