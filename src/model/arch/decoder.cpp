// The decoder-only transformer (see decoder.h): tensor specs, state, and the Program.
#include "model/arch/decoder.h"

#include <cmath>
#include <string>
#include <utility>

#include "backends/cpu/quant.h"
#include "gpu_accel/error.h"
#include "model/arch/rope.h"

namespace ga::arch {
namespace {

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

std::string layer_name(int64_t il, const char* suffix) { return "blk." + std::to_string(il) + "." + suffix; }

bool layer_is_swa(const ModelConfig& c, int64_t il) {
  const TransformerParams& tp = c.transformer;
  return tp.sliding_window > 0 && static_cast<size_t>(il) < tp.swa_layers.size() &&
         tp.swa_layers[static_cast<size_t>(il)] != 0;
}

bool any_swa(const ModelConfig& c) {
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (layer_is_swa(c, il)) return true;
  }
  return false;
}

// A 1-D tensor's values on the host (RoPE factors), whatever its stored type.
std::vector<float> host_vector(const WeightView& w) {
  std::vector<float> v(static_cast<size_t>(w.cols()));
  cpu::dequantize_row(w.type, w.data, v.data(), w.cols());
  return v;
}

struct LayerHandles {
  step::Vec attn_norm, ffn_norm, post_attn_norm, post_ffw_norm;
  step::Weight wq, wk, wv, wqkv, wo;
  step::Vec bq, bk, bv, q_norm, k_norm;
  step::Weight w_gate, w_up, w_down;  // dense (w_up is [gate | up] when fused_gate_up)
  step::Weight router, gate_exps, up_exps, down_exps;
  step::Weight gate_sh, up_sh, down_sh;
  step::Vec gate_inp_sh;
  step::Rope rope;
  step::Kv kv;
  int64_t window_left = -1;
};

class DecoderProgram final : public step::Program {
 public:
  DecoderProgram(const ModelConfig& c, step::Binder& b, const std::vector<float>& global_factors,
                 const std::vector<float>& swa_factors)
      : c_(c) {
    const TransformerParams& tp = c.transformer;
    q_dim_ = c.n_head * c.head_dim;
    kv_dim_ = c.n_head_kv * c.head_dim;
    scale_ = tp.attn_scale > 0 ? tp.attn_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    token_embd_ = b.matrix("token_embd.weight");
    output_ = b.find_matrix("output.weight");
    if (!output_) output_ = token_embd_;
    output_norm_ = b.vector("output_norm.weight");
    const step::Rope global = b.rope(rope_table(c, false, global_factors, b.max_positions()));
    const step::Rope local = any_swa(c) ? b.rope(rope_table(c, true, swa_factors, b.max_positions())) : global;
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const auto name = [il](const char* suffix) { return layer_name(il, suffix); };
      LayerHandles L;
      L.attn_norm = b.vector(name("attn_norm.weight"));
      L.ffn_norm = b.vector(name("ffn_norm.weight"));
      if (tp.post_norms) {
        L.post_attn_norm = b.vector(name("post_attention_norm.weight"));
        L.post_ffw_norm = b.vector(name("post_ffw_norm.weight"));
      }
      if (tp.fused_qkv) {
        L.wqkv = b.matrix(name("attn_qkv.weight"));
      } else {
        L.wq = b.matrix(name("attn_q.weight"));
        L.wk = b.matrix(name("attn_k.weight"));
        L.wv = b.matrix(name("attn_v.weight"));
      }
      if (c.qkv_bias) {
        L.bq = b.vector(name("attn_q.bias"));
        L.bk = b.vector(name("attn_k.bias"));
        L.bv = b.vector(name("attn_v.bias"));
      }
      if (tp.qk_norm) {
        L.q_norm = b.vector(name("attn_q_norm.weight"));
        L.k_norm = b.vector(name("attn_k_norm.weight"));
      }
      L.wo = b.matrix(name("attn_output.weight"));
      if (tp.n_expert > 0) {
        L.router = b.matrix(name("ffn_gate_inp.weight"));
        L.gate_exps = b.matrix(name("ffn_gate_exps.weight"));
        L.up_exps = b.matrix(name("ffn_up_exps.weight"));
        L.down_exps = b.matrix(name("ffn_down_exps.weight"));
        if (tp.n_ff_shexp > 0) {
          L.gate_sh = b.matrix(name("ffn_gate_shexp.weight"));
          L.up_sh = b.matrix(name("ffn_up_shexp.weight"));
          L.down_sh = b.matrix(name("ffn_down_shexp.weight"));
          L.gate_inp_sh = b.vector(name("ffn_gate_inp_shexp.weight"));
        }
      } else {
        if (!tp.fused_gate_up) L.w_gate = b.matrix(name("ffn_gate.weight"));
        L.w_up = b.matrix(name("ffn_up.weight"));
        L.w_down = b.matrix(name("ffn_down.weight"));
      }
      const bool swa = layer_is_swa(c, il);
      L.rope = swa ? local : global;
      L.window_left = swa ? tp.sliding_window - 1 : -1;
      L.kv = b.kv(il);
      layers_.push_back(L);
    }
    resid_ = b.buffer(c.n_embd);
    xn_ = b.buffer(c.n_embd);
    tmp_ = b.buffer(c.n_embd);
    qkv_ = b.buffer(q_dim_ + 2 * kv_dim_);
    attn_ = b.buffer(q_dim_);
    if (tp.n_expert == 0) {
      gu_ = b.buffer(2 * c.n_ff);
    } else if (tp.n_ff_shexp > 0) {
      gu_ = b.buffer(2 * tp.n_ff_shexp);
      shared_ = b.buffer(c.n_embd);
    }
  }

