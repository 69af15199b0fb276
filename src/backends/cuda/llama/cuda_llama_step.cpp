// CudaLlamaForward: one step of the forward pass on the stream, and eval() around it (see the header
// for the design). Every launcher's status goes through GA_CUDA_CHECK; launchers that can reject
// their parameters are asked why first, so an error names the op, the layer and the reason instead
// of a bare cudaErrorInvalidValue.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/llama/cuda_llama_forward.h"
#include "backends/cuda/llama/llama_kernels.h"
#include "gpu_accel/error.h"

namespace ga::cuda::llama {
namespace {

// Throws with the op's own reason when a launcher rejects its parameters.
template <class P>
void check_params(const char* op, const char* (*reason)(const P&), const P& p) {
  const char* why = reason(p);
  GA_CHECK(why == nullptr, Internal, "CUDA ", op, " rejected its parameters: ", why);
}

}  // namespace

void CudaLlamaForward::matmul(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy) {
  cudaStream_t s = stream_.get();
  if (n <= kGemvMaxTokens) {
    GemvParams g;
    g.type = w.type;
    g.w = w.data;
    g.rows = w.rows;
    g.cols = w.cols;
    g.row_stride = w.row_bytes;
    g.x = x;
    g.ldx = ldx;
    g.y = y;
    g.ldy = ldy;
    g.n_tokens = static_cast<int>(n);
    g.layout = w.layout;
    check_params("gemv", gemv_unsupported_reason, g);
    GA_CUDA_CHECK(gemv(g, s));
    return;
  }
  GemmParams p;
  p.rows = w.rows;
  p.k = w.cols;
  p.n = n;
  p.y = y;
  p.ldy = ldy;
  if (w.type == DType::F16 || w.type == DType::BF16 || w.type == DType::F32) {
    p.type = w.type;
    p.w = w.data;
  } else {
    // [rows][cols] f16 staging of the quantized matrix (first version of the quantized prefill).
    GA_CUDA_CHECK(dequantize_to_f16(w.type, w.data, w.rows, w.cols, w_stage_.as<__half>(), s, w.layout));
    p.type = DType::F16;
    p.w = w_stage_.data();
  }
  p.ldw = w.cols;
  if (p.type == DType::F32) {
    p.x = x;
    p.ldx = ldx;
  } else {
    GA_CUDA_CHECK(convert_rows(x, ldx, x_stage_.data(), w.cols, p.type, n, w.cols, s));  // [n][cols] f16/bf16
    p.x = x_stage_.data();
    p.ldx = w.cols;
  }
  gemm_->run(p);
}

void CudaLlamaForward::enqueue_attention(const DeviceLayer& L, int64_t n) {
  cudaStream_t s = stream_.get();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c_.head_dim)));
  AttentionParams ap;
  ap.q = qkv_.as<float>();  // the q slice of [n][q | k | v]
  ap.q_token_stride = ld_qkv_;
  ap.k = L.k_cache;
  ap.v = L.v_cache;
  ap.kv_pos_stride = kv_dim_;
  ap.out = attn_.as<float>();
  ap.out_token_stride = ld_q_;
  ap.n_tokens = static_cast<int>(n);
  ap.n_head = static_cast<int>(c_.n_head);
  ap.n_head_kv = static_cast<int>(c_.n_head_kv);
  ap.head_dim = static_cast<int>(c_.head_dim);
  ap.pos0_device = positions();  // positions()[0] is the step's first position
  ap.max_kv_positions = params_.n_ctx;
  ap.scale = scale;
  ap.workspace = attn_workspace_.data();
  ap.workspace_bytes = attn_workspace_bytes_;
  if (attention_unsupported_reason(ap) == nullptr && attention_workspace_bytes(ap) <= attn_workspace_bytes_) {
    GA_CUDA_CHECK(attention(ap, s));
    return;
  }
  // Shapes the tuned kernel does not instantiate (tiny heads of test models).
  SimpleAttentionParams sp;
  sp.q = ap.q;
  sp.q_stride = ld_qkv_;
  sp.k = L.k_cache;
  sp.v = L.v_cache;
  sp.out = ap.out;
  sp.out_stride = ld_q_;
  sp.n_tokens = ap.n_tokens;
  sp.n_head = ap.n_head;
  sp.n_head_kv = ap.n_head_kv;
  sp.head_dim = ap.head_dim;
  sp.pos0 = ap.pos0_device;
  sp.max_positions = params_.n_ctx;
  sp.scale = scale;
  check_params("attention", simple_attention_unsupported_reason, sp);
  GA_CUDA_CHECK(simple_attention(sp, s));
}

