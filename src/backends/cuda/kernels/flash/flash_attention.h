// FlashAttention forward and backward on the GPU: the kernel-library entry points.
//
// Pure entry point (DESIGN.md, FlashInfer's plan/run split): device pointers with explicit strides in
// elements, a params struct, the stream last; never allocates; returns a cudaError_t. flash_plan() sizes
// the workspace (FP8: V^T; 16-bit: a 16-byte tile counter, or the split tail's partials where that variant
// applies), and flash_unsupported_reason() says in a sentence why parameters are refused (the launcher then
// returns cudaErrorInvalidValue / cudaErrorNoKernelImageForDevice and touches nothing).
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
// Sliding windows (local attention) are FlashAttention-2's window_size = (window_left, window_right), in the
// same bottom-right coordinates: with i' = i + seqlen_k - seqlen_q, query i sees key j iff
// i' - window_left <= j <= i' + window_right, -1 meaning unbounded on that side; causal is window_right = 0.
// Hugging Face's sliding_window = W (Mistral, Gemma 2/3, Phi-3) is (W - 1, 0) with causal. Key tiles wholly
// outside a query tile's window are never loaded (the key-tile range of each query tile starts and ends at
// its window), only the tiles it straddles are masked. FP8 has windows at head dim 128 only (head dim 256 gets a
// reason: its kernel's registers are full).
// Soft-capping (softcap > 0, Gemma 2; FlashAttention-2's softcap): s = softmax_scale q.k, then
// s = softcap tanh(s / softcap), then the mask, then the softmax; the LSE is that of the capped scores. 16-bit
// inputs only (one kernel has the soft-cap code, flash_fwd_launch.h's 59; FP8 gets a reason).
// Head dim 96 (Phi-3) runs on the head dim 128 tiles of every kernel with the last 32 columns zero (the Hopper
// kernels' TMA boxes zero-fill them; the mma.sync ones keep 128-column shared-memory rows and step only 96 of
// them), so it costs what head dim 128 does.
//
// FP8 (dtype kFp8E4m3): q, k, v are e4m3 bytes (torch.float8_e4m3fn) with per-tensor dequantization
// scales: the kernel computes softmax(softmax_scale * descale_q * descale_k * Q K^T) V * descale_v in f32 from
// the raw e4m3 values, P rounded to e4m3 for the second GEMM (FA3's recipe), and writes o in out_dtype (bf16 or
// fp16). Head dims 128 and 256; q/k/v strides must be multiples of 16 elements (16 bytes). 8-bit wgmma needs
// V transposed: flash_plan sizes a workspace for V^T (batch * n_head_kv * head_dim * round_up(seqlen_k, 16)
// bytes, plus 16 for the persistent kernel's tile counter) that flash_forward fills before the attention kernel,
// in the same stream.
//
// Varlen and paged KV (cu_seqlens_q / block_table, below): FlashAttention's varlen API; 16-bit, Hopper kernel only.
//
// Implementations: kernels/flash/flash_fwd_sm90.cuh on Hopper (sm_90a: TMA + wgmma + warp specialization; the
// only one with FP8), kernels/flash/flash_fwd_sm80.cuh (FlashAttention-2 style mma.sync + ldmatrix + cp.async)
// on every other GPU of compute capability >= 8.0 (sm_80/86/89), bf16/fp16 dense batches with the same
// parameters and results (no varlen / paged KV / o_f32: those get a reason there); on Turing (compute capability
// 7.5) the same kernel built from sm_75 instructions only (register-staged loads, mma.sync m16n8k8, <= 64 KB of
// shared memory), fp16 only (bf16 gets a reason: Turing tensor cores have no bf16).
// flash_forward picks by device; the mma.sync ones also run on Hopper as variants kFlashSm80Variant and
// kFlashSm75Variant (tests, benchmarks). Older GPUs get a reason.
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
  int head_dim = 0;  // 64, 96, 128, 256 (FP8: 128, 256)
  int n_head = 0;
  int n_head_kv = 0;
  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
  bool causal = false;
  float softmax_scale = 0.0f;  // usually 1/sqrt(head_dim)
  // Sliding window (above): -1 = unbounded on that side. With causal, window_right must be -1 or 0.
  int window_left = -1, window_right = -1;
  float softcap = 0.0f;  // 0: off; > 0: logit soft-capping at +-softcap (above)
  // FP8 only (dtype kFp8E4m3): o's dtype (kBf16 or kF16) and the per-tensor dequantization scales
  // (real value = stored e4m3 value * descale); finite and > 0. Ignored for 16-bit inputs.
  FlashDtype out_dtype = FlashDtype::kBf16;
  float descale_q = 1.0f, descale_k = 1.0f, descale_v = 1.0f;
  // ---- variable-length batches (16-bit inputs; used when cu_seqlens_q != nullptr) ----
  // q and o are packed [total_q][n_head][head_dim] (batch strides ignored): sequence b owns rows
  // [cu_seqlens_q[b], cu_seqlens_q[b + 1]), and seqlen_q is a host-known bound on every sequence's query count
  // (it sizes the grid: rows past it are not computed). Keys come either packed like q (cu_seqlens_k, total_k
  // rows of k and v) or from a paged pool (block_table below). seqlen_k is a host-known bound on every
  // sequence's key count (it only picks the kernel variant). LSE is [n_head][total_q].
  // Causal stays bottom-right aligned per sequence. Device values are not checked on the host: a query row at
  // or past total_q is never written, keys outside the tensors read as zeros (TMA bounds), so bad offsets give
  // wrong answers, never faults.
  const int32_t* cu_seqlens_q = nullptr;  // device [batch + 1]
  const int32_t* cu_seqlens_k = nullptr;  // device [batch + 1]: packed keys (null when paged)
  const int32_t* seqused_q = nullptr;     // device [batch], optional: only the first seqused_q[b] queries of
                                          // sequence b are computed and written (their causal alignment too)
  const int32_t* seqused_k = nullptr;     // device [batch], optional (required when paged): sequence b's keys
                                          // are its first seqused_k[b] (else cu_seqlens_k[b + 1] - [b])
  int64_t total_q = 0;                    // rows of the packed q and o
  int64_t total_k = 0;                    // rows of the packed k and v (cu_seqlens_k form)
  // Paged KV (block_table != nullptr; needs cu_seqlens_q and seqused_k): k and v are pools of n_pages pages of
  // page_size positions, position j of sequence b at row block_table[b * block_table_stride + j / page_size] *
  // page_size + j % page_size (k_seq_stride / k_head_stride as usual; batch strides ignored). The producer
  // assembles each K/V tile from whole pages by TMA, so page_size must be a multiple of 8 that divides the key
  // tile (128 keys; 64 at head dim 256) or a multiple of it (flash_unsupported_reason says which).
  const int32_t* block_table = nullptr;   // device [batch][block_table_stride]
  int64_t block_table_stride = 0;         // >= ceil(seqlen_k / page_size)
  int page_size = 0;
  int64_t n_pages = 0;
  // 16-bit inputs: write o as f32 instead of q's dtype (the engine's activations); o strides in floats.
  bool o_f32 = false;
  // Causal only, Hopper kernel: the order in which query tiles are handed out. The heaviest query blocks (the last
  // ones, which see the most keys) go first within sections of this many consecutive (batch, head) pairs, so the
  // last tiles to start are the light ones and the SMs finish together (longest-processing-time first), while the
  // running CTAs share the K/V of one section in L2 (FlashAttention-3's L2-aware LPT order). -1 (any negative):
  // automatic (a section's K/V is about kCausalSectionL2Bytes); 0 or 1: one head at a time, heaviest first within
  // each head (the order before the sections: its last head's heaviest tile starts when little else is left). For
  // tests and benchmarks; other values than -1 change speed only, never results.
  int causal_section_heads = -1;
};

