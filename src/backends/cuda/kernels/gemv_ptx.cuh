// The GEMV's small PTX layer: asynchronous 16-byte global -> shared copies and an FMA that keeps
// subnormal inputs, so the kernel bodies in gemv_kernel.cuh read as load / decode / multiply.
//
// Why cp.async: the weights of a GEMV are streamed once and their blocks (18, 22, 34, 144, 210
// bytes...) are not 16-byte aligned, so they are staged raw in shared memory and decoded from there.
// cp.async.cg moves 16 bytes from L2 to shared memory without passing through registers or L1, so a
// warp can keep two or three segments of 4 rows in flight (several KB) at no register cost, where
// register double buffering held one. The src-size operand zero-fills a chunk that crosses the end of
// the matrix, so nothing past the last weight byte is read. sm_75 has no cp.async: there the copy is
// a plain (blocking) load and store, correct but without the overlap.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/device_bytes.cuh"

namespace ga::cuda::detail {

// dst[0..16) = src[0..src_bytes) then zeros; src_bytes in 1..16, src 16-byte aligned.
__device__ __forceinline__ void copy_chunk_async(uint4* dst, const uint8_t* src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto dst_shared = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_shared), "l"(src), "r"(src_bytes)
               : "memory");
#else
  *dst = load_chunk_16(src, src + src_bytes);
#endif
}

// Closes the group of copies issued since the last commit (one group per pipeline stage).
__device__ __forceinline__ void copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `Pending` of this thread's committed groups are still in flight. Other lanes'
// copies become visible after a __syncwarp() that follows.
template <int Pending>
__device__ __forceinline__ void copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

// a * b + c rounded once, with subnormal a kept even under -ftz=true (PTX fma.rn.f32 has no .ftz):
// the GEMV's integer codes arrive as subnormal floats (weight_decode.cuh, decode_int).
__device__ __forceinline__ float fma_keep_subnormal(float a, float b, float c) {
  float d;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}

}  // namespace ga::cuda::detail
