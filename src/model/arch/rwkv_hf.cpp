// transformers' RwkvForCausalLM folder -> the RWKV-4 forward's names and values (see rwkv_hf.h).
#include "model/arch/rwkv_hf.h"

#include <cmath>
#include <string>

#include "gpu_accel/error.h"
#include "model/arch/hf_common.h"

namespace ga::arch {
namespace {

struct Rename {
  std::string_view hf, ours;
};

constexpr Rename kTop[] = {
    {"rwkv.embeddings.weight", "emb.weight"}, {"rwkv.ln_out.weight", "ln_out.weight"},
    {"rwkv.ln_out.bias", "ln_out.bias"},      {"head.weight", "head.weight"},
};

// After "rwkv.blocks.N."
constexpr Rename kLayer[] = {
    {"pre_ln.weight", "ln0.weight"},
    {"pre_ln.bias", "ln0.bias"},
    {"ln1.weight", "ln1.weight"},
    {"ln1.bias", "ln1.bias"},
    {"ln2.weight", "ln2.weight"},
    {"ln2.bias", "ln2.bias"},
    {"attention.time_decay", "att.time_decay"},
    {"attention.time_first", "att.time_first"},
    {"attention.time_mix_key", "att.time_mix_k"},
    {"attention.time_mix_value", "att.time_mix_v"},
    {"attention.time_mix_receptance", "att.time_mix_r"},
    {"attention.key.weight", "att.key.weight"},
    {"attention.value.weight", "att.value.weight"},
    {"attention.receptance.weight", "att.receptance.weight"},
    {"attention.output.weight", "att.output.weight"},
    {"feed_forward.time_mix_key", "ffn.time_mix_k"},
    {"feed_forward.time_mix_receptance", "ffn.time_mix_r"},
    {"feed_forward.key.weight", "ffn.key.weight"},
    {"feed_forward.receptance.weight", "ffn.receptance.weight"},
    {"feed_forward.value.weight", "ffn.value.weight"},
};

std::string blk(int64_t il, std::string_view name) { return "blocks." + std::to_string(il) + "." + std::string(name); }

}  // namespace

void read_rwkv4_hf(const hf::HfConfig& config, ModelConfig& c) {
  const hf::JsonReader& r = config.root;
  c.arch = "rwkv4";
  // RwkvConfig's defaults (configuration_rwkv.py)
  c.n_vocab = r.positive_int("vocab_size", 50277);
  c.n_embd = r.positive_int("hidden_size", 4096);
  c.n_layer = r.positive_int("num_hidden_layers", 32);
  c.n_ff = r.has("intermediate_size") ? r.positive_int("intermediate_size") : 4 * c.n_embd;
  const int64_t attention = r.has("attention_hidden_size") ? r.positive_int("attention_hidden_size") : c.n_embd;
  GA_CHECK(attention == c.n_embd, Unsupported, r.source(), ": attention_hidden_size ", attention,
           " differs from hidden_size ", c.n_embd, "; the RWKV-4 forward takes square time-mix matrices");
  c.n_ctx_train = r.positive_int("context_length", 1024);
  c.n_head = 1;
  c.n_head_kv = 1;
  c.head_dim = c.n_embd;
  c.rwkv.layer_norm_eps = static_cast<float>(r.number("layer_norm_epsilon", 1e-5));
  c.rwkv.rescale_every = r.integer("rescale_every", 6);
  GA_CHECK(c.rwkv.rescale_every >= 0, InvalidFormat, r.source(), ": rescale_every is negative");
  GA_CHECK(!r.boolean("tie_word_embeddings", false), Unsupported, r.source(),
           ": tie_word_embeddings is true; RWKV checkpoints carry their own head.weight");
}

std::optional<HfTensorName> rwkv4_hf_tensor_name(std::string_view hf_name) {
  for (const Rename& t : kTop) {
    if (hf_name == t.hf) return HfTensorName{std::string(t.ours)};
  }
  constexpr std::string_view kPrefix = "rwkv.blocks.";
  if (!hf_name.starts_with(kPrefix)) return std::nullopt;
  const std::string_view rest = hf_name.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos) return std::nullopt;
  for (const char ch : rest.substr(0, dot)) {
    if (ch < '0' || ch > '9') return std::nullopt;
  }
  const std::string_view suffix = rest.substr(dot + 1);
  for (const Rename& t : kLayer) {
    if (suffix == t.hf) return HfTensorName{"blocks." + std::string(rest.substr(0, dot)) + "." + std::string(t.ours)};
  }
  return std::nullopt;
}

void rwkv4_hf_fixup(const hf::HfConfig&, LoadedModel& model) {
  const ModelConfig& c = model.config;
  const uint64_t C = static_cast<uint64_t>(c.n_embd);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    // The per-channel parameters as the flat float32 vectors the forward binds (HF: [1, 1, C] mixes, any dtype).
    for (const char* name : {"att.time_decay", "att.time_first", "att.time_mix_k", "att.time_mix_v", "att.time_mix_r",
                             "ffn.time_mix_k", "ffn.time_mix_r"}) {
      const WeightView* w = model.find_weight(blk(il, name));
      if (w == nullptr) continue;  // the tensor check names it
      std::vector<float> v = tensor_f32(*w);
      GA_CHECK(v.size() == C, InvalidFormat, "tensor ", w->name, " has ", v.size(), " values, expected ", C);
      if (std::string_view(name) == "att.time_decay") {
        for (float& x : v) x = -std::exp(x);  // modeling_rwkv: time_decay = -torch.exp(time_decay)
      }
      put_f32_tensor(model, blk(il, name), std::move(v), {C});
    }
    // transformers' eval-mode rescaling (RwkvModel._rescale_layers): the forward halves the stream to match
    const int64_t shift = c.rwkv.rescale_every > 0 ? il / c.rwkv.rescale_every : 0;
    if (shift == 0) continue;
    for (const char* name : {"att.output.weight", "ffn.value.weight"}) {
      const WeightView* w = model.find_weight(blk(il, name));
      if (w == nullptr) continue;
      const std::vector<uint64_t> ne = w->ne;
      std::vector<float> v = tensor_f32(*w);
      const float factor = std::ldexp(1.0f, -static_cast<int>(shift));
      for (float& x : v) x *= factor;
      put_f32_tensor(model, blk(il, name), std::move(v), ne);
    }
  }
}

}  // namespace ga::arch
