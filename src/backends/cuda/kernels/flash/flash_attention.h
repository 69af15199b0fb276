// FlashAttention forward on the GPU: the kernel-library entry point (issue 4 item 1).
//
// Pure entry point (DESIGN.md, FlashInfer's plan/run split): device pointers with explicit strides in
// elements, a params struct, the stream last; never allocates; returns a cudaError_t. flash_plan() sizes
// the workspace (none today: the forward keeps its softmax state in registers), and
// flash_unsupported_reason() says in a sentence why parameters are refused (the launcher then returns
// cudaErrorInvalidValue / cudaErrorNoKernelImageForDevice and touches nothing).
//
// Layouts (the caller picks the strides, so [b][s][h][d] "BSHD" and [b][h][s][d] "BHSD" both work):
//   q   [batch][seqlen_q][n_head][head_dim]     element (b, s, h, d) at b*q_batch_stride + s*q_seq_stride
//   k,v [batch][seqlen_k][n_head_kv][head_dim]      + h*q_head_stride + d (same for k, v, o)
//   o   [batch][seqlen_q][n_head][head_dim]     same dtype as q
//   lse [batch][n_head][seqlen_q]               f32, optional: natural log of sum_j exp(scale * q.k_j)
// Query head h reads KV head h / (n_head / n_head_kv) (GQA; MQA is n_head_kv = 1).
// Causal masks are bottom-right aligned as in FlashAttention: query i sees key j iff
// j <= i + seqlen_k - seqlen_q. A row that sees no key (causal, seqlen_q > seqlen_k) writes zeros and
// lse = -inf (the neutral element when merging partial results by LSE).
//
// FP8 (dtype kFp8E4m3, issue 4): q, k, v are e4m3 bytes (torch.float8_e4m3fn) with per-tensor dequantization
// scales: the kernel computes softmax(softmax_scale * descale_q * descale_k * Q K^T) V * descale_v in f32 from
// the raw e4m3 values, P rounded to e4m3 for the second GEMM (FA3's recipe), and writes o in out_dtype (bf16 or
// fp16). Head dims 128 and 256; q/k/v strides must be multiples of 16 elements (16 bytes). 8-bit wgmma needs
// V transposed: flash_plan sizes a workspace for V^T (batch * n_head_kv * head_dim * round_up(seqlen_k, 16)
// bytes) that flash_forward fills before the attention kernel, in the same stream.
//
// Implementation (kernels/flash/flash_fwd_sm90.cuh): Hopper only (sm_90a: TMA + wgmma + warp
// specialization). Other GPUs get a reason; the mma.sync prefill in kernels/attention*.cu serves them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ga::cuda {

enum class FlashDtype { kBf16, kF16, kFp8E4m3 };

struct FlashParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // optional [batch][n_head][seqlen_q]
  int64_t q_batch_stride = 0, q_seq_stride = 0, q_head_stride = 0;  // elements
  int64_t k_batch_stride = 0, k_seq_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_seq_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_seq_stride = 0, o_head_stride = 0;
  FlashDtype dtype = FlashDtype::kBf16;
  int head_dim = 0;  // 64, 128, 256
  int n_head = 0;
  int n_head_kv = 0;
  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
  bool causal = false;
  float softmax_scale = 0.0f;  // usually 1/sqrt(head_dim)
  // FP8 only (dtype kFp8E4m3): o's dtype (kBf16 or kF16) and the per-tensor dequantization scales
  // (real value = stored e4m3 value * descale); finite and > 0. Ignored for 16-bit inputs.
  FlashDtype out_dtype = FlashDtype::kBf16;
  float descale_q = 1.0f, descale_k = 1.0f, descale_v = 1.0f;
  // Variable-length batches (cumulative offsets, [batch + 1] int32 on the device): not supported yet,
  // must stay null (flash_unsupported_reason says so).
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
};

struct FlashPlan {
  size_t workspace_bytes = 0;
};

