// The CPU step engine (see step_engine.h): the Binder and the Ops of backends/step_ops.h on the host.
//
// Every op is a loop over the step's rows calling the reference ops of ops.h / quant.h; the matrix
// products and the attention are threaded. The step's metadata (ids, positions, each token's block table
// and cache row, the rows that want logits) is filled once by forward() after validation, and the ops
// read it. RoPE angles are computed once per step and table, at the first op that needs them.
#include "backends/cpu/step_engine.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/activation.h"
#include "backends/cpu/moe.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/quant.h"
#include "core/thread_pool.h"
#include "dist/transport.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// A weight as the CPU reads it: a matrix of rows (a 3-D expert stack is n_expert blocks of rows).
struct CpuWeight {
  std::string name;
  MatrixRef m;
  int64_t n_expert = 1;  // ne[2] for a stack
};

struct CpuBuffer {
  int64_t cols = 0;
  std::vector<float> data;  // [rows][cols]
};

struct CpuRope {
  step::RopeTable table;
  std::vector<float> cos_v, sin_v;  // [n][n_rot / 2] for the current step
  uint64_t step = 0;                // the step they were computed for (0: never)
};

}  // namespace

struct StepEngine::Impl final : step::Binder, step::Ops {
  const LoadedModel* model = nullptr;
  ThreadPool* pool = nullptr;
  dist::Transport* transport = nullptr;  // the tensor-parallel group of a sharded model
  std::vector<float> reduce_scratch;
  std::vector<float> vocab_slice, vocab_gathered;  // a vocab-parallel shard's logits: its slice, the group's
  int64_t n_ctx = 0;
  step::StateSpec state_spec;
  std::unique_ptr<step::Program> program;

  std::vector<CpuWeight> weights;
  std::vector<std::vector<float>> vectors;
  std::vector<CpuBuffer> buffers;
  std::vector<CpuRope> ropes;

  // The current step (forward's validated metadata).
  uint64_t step_serial = 0;
  int64_t n = 0;
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  std::vector<const int32_t*> tables;  // each token's block table
  std::vector<uint64_t> kv_rows;       // each token's row in the pool
  std::vector<int64_t> logit_rows;
  std::vector<int64_t> state_block;  // each token's sequence's first block (its recurrent slots)
  std::vector<uint8_t> run_start;    // 1: the first row of its sequence's run in this step
  KvPool* cache = nullptr;  // the step's pool
  const ContextStep* context = nullptr;  // a context-parallel rank's step (forward_context), else null
  ContextAttentionScratch context_scratch;
  static constexpr uint64_t kNoRow = ~uint64_t{0};  // kv_rows: this rank does not keep the token's K/V
  float* logits_out = nullptr;
  std::vector<float> attn_work;   // [threads][work floats]
  std::vector<float> logits_in;   // [n_logit_rows][n_embd]: the gathered, normed rows
  MoeScratch moe_scratch;
  std::vector<float> wkv_scratch;  // wkv7's per-row key vectors

  int threads() const { return pool != nullptr ? pool->size() : 1; }

  // ---- Binder ----
  const WeightView* find_view(std::string_view name) const {
    const auto it = model->weights.find(name);
    return it == model->weights.end() ? nullptr : &it->second;
  }
  step::Weight find_matrix(std::string_view name) override {
    const WeightView* w = find_view(name);
    if (w == nullptr) return {};
    GA_CHECK(w->ne.size() >= 2 && w->ne.size() <= 3, InvalidFormat, "tensor ", name, " has ", w->ne.size(),
             " dimensions; a matrix has 2 (an expert stack 3)");
    CpuWeight cw;
    cw.name = std::string(name);
    cw.m.type = w->type;
    cw.m.data = w->data;
    cw.m.cols = w->cols();
    cw.m.row_stride = row_bytes(w->type, static_cast<uint64_t>(w->cols()));
    cw.n_expert = w->ne.size() == 3 ? static_cast<int64_t>(w->ne[2]) : 1;
    cw.m.rows = w->rows() * cw.n_expert;
    weights.push_back(std::move(cw));
    return step::Weight{static_cast<int32_t>(weights.size() - 1)};
  }
  step::Weight matrix(std::string_view name) override {
    const step::Weight w = find_matrix(name);
    GA_CHECK(static_cast<bool>(w), InvalidFormat, "model '", model->config.name, "' has no tensor ", name);
    return w;
  }
  step::Vec find_vector(std::string_view name) override {
    const WeightView* w = find_view(name);
    if (w == nullptr) return {};
    std::vector<float> v(static_cast<size_t>(w->cols()));
    dequantize_row(w->type, w->data, v.data(), w->cols());
    vectors.push_back(std::move(v));
    return step::Vec{static_cast<int32_t>(vectors.size() - 1)};
  }
  step::Vec vector(std::string_view name) override {
    const step::Vec v = find_vector(name);
    GA_CHECK(static_cast<bool>(v), InvalidFormat, "model '", model->config.name, "' has no tensor ", name);
    return v;
  }
  step::Buf buffer(int64_t cols) override {
    GA_CHECK(cols > 0, Internal, "an activation buffer needs columns");
    buffers.push_back(CpuBuffer{cols, {}});
    return step::Buf{static_cast<int32_t>(buffers.size() - 1)};
  }
  step::Rope rope(const step::RopeTable& table) override {
    GA_CHECK(table.n_rot > 0 && table.n_rot % 2 == 0 &&
                 static_cast<int64_t>(table.inv_freq.size()) == table.n_rot / 2,
             Internal, "RoPE table of ", table.inv_freq.size(), " frequencies for ", table.n_rot, " dims");
    ropes.push_back(CpuRope{table, {}, {}, 0});
    return step::Rope{static_cast<int32_t>(ropes.size() - 1)};
  }
  step::Kv kv(int64_t layer) override {
    GA_CHECK(layer >= 0 && layer < static_cast<int64_t>(state_spec.kv_layers.size()), Internal, "KV layer ",
             layer, " of ", state_spec.kv_layers.size());
    return step::Kv{static_cast<int32_t>(layer)};
  }
  step::Rec recurrent(int64_t slot) override {
    GA_CHECK(slot >= 0 && slot < static_cast<int64_t>(state_spec.recurrent.size()), Internal, "recurrent slot ",
             slot, " of ", state_spec.recurrent.size());
    return step::Rec{static_cast<int32_t>(slot)};
  }
  int64_t max_step_tokens() const override { return int64_t{1} << 30; }  // the buffers grow
  int64_t max_positions() const override { return n_ctx; }

