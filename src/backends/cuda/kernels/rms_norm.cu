// RMSNorm fused with the residual add: one block per row reads x (and the residual) once, writes
// the updated residual and the normalized row; the second pass re-reads the row from L1/L2.
//
// Rows of up to 8192 floats (every Llama width) with float4-aligned pointers and strides take the
// register path: each thread issues ALL its float4 loads of x and the residual before any store, so
// a row costs one memory round trip. The generic loop below it interleaves a load and a store per
// element; since the store may alias the next load the compiler cannot batch the loads, and a
// 2048-wide decode row cost ~8 us (ncu, H200) as a chain of dependent round trips; the register path
// is what a decode step (one row, twice per layer) runs.
//
// With out_int8 (the input of int8 GEMVs, gemv.h) the register path also rounds the finished row to the
// GEMV's two int8 digits per block of 32 (x_int8.cuh, the GEMV's own device function, so the bytes are those
// every GEMV CTA would have built): after a barrier, thread b re-reads block b of the row it just wrote (L1 /
// L2) and quantizes it. A 4096-wide row is 128 blocks: one per thread, ~1 us less than a pre-pass kernel.
// With out_e4m3x2 (the input of the FP8 tensor-core GEMV of F8_B128 split rows) it rounds the row to that GEMV's
// two E4M3 digits per block of 128 the same way, warp b % 8 taking block b, with the pre-pass kernel's device
// function (x_e4m3x2.cuh), so the bytes are those of quantize_x_e4m3x2.
//
// The sum of squares is accumulated in float per thread and reduced in a tree (warp shuffles, then
// one float per warp in shared memory), which keeps the error near float rounding for rows of any
// length; the CPU reference uses double, and the parity test allows float-level differences.
#include <cstdint>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/step_math.cuh"
#include "backends/cuda/kernels/x_e4m3x2.cuh"
#include "backends/cuda/kernels/x_int8.cuh"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kNormThreads = 256;

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const RmsNormParams p) {
  __shared__ float warp_sums[kNormThreads / 32];
  pdl_wait_prior_grid();  // launched after the previous kernel (pdl.cuh): its outputs are ready from here
  pdl_allow_dependents();  // after the wait: triggering first measured slower (H200, 2026-11-22)
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.ldx;
  float* res = p.residual != nullptr ? p.residual + row * p.ld_residual : nullptr;
  float* out = p.out + row * p.ld_out;

  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < p.n; i += kNormThreads) {
    float v = x[i];
    if (res != nullptr) {
      v += res[i];
      res[i] = v;  // the skip connection carries the sum to the next layer
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  sum_sq = warp_sum(sum_sq);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum_sq;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) total += warp_sums[w];
  const float inv_rms = detail::inv_rms(total, p.n, p.eps);

  for (int64_t i = threadIdx.x; i < p.n; i += kNormThreads) {
    // each thread re-reads only what it wrote above, so no barrier is needed before this pass
    const float v = res != nullptr ? res[i] : x[i];
    out[i] = v * inv_rms * p.weight[i];
  }
}

// Sum over the block (kNormThreads threads); every thread gets the total.
__device__ __forceinline__ float block_sum(float v, float* warp_sums) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) total += warp_sums[w];
  return total;
}

