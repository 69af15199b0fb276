// Causal GQA attention over a per-sequence KV cache on the GPU: the prefill (many query tokens) and
// the decode (one or a few query tokens over a long cache) of the engine's forward pass.
//
// Pure entry points (DESIGN.md): device pointers, explicit strides (in elements), a params struct,
// the stream last; never allocate (split-KV partials go to a caller-provided workspace sized by
// attention_workspace_bytes) and return the launch status. The CPU reference is
// ga::cpu::attention / paged_attention (backends/cpu/ops.h); tests/cuda/test_cuda_attention.cpp
// compares against it.
//
// Layouts:
//   q    [n_tokens][n_head][head_dim]        f32, q_token_stride floats between tokens (roped)
//   k, v [n_kv_positions][n_head_kv][head_dim] f16, kv_pos_stride halves between positions (or the FP8 cache:
//        E4M3 codes and per-(position, KV head) scales, AttentionParams::kv_dtype)
//   out  [n_tokens][n_head][head_dim]        f32, out_token_stride floats between tokens
// Query token t sits at position pos0 + t and attends to cache positions [0, pos0 + t] (causal);
// query head h reads KV head h / (n_head / n_head_kv). scores are scaled by `scale`
// (1/sqrt(head_dim) for Llama), softmax in f32.
// Sliding window (window_left >= 0; Mistral, Gemma 2/3, Phi-3): the token at position i attends to
// [max(0, i - window_left), i] only (FlashAttention-2's window_size = (window_left, 0); Hugging Face's
// sliding_window = W is window_left = W - 1). The kernels never read the keys below the window: the decode
// kernel's split-KV range starts at the run's window (its split count and workspace follow the window's
// length, not the cache's), and the prefill kernels skip the key tiles below it.
// Soft-capping (softcap > 0; Gemma 2): s = scale q.k, then s = softcap tanh(s / softcap), then the mask and
// the softmax. The same in the paged form, per run.
// pos0 may live in device memory (pos0_device) so a captured CUDA graph replays for every step.
//
// The multi-sequence paged form (block_table != nullptr; the Scheduler's batched step) computes the
// same thing for n_seqs runs of query tokens at once, each over its own sequence's keys in a pool of
// KV slots shared by all sequences (vLLM's paged attention with FlashAttention's varlen runs):
//   k, v   [n_kv_blocks * block_size][n_head_kv][head_dim] f16 slots, kv_pos_stride halves apart
//   run s  query tokens [seq_q_start[s], seq_q_start[s + 1]) of q/out; token i of the run sits at
//          position seq_pos0[s] + i and sees positions 0 .. seq_pos0[s] + i of sequence s, whose
//          position j lives in slot block_table[s * block_table_stride + j / block_size] * block_size
//          + j % block_size.
// One call handles a mixed batch: runs of <= 8 tokens (decode) take the split-KV decode kernel, longer
// runs (prompt chunks) the prefill kernel; a batch with both kinds costs two launches of one call.
// Launch order (PDL, kernels/pdl.cuh): the paged decode kernel starts while the kernel before it in the
// stream still runs and, before it waits for that kernel, reads seq_q_start, seq_pos0, block_table and
// the cache rows of positions below each run's seq_pos0 (its first tiles). Those must not be written by
// kernels of the same stream that may still be in flight (a chain of PDL launches): write them with
// host copies (the engine uploads the step's metadata with one copy per step) or in an earlier graph
// launch; the kernel right before may write q and the cache rows of the new tokens (positions seq_pos0
// onwards), which are read only after the wait.
// The device-side values cannot be checked on the host; they are clamped so a bad value gives a
// wrong answer, never a fault: run bounds to [0, n_tokens], seq_pos0 to [0, max_kv_positions -
// run length], block ids to [0, n_kv_blocks); a run longer than max_seq_tokens is skipped (its
// outputs stay unwritten).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ga::cuda {

