// CudaLlamaForward: the Llama-family forward pass of one sequence on one GPU (internal header; the
// runtime sees it only through backends/cuda/cuda_forward.h).
//
// What lives on the device, allocated once at construction (after checking that it fits):
//   * the weights in their stored types: matrices as their GGUF bytes (quantized blocks untouched),
//     1-D norms and biases as f32; one buffer, every tensor 256-byte aligned;
//   * the KV cache, f16, per layer K and V of [n_ctx][n_head_kv][head_dim] (kernels/attention.h);
//   * scratch for max_batch tokens: the residual stream and every activation of a layer
//     ([max_batch][features] f32), the f16/bf16 staging of a GEMM's input, the f16 staging of one
//     dequantized weight matrix (prefill of quantized models), the logits and the attention workspace.
//
// One step (cuda_llama_step.cpp): embedding -> per layer [fused residual + RMSNorm, Q/K/V projection,
// fused bias + RoPE + f16 KV store, attention, output projection, fused residual + RMSNorm, gate/up
// projection, SwiGLU, down] -> final fused residual + RMSNorm -> classifier.
// Q, K and V (and gate and up) of a layer are uploaded back to back when they share type and width,
// so each pair/triple is ONE matrix and one GEMV launch: a decode step pays each kernel's launch
// gap and ramp-up/drain once per matrix, and small matrices (K, V of GQA models) reach far less of
// the memory bandwidth on their own than as part of a larger one. Projections of up to 8 tokens
// are the quantized GEMV (weights read once for all tokens), larger batches a cuBLAS GEMM.
// Token ids and positions are read from device buffers, so the one-token step is captured into a
// CUDA graph once and replayed for every position: a decode step is one host->device copy of
// (token, position), one graph launch and one device->host copy of the logits.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_forward.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/weight_layout.h"
#include "backends/cuda/stream.h"

namespace ga::cuda::llama {

// A weight matrix on the device: rows of `cols` weights of `type`, packed.
struct DeviceMatrix {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;
  WeightLayout layout = WeightLayout::kGguf;  // kSplitRows: repacked at upload for the GEMV (weight_layout.h)
};

struct DeviceLayer {
  const float* attn_norm = nullptr;  // [n_embd]
  const float* ffn_norm = nullptr;   // [n_embd]
  const float* bq = nullptr;         // [q_dim] or null
  const float* bk = nullptr;         // [kv_dim] or null
  const float* bv = nullptr;         // [kv_dim] or null
  DeviceMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  DeviceMatrix wqkv;       // wq, wk, wv as one [q_dim + 2 kv_dim][n_embd] matrix; rows 0: not fusable
  DeviceMatrix w_gate_up;  // w_gate, w_up as one [2 n_ff][n_embd] matrix; rows 0: not fusable
  __half* k_cache = nullptr;         // [n_ctx][n_head_kv][head_dim]
  __half* v_cache = nullptr;
};

class CudaLlamaForward final : public CudaForward {
 public:
  CudaLlamaForward(const LoadedModel& model, const CudaForwardParams& params);
  ~CudaLlamaForward() override;

  void eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits) override;
  int64_t n_ctx() const override { return params_.n_ctx; }
  int64_t n_vocab() const override { return c_.n_vocab; }
  std::string description() const override { return description_; }
  uint64_t device_bytes() const override { return device_bytes_; }

 private:
  struct Sizes;
  Sizes plan_sizes(const LoadedModel& model) const;
  void upload_weights(const LoadedModel& model);
  void allocate_state();

  // Enqueues one step over n tokens whose ids/positions are in step_in_; logits of the last
  // token (or of all n) land in logits_. pos0 is host-known only for the tuned attention's checks.
  void enqueue_step(int64_t n, bool all_logits);
  void enqueue_layer(const DeviceLayer& L, int64_t n, bool first);
  void enqueue_attention(const DeviceLayer& L, int64_t n);
  void enqueue_qkv_rope_store(const DeviceLayer& L, int64_t n);
  // y[n][w.rows] (ld ldy) = x[n][w.cols] (ld ldx) * W^T: GEMV for n <= 8, else GEMM.
  void matmul(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy);
  void decode_with_graph();
  void destroy_graph() noexcept;

  ModelConfig c_;
  CudaForwardParams params_;
  int64_t q_dim_ = 0, kv_dim_ = 0;
  int64_t ld_embd_ = 0, ld_q_ = 0, ld_qkv_ = 0, ld_gu_ = 0;  // row strides (floats) of the scratch, multiples of 4
  std::string description_;
  uint64_t device_bytes_ = 0;

  // Declaration order is destruction order reversed: buffers return to the allocator before it dies,
  // the cuBLAS handle goes before its stream.
  CachingAllocator allocator_;
  Stream stream_;
  std::unique_ptr<Gemm> gemm_;

  DeviceBuffer weights_;
  DeviceBuffer kv_;
  std::vector<DeviceLayer> layers_;
  DeviceMatrix token_embd_, output_;
  const float* output_norm_ = nullptr;
  const float* freq_factors_ = nullptr;  // [n_rot/2] or null: in weights_ or freq_buf_
  DeviceBuffer freq_buf_;

  // f32 activations, [max_batch][ld]. qkv_ rows are [q | k | v] (ld_qkv_), gu_ rows [gate | up] (ld_gu_):
  // the layouts the fused projections write, and what the separate ones write too.
  DeviceBuffer resid_, xn_, tmp_, qkv_, attn_, gu_;
  DeviceBuffer logits_;           // [max_batch][n_vocab]
  // int32 [2][max_batch]: ids, then positions, as host_staging_, so one copy per step fills both.
  DeviceBuffer step_in_;
  const int32_t* ids() const { return step_in_.as<int32_t>(); }
  const int32_t* positions() const { return step_in_.as<int32_t>() + params_.max_batch; }
  DeviceBuffer x_stage_;          // [max_batch][largest cols] f16/bf16: a GEMM's input
  DeviceBuffer w_stage_;          // f16 [largest quantized matrix]: dequantized weights of a GEMM
  DeviceBuffer attn_workspace_;
  size_t attn_workspace_bytes_ = 0;
  int32_t* host_staging_ = nullptr;  // pinned [2 * max_batch]: ids then positions

  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
};

}  // namespace ga::cuda::llama
