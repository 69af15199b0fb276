// RWKV 6 / 7 GGUF keys and tensors (see rwkv_gguf.h): one name table, read in both directions.
#include "model/arch/rwkv_gguf.h"

#include <map>
#include <span>

#include "gpu_accel/error.h"

namespace ga::arch {
namespace {

constexpr uint8_t kV6 = 1, kV7 = 2, kBoth = kV6 | kV7;
constexpr int64_t kTokenShiftCount = 2;  // llama.cpp's rwkv6/rwkv7 graphs assert it: time mix and channel mix

uint8_t version_bit(std::string_view arch) {
  if (arch == "rwkv6") return kV6;
  if (arch == "rwkv7") return kV7;
  GA_THROW(Unsupported, "RWKV in GGUF is rwkv6 or rwkv7 (llama.cpp's converter), not '", arch, "'");
}

// One tensor in both namings.
struct NamePair {
  const char* blink;  // rwkv_loader's name, without "blocks.N." for per-layer tensors
  const char* gguf;   // without "blk.N."
  uint8_t versions;
};

constexpr NamePair kTopLevel[] = {
    {"emb.weight", "token_embd.weight", kBoth},
    {"blocks.0.ln0.weight", "token_embd_norm.weight", kBoth},
    {"blocks.0.ln0.bias", "token_embd_norm.bias", kBoth},
    {"ln_out.weight", "output_norm.weight", kBoth},
    {"ln_out.bias", "output_norm.bias", kBoth},
    {"head.weight", "output.weight", kBoth},
};

constexpr NamePair kLayer[] = {
    {"ln1.weight", "attn_norm.weight", kBoth},
    {"ln1.bias", "attn_norm.bias", kBoth},
    {"ln2.weight", "attn_norm_2.weight", kBoth},
    {"ln2.bias", "attn_norm_2.bias", kBoth},
    {"att.receptance.weight", "time_mix_receptance.weight", kBoth},
    {"att.key.weight", "time_mix_key.weight", kBoth},
    {"att.value.weight", "time_mix_value.weight", kBoth},
    {"att.output.weight", "time_mix_output.weight", kBoth},
    {"att.ln_x.weight", "time_mix_ln.weight", kBoth},
    {"att.ln_x.bias", "time_mix_ln.bias", kBoth},
    {"ffn.key.weight", "channel_mix_key.weight", kBoth},
    {"ffn.value.weight", "channel_mix_value.weight", kBoth},
    // v6
    {"att.time_maa_x", "time_mix_lerp_x.weight", kV6},
    {"att.time_maa_w1", "time_mix_w1.weight", kV6},
    {"att.time_maa_w2", "time_mix_w2.weight", kV6},  // [D, C, 5]: split into time_maa_w2.0 .. .4 on load
    {"att.time_decay", "time_mix_decay.weight", kV6},
    {"att.time_decay_w1", "time_mix_decay_w1.weight", kV6},
    {"att.time_decay_w2", "time_mix_decay_w2.weight", kV6},
    {"att.time_faaaa", "time_mix_first.weight", kV6},
    {"att.gate.weight", "time_mix_gate.weight", kV6},
    {"ffn.time_maa_k", "channel_mix_lerp_k.weight", kV6},
    {"ffn.time_maa_r", "channel_mix_lerp_r.weight", kV6},
    {"ffn.receptance.weight", "channel_mix_receptance.weight", kV6},
    // older converters' v6 lerp vectors, one tensor each (today's write time_mix_lerp_fused; llama.cpp reads both)
    {"att.time_maa_w", "time_mix_lerp_w.weight", kV6},
    {"att.time_maa_k", "time_mix_lerp_k.weight", kV6},
    {"att.time_maa_v", "time_mix_lerp_v.weight", kV6},
    {"att.time_maa_r", "time_mix_lerp_r.weight", kV6},
    {"att.time_maa_g", "time_mix_lerp_g.weight", kV6},
    // v7
    {"att.w0", "time_mix_w0.weight", kV7},
    {"att.w1", "time_mix_w1.weight", kV7},
    {"att.w2", "time_mix_w2.weight", kV7},
    {"att.a0", "time_mix_a0.weight", kV7},
    {"att.a1", "time_mix_a1.weight", kV7},
    {"att.a2", "time_mix_a2.weight", kV7},
    {"att.v0", "time_mix_v0.weight", kV7},
    {"att.v1", "time_mix_v1.weight", kV7},
    {"att.v2", "time_mix_v2.weight", kV7},
    {"att.g1", "time_mix_g1.weight", kV7},
    {"att.g2", "time_mix_g2.weight", kV7},
    {"att.k_k", "time_mix_k_k.weight", kV7},
    {"att.k_a", "time_mix_k_a.weight", kV7},
    {"att.r_k", "time_mix_r_k.weight", kV7},
    {"ffn.x_k", "channel_mix_lerp_k.weight", kV7},
};

constexpr const char* kFusedLerp = "time_mix_lerp_fused.weight";
constexpr const char* kV6LoraUp = "time_mix_w2.weight";

// "blk.12.time_mix_key.weight" -> (12, "time_mix_key.weight"); (-1, name) for a top-level name.
std::pair<int64_t, std::string_view> split_layer(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return {-1, name};
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string_view::npos || dot == prefix.size()) return {-1, name};
  int64_t il = 0;
  for (size_t i = prefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return {-1, name};
    il = il * 10 + (name[i] - '0');
  }
  return {il, name.substr(dot + 1)};
}

std::string blk(int64_t il, std::string_view suffix) { return "blk." + std::to_string(il) + "." + std::string(suffix); }

std::vector<TensorSpec> gguf_specs(const ModelConfig& c, bool fused_lerp) {
  const uint64_t C = static_cast<uint64_t>(c.n_embd), V = static_cast<uint64_t>(c.n_vocab),
                 F = static_cast<uint64_t>(c.n_ff), S = static_cast<uint64_t>(c.head_dim),
                 H = static_cast<uint64_t>(c.n_head);
  const RwkvParams& p = c.rwkv;
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const bool v6 = version_bit(c.arch) == kV6;
  std::vector<TensorSpec> s = {{"token_embd.weight", {C, V}}, {"token_embd_norm.weight", {C}}, {"token_embd_norm.bias", {C}}};
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const auto add = [&](const char* suffix, std::vector<uint64_t> ne) { s.push_back({blk(il, suffix), std::move(ne)}); };
    add("attn_norm.weight", {C});
    add("attn_norm.bias", {C});
    add("attn_norm_2.weight", {C});
    add("attn_norm_2.bias", {C});
    if (v6) {
      const uint64_t D = u(p.time_mix_extra_dim), Dd = u(p.time_decay_extra_dim);
      add("time_mix_lerp_x.weight", {C});
      if (fused_lerp) {
        add(kFusedLerp, {C, 1, 1, 5});
      } else {
        for (const char* n : {"time_mix_lerp_w.weight", "time_mix_lerp_k.weight", "time_mix_lerp_v.weight",
                              "time_mix_lerp_r.weight", "time_mix_lerp_g.weight"}) {
          add(n, {C});
        }
      }
      add("time_mix_w1.weight", {C, 5 * D});
      add(kV6LoraUp, {D, C, 5});
      add("time_mix_decay.weight", {C});
      add("time_mix_decay_w1.weight", {C, Dd});
      add("time_mix_decay_w2.weight", {Dd, C});
      add("time_mix_first.weight", {S, H});
      add("time_mix_receptance.weight", {C, C});
      add("time_mix_key.weight", {C, C});
      add("time_mix_value.weight", {C, C});
      add("time_mix_gate.weight", {C, C});
      add("time_mix_output.weight", {C, C});
      add("time_mix_ln.weight", {C});
      add("time_mix_ln.bias", {C});
      add("channel_mix_lerp_k.weight", {C});
      add("channel_mix_lerp_r.weight", {C});
      add("channel_mix_key.weight", {C, F});
      add("channel_mix_receptance.weight", {C, C});
      add("channel_mix_value.weight", {F, C});
    } else {
      // layer 0's v LoRA is the converter's copy of the a LoRA (llama.cpp's loader wants it; nothing reads it)
      const uint64_t Ld = u(p.lora_decay), La = u(p.lora_iclr), Lv = il == 0 ? La : u(p.lora_value_mix),
                     Lg = u(p.lora_gate);
      add(kFusedLerp, {C, 1, 1, 6});
      add("time_mix_w0.weight", {C});
      add("time_mix_w1.weight", {C, Ld});
      add("time_mix_w2.weight", {Ld, C});
      add("time_mix_a0.weight", {C});
      add("time_mix_a1.weight", {C, La});
      add("time_mix_a2.weight", {La, C});
      add("time_mix_v0.weight", {C});
      add("time_mix_v1.weight", {C, Lv});
      add("time_mix_v2.weight", {Lv, C});
      add("time_mix_g1.weight", {C, Lg});
      add("time_mix_g2.weight", {Lg, C});
      add("time_mix_k_k.weight", {C});
      add("time_mix_k_a.weight", {C});
      add("time_mix_r_k.weight", {C});
      add("time_mix_receptance.weight", {C, C});
      add("time_mix_key.weight", {C, C});
      add("time_mix_value.weight", {C, C});
      add("time_mix_output.weight", {C, C});
      add("time_mix_ln.weight", {C});
      add("time_mix_ln.bias", {C});
      add("channel_mix_lerp_k.weight", {C});
      add("channel_mix_key.weight", {C, F});
      add("channel_mix_value.weight", {F, C});
    }
  }
  for (TensorSpec t : std::vector<TensorSpec>{{"output_norm.weight", {C}}, {"output_norm.bias", {C}}, {"output.weight", {C, V}}}) {
    s.push_back(std::move(t));
  }
  return s;
}

