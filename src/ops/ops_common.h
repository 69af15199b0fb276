// What every tensor op shares: turning a thrown ga::Error into the Status the API returns, the device check,
// element loads and stores in any float type, strided offsets and the thread-pool loop. Internal to src/ops.
#pragma once

#include <cstdint>
#include <functional>
#include <new>
#include <string>

#include "backends/cpu/activation.h"
#include "core/thread_pool.h"
#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"
#include "gpu_accel/tensor_ops.h"

namespace ga::ops::detail {

// Runs fn, returning its failure as a Status (the library's calls never throw).
template <typename Fn>
Status guarded(Fn&& fn) {
  try {
    fn();
    return Status();
  } catch (const Error& e) {
    return Status(e);
  } catch (const std::bad_alloc&) {
    return Status(Error(ErrorKind::OutOfMemory, "tensor op: out of host memory"));
  }
}

// For the ops whose only implementation is the CPU's (gemm, conv2d): a CUDA request is refused, never run elsewhere.
inline void require_cpu(Device device, const char* op) {
  GA_CHECK(device == Device::Cpu, Unsupported, op, ": no CUDA implementation yet (Device::Cpu only)");
}

// For the ops with both implementations: the Exec names one of them.
inline void require_device(Device device, const char* op) {
  GA_CHECK(device == Device::Cpu || device == Device::Cuda, InvalidArgument, op, ": unknown device ",
           static_cast<int>(device));
}

inline void require_float_type(DType t, const char* op, const char* what) {
  GA_CHECK(is_float_type(t), InvalidArgument, op, ": ", what, " must be F32, F16 or BF16, got ", dtype_name(t));
}

inline size_t element_bytes(DType t) {
  return t == DType::F32 ? 4 : t == DType::I64 ? 8 : 2;
}

// Element i of a float-typed array, as float32 (exact for every type).
inline float load(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::F16:
      return fp16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

// Rounds v once to the array's type (nearest even).
inline void store(DType t, void* base, int64_t i, float v) {
  switch (t) {
    case DType::F16:
      static_cast<uint16_t*>(base)[i] = f32_to_fp16(v);
      break;
    case DType::BF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16(v);
      break;
    default:
      static_cast<float*>(base)[i] = v;
  }
}

inline float activate(Activation a, float x) {
  switch (a) {
    case Activation::None:
      return x;
    case Activation::Relu:
      return cpu::relu(x);
    case Activation::Gelu:
      return cpu::gelu(x);
    case Activation::GeluTanh:
      return cpu::gelu_tanh(x);
    case Activation::Silu:
      return cpu::silu(x);
    case Activation::Sigmoid:
      return cpu::sigmoid(x);
    case Activation::Tanh:
      return std::tanh(x);
  }
  return x;
}

inline int pool_threads(ThreadPool* pool) {
  return pool != nullptr ? pool->size() : 1;
}

// The offset (elements) of the linear index `linear` of the first `ndim` dims of shape, under strides
// (row-major order of the indices).
inline int64_t offset_of(int64_t linear, const int64_t* shape, const int64_t* strides, int ndim) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    const int64_t i = linear % shape[d];
    linear /= shape[d];
    off += i * strides[d];
  }
  return off;
}

inline int64_t element_count(const TensorView& v) {
  int64_t n = 1;
  for (int d = 0; d < v.ndim; ++d) n *= v.shape[d];
  return n;
}

// A view's rank, shape and pointer are sane (every op checks its operands with this first).
void check_view(const TensorView& v, const char* op, const char* name);
void check_same_shape(const TensorView& a, const TensorView& b, const char* op, const char* a_name, const char* b_name);
std::string shape_text(const TensorView& v);

}  // namespace ga::ops::detail
