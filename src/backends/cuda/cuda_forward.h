// The CUDA forward pass of the Llama family, as the runtime sees it: no CUDA headers, no #ifdefs.
//
// ga_runtime (Session) links ga_cuda, never the other way round, so this header is the whole contract
// between them: it names only the public model types (LoadedModel's config and weight views) and
// plain C++. A CUDA build implements it in backends/cuda/llama/, a build without CUDA answers
// "not available" from backends/cuda_stub/ (ErrorKind::Unsupported), so the Session selects a device
// with ordinary control flow. Rope frequency factors come in precomputed (params.rope_freq_factors):
// computing Llama-3 factors is the model layer's job, which ga_cuda must not link.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu_accel/model.h"

namespace ga::cuda {

struct CudaForwardParams {
  int device = 0;
  int64_t n_ctx = 0;         // positions the device KV cache (f16) holds
  int64_t max_batch = 512;   // tokens per internal step; longer evals are split (bounds scratch memory)
  // [n_rot/2] divisors of the rope frequencies (rope_freqs.weight or Llama-3 scaling); empty: none.
  std::vector<float> rope_freq_factors;
  bool use_cuda_graph = true;  // capture the one-token decode step once and replay it
};

// One sequence of a Llama-family model on one GPU. Not thread-safe.
class CudaForward {
 public:
  virtual ~CudaForward() = default;
  // Same contract as arch::LlamaForward::eval: tokens at positions pos0 .. pos0+n-1; writes the last
  // token's logits ([n_vocab]) or every token's ([n][n_vocab]). Validates before any work.
  virtual void eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits) = 0;
  virtual int64_t n_ctx() const = 0;
  virtual int64_t n_vocab() const = 0;
  // "cuda:0 NVIDIA H200 (sm_90), kernels sm_90a"-style description for logs.
  virtual std::string description() const = 0;
  virtual uint64_t device_bytes() const = 0;  // weights + KV cache + scratch held on the device
};

// Uploads the weights (native types) and allocates the KV cache and scratch. Throws Unsupported for
// a build without CUDA, a missing device or a weight type the CUDA kernels do not read, and
// OutOfMemory (with the byte counts) when the model and cache do not fit in free device memory.
std::unique_ptr<CudaForward> make_cuda_llama_forward(const LoadedModel& model, const CudaForwardParams& params);

// The ceilings a GPU benchmark reports against, measured on `device` now.
struct CudaCeilings {
  std::string device_name;
  double copy_gbps = 0.0;         // device-to-device cudaMemcpy, bytes read + written per second / 1e9
  double gemm_tflops = 0.0;       // cuBLAS f16 x f16 -> f32-accumulate GEMM
  int64_t gemm_size = 0;          // M = N = K of the GEMM measured
};
CudaCeilings measure_cuda_ceilings(int device = 0);

}  // namespace ga::cuda
