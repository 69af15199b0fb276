// RWKV v4, v5.1, v5.2, v6, v7 (rwkv.cpp files, model/loader/rwkv_loader.cpp), written against the step
// op vocabulary. The forward follows rwkv.cpp's rwkv_graph.inc operation by operation (its expected
// logits are the test: tests/runtime/test_rwkv.cpp), with the names of BlinkDL's state dict.
//
// One layer (x: the residual stream, [n][C]):
//   h = LN1(x); hp = token_shift(h)                      (slot: the previous token's h)
//   time mix: mixes of h and hp -> r, k, v (v5.2/v6: g; v6: data-dependent mixes and decay; v7: w, a, g,
//             v_first) -> WKV (slot: the recurrent state) -> [group norm] -> [* g] -> W_o; x += that
//   h = LN2(x); hp = token_shift(h)                      (slot)
//   channel mix: r = sigmoid(W_r xr) (not v7), k = relu(W_k xk)^2, x += r * (W_v k)
// Per layer the state is three slots (time-mix shift, WKV, channel-mix shift): C + (3C | H S^2) + C floats.
#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_accel/error.h"
#include "model/arch/architecture.h"
#include "model/arch/families.h"
#include "model/arch/rwkv_gguf.h"
#include "model/arch/rwkv7_hf.h"
#include "model/arch/rwkv_hf.h"

namespace ga::arch {
namespace {

enum class Version { V4, V5_1, V5_2, V6, V7 };

Version version_of(const std::string& arch) {
  if (arch == "rwkv4") return Version::V4;
  if (arch == "rwkv5.1") return Version::V5_1;
  if (arch == "rwkv5.2") return Version::V5_2;
  if (arch == "rwkv6") return Version::V6;
  if (arch == "rwkv7") return Version::V7;
  GA_THROW(Unsupported, "unknown RWKV version '", arch, "'");
}

std::string blk(int64_t il, const char* name) { return "blocks." + std::to_string(il) + "." + name; }

struct Layer {
  step::Vec ln1_w, ln1_b, ln2_w, ln2_b;
  // time mix
  step::Vec mix_k, mix_v, mix_r, mix_g;           // v4/v5 time_mix_*, v6 time_maa_{k,v,r,g}
  step::Vec maa_x, maa_w;                          // v6
  step::Weight maa_w1, decay_w1, decay_w2;         // v6
  step::Weight maa_w2[5];                          // v6: w, k, v, r, g
  step::Vec time_first, time_decay;                // v4/v5 (v6: time_faaaa, time_decay)
  step::Weight wr, wk, wv, wo, wg;
  step::Vec ln_x_w, ln_x_b;
  // v7
  step::Vec x_r, x_w, x_k, x_v, x_a, x_g, w0, a0, v0, k_k, k_a, r_k;
  step::Weight w1, w2, a1, a2, v1, v2, g1, g2;
  int64_t w1_rows = 0, a1_rows = 0, v1_rows = 0, g1_rows = 0;
  // channel mix
  step::Vec ffn_mix_k, ffn_mix_r;
  step::Weight ffn_wk, ffn_wv, ffn_wr;
  step::Rec att_shift, wkv, ffn_shift;
};

class RwkvProgram final : public step::Program {
 public:
  RwkvProgram(const LoadedModel& m, step::Binder& b)
      : model_(m), v_(version_of(m.config.arch)), C_(m.config.n_embd), H_(m.config.n_head),
        eps_(m.config.rwkv.layer_norm_eps), rescale_every_(m.config.rwkv.rescale_every) {
    const float group_eps = m.config.rwkv.group_norm_eps;
    group_eps_v5_ = group_eps > 0 ? group_eps : kEps;
    group_eps_v6_ = group_eps > 0 ? group_eps : kGroupEpsV6;
    const ModelConfig& c = m.config;
    S_ = C_ / H_;
    emb_ = b.matrix("emb.weight");
    ln0_w_ = b.vector("blocks.0.ln0.weight");
    ln0_b_ = b.vector("blocks.0.ln0.bias");
    ln_out_w_ = b.vector("ln_out.weight");
    ln_out_b_ = b.vector("ln_out.bias");
    head_ = b.matrix("head.weight");
    const auto buf = [&](int64_t cols) { return step::View{b.buffer(cols), 0, cols}; };
    x_ = buf(C_);
    h_ = buf(C_);
    hp_ = buf(C_);
    tmp_ = buf(C_);
    for (step::View& mv : mixed_) mv = buf(C_);
    r_ = buf(C_);
    k_ = buf(C_);
    v_buf_ = buf(C_);
    g_ = buf(C_);
    wkv_ = buf(C_);
    ffn_k_ = buf(c.n_ff);
    if (v_ == Version::V6) {
      maa_rows_ = m.weight(blk(0, "att.time_maa_w1")).rows();
      decay_rows_ = m.weight(blk(0, "att.time_decay_w1")).rows();
      GA_CHECK(maa_rows_ % 5 == 0, InvalidFormat, "rwkv6: time_maa_w1 has ", maa_rows_, " rows, not 5 mixes");
    }
    for (int64_t il = 0; il < c.n_layer; ++il) layers_.push_back(bind_layer(b, il));
    if (v_ == Version::V6) {
      lora_ = buf(maa_rows_);
      decay_lora_ = buf(decay_rows_);
      for (step::View& dv : dyn_) dv = buf(C_);
      w_ = buf(C_);
    }
    if (v_ == Version::V7) {
      w_ = buf(C_);
      a_ = buf(C_);
      v_first_ = buf(C_);
      bonus_ = buf(C_);
      lora_ = buf(lora_cols_);
    }
  }