  void run(step::Ops& ops) override {
    const TransformerParams& tp = c_.transformer;
    const step::View resid{resid_, 0, c_.n_embd}, xn{xn_, 0, c_.n_embd}, tmp{tmp_, 0, c_.n_embd};
    const step::View qkv{qkv_, 0, q_dim_ + 2 * kv_dim_};
    const step::View q = qkv.slice(0, q_dim_), k = qkv.slice(q_dim_, kv_dim_), v = qkv.slice(q_dim_ + kv_dim_, kv_dim_);
    const step::View attn{attn_, 0, q_dim_};
    ops.embed(token_embd_, resid, tp.embed_scale);  // [n][n_embd]
    for (size_t il = 0; il < layers_.size(); ++il) {
      const LayerHandles& L = layers_[il];
      // h = rmsnorm(resid [+= tmp: the previous layer's output]) * attn_norm
      step::RmsNormOp norm;
      norm.x = il == 0 ? resid : tmp;
      norm.residual = il == 0 ? step::View{} : resid;
      norm.weight = L.attn_norm;
      norm.out = xn;
      norm.eps = c_.rms_eps;
      norm.next = tp.fused_qkv ? std::array<step::Weight, 3>{L.wqkv, {}, {}}
                               : std::array<step::Weight, 3>{L.wq, L.wk, L.wv};
      ops.rms_norm(norm);
      if (tp.fused_qkv) {
        ops.linear(L.wqkv, xn, qkv);  // [n][q | k | v]
      } else {
        const step::Weight group[3] = {L.wq, L.wk, L.wv};
        ops.linear_concat(group, xn, qkv);
      }
      if (tp.qk_norm) {
        step::HeadNormOp hn;
        hn.x = q;
        hn.weight = L.q_norm;
        hn.x2 = k;
        hn.weight2 = L.k_norm;
        hn.head_dim = c_.head_dim;
        hn.eps = c_.rms_eps;
        ops.head_rms_norm(hn);
      }
      step::RopeKvOp rk;
      rk.q = q;
      rk.k = k;
      rk.v = v;
      rk.bq = L.bq;
      rk.bk = L.bk;
      rk.bv = L.bv;
      rk.n_head = c_.n_head;
      rk.n_head_kv = c_.n_head_kv;
      rk.head_dim = c_.head_dim;
      rk.rope = L.rope;
      rk.kv = L.kv;
      ops.rope_kv(rk);
      step::AttentionOp at;
      at.q = q;
      at.out = attn;
      at.kv = L.kv;
      at.n_head = c_.n_head;
      at.n_head_kv = c_.n_head_kv;
      at.head_dim = c_.head_dim;
      at.scale = scale_;
      at.window_left = L.window_left;
      at.softcap = tp.attn_softcap;
      ops.attention(at);                 // [n][n_head][head_dim]
      ops.linear(L.wo, attn, tmp);       // [n][n_embd]
      if (c_.shard.world > 1) ops.all_reduce(tmp);  // each rank's heads gave a partial sum
      if (tp.post_norms) post_norm(ops, tmp, L.post_attn_norm);

      // h = rmsnorm(resid += tmp) * ffn_norm; tmp = the feed-forward of h
      norm.x = tmp;
      norm.residual = resid;
      norm.weight = L.ffn_norm;
      norm.next = tp.n_expert > 0 ? std::array<step::Weight, 3>{L.gate_sh, L.up_sh, {}}
                                  : std::array<step::Weight, 3>{L.w_gate ? L.w_gate : L.w_up, L.w_up, {}};
      ops.rms_norm(norm);
      if (tp.n_expert > 0) {
        moe_ffn(ops, L, xn, tmp);
      } else {
        dense_ffn(ops, L.w_gate, L.w_up, L.w_down, c_.n_ff, xn, tmp);
      }
      if (c_.shard.world > 1) ops.all_reduce(tmp);  // each rank's FFN columns (and experts' columns)
      if (tp.post_norms) post_norm(ops, tmp, L.post_ffw_norm);
    }
    step::LogitsOp lo;
    lo.x = tmp;
    lo.residual = resid;
    lo.norm = output_norm_;
    lo.eps = c_.rms_eps;
    lo.output = output_;
    lo.softcap = tp.final_softcap;
    ops.logits(lo);  // [n_logits][n_vocab]
  }

