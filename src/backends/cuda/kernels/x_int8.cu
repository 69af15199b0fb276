// quantize_x_int8(): x rounded once to the int8 GEMV's two digits per block of 32 (x_int8.cuh), so that a
// GEMV given GemvParams::x_int8 skips the quantization every one of its CTAs would otherwise repeat.
//
// One thread per block of 32 activations: the same device function as the GEMV's prologue (bit-identical
// bytes), 8 float4 loads and 4 uint4 stores per thread. The work is tiny (a 4096-wide token is 128
// threads), so the kernel is latency, not bandwidth: small CTAs (64 threads) spread it over SMs. Launched
// with PDL (pdl.cuh): it waits for the kernel before it (which writes x) before the first load.
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/x_int8.cuh"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kQuantizeThreads = 64;

__global__ void __launch_bounds__(kQuantizeThreads) quantize_x_int8_kernel(const QuantizeXInt8Params p) {
  pdl_wait_prior_grid();  // x is the previous kernel's output
  pdl_allow_dependents();
  auto* qx = static_cast<int8_t*>(p.out);                        // [n_tokens][nb][64]
  float2* ds = x_int8_scales(qx, p.n_tokens * (p.cols / 32));  // [n_tokens][nb]
  for_each_x_block<kQuantizeThreads>(p.n_tokens, p.cols, [&](int64_t i, int64_t t, int64_t c0) {
    gemv_quantize_x_block<false>(p.x + t * p.ldx + c0, qx + i * kXBlockBytes, ds + i);
  });
}

}  // namespace
}  // namespace detail

const char* quantize_x_int8_unsupported_reason(const QuantizeXInt8Params& p) {
  if (p.x == nullptr || p.out == nullptr) return "x and out must be device pointers, not null";
  if (p.cols <= 0 || p.cols % 32 != 0) return "cols must be a positive multiple of 32 (blocks of 32 activations)";
  if (p.n_tokens < 0) return "n_tokens must not be negative";
  if (p.n_tokens > 1 && p.ldx < p.cols) return "ldx < cols for several tokens";
  if (reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || p.ldx % 4 != 0) {
    return "x must be 16-byte aligned with ldx a multiple of 4 (float4 loads)";
  }
  if (reinterpret_cast<uintptr_t>(p.out) % 16 != 0) return "out must be 16-byte aligned";
  return nullptr;
}

cudaError_t quantize_x_int8(const QuantizeXInt8Params& p, cudaStream_t stream) {
  if (quantize_x_int8_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  const int64_t total = p.n_tokens * (p.cols / 32);
  if (total == 0) return cudaSuccess;
  return detail::launch_after_prior(detail::quantize_x_int8_kernel,
                                    dim3(detail::x_block_ctas(total, detail::kQuantizeThreads)),
                                    dim3(detail::kQuantizeThreads), 0, stream, p);
}

}  // namespace ga::cuda