void CudaLlamaForward::enqueue_qkv_rope_store(const DeviceLayer& L, int64_t n) {
  QkvRopeStoreParams r;
  r.q = qkv_.as<float>();
  r.k = r.q + q_dim_;
  r.v = r.q + q_dim_ + kv_dim_;
  r.ld_q = ld_qkv_;
  r.ld_kv = ld_qkv_;
  r.bq = L.bq;
  r.bk = L.bk;
  r.bv = L.bv;
  r.k_cache = L.k_cache;
  r.v_cache = L.v_cache;
  r.positions = positions();
  r.n_tokens = n;
  r.n_head = static_cast<int>(c_.n_head);
  r.n_head_kv = static_cast<int>(c_.n_head_kv);
  r.head_dim = static_cast<int>(c_.head_dim);
  r.n_rot = static_cast<int>(c_.n_rot);
  r.neox = c_.rope_mode == RopeMode::NeoX;
  r.freq_base = c_.rope_freq_base;
  r.freq_scale = c_.rope_scaling.type == RopeScalingType::Linear ? 1.0f / c_.rope_scaling.factor : 1.0f;
  r.freq_factors = freq_factors_;
  check_params("qkv_rope_store", qkv_rope_store_unsupported_reason, r);
  GA_CUDA_CHECK(qkv_rope_store(r, stream_.get()));
}

void CudaLlamaForward::enqueue_layer(const DeviceLayer& L, int64_t n, bool first) {
  cudaStream_t s = stream_.get();
  const int64_t E = c_.n_embd;

  // h = rmsnorm(resid [+= tmp: the previous layer's FFN output]) * attn_norm      [n][n_embd]
  RmsNormParams norm;
  norm.x = first ? resid_.as<float>() : tmp_.as<float>();
  norm.residual = first ? nullptr : resid_.as<float>();
  norm.weight = L.attn_norm;
  norm.out = xn_.as<float>();
  norm.n_rows = n;
  norm.n = E;
  norm.ldx = ld_embd_;
  norm.ld_residual = ld_embd_;
  norm.ld_out = ld_embd_;
  norm.eps = c_.rms_eps;
  check_params("rms_norm", rms_norm_unsupported_reason, norm);
  GA_CUDA_CHECK(rms_norm(norm, s));

  // [n][q | k | v]: one GEMV over the fused matrix, or three into the same slices.
  float* const qkv = qkv_.as<float>();
  if (L.wqkv.rows > 0) {
    matmul(L.wqkv, xn_.as<float>(), ld_embd_, n, qkv, ld_qkv_);
  } else {
    matmul(L.wq, xn_.as<float>(), ld_embd_, n, qkv, ld_qkv_);                     // [n][n_head][head_dim]
    matmul(L.wk, xn_.as<float>(), ld_embd_, n, qkv + q_dim_, ld_qkv_);            // [n][n_head_kv][head_dim]
    matmul(L.wv, xn_.as<float>(), ld_embd_, n, qkv + q_dim_ + kv_dim_, ld_qkv_);
  }
  enqueue_qkv_rope_store(L, n);
  enqueue_attention(L, n);                                                   // [n][n_head][head_dim]
  matmul(L.wo, attn_.as<float>(), ld_q_, n, tmp_.as<float>(), ld_embd_);  // [n][n_embd]

  // h = rmsnorm(resid += tmp) * ffn_norm; tmp = W_down (silu(W_gate h) * W_up h)
  norm.x = tmp_.as<float>();
  norm.residual = resid_.as<float>();
  norm.weight = L.ffn_norm;
  GA_CUDA_CHECK(rms_norm(norm, s));
  float* const gate = gu_.as<float>();  // [n][gate | up], gate [n_ff] then up [n_ff]
  if (L.w_gate_up.rows > 0) {
    matmul(L.w_gate_up, xn_.as<float>(), ld_embd_, n, gate, ld_gu_);
  } else {
    matmul(L.w_gate, xn_.as<float>(), ld_embd_, n, gate, ld_gu_);
    matmul(L.w_up, xn_.as<float>(), ld_embd_, n, gate + c_.n_ff, ld_gu_);
  }
  SwigluParams sw;
  sw.gate = gate;
  sw.up = gate + c_.n_ff;
  sw.out = gate;  // in place: the down projection reads the gate slice
  sw.n_rows = n;
  sw.n = c_.n_ff;
  sw.ld_gate = ld_gu_;
  sw.ld_up = ld_gu_;
  sw.ld_out = ld_gu_;
  check_params("swiglu", swiglu_unsupported_reason, sw);
  GA_CUDA_CHECK(swiglu(sw, s));
  matmul(L.w_down, gate, ld_gu_, n, tmp_.as<float>(), ld_embd_);  // [n][n_embd]
}