const NamePair* find_pair(std::span<const NamePair> table, uint8_t version, std::string_view name, bool by_gguf) {
  for (const NamePair& p : table) {
    if ((p.versions & version) != 0 && name == (by_gguf ? p.gguf : p.blink)) return &p;
  }
  return nullptr;
}

// A parameter the forward binds as one flat vector (rwkv_loader's rule): F32 with at most one dimension
// above 1, and v6's time_first [S, H].
void flatten_vector(WeightView& w) {
  int big = 0;
  uint64_t n = 1;
  for (const uint64_t d : w.ne) {
    big += d > 1 ? 1 : 0;
    n *= d;
  }
  if (w.type == DType::F32 && (big <= 1 || w.name.ends_with(".att.time_faaaa"))) w.ne = {n};
}

}  // namespace

void read_rwkv_gguf(const GgufKeys& hp, ModelConfig& c) {
  const bool v6 = version_bit(c.arch) == kV6;
  c.n_ctx_train = hp.optional_int("context_length").value_or(0);
  c.n_embd = hp.required_int("embedding_length");
  c.n_layer = hp.required_int("block_count");
  c.n_ff = hp.required_int("feed_forward_length");
  const int64_t head_size = hp.required_int("wkv.head_size");
  GA_CHECK(c.n_embd > 0 && head_size > 0 && c.n_embd % head_size == 0, InvalidFormat, "gguf: ", hp.key("wkv.head_size"),
           " = ", head_size, " does not divide ", hp.key("embedding_length"), " = ", c.n_embd);
  c.head_dim = head_size;
  c.n_head = c.n_embd / head_size;  // attention.head_count is 0 in these files ("required by llama.cpp, unused")
  c.n_head_kv = c.n_head;
  c.n_vocab = hp.optional_int("vocab_size").value_or(0);
  const int64_t shifts = hp.optional_int("token_shift_count").value_or(kTokenShiftCount);
  GA_CHECK(shifts == kTokenShiftCount, Unsupported, "gguf: ", hp.key("token_shift_count"), " = ", shifts,
           " (RWKV 6/7 shift twice per layer; other counts are the hybrid models, not supported)");
  RwkvParams& p = c.rwkv;
  p.layer_norm_eps = static_cast<float>(hp.optional_float("attention.layer_norm_epsilon").value_or(1e-5));
  p.rescale_every = hp.optional_int("rescale_every_n_layers").value_or(0);
  GA_CHECK(p.rescale_every >= 0, InvalidFormat, "gguf: ", hp.key("rescale_every_n_layers"), " is negative");
  if (v6) {
    p.time_mix_extra_dim = hp.required_int("time_mix_extra_dim");
    p.time_decay_extra_dim = hp.required_int("time_decay_extra_dim");
  } else {
    p.lora_decay = hp.required_int("attention.decay_lora_rank");
    p.lora_iclr = hp.required_int("attention.iclr_lora_rank");
    p.lora_value_mix = hp.required_int("attention.value_residual_mix_lora_rank");
    p.lora_gate = hp.optional_int("attention.gate_lora_rank").value_or(0);
    GA_CHECK(p.lora_gate > 0, Unsupported, "gguf: ", hp.key("attention.gate_lora_rank"),
             " is absent or 0: RWKV-7 without the output gate is not supported");
    GA_CHECK(p.rescale_every == 0, Unsupported, "gguf: ", hp.key("rescale_every_n_layers"),
             " is set, which llama.cpp's rwkv7 does not read");
  }
  for (const int64_t d : {p.time_mix_extra_dim, p.time_decay_extra_dim, p.lora_decay, p.lora_iclr, p.lora_value_mix}) {
    GA_CHECK(d >= 0, InvalidFormat, "gguf: '", c.arch, "' has a negative LoRA width");
  }
}