 private:
  void post_norm(step::Ops& ops, step::View x, step::Vec weight) const {
    step::RmsNormOp n;
    n.x = x;
    n.weight = weight;
    n.out = x;
    n.eps = c_.rms_eps;
    ops.rms_norm(n);
  }

  // out = W_down act(W_gate h) * (W_up h); w_gate null: w_up holds [gate | up] (Phi-3).
  void dense_ffn(step::Ops& ops, step::Weight w_gate, step::Weight w_up, step::Weight w_down, int64_t ff,
                 step::View h, step::View out) const {
    const step::View gu{gu_, 0, 2 * ff};
    if (w_gate) {
      const step::Weight group[2] = {w_gate, w_up};
      ops.linear_concat(group, h, gu);  // [n][gate | up]
    } else {
      ops.linear(w_up, h, gu);
    }
    step::GluOp g;
    g.gate = gu.slice(0, ff);
    g.up = gu.slice(ff, ff);
    g.out = g.gate;  // in place: the down projection reads the gate slice
    g.act = c_.transformer.ffn_act == FfnActivation::GeluTanh ? step::Activation::kGeluTanh : step::Activation::kSilu;
    g.next = w_down;
    ops.glu(g);
    ops.linear(w_down, g.out, out);  // [n][n_embd]
  }

  void moe_ffn(step::Ops& ops, const LayerHandles& L, step::View h, step::View out) const {
    const TransformerParams& tp = c_.transformer;
    step::MoeOp m;
    m.x = h;
    m.out = out;
    m.router = L.router;
    m.gate_exps = L.gate_exps;
    m.up_exps = L.up_exps;
    m.down_exps = L.down_exps;
    m.n_expert = tp.n_expert;
    m.top_k = tp.n_expert_used;
    m.normalize_top_k = tp.expert_norm_topk;
    m.act = tp.ffn_act == FfnActivation::GeluTanh ? step::Activation::kGeluTanh : step::Activation::kSilu;
    ops.moe(m);
    if (tp.n_ff_shexp == 0) return;
    const step::View shared{shared_, 0, c_.n_embd};
    dense_ffn(ops, L.gate_sh, L.up_sh, L.down_sh, tp.n_ff_shexp, h, shared);
    if (L.gate_inp_sh) ops.sigmoid_gate(shared, L.gate_inp_sh, h);
    ops.add(out, shared);
  }

