// The Llama-family forward pass on the CPU (see llama.h).
//
// Layout: activations are row-major [n_tokens][features] so a whole prompt goes through each
// weight matrix in one cpu::matmul call (the weights are read once per call, which is what makes
// prefill fast); decode is the same code with n_tokens = 1. Everything the pass writes lives in
// buffers sized at construction (KV cache, rope tables, attention workspace) or grown once to the
// largest batch seen (activations), so steady-state decoding allocates nothing. Long evals are cut
// into steps of max_batch tokens, which bounds the activation scratch for long prompts.
//
// Norm weights and biases are dequantized to float once at construction (they are tiny), so the
// per-token code only handles two kinds of tensors: matrices (any supported type, via MatrixRef)
// and float vectors.
#include <algorithm>
#include <cmath>
#include <new>
#include <stdexcept>
#include <utility>

#include "backends/cpu/ops.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "model/arch/llama.h"

namespace ga::arch {
namespace {

constexpr int64_t kMaxContext = int64_t{1} << 24;  // keeps every cache size computation far from overflow

cpu::MatrixRef matrix(const WeightView& w) {
  cpu::MatrixRef m;
  m.type = w.type;
  m.data = w.data;
  m.rows = w.rows();
  m.cols = w.cols();
  m.row_stride = row_bytes(w.type, static_cast<uint64_t>(w.cols()));
  return m;
}

// A 1-D weight (norm, bias, rope factors) as floats, whatever its stored type.
std::vector<float> vector_f32(const WeightView& w) {
  std::vector<float> v(static_cast<size_t>(w.cols()));
  cpu::dequantize_row(w.type, w.data, v.data(), w.cols());
  return v;
}

struct Layer {
  std::vector<float> attn_norm, ffn_norm;  // [n_embd]
  std::vector<float> bq, bk, bv;           // [q_dim], [kv_dim], [kv_dim]; empty without QKV bias
  cpu::MatrixRef wq, wk, wv, wo;           // [q_dim x n_embd], [kv_dim x n_embd] x2, [n_embd x q_dim]
  cpu::MatrixRef w_gate, w_up, w_down;     // [n_ff x n_embd] x2, [n_embd x n_ff]
};

// Adds bias [n] to each of n_tokens rows of x (row stride n).
void add_bias(float* x, const std::vector<float>& bias, int64_t n_tokens) {
  if (bias.empty()) return;
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < n_tokens; ++t) cpu::add_inplace(x + t * n, bias.data(), n);
}

}  // namespace

struct LlamaForward::Impl {
  ModelConfig c;
  LlamaContextParams params;
  ThreadPool* pool = nullptr;

  int64_t q_dim = 0, kv_dim = 0, half_rot = 0;
  std::vector<Layer> layers;
  WeightView token_embd;
  cpu::MatrixRef output;
  std::vector<float> output_norm;  // [n_embd]
  std::vector<double> inv_freq;    // [n_rot/2] rope frequencies after scaling
  cpu::RopeLayout rope_layout = cpu::RopeLayout::AdjacentPairs;

  // KV cache: per layer K then V, each [n_ctx][n_head_kv][head_dim] of params.kv_type.
  std::vector<uint8_t> kv;
  uint64_t kv_plane_bytes = 0;  // bytes of one layer's K (or V)
  uint64_t kv_elem_bytes = 0;

  // Scratch, grown to the largest step seen (at most max_batch tokens).
  int64_t scratch_tokens = 0;
  std::vector<float> x, xn, q, k, v, attn, tmp, gate, up;  // [n][n_embd], ..., [n][n_ff]
  std::vector<float> rope_cos, rope_sin;                  // [n][n_rot/2]
  std::vector<float> attn_work;                           // [pool threads][n_ctx + head_dim]

  void* k_plane(int64_t layer) { return kv.data() + static_cast<uint64_t>(2 * layer) * kv_plane_bytes; }
  void* v_plane(int64_t layer) { return kv.data() + static_cast<uint64_t>(2 * layer + 1) * kv_plane_bytes; }

