// config.json -> ModelConfig through the architectures' readers: the fields, transformers' defaults, both
// RoPE spellings (4.x rope_theta + rope_scaling, 5.x rope_parameters), windowed layers, the families' own
// fields, the HF tensor names, and the refusals that name what is unsupported.
//
// The configs below follow what transformers' save_pretrained writes for each class (the defaults
// checked are those of LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config / Gemma2Config /
// Gemma3TextConfig / Phi3Config / MixtralConfig / Qwen2MoeConfig / Qwen3MoeConfig), so each expectation is
// a fact about transformers, not about our parser.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "gpu_accel/error.h"
#include "model/arch/architecture.h"
#include "model/formats/hf_config.h"

namespace ga::hf {
namespace {

struct Parsed {
  HfConfig hf;
  ModelConfig model;
  const std::string& architecture = hf.architecture;
  const std::vector<MetadataEntry>& entries = hf.entries;
  int64_t sliding_window() const { return model.transformer.sliding_window; }
};

Parsed parse(const std::string& text) {
  HfConfig hf = parse_config(text, "config.json");
  ModelConfig m = arch::config_from_hf(hf);
  return Parsed{std::move(hf), std::move(m)};
}

void expect_error(const std::string& text, ErrorKind kind, const std::string& needle) {
  try {
    parse(text);
    FAIL() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("config.json"), std::string::npos) << e.message();
  }
}

// A TinyLlama-1.1B-style config as transformers 4.x writes it.
const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
  "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0, "rope_scaling": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "attention_bias": false, "mlp_bias": false, "head_dim": null
})";

TEST(HfConfig, Llama) {
  const Parsed c = parse(kLlama);
  const ModelConfig& m = c.model;
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.arch, "llama");
  EXPECT_EQ(m.n_embd, 2048);
  EXPECT_EQ(m.n_ff, 5632);
  EXPECT_EQ(m.n_layer, 22);
  EXPECT_EQ(m.n_head, 32);
  EXPECT_EQ(m.n_head_kv, 4);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.n_rot, 64);
  EXPECT_EQ(m.n_vocab, 32000);
  EXPECT_EQ(m.n_ctx_train, 2048);
  EXPECT_FLOAT_EQ(m.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(m.rope_freq_base, 10000.0f);
  EXPECT_EQ(m.rope_mode, RopeMode::NeoX) << "HF uses rotate_half";
  EXPECT_EQ(m.rope_scaling.type, RopeScalingType::None);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_EQ(c.sliding_window(), 0);
  bool found = false;
  for (const auto& e : c.entries) found |= e.key == "config.hidden_size" && e.value == "2048";
  EXPECT_TRUE(found) << "config keys are kept for inspect";
}

TEST(HfConfig, TransformersDefaults) {
  // Only the required fields: LlamaConfig's defaults fill the rest.
  const Parsed c = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 256,
    "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000})");
  EXPECT_EQ(c.model.n_head_kv, 8) << "num_key_value_heads defaults to num_attention_heads";
  EXPECT_EQ(c.model.n_ctx_train, 2048);
  EXPECT_FLOAT_EQ(c.model.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.model.rope_freq_base, 10000.0f);
  EXPECT_FALSE(c.model.tied_embeddings);
  EXPECT_EQ(c.model.head_dim, 32);
}

TEST(HfConfig, MistralHeadDimAndSlidingWindow) {
  const std::string base = R"("architectures": ["MistralForCausalLM"], "hidden_size": 5120,
    "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 131072, "head_dim": 128, "rope_theta": 1000000.0)";
  const Parsed c = parse("{" + base + R"(, "sliding_window": 4096})");
  EXPECT_EQ(c.model.arch, "llama");
  EXPECT_EQ(c.model.head_dim, 128) << "head_dim is not hidden_size / heads here (160)";
  EXPECT_EQ(c.model.n_rot, 128);
  EXPECT_FLOAT_EQ(c.model.rope_freq_base, 1e6f);
  EXPECT_EQ(c.sliding_window(), 4096);
  EXPECT_EQ(c.model.transformer.swa_layers, std::vector<uint8_t>(40, 1)) << "every layer is windowed";
  EXPECT_EQ(c.model.n_ctx_train, 4096 * 32) << "MistralConfig default";
  EXPECT_EQ(parse("{" + base + R"(, "sliding_window": null})").sliding_window(), 0);
  EXPECT_EQ(parse("{" + base + "}").sliding_window(), 4096) << "MistralConfig default window";
}

