// The Llama-family forward pass on the CPU over a paged KV pool (see llama.h).
//
// Layout: activations are row-major [n_tokens][features] so every token of a batch, whatever its
// sequence, goes through each weight matrix in one cpu::matmul call (the weights are read once per
// call, which is what makes prefill and multi-sequence decoding fast). Only attention looks at
// sequences: each entry attends over its own sequence's block table. Everything the pass writes
// lives in buffers grown once to the largest batch (and the longest context) seen, so steady-state
// decoding allocates nothing.
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

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace

KvPool::KvPool(const ModelConfig& config, const KvPoolParams& params) : params_(params) {
  GA_CHECK(params.n_blocks > 0 && params.block_size > 0, InvalidArgument, "KV pool needs n_blocks > 0 and ",
           "block_size > 0 (got ", params.n_blocks, " and ", params.block_size, ")");
  GA_CHECK(params.kv_type == DType::F32 || params.kv_type == DType::F16, InvalidArgument, "KV cache type ",
           dtype_name(params.kv_type), " (supported: F32, F16)");
  constexpr int64_t kMaxPositions = int64_t{1} << 32;  // keeps every size computation far from overflow
  GA_CHECK(params.n_blocks <= kMaxPositions / params.block_size, InvalidArgument, "KV pool of ", params.n_blocks,
           " blocks x ", params.block_size, " positions is too large");
  kv_dim_ = config.n_head_kv * config.head_dim;
  n_layer_ = config.n_layer;
  const uint64_t elem = params.kv_type == DType::F16 ? 2 : 4;
  plane_bytes_ = static_cast<uint64_t>(params.n_blocks * params.block_size) * static_cast<uint64_t>(kv_dim_) * elem;
  const double total = static_cast<double>(plane_bytes_) * 2.0 * static_cast<double>(n_layer_);
  try {
    data_.resize(plane_bytes_ * 2 * static_cast<uint64_t>(n_layer_));
  } catch (const std::bad_alloc&) {
    GA_THROW(OutOfMemory, "cannot allocate the KV cache of ", params.n_blocks * params.block_size, " positions (",
             total / (1 << 20), " MiB)");
  } catch (const std::length_error&) {
    GA_THROW(OutOfMemory, "KV cache of ", total / (1 << 20), " MiB exceeds the addressable size");
  }
}

struct LlamaBatchForward::Impl {
  ModelConfig c;
  ThreadPool* pool = nullptr;

  int64_t q_dim = 0, kv_dim = 0, half_rot = 0;
  std::vector<Layer> layers;
  WeightView token_embd;
  cpu::MatrixRef output;
  std::vector<float> output_norm;  // [n_embd]
  std::vector<double> inv_freq;    // [n_rot/2] rope frequencies after scaling
  cpu::RopeLayout rope_layout = cpu::RopeLayout::AdjacentPairs;

  // Scratch, grown to the largest batch seen.
  std::vector<float> x, xn, q, k, v, attn, tmp, gate, up;  // [n][n_embd], ..., [n][n_ff]
  std::vector<float> rope_cos, rope_sin;                  // [n][n_rot/2]
  std::vector<int64_t> positions;                         // [n]
  std::vector<const int32_t*> tables;                     // [n]: each entry's block table
  std::vector<uint64_t> kv_rows;                          // [n]: each entry's row in the pool
  std::vector<float> attn_work;                           // [pool threads][longest context + head_dim]

  void reserve(int64_t n) {
    grow(x, n * c.n_embd);
    grow(xn, n * c.n_embd);
    grow(tmp, n * c.n_embd);
    grow(q, n * q_dim);
    grow(attn, n * q_dim);
    grow(k, n * kv_dim);
    grow(v, n * kv_dim);
    grow(gate, n * c.n_ff);
    grow(up, n * c.n_ff);
    grow(rope_cos, n * half_rot);
    grow(rope_sin, n * half_rot);
    grow(positions, n);
    grow(tables, n);
    grow(kv_rows, n);
  }

  void validate(std::span<const BatchToken> batch, std::span<const std::span<const int32_t>> block_tables,
                const KvPool& kv) const;
  void layer_forward(int64_t il, int64_t n, KvPool& kv);
};

LlamaBatchForward::LlamaBatchForward(const LoadedModel& model, ThreadPool* pool) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.c = model.config;
  m.pool = pool;
  const ModelConfig& c = m.c;
  GA_CHECK(is_llama_family(c.arch), Unsupported, "unsupported architecture '", c.arch, "' (supported: llama, qwen2)");
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
  m.reserve(1);  // decoding one sequence never grows the scratch
}

LlamaBatchForward::~LlamaBatchForward() = default;
LlamaBatchForward::LlamaBatchForward(LlamaBatchForward&&) noexcept = default;
LlamaBatchForward& LlamaBatchForward::operator=(LlamaBatchForward&&) noexcept = default;

const ModelConfig& LlamaBatchForward::config() const { return impl_->c; }
int64_t LlamaBatchForward::n_vocab() const { return impl_->c.n_vocab; }

