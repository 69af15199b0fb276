// The tensor-ops library's elementwise kernels: out = act(x) and out = a + b / a * b with broadcasting.
//
// Bandwidth-bound, so the launcher first coalesces the operands' dims (layout.h): a dense tensor becomes one row,
// a bias broadcast over rows becomes [rows][n] with a stride-0 dim. The kernel walks tiles of the last dim
// (blockDim * kVec * kUnroll elements) with a grid-stride loop over (row, tile); a row's offsets are computed once
// per tile. When every operand is one type, steps through the last dim with stride 1 (an input may be 0: broadcast
// along it) and every row starts 16-byte aligned, each thread issues kUnroll 16-byte loads per operand before it
// computes anything (one load in flight per thread leaves HBM idle: relu reached ~75% of copy that way); otherwise
// the same tile is read element by element through the strides (Dyn: per-operand types at run time).
//
// The op is a template parameter of the tile body, picked by one switch at the top of the kernel: a switch per
// element cost the activations more than their math. The activations are the CPU reference's formulas
// (backends/cpu/activation.h) in float32; F32 outputs use the accurate libm functions, 16-bit outputs (whose
// rounding is 2^-9..2^-12) exp through __expf and __fdividef, a few ulp of float32, far below one output ulp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/activation.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/tensor_ops/device.cuh"
#include "backends/cuda/kernels/tensor_ops/host.h"
#include "backends/cuda/kernels/tensor_ops/layout.h"
#include "backends/cuda/kernels/tensor_ops/tensor_ops.h"