  void reserve(int64_t n) {
    if (n <= scratch_tokens) return;
    const auto sz = [n](int64_t width) { return static_cast<size_t>(n * width); };
    x.resize(sz(c.n_embd));
    xn.resize(sz(c.n_embd));
    tmp.resize(sz(c.n_embd));
    q.resize(sz(q_dim));
    attn.resize(sz(q_dim));
    k.resize(sz(kv_dim));
    v.resize(sz(kv_dim));
    gate.resize(sz(c.n_ff));
    up.resize(sz(c.n_ff));
    rope_cos.resize(sz(half_rot));
    rope_sin.resize(sz(half_rot));
    scratch_tokens = n;
  }

  void step(const int32_t* tokens, int64_t n, int64_t pos0, bool all_logits, bool last_step, float* logits);
  void layer_forward(int64_t il, int64_t n, int64_t pos0);
};

LlamaForward::LlamaForward(const LoadedModel& model, const LlamaContextParams& params, ThreadPool* pool)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.c = model.config;
  m.params = params;
  m.pool = pool;
  const ModelConfig& c = m.c;
  GA_CHECK(is_llama_family(c.arch), Unsupported, "unsupported architecture '", c.arch, "' (supported: llama, qwen2)");
  GA_CHECK(params.n_ctx > 0 && params.n_ctx <= kMaxContext, InvalidArgument, "context length ", params.n_ctx,
           " is outside [1, ", kMaxContext, "]");
  GA_CHECK(params.kv_type == DType::F32 || params.kv_type == DType::F16, InvalidArgument, "KV cache type ",
           dtype_name(params.kv_type), " (supported: F32, F16)");
  GA_CHECK(params.max_batch > 0, InvalidArgument, "max_batch must be positive");
  m.q_dim = c.n_head * c.head_dim;
  m.kv_dim = c.n_head_kv * c.head_dim;
  m.half_rot = c.n_rot / 2;
  m.rope_layout = c.rope_mode == RopeMode::NeoX ? cpu::RopeLayout::Halves : cpu::RopeLayout::AdjacentPairs;

  m.token_embd = model.weight("token_embd.weight");
  const WeightView* out = model.find_weight("output.weight");
  m.output = matrix(out != nullptr ? *out : m.token_embd);
  m.output_norm = vector_f32(model.weight("output_norm.weight"));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    Layer L;
    L.attn_norm = vector_f32(model.weight(p + "attn_norm.weight"));
    L.ffn_norm = vector_f32(model.weight(p + "ffn_norm.weight"));
    if (c.qkv_bias) {
      L.bq = vector_f32(model.weight(p + "attn_q.bias"));
      L.bk = vector_f32(model.weight(p + "attn_k.bias"));
      L.bv = vector_f32(model.weight(p + "attn_v.bias"));
    }
    L.wq = matrix(model.weight(p + "attn_q.weight"));
    L.wk = matrix(model.weight(p + "attn_k.weight"));
    L.wv = matrix(model.weight(p + "attn_v.weight"));
    L.wo = matrix(model.weight(p + "attn_output.weight"));
    L.w_gate = matrix(model.weight(p + "ffn_gate.weight"));
    L.w_up = matrix(model.weight(p + "ffn_up.weight"));
    L.w_down = matrix(model.weight(p + "ffn_down.weight"));
    m.layers.push_back(std::move(L));
  }

  // Rope: theta_i = pos * base^(-2i/n_rot) / freq_factor[i] / linear_factor.
  std::vector<float> factors;
  if (const WeightView* rf = model.find_weight("rope_freqs.weight")) {
    factors = vector_f32(*rf);
  } else if (c.rope_scaling.type == RopeScalingType::Llama3) {
    factors = llama3_rope_freq_factors(c);
  }
  const double linear = c.rope_scaling.type == RopeScalingType::Linear ? c.rope_scaling.factor : 1.0;
  m.inv_freq.resize(static_cast<size_t>(m.half_rot));
  for (int64_t i = 0; i < m.half_rot; ++i) {
    const double exponent = -2.0 * static_cast<double>(i) / static_cast<double>(c.n_rot);
    double f = std::pow(static_cast<double>(c.rope_freq_base), exponent);
    if (!factors.empty()) f /= factors[static_cast<size_t>(i)];
    m.inv_freq[static_cast<size_t>(i)] = f / linear;
  }

  m.kv_elem_bytes = params.kv_type == DType::F16 ? 2 : 4;
  m.kv_plane_bytes = static_cast<uint64_t>(params.n_ctx) * static_cast<uint64_t>(m.kv_dim) * m.kv_elem_bytes;
  const int64_t threads = pool != nullptr ? pool->size() : 1;
  try {
    m.kv.resize(m.kv_plane_bytes * 2 * static_cast<uint64_t>(c.n_layer));
    m.attn_work.resize(static_cast<size_t>(threads * cpu::attention_work_floats(params.n_ctx, c.head_dim)));
    m.reserve(1);  // decoding never grows the scratch
  } catch (const std::bad_alloc&) {
    GA_THROW(OutOfMemory, "cannot allocate the KV cache for n_ctx ", params.n_ctx, " (",
             static_cast<double>(m.kv_plane_bytes) * 2.0 * static_cast<double>(c.n_layer) / (1 << 20), " MiB)");
  } catch (const std::length_error&) {
    GA_THROW(OutOfMemory, "KV cache for n_ctx ", params.n_ctx, " exceeds the addressable size");
  }
}