  void run(step::Ops& ops) override {
    ops.embed(emb_, x_, 1.0f);
    ops.layer_norm({x_, ln0_w_, ln0_b_, x_, eps_});
    for (size_t il = 0; il < layers_.size(); ++il) {
      const Layer& L = layers_[il];
      ops.layer_norm({x_, L.ln1_w, L.ln1_b, h_, eps_});
      ops.token_shift({h_, hp_, L.att_shift});
      switch (v_) {
        case Version::V4: time_mix_v4(ops, L); break;
        case Version::V5_1:
        case Version::V5_2: time_mix_v5(ops, L); break;
        case Version::V6: time_mix_v6(ops, L); break;
        case Version::V7: time_mix_v7(ops, L, il == 0); break;
      }
      ops.add(x_, tmp_);
      ops.layer_norm({x_, L.ln2_w, L.ln2_b, h_, eps_});
      ops.token_shift({h_, hp_, L.ffn_shift});
      channel_mix(ops, L);
      ops.add(x_, tmp_);
      // llama.cpp's rescaled GGUF: this layer's output matrices were divided by 2^(il / n), the stream follows
      if (rescale_every_ > 0 && static_cast<int64_t>(il + 1) % rescale_every_ == 0) ops.scale(x_, 0.5f);
    }
    step::LogitsOp lo;
    lo.x = x_;
    lo.norm = ln_out_w_;
    lo.norm_bias = ln_out_b_;
    lo.eps = eps_;
    lo.output = head_;
    ops.logits(lo);
  }

 private:
  static constexpr float kEps = 1e-5f;         // v5's group norm (rwkv.cpp's and llama.cpp's)
  static constexpr float kGroupEpsV6 = 64e-5f;  // v6/v7's group norm (rwkv.cpp's ln_x)

  // A LoRA matrix's shape, which the tensor specs cannot know in advance (its inner width is the file's).
  void expect_shape(const std::string& name, int64_t cols, int64_t rows) const {
    const WeightView& w = model_.weight(name);
    GA_CHECK(w.cols() == cols && w.rows() == rows && w.ne.size() == 2, InvalidFormat, "tensor ", name, " is [",
             w.cols(), ", ", w.rows(), "], expected [", cols, ", ", rows, "]");
  }