namespace ga::cuda::tensor_ops {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kThreadsPerSm = 2048;  // a full SM of resident threads
constexpr int kUnroll = 4;           // 16-byte vectors per thread and operand per tile, loaded before use

// K operands: [0] the output, [1, K) the inputs.
template <int K>
struct EwArgs {
  Dims<K> outer;  // every dim but the last
  int64_t n = 0;  // the last dim
  int64_t inner_stride[K] = {};
  int64_t rows = 0, tiles_per_row = 0;
  void* out = nullptr;
  const void* in[K - 1] = {};
  DType type[K] = {};
  int code = 0;  // ops::Activation (K = 2) or ops::BinaryOp (K = 3)
  bool vec = false;
};

// Fast: the output is 16-bit, so float32's last few ulp do not reach it.
template <ops::Activation A, bool Fast>
__device__ __forceinline__ float activate(float x) {
  if constexpr (A == ops::Activation::Relu) {
    return x > 0.0f ? x : 0.0f;
  } else if constexpr (A == ops::Activation::Gelu) {
    return 0.5f * x * (1.0f + erff(x * cpu::kInvSqrt2));
  } else if constexpr (A == ops::Activation::GeluTanh) {
    return 0.5f * x * (1.0f + tanhf(cpu::kSqrt2OverPi * (x + cpu::kGeluCubic * x * x * x)));
  } else if constexpr (A == ops::Activation::Silu) {
    if constexpr (Fast) return __fdividef(x, 1.0f + __expf(-x));
    return x / (1.0f + expf(-x));
  } else if constexpr (A == ops::Activation::Sigmoid) {
    if constexpr (Fast) return __fdividef(1.0f, 1.0f + __expf(-x));
    return 1.0f / (1.0f + expf(-x));
  } else if constexpr (A == ops::Activation::Tanh) {
    return tanhf(x);
  } else {
    return x;
  }
}

// The op of a K-operand call: Code is an ops::Activation (K = 2) or an ops::BinaryOp (K = 3).
template <int K, int Code, bool Fast>
__device__ __forceinline__ float apply(const float* x) {
  if constexpr (K == 2) {
    return activate<static_cast<ops::Activation>(Code), Fast>(x[0]);
  } else if constexpr (static_cast<ops::BinaryOp>(Code) == ops::BinaryOp::Add) {
    return x[0] + x[1];
  } else {
    return x[0] * x[1];
  }
}

template <class T, int K, int Code>
__device__ __forceinline__ void elementwise_body(const EwArgs<K>& a) {
  constexpr int V = kVec<T>;
  constexpr bool kFast = !std::is_same_v<T, float> && !std::is_same_v<T, Dyn>;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * V * kUnroll;
  const int64_t items = a.rows * a.tiles_per_row;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    // A dense tensor is one row: no 64-bit division per tile.
    const int64_t row = a.rows == 1 ? 0 : item / a.tiles_per_row;
    const int64_t col0 = (item - row * a.tiles_per_row) * tile;
    int64_t off[K] = {};
    if (a.rows != 1) a.outer.offsets(row, off);
    if constexpr (V > 1) {
      if (a.vec) {
        // Vector u of the thread: elements col0 + (u * blockDim + thread) * V, so each u is one coalesced sweep.
        uint4 raw[K - 1][kUnroll];
        float bcast[K - 1];
#pragma unroll
        for (int k = 1; k < K; ++k) {
          if (a.inner_stride[k] == 0) {  // broadcast along the last dim: one value for every vector
            bcast[k - 1] = load<T>(a.in[k - 1], off[k], a.type[k]);
            continue;
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int64_t i = col0 + (static_cast<int64_t>(u) * blockDim.x + threadIdx.x) * V;
            if (i < a.n) raw[k - 1][u] = load_raw<T>(a.in[k - 1], off[k] + i);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t i = col0 + (static_cast<int64_t>(u) * blockDim.x + threadIdx.x) * V;
          if (i >= a.n) break;
          float x[K - 1][V];
#pragma unroll
          for (int k = 1; k < K; ++k) {
            if (a.inner_stride[k] == 0) {
#pragma unroll
              for (int v = 0; v < V; ++v) x[k - 1][v] = bcast[k - 1];
            } else {
              unpack_vec<T>(raw[k - 1][u], x[k - 1]);
            }
          }
          float y[V];
#pragma unroll
          for (int v = 0; v < V; ++v) {
            float xv[K - 1];
#pragma unroll
            for (int k = 0; k < K - 1; ++k) xv[k] = x[k][v];
            y[v] = apply<K, Code, kFast>(xv);
          }
          store_vec<T>(a.out, off[0] + i, y);
        }
        continue;
      }
    }
#pragma unroll
    for (int v = 0; v < V * kUnroll; ++v) {
      const int64_t i = col0 + static_cast<int64_t>(v) * blockDim.x + threadIdx.x;
      if (i >= a.n) break;
      float xv[K - 1];
#pragma unroll
      for (int k = 1; k < K; ++k) xv[k - 1] = load<T>(a.in[k - 1], off[k] + i * a.inner_stride[k], a.type[k]);
      store<T>(a.out, off[0] + i * a.inner_stride[0], apply<K, Code, kFast>(xv), a.type[0]);
    }
  }
}

template <class T, int K>
__global__ void __launch_bounds__(kMaxThreads) elementwise_kernel(const EwArgs<K> a) {
  using ops::Activation;
  if constexpr (K == 2) {
    switch (static_cast<Activation>(a.code)) {
      case Activation::Relu:
        return elementwise_body<T, K, static_cast<int>(Activation::Relu)>(a);
      case Activation::Gelu:
        return elementwise_body<T, K, static_cast<int>(Activation::Gelu)>(a);
      case Activation::GeluTanh:
        return elementwise_body<T, K, static_cast<int>(Activation::GeluTanh)>(a);
      case Activation::Silu:
        return elementwise_body<T, K, static_cast<int>(Activation::Silu)>(a);
      case Activation::Sigmoid:
        return elementwise_body<T, K, static_cast<int>(Activation::Sigmoid)>(a);
      case Activation::Tanh:
        return elementwise_body<T, K, static_cast<int>(Activation::Tanh)>(a);
      default:
        return elementwise_body<T, K, static_cast<int>(Activation::None)>(a);
    }
  } else if (static_cast<ops::BinaryOp>(a.code) == ops::BinaryOp::Add) {
    elementwise_body<T, K, static_cast<int>(ops::BinaryOp::Add)>(a);
  } else {
    elementwise_body<T, K, static_cast<int>(ops::BinaryOp::Mul)>(a);
  }
}

// views[0] is the output, views[1..] the inputs, all of the output's rank and shape (broadcasts as stride 0).
template <int K>
void launch(const char* op, int code, const ops::TensorView* views, void* stream) {
  require_cuda_device(op);
  static constexpr const char* kNames[3] = {"out", "a", "b"};
  for (int k = 0; k < K; ++k) require_device_memory(views[k], op, K == 2 && k == 1 ? "x" : kNames[k]);
  const ops::TensorView& out = views[0];
  const int64_t* strides[K];
  for (int k = 0; k < K; ++k) strides[k] = views[k].strides;
  const Split<K> s = split_last(coalesce<K>(out.ndim, out.shape, strides));
  EwArgs<K> a;
  a.outer = s.outer;
  a.n = s.n;
  a.rows = s.outer.count();
  if (a.n == 0 || a.rows == 0) return;
  a.out = out.data;
  a.code = code;
  bool one_type = true;
  for (int k = 0; k < K; ++k) {
    a.type[k] = views[k].type;
    a.inner_stride[k] = s.inner_stride[k];
    one_type = one_type && views[k].type == out.type;
    if (k > 0) a.in[k - 1] = views[k].data;
  }
  const int v = !one_type ? 1 : out.type == DType::F32 ? kVec<float> : kVec<__half>;  // the kernel's kVec<T>
  // The vector path: unit inner strides (a broadcast input 0), rows of whole vectors, 16-byte aligned starts.
  bool vec = v > 1 && a.n % v == 0 && s.inner_stride[0] == 1;
  for (int k = 0; vec && k < K; ++k) {
    if (k > 0 && s.inner_stride[k] == 0) continue;  // one value per row (a scalar load): any alignment
    vec = aligned(views[k].data, kVectorBytes) && (k == 0 || s.inner_stride[k] == 1);
    for (int d = 0; vec && d < s.outer.ndim; ++d) vec = s.outer.stride[k][d] % v == 0;
  }
  a.vec = vec;
  // Threads per block: enough for one tile to cover a row (a [rows][4096] bf16 add of a bias would idle half of a
  // 256-thread block's loads otherwise), at most kMaxThreads; the grid fills every SM's threads once.
  const int64_t per_thread = int64_t(v) * kUnroll;
  int threads = 32;
  while (threads < kMaxThreads && threads * per_thread < a.n) threads *= 2;
  const int64_t tile = threads * per_thread;
  a.tiles_per_row = (a.n + tile - 1) / tile;
  const int64_t items = a.rows * a.tiles_per_row;
  const int grid = static_cast<int>(std::min<int64_t>(items, int64_t(sm_count()) * (kThreadsPerSm / threads)));
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (!one_type) {
    elementwise_kernel<Dyn, K><<<grid, threads, 0, st>>>(a);
  } else if (out.type == DType::F32) {
    elementwise_kernel<float, K><<<grid, threads, 0, st>>>(a);
  } else if (out.type == DType::F16) {
    elementwise_kernel<__half, K><<<grid, threads, 0, st>>>(a);
  } else {
    elementwise_kernel<__nv_bfloat16, K><<<grid, threads, 0, st>>>(a);
  }
  GA_CUDA_CHECK_LAUNCH();
}

}  // namespace

ops::Status unary(const UnaryParams& p, void* stream) {
  return to_status([&] {
    const ops::TensorView views[2] = {p.out, p.x};
    launch<2>(ops::activation_name(p.act), static_cast<int>(p.act), views, stream);
  });
}

ops::Status binary(const BinaryParams& p, void* stream) {
  return to_status([&] {
    const ops::TensorView views[3] = {p.out, p.a, p.b};
    launch<3>(p.op == ops::BinaryOp::Add ? "add" : "mul", static_cast<int>(p.op), views, stream);
  });
}

}  // namespace ga::cuda::tensor_ops
