// A plain C surface over the attention kernels for the PyTorch comparison harness (compare.py loads
// this shared library with ctypes and passes torch tensors' device pointers). No allocation, no
// framework types: exactly the kernel-library entry points, flattened into C arguments.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/flash/flash_attention.h"
#include "backends/cuda/kernels/flash/flash_bwd_variants.h"

namespace {

ga::cuda::FlashParams flash_params(const void* q, const void* k, const void* v, void* o, float* lse,
                                   const int64_t* strides12, int dtype, int head_dim, int n_head, int n_head_kv,
                                   int batch, int seqlen_q, int seqlen_k, int causal, float scale) {
  ga::cuda::FlashParams p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = o;
  p.lse = lse;
  p.q_batch_stride = strides12[0];
  p.q_seq_stride = strides12[1];
  p.q_head_stride = strides12[2];
  p.k_batch_stride = strides12[3];
  p.k_seq_stride = strides12[4];
  p.k_head_stride = strides12[5];
  p.v_batch_stride = strides12[6];
  p.v_seq_stride = strides12[7];
  p.v_head_stride = strides12[8];
  p.o_batch_stride = strides12[9];
  p.o_seq_stride = strides12[10];
  p.o_head_stride = strides12[11];
  p.dtype = dtype == 0 ? ga::cuda::FlashDtype::kBf16 : ga::cuda::FlashDtype::kF16;
  p.head_dim = head_dim;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.causal = causal != 0;
  p.softmax_scale = scale;
  return p;
}

ga::cuda::AttentionParams mma_params(const float* q, const void* k, const void* v, float* out, void* workspace,
                                     size_t workspace_bytes, int n_tokens, int n_head, int n_head_kv, int head_dim,
                                     float scale) {
  ga::cuda::AttentionParams p;
  p.q = q;
  p.q_token_stride = int64_t{n_head} * head_dim;
  p.k = static_cast<const __half*>(k);
  p.v = static_cast<const __half*>(v);
  p.kv_pos_stride = int64_t{n_head_kv} * head_dim;
  p.out = out;
  p.out_token_stride = int64_t{n_head} * head_dim;
  p.n_tokens = n_tokens;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = head_dim;
  p.pos0 = 0;
  p.max_kv_positions = n_tokens;
  p.scale = scale;
  p.workspace = workspace;
  p.workspace_bytes = workspace_bytes;
  return p;
}

// The harness's name for "variant v with the causal query tiles handed out one head at a time" (the order before the
// L2-aware longest-first sections; FlashParams::causal_section_heads = 0), so compare.py can time both orders in one
// run: 1000 + v
// (999: the default variant). Returns the variant to run.
constexpr int kPerHeadOrderBase = 1000;
int take_tile_order(int sched, ga::cuda::FlashParams& p) {
  if (sched < kPerHeadOrderBase - 1) return sched;
  p.causal_section_heads = 0;
  return sched - kPerHeadOrderBase;
}

}  // namespace