TEST(HfConfig, Qwen2) {
  const std::string base = R"("architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "vocab_size": 151936, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "tie_word_embeddings": true, "sliding_window": 32768, "max_window_layers": 21)";
  const Parsed c = parse("{" + base + R"(, "use_sliding_window": false})");
  EXPECT_EQ(c.model.arch, "qwen2");
  EXPECT_TRUE(c.model.qkv_bias);
  EXPECT_TRUE(c.model.tied_embeddings);
  EXPECT_EQ(c.model.head_dim, 64);
  EXPECT_EQ(c.model.rope_mode, RopeMode::NeoX);
  EXPECT_EQ(c.sliding_window(), 0) << "the window only applies with use_sliding_window";
  const Parsed w = parse("{" + base + R"(, "use_sliding_window": true})");
  EXPECT_EQ(w.sliding_window(), 32768);
  std::vector<uint8_t> layers(24, 0);
  for (size_t il = 21; il < 24; ++il) layers[il] = 1;
  EXPECT_EQ(w.model.transformer.swa_layers, layers) << "layers from max_window_layers on";
}

TEST(HfConfig, RopeScalingTransformers4) {
  const Parsed c = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10,
    "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  const RopeScaling& s = c.model.rope_scaling;
  EXPECT_EQ(s.type, RopeScalingType::Llama3);
  EXPECT_FLOAT_EQ(s.factor, 8.0f);
  EXPECT_FLOAT_EQ(s.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(s.high_freq_factor, 4.0f);
  EXPECT_EQ(s.original_context, 8192);
  EXPECT_FLOAT_EQ(c.model.rope_freq_base, 500000.0f);

  // The old spelling "type" of linear scaling.
  const Parsed lin = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10,
    "rope_scaling": {"type": "linear", "factor": 4.0}})");
  EXPECT_EQ(lin.model.rope_scaling.type, RopeScalingType::Linear);
  EXPECT_FLOAT_EQ(lin.model.rope_scaling.factor, 4.0f);
}

TEST(HfConfig, RopeParametersTransformers5) {
  const Parsed c = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  EXPECT_EQ(c.model.rope_scaling.type, RopeScalingType::Llama3);
  EXPECT_FLOAT_EQ(c.model.rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(c.model.rope_freq_base, 500000.0f) << "rope_theta lives inside rope_parameters in 5.x";

  const Parsed d = parse(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})");
  EXPECT_EQ(d.model.rope_scaling.type, RopeScalingType::None);
  EXPECT_FLOAT_EQ(d.model.rope_freq_base, 1e6f);
}

TEST(HfConfig, Refusals) {
  const std::string dims = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
    "num_attention_heads": 4, "vocab_size": 10)";
  expect_error(R"({"architectures": ["GPT2LMHeadModel"], )" + dims + "}", ErrorKind::Unsupported, "GPT2LMHeadModel");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
    "mscale": 0.707}, )" + dims + "}",
               ErrorKind::Unsupported, "mscale");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"type": "dynamic", "factor": 2.0}, )" +
                   dims + "}",
               ErrorKind::Unsupported, "dynamic");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "gelu", )" + dims + "}",
               ErrorKind::Unsupported, "gelu");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "mlp_bias": true, )" + dims + "}", ErrorKind::Unsupported,
               "mlp_bias");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": true, )" + dims + "}",
               ErrorKind::Unsupported, "attention_bias");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "partial_rotary_factor": 0.5, )" + dims + "}",
               ErrorKind::Unsupported, "partial_rotary_factor");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 1, "num_attention_heads": 4})",
               ErrorKind::InvalidFormat, "vocab_size");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "num_key_value_heads": 3, )" + dims + "}",
               ErrorKind::InvalidFormat, "num_key_value_heads");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "64", "intermediate_size": 128,
    "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10})",
               ErrorKind::InvalidFormat, "hidden_size");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )", ErrorKind::InvalidFormat, "not valid JSON");
}

std::string tensor(const char* cls, std::string_view hf_name) {
  const std::optional<arch::HfTensorName> n = arch::find_hf_arch(cls)->hf_tensor_name(hf_name);
  if (!n) return "-";
  return n->expert >= 0 ? n->gguf + "#" + std::to_string(n->expert) : n->gguf;
}

