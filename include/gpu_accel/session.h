// An inference session: one sequence's KV cache over a loaded model, evaluated by a backend.
//
// eval() appends tokens at the next positions (a batched prefill when several are given) and
// returns the logits of the last one (or of every one, when asked). The model must outlive the
// session.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/model.h"
#include "gpu_accel/sampler.h"

namespace ga {

// The KV cache's element type. F32: the CPU only (its reference). F16: both backends. FP8: OCP E4M3 codes with
// one float scale per (position, KV head) for K and one for V (scale = the row's largest magnitude / 448), about
// half the bytes of F16, so the same memory holds ~2x the positions; both backends. BF16 is not offered: the CUDA
// attention kernels read f16 or FP8 caches only.
enum class KvType { F32, F16, FP8 };
// "f32", "f16", "fp8".
const char* kv_type_name(KvType type);
// Parses "f32" / "f16" / "fp8" (any case); nullopt otherwise. kKvTypeChoices lists them for error messages.
std::optional<KvType> kv_type_from_name(std::string_view name);
inline constexpr const char* kKvTypeChoices = "f16, fp8 (both backends) or f32 (the CPU only)";

// The largest prompt (tokens) that replays a prefill CUDA graph by default (SessionOptions, SchedulerOptions): the
// launch-bound short prefills; longer ones are bound by their GEMMs.
inline constexpr int64_t kDefaultPrefillGraphMaxTokens = 512;

struct SessionOptions {
  int64_t n_ctx = 0;    // 0: the model's training context, capped at 4096
  int n_threads = 0;    // 0: all hardware threads
  // The KV cache's type (KvType). The CPU keeps every type. CUDA keeps F16 or FP8; F32, this default (the CPU
  // reference's), is kept there as F16 as it always was (the CLI refuses an explicit `--kv-type f32` on a GPU).
  KvType kv_type = KvType::F32;
  // "cpu" (the reference backend), "cuda" / "cuda:N" (GPU N, default 0), or "auto" (cuda:0 when a
  // device exists and the model's types run there, else cpu).
  std::string device = "cpu";
  bool cuda_graphs = true;  // CUDA: replay the one-token decode step as a captured graph
  // CUDA (with cuda_graphs): prompts of 9 .. this many tokens replay a graph captured per length bucket at
  // warm_up() (the launch-bound short prefill); 0: every prefill enqueued kernel by kernel.
  int64_t prefill_graph_max_tokens = kDefaultPrefillGraphMaxTokens;
  // CUDA: sample_next() samples on the GPU (the logits stay on the device; the same token, PRNG state
  // and errors as the host sampler). false: copy the row to the host and sample there.
  bool gpu_sampling = true;
  // CPU: the model split over this many ranks of this process (Megatron tensor parallelism over the
  // in-process transport, docs/architecture.md), each on its share of n_threads; the logits equal the unsplit
  // model's. The heads, KV heads and FFN width must divide by it. The GPU takes 1 only (for now).
  int tensor_parallel = 1;
  // CPU: the sequence's positions sharded over this many ranks of this process (context parallelism,
  // docs/architecture.md): the prompt's attention is ring attention over the ranks' shards of the KV cache,
  // decode merges every shard's partial attention by log-sum-exp; the logits equal the one-rank forward's.
  // Not together with tensor_parallel > 1 (yet); recurrent models (RWKV) are refused. The GPU takes 1 only.
  int context_parallel = 1;
};

class Session {
 public:
  Session(const LoadedModel& model, const SessionOptions& options = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Evaluates `tokens` at positions n_past() .. n_past()+n-1. Returns the logits of the last token
  // ([n_vocab]); with all_logits, every token's logits ([n][n_vocab], row-major).
  // Throws OutOfRange if the context would overflow (nothing is evaluated then) and
  // InvalidArgument for a token id outside the vocabulary.
  std::vector<float> eval(std::span<const int32_t> tokens, bool all_logits = false);

  // Generation's pair (ga::generate uses it): eval_for_sampling() evaluates like eval() but keeps the
  // last token's logits where the backend made them (device memory on a GPU, no copy), and
  // sample_next() samples them with `sampler` (history: the penalties' window). The token, the
  // sampler's state and any error equal sampler.sample(eval(tokens), history). sample_next() needs a
  // preceding eval_for_sampling() (InvalidArgument otherwise) and may be called once per eval.
  void eval_for_sampling(std::span<const int32_t> tokens);
  int32_t sample_next(Sampler& sampler, std::span<const int32_t> history);

  // Runs the forward once on throw-away tokens and forgets them, so that one-time costs (kernel
  // loading, matrix-multiply algorithm choices, first allocations, the decode graph's capture) are
  // not paid by the first real prompt: a cold first prefill of a 1B model on an H200 takes ~60 ms
  // against ~2-4 ms warm. llama.cpp does the same by default (--no-warmup). Needs n_past() == 0.
  // CPU: 2 tokens; CUDA: each matrix product once per algorithm bucket, one prompt of each length that
  // loads kernels of its own (1..9 tokens and min(512, n_ctx - 1)) + one decode step, so that the first
  // prompt of ANY length runs as fast as a repeated one (~0.1-0.3 s for a 1B/7B model on an H200).
  void warm_up();

  int64_t n_past() const;
  int64_t n_ctx() const;
  // Forgets positions >= n (n <= n_past()): for prompt re-use and rollback.
  void truncate(int64_t n);
  void reset() { truncate(0); }

  const LoadedModel& model() const;
  int n_threads() const;  // CPU threads (1 on a GPU device)
  KvType kv_type() const;  // the KV cache's type as the device keeps it (a GPU: F16 for an F32 request)
  // Where the session runs: "cpu" or "cuda:N", and a line for logs (device name, kernel arch).
  const std::string& device() const;
  std::string device_description() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ga
