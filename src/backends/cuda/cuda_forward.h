// The CUDA forward pass of any architecture, as the runtime sees it: no CUDA headers, no #ifdefs.
//
// ga_runtime (Session) links ga_cuda, never the other way round, so this header is the whole contract
// between them: it names only the public model types (LoadedModel's weight views), the step op vocabulary
// (backends/step_ops.h: the architecture's Program, which the CUDA engine runs by implementing the ops) and
// plain C++. A CUDA build implements it in backends/cuda/engine/, a build without CUDA answers "not
// available" from backends/cuda_stub/ (ErrorKind::Unsupported), so the Session selects a device with
// ordinary control flow. The architecture (its Program factory) comes from the model layer, which ga_cuda
// must not link.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/step_ops.h"
#include "gpu_accel/model.h"

namespace ga::cuda {

// A step's logits left in device memory (the GPU sampler reads them there: sampler_gpu.h):
// rows [n_rows][n_vocab], ld floats apart, written by work on `stream` (a cudaStream_t) that has
// completed when the call returns. Valid until the next call that evaluates tokens.
struct DeviceLogits {
  const float* data = nullptr;
  int64_t n_rows = 0;
  int64_t ld = 0;
  void* stream = nullptr;
};

// Where the int8 GEMV's activations are rounded for the projections of up to 8 tokens that read them
// (Q8_0 split-row matrices, GGUF-order Q4_0 and Q4_K: gemv_reads_x_int8; other types ignore it). The rounding
// is bit-identical in every mode; only the kernels that run differ
// (H200 runs of 2026-11-22; their logs are in git history under docs/results/).
enum class Int8Activations {
  kInGemv,           // each GEMV CTA rounds x itself; rows longer than 8192 weights (7B ffn_down) stay float
  kOnceFfn,          // SwiGLU also writes the down projection's rounded x, which reads it
  kOnceFfnAndAttnO,  // and a pre-pass kernel rounds the attention output once for the output projection
                     // (7B Q8_0 tg128 on an H200 308.7 / 324.0 / 326.7 tok/s in the three modes, same run)
  kOnceAll,          // and the RMSNorms round their output for the q/k/v, gate/up and classifier GEMVs on split
                     // rows (default; 7B Q8_0 tg128 334.6 vs 328.0 tok/s in mode 2, same run, H200)
};

// How a one-token decode step runs (docs/architecture.md, "The persistent decode kernel"):
enum class DecodeKernel {
  kPerOp,       // each step op its kernels, the step replayed as a CUDA graph (the reference path)
  kPersistent,  // one launch of the persistent decode kernel (backends/cuda/persistent/) where it covers the model
                // and the step (one sequence); elsewhere the per-op step, with the reason logged once.
                // GA_DECODE_KERNEL=persistent | per-op in the environment overrides the parameter.
};

// Prefill CUDA graphs (cuda_llama_step.cpp, "prefill graphs"): a lone prompt step of L tokens, 8 < L <= this bound,
// replays the graph captured for the GEMM bucket of L (backends/cuda/gemm.h: 16, 20, 24, ..., 448, 512) with the
// rows past L padded: ~200 kernel launches (16 layers of a 1B model) become one, which is what a short prefill
// is bound by. 0: never (every prefill enqueued kernel by kernel, as before). The graphs are captured by
// warm_up_matmuls() (or on first use).
inline constexpr int64_t kPrefillGraphMaxTokens = 512;

// What the prefill graphs cost and did (CudaForward / CudaBatchForward::prefill_graph_stats).
struct PrefillGraphStats {
  int64_t max_tokens = 0;        // the bound in force (0: off)
  int64_t captured = 0;          // graphs captured (one per bucket used or warmed)
  double capture_seconds = 0;    // host time of their captures, instantiations and uploads
  int64_t device_bytes = 0;      // device memory their instantiation took (cudaMemGetInfo around it; >= 0)
  int64_t replays = 0;           // prefill steps that replayed a graph
  int64_t padded_rows = 0;       // rows computed past the prompts' ends by those replays
};

struct CudaForwardParams {
  int device = 0;
  int64_t n_ctx = 0;         // positions the device KV cache holds
  DType kv_type = DType::F16;  // the KV cache: F16, or F8_E4M3 (codes + a float scale per position and KV head)
  int64_t max_batch = 512;   // tokens per internal step; longer evals are split (bounds scratch memory)
  bool use_cuda_graph = true;  // capture the one-token decode step once and replay it
  Int8Activations int8_activations = Int8Activations::kOnceAll;
  DecodeKernel decode_kernel = DecodeKernel::kPerOp;
  // Prefill steps (without all_logits) of up to this many tokens replay a graph per bucket; 0: off. Needs
  // use_cuda_graph. GA_PREFILL_GRAPHS=N in the environment overrides it (a diagnostic switch: A/B in one build).
  int64_t prefill_graph_max_tokens = kPrefillGraphMaxTokens;
};

// One sequence of a model on one GPU. Not thread-safe.
class CudaForward {
 public:
  virtual ~CudaForward() = default;
  // Same contract as arch::SequenceForward::eval: tokens at positions pos0 .. pos0+n-1; writes the last
  // token's logits ([n_vocab]) or every token's ([n][n_vocab]). Validates before any work.
  virtual void eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits) = 0;
  // eval() of the last token's logits without the copy to the host: the row stays on the device.
  virtual DeviceLogits eval_device(std::span<const int32_t> tokens, int64_t pos0) = 0;
  virtual int device() const = 0;
  virtual int64_t n_ctx() const = 0;
  virtual int64_t n_vocab() const = 0;
  // "cuda:0 NVIDIA H200 (sm_90), kernels sm_90a"-style description for logs.
  virtual std::string description() const = 0;
  virtual uint64_t device_bytes() const = 0;  // weights + KV cache + scratch held on the device
  // Runs every prefill matrix product of the model once per GEMM algorithm bucket up to the largest step
  // (backends/cuda/gemm.h), on the forward's scratch, so that every prompt length finds its algorithm
  // chosen and its kernel loaded. Touches neither the KV cache nor any state a later eval reads. Part of
  // the warm-up (Session::warm_up). Also captures the prefill graphs of every bucket (params'
  // prefill_graph_max_tokens), so no prompt pays a capture.
  virtual void warm_up_matmuls() = 0;
  virtual PrefillGraphStats prefill_graph_stats() const { return {}; }
};

