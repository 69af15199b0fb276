// The tensor-ops library's fused row ops along the last axis: rms_norm, layer_norm, softmax.
//
// One row per group of `tpr` threads (a power of two, 32..512, from the row's length: a warp per row for short
// rows, several rows per block, up to a whole block for long ones), a grid-stride loop over rows. Two passes over
// the row: the statistics (states.cuh: sum of squares, sum and sum of squares, or the running max with its
// rescaled sum of exps, all merged across the row's threads), then the normalised values. A row of up to
// kCacheVecs 16-byte vectors per thread (16384 floats, 32768 bf16 at 512 threads) is loaded once into registers,
// all loads issued up front, and both passes run from there; a longer row is read a second time (L2 at best).
//
// The formulas are backends/cpu/ops.cpp's, statistics in double: rms_norm x * (1 / sqrt(mean x^2 + eps)) * w;
// layer_norm (x - mean) * (1 / sqrt(var + eps)) * w + b with the biased variance (here E[x^2] - mean^2 in double,
// the CPU takes a second pass; both are exact to float32); softmax exp(x - max) * (1 / sum), NaN for a row whose
// max is not finite, as the CPU's exp(inf - inf) gives. x and out of one type with unit-stride, aligned rows read
// and write 16-byte vectors; any other layout or type mix goes element by element (Dyn). weight and bias of x's
// type are read as 16-byte vectors too (a run-time type switch per element cost layer_norm most), any other
// type element by element. softmax's exps are __expf (arguments <= 0: a few float32 ulp, inside every
// output type's tolerance); the statistics' exps are the states' (states.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/tensor_ops/device.cuh"
#include "backends/cuda/kernels/tensor_ops/host.h"
#include "backends/cuda/kernels/tensor_ops/layout.h"
#include "backends/cuda/kernels/tensor_ops/states.cuh"
#include "backends/cuda/kernels/tensor_ops/tensor_ops.h"