  ModelConfig c_;
  int64_t q_dim_ = 0, kv_dim_ = 0;
  float scale_ = 1.0f;
  step::Weight token_embd_, output_;
  step::Vec output_norm_;
  std::vector<LayerHandles> layers_;
  step::Buf resid_, xn_, tmp_, qkv_, attn_, gu_, shared_;
};

class DecoderFactory final : public step::ProgramFactory {
 public:
  explicit DecoderFactory(const LoadedModel& model) : c_(model.config) {
    const TransformerParams& tp = c_.transformer;
    if (const WeightView* rf = model.find_weight("rope_freqs.weight")) {
      global_factors_ = host_vector(*rf);
    } else if (c_.rope_scaling.type == RopeScalingType::Llama3) {
      global_factors_ = llama3_rope_freq_factors(c_);
    }
    if (c_.rope_scaling.type == RopeScalingType::LongRope) {
      short_factors_ = host_vector(model.weight("rope_factors_short.weight"));
      long_factors_ = host_vector(model.weight("rope_factors_long.weight"));
    }
    (void)tp;
  }

  step::StateSpec state() const override {
    step::StateSpec s;
    s.kv_layers.assign(static_cast<size_t>(c_.n_layer), step::KvLayerSpec{c_.n_head_kv, c_.head_dim, c_.n_head});
    return s;
  }

  std::vector<std::vector<std::string>> weight_groups() const override {
    std::vector<std::vector<std::string>> groups;
    for (int64_t il = 0; il < c_.n_layer; ++il) {
      const auto name = [il](const char* suffix) { return layer_name(il, suffix); };
      if (!c_.transformer.fused_qkv) {
        groups.push_back({name("attn_q.weight"), name("attn_k.weight"), name("attn_v.weight")});
      }
      if (c_.transformer.n_expert == 0 && !c_.transformer.fused_gate_up) {
        groups.push_back({name("ffn_gate.weight"), name("ffn_up.weight")});
      }
      if (c_.transformer.n_ff_shexp > 0) groups.push_back({name("ffn_gate_shexp.weight"), name("ffn_up_shexp.weight")});
    }
    return groups;
  }

  std::unique_ptr<step::Program> build(step::Binder& binder) const override {
    std::vector<float> factors = global_factors_;
    if (c_.rope_scaling.type == RopeScalingType::LongRope) {
      factors = rope_long_factors(c_, binder.max_positions()) ? long_factors_ : short_factors_;
    }
    return std::make_unique<DecoderProgram>(c_, binder, factors, factors);
  }

  std::string name() const override { return c_.arch; }

 private:
  ModelConfig c_;
  std::vector<float> global_factors_, short_factors_, long_factors_;
};

}  // namespace

