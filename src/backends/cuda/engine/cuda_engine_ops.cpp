// CudaEngine's ops: what the Program enqueues, one launcher each, for the step in shape_ (see the header).
//
// The int8 activations (cuda_forward.h, Int8Activations): the quantized GEMVs of the classic types and Q4_K
// read an int8 rounding of their input. An op that writes a projection's input may write that rounding in the
// same kernel when the Program names the matrices that read it (RmsNormOp::next, GluOp::next); the engine
// remembers which view xq_ holds the rounding of (xq_of_), and a later linear() of that view through a matrix
// that reads the rounding passes it. The attention's output has no producer that could round it, so its
// projection rounds it once in a pre-pass (kOnceFfnAndAttnO) instead of in every GEMV CTA. Any op that writes
// a buffer forgets a rounding of it (wrote()), so a stale rounding is never read. All of this decides only
// which kernels run: the GEMV's results are bit-identical with and without a pre-rounded x.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/engine/cuda_engine.h"
#include "backends/cuda/engine/engine_checks.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_simple.h"
#include "backends/cuda/kernels/elementwise.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/engine/engine_kernels.h"
#include "backends/cuda/moe_prefill.h"
#include "gpu_accel/error.h"

namespace ga::cuda::engine {
namespace {

bool same_view(step::View a, step::View b) {
  return a.buf.id == b.buf.id && a.col == b.col && a.cols == b.cols && static_cast<bool>(a);
}

}  // namespace

float* CudaEngine::ptr(step::View v, int64_t row) const {
  const BufferEntry& b = buffers_[static_cast<size_t>(v.buf.id)];
  return b.mem.as<float>() + row * b.ld + v.col;
}

void CudaEngine::check_view(step::View v, const char* op) const {
  GA_CHECK(v.buf.id >= 0 && v.buf.id < static_cast<int32_t>(buffers_.size()) && v.col >= 0 && v.cols > 0 &&
               v.col + v.cols <= buffers_[static_cast<size_t>(v.buf.id)].cols,
           Internal, op, ": view of columns [", v.col, ", ", v.col + v.cols, ") outside its buffer");
}

void CudaEngine::wrote(step::View v) {
  if (xq_of_.buf.id == v.buf.id) xq_of_ = step::View{};
  if (x8_of_.buf.id == v.buf.id) x8_of_ = step::View{};
  if (attn_out_.buf.id == v.buf.id) attn_out_ = step::View{};
}

std::vector<const DeviceMatrix*> CudaEngine::products(std::span<const step::Weight> ws) const {
  std::vector<const DeviceMatrix*> out;
  for (size_t i = 0; i < ws.size();) {
    if (!ws[i]) {
      ++i;
      continue;
    }
    const FusedRun* run = nullptr;
    for (const FusedRun& f : fused_) {
      if (f.first != ws[i].id || i + static_cast<size_t>(f.count) > ws.size()) continue;
      bool match = true;
      for (int32_t j = 0; j < f.count; ++j) match = match && ws[i + static_cast<size_t>(j)].id == f.members[static_cast<size_t>(j)];
      if (match && (run == nullptr || f.count > run->count)) run = &f;
    }
    if (run != nullptr) {
      out.push_back(&run->m);
      i += static_cast<size_t>(run->count);
    } else {
      out.push_back(&dm(ws[i]));
      ++i;
    }
  }
  return out;
}

void CudaEngine::embed(step::Weight table, step::View out, float scale) {
  if (warm_matmuls_only_) return;
  check_view(out, "embed");
  const DeviceMatrix& w = dm(table);
  GA_CHECK(w.cols == out.cols && w.n_expert == 1, Internal, "embed: table rows of ", w.cols, " into ", out.cols,
           " columns");
  cudaStream_t s = stream_.get();
  EmbeddingParams emb;
  emb.type = w.type;
  emb.w = w.data;
  emb.n_rows_w = w.rows;
  emb.n_cols = w.cols;
  emb.row_stride = w.row_bytes;
  emb.ids = ids();
  emb.n_ids = shape_->n_tokens;
  emb.out = ptr(out);  // [n][cols]
  emb.ld_out = ld(out);
  emb.layout = w.layout;
  check_params("embedding", embedding_unsupported_reason, emb);
  GA_CUDA_CHECK(embedding(emb, s));
  if (scale != 1.0f) GA_CUDA_CHECK(scale_rows(ptr(out), ld(out), shape_->n_tokens, out.cols, scale, s));
  wrote(out);
}

void CudaEngine::rms_norm(const step::RmsNormOp& op) {
  if (warm_matmuls_only_) return;
  check_view(op.x, "rms_norm");
  check_view(op.out, "rms_norm");
  GA_CHECK(vec_size(op.weight) == op.x.cols && op.out.cols == op.x.cols, Internal, "rms_norm: shapes");
  const int64_t n = shape_->n_tokens;
  RmsNormParams norm;
  norm.x = ptr(op.x);
  norm.residual = op.residual ? ptr(op.residual) : nullptr;
  norm.weight = dvec(op.weight);
  norm.out = ptr(op.out);
  norm.n_rows = n;
  norm.n = op.x.cols;
  norm.ldx = ld(op.x);
  norm.ld_residual = op.residual ? ld(op.residual) : 0;
  norm.ld_out = ld(op.out);
  norm.eps = op.eps;
  // the projections that read out take its rounding from this norm when one of them reads a rounded x
  bool round = false;
  for (const DeviceMatrix* m : products(op.next)) round = round || takes_x_int8(*m, n, Int8Activations::kOnceAll);
  if (round) {
    norm.out_int8 = xq_.data();
    if (rms_norm_unsupported_reason(norm) != nullptr) norm.out_int8 = nullptr;  // a width the fused rounding lacks
  }
  // and the FP8 GEMVs' two E4M3 digits, in place of run_gemv's pre-pass
  bool round8 = false;
  for (const DeviceMatrix* m : products(op.next)) round8 = round8 || takes_x_e4m3x2(*m, n);
  if (round8) {
    norm.out_e4m3x2 = x8_.data();
    if (rms_norm_unsupported_reason(norm) != nullptr) norm.out_e4m3x2 = nullptr;
  }
  check_params("rms_norm", rms_norm_unsupported_reason, norm);
  GA_CUDA_CHECK(ga::cuda::rms_norm(norm, stream_.get()));
  if (op.residual) wrote(op.residual);
  wrote(op.out);
  if (norm.out_int8 != nullptr) {
    xq_of_ = op.out;
    xq_from_ = Int8Activations::kOnceAll;
  }
  if (norm.out_e4m3x2 != nullptr) x8_of_ = op.out;
}

void CudaEngine::head_rms_norm(const step::HeadNormOp& op) {
  if (warm_matmuls_only_) return;
  check_view(op.x, "head_rms_norm");
  GA_CHECK(op.head_dim > 0 && op.x.cols % op.head_dim == 0 && vec_size(op.weight) == op.head_dim, Internal,
           "head_rms_norm: ", op.x.cols, " columns in heads of ", op.head_dim);
  HeadRmsNormParams p;
  p.x = ptr(op.x);
  p.ldx = ld(op.x);
  p.n_heads = op.x.cols / op.head_dim;
  p.weight = dvec(op.weight);
  if (op.x2) {
    check_view(op.x2, "head_rms_norm");
    GA_CHECK(op.x2.cols % op.head_dim == 0 && vec_size(op.weight2) == op.head_dim, Internal, "head_rms_norm: x2");
    p.x2 = ptr(op.x2);
    p.ldx2 = ld(op.x2);
    p.n_heads2 = op.x2.cols / op.head_dim;
    p.weight2 = dvec(op.weight2);
  }
  p.n_rows = shape_->n_tokens;
  p.head_dim = op.head_dim;
  p.eps = op.eps;
  check_params("head_rms_norm", head_rms_norm_unsupported_reason, p);
  GA_CUDA_CHECK(ga::cuda::head_rms_norm(p, stream_.get()));
  wrote(op.x);
  if (op.x2) wrote(op.x2);
}

void CudaEngine::linear(step::Weight w, step::View x, step::View y) {
  const step::Weight one[1] = {w};
  linear_concat(one, x, y);
}

void CudaEngine::linear_concat(std::span<const step::Weight> ws, step::View x, step::View y) {
  check_view(x, "linear");
  check_view(y, "linear");
  const int64_t n = shape_->n_tokens;
  int64_t col = 0;
  for (const DeviceMatrix* m : products(ws)) {
    GA_CHECK(m->n_expert == 1 && m->cols == x.cols && col + m->rows <= y.cols, Internal, "linear: a [", m->rows,
             " x ", m->cols, "] matrix from ", x.cols, " columns into columns [", col, ", ", col + m->rows, ") of ",
             y.cols);
    const void* x_int8 = nullptr;
    if (!warm_matmuls_only_) {
      if (same_view(xq_of_, x) && takes_x_int8(*m, n, xq_from_)) {
        x_int8 = xq_.data();
      } else if (same_view(attn_out_, x) && takes_x_int8(*m, n, Int8Activations::kOnceFfnAndAttnO)) {
        QuantizeXInt8Params q;  // rounded once, not in every GEMV CTA
        q.x = ptr(x);
        q.ldx = ld(x);
        q.cols = x.cols;
        q.n_tokens = n;
        q.out = xq_.data();
        check_params("quantize_x_int8", quantize_x_int8_unsupported_reason, q);
        GA_CUDA_CHECK(quantize_x_int8(q, stream_.get()));
        xq_of_ = x;
        xq_from_ = Int8Activations::kOnceFfnAndAttnO;
        x_int8 = xq_.data();
      }
    }
    matmul(*m, ptr(x), ld(x), n, ptr(y) + col, ld(y), x_int8, same_view(x8_of_, x));  // [n][rows]
    if (!warm_matmuls_only_ && takes_x_e4m3x2(*m, n)) x8_of_ = x;  // rounded by its producer or the pre-pass
    col += m->rows;
  }
  GA_CHECK(col == y.cols, Internal, "linear_concat: ", col, " rows into ", y.cols, " columns");
  wrote(y);
}

void CudaEngine::rope_kv(const step::RopeKvOp& op) {
  if (warm_matmuls_only_) return;
  for (const step::View v : {op.q, op.k, op.v}) check_view(v, "rope_kv");
  const KvLayer& kv = kv_layers_[static_cast<size_t>(op.kv.id)];
  const RopeEntry& r = ropes_[static_cast<size_t>(op.rope.id)];
  GA_CHECK(op.q.cols == op.n_head * op.head_dim && op.k.cols == op.n_head_kv * op.head_dim && op.v.cols == op.k.cols &&
               op.n_head_kv == kv.spec.n_head_kv && op.head_dim == kv.spec.head_dim && ld(op.k) == ld(op.v),
           Internal, "rope_kv: shapes");
  engine::QkvRopeStoreParams p;
  p.q = ptr(op.q);
  p.k = ptr(op.k);
  p.v = ptr(op.v);
  p.ld_q = ld(op.q);
  p.ld_kv = ld(op.k);
  p.bq = op.bq ? dvec(op.bq) : nullptr;
  p.bk = op.bk ? dvec(op.bk) : nullptr;
  p.bv = op.bv ? dvec(op.bv) : nullptr;
  p.k_cache = kv.k;  // null for an FP8 cache, whose codes and scales follow
  p.v_cache = kv.v;
  p.k_codes = kv.k8;
  p.v_codes = kv.v8;
  p.k_scales = kv.k_scale;
  p.v_scales = kv.v_scale;
  p.positions = positions();
  // paged (and padded steps): the cache row is the slot, not the position; a pad row's slot is -1 (no store)
  p.slots = shape_->paged || shape_->pad_rows ? meta(off_slots()) : nullptr;
  p.n_tokens = shape_->n_tokens;
  p.n_head = static_cast<int>(op.n_head);
  p.n_head_kv = static_cast<int>(op.n_head_kv);
  p.head_dim = static_cast<int>(op.head_dim);
  p.n_rot = static_cast<int>(r.table.n_rot);
  p.neox = r.table.neox;
  p.inv_freq = r.inv_freq.as<double>();
  p.mscale = r.table.mscale;
  check_params("qkv_rope_store", engine::qkv_rope_store_unsupported_reason, p);
  GA_CUDA_CHECK(engine::qkv_rope_store(p, stream_.get()));
  wrote(op.q);
}

void CudaEngine::attention(const step::AttentionOp& op) {
  if (warm_matmuls_only_) return;
  check_view(op.q, "attention");
  check_view(op.out, "attention");
  const KvLayer& kv = kv_layers_[static_cast<size_t>(op.kv.id)];
  GA_CHECK(op.q.cols == op.n_head * op.head_dim && op.out.cols == op.q.cols && op.n_head_kv == kv.spec.n_head_kv &&
               op.head_dim == kv.spec.head_dim,
           Internal, "attention: shapes");
  cudaStream_t s = stream_.get();
  const AttentionParams ap = attention_params(op, kv, *shape_);
  if (attention_unsupported_reason(ap) == nullptr && attention_workspace_bytes(ap) <= attn_workspace_bytes_) {
    GA_CUDA_CHECK(ga::cuda::attention(ap, s));
  } else {
    // Shapes the tuned kernel does not instantiate (tiny heads of test models).
    SimpleAttentionParams sp;
    sp.q = ap.q;
    sp.q_stride = ap.q_token_stride;
    sp.k = kv.k;
    sp.v = kv.v;
    sp.k_fp8 = kv.k8;
    sp.v_fp8 = kv.v8;
    sp.k_scale = kv.k_scale;
    sp.v_scale = kv.v_scale;
    sp.out = ap.out;
    sp.out_stride = ap.out_token_stride;
    sp.n_tokens = ap.n_tokens;
    sp.n_head = ap.n_head;
    sp.n_head_kv = ap.n_head_kv;
    sp.head_dim = ap.head_dim;
    sp.scale = ap.scale;
    sp.window_left = static_cast<int>(op.window_left);
    sp.softcap = op.softcap;
    if (shape_->paged) {
      sp.n_seqs = shape_->n_seqs;
      sp.seq_q_start = ap.seq_q_start;
      sp.seq_pos0 = ap.seq_pos0;
      sp.block_table = ap.block_table;
      sp.block_table_stride = static_cast<int>(ap.block_table_stride);
      sp.block_size = ap.block_size;
      sp.max_positions = shape_->max_kv_positions;
    } else {
      sp.pos0 = ap.pos0_device;
      sp.max_positions = n_slots_;
    }
    check_params("attention", simple_attention_unsupported_reason, sp);
    GA_CUDA_CHECK(simple_attention(sp, s));
  }
  wrote(op.out);
  attn_out_ = op.out;
}

void CudaEngine::glu(const step::GluOp& op) {
  if (warm_matmuls_only_) return;
  for (const step::View v : {op.gate, op.up, op.out}) check_view(v, "glu");
  GA_CHECK(op.gate.cols == op.up.cols && op.out.cols == op.gate.cols, Internal, "glu: shapes");
  const int64_t n = shape_->n_tokens;
  SwigluParams sw;
  sw.gate = ptr(op.gate);
  sw.up = ptr(op.up);
  sw.out = ptr(op.out);
  sw.n_rows = n;
  sw.n = op.gate.cols;
  sw.ld_gate = ld(op.gate);
  sw.ld_up = ld(op.up);
  sw.ld_out = ld(op.out);
  sw.act = op.act == step::Activation::kGeluTanh ? GluActivation::kGeluTanh : GluActivation::kSilu;
  // a down projection that reads x rounded (Q8_0) takes it from here instead of rounding it in each of its CTAs;
  // the float out is written too (other paths, and the GEMM of longer steps)
  if (op.next && takes_x_int8(dm(op.next), n, Int8Activations::kOnceFfn)) {
    sw.out_int8 = xq_.data();
    if (swiglu_unsupported_reason(sw) != nullptr) sw.out_int8 = nullptr;
  }
  // an F8_B128 down projection (FP8 GEMV) takes its two E4M3 digits from here instead of a pre-pass
  if (op.next && sw.out_int8 == nullptr && takes_x_e4m3x2(dm(op.next), n)) {
    sw.out_e4m3x2 = x8_.data();
    if (swiglu_unsupported_reason(sw) != nullptr) sw.out_e4m3x2 = nullptr;
  }
  check_params("swiglu", swiglu_unsupported_reason, sw);
  GA_CUDA_CHECK(swiglu(sw, stream_.get()));
  wrote(op.out);
  if (sw.out_int8 != nullptr) {
    xq_of_ = op.out;
    xq_from_ = Int8Activations::kOnceFfn;
  }
  if (sw.out_e4m3x2 != nullptr) x8_of_ = op.out;
}

void CudaEngine::add(step::View x, step::View y) {
  if (warm_matmuls_only_) return;
  check_view(x, "add");
  check_view(y, "add");
  GA_CHECK(x.cols == y.cols, Internal, "add: ", x.cols, " and ", y.cols, " columns");
  GA_CUDA_CHECK(add_rows(ptr(x), ld(x), ptr(y), ld(y), shape_->n_tokens, x.cols, stream_.get()));
  wrote(x);
}

// Router (GEMV / GEMM on ffn_gate_inp), moe_route (ids, weights and the plan: the pairs grouped by expert),
// then the routed experts' FFN: for up to kMoeRouteFusedMaxTokens tokens (decode and small batches, what the
// graphs capture) the grouped expert GEMV, which reads only the routed experts' weights; for longer steps
// (prefill) the grouped GEMM or per-expert cuBLAS GEMMs on the gathered rows, as moe_prefill_grouped_ chose
// (moe_prefill.h; the per-expert path syncs with the host on the counts, so its prefill runs without graphs).
void CudaEngine::moe(const step::MoeOp& op) {
  check_view(op.x, "moe");
  check_view(op.out, "moe");
  const DeviceMatrix& router = dm(op.router);
  const DeviceMatrix& gate = dm(op.gate_exps);
  const DeviceMatrix& up = dm(op.up_exps);
  const DeviceMatrix& down = dm(op.down_exps);
  const int64_t n = shape_->n_tokens;
  GA_CHECK(router.n_expert == 1 && router.rows == op.n_expert && router.cols == op.x.cols &&
               gate.n_expert == op.n_expert && up.n_expert == op.n_expert && down.n_expert == op.n_expert &&
               gate.cols == op.x.cols && down.rows == op.out.cols && op.n_expert <= moe_max_experts_ &&
               op.top_k <= moe_max_top_k_,
           Internal, "moe: shapes");
  matmul(router, ptr(op.x), ld(op.x), n, moe_logits_.as<float>(), op.n_expert);  // [n][n_expert]
  if (warm_matmuls_only_) return;
  cudaStream_t s = stream_.get();
  MoeShape shape;
  shape.n_tokens = n;
  shape.n_expert = static_cast<int>(op.n_expert);
  shape.top_k = static_cast<int>(op.top_k);
  MoeRouteParams route;
  route.shape = shape;
  route.logits = moe_logits_.as<float>();
  route.ld_logits = op.n_expert;
  route.normalize = op.normalize_top_k;
  route.ids = moe_ids_.as<int32_t>();
  route.weights = moe_weights_.as<float>();
  route.plan = moe_plan_.data();
  check_params("moe_route", moe_route_unsupported_reason, route);
  GA_CUDA_CHECK(moe_route(route, s));
  const auto experts = [](const DeviceMatrix& m) {
    MoeExperts e;
    e.type = m.type;
    e.data = m.data;
    e.rows = m.rows;
    e.cols = m.cols;
    e.row_stride = m.row_bytes;
    e.expert_stride = m.rows * m.row_bytes;
    return e;
  };
  const MoeActivation act = op.act == step::Activation::kGeluTanh ? MoeActivation::kGeluTanh : MoeActivation::kSilu;
  // The decode and prefill paths take the same routed problem; only their workspaces differ.
  const auto routed_problem = [&](auto& f) {
    f.shape = shape;
    f.plan = moe_plan_.data();
    f.ids = moe_ids_.as<int32_t>();
    f.weights = moe_weights_.as<float>();
    f.gate = experts(gate);
    f.up = experts(up);
    f.down = experts(down);
    f.x = ptr(op.x);
    f.ldx = ld(op.x);
    f.out = ptr(op.out);
    f.ld_out = ld(op.out);
    f.act = act;
  };
  if (n <= kMoeRouteFusedMaxTokens) {
    MoeFfnGemvParams f;
    routed_problem(f);
    f.workspace = moe_gemv_workspace_.data();
    check_params("moe_ffn_gemv", moe_ffn_gemv_unsupported_reason, f);
    GA_CUDA_CHECK(moe_ffn_gemv(f, s));
  } else {
    MoePrefillParams f;
    routed_problem(f);
    f.workspace = moe_prefill_workspace_.data();
    f.workspace_bytes = static_cast<int64_t>(moe_prefill_workspace_.size());
    if (moe_prefill_grouped_) {
      check_params("moe_prefill_graph", moe_prefill_graph_unsupported_reason, f);
      GA_CUDA_CHECK(moe_prefill_graph(f, s));
    } else {
      moe_prefill_host_sync(*gemm_, f);
    }
  }
  wrote(op.out);
}

// Only a sharded model's Program calls it, and the constructor refuses those: one GPU holds the whole model.
void CudaEngine::all_reduce(step::View x) { check_view(x, "all_reduce"); }

void CudaEngine::sigmoid_gate(step::View y, step::Vec gate, step::View x) {
  if (warm_matmuls_only_) return;
  check_view(y, "sigmoid_gate");
  check_view(x, "sigmoid_gate");
  GA_CHECK(vec_size(gate) == x.cols, Internal, "sigmoid_gate: gate of ", vec_size(gate), " for ", x.cols, " columns");
  GA_CUDA_CHECK(sigmoid_gate_rows(ptr(y), ld(y), y.cols, dvec(gate), ptr(x), ld(x), x.cols, shape_->n_tokens,
                                  stream_.get()));
  wrote(y);
}

// Final norm (residual += x) of the rows whose logits are wanted, then the classifier over them. A contiguous
// range of rows is normalized alone; scattered rows (the last token of each prompt chunk among decode tokens)
// are normalized with the rest, then gathered into consecutive rows so the classifier is one product over
// [n_logits][n_embd].
void CudaEngine::logits(const step::LogitsOp& op) {
  const StepShape& shape = *shape_;
  if (shape.n_logits == 0) return;  // a step of prompt chunks that do not end yet: K/V only
  check_view(op.x, "logits");
  const DeviceMatrix& out = dm(op.output);
  const int64_t E = op.x.cols;
  GA_CHECK(E == c_.n_embd && out.cols == E && out.rows == n_vocab_ && vec_size(op.norm) == E, Internal,
           "logits: a classifier [", out.rows, " x ", out.cols, "] for ", E, " columns");
  cudaStream_t s = stream_.get();
  const bool gather = shape.gather_logits;
  const float* classifier_in = final_x_.as<float>();
  void* out_int8 = nullptr;
  if (!warm_matmuls_only_) {
    const int64_t first_row = gather ? 0 : shape.first_logit_row;
    const int64_t n_rows = gather ? shape.n_tokens : shape.n_logits;
    if (op.norm_bias) {  // a LayerNorm with bias (RWKV's ln_out): residual += x apart, no int8 rounding fused
      GA_CHECK(vec_size(op.norm_bias) == E, Internal, "logits: a norm bias of ", vec_size(op.norm_bias), " for ", E,
               " columns");
      const float* in = ptr(op.x, first_row);
      int64_t ld_in = ld(op.x);
      if (op.residual) {
        check_view(op.residual, "logits");
        GA_CUDA_CHECK(add_rows(ptr(op.residual, first_row), ld(op.residual), in, ld_in, n_rows, E, s));
        in = ptr(op.residual, first_row);
        ld_in = ld(op.residual);
      }
      GroupNormParams norm;
      norm.x = in;
      norm.ldx = ld_in;
      norm.out = final_x_.as<float>();
      norm.ld_out = ld_embd_;
      norm.weight = dvec(op.norm);
      norm.bias = dvec(op.norm_bias);
      norm.n_rows = n_rows;
      norm.n = E;
      norm.eps = op.eps;
      check_params("layer_norm", group_norm_unsupported_reason, norm);
      GA_CUDA_CHECK(group_norm_rows(norm, s));
    } else {
      RmsNormParams norm;
      norm.x = ptr(op.x, first_row);
      norm.residual = op.residual ? ptr(op.residual, first_row) : nullptr;
      norm.weight = dvec(op.norm);
      norm.out = final_x_.as<float>();
      norm.n_rows = n_rows;
      norm.n = E;
      norm.ldx = ld(op.x);
      norm.ld_residual = op.residual ? ld(op.residual) : 0;
      norm.ld_out = ld_embd_;
      norm.eps = op.eps;
      // the classifier reads these rows rounded once when they are its input as they stand (no gather)
      if (!gather && takes_x_int8(out, shape.n_logits, Int8Activations::kOnceAll)) {
        norm.out_int8 = xq_.data();
        if (rms_norm_unsupported_reason(norm) != nullptr) norm.out_int8 = nullptr;
      }
      out_int8 = norm.out_int8;
      check_params("rms_norm", rms_norm_unsupported_reason, norm);
      GA_CUDA_CHECK(ga::cuda::rms_norm(norm, s));
    }
    if (gather) {
      GA_CUDA_CHECK(engine::gather_rows(final_x_.as<float>(), ld_embd_, meta(off_logit_rows()), shape.n_logits, E,
                                       final_rows_.as<float>(), ld_embd_, s));
      classifier_in = final_rows_.as<float>();
    }
    if (op.residual) wrote(op.residual);
    xq_of_ = step::View{};  // xq_ holds the classifier's input now (or nothing a view names)
  }
  matmul(out, classifier_in, ld_embd_, shape.n_logits, logits_.as<float>(), n_vocab_,  // [n_logits][n_vocab]
         out_int8);
  if (op.softcap > 0.0f && !warm_matmuls_only_) {
    GA_CUDA_CHECK(softcap_rows(logits_.as<float>(), n_vocab_, shape.n_logits, n_vocab_, op.softcap, s));
  }
}

}  // namespace ga::cuda::engine