LlamaForward::~LlamaForward() = default;
LlamaForward::LlamaForward(LlamaForward&&) noexcept = default;
LlamaForward& LlamaForward::operator=(LlamaForward&&) noexcept = default;

int64_t LlamaForward::n_ctx() const { return impl_->params.n_ctx; }
int64_t LlamaForward::n_vocab() const { return impl_->c.n_vocab; }

void LlamaForward::eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits) {
  Impl& m = *impl_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  GA_CHECK(n > 0, InvalidArgument, "eval needs at least one token");
  GA_CHECK(pos0 >= 0 && pos0 + n <= m.params.n_ctx, OutOfRange, "context overflow: ", pos0, " positions used + ", n,
           " new tokens > n_ctx ", m.params.n_ctx);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = tokens[static_cast<size_t>(i)];
    GA_CHECK(id >= 0 && id < m.c.n_vocab, InvalidArgument, "token id ", id, " at index ", i,
             " is outside the vocabulary [0, ", m.c.n_vocab, ")");
  }
  for (int64_t done = 0; done < n;) {
    const int64_t step_n = std::min(m.params.max_batch, n - done);
    const bool last_step = done + step_n == n;
    float* step_logits = all_logits ? logits + done * m.c.n_vocab : logits;
    m.step(tokens.data() + done, step_n, pos0 + done, all_logits, last_step, step_logits);
    done += step_n;
  }
}

void LlamaForward::Impl::step(const int32_t* tokens, int64_t n, int64_t pos0, bool all_logits, bool last_step,
                              float* logits) {
  reserve(n);
  const int64_t E = c.n_embd;
  for (int64_t t = 0; t < n; ++t) {
    cpu::embedding_row(token_embd.type, token_embd.data, E, tokens[t], x.data() + t * E);  // [n][n_embd]
    cpu::rope_angles(inv_freq.data(), half_rot, static_cast<double>(pos0 + t), rope_cos.data() + t * half_rot,
                     rope_sin.data() + t * half_rot);
  }
  for (int64_t il = 0; il < c.n_layer; ++il) layer_forward(il, n, pos0);

  // Only the rows whose logits are wanted go through the final norm and the classifier.
  if (!all_logits && !last_step) return;
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t n_out = n - first;
  for (int64_t t = first; t < n; ++t) {
    cpu::rms_norm(x.data() + t * E, output_norm.data(), xn.data() + t * E, E, c.rms_eps);
  }
  cpu::matmul(output, xn.data() + first * E, n_out, E, logits, c.n_vocab, pool);  // [n_out][n_vocab]
}