  // ---- views ----
  float* ptr(step::View v, int64_t row = 0) {
    CpuBuffer& b = buffers[static_cast<size_t>(v.buf.id)];
    return b.data.data() + row * b.cols + v.col;
  }
  int64_t ld(step::View v) const { return buffers[static_cast<size_t>(v.buf.id)].cols; }
  const CpuWeight& weight(step::Weight w) const { return weights[static_cast<size_t>(w.id)]; }
  const float* vec(step::Vec v) const { return vectors[static_cast<size_t>(v.id)].data(); }
  int64_t vec_size(step::Vec v) const { return static_cast<int64_t>(vectors[static_cast<size_t>(v.id)].size()); }
  void check_view(step::View v, const char* op) const {
    GA_CHECK(v.buf.id >= 0 && v.buf.id < static_cast<int32_t>(buffers.size()) && v.col >= 0 && v.cols > 0 &&
                 v.col + v.cols <= buffers[static_cast<size_t>(v.buf.id)].cols,
             Internal, op, ": view of columns [", v.col, ", ", v.col + v.cols, ") outside its buffer");
  }

  // ---- Ops ----
  void embed(step::Weight table, step::View out, float scale) override {
    const CpuWeight& w = weight(table);
    check_view(out, "embed");
    GA_CHECK(w.m.cols == out.cols, Internal, "embed: table rows of ", w.m.cols, " into ", out.cols, " columns");
    for (int64_t t = 0; t < n; ++t) {
      float* dst = ptr(out, t);
      dequantize_row(w.m.type, w.m.data + static_cast<uint64_t>(ids[static_cast<size_t>(t)]) * w.m.row_stride, dst,
                     w.m.cols);
      if (scale != 1.0f) {
        for (int64_t i = 0; i < w.m.cols; ++i) dst[i] *= scale;
      }
    }
  }

  void rms_norm(const step::RmsNormOp& op) override {
    check_view(op.x, "rms_norm");
    check_view(op.out, "rms_norm");
    GA_CHECK(vec_size(op.weight) == op.x.cols && op.out.cols == op.x.cols, Internal, "rms_norm: shapes");
    for (int64_t t = 0; t < n; ++t) {
      const float* src = ptr(op.x, t);
      if (op.residual) {
        float* r = ptr(op.residual, t);
        add_inplace(r, src, op.x.cols);
        src = r;
      }
      cpu::rms_norm(src, vec(op.weight), ptr(op.out, t), op.x.cols, op.eps);
    }
  }

  void head_rms_norm(const step::HeadNormOp& op) override {
    const auto one = [&](step::View x, step::Vec w) {
      if (!x) return;
      check_view(x, "head_rms_norm");
      GA_CHECK(op.head_dim > 0 && x.cols % op.head_dim == 0 && vec_size(w) == op.head_dim, Internal,
               "head_rms_norm: ", x.cols, " columns in heads of ", op.head_dim);
      for (int64_t t = 0; t < n; ++t) {
        float* row = ptr(x, t);
        for (int64_t h = 0; h < x.cols / op.head_dim; ++h) {
          cpu::rms_norm(row + h * op.head_dim, vec(w), row + h * op.head_dim, op.head_dim, op.eps);
        }
      }
    };
    one(op.x, op.weight);
    one(op.x2, op.weight2);
  }

  void linear(step::Weight w, step::View x, step::View y) override {
    const CpuWeight& cw = weight(w);
    check_view(x, "linear");
    check_view(y, "linear");
    GA_CHECK(cw.m.cols == x.cols && cw.m.rows == y.cols, Internal, "linear: ", cw.name, " is [", cw.m.rows, " x ",
             cw.m.cols, "], input ", x.cols, ", output ", y.cols);
    matmul(cw.m, ptr(x), n, ld(x), ptr(y), ld(y), pool);  // [n][rows]
  }

  void linear_concat(std::span<const step::Weight> ws, step::View x, step::View y) override {
    int64_t col = 0;
    for (const step::Weight w : ws) {
      const int64_t rows = weight(w).m.rows;
      linear(w, x, y.slice(col, rows));
      col += rows;
    }
    GA_CHECK(col == y.cols, Internal, "linear_concat: ", col, " rows into ", y.cols, " columns");
  }

  const CpuRope& angles(step::Rope r) {
    CpuRope& rope = ropes[static_cast<size_t>(r.id)];
    if (rope.step == step_serial) return rope;
    const int64_t half = rope.table.n_rot / 2;
    grow(rope.cos_v, n * half);
    grow(rope.sin_v, n * half);
    for (int64_t t = 0; t < n; ++t) {
      rope_angles(rope.table.inv_freq.data(), half, static_cast<double>(positions[static_cast<size_t>(t)]),
                  rope.cos_v.data() + t * half, rope.sin_v.data() + t * half);
    }
    if (rope.table.mscale != 1.0f) {  // YaRN / LongRoPE: the rotated dims scaled (the others pass through)
      for (int64_t i = 0; i < n * half; ++i) {
        rope.cos_v[static_cast<size_t>(i)] *= rope.table.mscale;
        rope.sin_v[static_cast<size_t>(i)] *= rope.table.mscale;
      }
    }
    rope.step = step_serial;
    return rope;
  }