// Uploads the weights (native types), allocates the KV cache and scratch and builds the architecture's
// Program (the factory need not outlive the call). Throws Unsupported for a build without CUDA, a missing
// device, a weight type or an op the CUDA kernels do not run, and OutOfMemory (with the byte counts) when the
// model and cache do not fit in free device memory.
std::unique_ptr<CudaForward> make_cuda_forward(const LoadedModel& model, const step::ProgramFactory& factory,
                                               const CudaForwardParams& params);

// ---- Many sequences over a paged KV pool (the Scheduler's engine) ----

// One entry of a batched step (backends/step_ops.h).
using BatchEntry = step::BatchToken;

struct CudaBatchForwardParams {
  int device = 0;
  int64_t block_size = 16;           // positions per KV block
  DType kv_type = DType::F16;        // the pool: F16 or F8_E4M3 (as CudaForwardParams::kv_type)
  // KV pool size in blocks; 0: as many as fit in kv_memory_fraction of the device memory left free
  // after the weights and the scratch, at most max_auto_blocks (0: no cap).
  int64_t n_blocks = 0;
  double kv_memory_fraction = 0.9;
  int64_t max_auto_blocks = 0;
  int64_t max_batch_tokens = 512;    // entries per forward() (sizes the scratch)
  int64_t max_seqs = 64;             // sequences per forward(); also bounds the logits rows
  int64_t max_seq_positions = 4096;  // positions one sequence may reach (sizes the block tables)
  bool use_cuda_graph = true;  // replay decode-only steps (n one-token runs) as graphs captured per n
  Int8Activations int8_activations = Int8Activations::kOnceAll;
  DecodeKernel decode_kernel = DecodeKernel::kPerOp;  // steps of one decoding sequence (as CudaForwardParams)
  // A step that is one prompt run alone (one sequence, one logits row; a lone request's prefill) of up to
  // this many tokens replays a graph per bucket; 0: off. As CudaForwardParams::prefill_graph_max_tokens.
  int64_t prefill_graph_max_tokens = kPrefillGraphMaxTokens;
};

