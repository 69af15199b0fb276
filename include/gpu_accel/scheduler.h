// Continuous batching: many concurrent completion requests share one model, one paged KV cache and
// one forward pass per step.
//
// Requests join and leave the running batch at every step. Each step packs the next token of every
// decoding sequence plus chunks of waiting prompts (up to a token budget) into one batched forward.
// KV memory is a pool of fixed-size blocks; a sequence holds a block table. Full prompt blocks are
// shared between sequences with an identical prefix (prefix caching, reference-counted). When the
// pool is exhausted, new requests wait in a queue; past max_queued, submit() throws
// ErrorKind::Unavailable. Cancelling a request (or its callback returning false, e.g. a client that
// disconnected) frees its blocks at the next step.
//
// Callbacks run on the scheduler's thread: they must be quick (copy the event into a queue and
// return). The scheduler never blocks on a client. A callback may call submit(), cancel() and
// stats() (never the destructor).
//
// Events: on_token is called once per generated token (text may be empty while it is held back),
// then on_done once. Text-only events: when a sequence ends without a new token (EOS, or a KV pool
// too small for its context) while text was held back, one last event with token = -1 and no
// logprobs carries that text. The concatenated event texts equal CompletionResult::text.
//
// Memory policy: KV blocks are taken on demand. A request is admitted when the free and evictable
// blocks cover its prompt (after prefix-cache hits) plus one block per running sequence. When a
// running sequence needs a block and none is left, the most recently admitted other sequence is
// preempted (its blocks are freed; it later recomputes prompt + generated tokens and continues with
// the same sampler state, so its output does not change). A sequence alone in a pool too small for
// its context finishes with Length.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu_accel/generate.h"
#include "gpu_accel/model.h"
#include "gpu_accel/sampler.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"

