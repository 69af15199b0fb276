// config.json fields shared by the decoder families (see hf_common.h).
#include "model/arch/hf_common.h"

#include <algorithm>
#include <string>

#include "gpu_accel/error.h"

namespace ga::arch {

std::optional<hf::JsonReader> hf_rope_object(const hf::JsonReader& r, std::string_view layer_type) {
  std::optional<hf::JsonReader> params = r.object("rope_parameters");
  if (!params) params = r.object("rope_scaling");
  if (!params || !params->is_object_of_objects()) return params;
  for (const auto& [type, member] : params->object_members()) {
    if (type == layer_type) return member;
  }
  // One RoPE for every layer type, or a type this model does not name: they must all agree.
  const auto members = params->object_members();
  for (const auto& [type, member] : members) {
    GA_CHECK(member.equals(members.front().second), Unsupported, r.source(), ": RoPE parameters for '", type,
             "' differ from '", members.front().first, "' and the architecture does not tell them apart");
  }
  return members.front().second;
}

HfRope read_hf_rope(const hf::JsonReader& params, const hf::JsonReader& top, double theta) {
  HfRope out;
  out.theta = params.number("rope_theta", theta);
  GA_CHECK(out.theta > 0, InvalidFormat, params.source(), ": rope_theta must be positive");
  std::string type = params.string("rope_type", "");
  if (type.empty()) type = params.string("type", "default");
  RopeScaling& s = out.scaling;
  const auto original = [&](int64_t fallback) {
    return params.positive_int("original_max_position_embeddings",
                               top.positive_int("original_max_position_embeddings", fallback));
  };
  if (type == "default") {
    s.type = RopeScalingType::None;
  } else if (type == "linear") {
    s.type = RopeScalingType::Linear;
    s.factor = static_cast<float>(params.number("factor", 1.0));
  } else if (type == "llama3") {
    s.type = RopeScalingType::Llama3;
    s.factor = static_cast<float>(params.number("factor", 8.0));
    s.low_freq_factor = static_cast<float>(params.number("low_freq_factor", 1.0));
    s.high_freq_factor = static_cast<float>(params.number("high_freq_factor", 4.0));
    s.original_context = original(8192);
    GA_CHECK(s.high_freq_factor > s.low_freq_factor, InvalidFormat, params.source(),
             ": llama3 rope: high_freq_factor ", s.high_freq_factor, " must exceed low_freq_factor ",
             s.low_freq_factor);
  } else if (type == "yarn") {
    s.type = RopeScalingType::Yarn;
    s.factor = static_cast<float>(params.number("factor", 1.0));
    s.original_context = original(top.positive_int("max_position_embeddings", int64_t{2048}));
    s.yarn_beta_fast = static_cast<float>(params.number("beta_fast", 32.0));
    s.yarn_beta_slow = static_cast<float>(params.number("beta_slow", 1.0));
    s.attn_factor = static_cast<float>(params.number("attention_factor", 0.0));
    GA_CHECK(!params.has("mscale") && !params.has("mscale_all_dim"), Unsupported, params.source(),
             ": yarn rope with mscale / mscale_all_dim (DeepSeek's variant) is not supported");
    GA_CHECK(params.boolean("truncate", true), Unsupported, params.source(),
             ": yarn rope with truncate = false is not supported");
  } else if (type == "longrope" || type == "su") {
    s.type = RopeScalingType::LongRope;
    s.original_context = original(4096);
    s.attn_factor = static_cast<float>(params.number("attention_factor", 0.0));
    // the factor lists become tensors (the family's hf_fixup); here only their presence is checked
    GA_CHECK(params.has("short_factor") && params.has("long_factor"), InvalidFormat, params.source(),
             ": longrope needs short_factor and long_factor");
  } else {
    GA_THROW(Unsupported, params.source(), ": RoPE scaling type '", type,
             "' is not supported (default, linear, llama3, yarn, longrope)");
  }
  if (s.type == RopeScalingType::Linear || s.type == RopeScalingType::Llama3 || s.type == RopeScalingType::Yarn) {
    GA_CHECK(s.factor > 0, InvalidFormat, params.source(), ": RoPE scaling factor must be positive, got ", s.factor);
  }
  return out;
}

bool read_hf_layer_types(const hf::JsonReader& r, ModelConfig& m) {
  if (!r.has("layer_types")) return false;
  const std::vector<std::string> types = r.strings("layer_types");
  GA_CHECK(static_cast<int64_t>(types.size()) == m.n_layer, InvalidFormat, r.source(), ": layer_types has ",
           types.size(), " entries for ", m.n_layer, " layers");
  m.transformer.swa_layers.assign(types.size(), 0);
  for (size_t i = 0; i < types.size(); ++i) {
    GA_CHECK(types[i] == "sliding_attention" || types[i] == "full_attention", Unsupported, r.source(),
             ": layer type '", types[i], "' (layer ", i, ") is not supported (sliding_attention, full_attention)");
    m.transformer.swa_layers[i] = types[i] == "sliding_attention" ? 1 : 0;
  }
  return true;
}

void read_hf_common(const hf::JsonReader& r, ModelConfig& m, const HfDefaults& d) {
  m.name = r.string("_name_or_path", "");
  m.n_vocab = r.positive_int("vocab_size");
  m.n_embd = r.positive_int("hidden_size");
  m.n_layer = r.positive_int("num_hidden_layers");
  m.n_head = r.positive_int("num_attention_heads");
  m.n_head_kv = r.positive_int("num_key_value_heads", m.n_head);
  m.n_ff = r.positive_int("intermediate_size");
  m.n_ctx_train = r.positive_int("max_position_embeddings", d.max_position_embeddings);
  GA_CHECK(m.n_head % m.n_head_kv == 0, InvalidFormat, r.source(), ": num_attention_heads ", m.n_head,
           " is not a multiple of num_key_value_heads ", m.n_head_kv);
  if (r.has("head_dim")) {
    m.head_dim = r.positive_int("head_dim");
  } else {
    GA_CHECK(m.n_embd % m.n_head == 0, InvalidFormat, r.source(), ": hidden_size ", m.n_embd,
             " is not a multiple of num_attention_heads ", m.n_head, " and there is no head_dim");
    m.head_dim = m.n_embd / m.n_head;
  }
  GA_CHECK(m.head_dim % 2 == 0, InvalidFormat, r.source(), ": head_dim ", m.head_dim, " must be even for RoPE");
  m.n_rot = m.head_dim;
  const double eps = r.number("rms_norm_eps", d.rms_norm_eps);
  GA_CHECK(eps > 0, InvalidFormat, r.source(), ": rms_norm_eps must be positive");
  m.rms_eps = static_cast<float>(eps);
  m.rope_mode = RopeMode::NeoX;  // rotate_half; the HF loader keeps HF's q/k row order (no permutation)
  m.tied_embeddings = r.boolean("tie_word_embeddings", d.tie_word_embeddings);

  const double partial = r.number("partial_rotary_factor", 1.0);
  GA_CHECK(partial == 1.0, Unsupported, r.source(), ": partial_rotary_factor ", partial, " is not supported");
  const std::optional<hf::JsonReader> rope = hf_rope_object(r, "full_attention");
  const double top_theta = r.number("rope_theta", d.rope_theta);
  const HfRope hr = rope ? read_hf_rope(*rope, r, top_theta) : HfRope{top_theta, {}};
  m.rope_freq_base = static_cast<float>(hr.theta);
  m.rope_scaling = hr.scaling;

  const std::string act = r.string(d.act_key, std::string(d.hidden_act));
  if (act == "silu" || act == "swish") {
    m.transformer.ffn_act = FfnActivation::Silu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast") {
    m.transformer.ffn_act = FfnActivation::GeluTanh;
  } else {
    GA_THROW(Unsupported, r.source(), ": ", d.act_key, " '", act,
             "' is not supported (silu, gelu_pytorch_tanh)");
  }
  GA_CHECK(!r.boolean("mlp_bias", false), Unsupported, r.source(), ": mlp_bias is not supported");
  // Llama's attention_bias puts a bias on o_proj too, which the forward does not have.
  GA_CHECK(!r.boolean("attention_bias", false), Unsupported, r.source(),
           ": attention_bias (q/k/v/o biases) is not supported");
  read_hf_layer_types(r, m);
}

}  // namespace ga::arch