  void rope_kv(const step::RopeKvOp& op) override {
    for (const step::View v : {op.q, op.k, op.v}) check_view(v, "rope_kv");
    const int64_t hd = op.head_dim;
    GA_CHECK(op.q.cols == op.n_head * hd && op.k.cols == op.n_head_kv * hd && op.v.cols == op.k.cols, Internal,
             "rope_kv: shapes");
    const int64_t kv_dim = op.k.cols;
    GA_CHECK(cache->kv_dim(op.kv.id) == kv_dim, Internal, "rope_kv: KV layer ", op.kv.id, " holds ",
             cache->kv_dim(op.kv.id), " values per position, not ", kv_dim);
    const CpuRope& r = angles(op.rope);
    const int64_t half = r.table.n_rot / 2;
    const RopeLayout layout = r.table.neox ? RopeLayout::Halves : RopeLayout::AdjacentPairs;
    const DType kv_type = cache->kv_type();
    const uint64_t row_bytes_kv = row_bytes(kv_type, static_cast<uint64_t>(kv_dim));
    uint8_t* k_blocks = cache->k(op.kv.id);
    uint8_t* v_blocks = cache->v(op.kv.id);
    float* k_scales = cache->k_scales(op.kv.id);  // F8_E4M3: [slots][n_head_kv]
    float* v_scales = cache->v_scales(op.kv.id);
    for (int64_t t = 0; t < n; ++t) {
      float* q = ptr(op.q, t);
      float* k = ptr(op.k, t);
      float* v = ptr(op.v, t);
      if (op.bq) {
        add_inplace(q, vec(op.bq), op.q.cols);
        add_inplace(k, vec(op.bk), kv_dim);
        add_inplace(v, vec(op.bv), kv_dim);
      }
      const float* cs = r.cos_v.data() + t * half;
      const float* sn = r.sin_v.data() + t * half;
      cpu::rope(q, op.n_head, hd, r.table.n_rot, cs, sn, layout);
      cpu::rope(k, op.n_head_kv, hd, r.table.n_rot, cs, sn, layout);
      const uint64_t row = kv_rows[static_cast<size_t>(t)];
      if (row == kNoRow) continue;
      if (kv_type == DType::F8_E4M3) {
        const uint64_t heads = static_cast<uint64_t>(op.n_head_kv);
        store_kv_fp8(k, k_blocks + row * row_bytes_kv, k_scales + row * heads, op.n_head_kv, hd);
        store_kv_fp8(v, v_blocks + row * row_bytes_kv, v_scales + row * heads, op.n_head_kv, hd);
        continue;
      }
      store_kv(kv_type, k, k_blocks + row * row_bytes_kv, kv_dim);
      store_kv(kv_type, v, v_blocks + row * row_bytes_kv, kv_dim);
    }
  }

  void attention(const step::AttentionOp& op) override {
    check_view(op.q, "attention");
    check_view(op.out, "attention");
    GA_CHECK(op.q.cols == op.n_head * op.head_dim && op.out.cols == op.q.cols &&
                 cache->kv_dim(op.kv.id) == op.n_head_kv * op.head_dim,
             Internal, "attention: shapes");
    if (context != nullptr) {
      sharded_attention(op);
      return;
    }
    int64_t max_pos = 0;
    for (int64_t t = 0; t < n; ++t) max_pos = std::max(max_pos, positions[static_cast<size_t>(t)]);
    const int64_t work = attention_work_floats(max_pos + 1, op.head_dim);
    grow(attn_work, threads() * work);
    PagedAttentionParams ap;
    ap.n_tokens = n;
    ap.n_head = op.n_head;
    ap.n_head_kv = op.n_head_kv;
    ap.head_dim = op.head_dim;
    ap.scale = op.scale;
    ap.window_left = op.window_left;
    ap.softcap = op.softcap;
    ap.q = ptr(op.q);
    ap.q_stride = ld(op.q);
    ap.positions = positions.data();
    ap.block_tables = tables.data();
    ap.block_size = cache->block_size();
    ap.kv_type = cache->kv_type();
    ap.k_blocks = cache->k(op.kv.id);
    ap.v_blocks = cache->v(op.kv.id);
    ap.k_scales = cache->k_scales(op.kv.id);
    ap.v_scales = cache->v_scales(op.kv.id);
    ap.out = ptr(op.out);
    ap.out_stride = ld(op.out);
    ap.work = attn_work.data();
    ap.work_stride = work;
    paged_attention(ap, pool);  // [n][n_head][head_dim]
  }

  // A context-parallel rank's attention: its shard of the cache, its queries, the group's ring or pass-Q.
  void sharded_attention(const step::AttentionOp& op) {
    ContextAttentionParams p;
    p.transport = context->transport;
    p.form = context->attention;
    p.n_head = op.n_head;
    p.n_head_kv = op.n_head_kv;
    p.head_dim = op.head_dim;
    p.scale = op.scale;
    p.window_left = op.window_left;
    p.softcap = op.softcap;
    p.n_tokens = n;
    p.q = ptr(op.q);
    p.q_stride = ld(op.q);
    p.q_pos = std::span<const int64_t>(positions.data(), static_cast<size_t>(n));
    p.kv_type = cache->kv_type();
    p.k_rows = cache->k(op.kv.id);
    p.v_rows = cache->v(op.kv.id);
    p.kv_pos = context->kv_pos;
    p.out = ptr(op.out);
    p.out_stride = ld(op.out);
    context_attention(p, context_scratch);  // [n][n_head][head_dim]
  }

  void glu(const step::GluOp& op) override {
    for (const step::View v : {op.gate, op.up, op.out}) check_view(v, "glu");
    GA_CHECK(op.gate.cols == op.up.cols && op.out.cols == op.gate.cols, Internal, "glu: shapes");
    for (int64_t t = 0; t < n; ++t) {
      if (op.act == step::Activation::kSilu) {
        swiglu(ptr(op.gate, t), ptr(op.up, t), ptr(op.out, t), op.gate.cols);
      } else {
        geglu_tanh(ptr(op.gate, t), ptr(op.up, t), ptr(op.out, t), op.gate.cols);
      }
    }
  }