std::vector<TensorSpec> decoder_tensor_specs(const ModelConfig& c) {
  const TransformerParams& tp = c.transformer;
  const uint64_t E = u(c.n_embd);
  const uint64_t q_dim = u(c.n_head * c.head_dim);
  const uint64_t kv_dim = u(c.n_head_kv * c.head_dim);
  std::vector<TensorSpec> specs;
  specs.push_back({"token_embd.weight", {E, u(c.n_vocab)}, true});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    specs.push_back({p + "attn_norm.weight", {E}, true});
    if (tp.fused_qkv) {
      specs.push_back({p + "attn_qkv.weight", {E, q_dim + 2 * kv_dim}, true});
    } else {
      specs.push_back({p + "attn_q.weight", {E, q_dim}, true});
      specs.push_back({p + "attn_k.weight", {E, kv_dim}, true});
      specs.push_back({p + "attn_v.weight", {E, kv_dim}, true});
    }
    if (c.qkv_bias) {
      specs.push_back({p + "attn_q.bias", {q_dim}, true});
      specs.push_back({p + "attn_k.bias", {kv_dim}, true});
      specs.push_back({p + "attn_v.bias", {kv_dim}, true});
    }
    if (tp.qk_norm) {
      specs.push_back({p + "attn_q_norm.weight", {u(c.head_dim)}, true});
      specs.push_back({p + "attn_k_norm.weight", {u(c.head_dim)}, true});
    }
    specs.push_back({p + "attn_output.weight", {q_dim, E}, true});
    specs.push_back({p + "ffn_norm.weight", {E}, true});
    if (tp.post_norms) {
      specs.push_back({p + "post_attention_norm.weight", {E}, true});
      specs.push_back({p + "post_ffw_norm.weight", {E}, true});
    }
    if (tp.n_expert > 0) {
      const uint64_t X = u(tp.n_expert), F = u(tp.n_ff_exp);
      specs.push_back({p + "ffn_gate_inp.weight", {E, X}, true});
      specs.push_back({p + "ffn_gate_exps.weight", {E, F, X}, true});
      specs.push_back({p + "ffn_up_exps.weight", {E, F, X}, true});
      specs.push_back({p + "ffn_down_exps.weight", {F, E, X}, true});
      if (tp.n_ff_shexp > 0) {
        const uint64_t S = u(tp.n_ff_shexp);
        specs.push_back({p + "ffn_gate_shexp.weight", {E, S}, true});
        specs.push_back({p + "ffn_up_shexp.weight", {E, S}, true});
        specs.push_back({p + "ffn_down_shexp.weight", {S, E}, true});
        specs.push_back({p + "ffn_gate_inp_shexp.weight", {E}, true});
      }
    } else if (tp.fused_gate_up) {
      specs.push_back({p + "ffn_up.weight", {E, 2 * u(c.n_ff)}, true});
      specs.push_back({p + "ffn_down.weight", {u(c.n_ff), E}, true});
    } else {
      specs.push_back({p + "ffn_gate.weight", {E, u(c.n_ff)}, true});
      specs.push_back({p + "ffn_up.weight", {E, u(c.n_ff)}, true});
      specs.push_back({p + "ffn_down.weight", {u(c.n_ff), E}, true});
    }
  }
  specs.push_back({"output_norm.weight", {E}, true});
  specs.push_back({"output.weight", {E, u(c.n_vocab)}, !c.tied_embeddings});
  const bool longrope = c.rope_scaling.type == RopeScalingType::LongRope;
  specs.push_back({"rope_freqs.weight", {u(c.n_rot / 2)}, false});
  specs.push_back({"rope_factors_short.weight", {u(c.n_rot / 2)}, longrope});
  specs.push_back({"rope_factors_long.weight", {u(c.n_rot / 2)}, longrope});
  return specs;
}