void write_rwkv_gguf(const ModelConfig& c, gguf::Writer& w) {
  const std::string a = c.arch + ".";
  const auto u32 = [](int64_t v) { return gguf::Value::u32(static_cast<uint32_t>(v)); };
  const RwkvParams& p = c.rwkv;
  const bool v6 = version_bit(c.arch) == kV6;
  w.set(a + "context_length", u32(c.n_ctx_train));
  w.set(a + "embedding_length", u32(c.n_embd));
  w.set(a + "block_count", u32(c.n_layer));
  w.set(a + "attention.layer_norm_epsilon", gguf::Value::f32(p.layer_norm_eps));
  if (v6) w.set(a + "rescale_every_n_layers", u32(p.rescale_every));
  w.set(a + "wkv.head_size", u32(c.head_dim));
  if (v6) {
    w.set(a + "time_mix_extra_dim", u32(p.time_mix_extra_dim));
    w.set(a + "time_decay_extra_dim", u32(p.time_decay_extra_dim));
  } else {
    w.set(a + "attention.decay_lora_rank", u32(p.lora_decay));
    w.set(a + "attention.iclr_lora_rank", u32(p.lora_iclr));
    w.set(a + "attention.value_residual_mix_lora_rank", u32(p.lora_value_mix));
    w.set(a + "attention.gate_lora_rank", u32(p.lora_gate));
  }
  w.set(a + "feed_forward_length", u32(c.n_ff));
  w.set(a + "attention.head_count", u32(0));  // the converter's "required by llama.cpp, unused"
}

