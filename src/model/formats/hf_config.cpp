// config.json parsing for the Llama family; see hf_config.h for what is mapped and why.
//
// Defaults are transformers' (LlamaConfig, MistralConfig, Qwen2Config), looked up per architecture
// in one table so the differences stay visible. A JSON null counts as "absent" (transformers writes
// "head_dim": null, "rope_scaling": null, "sliding_window": null).
#include "model/formats/hf_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "gpu_accel/error.h"

namespace ga::hf {

using nlohmann::json;

namespace {

struct ArchDefaults {
  std::string_view hf_name;  // config.json "architectures"
  std::string_view model_type;
  std::string_view ga_arch;  // ModelConfig::arch
  int64_t max_position_embeddings;
  double rms_norm_eps;
  double rope_theta;
  int64_t sliding_window;  // 0: none by default
};

constexpr ArchDefaults kArchs[] = {
    {"LlamaForCausalLM", "llama", "llama", 2048, 1e-6, 10000.0, 0},
    {"MistralForCausalLM", "mistral", "llama", 4096 * 32, 1e-6, 10000.0, 4096},
    {"Qwen2ForCausalLM", "qwen2", "qwen2", 32768, 1e-6, 10000.0, 0},
};

const json* field(const json& obj, std::string_view key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

class ConfigReader {
 public:
  ConfigReader(const json& root, const std::string& source) : root_(root), source_(source) {}

  int64_t positive_int(const json& obj, std::string_view key, std::optional<int64_t> fallback = {}) const {
    const json* v = field(obj, key);
    if (v == nullptr) {
      GA_CHECK(fallback.has_value(), InvalidFormat, source_, ": missing \"", key, "\"");
      return *fallback;
    }
    GA_CHECK(v->is_number_integer() && v->get<int64_t>() > 0, InvalidFormat, source_, ": \"", key,
             "\" must be a positive integer, got ", v->dump());
    return v->get<int64_t>();
  }

  double number(const json& obj, std::string_view key, double fallback) const {
    const json* v = field(obj, key);
    if (v == nullptr) return fallback;
    GA_CHECK(v->is_number(), InvalidFormat, source_, ": \"", key, "\" must be a number, got ", v->dump());
    const double d = v->get<double>();
    GA_CHECK(std::isfinite(d), InvalidFormat, source_, ": \"", key, "\" is not finite");
    return d;
  }

  bool boolean(const json& obj, std::string_view key, bool fallback) const {
    const json* v = field(obj, key);
    if (v == nullptr) return fallback;
    GA_CHECK(v->is_boolean(), InvalidFormat, source_, ": \"", key, "\" must be true or false, got ", v->dump());
    return v->get<bool>();
  }

  std::string string(const json& obj, std::string_view key, std::string fallback) const {
    const json* v = field(obj, key);
    if (v == nullptr) return fallback;
    GA_CHECK(v->is_string(), InvalidFormat, source_, ": \"", key, "\" must be a string, got ", v->dump());
    return v->get<std::string>();
  }

  const ArchDefaults& architecture() const {
    const json* archs = field(root_, "architectures");
    if (archs != nullptr) {
      GA_CHECK(archs->is_array() && !archs->empty(), InvalidFormat, source_,
               ": \"architectures\" must be a non-empty list");
      for (const json& a : *archs) {
        GA_CHECK(a.is_string(), InvalidFormat, source_, ": \"architectures\" holds a non-string ", a.dump());
        for (const auto& known : kArchs) {
          if (a.get<std::string>() == known.hf_name) return known;
        }
      }
      GA_THROW(Unsupported, source_, ": architecture ", archs->dump(),
               " is not supported (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)");
    }
    // Some hand-made configs only say model_type.
    const std::string type = string(root_, "model_type", "");
    for (const auto& known : kArchs) {
      if (type == known.model_type) return known;
    }
    GA_THROW(Unsupported, source_, ": no \"architectures\" and model_type '", type,
             "' is not supported (llama, mistral, qwen2)");
  }

  // The RoPE parameters object: 5.x "rope_parameters", else 4.x "rope_scaling" (may be absent).
  // transformers 5 may nest one object per attention layer type; we run one RoPE for all layers,
  // so nested objects must agree.
  const json* rope_parameters() const {
    const json* params = field(root_, "rope_parameters");
    if (params == nullptr) params = field(root_, "rope_scaling");
    if (params == nullptr) return nullptr;
    GA_CHECK(params->is_object(), InvalidFormat, source_, ": RoPE parameters must be an object, got ",
             params->dump());
    const bool nested = !params->empty() && std::all_of(params->begin(), params->end(),
                                                        [](const json& v) { return v.is_object(); });
    if (!nested) return params;
    const json& first = params->begin().value();
    for (const auto& [layer_type, v] : params->items()) {
      GA_CHECK(v == first, Unsupported, source_, ": RoPE parameters differ between layer types ('", layer_type,
               "'); gpu_accel runs one RoPE for all layers");
    }
    return &first;
  }

  void read_rope(ModelConfig& m, const ArchDefaults& arch) const {
    const json* params = rope_parameters();
    const double top_theta = number(root_, "rope_theta", arch.rope_theta);
    m.rope_freq_base = static_cast<float>(params ? number(*params, "rope_theta", top_theta) : top_theta);
    GA_CHECK(m.rope_freq_base > 0, InvalidFormat, source_, ": rope_theta must be positive");
    const double partial = number(root_, "partial_rotary_factor", params ? number(*params, "partial_rotary_factor", 1.0)
                                                                         : 1.0);
    GA_CHECK(partial == 1.0, Unsupported, source_, ": partial_rotary_factor ", partial, " is not supported");
    if (params == nullptr) return;

    std::string type = string(*params, "rope_type", "");
    if (type.empty()) type = string(*params, "type", "default");
    RopeScaling& s = m.rope_scaling;
    if (type == "default") {
      s.type = RopeScalingType::None;
    } else if (type == "linear") {
      s.type = RopeScalingType::Linear;
      s.factor = static_cast<float>(number(*params, "factor", 1.0));
    } else if (type == "llama3") {
      s.type = RopeScalingType::Llama3;
      s.factor = static_cast<float>(number(*params, "factor", 8.0));
      s.low_freq_factor = static_cast<float>(number(*params, "low_freq_factor", 1.0));
      s.high_freq_factor = static_cast<float>(number(*params, "high_freq_factor", 4.0));
      s.original_context = positive_int(*params, "original_max_position_embeddings", int64_t{8192});
      GA_CHECK(s.high_freq_factor > s.low_freq_factor, InvalidFormat, source_, ": llama3 rope: high_freq_factor ",
               s.high_freq_factor, " must exceed low_freq_factor ", s.low_freq_factor);
    } else {
      GA_THROW(Unsupported, source_, ": RoPE scaling type '", type, "' is not supported (default, linear, llama3)");
    }
    if (s.type != RopeScalingType::None) {
      GA_CHECK(s.factor > 0, InvalidFormat, source_, ": RoPE scaling factor must be positive, got ", s.factor);
    }
  }

  HfConfig read() const {
    GA_CHECK(root_.is_object(), InvalidFormat, source_, ": config is not a JSON object");
    const ArchDefaults& arch = architecture();
    HfConfig out;
    out.architecture = arch.hf_name;
    ModelConfig& m = out.model;
    m.arch = arch.ga_arch;
    m.name = string(root_, "_name_or_path", "");
    m.n_vocab = positive_int(root_, "vocab_size");
    m.n_embd = positive_int(root_, "hidden_size");
    m.n_layer = positive_int(root_, "num_hidden_layers");
    m.n_head = positive_int(root_, "num_attention_heads");
    m.n_head_kv = positive_int(root_, "num_key_value_heads", m.n_head);
    m.n_ff = positive_int(root_, "intermediate_size");
    m.n_ctx_train = positive_int(root_, "max_position_embeddings", arch.max_position_embeddings);
    GA_CHECK(m.n_head % m.n_head_kv == 0, InvalidFormat, source_, ": num_attention_heads ", m.n_head,
             " is not a multiple of num_key_value_heads ", m.n_head_kv);
    if (field(root_, "head_dim") != nullptr) {
      m.head_dim = positive_int(root_, "head_dim");
    } else {
      GA_CHECK(m.n_embd % m.n_head == 0, InvalidFormat, source_, ": hidden_size ", m.n_embd,
               " is not a multiple of num_attention_heads ", m.n_head, " and there is no head_dim");
      m.head_dim = m.n_embd / m.n_head;
    }
    GA_CHECK(m.head_dim % 2 == 0, InvalidFormat, source_, ": head_dim ", m.head_dim, " must be even for RoPE");
    m.n_rot = m.head_dim;
    const double eps = number(root_, "rms_norm_eps", arch.rms_norm_eps);
    GA_CHECK(eps > 0, InvalidFormat, source_, ": rms_norm_eps must be positive");
    m.rms_eps = static_cast<float>(eps);
    m.rope_mode = RopeMode::NeoX;  // rotate_half: see the file comment
    read_rope(m, arch);
    m.tied_embeddings = boolean(root_, "tie_word_embeddings", false);
    m.qkv_bias = arch.ga_arch == "qwen2";  // Qwen2Attention always has q/k/v biases

    const std::string act = string(root_, "hidden_act", "silu");
    GA_CHECK(act == "silu", Unsupported, source_, ": hidden_act '", act, "' is not supported (silu)");
    GA_CHECK(!boolean(root_, "mlp_bias", false), Unsupported, source_, ": mlp_bias is not supported");
    // Llama's attention_bias puts a bias on o_proj too, which the forward does not have.
    GA_CHECK(!boolean(root_, "attention_bias", false), Unsupported, source_,
             ": attention_bias (q/k/v/o biases) is not supported");

    if (arch.ga_arch == "qwen2") {
      if (boolean(root_, "use_sliding_window", false)) out.sliding_window = positive_int(root_, "sliding_window", 4096);
    } else if (arch.sliding_window > 0) {
      // Absent: the architecture's default window; null: no window.
      if (!root_.contains("sliding_window")) {
        out.sliding_window = arch.sliding_window;
      } else if (field(root_, "sliding_window") != nullptr) {
        out.sliding_window = positive_int(root_, "sliding_window");
      }
    }

    for (const auto& [key, value] : root_.items()) out.entries.push_back({"config." + key, value.dump()});
    return out;
  }

 private:
  const json& root_;
  const std::string& source_;
};

}  // namespace

HfConfig parse_config(std::string_view json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    GA_THROW(InvalidFormat, source, ": not valid JSON: ", e.what());
  }
  return ConfigReader(root, source).read();
}

HfConfig read_config(const std::string& path) { return parse_config(read_text_file(path), path); }

std::optional<std::string> gguf_tensor_name(std::string_view hf_name) {
  struct Rename {
    std::string_view hf;
    std::string_view gguf;
  };
  static constexpr Rename kTop[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  // Suffixes after "model.layers.N."; the GGUF names go after "blk.N.".
  static constexpr Rename kLayer[] = {
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
  for (const auto& r : kTop) {
    if (hf_name == r.hf) return std::string(r.gguf);
  }
  constexpr std::string_view kLayerPrefix = "model.layers.";
  if (hf_name.substr(0, kLayerPrefix.size()) != kLayerPrefix) return std::nullopt;
  const std::string_view rest = hf_name.substr(kLayerPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos) return std::nullopt;
  const std::string_view layer = rest.substr(0, dot);
  if (!std::all_of(layer.begin(), layer.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) return std::nullopt;
  const std::string_view suffix = rest.substr(dot + 1);
  for (const auto& r : kLayer) {
    if (suffix == r.hf) return "blk." + std::string(layer) + "." + std::string(r.gguf);
  }
  return std::nullopt;
}

}  // namespace ga::hf