  void add(step::View x, step::View y) override {
    check_view(x, "add");
    check_view(y, "add");
    GA_CHECK(x.cols == y.cols, Internal, "add: ", x.cols, " and ", y.cols, " columns");
    for (int64_t t = 0; t < n; ++t) add_inplace(ptr(x, t), ptr(y, t), x.cols);
  }

  void moe(const step::MoeOp& op) override {
    check_view(op.x, "moe");
    check_view(op.out, "moe");
    const CpuWeight& router = weight(op.router);
    const CpuWeight& gate = weight(op.gate_exps);
    const CpuWeight& up = weight(op.up_exps);
    const CpuWeight& down = weight(op.down_exps);
    GA_CHECK(router.m.rows == op.n_expert && router.m.cols == op.x.cols && gate.n_expert == op.n_expert &&
                 up.n_expert == op.n_expert && down.n_expert == op.n_expert && gate.m.cols == op.x.cols &&
                 down.m.rows / down.n_expert == op.out.cols,
             Internal, "moe: shapes of ", router.name, ", ", gate.name, ", ", down.name);
    MoeFfnParams p;
    p.n_tokens = n;
    p.x = ptr(op.x);
    p.ldx = ld(op.x);
    p.out = ptr(op.out);
    p.ld_out = ld(op.out);
    p.router = router.m;
    p.n_expert = op.n_expert;
    p.top_k = op.top_k;
    p.normalize_top_k = op.normalize_top_k;
    p.gelu_tanh = op.act == step::Activation::kGeluTanh;
    const auto stack = [](const CpuWeight& w) {
      ExpertStack s;
      s.type = w.m.type;
      s.data = w.m.data;
      s.rows = w.m.rows / w.n_expert;
      s.cols = w.m.cols;
      s.row_stride = w.m.row_stride;
      return s;
    };
    p.gate = stack(gate);
    p.up = stack(up);
    p.down = stack(down);
    moe_ffn(p, moe_scratch, pool);
  }

  // The view's rows gathered into one contiguous block, summed over the group, scattered back.
  void all_reduce(step::View x) override {
    check_view(x, "all_reduce");
    GA_CHECK(transport != nullptr && transport->world_size() == model->config.shard.world, Internal,
             "all_reduce: a shard of a ", model->config.shard.world, "-rank model without its group's transport");
    reduce_scratch.resize(static_cast<size_t>(n * x.cols));
    for (int64_t t = 0; t < n; ++t) std::copy_n(ptr(x, t), x.cols, reduce_scratch.data() + t * x.cols);
    transport->all_reduce_sum(reduce_scratch.data(), reduce_scratch.size());
    for (int64_t t = 0; t < n; ++t) std::copy_n(reduce_scratch.data() + t * x.cols, x.cols, ptr(x, t));
  }

  void sigmoid_gate(step::View y, step::Vec g, step::View x) override {
    check_view(y, "sigmoid_gate");
    check_view(x, "sigmoid_gate");
    GA_CHECK(vec_size(g) == x.cols, Internal, "sigmoid_gate: gate of ", vec_size(g), " for ", x.cols, " columns");
    for (int64_t t = 0; t < n; ++t) {
      const float* xr = ptr(x, t);
      double dot = 0.0;
      for (int64_t i = 0; i < x.cols; ++i) dot += static_cast<double>(vec(g)[i]) * xr[i];
      const float s = static_cast<float>(1.0 / (1.0 + std::exp(-dot)));
      float* yr = ptr(y, t);
      for (int64_t i = 0; i < y.cols; ++i) yr[i] *= s;
    }
  }

  void logits(const step::LogitsOp& op) override {
    check_view(op.x, "logits");
    const CpuWeight& out = weight(op.output);
    const int64_t E = op.x.cols;
    const TensorParallelShard& shard = model->config.shard;
    const int64_t V = model->config.n_vocab;
    const int64_t V_local = shard.vocab_parallel ? V / shard.world : V;  // this rank's vocabulary rows
    GA_CHECK(out.m.cols == E && vec_size(op.norm) == E && out.m.rows == V_local, Internal, "logits: classifier [",
             out.m.rows, " x ", out.m.cols, "] for ", E, " columns and ", V_local, " vocabulary rows");
    // Only the rows whose logits are wanted are normed and classified; they are gathered into
    // consecutive rows so the classifier is one matmul.
    const int64_t n_out = static_cast<int64_t>(logit_rows.size());
    if (n_out == 0) return;
    grow(logits_in, n_out * E);
    for (int64_t i = 0; i < n_out; ++i) {
      const int64_t t = logit_rows[static_cast<size_t>(i)];
      const float* src = ptr(op.x, t);
      if (op.residual) {
        float* r = ptr(op.residual, t);
        add_inplace(r, src, E);
        src = r;
      }
      if (op.norm_bias) {
        cpu::layer_norm(src, vec(op.norm), vec(op.norm_bias), logits_in.data() + i * E, E, op.eps);
      } else {
        cpu::rms_norm(src, vec(op.norm), logits_in.data() + i * E, E, op.eps);
      }
    }
    // Vocab-parallel: this rank's [n_out][V / W] slice, gathered over the group ([W][n_out][V / W]) and laid out as
    // [n_out][V]. Each logit is the same dot as in the whole classifier, so the result is the unsplit one exactly.
    float* classified = logits_out;  // [n_out][V_local]
    if (shard.vocab_parallel) {
      GA_CHECK(transport != nullptr && transport->world_size() == shard.world, Internal,
               "logits: a vocab-parallel shard without its group's transport");
      grow(vocab_slice, n_out * V_local);
      classified = vocab_slice.data();
    }
    matmul(out.m, logits_in.data(), n_out, E, classified, V_local, pool);
    if (op.softcap > 0.0f) softcap(classified, n_out * V_local, op.softcap);
    if (!shard.vocab_parallel) return;
    grow(vocab_gathered, n_out * V);
    transport->all_gather(vocab_slice.data(), static_cast<size_t>(n_out * V_local), vocab_gathered.data());
    for (int q = 0; q < shard.world; ++q) {
      for (int64_t i = 0; i < n_out; ++i) {
        std::copy_n(vocab_gathered.data() + (q * n_out + i) * V_local, V_local, logits_out + i * V + q * V_local);
      }
    }
  }