TEST(HfConfig, TensorNames) {
  const char* llama = "LlamaForCausalLM";
  EXPECT_EQ(tensor(llama, "model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(tensor(llama, "model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(tensor(llama, "lm_head.weight"), "output.weight");
  EXPECT_EQ(tensor(llama, "model.layers.0.input_layernorm.weight"), "blk.0.attn_norm.weight");
  EXPECT_EQ(tensor(llama, "model.layers.12.self_attn.q_proj.weight"), "blk.12.attn_q.weight");
  EXPECT_EQ(tensor(llama, "model.layers.3.self_attn.k_proj.bias"), "blk.3.attn_k.bias");
  EXPECT_EQ(tensor(llama, "model.layers.3.self_attn.v_proj.weight"), "blk.3.attn_v.weight");
  EXPECT_EQ(tensor(llama, "model.layers.3.self_attn.o_proj.weight"), "blk.3.attn_output.weight");
  EXPECT_EQ(tensor(llama, "model.layers.3.post_attention_layernorm.weight"), "blk.3.ffn_norm.weight");
  EXPECT_EQ(tensor(llama, "model.layers.3.mlp.gate_proj.weight"), "blk.3.ffn_gate.weight");
  EXPECT_EQ(tensor(llama, "model.layers.3.mlp.up_proj.weight"), "blk.3.ffn_up.weight");
  EXPECT_EQ(tensor(llama, "model.layers.3.mlp.down_proj.weight"), "blk.3.ffn_down.weight");
  EXPECT_EQ(tensor(llama, "model.layers.3.self_attn.o_proj.bias"), "-");
  EXPECT_EQ(tensor(llama, "model.layers.x.mlp.up_proj.weight"), "-");
  EXPECT_EQ(tensor(llama, "model.layers..mlp.up_proj.weight"), "-");
  EXPECT_EQ(tensor(llama, "model.layers.0.self_attn.rotary_emb.inv_freq"), "-");
  // Mixtral: the router and one matrix per expert (w1 gate, w3 up, w2 down)
  EXPECT_EQ(tensor("MixtralForCausalLM", "model.layers.1.block_sparse_moe.gate.weight"), "blk.1.ffn_gate_inp.weight");
  EXPECT_EQ(tensor("MixtralForCausalLM", "model.layers.1.block_sparse_moe.experts.7.w1.weight"),
            "blk.1.ffn_gate_exps.weight#7");
  EXPECT_EQ(tensor("MixtralForCausalLM", "model.layers.1.block_sparse_moe.experts.0.w3.weight"),
            "blk.1.ffn_up_exps.weight#0");
  EXPECT_EQ(tensor("MixtralForCausalLM", "model.layers.1.block_sparse_moe.experts.2.w2.weight"),
            "blk.1.ffn_down_exps.weight#2");
  // Qwen: q/k norms, the MoE router, the shared expert and its gate; transformers 5's fused expert stacks
  EXPECT_EQ(tensor("Qwen3ForCausalLM", "model.layers.2.self_attn.q_norm.weight"), "blk.2.attn_q_norm.weight");
  EXPECT_EQ(tensor("Qwen2MoeForCausalLM", "model.layers.0.mlp.shared_expert_gate.weight"),
            "blk.0.ffn_gate_inp_shexp.weight");
  EXPECT_EQ(tensor("Qwen2MoeForCausalLM", "model.layers.0.mlp.shared_expert.down_proj.weight"),
            "blk.0.ffn_down_shexp.weight");
  EXPECT_EQ(tensor("Qwen3MoeForCausalLM", "model.layers.0.mlp.experts.12.up_proj.weight"),
            "blk.0.ffn_up_exps.weight#12");
  EXPECT_EQ(tensor("Qwen3MoeForCausalLM", "model.layers.0.mlp.experts.down_proj"), "blk.0.ffn_down_exps.weight");
  const std::optional<arch::HfTensorName> fused =
      arch::find_hf_arch("Qwen3MoeForCausalLM")->hf_tensor_name("model.layers.4.mlp.experts.gate_up_proj");
  ASSERT_TRUE(fused.has_value());
  EXPECT_TRUE(fused->split_gate_up);
  EXPECT_EQ(fused->gguf, "blk.4.ffn_gate_exps.weight");
  EXPECT_EQ(fused->gguf_up, "blk.4.ffn_up_exps.weight");
  // Gemma: post_attention_layernorm is the norm AFTER attention; pre_feedforward_layernorm the FFN's
  EXPECT_EQ(tensor("Gemma2ForCausalLM", "model.layers.0.post_attention_layernorm.weight"),
            "blk.0.post_attention_norm.weight");
  EXPECT_EQ(tensor("Gemma2ForCausalLM", "model.layers.0.pre_feedforward_layernorm.weight"), "blk.0.ffn_norm.weight");
  EXPECT_EQ(tensor("Gemma2ForCausalLM", "model.layers.0.post_feedforward_layernorm.weight"),
            "blk.0.post_ffw_norm.weight");
  EXPECT_EQ(tensor("Gemma3ForCausalLM", "model.layers.5.self_attn.k_norm.weight"), "blk.5.attn_k_norm.weight");
  // Phi-3: fused projections
  EXPECT_EQ(tensor("Phi3ForCausalLM", "model.layers.0.self_attn.qkv_proj.weight"), "blk.0.attn_qkv.weight");
  EXPECT_EQ(tensor("Phi3ForCausalLM", "model.layers.0.mlp.gate_up_proj.weight"), "blk.0.ffn_up.weight");
}

const char* kDims = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100)";

Parsed parse_with(const char* cls, const std::string& extra) {
  return parse(std::string(R"({"architectures": [")") + cls + "\"], " + kDims + (extra.empty() ? "" : ", " + extra) +
               "}");
}

TEST(HfConfig, Qwen3) {
  const Parsed c = parse_with("Qwen3ForCausalLM", "");
  EXPECT_EQ(c.model.arch, "qwen3");
  EXPECT_TRUE(c.model.transformer.qk_norm);
  EXPECT_EQ(c.model.head_dim, 128) << "Qwen3Config's head_dim default, not hidden / heads";
  EXPECT_FALSE(c.model.qkv_bias);
  const Parsed y = parse_with("Qwen3ForCausalLM", R"("head_dim": 32, "rope_parameters": {"rope_type": "yarn",
    "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1000000.0})");
  EXPECT_EQ(y.model.head_dim, 32);
  EXPECT_EQ(y.model.rope_scaling.type, RopeScalingType::Yarn);
  EXPECT_FLOAT_EQ(y.model.rope_scaling.factor, 4.0f);
  EXPECT_EQ(y.model.rope_scaling.original_context, 32768);
  EXPECT_FLOAT_EQ(y.model.rope_scaling.yarn_beta_fast, 32.0f);
  EXPECT_FLOAT_EQ(y.model.rope_freq_base, 1e6f);
}

TEST(HfConfig, Gemma2) {
  const Parsed c = parse_with("Gemma2ForCausalLM", R"("head_dim": 16, "query_pre_attn_scalar": 24)");
  const TransformerParams& tp = c.model.transformer;
  EXPECT_EQ(c.model.arch, "gemma2");
  EXPECT_FLOAT_EQ(tp.attn_softcap, 50.0f) << "Gemma2Config default";
  EXPECT_FLOAT_EQ(tp.final_softcap, 30.0f);
  EXPECT_EQ(tp.sliding_window, 4096);
  EXPECT_EQ(tp.swa_layers, (std::vector<uint8_t>{1, 0, 1, 0, 1, 0})) << "even layers are windowed";
  EXPECT_FLOAT_EQ(tp.attn_scale, 1.0f / std::sqrt(24.0f));
  EXPECT_FLOAT_EQ(tp.embed_scale, 8.0f) << "sqrt(hidden_size)";
  EXPECT_TRUE(tp.post_norms);
  EXPECT_EQ(tp.ffn_act, FfnActivation::GeluTanh);
  EXPECT_TRUE(c.model.tied_embeddings);
  const Parsed n = parse_with("Gemma2ForCausalLM", R"("attn_logit_softcapping": null, "final_logit_softcapping": 3.0,
    "layer_types": ["sliding_attention", "full_attention", "full_attention", "sliding_attention",
    "full_attention", "full_attention"], "sliding_window": 8)");
  EXPECT_FLOAT_EQ(n.model.transformer.attn_softcap, 0.0f) << "null: none";
  EXPECT_FLOAT_EQ(n.model.transformer.final_softcap, 3.0f);
  EXPECT_EQ(n.model.transformer.swa_layers, (std::vector<uint8_t>{1, 0, 0, 1, 0, 0})) << "layer_types wins";
  EXPECT_EQ(n.model.transformer.sliding_window, 8);
}

TEST(HfConfig, Gemma3) {
  const Parsed c = parse_with("Gemma3ForCausalLM", R"("head_dim": 16, "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window": 512)");
  const TransformerParams& tp = c.model.transformer;
  EXPECT_EQ(c.model.arch, "gemma3");
  EXPECT_TRUE(tp.qk_norm);
  EXPECT_EQ(tp.swa_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0})) << "five local layers, then one global";
  EXPECT_FLOAT_EQ(tp.attn_softcap, 0.0f);
  EXPECT_FLOAT_EQ(c.model.rope_freq_base, 1e6f);
  EXPECT_FLOAT_EQ(tp.rope_freq_base_swa, 1e4f);
  EXPECT_FALSE(tp.rope_scaling_swa) << "the local layers run unscaled RoPE";
  EXPECT_EQ(c.model.rope_scaling.type, RopeScalingType::Linear);
  // transformers 5: one RoPE object per layer type
  const Parsed v5 = parse_with("Gemma3ForCausalLM", R"("head_dim": 16, "rope_parameters": {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})");
  EXPECT_FLOAT_EQ(v5.model.rope_freq_base, 1e6f);
  EXPECT_FLOAT_EQ(v5.model.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(v5.model.transformer.rope_freq_base_swa, 1e4f);
  expect_error(R"({"architectures": ["Gemma3ForConditionalGeneration"], )" + std::string(kDims) + "}",
               ErrorKind::Unsupported, "Gemma3ForCausalLM");
}