void check_decoder_config(const ModelConfig& c) {
  const TransformerParams& tp = c.transformer;
  GA_CHECK(c.n_vocab > 0 && c.n_embd > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.head_dim > 0 &&
               (c.n_ff > 0 || tp.n_expert > 0),
           InvalidFormat, "model '", c.name, "': non-positive hyperparameter (n_vocab ", c.n_vocab, ", n_embd ",
           c.n_embd, ", n_layer ", c.n_layer, ", n_head ", c.n_head, ", n_head_kv ", c.n_head_kv, ", head_dim ",
           c.head_dim, ", n_ff ", c.n_ff, ")");
  GA_CHECK(c.n_head % c.n_head_kv == 0, InvalidFormat, "n_head ", c.n_head, " is not a multiple of n_head_kv ",
           c.n_head_kv);
  GA_CHECK(c.n_rot > 0 && c.n_rot % 2 == 0 && c.n_rot <= c.head_dim, InvalidFormat, "rope dimension count ", c.n_rot,
           " must be even and in (0, head_dim = ", c.head_dim, "]");
  GA_CHECK(std::isfinite(c.rms_eps) && c.rms_eps > 0, InvalidFormat, "rms epsilon ", c.rms_eps, " is not positive");
  GA_CHECK(std::isfinite(c.rope_freq_base) && c.rope_freq_base > 0, InvalidFormat, "rope freq base ",
           c.rope_freq_base, " is not positive");
  GA_CHECK(std::isfinite(c.rope_scaling.factor) && c.rope_scaling.factor > 0, InvalidFormat, "rope scaling factor ",
           c.rope_scaling.factor, " is not positive");
  const bool needs_original = c.rope_scaling.type == RopeScalingType::Yarn ||
                              c.rope_scaling.type == RopeScalingType::LongRope;
  GA_CHECK(!needs_original || c.rope_scaling.original_context > 0,
           InvalidFormat, "rope scaling needs a positive original context length");
  GA_CHECK(std::isfinite(tp.attn_softcap) && tp.attn_softcap >= 0 && std::isfinite(tp.final_softcap) &&
               tp.final_softcap >= 0,
           InvalidFormat, "soft-caps must be >= 0 (attention ", tp.attn_softcap, ", final ", tp.final_softcap, ")");
  GA_CHECK(std::isfinite(tp.attn_scale) && tp.attn_scale >= 0 && std::isfinite(tp.embed_scale), InvalidFormat,
           "attention scale ", tp.attn_scale, " / embedding scale ", tp.embed_scale, " must be finite (scale >= 0)");
  GA_CHECK(tp.sliding_window >= 0, InvalidFormat, "sliding window ", tp.sliding_window, " is negative");
  GA_CHECK(tp.swa_layers.empty() || static_cast<int64_t>(tp.swa_layers.size()) == c.n_layer, InvalidFormat,
           "the windowed-layer list has ", tp.swa_layers.size(), " entries for ", c.n_layer, " layers");
  if (tp.n_expert > 0) {
    GA_CHECK(tp.n_expert_used > 0 && tp.n_expert_used <= tp.n_expert && tp.n_ff_exp > 0, InvalidFormat,
             "mixture of experts: ", tp.n_expert_used, " used of ", tp.n_expert, " experts of feed-forward length ",
             tp.n_ff_exp);
  }
}

std::unique_ptr<step::ProgramFactory> make_decoder_factory(const LoadedModel& model) {
  return std::make_unique<DecoderFactory>(model);
}

TensorSplit decoder_tensor_split(const ModelConfig& c, std::string_view name) {
  using Kind = TensorSplit::Kind;
  const auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  const int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
  // The classifier by vocabulary rows (vocab-parallel: the group gathers the logits), unless it is the embedding
  // table, which every rank needs whole for its lookups.
  if (name == "output.weight" && !c.tied_embeddings) return {Kind::kRows, {}, {}};
  if (name.rfind("blk.", 0) != 0) return {};  // embeddings, final norm, RoPE factors
  for (const std::string_view t : {"attn_k.weight", "attn_k.bias", "attn_v.weight", "attn_v.bias"}) {
    if (ends_with(t)) return {Kind::kRows, {kv_dim}, {true}};
  }
  for (const std::string_view t : {"attn_q.weight", "attn_q.bias", "ffn_gate.weight", "ffn_gate_exps.weight",
                                   "ffn_up_exps.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight"}) {
    if (ends_with(t)) return {Kind::kRows, {}, {}};
  }
  if (ends_with("attn_qkv.weight") || ends_with("attn_qkv.bias")) {
    return {Kind::kRows, {q_dim, kv_dim, kv_dim}, {false, true, true}};
  }
  if (ends_with("ffn_up.weight")) {
    return c.transformer.fused_gate_up ? TensorSplit{Kind::kRows, {c.n_ff, c.n_ff}, {}} : TensorSplit{Kind::kRows, {}, {}};
  }
  for (const std::string_view t : {"attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight",
                                   "ffn_down_shexp.weight"}) {
    if (ends_with(t)) return {Kind::kCols, {}, {}};
  }
  return {};  // norms, q/k norms, the router, the shared expert's gate
}

}  // namespace ga::arch