  // ---- recurrent (RWKV) ops ----
  int64_t floats(step::Rec r) const { return state_spec.recurrent[static_cast<size_t>(r.id)].floats; }
  // The row's sequence state; at the first row of a run from position 0, reset to the initial state first.
  float* state_row(step::Rec r, int64_t t, float init = 0.0f, int64_t init_from = 0) {
    float* st = cache->recurrent(r.id, state_block[static_cast<size_t>(t)]);
    if (run_start[static_cast<size_t>(t)] != 0 && positions[static_cast<size_t>(t)] == 0) {
      const int64_t nf = floats(r);
      std::fill(st, st + init_from, 0.0f);
      std::fill(st + init_from, st + nf, init);
    }
    return st;
  }
  bool run_end(int64_t t) const {
    return t + 1 == n || run_start[static_cast<size_t>(t + 1)] != 0;
  }

  void layer_norm(const step::LayerNormOp& op) override {
    check_view(op.x, "layer_norm");
    check_view(op.out, "layer_norm");
    GA_CHECK(op.out.cols == op.x.cols && vec_size(op.weight) == op.x.cols && vec_size(op.bias) == op.x.cols,
             Internal, "layer_norm: shapes");
    for (int64_t t = 0; t < n; ++t) cpu::layer_norm(ptr(op.x, t), vec(op.weight), vec(op.bias), ptr(op.out, t), op.x.cols, op.eps);
  }

  void group_norm(const step::GroupNormOp& op) override {
    check_view(op.x, "group_norm");
    const int64_t C = op.x.cols;
    GA_CHECK(op.groups > 0 && C % op.groups == 0 && vec_size(op.weight) == C && vec_size(op.bias) == C, Internal,
             "group_norm: ", C, " columns in ", op.groups, " groups");
    const int64_t g = C / op.groups;
    for (int64_t t = 0; t < n; ++t) {
      float* row = ptr(op.x, t);
      for (int64_t h = 0; h < op.groups; ++h) cpu::layer_norm(row + h * g, nullptr, nullptr, row + h * g, g, op.eps);
      const float* w = vec(op.weight);
      const float* b = vec(op.bias);
      for (int64_t i = 0; i < C; ++i) row[i] = row[i] * w[i] + b[i];
    }
  }

  void token_shift(const step::TokenShiftOp& op) override {
    check_view(op.x, "token_shift");
    check_view(op.prev, "token_shift");
    const int64_t C = op.x.cols;
    GA_CHECK(op.prev.cols == C && floats(op.state) == C, Internal, "token_shift: shapes");
    for (int64_t t = 0; t < n; ++t) {
      float* st = state_row(op.state, t);
      const float* src = run_start[static_cast<size_t>(t)] != 0 ? st : ptr(op.x, t - 1);
      std::copy(src, src + C, ptr(op.prev, t));
      if (run_end(t)) std::copy(ptr(op.x, t), ptr(op.x, t) + C, st);
    }
  }

  void mix(const step::MixOp& op) override {
    for (const step::View v : {op.x, op.prev, op.out}) check_view(v, "mix");
    const int64_t C = op.x.cols;
    GA_CHECK(op.prev.cols == C && op.out.cols == C && vec_size(op.mix) == C && (!op.dyn || op.dyn.cols == C),
             Internal, "mix: shapes");
    const float* m = vec(op.mix);
    for (int64_t t = 0; t < n; ++t) {
      const float* x = ptr(op.x, t);
      const float* p = ptr(op.prev, t);
      const float* d = op.dyn ? ptr(op.dyn, t) : nullptr;
      float* o = ptr(op.out, t);
      for (int64_t i = 0; i < C; ++i) {
        if (op.form == step::MixForm::kComplement) {
          o[i] = x[i] * m[i] + (p[i] - p[i] * m[i]);
        } else {
          o[i] = (p[i] - x[i]) * (d != nullptr ? d[i] + m[i] : m[i]) + x[i];
        }
      }
    }
  }

  void unary(step::View x, step::Unary fn) override {
    check_view(x, "unary");
    constexpr float kV7DecayScale = 0.606531f;  // exp(-0.5), as rwkv.cpp writes it
    for (int64_t t = 0; t < n; ++t) {
      float* r = ptr(x, t);
      for (int64_t i = 0; i < x.cols; ++i) {
        const float v = r[i];
        switch (fn) {
          case step::Unary::kSigmoid: r[i] = sigmoid(v); break;
          case step::Unary::kTanh: r[i] = std::tanh(v); break;
          case step::Unary::kSilu: r[i] = silu(v); break;
          case step::Unary::kReluSquare: r[i] = v > 0.0f ? v * v : 0.0f; break;
          case step::Unary::kExpNegExp: r[i] = std::exp(-std::exp(v)); break;
          case step::Unary::kV7Decay: r[i] = std::exp(-kV7DecayScale / (1.0f + std::exp(-v))); break;
        }
      }
    }
  }

  void mul(step::View x, step::View y) override {
    check_view(x, "mul");
    check_view(y, "mul");
    GA_CHECK(x.cols == y.cols, Internal, "mul: ", x.cols, " and ", y.cols, " columns");
    for (int64_t t = 0; t < n; ++t) {
      float* a = ptr(x, t);
      const float* b = ptr(y, t);
      for (int64_t i = 0; i < x.cols; ++i) a[i] *= b[i];
    }
  }