// nullptr when flash_forward can run these parameters on the current device, else why not.
const char* flash_unsupported_reason(const FlashParams& p);
FlashPlan flash_plan(const FlashParams& p);
// workspace: flash_plan(p).workspace_bytes bytes of device memory, 16-byte aligned (may be null when that is 0;
// FP8 needs it for V^T).
cudaError_t flash_forward(const FlashParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// flash_forward with an explicit kernel variant in [0, flash_variant_count()): consumer schedule
// (serial, intra-warpgroup overlap, overlap + ping-pong), persistent or not, K/V ring depth
// (kernels/flash/flash_fwd_launch.h lists them): for the tests and benchmarks that compare them.
int flash_variant_count();
// Whether this build compiled `variant` (the default build: only the ones flash_forward picks; configure
// with -DGA_FLASH_ALL_VARIANTS=ON for all). An uncompiled variant answers cudaErrorNotSupported.
bool flash_variant_compiled(int variant);
// The same for these parameters' dtype and head dim (FP8 compiles fewer variants: flash_fwd_fp8_hd*.cu).
bool flash_variant_compiled(const FlashParams& p, int variant);
cudaError_t flash_forward_with_schedule(const FlashParams& p, int sched, cudaStream_t stream);
// With a workspace (FP8 needs one: flash_plan); the 3-argument form passes none.
cudaError_t flash_forward_with_schedule(const FlashParams& p, int sched, void* workspace, size_t workspace_bytes,
                                        cudaStream_t stream);

// ---- backward: two kernels ----
//   Hopper (kernels/flash/flash_bwd_sm90.cuh, FA3's design: TMA, wgmma, warp specialization, dQ by bulk
//     add-reduce): sm_90a builds on compute capability 9.0, head dim 128; what flash_backward runs there.
//   mma.sync (kernels/flash/flash_bwd_sm80.cuh, FlashAttention-2's algorithm): any sm_80+ GPU, head dims 64, 128,
//     256; the fallback for everything else.
//
// Gradients of O = softmax(scale * Q K^T [+ causal mask]) V with respect to q, k, v, given dO and the
// forward's O and LSE (fwd.o and fwd.lse, both required: the backward recomputes P = exp(scale * q.k - lse)
// instead of storing it). Shapes and strides as in the forward; dq like q, dk/dv like k/v (one gradient
// per KV head: with GQA the group's query heads are summed into it). dq/dk/dv are fully written (rows that
// see no key get dq = 0; keys no query sees get dk = dv = 0).
struct FlashBwdParams {
  FlashParams fwd;  // q, k, v, o, lse (required), their strides, the shape, causal, softmax_scale
  const void* dout = nullptr;  // [batch][seqlen_q][n_head][head_dim], dtype
  int64_t do_batch_stride = 0, do_seq_stride = 0, do_head_stride = 0;
  void* dq = nullptr;  // [batch][seqlen_q][n_head][head_dim]
  int64_t dq_batch_stride = 0, dq_seq_stride = 0, dq_head_stride = 0;
  void* dk = nullptr;  // [batch][seqlen_k][n_head_kv][head_dim]
  int64_t dk_batch_stride = 0, dk_seq_stride = 0, dk_head_stride = 0;
  void* dv = nullptr;  // [batch][seqlen_k][n_head_kv][head_dim]
  int64_t dv_batch_stride = 0, dv_seq_stride = 0, dv_head_stride = 0;
};

// Which backward kernel runs: kAuto = Hopper where it applies, else mma.sync; the others force one (tests and
// benchmarks compare them; a forced kernel that cannot run these parameters is refused with a reason).
enum class FlashBwdKernel { kAuto, kMmaSync, kHopper };

// nullptr when flash_backward can run these parameters on the current device, else why not.
const char* flash_backward_unsupported_reason(const FlashBwdParams& p);
const char* flash_backward_unsupported_reason(const FlashBwdParams& p, FlashBwdKernel kernel);
// Workspace: the f32 dq accumulator (key blocks add into it), the row sums D = rowsum(dO * O) and, for the Hopper
// kernel, LSE * log2(e) with query rows padded to 64. Sized for whichever kernel runs (any FlashBwdKernel).
FlashPlan flash_backward_plan(const FlashBwdParams& p);
// workspace: at least flash_backward_plan(p).workspace_bytes bytes of device memory, 256-byte aligned.
cudaError_t flash_backward(const FlashBwdParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
cudaError_t flash_backward_with_kernel(const FlashBwdParams& p, FlashBwdKernel kernel, void* workspace,
                                       size_t workspace_bytes, cudaStream_t stream);

}  // namespace ga::cuda