namespace ga::cuda::tensor_ops {
namespace {

// 512, not 1024: the register-cached row needs ~32 registers of cache per thread, and 1024-thread blocks cap a
// thread at 64 registers (ptxas spilled the cached path there). Longer rows give each thread more elements.
constexpr int kMaxThreads = 512;
constexpr int kThreadsPerSm = 2048;
constexpr int kMinRowBlock = 256;
constexpr int kElemsPerThread = 4;
// A row of at most kCacheVecs 16-byte vectors per thread (tpr <= 512) stays in registers between the statistics
// and the outputs: one DRAM read of x instead of two (the second read missed L1/L2 often enough to hold the norms
// at 30-65% of copy), and all of a thread's loads are issued before the first is used.
constexpr int kCacheVecs = 8;

struct RowArgs {
  Dims<2> rows;  // [0] x, [1] out
  int64_t count = 0;
  int64_t n = 0, x_stride = 0, out_stride = 0;
  const void* x = nullptr;
  void* out = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  int64_t w_stride = 0, b_stride = 0;
  DType x_type = DType::F32, out_type = DType::F32, w_type = DType::F32, b_type = DType::F32;
  float eps = 0.0f;
  int tpr = 32;
  bool vec = false;
  bool cached = false;  // vec, and the row fits kCacheVecs vectors per thread
  bool wb_vec = false;  // weight and bias (those present) of x's type, unit stride, 16-byte aligned
};

template <RowOp Op>
using StateOf = std::conditional_t<Op == RowOp::Softmax, LseState, MomentsState>;

// What the second pass needs from the statistics.
struct Coef {
  float a = 0.0f;  // rms_norm / layer_norm: the scale; softmax: the row's max
  float b = 0.0f;  // layer_norm: the mean; softmax: 1 / sum
};

template <RowOp Op>
__device__ __forceinline__ Coef coef_of(const StateOf<Op>& s, const RowArgs& a) {
  Coef c;
  const double n = static_cast<double>(a.n);
  if constexpr (Op == RowOp::RmsNorm) {
    c.a = static_cast<float>(1.0 / sqrt(s.sq / n + static_cast<double>(a.eps)));
  } else if constexpr (Op == RowOp::LayerNorm) {
    const double mean = s.s / n;
    c.b = static_cast<float>(mean);
    const float var = static_cast<float>(fmax(s.sq / n - mean * mean, 0.0));
    c.a = 1.0f / sqrtf(var + a.eps);
  } else {
    c.a = s.m;
    c.b = isfinite(s.m) ? static_cast<float>(1.0 / s.s) : NAN;
  }
  return c;
}

template <RowOp Op>
__device__ __forceinline__ float value(const RowArgs& a, const Coef& c, float x, int64_t i) {
  if constexpr (Op == RowOp::RmsNorm) {
    return x * c.a * load<Dyn>(a.weight, i * a.w_stride, a.w_type);
  } else if constexpr (Op == RowOp::LayerNorm) {
    float y = (x - c.b) * c.a;
    if (a.weight != nullptr) y *= load<Dyn>(a.weight, i * a.w_stride, a.w_type);
    if (a.bias != nullptr) y += load<Dyn>(a.bias, i * a.b_stride, a.b_type);
    return y;
  } else {
    return expf(x - c.a) * c.b;
  }
}

// V outputs at elements [i, i + V) of the row from x's v (in place), the weight and bias as 16-byte vectors of T
// when wb_vec (else element by element in their own types).
template <class T, RowOp Op>
__device__ __forceinline__ void values_vec(const RowArgs& a, const Coef& c, float* v, int64_t i) {
  constexpr int V = kVec<T>;
  if constexpr (Op == RowOp::Softmax) {
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = __expf(v[k] - c.a) * c.b;
  } else {
    if (a.wb_vec) {
      float w[V], b[V];
      if (a.weight != nullptr) load_vec<T>(a.weight, i, w);
      if (Op == RowOp::LayerNorm && a.bias != nullptr) load_vec<T>(a.bias, i, b);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if constexpr (Op == RowOp::RmsNorm) {
          v[k] = v[k] * c.a * w[k];
        } else {
          float y = (v[k] - c.b) * c.a;
          if (a.weight != nullptr) y *= w[k];
          if (a.bias != nullptr) y += b[k];
          v[k] = y;
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = value<Op>(a, c, v[k], i + k);
    }
  }
}

template <class T, RowOp Op>
__global__ void __launch_bounds__(kMaxThreads) row_kernel(const RowArgs a) {
  using S = StateOf<Op>;
  constexpr int V = kVec<T>;
  __shared__ alignas(16) unsigned char smem[kMaxThreads / 32 * sizeof(S)];
  S* parts = reinterpret_cast<S*>(smem);
  const int rpb = static_cast<int>(blockDim.x) / a.tpr;
  const int lane = static_cast<int>(threadIdx.x) % a.tpr;
  const int64_t local = threadIdx.x / a.tpr;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * rpb; row0 < a.count; row0 += int64_t(gridDim.x) * rpb) {
    const int64_t row = row0 + local;
    const bool live = row < a.count;  // rows past the end still join row_total's barriers
    S s = S::identity();
    int64_t off[2] = {0, 0};
    if (live) a.rows.offsets(row, off);
    if constexpr (V > 1) {
      if (a.cached) {
        // The thread's vectors u: elements (lane + u * tpr) * V + [0, V), all loaded before any is used.
        uint4 raw[kCacheVecs];
        typename S::Local acc;
        if (live) {
#pragma unroll
          for (int u = 0; u < kCacheVecs; ++u) {
            const int64_t i = (lane + int64_t(u) * a.tpr) * V;
            if (i < a.n) raw[u] = load_raw<T>(a.x, off[0] + i);
          }
#pragma unroll
          for (int u = 0; u < kCacheVecs; ++u) {
            const int64_t i = (lane + int64_t(u) * a.tpr) * V;
            if (i >= a.n) break;
            float v[V];
            unpack_vec<T>(raw[u], v);
            acc.template add_chunk<V>(v, 0);
          }
          s = acc.to_state(true, [](int) { return int64_t(0); });
        }
        s = row_total(s, a.tpr, parts);
        if (!live) continue;
        const Coef c = coef_of<Op>(s, a);
#pragma unroll
        for (int u = 0; u < kCacheVecs; ++u) {
          const int64_t i = (lane + int64_t(u) * a.tpr) * V;
          if (i >= a.n) break;
          float v[V];
          unpack_vec<T>(raw[u], v);
          values_vec<T, Op>(a, c, v, i);
          store_vec<T>(a.out, off[1] + i, v);
        }
        continue;
      }
      if (live && a.vec) {
        typename S::Local acc;
#pragma unroll 4
        for (int64_t i = int64_t(lane) * V; i < a.n; i += int64_t(a.tpr) * V) {
          float v[V];
          load_vec<T>(a.x, off[0] + i, v);
          acc.template add_chunk<V>(v, 0);
        }
        s = acc.to_state(true, [](int) { return int64_t(0); });
      }
    }
    if (live && !(V > 1 && a.vec)) {
#pragma unroll 4
      for (int64_t i = lane; i < a.n; i += a.tpr) s.add(load<T>(a.x, off[0] + i * a.x_stride, a.x_type), i);
    }
    s = row_total(s, a.tpr, parts);
    if (!live) continue;
    const Coef c = coef_of<Op>(s, a);
    if constexpr (V > 1) {
      if (a.vec) {
        for (int64_t i = int64_t(lane) * V; i < a.n; i += int64_t(a.tpr) * V) {
          float v[V];
          load_vec<T>(a.x, off[0] + i, v);
          values_vec<T, Op>(a, c, v, i);
          store_vec<T>(a.out, off[1] + i, v);
        }
        continue;
      }
    }
    for (int64_t i = lane; i < a.n; i += a.tpr) {
      const float y = value<Op>(a, c, load<T>(a.x, off[0] + i * a.x_stride, a.x_type), i);
      store<T>(a.out, off[1] + i * a.out_stride, y, a.out_type);
    }
  }
}

template <RowOp Op>
void launch_op(const RowArgs& a, DType one_type, bool mixed, cudaStream_t stream) {
  const int block = std::max(a.tpr, kMinRowBlock);
  const int rpb = block / a.tpr;
  const int64_t blocks = (a.count + rpb - 1) / rpb;
  const int grid = static_cast<int>(std::min<int64_t>(blocks, int64_t(sm_count()) * kThreadsPerSm / block));
  if (mixed) {
    row_kernel<Dyn, Op><<<grid, block, 0, stream>>>(a);
  } else if (one_type == DType::F32) {
    row_kernel<float, Op><<<grid, block, 0, stream>>>(a);
  } else if (one_type == DType::F16) {
    row_kernel<__half, Op><<<grid, block, 0, stream>>>(a);
  } else {
    row_kernel<__nv_bfloat16, Op><<<grid, block, 0, stream>>>(a);
  }
  GA_CUDA_CHECK_LAUNCH();
}

const char* row_op_name(RowOp op) {
  switch (op) {
    case RowOp::RmsNorm:
      return "rms_norm";
    case RowOp::LayerNorm:
      return "layer_norm";
    case RowOp::Softmax:
      return "softmax";
  }
  return "?";
}

}  // namespace

ops::Status row_op(const RowParams& p, void* stream) {
  return to_status([&] {
    const char* op = row_op_name(p.op);
    require_cuda_device(op);
    require_device_memory(p.x, op, "x");
    require_device_memory(p.out, op, "out");
    if (p.weight.data != nullptr) require_device_memory(p.weight, op, "weight");
    if (p.bias.data != nullptr) require_device_memory(p.bias, op, "bias");
    GA_CHECK(p.x.ndim >= 1 && p.out.ndim == p.x.ndim, InvalidArgument, op, ": x and out must have one rank >= 1");
    GA_CHECK(p.op != RowOp::RmsNorm || p.weight.data != nullptr, InvalidArgument, op, ": weight is required");
    const int outer = p.x.ndim - 1;
    const int64_t* strides[2] = {p.x.strides, p.out.strides};
    RowArgs a;
    a.rows = coalesce<2>(outer, p.x.shape, strides);
    a.count = a.rows.count();
    a.n = p.x.shape[outer];
    if (a.count == 0 || a.n == 0) return;
    a.x_stride = p.x.strides[outer];
    a.out_stride = p.out.strides[outer];
    a.x = p.x.data;
    a.out = p.out.data;
    a.x_type = p.x.type;
    a.out_type = p.out.type;
    a.weight = p.weight.data;
    a.bias = p.bias.data;
    a.w_type = p.weight.type;
    a.b_type = p.bias.type;
    a.w_stride = p.weight.data != nullptr ? p.weight.strides[0] : 0;
    a.b_stride = p.bias.data != nullptr ? p.bias.strides[0] : 0;
    a.eps = p.eps;
    const bool mixed = p.x.type != p.out.type;
    const int v = mixed ? 1 : p.x.type == DType::F32 ? kVec<float> : kVec<__half>;
    bool vec = v > 1 && a.n % v == 0 && a.x_stride == 1 && a.out_stride == 1 && aligned(a.x, kVectorBytes) &&
               aligned(a.out, kVectorBytes);
    for (int d = 0; vec && d < a.rows.ndim; ++d) vec = a.rows.stride[0][d] % v == 0 && a.rows.stride[1][d] % v == 0;
    a.vec = vec;
    const int64_t units = vec ? a.n / v : a.n;
    // Cached: the fewest threads per row (>= 32) that hold the row in kCacheVecs vectors each.
    a.cached = vec && units <= int64_t(kMaxThreads) * kCacheVecs;
    const int per_thread = a.cached ? kCacheVecs : kElemsPerThread;
    while (a.tpr < kMaxThreads && int64_t(a.tpr) * per_thread < units) a.tpr *= 2;
    bool wb_vec = vec;
    for (const ops::TensorView* t : {&p.weight, &p.bias}) {
      if (t->data == nullptr) continue;
      wb_vec = wb_vec && t->type == p.x.type && t->strides[0] == 1 && aligned(t->data, kVectorBytes);
    }
    a.wb_vec = wb_vec;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    switch (p.op) {
      case RowOp::RmsNorm:
        return launch_op<RowOp::RmsNorm>(a, p.x.type, mixed, st);
      case RowOp::LayerNorm:
        return launch_op<RowOp::LayerNorm>(a, p.x.type, mixed, st);
      case RowOp::Softmax:
        return launch_op<RowOp::Softmax>(a, p.x.type, mixed, st);
    }
  });
}

}  // namespace ga::cuda::tensor_ops
