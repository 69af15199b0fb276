// quantize_x_fp8() and quantize_x_e4m3x2() (x_fp8.h): one warp per (token, block of 128 activations): each lane
// loads a float4, the warp takes the block's amax, and each lane writes its 4 codes (one 32-bit store, 128
// contiguous bytes per warp; the two-digit form writes 4 of each digit).
// The division x / d is the IEEE one (__fdiv_rn) and the conversion rounds to nearest even with saturation (no
// code saturates: |x / d| <= 448 up to one rounding, which rounds back to 448), so the codes equal the host's
// quantize_e4m3 bit for bit. Launched with PDL (pdl.cuh): it waits for the kernel that writes x.
#include "backends/cuda/kernels/x_fp8.h"

#include <cuda_fp8.h>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/weight_decode.cuh"
#include "backends/cuda/kernels/x_e4m3x2.cuh"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kThreads = 256;
constexpr int kBlock = kXFp8Block;

__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
}

// Calls f(t, b, v) for every (token t, block b of 128 activations) of p's x that this warp owns: v the lane's 4
// values (columns 128 b + 4 lane ..).
template <class P, class F>
__device__ __forceinline__ void for_each_block(const P& p, F&& f) {
  const int lane = threadIdx.x & 31;
  const int64_t blocks = p.k / kBlock;
  const int64_t total = p.n * blocks;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; i < total;
       i += static_cast<int64_t>(gridDim.x) * (kThreads / 32)) {
    const int64_t t = i / blocks;
    const int64_t b = i - t * blocks;
    const float4 v = load_activations_4(p.x + t * p.ldx + b * kBlock + 4 * lane);
    f(t, b, v);
  }
}

__global__ void __launch_bounds__(kThreads) quantize_x_fp8_kernel(const QuantizeXFp8Params p) {
  pdl_wait_prior_grid();  // x is the previous kernel's output
  pdl_allow_dependents();
  const int lane = threadIdx.x & 31;
  for_each_block(p, [&](int64_t t, int64_t b, const float4& v) {
    const float d = x_fp8_block_scale(v);  // amax / 448, 1 for an all-zero block
    const uint32_t codes = e4m3x2(__fdiv_rn(v.x, d), __fdiv_rn(v.y, d)) |
                           (e4m3x2(__fdiv_rn(v.z, d), __fdiv_rn(v.w, d)) << 16);
    *reinterpret_cast<uint32_t*>(p.codes + t * p.k + b * kBlock + 4 * lane) = codes;
    if (lane == 0) p.scales[b * p.n + t] = d;
  });
}

// The same warp-per-block scheme; each lane writes 4 first and 4 second digits (x_e4m3x2.cuh).
__global__ void __launch_bounds__(kThreads) quantize_x_e4m3x2_kernel(const QuantizeXE4m3x2Params p) {
  pdl_wait_prior_grid();  // x is the previous kernel's output
  pdl_allow_dependents();
  const int lane = threadIdx.x & 31;
  for_each_block(p, [&](int64_t t, int64_t b, const float4& v) {
    const XE4m3x2Block at = x_e4m3x2_block(p.out, p.n, p.k, t, b);
    round_x_e4m3x2_block(v, lane, at.x1, at.x2, at.d);
  });
}

// The checks both quantizers share: x's blocks of 128 and its float4 loads.
template <class P>
const char* x_blocks_unsupported_reason(const P& p) {
  if (p.k <= 0 || p.k % kBlock != 0) return "k must be a positive multiple of 128 (blocks of 128 activations)";
  if (p.n < 0) return "n must not be negative";
  if (p.n > 1 && p.ldx < p.k) return "ldx < k for several tokens";
  if (reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || p.ldx % 4 != 0) {
    return "x must be 16-byte aligned with ldx a multiple of 4 (float4 loads)";
  }
  return nullptr;
}

// One warp per (token, block), after the kernel before it (PDL); nothing to do for no tokens.
template <class P>
cudaError_t launch_blocks(void (*kernel)(P), const P& p, cudaStream_t stream) {
  const int64_t warps = p.n * (p.k / kBlock);
  if (warps == 0) return cudaSuccess;
  const int64_t ctas = (warps + kThreads / 32 - 1) / (kThreads / 32);  // the kernels loop over any excess
  return launch_after_prior(kernel, dim3(static_cast<unsigned>(ctas < 65535 ? ctas : 65535)), dim3(kThreads), 0,
                            stream, p);
}

}  // namespace
}  // namespace detail

const char* quantize_x_fp8_unsupported_reason(const QuantizeXFp8Params& p) {
  if (p.x == nullptr || p.codes == nullptr || p.scales == nullptr) return "x, codes and scales must be device pointers";
  if (const char* why = detail::x_blocks_unsupported_reason(p)) return why;
  if (reinterpret_cast<uintptr_t>(p.codes) % 16 != 0 || reinterpret_cast<uintptr_t>(p.scales) % 4 != 0) {
    return "codes must be 16-byte aligned and scales 4-byte aligned";
  }
  return nullptr;
}

cudaError_t quantize_x_fp8(const QuantizeXFp8Params& p, cudaStream_t stream) {
  if (quantize_x_fp8_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  return detail::launch_blocks(detail::quantize_x_fp8_kernel, p, stream);
}

const char* quantize_x_e4m3x2_unsupported_reason(const QuantizeXE4m3x2Params& p) {
  if (p.x == nullptr || p.out == nullptr) return "x and out must be device pointers, not null";
  if (const char* why = detail::x_blocks_unsupported_reason(p)) return why;
  if (reinterpret_cast<uintptr_t>(p.out) % 16 != 0) return "out must be 16-byte aligned";
  return nullptr;
}

cudaError_t quantize_x_e4m3x2(const QuantizeXE4m3x2Params& p, cudaStream_t stream) {
  if (quantize_x_e4m3x2_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  return detail::launch_blocks(detail::quantize_x_e4m3x2_kernel, p, stream);
}

}  // namespace ga::cuda