  void scale(step::View x, float s) override {
    check_view(x, "scale");
    for (int64_t t = 0; t < n; ++t) {
      float* a = ptr(x, t);
      for (int64_t i = 0; i < x.cols; ++i) a[i] *= s;
    }
  }

  void add_vec(step::View x, step::Vec b) override {
    check_view(x, "add_vec");
    GA_CHECK(vec_size(b) == x.cols, Internal, "add_vec: ", vec_size(b), " values for ", x.cols, " columns");
    for (int64_t t = 0; t < n; ++t) add_inplace(ptr(x, t), vec(b), x.cols);
  }

  void lerp_to(step::View x, step::View target, step::View tv) override {
    for (const step::View v : {x, target, tv}) check_view(v, "lerp_to");
    GA_CHECK(target.cols == x.cols && tv.cols == x.cols, Internal, "lerp_to: shapes");
    for (int64_t t = 0; t < n; ++t) {
      float* a = ptr(x, t);
      const float* g = ptr(target, t);
      const float* s = ptr(tv, t);
      for (int64_t i = 0; i < x.cols; ++i) a[i] = a[i] + (g[i] - a[i]) * s[i];
    }
  }

  void wkv4(const step::Wkv4Op& op) override {
    for (const step::View v : {op.k, op.v, op.out}) check_view(v, "wkv4");
    const int64_t C = op.k.cols;
    GA_CHECK(op.v.cols == C && op.out.cols == C && vec_size(op.time_first) == C && vec_size(op.time_decay) == C &&
                 floats(op.state) == 3 * C,
             Internal, "wkv4: shapes");
    constexpr float kMinusInf = -1e30f;  // the running maximum's initial value (rwkv.cpp's state init)
    const float* u = vec(op.time_first);
    const float* w = vec(op.time_decay);
    for (int64_t t = 0; t < n; ++t) {
      float* st = state_row(op.state, t, kMinusInf, 2 * C);
      float* aa = st;
      float* bb = st + C;
      float* pp = st + 2 * C;
      const float* k = ptr(op.k, t);
      const float* v = ptr(op.v, t);
      float* o = ptr(op.out, t);
      for (int64_t i = 0; i < C; ++i) {
        float ww = u[i] + k[i];
        float q = std::max(pp[i], ww);
        float e1 = std::exp(pp[i] - q);
        float e2 = std::exp(ww - q);
        const float a = e1 * aa[i] + e2 * v[i];
        const float b = e1 * bb[i] + e2;
        ww = pp[i] + w[i];
        q = std::max(ww, k[i]);
        e1 = std::exp(ww - q);
        e2 = std::exp(k[i] - q);
        aa[i] = e1 * aa[i] + e2 * v[i];
        bb[i] = e1 * bb[i] + e2;
        pp[i] = q;
        o[i] = a / b;
      }
    }
  }

  void wkv5(const step::Wkv5Op& op) override {
    for (const step::View v : {op.r, op.k, op.v, op.out}) check_view(v, "wkv5");
    const int64_t H = op.n_head, S = op.head_size, C = H * S;
    const auto per = [&](step::Vec v) { return vec_size(v) == C ? 1 : S; };  // n_embd values or one per head
    GA_CHECK(op.r.cols == C && op.k.cols == C && op.v.cols == C && op.out.cols == C &&
                 (vec_size(op.time_first) == C || vec_size(op.time_first) == H) &&
                 (op.decay_view ? op.decay_view.cols == C : (vec_size(op.decay) == C || vec_size(op.decay) == H)) &&
                 floats(op.state) == H * S * S,
             Internal, "wkv5: shapes");
    const int64_t u_div = per(op.time_first);
    const int64_t w_div = op.decay_view ? 1 : per(op.decay);
    const float* u = vec(op.time_first);
    for (int64_t t = 0; t < n; ++t) {
      float* st = state_row(op.state, t);
      const float* r = ptr(op.r, t);
      const float* k = ptr(op.k, t);
      const float* v = ptr(op.v, t);
      const float* w = op.decay_view ? ptr(op.decay_view, t) : vec(op.decay);
      float* o = ptr(op.out, t);
      std::fill(o, o + C, 0.0f);
      for (int64_t h = 0; h < H; ++h) {
        float* s_h = st + h * S * S;
        for (int64_t i = 0; i < S; ++i) {
          const int64_t c = h * S + i;
          const float ki = k[c], ri = r[c], ui = u[c / u_div], wi = w[c / w_div];
          float* row = s_h + i * S;
          const float* vh = v + h * S;
          float* oh = o + h * S;
          for (int64_t j = 0; j < S; ++j) {
            const float kv = ki * vh[j];
            oh[j] += ri * (ui * kv + row[j]);
            row[j] = row[j] * wi + kv;
          }
        }
      }
    }
  }

