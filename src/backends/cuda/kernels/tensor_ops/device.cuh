// Device helpers of the tensor-op kernels: element loads and stores in F32/F16/BF16 as float32, 16-byte vectors,
// and the reduction of a per-thread state over a row's threads.
//
// Element types are a template parameter T (float, __half, __nv_bfloat16: 16-byte vector paths) or Dyn, whose
// type is read at run time from the operand's DType: mixed-type calls (an F16 input into an F32 output) take the
// Dyn instantiation with scalar accesses, so the default build holds four variants of a kernel, not one per mix.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "gpu_accel/dtype.h"

namespace ga::cuda::tensor_ops {

struct Dyn {};

inline constexpr int kVectorBytes = 16;

template <class T>
inline constexpr int kVec = std::is_same_v<T, Dyn> ? 1 : kVectorBytes / static_cast<int>(sizeof(T));

template <class T>
__device__ __forceinline__ float to_f32(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return __bfloat162float(v);
  }
}

template <class T>
__device__ __forceinline__ T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

// Element i of p (type T, or `type` for Dyn) as float32.
template <class T>
__device__ __forceinline__ float load(const void* p, int64_t i, DType type) {
  if constexpr (std::is_same_v<T, Dyn>) {
    switch (type) {
      case DType::F16:
        return load<__half>(p, i, type);
      case DType::BF16:
        return load<__nv_bfloat16>(p, i, type);
      default:
        return load<float>(p, i, type);
    }
  } else {
    return to_f32(static_cast<const T*>(p)[i]);
  }
}

// Rounds v once (nearest even) into element i of p.
template <class T>
__device__ __forceinline__ void store(void* p, int64_t i, float v, DType type) {
  if constexpr (std::is_same_v<T, Dyn>) {
    switch (type) {
      case DType::F16:
        store<__half>(p, i, v, type);
        break;
      case DType::BF16:
        store<__nv_bfloat16>(p, i, v, type);
        break;
      default:
        store<float>(p, i, v, type);
    }
  } else {
    static_cast<T*>(p)[i] = from_f32<T>(v);
  }
}

// kVec<T> consecutive elements from one 16-byte load (p + i 16-byte aligned; T not Dyn). 16-bit types convert in
// pairs (one cvt/prmt per two elements instead of one per element: the bf16 kernels are instruction-bound otherwise).
template <class T>
__device__ __forceinline__ void unpack_vec(const uint4& raw, float* v) {
  if constexpr (std::is_same_v<T, float>) {
    v[0] = __uint_as_float(raw.x);
    v[1] = __uint_as_float(raw.y);
    v[2] = __uint_as_float(raw.z);
    v[3] = __uint_as_float(raw.w);
  } else {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    const T2* e = reinterpret_cast<const T2*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float2 f;
      if constexpr (std::is_same_v<T, __half>) {
        f = __half22float2(e[k]);
      } else {
        f = __bfloat1622float2(e[k]);
      }
      v[2 * k] = f.x;
      v[2 * k + 1] = f.y;
    }
  }
}

template <class T>
__device__ __forceinline__ uint4 pack_vec(const float* v) {
  uint4 raw;
  if constexpr (std::is_same_v<T, float>) {
    raw = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  } else {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    T2* e = reinterpret_cast<T2*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (std::is_same_v<T, __half>) {
        e[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
      } else {
        e[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
      }
    }
  }
  return raw;
}

__device__ __forceinline__ float2 pair_to_float2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 pair_to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }

template <class T>
__device__ __forceinline__ uint4 load_raw(const void* p, int64_t i) {
  return *reinterpret_cast<const uint4*>(static_cast<const T*>(p) + i);
}

template <class T>
__device__ __forceinline__ void load_vec(const void* p, int64_t i, float* v) {
  unpack_vec<T>(load_raw<T>(p, i), v);
}

template <class T>
__device__ __forceinline__ void store_vec(void* p, int64_t i, const float* v) {
  *reinterpret_cast<uint4*>(static_cast<T*>(p) + i) = pack_vec<T>(v);
}

// ---- reducing a per-thread state over the threads of a row ----
// A row is `tpr` consecutive threads of the block (a multiple of 32, at most the block). State types provide
// merge(other) and shfl_xor(state, mask). The warp's lanes combine by shuffles; for tpr > 32 each warp leaves its
// part in `parts` (one slot per warp of the block) and every thread of the row merges the row's warps in order.
// Every thread of the block must call it (it holds __syncthreads when tpr > 32), and gets its row's total.
template <class S>
__device__ __forceinline__ S row_total(S s, int tpr, S* parts) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) s.merge(S::shfl_xor(s, mask));
  if (tpr <= 32) return s;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if ((threadIdx.x & 31) == 0) parts[warp] = s;
  __syncthreads();
  const int wpr = tpr >> 5;
  const int first = warp / wpr * wpr;
  S total = parts[first];
  for (int w = first + 1; w < first + wpr; ++w) total.merge(parts[w]);
  __syncthreads();  // parts is reused by the next row
  return total;
}

}  // namespace ga::cuda::tensor_ops
