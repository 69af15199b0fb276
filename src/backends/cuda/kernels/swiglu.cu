// SwiGLU / GeGLU: out = act(gate) * up, element-wise over rows with their own strides; the activation is
// a template parameter (one kernel each: SiLU for the Llama family, GELU-tanh for Gemma).
//
// A grid-stride loop over the flattened [n_rows][n] index; the op is a pure stream (12 bytes per
// element), so coalesced scalar loads already run at bandwidth. expf (not __expf) keeps the result
// within a few ulp of the CPU reference's std::exp.
//
// With out_int8 (the input of a Q8_0 down projection) a second kernel runs instead: one thread per block
// of 32 outputs, which computes them in registers, stores them and rounds them to the int8 GEMV's two
// digits with the GEMV's own device function (x_int8.cuh), so the bytes are those the GEMV would have
// built from out in each of its CTAs, once per step instead of once per CTA. Fewer threads (n / 32 per
// row) but the op is ~1 us either way; the same expression per element keeps out bit-identical.
// With out_e4m3x2 (an F8_B128 down projection's input) a third kernel rounds to the FP8 GEMV's two E4M3 digits
// per block of 128 instead (x_e4m3x2.cuh, the pre-pass's device function): one warp per block.
#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/step_math.cuh"
#include "backends/cuda/kernels/x_e4m3x2.cuh"
#include "backends/cuda/kernels/x_int8.cuh"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kSwigluThreads = 256;
constexpr int64_t kSwigluMaxBlocks = 65535;
template <GluActivation A>
__device__ __forceinline__ float activate(float g) {
  return glu_activate(A == GluActivation::kSilu ? GluAct::kSilu : GluAct::kGeluTanh, g);
}

template <GluActivation A>
__global__ void __launch_bounds__(kSwigluThreads) swiglu_kernel(const SwigluParams p) {
  pdl_wait_prior_grid();  // launched after the previous kernel (pdl.cuh): its outputs are ready from here
  pdl_allow_dependents();  // after the wait: triggering first measured slower (H200, 2026-11-22)
  const int64_t total = p.n_rows * p.n;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kSwigluThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kSwigluThreads) {
    const int64_t r = idx / p.n;
    const int64_t i = idx - r * p.n;
    const float g = p.gate[r * p.ld_gate + i];
    const float u = p.up[r * p.ld_up + i];
    p.out[r * p.ld_out + i] = activate<A>(g) * u;
  }
}

constexpr int kSwigluInt8Threads = 64;  // one thread per 32 outputs: small CTAs spread 344 threads per 7B row

template <GluActivation A>
__global__ void __launch_bounds__(kSwigluInt8Threads) swiglu_int8_kernel(const SwigluParams p) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  auto* qx = static_cast<int8_t*>(p.out_int8);            // [n_rows][nb][64]
  float2* ds = x_int8_scales(qx, p.n_rows * (p.n / 32));  // [n_rows][nb]
  for_each_x_block<kSwigluInt8Threads>(p.n_rows, p.n, [&](int64_t i, int64_t r, int64_t i0) {
    const float* gate = p.gate + r * p.ld_gate + i0;
    const float* up = p.up + r * p.ld_up + i0;
    float v[32];
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // coherent loads: PDL (pdl.cuh)
      const float4 g = load_activations_4(gate + 4 * k);
      const float4 u = load_activations_4(up + 4 * k);
      v[4 * k] = activate<A>(g.x) * u.x;
      v[4 * k + 1] = activate<A>(g.y) * u.y;
      v[4 * k + 2] = activate<A>(g.z) * u.z;
      v[4 * k + 3] = activate<A>(g.w) * u.w;
    }
    float4* out = reinterpret_cast<float4*>(p.out + r * p.ld_out + i0);  // may alias gate: this thread's block
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
    gemv_quantize_x_values(v, qx + i * kXBlockBytes, ds + i);
  });
}

// With out_e4m3x2 (the input of an F8_B128 down projection): one warp per (row, block of 128 outputs), each lane
// computing 4 of them with float4 loads, storing them and rounding the block to the FP8 GEMV's two digits.
constexpr int kSwigluE4m3x2Threads = 256;