// The K/V bytes one causal section may cover (FlashParams::causal_section_heads): FA3's choice for the H100's 50 MB
// L2, whose two partitions each hold about half of it close to an SM.
inline constexpr int64_t kCausalSectionL2Bytes = int64_t{32} << 20;

struct FlashPlan {
  size_t workspace_bytes = 0;
};

// nullptr when flash_forward can run these parameters on the current device, else why not.
const char* flash_unsupported_reason(const FlashParams& p);
FlashPlan flash_plan(const FlashParams& p);
// workspace: flash_plan(p).workspace_bytes bytes of device memory, 16-byte aligned (may be null when that is 0;
// FP8 needs it for V^T; a 16-bit forward given none where flash_plan asks for one runs without the split tail and
// without dynamic tiles: the same results, at most a few % slower).
cudaError_t flash_forward(const FlashParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// flash_forward with an explicit kernel variant in [0, flash_variant_count()): 0-10 are the Hopper kernel's
// consumer schedule (serial, intra-warpgroup overlap, overlap + ping-pong; 7-10 FP8 only), persistent or not,
// K/V ring depth (kernels/flash/flash_fwd_launch.h lists them); kFlashSm80Variant (11, after them) is the
// mma.sync forward (any sm_80+ GPU, Hopper included; bf16/fp16); 12-17 (bf16/fp16, Hopper) are FlashAttention-3's
// wide key tiles and the lazy O rescale on the overlap schedule; kFlashSm75Variant (18) is the mma.sync
// forward's sm_75 build (any GPU of compute capability >= 7.5; fp16 only); 19-20 (bf16/fp16, Hopper, benchmark
// builds) keep Q in registers (head dim 128; other head dims run 1 / 4); 21 (bf16/fp16, Hopper) is 4 with the split
// tail (the last round of query tiles cut in key blocks between all CTAs and merged by LSE; head dim 128 dense
// non-causal, with flash_plan's workspace; otherwise it runs as 4); 24 (bf16/fp16, Hopper; the head dim 128
// non-causal default) is 21 with O written by TMA stores from shared memory (dense O of the input dtype, non-causal;
// otherwise it runs 21); 22, 23 are retired numbers (not compiled); 28-34 (FP8 e4m3, head dim 128) are the 224-key
// tile variants (29: the FP8 hd 128 default) and the candidates measured against it (flash_fwd_launch.h; 30, 31 retired); 55, 56
// (bf16/fp16, Hopper; 56 in benchmark builds) are 4 and 13 taking their tiles from a counter in flash_plan's workspace
// (dense batches; otherwise they run 4 / 13; 55 is the causal default at head dims 64 / 128 from 2k to 4k / 8k keys).
// For the tests and benchmarks that compare them.
inline constexpr int kFlashSm80Variant = 11;
inline constexpr int kFlashSm75Variant = 18;
int flash_variant_count();
// Whether this build compiled `variant` (the default build: only the ones flash_forward picks; configure
// with -DGA_FLASH_ALL_VARIANTS=ON for all). An uncompiled variant answers cudaErrorNotSupported.
bool flash_variant_compiled(int variant);
// The same for these parameters' dtype and head dim (FP8 compiles fewer variants: flash_fwd_fp8_hd*.cu).
bool flash_variant_compiled(const FlashParams& p, int variant);
// nullptr when flash_forward_with_schedule(p, variant, ...) can run on the current device, else why not (the
// parameters, an uncompiled variant, or the device: the Hopper variants need compute capability 9.0 and an
// sm_90a build, kFlashSm80Variant needs >= 8.0, kFlashSm75Variant >= 7.5 and fp16).
const char* flash_variant_unsupported_reason(const FlashParams& p, int variant);
cudaError_t flash_forward_with_schedule(const FlashParams& p, int sched, cudaStream_t stream);
// With a workspace (FP8 needs one: flash_plan); the 3-argument form passes none.
cudaError_t flash_forward_with_schedule(const FlashParams& p, int sched, void* workspace, size_t workspace_bytes,
                                        cudaStream_t stream);
// FP8 only: the forward's first step alone (V^T into the workspace, as flash_forward writes it), so a
// benchmark can tell the pre-pass's share of the FP8 time. Same checks and workspace as flash_forward.
cudaError_t flash_fp8_transpose_v(const FlashParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// ---- backward: two kernels ----
//   Hopper (kernels/flash/flash_bwd_sm90.cuh, FA3's design: TMA, wgmma, warp specialization, dQ by bulk
//     add-reduce): sm_90a builds on compute capability 9.0, head dim 128; what flash_backward runs there.
//   mma.sync (kernels/flash/flash_bwd_sm80.cuh, FlashAttention-2's algorithm): any sm_80+ GPU, head dims 64, 128,
//     256; the fallback for everything else, and the kernel of windowed or soft-capped calls (fwd.window_left /
//     window_right / softcap with the forward's semantics; the Hopper backward refuses them).
//
// Gradients of O = softmax(scale * Q K^T [+ causal mask]) V with respect to q, k, v, given dO and the
// forward's O and LSE (fwd.o and fwd.lse, both required: the backward recomputes P = exp(scale * q.k - lse)
// instead of storing it). Shapes and strides as in the forward; dq like q, dk/dv like k/v (one gradient
// per KV head: with GQA the group's query heads are summed into it). dq/dk/dv are fully written (rows that
// see no key get dq = 0; keys no query sees get dk = dv = 0).
struct FlashBwdParams {
  FlashParams fwd;  // q, k, v, o, lse (required), their strides, the shape, causal, window, softcap, softmax_scale
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
