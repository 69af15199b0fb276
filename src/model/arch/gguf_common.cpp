// GGUF keys shared by the decoder families (see gguf_common.h).
#include "model/arch/gguf_common.h"

#include <filesystem>

#include "gpu_accel/error.h"

namespace ga::arch {

int64_t GgufKeys::required_int(const std::string& suffix) const {
  const std::optional<int64_t> v = file_.get_int(key(suffix));
  GA_CHECK(v.has_value(), InvalidFormat, "gguf: missing key '", key(suffix), "'");
  return *v;
}

namespace {

void read_rope_scaling(const GgufKeys& hp, ModelConfig& c) {
  const std::string type = hp.optional_string("rope.scaling.type").value_or("none");
  const std::optional<double> factor = hp.optional_float("rope.scaling.factor");
  const std::optional<double> scale_linear = hp.optional_float("rope.scale_linear");  // older converters
  RopeScaling& s = c.rope_scaling;
  s.original_context = hp.optional_int("rope.scaling.original_context_length").value_or(c.n_ctx_train);
  if (const std::optional<double> attn = hp.optional_float("rope.scaling.attn_factor")) {
    s.attn_factor = static_cast<float>(*attn);
  }
  if (type == "linear") {
    s.type = RopeScalingType::Linear;
    s.factor = static_cast<float>(factor.value_or(scale_linear.value_or(1.0)));
  } else if (type == "yarn") {
    s.type = RopeScalingType::Yarn;
    s.factor = static_cast<float>(factor.value_or(1.0));
    s.yarn_beta_fast = static_cast<float>(hp.optional_float("rope.scaling.yarn_beta_fast").value_or(32.0));
    s.yarn_beta_slow = static_cast<float>(hp.optional_float("rope.scaling.yarn_beta_slow").value_or(1.0));
    const double ext = hp.optional_float("rope.scaling.yarn_ext_factor").value_or(-1.0);
    GA_CHECK(ext < 0 || ext == 1.0, Unsupported, "gguf: ", hp.key("rope.scaling.yarn_ext_factor"), " ", ext,
             " is not supported (1 or unset)");
    GA_CHECK(!hp.optional_float("rope.scaling.yarn_log_multiplier").has_value(), Unsupported, "gguf: ",
             hp.key("rope.scaling.yarn_log_multiplier"), " (DeepSeek's YaRN variant) is not supported");
  } else if (type == "longrope") {
    s.type = RopeScalingType::LongRope;
  } else if (type == "none") {
    if (scale_linear.has_value() && *scale_linear != 1.0) {
      s.type = RopeScalingType::Linear;
      s.factor = static_cast<float>(*scale_linear);
    }
  } else {
    GA_THROW(Unsupported, "gguf: rope scaling type '", type, "' (", hp.key("rope.scaling.type"),
             ") is not supported (supported: none, linear, yarn, longrope; Llama-3 scaling comes as rope_freqs.weight)");
  }
}

}  // namespace

void read_gguf_common(const GgufKeys& hp, ModelConfig& c, bool ff_required) {
  const gguf::File& file = hp.file();
  c.n_ctx_train = hp.required_int("context_length");
  c.n_embd = hp.required_int("embedding_length");
  c.n_layer = hp.required_int("block_count");
  c.n_ff = ff_required ? hp.required_int("feed_forward_length") : hp.optional_int("feed_forward_length").value_or(0);
  c.n_head = hp.required_int("attention.head_count");
  c.n_head_kv = hp.optional_int("attention.head_count_kv").value_or(c.n_head);
  GA_CHECK(c.n_head > 0 && c.n_embd > 0, InvalidFormat, "gguf: ", hp.key("attention.head_count"), " = ", c.n_head,
           ", ", hp.key("embedding_length"), " = ", c.n_embd, " must be positive");
  c.head_dim = hp.optional_int("attention.key_length").value_or(c.n_embd / c.n_head);
  const int64_t value_dim = hp.optional_int("attention.value_length").value_or(c.head_dim);
  GA_CHECK(value_dim == c.head_dim, Unsupported, "gguf: attention.value_length ", value_dim,
           " differs from attention.key_length ", c.head_dim);
  c.n_rot = hp.optional_int("rope.dimension_count").value_or(c.head_dim);
  c.rms_eps = static_cast<float>(hp.optional_float("attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_freq_base = static_cast<float>(hp.optional_float("rope.freq_base").value_or(10000.0));
  read_rope_scaling(hp, c);
  c.n_vocab = hp.optional_int("vocab_size").value_or(0);
  c.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  c.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
}

void read_gguf_experts(const GgufKeys& hp, ModelConfig& c) {
  TransformerParams& tp = c.transformer;
  tp.n_expert = hp.optional_int("expert_count").value_or(0);
  if (tp.n_expert == 0) return;
  tp.n_expert_used = hp.required_int("expert_used_count");
  tp.n_ff_exp = hp.optional_int("expert_feed_forward_length").value_or(c.n_ff);
  tp.n_ff_shexp = hp.optional_int("expert_shared_feed_forward_length").value_or(0);
  GA_CHECK(!hp.optional_int("expert_gating_func").has_value() || *hp.optional_int("expert_gating_func") == 1,
           Unsupported, "gguf: ", hp.key("expert_gating_func"), " other than softmax is not supported");
  const double scale = hp.optional_float("expert_weights_scale").value_or(1.0);
  GA_CHECK(scale == 1.0 || scale == 0.0, Unsupported, "gguf: ", hp.key("expert_weights_scale"), " ", scale,
           " is not supported");
}

void write_gguf_common(const ModelConfig& c, gguf::Writer& w) {
  const std::string a = c.arch + ".";
  const auto u32 = [](int64_t v) { return gguf::Value::u32(static_cast<uint32_t>(v)); };
  w.set(a + "context_length", u32(c.n_ctx_train));
  w.set(a + "embedding_length", u32(c.n_embd));
  w.set(a + "block_count", u32(c.n_layer));
  w.set(a + "feed_forward_length", u32(c.n_ff));
  w.set(a + "attention.head_count", u32(c.n_head));
  w.set(a + "attention.head_count_kv", u32(c.n_head_kv));
  w.set(a + "attention.key_length", u32(c.head_dim));
  w.set(a + "attention.value_length", u32(c.head_dim));
  w.set(a + "rope.dimension_count", u32(c.n_rot));
  w.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(c.rms_eps));
  w.set(a + "rope.freq_base", gguf::Value::f32(c.rope_freq_base));
  w.set(a + "vocab_size", u32(c.n_vocab));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScalingType::Linear || rs.type == RopeScalingType::Yarn) {
    w.set(a + "rope.scaling.type", gguf::Value::string(rs.type == RopeScalingType::Linear ? "linear" : "yarn"));
    w.set(a + "rope.scaling.factor", gguf::Value::f32(rs.factor));
  }
  if (rs.type == RopeScalingType::Yarn || rs.type == RopeScalingType::LongRope) {
    w.set(a + "rope.scaling.original_context_length", u32(rs.original_context));
  }
  if (rs.attn_factor > 0) w.set(a + "rope.scaling.attn_factor", gguf::Value::f32(rs.attn_factor));
}

void write_gguf_experts(const ModelConfig& c, gguf::Writer& w) {
  const TransformerParams& tp = c.transformer;
  if (tp.n_expert == 0) return;
  const std::string a = c.arch + ".";
  const auto u32 = [](int64_t v) { return gguf::Value::u32(static_cast<uint32_t>(v)); };
  w.set(a + "expert_count", u32(tp.n_expert));
  w.set(a + "expert_used_count", u32(tp.n_expert_used));
  if (tp.n_ff_exp != c.n_ff) w.set(a + "expert_feed_forward_length", u32(tp.n_ff_exp));
  if (tp.n_ff_shexp > 0) w.set(a + "expert_shared_feed_forward_length", u32(tp.n_ff_shexp));
}

void set_swa_period(const GgufKeys& hp, ModelConfig& c, int64_t default_period) {
  const int64_t period = hp.optional_int("attention.sliding_window_pattern").value_or(default_period);
  GA_CHECK(period >= 0, InvalidFormat, "gguf: ", hp.key("attention.sliding_window_pattern"), " is negative");
  c.transformer.swa_layers.assign(static_cast<size_t>(c.n_layer), 0);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    c.transformer.swa_layers[static_cast<size_t>(il)] = period == 0 || il % period < period - 1 ? 1 : 0;
  }
}

}  // namespace ga::arch
