// Phi-3: GGUF "phi3" / HF Phi3ForCausalLM (Phi-3 and Phi-3.5 mini/medium, Phi-4 and Phi-4-mini).
//
// What Phi-3 changes in the decoder (decoder.h): one fused q/k/v projection (attn_qkv, rows [q | k | v]) and
// one fused gate/up (ffn_up of 2 n_ff rows, [gate | up]); LongRoPE for the 128k models (per-pair divisors,
// short and long, and an attention factor; rope.h); a sliding window on every layer for the models that
// declare one (Phi-3-mini-4k: 2047). llama.cpp disables Phi-3's window (its phi3.cpp: the converters do not
// write the pattern) and so matches the model only while the context fits in it; we apply the window the
// model was trained with, from GGUF and HF alike. GGUF marks LongRoPE by the presence of the
// rope_factors_long / rope_factors_short tensors and stores the attention factor as rope.scaling.attn_factor.
#include "gpu_accel/error.h"
#include "model/arch/families.h"
#include "model/arch/gguf_common.h"
#include "model/arch/hf_common.h"

namespace ga::arch {
namespace {

constexpr HfRename kPhi3Layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
const HfNameScheme kPhi3HfNames{kLlamaHfNames.top, kPhi3Layer, {}, {}};

void window_every_layer(ModelConfig& c) {
  if (c.transformer.sliding_window > 0) c.transformer.swa_layers.assign(static_cast<size_t>(c.n_layer), 1);
}

void read_phi3_gguf(const GgufKeys& hp, ModelConfig& c) {
  read_gguf_common(hp, c);
  c.rope_mode = RopeMode::NeoX;
  TransformerParams& tp = c.transformer;
  tp.fused_qkv = hp.has_tensor("blk.0.attn_qkv.weight");  // llama.cpp also reads separate q/k/v
  tp.fused_gate_up = true;
  tp.sliding_window = hp.optional_int("attention.sliding_window").value_or(0);
  window_every_layer(c);
  if (hp.has_tensor("rope_factors_long.weight") || hp.has_tensor("rope_factors_short.weight")) {
    c.rope_scaling.type = RopeScalingType::LongRope;
  }
}

void read_phi3_hf(const hf::HfConfig& cfg, ModelConfig& m) {
  const hf::JsonReader& r = cfg.root;
  HfDefaults d;
  d.max_position_embeddings = 4096;
  d.rms_norm_eps = 1e-5;
  m.arch = "phi3";
  read_hf_common(r, m, d);
  TransformerParams& tp = m.transformer;
  tp.fused_qkv = true;
  tp.fused_gate_up = true;
  tp.sliding_window = r.has("sliding_window") ? r.positive_int("sliding_window") : 0;
  window_every_layer(m);
}

// LongRoPE's factor lists become the tensors GGUF stores them as.
void phi3_hf_fixup(const hf::HfConfig& cfg, LoadedModel& model) {
  if (model.config.rope_scaling.type != RopeScalingType::LongRope) return;
  const std::optional<hf::JsonReader> rope = hf_rope_object(cfg.root, "full_attention");
  GA_CHECK(rope.has_value(), InvalidFormat, cfg.root.source(), ": longrope without its parameters");
  const uint64_t half = static_cast<uint64_t>(model.config.n_rot / 2);
  for (const auto& [key, name] : {std::pair<const char*, const char*>{"short_factor", "rope_factors_short.weight"},
                                  {"long_factor", "rope_factors_long.weight"}}) {
    const std::vector<double> values = rope->numbers(key);
    GA_CHECK(values.size() == half, InvalidFormat, cfg.root.source(), ": longrope ", key, " has ", values.size(),
             " values, expected ", half);
    put_f32_tensor(model, name, std::vector<float>(values.begin(), values.end()), {half});
  }
}

void write_phi3_gguf(const ModelConfig& c, gguf::Writer& w) {
  write_gguf_common(c, w);
  w.set(c.arch + ".attention.sliding_window",
        gguf::Value::u32(static_cast<uint32_t>(c.transformer.sliding_window)));
}

}  // namespace

std::vector<ArchInfo> phi3_family() {
  ArchInfo phi3 = decoder_arch("phi3");
  phi3.hf_classes = {"Phi3ForCausalLM"};
  phi3.hf_model_types = {"phi3"};
  phi3.read_gguf = read_phi3_gguf;
  phi3.write_gguf = write_phi3_gguf;
  phi3.read_hf = read_phi3_hf;
  phi3.hf_tensor_name = [](std::string_view n) { return map_hf_tensor_name(n, kPhi3HfNames); };
  phi3.hf_fixup = phi3_hf_fixup;
  return {phi3};
}

}  // namespace ga::arch