extern "C" {

// strides12: q, k, v, o (batch, seq, head) strides in elements. dtype 0 = bf16, 1 = fp16.
// Returns nullptr when supported, else the reason.
const char* ga_flash_unsupported_reason(const void* q, const void* k, const void* v, void* o, float* lse,
                                        const int64_t* strides12, int dtype, int head_dim, int n_head, int n_head_kv,
                                        int batch, int seqlen_q, int seqlen_k, int causal, float scale) {
  return ga::cuda::flash_unsupported_reason(
      flash_params(q, k, v, o, lse, strides12, dtype, head_dim, n_head, n_head_kv, batch, seqlen_q, seqlen_k, causal,
                   scale));
}

// sched: -1 = the default variant, else 0 .. flash_variant_count() - 1 (flash_fwd_launch.h; 11 = kFlashSm80Variant,
// the mma.sync forward); 1000 + v: v with the per-head causal tile order (take_tile_order). Returns the cudaError_t.
int ga_flash_forward(const void* q, const void* k, const void* v, void* o, float* lse, const int64_t* strides12,
                     int dtype, int head_dim, int n_head, int n_head_kv, int batch, int seqlen_q, int seqlen_k,
                     int causal, float scale, int sched, void* stream) {
  ga::cuda::FlashParams p = flash_params(q, k, v, o, lse, strides12, dtype, head_dim, n_head, n_head_kv, batch,
                                         seqlen_q, seqlen_k, causal, scale);
  sched = take_tile_order(sched, p);
  const auto s = static_cast<cudaStream_t>(stream);
  return static_cast<int>(sched < 0 ? ga::cuda::flash_forward(p, nullptr, 0, s)
                                    : ga::cuda::flash_forward_with_schedule(p, sched, s));
}

// ga_flash_forward with the caller's workspace (16-bit: flash_plan's, which the split-tail variant 21 uses; the
// others ignore it). workspace_bytes 0 with a null workspace returns its size through *bytes_needed.
int ga_flash_forward_ws(const void* q, const void* k, const void* v, void* o, float* lse, const int64_t* strides12,
                        int dtype, int head_dim, int n_head, int n_head_kv, int batch, int seqlen_q, int seqlen_k,
                        int causal, float scale, int sched, void* workspace, size_t workspace_bytes,
                        size_t* bytes_needed, void* stream) {
  ga::cuda::FlashParams p = flash_params(q, k, v, o, lse, strides12, dtype, head_dim, n_head, n_head_kv, batch,
                                         seqlen_q, seqlen_k, causal, scale);
  sched = take_tile_order(sched, p);
  if (bytes_needed != nullptr) *bytes_needed = ga::cuda::flash_plan(p).workspace_bytes;
  if (workspace == nullptr && workspace_bytes == 0 && bytes_needed != nullptr) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  return static_cast<int>(sched < 0 ? ga::cuda::flash_forward(p, workspace, workspace_bytes, s)
                                    : ga::cuda::flash_forward_with_schedule(p, sched, workspace, workspace_bytes, s));
}

// FP8 e4m3 forward: q, k, v e4m3 bytes (strides12 in elements = bytes, multiples of 16), o bf16 (out_dtype 0)
// or fp16 (1), per-tensor descales. workspace_bytes 0 with a null workspace asks for the V^T workspace size
// (returned through *bytes_needed, with cudaSuccess). sched -1 = the default FP8 variant; -2 = only the V^T
// pre-pass (flash_fp8_transpose_v), to time its share; 1000 + v: v with the per-head causal tile order.
int ga_flash_forward_fp8(const void* q, const void* k, const void* v, void* o, float* lse, const int64_t* strides12,
                         int out_dtype, int head_dim, int n_head, int n_head_kv, int batch, int seqlen_q,
                         int seqlen_k, int causal, float scale, float descale_q, float descale_k, float descale_v,
                         int sched, void* workspace, size_t workspace_bytes, size_t* bytes_needed, void* stream) {
  ga::cuda::FlashParams p = flash_params(q, k, v, o, lse, strides12, 0, head_dim, n_head, n_head_kv, batch, seqlen_q,
                                         seqlen_k, causal, scale);
  p.dtype = ga::cuda::FlashDtype::kFp8E4m3;
  p.out_dtype = out_dtype == 0 ? ga::cuda::FlashDtype::kBf16 : ga::cuda::FlashDtype::kF16;
  p.descale_q = descale_q;
  p.descale_k = descale_k;
  p.descale_v = descale_v;
  sched = take_tile_order(sched, p);
  if (ga::cuda::flash_unsupported_reason(p) != nullptr) return static_cast<int>(cudaErrorInvalidValue);
  if (bytes_needed != nullptr) *bytes_needed = ga::cuda::flash_plan(p).workspace_bytes;
  if (workspace == nullptr && workspace_bytes == 0) return 0;
  const auto st = static_cast<cudaStream_t>(stream);
  if (sched == -2) return static_cast<int>(ga::cuda::flash_fp8_transpose_v(p, workspace, workspace_bytes, st));
  return static_cast<int>(sched < 0 ? ga::cuda::flash_forward(p, workspace, workspace_bytes, st)
                                    : ga::cuda::flash_forward_with_schedule(p, sched, workspace, workspace_bytes, st));
}

// Which backward kernel ga_flash_backward runs (ga::cuda::FlashBwdKernel: 0 auto, 1 mma.sync, 2 Hopper; 10 + v: the
// Hopper kernel's schedule v, flash_bwd_variants.h), so the benchmark can time them all in one run. Process-wide: the
// benchmark is single-threaded.
static int g_bwd_kernel = 0;
void ga_flash_backward_set_kernel(int kernel) { g_bwd_kernel = kernel; }

// The backward (flash_backward): strides24 = q, k, v, o, dout, dq, dk, dv (batch, seq, head) strides in
// elements; lse is the forward's [batch][n_head][seqlen_q] f32. workspace_bytes 0 with a null workspace
// asks for the size (returned through *bytes_needed, with cudaSuccess).
int ga_flash_backward(const void* q, const void* k, const void* v, const void* o, float* lse, const void* dout,
                      void* dq, void* dk, void* dv, const int64_t* strides24, int dtype, int head_dim, int n_head,
                      int n_head_kv, int batch, int seqlen_q, int seqlen_k, int causal, float scale, void* workspace,
                      size_t workspace_bytes, size_t* bytes_needed, void* stream) {
  ga::cuda::FlashBwdParams p;
  p.fwd = flash_params(q, k, v, const_cast<void*>(o), lse, strides24, dtype, head_dim, n_head, n_head_kv, batch,
                       seqlen_q, seqlen_k, causal, scale);
  p.dout = dout;
  p.do_batch_stride = strides24[12];
  p.do_seq_stride = strides24[13];
  p.do_head_stride = strides24[14];
  p.dq = dq;
  p.dq_batch_stride = strides24[15];
  p.dq_seq_stride = strides24[16];
  p.dq_head_stride = strides24[17];
  p.dk = dk;
  p.dk_batch_stride = strides24[18];
  p.dk_seq_stride = strides24[19];
  p.dk_head_stride = strides24[20];
  p.dv = dv;
  p.dv_batch_stride = strides24[21];
  p.dv_seq_stride = strides24[22];
  p.dv_head_stride = strides24[23];
  const int variant = g_bwd_kernel >= 10 ? g_bwd_kernel - 10 : -1;
  const auto kernel =
      variant >= 0 ? ga::cuda::FlashBwdKernel::kHopper : static_cast<ga::cuda::FlashBwdKernel>(g_bwd_kernel);
  if (ga::cuda::flash_backward_unsupported_reason(p, kernel) != nullptr) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (bytes_needed != nullptr) *bytes_needed = ga::cuda::flash_backward_plan(p).workspace_bytes;
  if (workspace == nullptr && workspace_bytes == 0) return 0;
  const auto st = static_cast<cudaStream_t>(stream);
  if (variant >= 0) {
    return static_cast<int>(ga::cuda::flash_backward_hopper_variant(p, variant, workspace, workspace_bytes, st));
  }
  return static_cast<int>(ga::cuda::flash_backward_with_kernel(p, kernel, workspace, workspace_bytes, st));
}

// The existing mma.sync prefill (kernels/attention.h): one sequence, causal from position 0,
// q/out f32 [n_tokens][n_head][hd], k/v f16 [n_tokens][n_head_kv][hd].
size_t ga_mma_prefill_workspace_bytes(int n_tokens, int n_head, int n_head_kv, int head_dim) {
  return ga::cuda::attention_workspace_bytes(
      mma_params(nullptr, nullptr, nullptr, nullptr, nullptr, 0, n_tokens, n_head, n_head_kv, head_dim, 1.0f));
}

int ga_mma_prefill(const float* q, const void* k, const void* v, float* out, void* workspace, size_t workspace_bytes,
                   int n_tokens, int n_head, int n_head_kv, int head_dim, float scale, void* stream) {
  return static_cast<int>(ga::cuda::attention(mma_params(q, k, v, out, workspace, workspace_bytes, n_tokens, n_head,
                                                         n_head_kv, head_dim, scale),
                                              static_cast<cudaStream_t>(stream)));
}

}  // extern "C"