void LlamaBatchForward::Impl::validate(std::span<const BatchToken> batch,
                                       std::span<const std::span<const int32_t>> block_tables,
                                       const KvPool& kv) const {
  GA_CHECK(kv.kv_dim() == kv_dim && kv.n_layer() == c.n_layer, InvalidArgument, "KV pool shape (", kv.n_layer(),
           " layers x ", kv.kv_dim(), ") does not match the model (", c.n_layer, " x ", kv_dim, ")");
  for (size_t s = 0; s < block_tables.size(); ++s) {
    for (const int32_t b : block_tables[s]) {
      GA_CHECK(b >= 0 && b < kv.n_blocks(), InvalidArgument, "block table of sequence ", s, " names block ", b,
               " outside the pool of ", kv.n_blocks());
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchToken& e = batch[i];
    GA_CHECK(e.token >= 0 && e.token < c.n_vocab, InvalidArgument, "token id ", e.token, " at index ", i,
             " is outside the vocabulary [0, ", c.n_vocab, ")");
    GA_CHECK(e.seq >= 0 && static_cast<size_t>(e.seq) < block_tables.size(), InvalidArgument, "batch entry ", i,
             " names sequence ", e.seq, " of ", block_tables.size());
    const int64_t n_pos = static_cast<int64_t>(block_tables[static_cast<size_t>(e.seq)].size()) * kv.block_size();
    GA_CHECK(e.pos >= 0 && e.pos < n_pos, OutOfRange, "batch entry ", i, " at position ", e.pos,
             " is outside its sequence's ", n_pos, " cached positions");
  }
}

void LlamaBatchForward::forward(std::span<const BatchToken> batch,
                                std::span<const std::span<const int32_t>> block_tables, KvPool& kv, float* logits) {
  Impl& m = *impl_;
  const int64_t n = static_cast<int64_t>(batch.size());
  GA_CHECK(n > 0, InvalidArgument, "a forward batch needs at least one token");
  m.validate(batch, block_tables, kv);
  m.reserve(n);

  const int64_t E = m.c.n_embd;
  int64_t max_pos = 0;
  for (int64_t t = 0; t < n; ++t) {
    const BatchToken& e = batch[static_cast<size_t>(t)];
    const std::span<const int32_t> table = block_tables[static_cast<size_t>(e.seq)];
    cpu::embedding_row(m.token_embd.type, m.token_embd.data, E, e.token, m.x.data() + t * E);  // [n][n_embd]
    cpu::rope_angles(m.inv_freq.data(), m.half_rot, static_cast<double>(e.pos), m.rope_cos.data() + t * m.half_rot,
                     m.rope_sin.data() + t * m.half_rot);
    m.positions[static_cast<size_t>(t)] = e.pos;
    m.tables[static_cast<size_t>(t)] = table.data();
    const int64_t block = table[static_cast<size_t>(e.pos / kv.block_size())];
    m.kv_rows[static_cast<size_t>(t)] = static_cast<uint64_t>(block * kv.block_size() + e.pos % kv.block_size());
    max_pos = std::max(max_pos, e.pos);
  }
  const int64_t threads = m.pool != nullptr ? m.pool->size() : 1;
  grow(m.attn_work, threads * cpu::attention_work_floats(max_pos + 1, m.c.head_dim));

  for (int64_t il = 0; il < m.c.n_layer; ++il) m.layer_forward(il, n, kv);

  // Only the rows whose logits are wanted go through the final norm and the classifier; they are
  // gathered into consecutive rows of xn so the classifier is one matmul.
  int64_t n_out = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (!batch[static_cast<size_t>(t)].logits) continue;
    cpu::rms_norm(m.x.data() + t * E, m.output_norm.data(), m.xn.data() + n_out * E, E, m.c.rms_eps);
    ++n_out;
  }
  if (n_out > 0) cpu::matmul(m.output, m.xn.data(), n_out, E, logits, m.c.n_vocab, m.pool);  // [n_out][n_vocab]
}

void LlamaBatchForward::Impl::layer_forward(int64_t il, int64_t n, KvPool& kv) {
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
  uint8_t* k_blocks = kv.k(il);  // [n_blocks][block_size][n_head_kv][head_dim]
  uint8_t* v_blocks = kv.v(il);
  const uint64_t kv_row_bytes = static_cast<uint64_t>(kv_dim) * (kv.kv_type() == DType::F16 ? 2 : 4);
  for (int64_t t = 0; t < n; ++t) {
    const float* cs = rope_cos.data() + t * half_rot;
    const float* sn = rope_sin.data() + t * half_rot;
    cpu::rope(q.data() + t * q_dim, c.n_head, c.head_dim, c.n_rot, cs, sn, rope_layout);
    cpu::rope(k.data() + t * kv_dim, c.n_head_kv, c.head_dim, c.n_rot, cs, sn, rope_layout);
    const uint64_t row = kv_rows[static_cast<size_t>(t)];
    cpu::store_kv(kv.kv_type(), k.data() + t * kv_dim, k_blocks + row * kv_row_bytes, kv_dim);
    cpu::store_kv(kv.kv_type(), v.data() + t * kv_dim, v_blocks + row * kv_row_bytes, kv_dim);
  }

  cpu::PagedAttentionParams ap;
  ap.n_tokens = n;
  ap.n_head = c.n_head;
  ap.n_head_kv = c.n_head_kv;
  ap.head_dim = c.head_dim;
  ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  ap.q = q.data();
  ap.q_stride = q_dim;
  ap.positions = positions.data();
  ap.block_tables = tables.data();
  ap.block_size = kv.block_size();
  ap.kv_type = kv.kv_type();
  ap.k_blocks = k_blocks;
  ap.v_blocks = v_blocks;
  ap.out = attn.data();
  ap.out_stride = q_dim;
  ap.work = attn_work.data();
  ap.work_stride = static_cast<int64_t>(attn_work.size()) / (pool != nullptr ? pool->size() : 1);
  cpu::paged_attention(ap, pool);  // [n][n_head][head_dim]

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