  void wkv7(const step::Wkv7Op& op) override {
    for (const step::View v : {op.r, op.w, op.k, op.v, op.a, op.out, op.bonus}) check_view(v, "wkv7");
    const int64_t H = op.n_head, S = op.head_size, C = H * S;
    GA_CHECK(op.r.cols == C && op.w.cols == C && op.k.cols == C && op.v.cols == C && op.a.cols == C &&
                 op.out.cols == C && op.bonus.cols == C && vec_size(op.k_k) == C && vec_size(op.k_a) == C &&
                 vec_size(op.r_k) == C && floats(op.state) == H * S * S,
             Internal, "wkv7: shapes");
    const float* k_k = vec(op.k_k);
    const float* k_a = vec(op.k_a);
    const float* r_k = vec(op.r_k);
    std::vector<float>& kk = wkv_scratch;
    grow(kk, 3 * C);
    float* kp = kk.data() + C;   // k'
    float* bb = kk.data() + 2 * C;  // kk * a
    for (int64_t t = 0; t < n; ++t) {
      float* st = state_row(op.state, t);
      const float* r = ptr(op.r, t);
      const float* w = ptr(op.w, t);
      const float* k = ptr(op.k, t);
      const float* v = ptr(op.v, t);
      const float* a = ptr(op.a, t);
      float* o = ptr(op.out, t);
      float* bonus = ptr(op.bonus, t);
      for (int64_t h = 0; h < H; ++h) {
        float sum = 0.0f;
        for (int64_t j = h * S; j < (h + 1) * S; ++j) {
          kk[static_cast<size_t>(j)] = k[j] * k_k[j];
          sum += kk[static_cast<size_t>(j)] * kk[static_cast<size_t>(j)];
        }
        const float scale = 1.0f / std::max(std::sqrt(sum), 1e-12f);
        for (int64_t j = h * S; j < (h + 1) * S; ++j) kk[static_cast<size_t>(j)] *= scale;
      }
      for (int64_t j = 0; j < C; ++j) {
        const float ka = k[j] * k_a[j];
        kp[j] = k[j] + (a[j] * ka - ka);
        bb[j] = kk[static_cast<size_t>(j)] * a[j];
      }
      for (int64_t h = 0; h < H; ++h) {
        float* s_h = st + h * S * S;
        const int64_t base = h * S;
        float rkr = 0.0f;
        for (int64_t j = 0; j < S; ++j) rkr += kp[base + j] * r[base + j] * r_k[base + j];
        for (int64_t i = 0; i < S; ++i) {
          float* row = s_h + i * S;
          const float vi = v[base + i];
          float sa = 0.0f;
          for (int64_t j = 0; j < S; ++j) sa += -kk[static_cast<size_t>(base + j)] * row[j];
          float acc = 0.0f;
          for (int64_t j = 0; j < S; ++j) {
            row[j] = row[j] * w[base + j] + vi * kp[base + j] + sa * bb[base + j];
            acc += row[j] * r[base + j];
          }
          o[base + i] = acc;
          bonus[base + i] = vi * rkr;
        }
      }
    }
  }

  // ---- a step ----
  void validate(std::span<const step::BatchToken> batch, std::span<const std::span<const int32_t>> block_tables,
                KvPool& pool_kv) const {
    GA_CHECK(pool_kv.matches(state_spec), InvalidArgument, "the KV pool's layers (", pool_kv.n_layers(),
             ") do not match the model's (", state_spec.kv_layers.size(), ")");
    for (size_t s = 0; s < block_tables.size(); ++s) {
      for (const int32_t b : block_tables[s]) {
        GA_CHECK(b >= 0 && b < pool_kv.n_blocks(), InvalidArgument, "block table of sequence ", s, " names block ",
                 b, " outside the pool of ", pool_kv.n_blocks());
      }
    }
    const int64_t n_vocab = model->config.n_vocab;
    if (!state_spec.recurrent.empty()) validate_recurrent(batch, block_tables, pool_kv);
    for (size_t i = 0; i < batch.size(); ++i) {
      const step::BatchToken& e = batch[i];
      GA_CHECK(e.token >= 0 && e.token < n_vocab, InvalidArgument, "token id ", e.token, " at index ", i,
               " is outside the vocabulary [0, ", n_vocab, ")");
      GA_CHECK(e.seq >= 0 && static_cast<size_t>(e.seq) < block_tables.size(), InvalidArgument, "batch entry ", i,
               " names sequence ", e.seq, " of ", block_tables.size());
      const int64_t n_pos =
          static_cast<int64_t>(block_tables[static_cast<size_t>(e.seq)].size()) * pool_kv.block_size();
      GA_CHECK(e.pos >= 0 && e.pos < n_pos, OutOfRange, "batch entry ", i, " at position ", e.pos,
               " is outside its sequence's ", n_pos, " cached positions");
    }
  }

  // A recurrent state holds one position: each sequence's run must start at 0 or where its state stands, a
  // sequence appears in one run per step, and two sequences never share a first block (the slots).
  void validate_recurrent(std::span<const step::BatchToken> batch, std::span<const std::span<const int32_t>> block_tables,
                          KvPool& pool_kv) const {
    std::vector<int64_t> seen;
    for (size_t i = 0; i < batch.size(); ++i) {
      const step::BatchToken& e = batch[i];
      if (i > 0 && batch[i - 1].seq == e.seq) {
        GA_CHECK(e.pos == batch[i - 1].pos + 1, InvalidArgument, "batch entry ", i, ": a recurrent model's run must be at consecutive positions");
        continue;
      }
      GA_CHECK(e.seq >= 0 && static_cast<size_t>(e.seq) < block_tables.size() &&
                   !block_tables[static_cast<size_t>(e.seq)].empty(),
               InvalidArgument, "batch entry ", i, " names sequence ", e.seq, " without blocks");
      const int64_t block = block_tables[static_cast<size_t>(e.seq)][0];
      GA_CHECK(std::find(seen.begin(), seen.end(), block) == seen.end(), InvalidArgument, "batch entry ", i,
               ": two runs in one step share the recurrent state of block ", block);
      seen.push_back(block);
      GA_CHECK(block >= 0 && block < pool_kv.n_blocks(), InvalidArgument, "block ", block, " outside the pool");
      const int64_t at = pool_kv.recurrent_pos(block);
      GA_CHECK(e.pos == 0 || e.pos == at, InvalidArgument, "sequence ", e.seq, " continues at position ", e.pos,
               " but its recurrent state stands at ", at, " (a recurrent state cannot go back; start again from 0)");
      pool_kv.recurrent(0, block);  // allocated before any work, so an OutOfMemory changes nothing
    }
  }