namespace ga {

struct SchedulerOptions {
  int max_running = 16;            // sequences decoded together (the batch)
  int max_queued = 256;            // waiting requests beyond which submit() throws Unavailable
  int64_t n_ctx = 0;               // per-sequence context limit; 0: the model's (capped at 4096)
  int64_t kv_blocks = 0;           // KV pool size in blocks; 0: enough for max_running full contexts
  int64_t block_size = 16;         // tokens per KV block
  int64_t max_batch_tokens = 512;  // tokens per forward step (decode tokens + prompt chunks); >= max_running
  int n_threads = 0;               // CPU threads; 0: all
  KvType kv_type = KvType::F32;    // as SessionOptions::kv_type (CUDA: F16 or FP8; F32 kept there as F16)
  // "cpu", "cuda" / "cuda:N" (the batched CUDA forward over a paged KV pool on that GPU; kv_blocks 0:
  // what free device memory holds) or "auto" (cuda:0 when a device can run the model, else cpu).
  std::string device = "cpu";
  bool cuda_graphs = true;  // CUDA: replay decode-only steps as graphs captured per batch size
  // CUDA (with cuda_graphs): a step that is one prompt alone (a lone request's prefill, 9 .. this many
  // tokens) replays a graph captured per length bucket at the warm-up; 0: never.
  int64_t prefill_graph_max_tokens = kDefaultPrefillGraphMaxTokens;
  // CUDA: sample on the GPU (the logits stay on the device; same tokens, PRNG states and logprobs as
  // the host sampler). false: copy the rows to the host and sample there, for comparison.
  bool gpu_sampling = true;
  // Pay the device's one-time costs (kernel loading, algorithm choices, the first decode graph) at
  // construction rather than in the first request (engine::warm_up_backend; Session::warm_up's reason).
  bool warm_up = true;
  // After expect_request() (a request is on its way: the HTTP server calls it when a completion's
  // request head has arrived, before its body is read and parsed), the idle scheduler thread
  // busy-waits for the submit for at most this long instead of sleeping, so that the submit finds it
  // running: the thread's wake-up (tens of microseconds to ~0.1 ms on a VM) overlaps the request's
  // parsing instead of following it. 0: never busy-wait; -1 (automatic): kAutoPollMicroseconds on a GPU,
  // 0 on the CPU (whose forward needs every core: a spinning thread would take one from it). An idle
  // server without requests never spins.
  int64_t poll_us = -1;
  static constexpr int64_t kAutoPollMicroseconds = 2000;
  // Recurrent models (RWKV): host memory for the prompt-state cache (engine/prompt_state_cache.h: the state
  // after a prompt's first n - 1 tokens, reused by a later prompt that starts with them); 0: off.
  int64_t prompt_state_cache_mib = 256;
  // Only prompts of more than this many tokens keep a state: keeping one costs a prompt seen once one more step
  // (its last token alone) and the state's copy, which a short prompt's recomputation does not repay.
  int64_t prompt_state_min_tokens = 64;
};

struct CompletionRequest {
  std::vector<int32_t> prompt_tokens;  // already tokenized (chat template applied, BOS included)
  int64_t max_tokens = 128;            // < 0: until the context is full
  SamplerParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int top_logprobs = 0;  // 0..20 alternatives reported per token (logprobs requested when >= 0 and `logprobs`)
  bool logprobs = false;
};

struct TokenLogprob {
  int32_t token = 0;
  std::string text;  // the token's bytes (may be a partial UTF-8 sequence)
  float logprob = 0;
};

struct TokenEvent {
  int32_t token = 0;  // -1: a text-only event (see above)
  std::string text;  // text that became final with this token (complete UTF-8, never part of a stop string)
  TokenLogprob chosen;                    // when logprobs were requested
  std::vector<TokenLogprob> top;          // top_logprobs alternatives, most likely first
};

struct CompletionResult {
  FinishReason finish = FinishReason::Length;
  std::string text;  // all generated text (stop string excluded)
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache (or the prompt-state cache)
  int64_t completion_tokens = 0;
  double queue_seconds = 0;          // submit -> first scheduled
  double time_to_first_token = 0;    // submit -> first token
  double total_seconds = 0;
};

struct SchedulerStats {
  int running = 0;
  int queued = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_cached = 0;  // held only by the prefix cache (reusable, evictable)
  uint64_t requests_finished = 0;
  uint64_t requests_cancelled = 0;
  uint64_t preemptions = 0;  // sequences whose blocks were taken back (they recompute later)
  uint64_t prompt_tokens_total = 0;  // prompt tokens evaluated (prefix-cache hits excluded)
  uint64_t generated_tokens_total = 0;
  double prompt_tokens_per_second = 0;      // over a recent window
  double generation_tokens_per_second = 0;  // over a recent window
  uint64_t weight_bytes = 0;                // model weight bytes (for achieved-bandwidth figures)
  bool recurrent_state = false;  // sequences keep a recurrent state slot (RWKV): prompt states, no prefix blocks
  // The prompt-state cache of recurrent models (SchedulerOptions::prompt_state_cache_mib).
  int64_t prompt_states = 0;
  uint64_t prompt_state_bytes = 0;
  uint64_t prompt_state_hits = 0;
  // Where the scheduler thread's time goes, cumulative since start: steps with a forward pass, the
  // forward pass itself (device work + logits copy), and choosing and emitting the tokens.
  uint64_t steps = 0;
  double step_seconds = 0;
  double forward_seconds = 0;
  double sample_seconds = 0;
  std::string device;
  std::string kv_type;  // the KV pool's element type as the backend keeps it: "f32", "f16" or "fp8"
};

// Scheduler::housekeep: what to tidy between two steps.
struct HousekeepingOptions {
  // Prefix-cache blocks that no sequence has used for at least this long are freed (their cache entries
  // dropped); 0: every unreferenced cached block.
  double cached_idle_seconds = 300;
  bool compact = true;  // KvBlockManager::compact: the free list back in id order, the prefix index rehashed
};

struct HousekeepingResult {
  int64_t cached_blocks_before = 0;  // unreferenced cached blocks before
  int64_t cached_blocks_freed = 0;
  int64_t free_blocks_after = 0;
  bool free_list_reordered = false;  // compact found the free list out of order
  // Sequences holding state (KV blocks or a recurrent state slot) when it ran: those are in use and are
  // never touched; a recurrent model caches no prefix blocks (its prompt states instead), and its slots are
  // freed when their sequence ends.
  int running = 0;
  bool recurrent_state = false;
  // Prompt-state cache entries (recurrent models) unused for cached_idle_seconds, dropped.
  int64_t prompt_states_freed = 0;
  int64_t prompt_states_after = 0;
};

class Scheduler {
 public:
  using TokenCallback = std::function<bool(const TokenEvent&)>;  // false: cancel the request
  using DoneCallback = std::function<void(const CompletionResult&, std::exception_ptr error)>;

  Scheduler(const LoadedModel& model, const Tokenizer& tokenizer, const SchedulerOptions& options = {});
  ~Scheduler();  // stops the loop; pending requests finish with FinishReason::Cancelled
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates (prompt fits the context: OutOfRange; bad params: InvalidArgument; queue full:
  // Unavailable) and enqueues. Returns the request id. on_done is called exactly once.
  uint64_t submit(CompletionRequest request, TokenCallback on_token, DoneCallback on_done);
  void cancel(uint64_t id);  // no-op for finished/unknown ids
  // A hint that a submit() is coming soon (see SchedulerOptions::poll_us); cheap, any thread, may be
  // called without a submit following (the busy-wait then ends at its time limit).
  void expect_request();

  // Low-priority work beside the scheduler (the server's host assistant) runs only while this is true: no
  // request is queued, running or preempted, and none was announced by expect_request() in the last
  // kAnnouncedRequestWindow (its body is still on its way). Cheap (two atomics), any thread.
  bool idle() const;
  // Blocks until idle() or until `timeout` passes; returns idle().
  bool wait_until_idle(std::chrono::milliseconds timeout) const;
  static constexpr std::chrono::milliseconds kAnnouncedRequestWindow{100};

  // Runs the housekeeping on the scheduler's thread between two steps (the block manager is that thread's)
  // and returns what it did. Throws Unavailable when the scheduler is stopping. Not from a callback.
  HousekeepingResult housekeep(const HousekeepingOptions& options);

  SchedulerStats stats() const;
  int64_t n_ctx() const;
  const LoadedModel& model() const;
  const Tokenizer& tokenizer() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ga