std::vector<TensorSpec> rwkv_gguf_tensor_specs(const ModelConfig& c) { return gguf_specs(c, true); }

std::vector<std::string> rwkv_fused_lerp_pieces(std::string_view arch) {
  if (version_bit(arch) == kV6) {
    return {"att.time_maa_w", "att.time_maa_k", "att.time_maa_v", "att.time_maa_r", "att.time_maa_g"};
  }
  return {"att.x_r", "att.x_w", "att.x_k", "att.x_v", "att.x_a", "att.x_g"};
}

std::optional<std::string> rwkv_blink_name(std::string_view arch, std::string_view gguf_name) {
  const uint8_t v = version_bit(arch);
  if (const NamePair* p = find_pair(kTopLevel, v, gguf_name, true)) return std::string(p->blink);
  const auto [il, suffix] = split_layer(gguf_name, "blk.");
  if (il < 0 || suffix == kFusedLerp || (v == kV6 && suffix == kV6LoraUp)) return std::nullopt;
  const NamePair* p = find_pair(kLayer, v, suffix, true);
  if (p == nullptr) return std::nullopt;
  return "blocks." + std::to_string(il) + "." + p->blink;
}

void rwkv_gguf_fixup(LoadedModel& model) {
  const ModelConfig& c = model.config;
  const uint8_t v = version_bit(c.arch);
  // Older v6 files carry the five lerp vectors apart; llama.cpp still reads them.
  const bool fused = v == kV7 || model.find_weight(blk(0, kFusedLerp)) != nullptr ||
                     model.find_weight(blk(0, "time_mix_lerp_w.weight")) == nullptr;
  check_tensors(model, gguf_specs(c, fused));

  std::map<std::string, WeightView, std::less<>> renamed;
  const auto put = [&](WeightView w) {
    const std::string name = w.name;
    GA_CHECK(renamed.emplace(name, std::move(w)).second, InvalidFormat, c.arch, ": two GGUF tensors map to ", name);
  };
  const std::vector<std::string> lerp_pieces = rwkv_fused_lerp_pieces(c.arch);
  for (auto& [name, w] : model.weights) {
    const auto [il, suffix] = split_layer(name, "blk.");
    GA_CHECK(il < c.n_layer, InvalidFormat, c.arch, ": tensor ", name, " is beyond block_count ", c.n_layer);
    const std::string base = "blocks." + std::to_string(il) + ".";
    if (il >= 0 && suffix == kFusedLerp) {
      // [C, 1, 1, k] f32: piece i is the i-th run of C floats (ggml's slowest dimension)
      GA_CHECK(w.type == DType::F32, Unsupported, c.arch, ": tensor ", name, " is ", traits(w.type).name,
               ", expected F32 (llama.cpp's converter never quantizes it)");
      const uint64_t C = static_cast<uint64_t>(c.n_embd);
      for (size_t i = 0; i < lerp_pieces.size(); ++i) {
        put(WeightView{base + lerp_pieces[i], DType::F32, {C}, w.data + i * C * sizeof(float), C * sizeof(float)});
      }
      continue;
    }
    if (il >= 0 && v == kV6 && suffix == kV6LoraUp) {
      // [D, C, 5]: the w, k, v, r, g mixes' up-projections, the names rwkv_loader gives its pieces
      const uint64_t piece = w.nbytes / w.ne[2];
      for (uint64_t i = 0; i < w.ne[2]; ++i) {
        put(WeightView{base + "att.time_maa_w2." + std::to_string(i), w.type, {w.ne[0], w.ne[1]}, w.data + i * piece, piece});
      }
      continue;
    }
    if (v == kV7 && il == 0 &&
        (suffix == "time_mix_v0.weight" || suffix == "time_mix_v1.weight" || suffix == "time_mix_v2.weight")) {
      continue;  // the converter's dummies: the first layer's v is v_first itself
    }
    std::optional<std::string> blink = rwkv_blink_name(c.arch, name);
    GA_CHECK(blink.has_value(), InvalidFormat, c.arch, ": unexpected tensor ", name, " in the GGUF");
    WeightView t = w;
    t.name = std::move(*blink);
    flatten_vector(t);
    put(std::move(t));
  }
  model.weights = std::move(renamed);
}

}  // namespace ga::arch