  Layer bind_layer(step::Binder& b, int64_t il) {
    Layer L;
    const auto vec = [&](const char* n) { return b.vector(blk(il, n)); };
    const auto mat = [&](const char* n) { return b.matrix(blk(il, n)); };
    L.ln1_w = vec("ln1.weight");
    L.ln1_b = vec("ln1.bias");
    L.ln2_w = vec("ln2.weight");
    L.ln2_b = vec("ln2.bias");
    L.wr = mat("att.receptance.weight");
    L.wk = mat("att.key.weight");
    L.wv = mat("att.value.weight");
    L.wo = mat("att.output.weight");
    L.ffn_wk = mat("ffn.key.weight");
    L.ffn_wv = mat("ffn.value.weight");
    const int64_t slot = il * 3;
    L.att_shift = b.recurrent(slot);
    L.wkv = b.recurrent(slot + 1);
    L.ffn_shift = b.recurrent(slot + 2);
    switch (v_) {
      case Version::V4:
      case Version::V5_1:
      case Version::V5_2:
        L.mix_k = vec("att.time_mix_k");
        L.mix_v = vec("att.time_mix_v");
        L.mix_r = vec("att.time_mix_r");
        L.time_decay = vec("att.time_decay");
        L.time_first = vec(v_ == Version::V5_2 ? "att.time_faaaa" : "att.time_first");
        if (v_ != Version::V4) {
          L.ln_x_w = vec("att.ln_x.weight");
          L.ln_x_b = vec("att.ln_x.bias");
        }
        if (v_ == Version::V5_2) {
          L.mix_g = vec("att.time_mix_g");
          L.wg = mat("att.gate.weight");
        }
        L.ffn_mix_k = vec("ffn.time_mix_k");
        L.ffn_mix_r = vec("ffn.time_mix_r");
        L.ffn_wr = mat("ffn.receptance.weight");
        break;
      case Version::V6: {
        L.maa_x = vec("att.time_maa_x");
        L.maa_w = vec("att.time_maa_w");
        L.mix_k = vec("att.time_maa_k");
        L.mix_v = vec("att.time_maa_v");
        L.mix_r = vec("att.time_maa_r");
        L.mix_g = vec("att.time_maa_g");
        expect_shape(blk(il, "att.time_maa_w1"), C_, maa_rows_);
        for (int i = 0; i < 5; ++i) expect_shape(blk(il, "att.time_maa_w2") + "." + std::to_string(i), maa_rows_ / 5, C_);
        expect_shape(blk(il, "att.time_decay_w1"), C_, decay_rows_);
        expect_shape(blk(il, "att.time_decay_w2"), decay_rows_, C_);
        L.maa_w1 = mat("att.time_maa_w1");
        for (int i = 0; i < 5; ++i) L.maa_w2[i] = b.matrix(blk(il, "att.time_maa_w2") + "." + std::to_string(i));
        L.decay_w1 = mat("att.time_decay_w1");
        L.decay_w2 = mat("att.time_decay_w2");
        L.time_decay = vec("att.time_decay");
        L.time_first = vec("att.time_faaaa");
        L.wg = mat("att.gate.weight");
        L.ln_x_w = vec("att.ln_x.weight");
        L.ln_x_b = vec("att.ln_x.bias");
        L.ffn_mix_k = vec("ffn.time_maa_k");
        L.ffn_mix_r = vec("ffn.time_maa_r");
        L.ffn_wr = mat("ffn.receptance.weight");
        break;
      }
      case Version::V7:
        L.x_r = vec("att.x_r");
        L.x_w = vec("att.x_w");
        L.x_k = vec("att.x_k");
        L.x_v = vec("att.x_v");
        L.x_a = vec("att.x_a");
        L.x_g = vec("att.x_g");
        L.w0 = vec("att.w0");
        L.a0 = vec("att.a0");
        L.w1 = mat("att.w1");
        L.w2 = mat("att.w2");
        L.a1 = mat("att.a1");
        L.a2 = mat("att.a2");
        L.g1 = mat("att.g1");
        L.g2 = mat("att.g2");
        L.w1_rows = lora_rows(blk(il, "att.w1"));
        L.a1_rows = lora_rows(blk(il, "att.a1"));
        L.g1_rows = lora_rows(blk(il, "att.g1"));
        for (const auto& [down, up, rows] : {std::tuple{"att.w1", "att.w2", L.w1_rows}, std::tuple{"att.a1", "att.a2", L.a1_rows},
                                             std::tuple{"att.g1", "att.g2", L.g1_rows}}) {
          expect_shape(blk(il, down), C_, rows);
          expect_shape(blk(il, up), rows, C_);
        }
        if (il > 0) {
          L.v1_rows = lora_rows(blk(il, "att.v1"));
          expect_shape(blk(il, "att.v1"), C_, L.v1_rows);
          expect_shape(blk(il, "att.v2"), L.v1_rows, C_);
          L.v0 = vec("att.v0");
          L.v1 = mat("att.v1");
          L.v2 = mat("att.v2");
        }
        L.k_k = vec("att.k_k");
        L.k_a = vec("att.k_a");
        L.r_k = vec("att.r_k");
        L.ln_x_w = vec("att.ln_x.weight");
        L.ln_x_b = vec("att.ln_x.bias");
        L.ffn_mix_k = vec("ffn.x_k");
        break;
    }
    return L;
  }