  // A context-parallel rank's step: ids, the pool's shape and every row checked before any work.
  void run_context(std::span<const step::BatchToken> batch, const ContextStep& step, KvPool& pool_kv, float* logits) {
    GA_CHECK(state_spec.recurrent.empty(), Unsupported, "context parallelism shards the KV cache by position; ",
             model->config.arch, " keeps a recurrent state, which cannot be sharded by position");
    GA_CHECK(step.transport != nullptr, InvalidArgument, "a context-parallel step needs its group's transport");
    GA_CHECK(pool_kv.matches(state_spec) && pool_kv.n_blocks() == 1, InvalidArgument,
             "a context-parallel rank's pool must be one block of the model's layers");
    n = static_cast<int64_t>(batch.size());
    GA_CHECK(n > 0 && step.kv_rows.size() == batch.size(), InvalidArgument, "a context-parallel step of ", n,
             " tokens with ", step.kv_rows.size(), " cache rows");
    const int64_t capacity = pool_kv.block_size();
    const int64_t rows_used = static_cast<int64_t>(step.kv_pos.size());
    GA_CHECK(rows_used <= capacity, OutOfRange, "a context-parallel shard of ", rows_used,
             " rows in a pool of ", capacity);
    for (size_t i = 0; i < batch.size(); ++i) {
      const step::BatchToken& e = batch[i];
      GA_CHECK(e.token >= 0 && e.token < model->config.n_vocab, InvalidArgument, "token id ", e.token, " at index ",
               i, " is outside the vocabulary [0, ", model->config.n_vocab, ")");
      const int64_t row = step.kv_rows[i];
      GA_CHECK(row >= -1 && row < rows_used && (row < 0 || step.kv_pos[static_cast<size_t>(row)] == e.pos),
               InvalidArgument, "batch entry ", i, " at position ", e.pos, " names cache row ", row, " of ",
               rows_used);
    }
    static constexpr int32_t kOneBlock[1] = {0};
    begin_step(batch, pool_kv, [&](int64_t t, const step::BatchToken&) {
      tables[static_cast<size_t>(t)] = kOneBlock;
      const int64_t row = step.kv_rows[static_cast<size_t>(t)];
      return row < 0 ? kNoRow : static_cast<uint64_t>(row);
    });
    context = &step;
    run_program(pool_kv, logits);
  }

  void run(std::span<const step::BatchToken> batch, std::span<const std::span<const int32_t>> block_tables,
           KvPool& pool_kv, float* logits) {
    n = static_cast<int64_t>(batch.size());
    GA_CHECK(n > 0, InvalidArgument, "a forward batch needs at least one token");
    validate(batch, block_tables, pool_kv);
    const int64_t bs = pool_kv.block_size();
    begin_step(batch, pool_kv, [&](int64_t t, const step::BatchToken& e) {
      const std::span<const int32_t> table = block_tables[static_cast<size_t>(e.seq)];
      tables[static_cast<size_t>(t)] = table.data();
      state_block[static_cast<size_t>(t)] = table.empty() ? 0 : table[0];
      return static_cast<uint64_t>(table[static_cast<size_t>(e.pos / bs)] * bs + e.pos % bs);
    });
    context = nullptr;
    run_program(pool_kv, logits);
  }

  // The step's metadata; row_of(t, entry) sets the entry's table (and state block) and returns its cache row.
  template <typename RowOf>
  void begin_step(std::span<const step::BatchToken> batch, KvPool& pool_kv, const RowOf& row_of) {
    for (CpuBuffer& b : buffers) grow(b.data, n * b.cols);
    grow(ids, n);
    grow(positions, n);
    grow(tables, n);
    grow(kv_rows, n);
    grow(state_block, n);
    grow(run_start, n);
    logit_rows.clear();
    for (int64_t t = 0; t < n; ++t) {
      const step::BatchToken& e = batch[static_cast<size_t>(t)];
      ids[static_cast<size_t>(t)] = e.token;
      positions[static_cast<size_t>(t)] = e.pos;
      state_block[static_cast<size_t>(t)] = 0;
      kv_rows[static_cast<size_t>(t)] = row_of(t, e);
      if (e.logits) logit_rows.push_back(t);
      run_start[static_cast<size_t>(t)] = t == 0 || batch[static_cast<size_t>(t - 1)].seq != e.seq;
    }
    cache = &pool_kv;
  }

  void run_program(KvPool& pool_kv, float* logits) {
    logits_out = logits;
    ++step_serial;
    program->run(*this);
    if (!state_spec.recurrent.empty()) {
      for (int64_t t = 0; t < n; ++t) {
        if (run_end(t)) pool_kv.recurrent_pos(state_block[static_cast<size_t>(t)]) = positions[static_cast<size_t>(t)] + 1;
      }
    }
    cache = nullptr;
    logits_out = nullptr;
    context = nullptr;
  }
};

StepEngine::StepEngine(const LoadedModel& model, const step::ProgramFactory& factory, ThreadPool* pool,
                       int64_t max_positions, dist::Transport* transport)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  GA_CHECK(model.config.shard.world == 1 || (transport != nullptr && transport->world_size() == model.config.shard.world &&
                                             transport->rank() == model.config.shard.rank),
           InvalidArgument, "rank ", model.config.shard.rank, " of a ", model.config.shard.world,
           "-rank tensor-parallel model needs its group's transport (as that rank)");
  m.model = &model;
  m.pool = pool;
  m.transport = transport;
  m.n_ctx = max_positions;
  m.state_spec = factory.state();
  m.program = factory.build(m);
}

StepEngine::~StepEngine() = default;
StepEngine::StepEngine(StepEngine&&) noexcept = default;
StepEngine& StepEngine::operator=(StepEngine&&) noexcept = default;

void StepEngine::forward(std::span<const step::BatchToken> batch,
                         std::span<const std::span<const int32_t>> block_tables, KvPool& kv, float* logits) {
  impl_->run(batch, block_tables, kv, logits);
}

void StepEngine::forward_context(std::span<const step::BatchToken> batch, const ContextStep& step, KvPool& kv,
                                 float* logits) {
  impl_->run_context(batch, step, kv, logits);
}

const step::StateSpec& StepEngine::state() const { return impl_->state_spec; }
int64_t StepEngine::n_vocab() const { return impl_->model->config.n_vocab; }
int64_t StepEngine::max_positions() const { return impl_->n_ctx; }

}  // namespace ga::cpu