namespace ga::arch {
namespace {

constexpr HfRename kLlamaTop[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
constexpr HfRename kLlamaLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

}  // namespace

// constinit: the other families' schemes take its top-level names in their own static initializers.
constinit const HfNameScheme kLlamaHfNames{kLlamaTop, kLlamaLayer, {}, {}};

std::optional<HfTensorName> map_hf_tensor_name(std::string_view hf_name, const HfNameScheme& s) {
  for (const HfRename& r : s.top) {
    if (hf_name == r.hf) return HfTensorName{std::string(r.gguf)};
  }
  constexpr std::string_view kLayerPrefix = "model.layers.";
  if (!hf_name.starts_with(kLayerPrefix)) return std::nullopt;
  const std::string_view rest = hf_name.substr(kLayerPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || !all_digits(rest.substr(0, dot))) return std::nullopt;
  const std::string blk = "blk." + std::string(rest.substr(0, dot)) + ".";
  const std::string_view suffix = rest.substr(dot + 1);
  for (const HfRename& r : s.layer) {
    if (suffix == r.hf) return HfTensorName{blk + std::string(r.gguf)};
  }
  std::string_view in_experts;
  for (const std::string_view prefix : s.experts_prefixes) {
    if (suffix.size() > prefix.size() && suffix.starts_with(prefix) && suffix[prefix.size()] == '.') {
      in_experts = suffix.substr(prefix.size() + 1);
    }
  }
  if (in_experts.empty()) return std::nullopt;
  // transformers 5 writes each layer's experts as fused stacks: [E][2 ff][n_embd] and [E][n_embd][ff]
  if (in_experts == "gate_up_proj" || in_experts == "gate_up_proj.weight") {
    HfTensorName n{blk + "ffn_gate_exps.weight"};
    n.split_gate_up = true;
    n.gguf_up = blk + "ffn_up_exps.weight";
    return n;
  }
  if (in_experts == "down_proj" || in_experts == "down_proj.weight") return HfTensorName{blk + "ffn_down_exps.weight"};
  const size_t edot = in_experts.find('.');
  if (edot == std::string_view::npos || !all_digits(in_experts.substr(0, edot))) return std::nullopt;
  const std::string_view leaf = in_experts.substr(edot + 1);
  for (const HfRename& r : s.expert) {
    if (leaf == r.hf) {
      HfTensorName n{blk + std::string(r.gguf)};
      n.expert = std::stoll(std::string(in_experts.substr(0, edot)));
      return n;
    }
  }
  return std::nullopt;
}

}  // namespace ga::arch

#include "backends/cpu/quant.h"

namespace ga::arch {

void put_f32_tensor(LoadedModel& model, const std::string& name, std::vector<float> values,
                    std::vector<uint64_t> ne) {
  auto owned = std::make_shared<std::vector<float>>(std::move(values));
  WeightView w;
  w.name = name;
  w.type = DType::F32;
  w.ne = std::move(ne);
  w.nbytes = owned->size() * sizeof(float);
  w.data = reinterpret_cast<const uint8_t*>(owned->data());
  model.storage.push_back(owned);
  model.weights[name] = std::move(w);
}

std::vector<float> tensor_f32(const WeightView& w) {
  uint64_t n = 1;
  for (const uint64_t d : w.ne) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  cpu::dequantize_row(w.type, w.data, v.data(), static_cast<int64_t>(n));
  return v;
}

}  // namespace ga::arch