  step::MixOp mixop(step::Vec m, step::View out, step::MixForm form, step::View dyn = {}) const {
    return step::MixOp{h_, hp_, m, dyn, out, form};
  }

  // v5's and v6's WKV over this layer's r, k, v and state; the caller sets the decay (fixed or per token).
  step::Wkv5Op wkv5_op(const Layer& L) const {
    step::Wkv5Op w;
    w.r = r_;
    w.k = k_;
    w.v = v_buf_;
    w.out = wkv_;
    w.time_first = L.time_first;
    w.n_head = H_;
    w.head_size = S_;
    w.state = L.wkv;
    return w;
  }

  void time_mix_v4(step::Ops& ops, const Layer& L) {
    const auto f = step::MixForm::kComplement;
    const step::MixOp mixes[] = {mixop(L.mix_k, mixed_[0], f), mixop(L.mix_v, mixed_[1], f),
                                 mixop(L.mix_r, mixed_[2], f)};
    ops.mixes(mixes);
    ops.linear(L.wr, mixed_[2], r_);
    ops.unary(r_, step::Unary::kSigmoid);
    ops.linear(L.wk, mixed_[0], k_);
    ops.linear(L.wv, mixed_[1], v_buf_);
    ops.wkv4({k_, v_buf_, wkv_, L.time_first, L.time_decay, L.wkv});
    ops.mul(wkv_, r_);
    ops.linear(L.wo, wkv_, tmp_);
  }

  void time_mix_v5(step::Ops& ops, const Layer& L) {
    const auto f = step::MixForm::kComplement;
    const step::MixOp mixes[] = {mixop(L.mix_k, mixed_[0], f), mixop(L.mix_v, mixed_[1], f),
                                 mixop(L.mix_r, mixed_[2], f)};
    ops.mixes(mixes);
    ops.linear(L.wr, mixed_[2], r_);
    ops.linear(L.wk, mixed_[0], k_);
    ops.linear(L.wv, mixed_[1], v_buf_);
    if (L.wg) {
      ops.mix(mixop(L.mix_g, mixed_[3], f));
      ops.linear(L.wg, mixed_[3], g_);
      ops.unary(g_, step::Unary::kSilu);
    }
    step::Wkv5Op w = wkv5_op(L);
    w.decay = L.time_decay;
    ops.wkv5(w);
    ops.group_norm({wkv_, L.ln_x_w, L.ln_x_b, H_, group_eps_v5_});
    if (L.wg) ops.mul(wkv_, g_);
    ops.linear(L.wo, wkv_, tmp_);
  }

  void time_mix_v6(step::Ops& ops, const Layer& L) {
    const auto f = step::MixForm::kDelta;
    // ddlerp: xxx = h + (hp - h) * maa_x; m_c = W2_c tanh(W1 xxx)_c for c in (w, k, v, r, g)
    ops.mix(mixop(L.maa_x, mixed_[0], f));
    ops.linear(L.maa_w1, mixed_[0], lora_);
    ops.unary(lora_, step::Unary::kTanh);
    const int64_t d = maa_rows_ / 5;
    for (int i = 0; i < 5; ++i) ops.linear(L.maa_w2[i], lora_.slice(i * d, d), dyn_[i]);
    const step::MixOp mixes[] = {mixop(L.maa_w, mixed_[0], f, dyn_[0]),   // xw
                                 mixop(L.mix_k, mixed_[1], f, dyn_[1]),   // xk
                                 mixop(L.mix_v, mixed_[2], f, dyn_[2]),   // xv
                                 mixop(L.mix_r, mixed_[3], f, dyn_[3]),   // xr
                                 mixop(L.mix_g, mixed_[4], f, dyn_[4])};  // xg
    ops.mixes(mixes);
    ops.linear(L.wr, mixed_[3], r_);
    ops.linear(L.wk, mixed_[1], k_);
    ops.linear(L.wv, mixed_[2], v_buf_);
    ops.linear(L.wg, mixed_[4], g_);
    ops.unary(g_, step::Unary::kSilu);
    // w = exp(-exp(time_decay + W2 tanh(W1 xw)))
    ops.linear(L.decay_w1, mixed_[0], decay_lora_);
    ops.unary(decay_lora_, step::Unary::kTanh);
    ops.linear(L.decay_w2, decay_lora_, w_);
    ops.bias_unary(w_, L.time_decay, step::Unary::kExpNegExp);
    step::Wkv5Op w = wkv5_op(L);
    w.decay_view = w_;  // per token
    ops.wkv5(w);
    ops.group_norm({wkv_, L.ln_x_w, L.ln_x_b, H_, group_eps_v6_});
    ops.mul(wkv_, g_);
    ops.linear(L.wo, wkv_, tmp_);
  }

