// fla's RWKV7ForCausalLM folder -> the RWKV forward's names and shapes (see rwkv7_hf.h).
#include "model/arch/rwkv7_hf.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gpu_accel/error.h"
#include "model/arch/hf_common.h"

namespace ga::arch {
namespace {

// Which layers carry a tensor, and whether a checkpoint may leave it out.
enum class Scope {
  kEveryLayer,
  kFirstLayer,   // pre_norm (config.norm_first): the forward's ln0 before layer 0
  kAfterFirst,   // v_lora: layer 0's v is v_first itself
  kNormBias,     // LayerNorm biases: absent when config.norm_bias is false (zeros here)
  kLegacy,       // attn.x_x: fla's first layout, split into x_r .. x_g on load
};

struct FlaName {
  std::string_view fla;    // after "model.layers.N."
  std::string_view blink;  // after "blocks.N."
  Scope scope;
};

constexpr FlaName kLayer[] = {
    {"pre_norm.weight", "ln0.weight", Scope::kFirstLayer},
    {"pre_norm.bias", "ln0.bias", Scope::kFirstLayer},
    {"attn_norm.weight", "ln1.weight", Scope::kEveryLayer},
    {"attn_norm.bias", "ln1.bias", Scope::kNormBias},
    {"ffn_norm.weight", "ln2.weight", Scope::kEveryLayer},
    {"ffn_norm.bias", "ln2.bias", Scope::kNormBias},
    {"attn.x_r", "att.x_r", Scope::kEveryLayer},
    {"attn.x_w", "att.x_w", Scope::kEveryLayer},
    {"attn.x_k", "att.x_k", Scope::kEveryLayer},
    {"attn.x_v", "att.x_v", Scope::kEveryLayer},
    {"attn.x_a", "att.x_a", Scope::kEveryLayer},
    {"attn.x_g", "att.x_g", Scope::kEveryLayer},
    {"attn.x_x", "att.x_x", Scope::kLegacy},
    {"attn.k_k", "att.k_k", Scope::kEveryLayer},
    {"attn.k_a", "att.k_a", Scope::kEveryLayer},
    {"attn.r_k", "att.r_k", Scope::kEveryLayer},
    {"attn.r_proj.weight", "att.receptance.weight", Scope::kEveryLayer},
    {"attn.k_proj.weight", "att.key.weight", Scope::kEveryLayer},
    {"attn.v_proj.weight", "att.value.weight", Scope::kEveryLayer},
    {"attn.o_proj.weight", "att.output.weight", Scope::kEveryLayer},
    {"attn.w_lora.lora.0.weight", "att.w1", Scope::kEveryLayer},
    {"attn.w_lora.lora.2.weight", "att.w2", Scope::kEveryLayer},
    {"attn.w_lora.lora.2.bias", "att.w0", Scope::kEveryLayer},
    {"attn.a_lora.lora.0.weight", "att.a1", Scope::kEveryLayer},
    {"attn.a_lora.lora.2.weight", "att.a2", Scope::kEveryLayer},
    {"attn.a_lora.lora.2.bias", "att.a0", Scope::kEveryLayer},
    {"attn.v_lora.lora.0.weight", "att.v1", Scope::kAfterFirst},
    {"attn.v_lora.lora.2.weight", "att.v2", Scope::kAfterFirst},
    {"attn.v_lora.lora.2.bias", "att.v0", Scope::kAfterFirst},
    {"attn.g_lora.lora.0.weight", "att.g1", Scope::kEveryLayer},
    {"attn.g_lora.lora.2.weight", "att.g2", Scope::kEveryLayer},
    {"attn.g_norm.weight", "att.ln_x.weight", Scope::kEveryLayer},
    {"attn.g_norm.bias", "att.ln_x.bias", Scope::kEveryLayer},
    {"ffn.x_k", "ffn.x_k", Scope::kEveryLayer},
    {"ffn.key.weight", "ffn.key.weight", Scope::kEveryLayer},
    {"ffn.value.weight", "ffn.value.weight", Scope::kEveryLayer},
};

struct TopName {
  std::string_view fla, blink;
  bool norm_bias;
};
constexpr TopName kTop[] = {
    {"model.embeddings.weight", "emb.weight", false},
    {"model.norm.weight", "ln_out.weight", false},
    {"model.norm.bias", "ln_out.bias", true},
    {"lm_head.weight", "head.weight", false},
};

constexpr std::string_view kFlaLayers = "model.layers.", kBlinkLayers = "blocks.";

// The mixes and per-channel parameters: the forward binds each as one flat vector.
constexpr std::string_view kVectors[] = {"att.x_r", "att.x_w", "att.x_k", "att.x_v", "att.x_a", "att.x_g", "att.k_k",
                                         "att.k_a", "att.w0",  "att.a0",  "att.v0",  "ffn.x_k"};
constexpr std::string_view kMixes[] = {"att.x_r", "att.x_w", "att.x_k", "att.x_v", "att.x_a", "att.x_g"};  // x_x's order

// "<prefix>12.rest" -> (12, "rest"); (-1, "") when `name` is not under prefix with a layer number.
std::pair<int64_t, std::string_view> split_layer(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return {-1, {}};
  const std::string_view rest = name.substr(prefix.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 9) return {-1, {}};
  int64_t il = 0;
  for (const char ch : rest.substr(0, dot)) {
    if (ch < '0' || ch > '9') return {-1, {}};
    il = il * 10 + (ch - '0');
  }
  return {il, rest.substr(dot + 1)};
}

std::string blk(int64_t il, std::string_view suffix) {
  return std::string(kBlinkLayers) + std::to_string(il) + "." + std::string(suffix);
}

std::string torch_shape(const WeightView& w) {  // ggml ne reversed: what the safetensors header says
  std::string s = "[";
  for (size_t i = w.ne.size(); i-- > 0;) s += std::to_string(w.ne[i]) + (i ? ", " : "");
  return s + "]";
}

// fla's LoRA width when config.json sets it to null (RWKV7Attention: sqrt-of-width rules, rounded to 32;
// Python's round() is half-to-even, as nearbyint in the default rounding mode).
int64_t fla_default_rank(double scale, int64_t hidden, double factor) {
  const double r = std::nearbyint(scale * std::sqrt(static_cast<double>(hidden)) * factor / 32.0) * 32.0;
  return std::max<int64_t>(32, static_cast<int64_t>(r));
}

// A LoRA width: the config's number; fla's RWKV7Config default when the key is absent; the layer's own rule when
// it is null.
int64_t lora_rank(const hf::JsonReader& r, std::string_view key, int64_t config_default, double scale, int64_t hidden,
                  double factor) {
  if (r.has(key)) return r.positive_int(key);
  if (r.contains(key)) return fla_default_rank(scale, hidden, factor);
  return config_default;
}

}  // namespace

std::optional<std::string> rwkv7_fla_name(std::string_view blink_name) {
  for (const TopName& t : kTop) {
    if (blink_name == t.blink) return std::string(t.fla);
  }
  if (blink_name == "blocks.0.ln0.weight" || blink_name == "blocks.0.ln0.bias") {
    return std::string(kFlaLayers) + "0.pre_norm." + std::string(blink_name.substr(blink_name.rfind('.') + 1));
  }
  const auto [il, suffix] = split_layer(blink_name, kBlinkLayers);
  if (il < 0) return std::nullopt;
  for (const FlaName& n : kLayer) {
    if (suffix == n.blink) return std::string(kFlaLayers) + std::to_string(il) + "." + std::string(n.fla);
  }
  return std::nullopt;
}

void read_rwkv7_hf(const hf::HfConfig& config, ModelConfig& c) {
  const hf::JsonReader& r = config.root;
  c.arch = "rwkv7";
  // RWKV7Config's defaults (fla/models/rwkv7/configuration_rwkv7.py)
  c.n_vocab = r.positive_int("vocab_size", 32000);
  c.n_embd = r.positive_int("hidden_size", 2048);
  c.n_layer = r.positive_int("num_hidden_layers", 24);
  if (r.has("head_dim") || !r.has("num_heads")) {
    c.head_dim = r.positive_int("head_dim", 64);
    GA_CHECK(c.n_embd % c.head_dim == 0, InvalidFormat, r.source(), ": head_dim ", c.head_dim,
             " does not divide hidden_size ", c.n_embd);
    c.n_head = c.n_embd / c.head_dim;
  } else {
    c.n_head = r.positive_int("num_heads");
    GA_CHECK(c.n_embd % c.n_head == 0, InvalidFormat, r.source(), ": num_heads ", c.n_head,
             " does not divide hidden_size ", c.n_embd);
    c.head_dim = c.n_embd / c.n_head;
  }
  c.n_head_kv = c.n_head;
  if (r.has("intermediate_size")) {
    c.n_ff = r.positive_int("intermediate_size");
  } else {  // RWKV7FeedForward: hidden_size * hidden_ratio rounded up to a multiple of 32
    const int64_t ratio = r.positive_int("hidden_ratio", 4);
    c.n_ff = (c.n_embd * ratio + 31) / 32 * 32;
  }
  // RWKV is not context-limited; max_position_embeddings is only for the hybrid attention layers refused below.
  c.n_ctx_train = 0;

  RwkvParams& p = c.rwkv;
  const double norm_eps = r.number("norm_eps", 1e-5);
  GA_CHECK(norm_eps > 0, InvalidFormat, r.source(), ": norm_eps ", norm_eps, " is not positive");
  p.layer_norm_eps = static_cast<float>(norm_eps);
  p.group_norm_eps = static_cast<float>(static_cast<double>(c.head_dim) * norm_eps);  // RWKV7Attention's g_norm
  const double factor = static_cast<double>(c.head_dim) / 64.0;  // "increase lora dimension for headdim > 64"
  p.lora_decay = lora_rank(r, "decay_low_rank_dim", 64, 2.5, c.n_embd, factor);
  p.lora_iclr = lora_rank(r, "a_low_rank_dim", 64, 2.5, c.n_embd, factor);
  p.lora_value_mix = lora_rank(r, "v_low_rank_dim", 16, 1.7, c.n_embd, factor);
  p.lora_gate = lora_rank(r, "gate_low_rank_dim", 128, 5.0, c.n_embd, 1.0);

  GA_CHECK(!r.has("attn"), Unsupported, r.source(), ": attn is set (", r.dump("attn"),
           "): hybrid RWKV-7 models, with softmax attention in some layers, are not supported");
  const std::string act = r.string("hidden_act", "sqrelu");
  GA_CHECK(act == "sqrelu", Unsupported, r.source(), ": hidden_act '", act,
           "'; the RWKV-7 channel mix is relu(x)^2 (\"sqrelu\")");
  GA_CHECK(r.boolean("norm_first", true), Unsupported, r.source(),
           ": norm_first is false (no pre_norm before layer 0); the RWKV forward always applies it");
  if (r.has("value_dim")) {
    const std::string v = r.dump("value_dim");
    std::vector<int64_t> dims = v.starts_with("[") ? r.integers("value_dim") : std::vector<int64_t>{r.integer("value_dim", 0)};
    for (const int64_t d : dims) {
      GA_CHECK(d == c.n_embd, Unsupported, r.source(), ": value_dim ", v, " differs from hidden_size ", c.n_embd,
               "; the RWKV-7 forward takes v as wide as k");
    }
  }
  c.tied_embeddings = false;  // a tied lm_head becomes a view of the embeddings in rwkv7_hf_fixup
}

std::optional<HfTensorName> rwkv7_hf_tensor_name(std::string_view hf_name) {
  for (const TopName& t : kTop) {
    if (hf_name == t.fla) return HfTensorName{std::string(t.blink)};
  }
  const auto [il, suffix] = split_layer(hf_name, kFlaLayers);
  if (il < 0) return std::nullopt;
  for (const FlaName& n : kLayer) {
    if (suffix == n.fla) return HfTensorName{blk(il, n.blink)};
  }
  return std::nullopt;
}

void rwkv7_hf_fixup(const hf::HfConfig& config, LoadedModel& model) {
  const hf::JsonReader& r = config.root;
  const ModelConfig& c = model.config;
  const std::string where = "Hugging Face model '" + model.path + "'";
  const uint64_t C = static_cast<uint64_t>(c.n_embd);
  const auto fla = [](const std::string& blink) { return rwkv7_fla_name(blink).value_or(blink); };

  // A layer past num_hidden_layers means config and weights disagree; the tensor check would not notice it.
  for (const auto& [name, w] : model.weights) {
    const auto [il, suffix] = split_layer(name, kBlinkLayers);
    GA_CHECK(il < c.n_layer, InvalidFormat, where, ": tensor ", fla(name), " is beyond the ", c.n_layer,
             " layers config.json's num_hidden_layers declares");
  }
  for (int64_t il = 0; il < c.n_layer; ++il) {
    // fla's first layout: one x_x [6, C] (RWKV7Model.load_state_dict migrates it the same way)
    if (const WeightView* xx = model.find_weight(blk(il, "att.x_x")); xx != nullptr) {
      const WeightView stack = *xx;
      model.weights.erase(stack.name);
      GA_CHECK(stack.ne.size() >= 2 && stack.ne[0] == C && stack.ne[1] == std::size(kMixes), InvalidFormat, where,
               ": tensor ", fla(stack.name), " is ", torch_shape(stack), ", expected [6, ", C, "]");
      const uint64_t piece = stack.nbytes / std::size(kMixes);
      for (size_t i = 0; i < std::size(kMixes); ++i) {
        const std::string name = blk(il, kMixes[i]);
        if (model.find_weight(name) == nullptr) model.weights.emplace(name, WeightView{name, stack.type, {C}, stack.data + i * piece, piece});
      }
    }
    // dummies some converters wrote for layer 0, which has no v_lora in fla (and nothing reads there)
    if (il == 0) {
      for (const char* n : {"att.v0", "att.v1", "att.v2"}) model.weights.erase(blk(0, n));
    }
  }

  // LayerNorms without bias (config.norm_bias false): zero biases for the forward's affine layer norms.
  const bool norm_bias = r.boolean("norm_bias", true);
  if (!norm_bias) {
    std::vector<std::string> names = {"ln_out.bias", "blocks.0.ln0.bias"};
    for (int64_t il = 0; il < c.n_layer; ++il) names.insert(names.end(), {blk(il, "ln1.bias"), blk(il, "ln2.bias")});
    for (const std::string& n : names) {
      GA_CHECK(model.find_weight(n) == nullptr, InvalidFormat, where, ": config.json's norm_bias is false but ",
               fla(n), " is present");
      put_f32_tensor(model, n, std::vector<float>(C, 0.0f), {C});
    }
  }
  // transformers ties lm_head to the embeddings: the classifier is the embedding table itself
  if (r.boolean("tie_word_embeddings", false)) {
    if (const WeightView* emb = model.find_weight("emb.weight"); emb != nullptr) {
      WeightView head = *emb;
      head.name = "head.weight";
      model.weights["head.weight"] = head;
    }
  }

  // Every tensor the forward binds, named as the folder names it.
  for (const TopName& t : kTop) {
    GA_CHECK(model.find_weight(std::string(t.blink)) != nullptr, InvalidFormat, where, ": missing tensor ", t.fla,
             t.blink == "head.weight" ? " (and config.json does not set tie_word_embeddings)" : "");
  }
  for (int64_t il = 0; il < c.n_layer; ++il) {
    for (const FlaName& n : kLayer) {
      const bool needed = n.scope == Scope::kEveryLayer || (n.scope == Scope::kFirstLayer && il == 0) ||
                          (n.scope == Scope::kAfterFirst && il > 0) || (n.scope == Scope::kNormBias && norm_bias);
      GA_CHECK(!needed || model.find_weight(blk(il, n.blink)) != nullptr, InvalidFormat, where, ": missing tensor ",
               kFlaLayers, il, ".", n.fla);
    }
  }

  // The LoRA and channel-mix widths against config.json (the generic check does not know them), in torch order.
  const auto expect = [&](int64_t il, const char* name, uint64_t out, uint64_t in, const char* field) {
    const WeightView& w = model.weight(blk(il, name));
    GA_CHECK(w.ne.size() == 2 && w.ne[0] == in && w.ne[1] == out, InvalidFormat, where, ": tensor ",
             fla(w.name), " is ", torch_shape(w), ", expected [", out, ", ", in, "] from config.json's ", field);
  };
  const RwkvParams& p = c.rwkv;
  const uint64_t F = static_cast<uint64_t>(c.n_ff);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const auto pair = [&](const char* down, const char* up, int64_t rank, const char* field) {
      expect(il, down, static_cast<uint64_t>(rank), C, field);
      expect(il, up, C, static_cast<uint64_t>(rank), field);
    };
    pair("att.w1", "att.w2", p.lora_decay, "decay_low_rank_dim");
    pair("att.a1", "att.a2", p.lora_iclr, "a_low_rank_dim");
    if (il > 0) pair("att.v1", "att.v2", p.lora_value_mix, "v_low_rank_dim");
    pair("att.g1", "att.g2", p.lora_gate, "gate_low_rank_dim");
    expect(il, "ffn.key.weight", F, C, "intermediate_size (or hidden_size * hidden_ratio)");
    expect(il, "ffn.value.weight", C, F, "intermediate_size (or hidden_size * hidden_ratio)");

    // r_k [H, S] per head; the mixes [1, 1, C]; the rest [C]: all bound flat
    WeightView& rk = model.weights.at(blk(il, "att.r_k"));
    const std::vector<uint64_t> heads = {static_cast<uint64_t>(c.head_dim), static_cast<uint64_t>(c.n_head)};
    GA_CHECK(rk.ne == heads, InvalidFormat, where, ": tensor ", fla(rk.name), " is ", torch_shape(rk), ", expected [",
             c.n_head, ", ", c.head_dim, "] (hidden_size / head_dim heads)");
    rk.ne = {C};
    for (const std::string_view v : kVectors) {
      const auto it = model.weights.find(blk(il, v));
      if (it == model.weights.end()) continue;  // layer 0's v0
      WeightView& w = it->second;
      uint64_t n = 1, big = 0;
      for (const uint64_t d : w.ne) {
        n *= d;
        big += d > 1 ? 1 : 0;
      }
      if (big <= 1) w.ne = {n};  // otherwise the tensor check reports its shape
    }
  }
}

}  // namespace ga::arch