// The register path: kVec float4 per thread, n % 4 == 0, n <= kVec * 4 * kNormThreads, 16-byte
// aligned rows (rms_norm() checks). Same per-thread accumulation order as a strided loop.
template <int kVec>
__global__ void __launch_bounds__(kNormThreads) rms_norm_vec_kernel(const RmsNormParams p) {
  __shared__ float warp_sums[kNormThreads / 32];
  pdl_wait_prior_grid();  // launched after the previous kernel (pdl.cuh): its outputs are ready from here
  pdl_allow_dependents();  // after the wait: triggering first measured slower (H200, 2026-11-22)
  const int64_t row = blockIdx.x;
  const int n4 = static_cast<int>(p.n / 4);
  const float4* x = reinterpret_cast<const float4*>(p.x + row * p.ldx);
  float4* res = p.residual != nullptr ? reinterpret_cast<float4*>(p.residual + row * p.ld_residual) : nullptr;
  float4* out = reinterpret_cast<float4*>(p.out + row * p.ld_out);
  const float4* weight = reinterpret_cast<const float4*>(p.weight);

  // The weights are loaded with x, so their latency hides behind the same round trip.
  float4 v[kVec], w[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * kNormThreads;
    v[k] = i < n4 ? x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    w[k] = i < n4 ? weight[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (res != nullptr) {
    float4 r[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int i = static_cast<int>(threadIdx.x) + k * kNormThreads;
      r[k] = i < n4 ? res[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int i = static_cast<int>(threadIdx.x) + k * kNormThreads;
      v[k] = make_float4(v[k].x + r[k].x, v[k].y + r[k].y, v[k].z + r[k].z, v[k].w + r[k].w);
      if (i < n4) res[i] = v[k];  // the skip connection carries the sum to the next layer
    }
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    sum_sq = fmaf(v[k].x, v[k].x, sum_sq);
    sum_sq = fmaf(v[k].y, v[k].y, sum_sq);
    sum_sq = fmaf(v[k].z, v[k].z, sum_sq);
    sum_sq = fmaf(v[k].w, v[k].w, sum_sq);
  }
  const float inv_rms = detail::inv_rms(block_sum(sum_sq, warp_sums), p.n, p.eps);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * kNormThreads;
    if (i < n4) {
      out[i] = make_float4(v[k].x * inv_rms * w[k].x, v[k].y * inv_rms * w[k].y, v[k].z * inv_rms * w[k].z,
                           v[k].w * inv_rms * w[k].w);
    }
  }
  if (p.out_int8 != nullptr) {  // uniform branch: the rounded row for the int8 GEMVs that read it
    __syncthreads();            // the row's other blocks were written by other threads
    const int64_t nb = p.n / 32;
    auto* qx = static_cast<int8_t*>(p.out_int8);    // [n_rows][nb][64]
    float2* ds = x_int8_scales(qx, p.n_rows * nb);  // [n_rows][nb]
    const float* out_row = p.out + row * p.ld_out;
    for (int64_t b = threadIdx.x; b < nb; b += kNormThreads) {
      gemv_quantize_x_block<false>(out_row + 32 * b, qx + (row * nb + b) * kXBlockBytes, ds + row * nb + b);
    }
  }
  if (p.out_e4m3x2 != nullptr) {  // uniform branch: the two E4M3 digits for the FP8 GEMVs that read out
    __syncthreads();              // as above: warp w rounds blocks w, w + 8, ... of the row the CTA wrote
    const int lane = static_cast<int>(threadIdx.x & 31);
    const float* out_row = p.out + row * p.ld_out;
    for (int64_t b = threadIdx.x >> 5; b < p.n / kXFp8Block; b += kNormThreads / 32) {
      const float4 v = load_activations_4(out_row + kXFp8Block * b + 4 * lane);
      const XE4m3x2Block at = x_e4m3x2_block(p.out_e4m3x2, p.n_rows, p.n, row, b);
      round_x_e4m3x2_block(v, lane, at.x1, at.x2, at.d);
    }
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Whether the register path (rms_norm_vec_kernel) takes p.
bool vec_path_ok(const RmsNormParams& p) {
  constexpr int64_t kPerVec = 4 * kNormThreads;  // floats one float4 per thread covers
  return p.n % 4 == 0 && p.n <= 8 * kPerVec && p.ldx % 4 == 0 && p.ld_out % 4 == 0 && aligned16(p.x) &&
         aligned16(p.out) && aligned16(p.weight) &&
         (p.residual == nullptr || (p.ld_residual % 4 == 0 && aligned16(p.residual)));
}

}  // namespace
}  // namespace detail

const char* rms_norm_unsupported_reason(const RmsNormParams& p) {
  if (p.x == nullptr || p.weight == nullptr || p.out == nullptr) return "x, weight and out must be device pointers";
  if (p.n_rows < 0 || p.n <= 0) return "n must be positive";
  if (p.n_rows > 0x7fffffff) return "more than 2^31 rows";
  if (p.ldx < p.n || p.ld_out < p.n || (p.residual != nullptr && p.ld_residual < p.n)) return "a row stride < n";
  if (p.out_int8 != nullptr) {
    if (p.n % 32 != 0 || p.n > 8 * 4 * detail::kNormThreads) {
      return "out_int8 needs n a multiple of 32 (blocks of 32 activations) and at most 8192";
    }
    if (!detail::vec_path_ok(p)) {
      return "out_int8 needs x, out, weight and residual 16-byte aligned with strides multiples of 4";
    }
    if (reinterpret_cast<uintptr_t>(p.out_int8) % 16 != 0) return "out_int8 must be 16-byte aligned";
  }
  if (p.out_e4m3x2 != nullptr) {
    if (p.n % detail::kXFp8Block != 0 || p.n > 8 * 4 * detail::kNormThreads) {
      return "out_e4m3x2 needs n a multiple of 128 (blocks of 128 activations) and at most 8192";
    }
    if (!detail::vec_path_ok(p)) {
      return "out_e4m3x2 needs x, out, weight and residual 16-byte aligned with strides multiples of 4";
    }
    if (reinterpret_cast<uintptr_t>(p.out_e4m3x2) % 16 != 0) return "out_e4m3x2 must be 16-byte aligned";
  }
  return nullptr;
}

cudaError_t rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (rms_norm_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.n_rows == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(p.n_rows);
  constexpr int64_t kPerVec = 4 * detail::kNormThreads;  // floats one float4 per thread covers
  void (*kernel)(const RmsNormParams) = detail::rms_norm_kernel;  // never with out_int8 / out_e4m3x2 (refused)
  if (detail::vec_path_ok(p)) {
    if (p.n <= kPerVec) {
      kernel = detail::rms_norm_vec_kernel<1>;
    } else if (p.n <= 2 * kPerVec) {
      kernel = detail::rms_norm_vec_kernel<2>;
    } else if (p.n <= 4 * kPerVec) {
      kernel = detail::rms_norm_vec_kernel<4>;
    } else {
      kernel = detail::rms_norm_vec_kernel<8>;
    }
  }
  return detail::launch_after_prior(kernel, dim3(blocks), dim3(detail::kNormThreads), 0, stream, p);
}

}  // namespace ga::cuda