  void time_mix_v7(step::Ops& ops, const Layer& L, bool first_layer) {
    const auto f = step::MixForm::kDelta;
    const step::MixOp mixes[] = {mixop(L.x_r, mixed_[0], f), mixop(L.x_w, mixed_[1], f), mixop(L.x_k, mixed_[2], f),
                                 mixop(L.x_v, mixed_[3], f), mixop(L.x_a, mixed_[4], f), mixop(L.x_g, mixed_[5], f)};
    ops.mixes(mixes);
    ops.linear(L.wr, mixed_[0], r_);
    // g = W_g2 sigmoid(W_g1 xg)
    const auto lora = [&](step::Weight down, int64_t rows, step::View in, step::Unary* act, step::Weight up,
                          step::View out) {
      const step::View t = lora_.slice(0, rows);
      ops.linear(down, in, t);
      if (act != nullptr) ops.unary(t, *act);
      ops.linear(up, t, out);
    };
    step::Unary sig = step::Unary::kSigmoid, tanh = step::Unary::kTanh;
    lora(L.g1, L.g1_rows, mixed_[5], &sig, L.g2, g_);
    // a = sigmoid(a0 + W_a2 W_a1 xa)
    lora(L.a1, L.a1_rows, mixed_[4], nullptr, L.a2, a_);
    ops.bias_unary(a_, L.a0, step::Unary::kSigmoid);
    // w = exp(-0.6 sigmoid(w0 + W_w2 tanh(W_w1 xw)))
    lora(L.w1, L.w1_rows, mixed_[1], &tanh, L.w2, w_);
    ops.bias_unary(w_, L.w0, step::Unary::kV7Decay);
    ops.linear(L.wk, mixed_[2], k_);
    step::View v = v_buf_;
    if (first_layer) {
      v = v_first_;  // the first layer's v is every later layer's v_first
      ops.linear(L.wv, mixed_[3], v);
    } else {
      ops.linear(L.wv, mixed_[3], v);
      // v += (v_first - v) * sigmoid(v0 + W_v2 W_v1 xv)
      lora(L.v1, L.v1_rows, mixed_[3], nullptr, L.v2, tmp_);
      ops.bias_unary(tmp_, L.v0, step::Unary::kSigmoid);
      ops.lerp_to(v, v_first_, tmp_);
    }
    step::Wkv7Op w;
    w.r = r_;
    w.w = w_;
    w.k = k_;
    w.v = v;
    w.a = a_;
    w.k_k = L.k_k;
    w.k_a = L.k_a;
    w.r_k = L.r_k;
    w.out = wkv_;
    w.bonus = bonus_;
    w.n_head = H_;
    w.head_size = S_;
    w.state = L.wkv;
    ops.wkv7(w);
    ops.group_norm({wkv_, L.ln_x_w, L.ln_x_b, H_, group_eps_v6_});
    ops.add(wkv_, bonus_);
    ops.mul(wkv_, g_);
    ops.linear(L.wo, wkv_, tmp_);
  }