TEST(HfConfig, Phi3) {
  const Parsed c = parse_with("Phi3ForCausalLM", R"("sliding_window": 2047)");
  EXPECT_EQ(c.model.arch, "phi3");
  EXPECT_TRUE(c.model.transformer.fused_qkv);
  EXPECT_TRUE(c.model.transformer.fused_gate_up);
  EXPECT_EQ(c.model.transformer.swa_layers, std::vector<uint8_t>(6, 1));
  EXPECT_FLOAT_EQ(c.model.rms_eps, 1e-5f) << "Phi3Config default";
  const Parsed l = parse_with("Phi3ForCausalLM", R"("max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096, "rope_scaling": {"type": "longrope",
    "short_factor": [1, 1, 1, 1, 1, 1, 1, 1], "long_factor": [2, 2, 2, 2, 2, 2, 2, 2]})");
  EXPECT_EQ(l.model.rope_scaling.type, RopeScalingType::LongRope);
  EXPECT_EQ(l.model.rope_scaling.original_context, 4096) << "Phi-3 keeps it at the top level";
}

TEST(HfConfig, MixturesOfExperts) {
  const Parsed m = parse_with("MixtralForCausalLM", R"("num_local_experts": 8, "num_experts_per_tok": 2)");
  EXPECT_EQ(m.model.arch, "llama");
  EXPECT_EQ(m.model.transformer.n_expert, 8);
  EXPECT_EQ(m.model.transformer.n_expert_used, 2);
  EXPECT_EQ(m.model.transformer.n_ff_exp, 128);
  EXPECT_TRUE(m.model.transformer.expert_norm_topk);
  EXPECT_FLOAT_EQ(m.model.rope_freq_base, 1e6f) << "MixtralConfig default";
  EXPECT_EQ(m.sliding_window(), 0) << "MixtralConfig has no default window";

  const Parsed q2 = parse_with("Qwen2MoeForCausalLM", R"("num_experts": 60, "num_experts_per_tok": 4,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 96)");
  EXPECT_EQ(q2.model.arch, "qwen2moe");
  EXPECT_TRUE(q2.model.qkv_bias);
  EXPECT_EQ(q2.model.transformer.n_ff_shexp, 96);
  EXPECT_FALSE(q2.model.transformer.expert_norm_topk) << "Qwen2MoeConfig: norm_topk_prob false";

  const Parsed q3 = parse_with("Qwen3MoeForCausalLM", R"("num_experts": 128, "num_experts_per_tok": 8,
    "moe_intermediate_size": 48, "norm_topk_prob": true, "head_dim": 32)");
  EXPECT_EQ(q3.model.arch, "qwen3moe");
  EXPECT_TRUE(q3.model.transformer.qk_norm);
  EXPECT_TRUE(q3.model.transformer.expert_norm_topk);
  EXPECT_EQ(q3.model.transformer.n_ff_exp, 48);
  expect_error(R"({"architectures": ["Qwen3MoeForCausalLM"], "decoder_sparse_step": 2, )" + std::string(kDims) + "}",
               ErrorKind::Unsupported, "decoder_sparse_step");
}

}  // namespace
}  // namespace ga::hf