void CudaLlamaForward::enqueue_step(int64_t n, bool all_logits) {
  cudaStream_t s = stream_.get();
  EmbeddingParams emb;
  emb.type = token_embd_.type;
  emb.w = token_embd_.data;
  emb.n_rows_w = token_embd_.rows;
  emb.n_cols = token_embd_.cols;
  emb.row_stride = token_embd_.row_bytes;
  emb.ids = ids();
  emb.n_ids = n;
  emb.out = resid_.as<float>();  // [n][n_embd]
  emb.ld_out = ld_embd_;
  emb.layout = token_embd_.layout;
  check_params("embedding", embedding_unsupported_reason, emb);
  GA_CUDA_CHECK(embedding(emb, s));

  for (size_t il = 0; il < layers_.size(); ++il) enqueue_layer(layers_[il], n, il == 0);

  // Final norm of the rows whose logits are wanted (resid += tmp for those rows only), then the classifier.
  const int64_t first_row = all_logits ? 0 : n - 1;
  const int64_t n_out = n - first_row;
  RmsNormParams norm;
  norm.x = tmp_.as<float>() + first_row * ld_embd_;
  norm.residual = resid_.as<float>() + first_row * ld_embd_;
  norm.weight = output_norm_;
  norm.out = xn_.as<float>();
  norm.n_rows = n_out;
  norm.n = c_.n_embd;
  norm.ldx = ld_embd_;
  norm.ld_residual = ld_embd_;
  norm.ld_out = ld_embd_;
  norm.eps = c_.rms_eps;
  check_params("rms_norm", rms_norm_unsupported_reason, norm);
  GA_CUDA_CHECK(rms_norm(norm, s));
  matmul(output_, xn_.as<float>(), ld_embd_, n_out, logits_.as<float>(), c_.n_vocab);  // [n_out][n_vocab]
}

void CudaLlamaForward::destroy_graph() noexcept {
  if (graph_exec_ != nullptr) (void)cudaGraphExecDestroy(graph_exec_);
  if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
  graph_exec_ = nullptr;
  graph_ = nullptr;
}

void CudaLlamaForward::decode_with_graph() {
  cudaStream_t s = stream_.get();
  if (graph_exec_ == nullptr) {
    GA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue_step(1, false);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(s, &broken);  // leave the stream usable
      if (broken != nullptr) (void)cudaGraphDestroy(broken);
      (void)cudaGetLastError();
      throw;
    }
    GA_CUDA_CHECK(cudaStreamEndCapture(s, &graph_));
    GA_CUDA_CHECK(cudaGraphInstantiate(&graph_exec_, graph_, 0));
  }
  GA_CUDA_CHECK(cudaGraphLaunch(graph_exec_, s));
}

void CudaLlamaForward::eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  GA_CHECK(n > 0, InvalidArgument, "eval needs at least one token");
  GA_CHECK(pos0 >= 0 && pos0 + n <= params_.n_ctx, OutOfRange, "context overflow: ", pos0, " positions used + ", n,
           " new tokens > n_ctx ", params_.n_ctx);
  for (int64_t i = 0; i < n; ++i) {  // all ids before any step, so a bad id changes nothing
    const int32_t id = tokens[static_cast<size_t>(i)];
    GA_CHECK(id >= 0 && id < c_.n_vocab, InvalidArgument, "token id ", id, " at index ", i,
             " is outside the vocabulary [0, ", c_.n_vocab, ")");
  }
  DeviceGuard guard(params_.device);
  cudaStream_t s = stream_.get();
  const int64_t B = params_.max_batch;
  for (int64_t done = 0; done < n;) {
    const int64_t step_n = std::min(B, n - done);
    const bool last_step = done + step_n == n;
    // ids then positions in one pinned buffer, one copy for both (the previous step's copy has
    // completed: every step ends with a synchronizing logits copy or an explicit sync). The copy
    // spans the unused tail of the ids: one small copy costs less than two.
    for (int64_t t = 0; t < step_n; ++t) {
      host_staging_[t] = tokens[static_cast<size_t>(done + t)];
      host_staging_[B + t] = static_cast<int32_t>(pos0 + done + t);
    }
    GA_CUDA_CHECK(cudaMemcpyAsync(step_in_.data(), host_staging_, static_cast<size_t>(B + step_n) * 4,
                                  cudaMemcpyHostToDevice, s));
    if (step_n == 1 && params_.use_cuda_graph) {
      decode_with_graph();
    } else {
      enqueue_step(step_n, all_logits);
    }
    if (all_logits) {
      GA_CUDA_CHECK(cudaMemcpyAsync(logits + done * c_.n_vocab, logits_.data(),
                                    static_cast<size_t>(step_n * c_.n_vocab) * 4, cudaMemcpyDeviceToHost, s));
    } else if (last_step) {
      GA_CUDA_CHECK(cudaMemcpyAsync(logits, logits_.data(), static_cast<size_t>(c_.n_vocab) * 4,
                                    cudaMemcpyDeviceToHost, s));
    }
    stream_.synchronize();  // the logits are the caller's now; kernel failures surface here
    done += step_n;
  }
}

}  // namespace ga::cuda::llama

namespace ga::cuda {

std::unique_ptr<CudaForward> make_cuda_llama_forward(const LoadedModel& model, const CudaForwardParams& params) {
  std::string reason;
  const int count = device_count(&reason);
  GA_CHECK(count > 0, Unsupported, "no CUDA device (", reason, ")");
  GA_CHECK(params.device >= 0 && params.device < count, InvalidArgument, "CUDA device ", params.device,
           " does not exist (", count, " devices)");
  return std::make_unique<llama::CudaLlamaForward>(model, params);
}

}  // namespace ga::cuda
