// config.json -> ModelConfig: the fields, transformers' defaults, both RoPE spellings (4.x
// rope_theta + rope_scaling, 5.x rope_parameters), and the refusals that name what is unsupported.
//
// The configs below follow what transformers' save_pretrained writes for each class (the defaults
// checked are those of LlamaConfig / MistralConfig / Qwen2Config), so each expectation is a fact
// about transformers, not about our parser.
#include <gtest/gtest.h>

#include <string>

#include "gpu_accel/error.h"
#include "model/formats/hf_config.h"

namespace ga::hf {
namespace {

HfConfig parse(const std::string& text) { return parse_config(text, "config.json"); }

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
  const HfConfig c = parse(kLlama);
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
  EXPECT_EQ(c.sliding_window, 0);
  bool found = false;
  for (const auto& e : c.entries) found |= e.key == "config.hidden_size" && e.value == "2048";
  EXPECT_TRUE(found) << "config keys are kept for inspect";
}

TEST(HfConfig, TransformersDefaults) {
  // Only the required fields: LlamaConfig's defaults fill the rest.
  const HfConfig c = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 256,
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
  const HfConfig c = parse("{" + base + R"(, "sliding_window": 4096})");
  EXPECT_EQ(c.model.arch, "llama");
  EXPECT_EQ(c.model.head_dim, 128) << "head_dim is not hidden_size / heads here (160)";
  EXPECT_EQ(c.model.n_rot, 128);
  EXPECT_FLOAT_EQ(c.model.rope_freq_base, 1e6f);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.model.n_ctx_train, 4096 * 32) << "MistralConfig default";
  EXPECT_EQ(parse("{" + base + R"(, "sliding_window": null})").sliding_window, 0);
  EXPECT_EQ(parse("{" + base + "}").sliding_window, 4096) << "MistralConfig default window";
}

TEST(HfConfig, Qwen2) {
  const std::string base = R"("architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "vocab_size": 151936, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "tie_word_embeddings": true, "sliding_window": 32768, "max_window_layers": 21)";
  const HfConfig c = parse("{" + base + R"(, "use_sliding_window": false})");
  EXPECT_EQ(c.model.arch, "qwen2");
  EXPECT_TRUE(c.model.qkv_bias);
  EXPECT_TRUE(c.model.tied_embeddings);
  EXPECT_EQ(c.model.head_dim, 64);
  EXPECT_EQ(c.model.rope_mode, RopeMode::NeoX);
  EXPECT_EQ(c.sliding_window, 0) << "the window only applies with use_sliding_window";
  EXPECT_EQ(parse("{" + base + R"(, "use_sliding_window": true})").sliding_window, 32768);
}

TEST(HfConfig, RopeScalingTransformers4) {
  const HfConfig c = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
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
  const HfConfig lin = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10,
    "rope_scaling": {"type": "linear", "factor": 4.0}})");
  EXPECT_EQ(lin.model.rope_scaling.type, RopeScalingType::Linear);
  EXPECT_FLOAT_EQ(lin.model.rope_scaling.factor, 4.0f);
}

TEST(HfConfig, RopeParametersTransformers5) {
  const HfConfig c = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  EXPECT_EQ(c.model.rope_scaling.type, RopeScalingType::Llama3);
  EXPECT_FLOAT_EQ(c.model.rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(c.model.rope_freq_base, 500000.0f) << "rope_theta lives inside rope_parameters in 5.x";

  const HfConfig d = parse(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})");
  EXPECT_EQ(d.model.rope_scaling.type, RopeScalingType::None);
  EXPECT_FLOAT_EQ(d.model.rope_freq_base, 1e6f);
}

TEST(HfConfig, Refusals) {
  const std::string dims = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
    "num_attention_heads": 4, "vocab_size": 10)";
  expect_error(R"({"architectures": ["GPT2LMHeadModel"], )" + dims + "}", ErrorKind::Unsupported, "GPT2LMHeadModel");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "yarn", "factor": 4.0}, )" +
                   dims + "}",
               ErrorKind::Unsupported, "yarn");
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

TEST(HfConfig, TensorNames) {
  EXPECT_EQ(gguf_tensor_name("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(gguf_tensor_name("model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(gguf_tensor_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.0.input_layernorm.weight"), "blk.0.attn_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.12.self_attn.q_proj.weight"), "blk.12.attn_q.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.self_attn.k_proj.bias"), "blk.3.attn_k.bias");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.self_attn.v_proj.weight"), "blk.3.attn_v.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.self_attn.o_proj.weight"), "blk.3.attn_output.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.post_attention_layernorm.weight"), "blk.3.ffn_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.mlp.gate_proj.weight"), "blk.3.ffn_gate.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.mlp.up_proj.weight"), "blk.3.ffn_up.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.mlp.down_proj.weight"), "blk.3.ffn_down.weight");
  EXPECT_FALSE(gguf_tensor_name("model.layers.3.self_attn.o_proj.bias").has_value());
  EXPECT_FALSE(gguf_tensor_name("model.layers.x.mlp.up_proj.weight").has_value());
  EXPECT_FALSE(gguf_tensor_name("model.layers..mlp.up_proj.weight").has_value());
  EXPECT_FALSE(gguf_tensor_name("model.layers.0.self_attn.rotary_emb.inv_freq").has_value());
}

}  // namespace
}  // namespace ga::hf
