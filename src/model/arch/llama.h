// The Llama-family architecture (Llama 1/2/3, Mistral, SmolLM, TinyLlama, Qwen2) on the CPU.
//
// Two halves: the tensor contract (which GGUF-named tensors the architecture needs, with which
// shapes; the loaders of every file format check a LoadedModel against it, so a bad file fails at
// load time with the tensor's name instead of deep inside a matmul) and the forward pass.
//
// The forward pass has one code path: LlamaBatchForward evaluates a batch of (token, position,
// sequence) entries from any number of sequences over a paged KV pool (KvPool), every token of the
// batch going through each weight matrix in one matmul. LlamaForward (one sequence, the Session's
// engine) is that same path with a private pool of one block holding the whole context. Which
// blocks a sequence owns is the caller's business (the runtime's block manager): this layer only
// stores and reads K/V where the block tables say.
//
// The forward pass only sees ModelConfig and WeightViews. Variants (rope layout, QKV bias, tied
// classifier, per-frequency rope factors) are data read once at construction, not branches on
// model names.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/quant.h"
#include "gpu_accel/model.h"

namespace ga {
class ThreadPool;
}

namespace ga::arch {

// Architectures this forward implements (GGUF general.architecture values).
bool is_llama_family(std::string_view arch);

// One tensor the architecture reads. ne in ggml order.
struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  bool required = true;
};

// Every tensor a model with this config may use: the required ones, and the optional ones
// (output.weight, rope_freqs.weight) marked required = false. QKV biases are required when
// config.qkv_bias is set.
std::vector<TensorSpec> llama_tensor_specs(const ModelConfig& config);

// Checks the hyperparameters (positive sizes, n_head a multiple of n_head_kv, even n_rot <= head_dim,
// ...) and that every tensor in llama_tensor_specs exists (when required) with that shape and a type
// gpu_accel supports. Throws InvalidFormat or Unsupported naming the problem. progress(done, total)
// is called per tensor with the bytes checked so far (may be empty).
void check_llama_model(const LoadedModel& model, const std::function<void(uint64_t, uint64_t)>& progress = {});

// Per-pair rope frequency divisors for Llama-3.1-style scaling ([n_rot/2]), computed from
// config.rope_scaling as Hugging Face's _compute_llama3_parameters does. Loaders that know only the
// config (not a rope_freqs.weight tensor) can store these as rope_freqs.weight.
std::vector<float> llama3_rope_freq_factors(const ModelConfig& config);

// The rope divisors a forward that takes them as a parameter (the CUDA ones) must be given: none when the
// file has rope_freqs.weight (the forward reads that tensor), Llama-3 scaling's when the config asks for it.
std::vector<float> rope_freq_factors_for_forward(const LoadedModel& model);

// K and V of every layer for a pool of fixed-size blocks: per layer, K then V, each
// [n_blocks][block_size][n_head_kv][head_dim] of kv_type. Memory only; no bookkeeping.
struct KvPoolParams {
  int64_t n_blocks = 0;
  int64_t block_size = 16;     // positions per block
  DType kv_type = DType::F32;  // F32 or F16
};

class KvPool {
 public:
  KvPool(const ModelConfig& config, const KvPoolParams& params);  // OutOfMemory when it cannot allocate
  int64_t n_blocks() const { return params_.n_blocks; }
  int64_t block_size() const { return params_.block_size; }
  DType kv_type() const { return params_.kv_type; }
  int64_t kv_dim() const { return kv_dim_; }  // n_head_kv * head_dim
  int64_t n_layer() const { return n_layer_; }
  uint64_t bytes() const { return static_cast<uint64_t>(data_.size()); }
  uint8_t* k(int64_t layer) { return data_.data() + static_cast<uint64_t>(2 * layer) * plane_bytes_; }
  uint8_t* v(int64_t layer) { return data_.data() + static_cast<uint64_t>(2 * layer + 1) * plane_bytes_; }

 private:
  KvPoolParams params_;
  int64_t kv_dim_ = 0;
  int64_t n_layer_ = 0;
  uint64_t plane_bytes_ = 0;  // one layer's K (or V)
  std::vector<uint8_t> data_;
};

// One entry of a batched forward: `token` at position `pos` of sequence `seq` (an index into the
// block tables passed with the batch).
struct BatchToken {
  int32_t token = 0;
  int64_t pos = 0;
  int32_t seq = 0;
  bool logits = false;  // write this entry's logits
};

// The weights of a Llama-family model and the scratch of its batched forward pass. Not thread-safe;
// the model and the pool must outlive it.
class LlamaBatchForward {
 public:
  LlamaBatchForward(const LoadedModel& model, ThreadPool* pool);
  ~LlamaBatchForward();
  LlamaBatchForward(LlamaBatchForward&&) noexcept;
  LlamaBatchForward& operator=(LlamaBatchForward&&) noexcept;

  // Evaluates the batch: stores every entry's K/V at its (seq, pos) slot of `kv`, then each entry
  // attends to positions 0 .. pos of its sequence (which must all be in the cache by then: earlier
  // positions from previous calls or from this batch). block_tables[s] lists sequence s's blocks in
  // position order and must cover every position used. Writes the logits of the entries with
  // logits = true, in batch order, to `logits` ([n_with_logits][n_vocab]). Checks token ids,
  // sequences, positions and block ids before any work (InvalidArgument / OutOfRange).
  void forward(std::span<const BatchToken> batch, std::span<const std::span<const int32_t>> block_tables, KvPool& kv,
               float* logits);

  const ModelConfig& config() const;
  int64_t n_vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct LlamaContextParams {
  int64_t n_ctx = 0;               // positions the KV cache holds
  DType kv_type = DType::F32;      // F32 or F16
  int64_t max_batch = 512;         // tokens per internal step; longer evals are split (bounds scratch memory)
};

// One sequence over a loaded model: a LlamaBatchForward plus a KV pool of one block of n_ctx
// positions. Not thread-safe; the model and the pool must outlive it.
class LlamaForward {
 public:
  LlamaForward(const LoadedModel& model, const LlamaContextParams& params, ThreadPool* pool);
  ~LlamaForward();
  LlamaForward(LlamaForward&&) noexcept;
  LlamaForward& operator=(LlamaForward&&) noexcept;

  // Evaluates tokens at positions pos0 .. pos0 + n - 1 (the cache must hold positions < pos0).
  // Writes the last token's logits ([n_vocab]) or, with all_logits, every token's ([n][n_vocab]) to
  // `logits`. Validates ids (InvalidArgument) and the context (OutOfRange) before any work.
  void eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits);

  int64_t n_ctx() const;
  int64_t n_vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ga::arch