struct AttentionParams {
  const float* q = nullptr;
  int64_t q_token_stride = 0;
  const __half* k = nullptr;
  const __half* v = nullptr;
  int64_t kv_pos_stride = 0;     // elements (halves or FP8 codes) between positions
  // The cache's element type. kFp8: E4M3 codes in k_fp8 / v_fp8 (same layout as k / v, kv_pos_stride codes apart;
  // k and v stay null) with a float scale per (position, KV head) in k_scale / v_scale ([positions][n_head_kv],
  // n_head_kv floats apart): a cached value is e4m3(code) * scale (backends/cpu/kv_pool.h). Head dims 64, 128, 256;
  // the prefill part runs on the mma.sync kernel (the Hopper flash kernel reads f16 only); decode_stages must be 0.
  enum class KvDType { kF16, kFp8 };
  KvDType kv_dtype = KvDType::kF16;
  const uint8_t* k_fp8 = nullptr;
  const uint8_t* v_fp8 = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  float* out = nullptr;
  int64_t out_token_stride = 0;
  int n_tokens = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;              // 64, 96, 128, 256 (attention_unsupported_reason lists them)
  int64_t pos0 = 0;              // used when pos0_device is null
  const int32_t* pos0_device = nullptr;  // device scalar: overrides pos0 (graph replay)
  int64_t max_kv_positions = 0;  // capacity of the cache: bounds the split-KV workspace
  float scale = 1.0f;
  int window_left = -1;   // -1: no sliding window; >= 0: keys at distance <= window_left before the query
  float softcap = 0.0f;   // 0: off; > 0: logits soft-capped at +-softcap (Gemma 2)
  // attention_workspace_bytes(params) bytes of device memory, ZERO-FILLED before the first call: it
  // holds the split-KV partials and the counters of their fused merge, which every call leaves at
  // zero again (so a workspace zeroed once serves every later call and batch size of the model).
  // Paged form: the counters sit at the start and the partials at the END of [workspace,
  // workspace + workspace_bytes), and the size for bounds (n_tokens, n_seqs, max_kv_positions) covers
  // every call within them, so one workspace sized for the largest batch serves every smaller one.
  // Do not share one workspace between the contiguous and the paged form (their layouts differ).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  // ---- multi-sequence paged form: used when block_table != nullptr (pos0 / pos0_device ignored) ----
  int n_seqs = 0;
  const int32_t* seq_q_start = nullptr;  // device [n_seqs + 1]; seq_q_start[0] == 0, seq_q_start[n_seqs] == n_tokens
  const int32_t* seq_pos0 = nullptr;     // device [n_seqs]: position of each run's first token
  const int32_t* block_table = nullptr;  // device [n_seqs][block_table_stride] physical block ids
  int64_t block_table_stride = 0;        // >= ceil(max_kv_positions / block_size)
  int block_size = 0;                    // positions per block, any value >= 1 (the engine uses 16)
  int64_t n_kv_blocks = 0;               // blocks in the pool (k / v hold n_kv_blocks * block_size slots)
  int max_seq_tokens = 0;                // host-known bound on the longest run (<= n_tokens): sizes the grids
  // max_kv_positions: host-known bound on every sequence's end (seq_pos0 + run length): sizes the
  // split-KV grid and attention_workspace_bytes().
  // Tuning: > 0 forces the decode split count (benchmarks); 0 chooses it from the SM count.
  int decode_splits = 0;
  // Tuning (benchmarks, tests): > 0 forces the cp.async stage count of the decode kernel; 0 takes the
  // default. 2 always exists; 3 only for the paged form at head_dim 128 in builds that compile it
  // (the default there, or CMake GA_ATTN_DECODE_VARIANTS=ON); attention_unsupported_reason says so.
  int decode_stages = 0;
  // How the split-KV decode combines its splits (paged form). kAuto: on sm_90 devices, a call of 2..8
  // splits whose grid fits in one wave of resident CTAs runs each (run, KV head, row tile)'s splits as
  // one thread-block cluster and merges them in distributed shared memory (no workspace round trip on
  // the tail of the call); elsewhere the last CTA to finish merges the partials through the workspace. kWorkspace /
  // kCluster force one (benchmarks, tests; kCluster is refused where it cannot run, with a reason).
  enum class DecodeMerge { kAuto, kWorkspace, kCluster };
  DecodeMerge decode_merge = DecodeMerge::kAuto;
  // Benchmarks only (paged decode): when set, device memory for 8 uint64 per decode CTA ([grid x * grid
  // y * grid z][8], x fastest) where each CTA records %globaltimer at its entry, after the wait for the
  // previous kernel, when its first tile has landed, after its last tile, at its exit, and its SM id and
  // tile count (attention_decode.cu); the benchmark turns them into the call's time budget.
  unsigned long long* decode_trace = nullptr;

  // ---- the prefill part on the Hopper flash kernel (kernels/flash, sm_90a; attention_hopper.cu) ----
  // With attention_prefill_staging_bytes(params) bytes of device memory here (nothing to zero; 256-byte
  // aligned), the runs of more than 8 tokens (all tokens in the contiguous form) run on the FlashAttention-3-
  // class kernel where attention_hopper_prefill_reason(params) is null: q is staged as f16 (the kernel's
  // operand type), the per-run lengths next to it, and the kernel writes out in f32 directly. Without staging,
  // or with prefill_kernel = kMmaSync, or where the Hopper kernel refuses (another GPU, a block_size it
  // cannot assemble tiles from), the mma.sync kernel (attention_prefill.cu) serves, as before.
  enum class PrefillKernel { kAuto, kMmaSync };
  void* prefill_staging = nullptr;
  size_t prefill_staging_bytes = 0;
  PrefillKernel prefill_kernel = PrefillKernel::kAuto;
};

const char* attention_unsupported_reason(const AttentionParams& p);
size_t attention_workspace_bytes(const AttentionParams& p);
// The split count along the KV range the decode launch of this call uses (1: no split, or no decode
// launch); for benchmarks and logs.
int attention_decode_splits(const AttentionParams& p);
// Whether the decode launch of this call merges its splits in a thread-block cluster
// (AttentionParams::decode_merge); for benchmarks, tests and logs.
bool attention_decode_merges_in_cluster(const AttentionParams& p);
cudaError_t attention(const AttentionParams& p, cudaStream_t stream);

// Bytes of AttentionParams::prefill_staging the Hopper prefill needs for these bounds (n_tokens, n_heads,
// head_dim, n_seqs): a buffer sized for the largest call serves every smaller one. 0 when the call has no
// prefill part.
size_t attention_prefill_staging_bytes(const AttentionParams& p);
// nullptr when attention() runs the prefill part of p on the Hopper flash kernel, else why it does not
// (no prefill part, staging missing, the device, the layout); for logs, tests and benchmarks.
const char* attention_hopper_prefill_reason(const AttentionParams& p);

}  // namespace ga::cuda