  void channel_mix(step::Ops& ops, const Layer& L) {
    const bool v45 = v_ == Version::V4 || v_ == Version::V5_1 || v_ == Version::V5_2;
    const auto f = v45 ? step::MixForm::kComplement : step::MixForm::kDelta;
    // both mixes at once (they read only the token and its predecessor)
    const step::MixOp mixes[] = {mixop(L.ffn_mix_k, mixed_[0], f), mixop(L.ffn_mix_r, mixed_[1], f)};
    ops.mixes(std::span<const step::MixOp>(mixes, L.ffn_wr ? 2 : 1));
    ops.linear(L.ffn_wk, mixed_[0], ffn_k_);
    ops.unary(ffn_k_, step::Unary::kReluSquare);
    ops.linear(L.ffn_wv, ffn_k_, tmp_);
    if (L.ffn_wr) {
      ops.linear(L.ffn_wr, mixed_[1], r_);
      ops.unary(r_, step::Unary::kSigmoid);
      ops.mul(tmp_, r_);
    }
  }

  // A LoRA down-projection's rows (its inner width), for its slice of the scratch buffer.
  int64_t lora_rows(const std::string& name) {
    const int64_t rows = model_.weight(name).rows();
    lora_cols_ = std::max(lora_cols_, rows);
    return rows;
  }

  const LoadedModel& model_;
  int64_t maa_rows_ = 0, decay_rows_ = 0, lora_cols_ = 0;
  Version v_;
  int64_t C_, H_, S_ = 0;
  float eps_;               // the layer norms' (rwkv.cpp: 1e-5; GGUF: attention.layer_norm_epsilon)
  float group_eps_v5_ = kEps, group_eps_v6_ = kGroupEpsV6;  // ln_x's (RwkvParams::group_norm_eps)
  int64_t rescale_every_;   // 0: none
  step::Weight emb_, head_;
  step::Vec ln0_w_, ln0_b_, ln_out_w_, ln_out_b_;
  step::View x_, h_, hp_, tmp_, r_, k_, v_buf_, g_, wkv_, ffn_k_, w_, a_, v_first_, bonus_, lora_, decay_lora_;
  step::View mixed_[6];
  step::View dyn_[5];
  std::vector<Layer> layers_;
};

class RwkvFactory final : public step::ProgramFactory {
 public:
  explicit RwkvFactory(const LoadedModel& m) : model_(m), v_(version_of(m.config.arch)) {}

  step::StateSpec state() const override {
    const ModelConfig& c = model_.config;
    step::StateSpec s;
    const int64_t wkv = v_ == Version::V4 ? 3 * c.n_embd : c.n_head * c.head_dim * c.head_dim;
    for (int64_t il = 0; il < c.n_layer; ++il) {
      s.recurrent.push_back({c.n_embd});
      s.recurrent.push_back({wkv});
      s.recurrent.push_back({c.n_embd});
    }
    return s;
  }
  std::vector<std::vector<std::string>> weight_groups() const override { return {}; }
  std::unique_ptr<step::Program> build(step::Binder& binder) const override;
  std::string name() const override { return model_.config.arch; }