template <GluActivation A>
__global__ void __launch_bounds__(kSwigluE4m3x2Threads) swiglu_e4m3x2_kernel(const SwigluParams p) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t blocks = p.n / kXFp8Block;
  const int64_t total = p.n_rows * blocks;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * kSwigluE4m3x2Threads + threadIdx.x) / 32; i < total;
       i += static_cast<int64_t>(gridDim.x) * (kSwigluE4m3x2Threads / 32)) {
    const int64_t r = i / blocks;
    const int64_t b = i - r * blocks;
    const int64_t c = kXFp8Block * b + 4 * lane;
    const float4 g = load_activations_4(p.gate + r * p.ld_gate + c);  // coherent loads: PDL (pdl.cuh)
    const float4 u = load_activations_4(p.up + r * p.ld_up + c);
    const float4 v = make_float4(activate<A>(g.x) * u.x, activate<A>(g.y) * u.y, activate<A>(g.z) * u.z,
                                 activate<A>(g.w) * u.w);
    *reinterpret_cast<float4*>(p.out + r * p.ld_out + c) = v;  // may alias gate: this lane's own 4 values
    const XE4m3x2Block at = x_e4m3x2_block(p.out_e4m3x2, p.n_rows, p.n, r, b);
    round_x_e4m3x2_block(v, lane, at.x1, at.x2, at.d);
  }
}

}  // namespace
}  // namespace detail

const char* swiglu_unsupported_reason(const SwigluParams& p) {
  if (p.gate == nullptr || p.up == nullptr || p.out == nullptr) return "gate, up and out must be device pointers";
  if (p.n_rows < 0 || p.n <= 0) return "n must be positive";
  if (p.ld_gate < p.n || p.ld_up < p.n || p.ld_out < p.n) return "a row stride < n";
  if (p.out_int8 != nullptr) {
    const auto misaligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; };
    if (p.n % 32 != 0) return "out_int8 needs n a multiple of 32 (blocks of 32 activations)";
    if (misaligned(p.gate) || misaligned(p.up) || misaligned(p.out) || misaligned(p.out_int8)) {
      return "out_int8 needs gate, up, out and out_int8 16-byte aligned";
    }
    if (p.ld_gate % 4 != 0 || p.ld_up % 4 != 0 || p.ld_out % 4 != 0) {
      return "out_int8 needs the row strides to be multiples of 4 (float4 loads)";
    }
  }
  if (p.out_e4m3x2 != nullptr) {
    const auto misaligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; };
    if (p.out_int8 != nullptr) return "out_e4m3x2 and out_int8 together";
    if (p.n % detail::kXFp8Block != 0) return "out_e4m3x2 needs n a multiple of 128 (blocks of 128 activations)";
    if (misaligned(p.gate) || misaligned(p.up) || misaligned(p.out) || misaligned(p.out_e4m3x2)) {
      return "out_e4m3x2 needs gate, up, out and out_e4m3x2 16-byte aligned";
    }
    if (p.ld_gate % 4 != 0 || p.ld_up % 4 != 0 || p.ld_out % 4 != 0) {
      return "out_e4m3x2 needs the row strides to be multiples of 4 (float4 loads)";
    }
  }
  return nullptr;
}

cudaError_t swiglu(const SwigluParams& p, cudaStream_t stream) {
  if (swiglu_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  const int64_t total = p.n_rows * p.n;
  if (total == 0) return cudaSuccess;
  const bool gelu = p.act == GluActivation::kGeluTanh;
  if (p.out_int8 != nullptr) {
    return detail::launch_after_prior(
        gelu ? detail::swiglu_int8_kernel<GluActivation::kGeluTanh> : detail::swiglu_int8_kernel<GluActivation::kSilu>,
        dim3(detail::x_block_ctas(total / 32, detail::kSwigluInt8Threads)), dim3(detail::kSwigluInt8Threads), 0,
        stream, p);
  }
  if (p.out_e4m3x2 != nullptr) {
    const int64_t warps = total / detail::kXFp8Block;
    int64_t ctas = (warps + detail::kSwigluE4m3x2Threads / 32 - 1) / (detail::kSwigluE4m3x2Threads / 32);
    if (ctas > detail::kSwigluMaxBlocks) ctas = detail::kSwigluMaxBlocks;  // the kernel loops over the rest
    return detail::launch_after_prior(gelu ? detail::swiglu_e4m3x2_kernel<GluActivation::kGeluTanh>
                                           : detail::swiglu_e4m3x2_kernel<GluActivation::kSilu>,
                                      dim3(static_cast<unsigned>(ctas)), dim3(detail::kSwigluE4m3x2Threads), 0, stream,
                                      p);
  }
  int64_t blocks = (total + detail::kSwigluThreads - 1) / detail::kSwigluThreads;
  if (blocks > detail::kSwigluMaxBlocks) blocks = detail::kSwigluMaxBlocks;
  return detail::launch_after_prior(
      gelu ? detail::swiglu_kernel<GluActivation::kGeluTanh> : detail::swiglu_kernel<GluActivation::kSilu>,
      dim3(static_cast<unsigned>(blocks)), dim3(detail::kSwigluThreads), 0, stream, p);
}

}  // namespace ga::cuda
