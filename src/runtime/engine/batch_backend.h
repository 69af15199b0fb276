// BatchBackend: the one thing the Scheduler needs from a device: evaluate a step's batch of
// (token, position, sequence) entries over a paged KV pool that the backend owns, and hand back the
// logits of the entries that sample. The pool holds every sequence's state: the pages of K/V its
// architecture's attention layers keep (step::StateSpec); the Scheduler hands out pages by block id.
//
// Why an interface here: the Scheduler's policy (admission, block manager, prefix cache,
// preemption, cancellation, sampling) is the same whatever computes the step, so it is written once
// against this class, and the device is chosen once, when the backend is made. The CPU backend is
// arch::BatchForward + cpu::KvPool (f32, f16 or fp8 KV); the CUDA backend is
// cuda::CudaBatchForward (f16 or fp8 KV on the device, backends/cuda/cuda_forward.h, a CUDA-free header:
// a build without CUDA answers Unsupported, so there is no #ifdef here either).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu_accel/model.h"
#include "gpu_accel/session.h"
#include "model/arch/forward.h"
#include "runtime/engine/sampler_gpu.h"

namespace ga {
class ThreadPool;
}

namespace ga::engine {

// "cuda" -> 0, "cuda:3" -> 3; -1 for anything else (the Session's and the Scheduler's device names).
int cuda_device_index(const std::string& device);
// The KV cache element type a backend keeps for a requested KvType: the CPU every type (FP8: F8_E4M3 codes), CUDA
// F16 or F8_E4M3 (F32, the options' default, as F16). session.cpp.
DType cpu_kv_dtype(KvType type);
DType cuda_kv_dtype(KvType type);

struct BatchBackendOptions {
  std::string device = "cpu";     // cpu | cuda | cuda:N | auto (cuda:0 when it can run the model, else cpu)
  int64_t n_ctx = 0;              // positions one sequence may reach
  int64_t kv_blocks = 0;          // pool size; 0: CPU max_seqs full contexts, CUDA what free memory holds
  int64_t block_size = 16;
  int64_t max_batch_tokens = 512;
  int max_seqs = 16;              // sequences per step (the scheduler's max_running)
  KvType kv_type = KvType::F32;   // CPU: any; CUDA: F16 or FP8 (F32 kept there as F16, SessionOptions::kv_type)
  ThreadPool* pool = nullptr;     // CPU forward threads (not owned)
  bool cuda_graphs = true;        // CUDA: decode-only steps replay captured graphs
  // CUDA: a lone prompt step replays its bucket's graph; 0: never
  int64_t prefill_graph_max_tokens = kDefaultPrefillGraphMaxTokens;
  bool gpu_sampling = true;       // CUDA: the step's logits stay on the device and are sampled there
};

class BatchBackend {
 public:
  virtual ~BatchBackend() = default;
  // arch::BatchForward::forward's contract (the entries of one sequence consecutive, at
  // consecutive positions); the logits rows of the entries with logits = true in batch order,
  // [n][n_vocab], valid until the next call.
  virtual std::span<const float> forward(std::span<const arch::BatchToken> batch,
                                         std::span<const std::span<const int32_t>> block_tables) = 0;
  // Device sampling (the CUDA backend with gpu_sampling): forward_for_sampling() runs forward()'s
  // step but leaves the logits rows on the device (the step may still be running on the GPU when it returns:
  // sample_rows() queues behind it and waits for both), and sample_rows() samples rows
  // [first_row, first_row + rows.size()) of them with sample_rows_on_gpu (sampler_gpu.h: the
  // tokens, PRNG states, errors and logprobs of Sampler::sample and the Scheduler's log-softmax).
  // The Scheduler calls forward() instead when samples_on_device() is false; the base versions
  // answer Unsupported.
  virtual bool samples_on_device() const { return false; }
  // The device's GEMM warm-up (cuda::CudaBatchForward::warm_up_matmuls); nothing on the CPU.
  virtual void warm_up_matmuls() {}
  virtual int64_t forward_for_sampling(std::span<const arch::BatchToken> batch,
                                       std::span<const std::span<const int32_t>> block_tables);
  virtual std::vector<GpuSampleResult> sample_rows(int64_t first_row, std::span<const GpuSampleRow> rows);
  virtual int64_t n_vocab() const = 0;
  virtual int64_t n_blocks() const = 0;
  // Whether sequences keep recurrent state (RWKV: step::StateSpec::recurrent) beside their first block:
  // such state is not a function of a block's tokens, so the Scheduler neither shares nor caches prefixes.
  virtual bool recurrent_state() const { return false; }
  // Recurrent backends: a copy of the state of the sequence whose block table starts with first_block (after
  // every step queued so far), and a copy put back as the state of a new sequence starting at first_block, which
  // then continues at snapshot.pos (the Scheduler's prompt-state cache). The base versions answer Unsupported.
  virtual step::RecurrentSnapshot save_recurrent_state(int32_t first_block);
  virtual void restore_recurrent_state(int32_t first_block, const step::RecurrentSnapshot& snapshot);
  virtual const std::string& device() const = 0;   // "cpu" or "cuda:N"
  virtual std::string description() const = 0;     // for logs
};

// Largest warm-up prefill on a GPU (Session::warm_up, warm_up_backend): the prefill path's largest
// step (the default max batch).
inline constexpr int64_t kWarmUpPrefillTokens = 512;

// What the warm-up runs for steps of at most max_tokens tokens. GPU: the forward's warm_up_matmuls()
// (every GEMM algorithm bucket's algorithm chosen and kernel loaded) and one prefill of each length of
// cuda::warm_up_step_tokens (1..8, 9 and the largest step: the kernels of ours whose choice depends on
// the step size), so that after the warm-up a prompt of any length finds its kernels loaded and its
// matrix algorithms chosen (docs/results/2026-11-22-h200-first-prefill.md).
// CPU: one 1-token prefill. GA_WARMUP=prefill512 (a diagnostic switch, for before/after runs in one
// build) restores the warm-up before that change: one prefill of min(kWarmUpPrefillTokens, max_tokens).
struct WarmUpPlan {
  bool matmuls = false;
  std::vector<int64_t> prefill_lengths;  // each a fresh prompt; the decode step follows the last
};
WarmUpPlan warm_up_plan(bool gpu, int64_t max_tokens);

// The backend's one-time costs paid before the first request (Session::warm_up's reason): one
// sequence prefills each of warm_up_plan(gpu, min(kWarmUpPrefillTokens, max_batch_tokens, n_ctx - 1,
// the pool)).prefill_lengths throw-away prompts into blocks 0.. (after warm_up_matmuls() where the plan
// says so), then decodes one token after the last, and
// on a device that samples there (samples_on_device) two sequences decode a step sampled on the
// device. The blocks are not handed out by anyone yet and every sequence writes a position's K/V
// before reading it, so the pool needs no cleaning afterwards.
void warm_up_backend(BatchBackend& backend, int64_t n_ctx, int64_t block_size, int64_t max_batch_tokens,
                     int max_seqs);

// Throws InvalidArgument for an unknown device name, Unsupported (no CUDA in this build, no device,
// weight types the GPU does not read; never for "auto") and OutOfMemory with the byte counts.
std::unique_ptr<BatchBackend> make_batch_backend(const LoadedModel& model, const BatchBackendOptions& options);

}  // namespace ga::engine