 private:
  const LoadedModel& model_;
  Version v_;
};

std::unique_ptr<step::Program> RwkvFactory::build(step::Binder& binder) const {
  return std::make_unique<RwkvProgram>(model_, binder);
}

std::vector<TensorSpec> rwkv_tensor_specs(const ModelConfig& c) {
  const uint64_t C = static_cast<uint64_t>(c.n_embd), V = static_cast<uint64_t>(c.n_vocab),
                 F = static_cast<uint64_t>(c.n_ff);
  std::vector<TensorSpec> s = {{"emb.weight", {C, V}},         {"head.weight", {C, V}},
                               {"blocks.0.ln0.weight", {C}},   {"blocks.0.ln0.bias", {C}},
                               {"ln_out.weight", {C}},         {"ln_out.bias", {C}}};
  for (int64_t il = 0; il < c.n_layer; ++il) {
    for (const char* n : {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"}) s.push_back({blk(il, n), {C}});
    for (const char* n : {"att.key.weight", "att.value.weight", "att.receptance.weight", "att.output.weight"}) {
      s.push_back({blk(il, n), {C, C}});
    }
    s.push_back({blk(il, "ffn.key.weight"), {C, F}});
    s.push_back({blk(il, "ffn.value.weight"), {F, C}});
    // The per-channel parameters each version reads (flat, as the loader leaves them).
    std::vector<const char*> vecs;
    const Version v = version_of(c.arch);
    if (v == Version::V4 || v == Version::V5_1 || v == Version::V5_2) {
      vecs = {"att.time_mix_k", "att.time_mix_v", "att.time_mix_r", "ffn.time_mix_k", "ffn.time_mix_r"};
      if (v == Version::V4) vecs.insert(vecs.end(), {"att.time_first", "att.time_decay"});
      if (v == Version::V5_2) vecs.insert(vecs.end(), {"att.time_mix_g", "att.time_faaaa", "att.time_decay"});
      if (v == Version::V5_1) {  // one value per head
        s.push_back({blk(il, "att.time_first"), {static_cast<uint64_t>(c.n_head)}});
        s.push_back({blk(il, "att.time_decay"), {static_cast<uint64_t>(c.n_head)}});
      }
      if (v == Version::V5_2) s.push_back({blk(il, "att.gate.weight"), {C, C}});
    } else if (v == Version::V6) {
      vecs = {"att.time_maa_x", "att.time_maa_w", "att.time_maa_k", "att.time_maa_v", "att.time_maa_r",
              "att.time_maa_g", "att.time_decay", "att.time_faaaa", "ffn.time_maa_k", "ffn.time_maa_r"};
      s.push_back({blk(il, "att.gate.weight"), {C, C}});
    } else {
      vecs = {"att.x_r", "att.x_w", "att.x_k", "att.x_v", "att.x_a", "att.x_g", "att.w0", "att.a0",
              "att.k_k", "att.k_a", "att.r_k", "ffn.x_k"};
      if (il > 0) vecs.push_back("att.v0");
    }
    if (v != Version::V4) vecs.insert(vecs.end(), {"att.ln_x.weight", "att.ln_x.bias"});
    for (const char* n : vecs) s.push_back({blk(il, n), {C}});
  }
  return s;
}

void check_rwkv_config(const ModelConfig& c) {
  GA_CHECK(c.n_embd > 0 && c.n_layer > 0 && c.n_vocab > 0 && c.n_ff > 0 && c.n_head > 0 && c.n_embd % c.n_head == 0,
           InvalidFormat, c.arch, ": n_embd ", c.n_embd, ", ", c.n_head, " heads, n_layer ", c.n_layer);
  (void)version_of(c.arch);
}

ArchInfo rwkv_arch(std::string_view name) {
  ArchInfo a;
  a.name = name;
  if (name == "rwkv6" || name == "rwkv7") {
    // llama.cpp's GGUF: its names become the ones bound here as the file loads (rwkv_gguf.cpp)
    a.read_gguf = read_rwkv_gguf;
    a.write_gguf = write_rwkv_gguf;
    a.gguf_fixup = rwkv_gguf_fixup;
    a.gguf_tensor_specs = rwkv_gguf_tensor_specs;
  } else {
    // The registry finds an architecture by its GGUF reader; llama.cpp has no GGUF for RWKV 4/5.
    a.read_gguf = [](const GgufKeys& keys, ModelConfig&) {
      GA_THROW(Unsupported, "RWKV 4/5 in GGUF ('", keys.key("").substr(0, keys.key("").size() - 1),
               "') is not a format llama.cpp writes; load the rwkv.cpp model file (.bin)");
    };
  }
  if (name == "rwkv4") {
    a.hf_classes = {"RwkvForCausalLM"};
    a.hf_model_types = {"rwkv"};
    a.read_hf = read_rwkv4_hf;
    a.hf_tensor_name = rwkv4_hf_tensor_name;
    a.hf_fixup = rwkv4_hf_fixup;
  }
  if (name == "rwkv7") {  // flash-linear-attention's layout (the fla-hub models)
    a.hf_classes = {"RWKV7ForCausalLM"};
    a.hf_model_types = {"rwkv7", "rwkv7_fla"};  // fla has used both
    a.read_hf = read_rwkv7_hf;
    a.hf_tensor_name = rwkv7_hf_tensor_name;
    a.hf_fixup = rwkv7_hf_fixup;
  }
  a.tensor_specs = rwkv_tensor_specs;
  a.check_config = check_rwkv_config;
  a.make_factory = [](const LoadedModel& m) -> std::unique_ptr<step::ProgramFactory> {
    return std::make_unique<RwkvFactory>(m);
  };
  return a;
}

}  // namespace

std::vector<ArchInfo> rwkv_family() {
  return {rwkv_arch("rwkv4"), rwkv_arch("rwkv5.1"), rwkv_arch("rwkv5.2"), rwkv_arch("rwkv6"), rwkv_arch("rwkv7")};
}

}  // namespace ga::arch