void LlamaForward::Impl::layer_forward(int64_t il, int64_t n, int64_t pos0) {
  const Layer& L = layers[static_cast<size_t>(il)];
  const int64_t E = c.n_embd;

  // Attention block: x += Wo * attention(rope(Wq h), rope(Wk h), Wv h), h = rmsnorm(x) * attn_norm.
  for (int64_t t = 0; t < n; ++t) {
    cpu::rms_norm(x.data() + t * E, L.attn_norm.data(), xn.data() + t * E, E, c.rms_eps);
  }
  cpu::matmul(L.wq, xn.data(), n, E, q.data(), q_dim, pool);   // [n][n_head][head_dim]
  cpu::matmul(L.wk, xn.data(), n, E, k.data(), kv_dim, pool);  // [n][n_head_kv][head_dim]
  cpu::matmul(L.wv, xn.data(), n, E, v.data(), kv_dim, pool);  // [n][n_head_kv][head_dim]
  add_bias(q.data(), L.bq, n);
  add_bias(k.data(), L.bk, n);
  add_bias(v.data(), L.bv, n);
  uint8_t* k_cache = static_cast<uint8_t*>(k_plane(il));
  uint8_t* v_cache = static_cast<uint8_t*>(v_plane(il));
  const uint64_t kv_row_bytes = static_cast<uint64_t>(kv_dim) * kv_elem_bytes;
  for (int64_t t = 0; t < n; ++t) {
    const float* cs = rope_cos.data() + t * half_rot;
    const float* sn = rope_sin.data() + t * half_rot;
    cpu::rope(q.data() + t * q_dim, c.n_head, c.head_dim, c.n_rot, cs, sn, rope_layout);
    cpu::rope(k.data() + t * kv_dim, c.n_head_kv, c.head_dim, c.n_rot, cs, sn, rope_layout);
    const uint64_t pos = static_cast<uint64_t>(pos0 + t);
    cpu::store_kv(params.kv_type, k.data() + t * kv_dim, k_cache + pos * kv_row_bytes, kv_dim);
    cpu::store_kv(params.kv_type, v.data() + t * kv_dim, v_cache + pos * kv_row_bytes, kv_dim);
  }

  cpu::AttentionParams ap;
  ap.n_tokens = n;
  ap.n_head = c.n_head;
  ap.n_head_kv = c.n_head_kv;
  ap.head_dim = c.head_dim;
  ap.pos0 = pos0;
  ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  ap.q = q.data();
  ap.q_stride = q_dim;
  ap.kv_type = params.kv_type;
  ap.k_cache = k_cache;
  ap.v_cache = v_cache;
  ap.out = attn.data();
  ap.out_stride = q_dim;
  ap.work = attn_work.data();
  ap.work_stride = cpu::attention_work_floats(params.n_ctx, c.head_dim);
  cpu::attention(ap, pool);  // [n][n_head][head_dim]

  cpu::matmul(L.wo, attn.data(), n, q_dim, tmp.data(), E, pool);  // [n][n_embd]
  cpu::add_inplace(x.data(), tmp.data(), n * E);

  // Feed-forward block: x += W_down (silu(W_gate h) * W_up h), h = rmsnorm(x) * ffn_norm.
  for (int64_t t = 0; t < n; ++t) {
    cpu::rms_norm(x.data() + t * E, L.ffn_norm.data(), xn.data() + t * E, E, c.rms_eps);
  }
  cpu::matmul(L.w_gate, xn.data(), n, E, gate.data(), c.n_ff, pool);  // [n][n_ff]
  cpu::matmul(L.w_up, xn.data(), n, E, up.data(), c.n_ff, pool);      // [n][n_ff]
  cpu::swiglu(gate.data(), up.data(), gate.data(), n * c.n_ff);
  cpu::matmul(L.w_down, gate.data(), n, c.n_ff, tmp.data(), E, pool);  // [n][n_embd]
  cpu::add_inplace(x.data(), tmp.data(), n * E);
}

}  // namespace ga::arch
