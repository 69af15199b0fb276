// The Llama-family architecture (Llama 1/2/3, Mistral, SmolLM, TinyLlama, Qwen2) on the CPU.
//
// Two halves: the tensor contract (which GGUF-named tensors the architecture needs, with which
// shapes; the loaders of every file format check a LoadedModel against it, so a bad file fails at
// load time with the tensor's name instead of deep inside a matmul) and the forward pass
// (LlamaForward: the KV cache of one sequence, scratch buffers sized once, and eval()).
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

struct LlamaContextParams {
  int64_t n_ctx = 0;               // positions the KV cache holds
  DType kv_type = DType::F32;      // F32 or F16
  int64_t max_batch = 512;         // tokens per internal step; longer evals are split (bounds scratch memory)
};

// One sequence's state over a loaded model: KV cache, rope tables and scratch. Not thread-safe;
// the model and the pool must outlive it.
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