// The forward pass of a batch of entries from many sequences over a paged f16 KV pool on one GPU:
// the CUDA twin of arch::BatchForward + cpu::KvPool (same batch/block-table contract), with
// the KV pool inside. Not thread-safe.
class CudaBatchForward {
 public:
  virtual ~CudaBatchForward() = default;
  // Stores every entry's K/V at its (seq, pos) slot of the pool, then each entry attends to
  // positions 0 .. pos of its sequence. The entries of one sequence must be consecutive and at
  // consecutive positions (a run: one decode token or a prompt chunk), which is what a scheduler
  // step is. block_tables[s] lists sequence s's blocks in position order. Returns the logits of the
  // entries with logits = true, in batch order ([n_with_logits][n_vocab]), in a host buffer owned by
  // this object and valid until the next call. Checks ids, sequences, positions and block ids
  // before any work (InvalidArgument / OutOfRange).
  virtual std::span<const float> forward(std::span<const BatchEntry> batch,
                                         std::span<const std::span<const int32_t>> block_tables) = 0;
  // forward() without the copy to the host: the same rows, left on the device.
  virtual DeviceLogits forward_device(std::span<const BatchEntry> batch,
                                      std::span<const std::span<const int32_t>> block_tables) = 0;
  // forward_device() without its final synchronize: the rows are written by work still queued on the returned
  // stream when this returns, so whoever reads them queues its reads on that stream (the GPU sampler does) and
  // synchronizes it. The host prepares and queues the sampling while the GPU runs the step, and one synchronize
  // covers both (a lone request's first token: 0.05 ms less than copying the logits and sampling on the host,
  // H200, 2026-11-22). Errors of
  // the step's kernels surface at that synchronize; the next call that evaluates tokens synchronizes first if
  // nobody did. The base version is forward_device().
  virtual DeviceLogits forward_device_queued(std::span<const BatchEntry> batch,
                                             std::span<const std::span<const int32_t>> block_tables) {
    return forward_device(batch, block_tables);
  }
  virtual int device() const = 0;
  virtual int64_t n_blocks() const = 0;
  virtual int64_t block_size() const = 0;
  virtual int64_t n_vocab() const = 0;
  virtual std::string description() const = 0;
  virtual uint64_t device_bytes() const = 0;  // weights + KV pool + scratch
  virtual uint64_t kv_bytes() const = 0;      // the KV pool alone
  virtual void warm_up_matmuls() = 0;         // CudaForward::warm_up_matmuls (engine::warm_up_backend)
  virtual PrefillGraphStats prefill_graph_stats() const { return {}; }
  // Recurrent models: the state of the sequence whose block table starts with `first_block` (after every queued
  // step), and a snapshot put back as the state of a new sequence starting there (it then continues at
  // snapshot.pos). InvalidArgument for a block without a kept state, a snapshot of another size or a model
  // without recurrent state.
  virtual step::RecurrentSnapshot save_recurrent_state(int32_t first_block) = 0;
  virtual void restore_recurrent_state(int32_t first_block, const step::RecurrentSnapshot& snapshot) = 0;
};

// Uploads the weights, allocates the pool and scratch and builds the Program. Unsupported without CUDA / a
// device / for unreadable weight types or ops; OutOfMemory (with the byte counts) when the pool does not fit.
std::unique_ptr<CudaBatchForward> make_cuda_batch_forward(const LoadedModel& model,
                                                          const step::ProgramFactory& factory,
                                                          const CudaBatchForwardParams& params);

// The step sizes (tokens per step, at most max_step_tokens, ascending) whose first forward step loads
// kernels of ours that no other size in the list does: 1..8 (the GEMV instantiations and the decode
// attention of up to 8 tokens), the smallest GEMM step (9) and the largest step (the prefill kernels).
// With warm_up_matmuls() (the GEMM's algorithms, one per bucket) a step of each leaves no one-time
// cost to the first prompt of any length (Session::warm_up, engine::warm_up_backend). A build without
// CUDA answers {max_step_tokens}.
std::vector<int64_t> warm_up_step_tokens(int64_t max_step_tokens);

// The ceilings a GPU benchmark reports against, measured on `device` now.
struct CudaCeilings {
  std::string device_name;
  double copy_gbps = 0.0;         // device-to-device cudaMemcpy, bytes read + written per second / 1e9
  double gemm_tflops = 0.0;       // cuBLAS f16 x f16 -> f32-accumulate GEMM
  int64_t gemm_size = 0;          // M = N = K of the GEMM measured
};
CudaCeilings measure_cuda_ceilings(int device = 0);

}  // namespace ga::cuda
