// The tensor-ops library's reductions along one axis: sum, mean, max, argmax, logsumexp.
//
// The output's dims (x without the axis) are coalesced with x's (layout.h); then one of two kernels:
//  * rows (the axis is x's closest-packed dim, e.g. the last of a dense tensor): `tpr` threads (a power of two,
//    32..512, from the axis length) reduce a row, reading 16-byte vectors when the axis is unit-stride and
//    aligned, kRowUnroll of them issued before any is used (bytes in flight are what a streaming reduction is
//    short of); up to 16 vectors per thread before a row gets more threads, so a 4096-wide row is one or two
//    warps and needs few barriers; several rows per block when rows are short; a grid-stride loop over rows.
//    The hot loop accumulates each thread's elements in the state's cheap Local form (states.cuh): a per-element
//    compare chain for max/argmax and an exp-with-rescale per element for logsumexp held them at 20-40% of copy.
//  * columns (the axis is strided and the outputs are adjacent, e.g. axis 0 of a matrix): a block of 32 x Y
//    threads takes 32 adjacent outputs, each warp reading 32 neighbours in one transaction per step of the axis
//    (16-bit x: 16 x Y threads, each reading two adjacent outputs' elements in one 4-byte load); the Y rows of
//    the block split the axis (kColUnroll loads in flight per thread) and merge in shared memory.
// Either way each output is written once by one thread, so nothing needs atomics or a workspace. One block per
// output row is the limit: a handful of very long rows (a 1-d sum of 16M elements) uses a handful of SMs; a
// split-row path would need a workspace, i.e. a plan for reductions.
//
// Accumulation follows the CPU reference (states.cuh). Instantiations: 3 input types x 4 states x 2 kernels;
// the output (any float type, or I64 for argmax) is written through a run-time type.
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

constexpr int kMaxThreads = 1024;     // the columns kernel's block (16-bit: 16 x 64)
// Rows: 512, so a thread may hold 128 registers (the unpacked chunk of kRowUnroll bf16 vectors is 32 floats;
// at 1024-thread bounds ptxas spilled logsumexp's). Longer rows give each thread more elements.
constexpr int kMaxRowThreads = 512;
constexpr int kThreadsPerSm = 2048;
constexpr int kMinRowBlock = 256;   // short rows share a block: fewer, fuller blocks
// Vectors per thread of a row before the row gets more threads: 16 makes a 4096-wide row a warp (bf16) or two
// (f32), so most rows need no __syncthreads, and each thread still runs several unrolled chunks.
constexpr int kElemsPerThread = 16;
constexpr int kRowUnroll = 4;   // 16-byte loads in flight per thread along a row
constexpr int kColUnroll = 16;  // independent loads in flight per thread along a strided axis

struct ReduceArgs {
  Dims<2> rows;  // the output rows: x's and out's offsets ([0] x, [1] out)
  int64_t count = 0;
  int64_t n = 0, axis_stride = 0;
  int64_t cols = 1, col_stride[2] = {};  // columns kernel: the innermost output dim (rows then hold the rest)
  const void* x = nullptr;
  void* out = nullptr;
  DType out_type = DType::F32;
  ops::ReduceOp op = ops::ReduceOp::Sum;
  int tpr = 32;
  bool vec = false;
  bool pairs = false;  // columns kernel, 16-bit x: two adjacent columns per 4-byte load
};

template <class S>
__device__ __forceinline__ void write(const ReduceArgs& a, const S& s, int64_t at) {
  if constexpr (std::is_same_v<S, SumState>) {
    const double v = a.op == ops::ReduceOp::Mean ? s.s / static_cast<double>(a.n) : s.s;  // n = 0: NaN
    store<Dyn>(a.out, at, static_cast<float>(v), a.out_type);
  } else if constexpr (std::is_same_v<S, MaxState>) {
    store<Dyn>(a.out, at, s.m, a.out_type);
  } else if constexpr (std::is_same_v<S, ArgMaxState>) {
    if (a.op == ops::ReduceOp::ArgMax) {
      static_cast<int64_t*>(a.out)[at] = s.i;
    } else {
      store<Dyn>(a.out, at, s.v, a.out_type);
    }
  } else {
    store<Dyn>(a.out, at, s.logsumexp(), a.out_type);
  }
}

template <class T, class S>
__global__ void __launch_bounds__(kMaxRowThreads) reduce_rows_kernel(const ReduceArgs a) {
  constexpr int V = kVec<T>;
  using Local = typename S::Local;
  __shared__ alignas(16) unsigned char smem[kMaxRowThreads / 32 * sizeof(S)];
  S* parts = reinterpret_cast<S*>(smem);
  const int rpb = static_cast<int>(blockDim.x) / a.tpr;
  const int lane = static_cast<int>(threadIdx.x) % a.tpr;
  const int64_t local = threadIdx.x / a.tpr;
  const int64_t tpr = a.tpr;
  // Every thread of the block runs every iteration (row_total holds __syncthreads): rows past the end add nothing.
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * rpb; row0 < a.count; row0 += int64_t(gridDim.x) * rpb) {
    const int64_t row = row0 + local;
    S s = S::identity();
    int64_t off[2] = {0, 0};
    if (row < a.count) {
      a.rows.offsets(row, off);
      Local acc;
      if (a.vec) {
        // The thread's q-th vector is elements (lane + q * tpr) * V + [0, V): kRowUnroll of them loaded before any
        // is used, so each thread keeps kRowUnroll * 16 bytes in flight.
        int q = 0;
        for (int64_t i0 = int64_t(lane) * V; i0 < a.n; i0 += tpr * V * kRowUnroll, q += kRowUnroll) {
          uint4 raw[kRowUnroll];
#pragma unroll
          for (int u = 0; u < kRowUnroll; ++u) {
            if (i0 + u * tpr * V < a.n) raw[u] = load_raw<T>(a.x, off[0] + i0 + u * tpr * V);
          }
          if (i0 + (kRowUnroll - 1) * tpr * V < a.n) {
            float v[kRowUnroll * V];
#pragma unroll
            for (int u = 0; u < kRowUnroll; ++u) unpack_vec<T>(raw[u], v + u * V);
            acc.template add_chunk<kRowUnroll * V>(v, q * V);
          } else {
#pragma unroll
            for (int u = 0; u < kRowUnroll; ++u) {
              if (i0 + u * tpr * V >= a.n) break;
              float v[V];
              unpack_vec<T>(raw[u], v);
              acc.template add_chunk<V>(v, (q + u) * V);
            }
          }
        }
        s = acc.to_state(lane * V < a.n, [&](int pos) { return (lane + pos / V * tpr) * V + pos % V; });
      } else {
        int q = 0;
        for (int64_t i0 = lane; i0 < a.n; i0 += tpr * kRowUnroll, q += kRowUnroll) {
          if (i0 + (kRowUnroll - 1) * tpr < a.n) {
            float v[kRowUnroll];
#pragma unroll
            for (int u = 0; u < kRowUnroll; ++u) v[u] = load<T>(a.x, off[0] + (i0 + u * tpr) * a.axis_stride, DType::F32);
            acc.template add_chunk<kRowUnroll>(v, q);
          } else {
            for (int u = 0; i0 + u * tpr < a.n; ++u) {
              const float v = load<T>(a.x, off[0] + (i0 + u * tpr) * a.axis_stride, DType::F32);
              acc.template add_chunk<1>(&v, q + u);
            }
          }
        }
        s = acc.to_state(lane < a.n, [&](int pos) { return lane + int64_t(pos) * tpr; });
      }
    }
    s = row_total(s, a.tpr, parts);
    if (row < a.count && lane == 0) write(a, s, off[1]);
  }
}

// Pairs: 16-bit elements read two adjacent columns per 4-byte load (a 2-byte load per thread left the bf16 strided
// sum at 37% of copy). The block is (32 / P) x Y threads over 32 adjacent columns.
template <class T>
inline constexpr int kColPair = sizeof(T) == 2 ? 2 : 1;

template <class T, class S>
__global__ void __launch_bounds__(kMaxThreads) reduce_cols_kernel(const ReduceArgs a) {
  constexpr int P = kColPair<T>;
  __shared__ alignas(16) unsigned char smem[kMaxThreads * P * sizeof(S)];
  S* parts = reinterpret_cast<S*>(smem);  // [Y][32]: column c of the tile at [ty][c]
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t y = blockDim.y;
  const int pairs = P > 1 && a.pairs ? P : 1;  // columns per thread
  const int64_t tiles = (a.cols + 31) / 32;
  const int64_t items = a.count * tiles;
  const int tile_cols = static_cast<int>(blockDim.x) * pairs;  // 32
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t row = item / tiles;
    const int64_t col = (item - row * tiles) * 32 + int64_t(tx) * pairs;
    int64_t off[2];
    a.rows.offsets(row, off);
    S s[P];
#pragma unroll
    for (int c = 0; c < P; ++c) s[c] = S::identity();
    if (col < a.cols) {
      const int64_t base = off[0] + col * a.col_stride[0];
      int64_t i = ty;
      bool done = false;
      if constexpr (P > 1) {
        done = pairs == P;
      }
      if constexpr (P > 1) {
       if (done) {
        using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
        const T* x = static_cast<const T*>(a.x);
        for (; i + (kColUnroll - 1) * y < a.n; i += kColUnroll * y) {
          T2 v[kColUnroll];
#pragma unroll
          for (int u = 0; u < kColUnroll; ++u) {
            v[u] = *reinterpret_cast<const T2*>(x + base + (i + u * y) * a.axis_stride);
          }
#pragma unroll
          for (int u = 0; u < kColUnroll; ++u) {
            const float2 f = pair_to_float2(v[u]);
            s[0].add(f.x, i + u * y);
            s[P - 1].add(f.y, i + u * y);
          }
        }
        for (; i < a.n; i += y) {
          const float2 f = pair_to_float2(*reinterpret_cast<const T2*>(x + base + i * a.axis_stride));
          s[0].add(f.x, i);
          s[P - 1].add(f.y, i);
        }
       }
      }
      if (!done) {
        for (; i + (kColUnroll - 1) * y < a.n; i += kColUnroll * y) {
          float v[kColUnroll];
#pragma unroll
          for (int u = 0; u < kColUnroll; ++u) v[u] = load<T>(a.x, base + (i + u * y) * a.axis_stride, DType::F32);
#pragma unroll
          for (int u = 0; u < kColUnroll; ++u) s[0].add(v[u], i + u * y);
        }
        for (; i < a.n; i += y) s[0].add(load<T>(a.x, base + i * a.axis_stride, DType::F32), i);
      }
    }
    for (int c = 0; c < pairs; ++c) parts[ty * tile_cols + tx * pairs + c] = s[c];
    __syncthreads();
    // The first row of threads writes the tile: thread t takes columns t, t + blockDim.x, ... of it.
    if (ty == 0) {
      for (int c = tx; c < tile_cols; c += static_cast<int>(blockDim.x)) {
        const int64_t oc = (item - row * tiles) * 32 + c;
        if (oc >= a.cols) break;
        S total = parts[c];
        for (int r = 1; r < static_cast<int>(y); ++r) total.merge(parts[r * tile_cols + c]);
        write(a, total, off[1] + oc * a.col_stride[1]);
      }
    }
    __syncthreads();
  }
}

template <class T, class S>
void launch_typed(const ReduceArgs& a, bool columns, cudaStream_t stream) {
  const int sms = sm_count();
  if (columns) {
    const int64_t items = a.count * ((a.cols + 31) / 32);
    const int p = a.pairs ? kColPair<T> : 1;
    const int x = 32 / p;
    // Enough threads to fill the GPU: split the axis over more rows of the block when there are few outputs.
    int y = 1;
    while (y < kMaxThreads / x && items * x * y < int64_t(sms) * kThreadsPerSm && y < a.n) y *= 2;
    const int grid = static_cast<int>(std::min<int64_t>(items, int64_t(sms) * kThreadsPerSm / (x * y)));
    reduce_cols_kernel<T, S><<<grid, dim3(x, y), 0, stream>>>(a);
  } else {
    const int block = std::max(a.tpr, kMinRowBlock);
    const int64_t blocks = (a.count + block / a.tpr - 1) / (block / a.tpr);
    const int grid = static_cast<int>(std::min<int64_t>(blocks, int64_t(sms) * kThreadsPerSm / block));
    reduce_rows_kernel<T, S><<<grid, block, 0, stream>>>(a);
  }
  GA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_op(const ReduceArgs& a, bool columns, cudaStream_t stream) {
  switch (a.op) {
    case ops::ReduceOp::Sum:
    case ops::ReduceOp::Mean:
      return launch_typed<T, SumState>(a, columns, stream);
    case ops::ReduceOp::Max:
      return launch_typed<T, MaxState>(a, columns, stream);
    case ops::ReduceOp::ArgMax:
      return launch_typed<T, ArgMaxState>(a, columns, stream);
    case ops::ReduceOp::LogSumExp:
      return launch_typed<T, LseState>(a, columns, stream);
  }
}

}  // namespace

ops::Status reduce(const ReduceParams& p, void* stream) {
  return to_status([&] {
    const char* op = ops::reduce_name(p.op);
    require_cuda_device(op);
    require_device_memory(p.x, op, "x");
    require_device_memory(p.out, op, "out");
    GA_CHECK(p.axis >= 0 && p.axis < p.x.ndim && p.out.ndim == p.x.ndim - 1, InvalidArgument, op,
             ": axis and ranks do not match");
    // x's dims without the axis, beside out's strides over the same dims.
    int64_t shape[ops::kMaxDims] = {}, xs[ops::kMaxDims] = {};
    for (int d = 0, r = 0; d < p.x.ndim; ++d) {
      if (d == p.axis) continue;
      shape[r] = p.x.shape[d];
      xs[r] = p.x.strides[d];
      ++r;
    }
    const int64_t* strides[2] = {xs, p.out.strides};
    ReduceArgs a;
    a.rows = coalesce<2>(p.out.ndim, shape, strides);
    a.count = a.rows.count();
    if (a.count == 0) return;
    a.n = p.x.shape[p.axis];
    a.axis_stride = a.n > 1 ? p.x.strides[p.axis] : 0;
    a.x = p.x.data;
    a.out = p.out.data;
    a.out_type = p.out.type;
    a.op = p.op;
    // Columns when adjacent outputs sit closer in x than adjacent elements of the axis.
    const int nd = a.rows.ndim;
    const bool columns = a.n > 1 && nd > 0 && std::llabs(a.rows.stride[0][nd - 1]) < std::llabs(a.axis_stride);
    if (columns) {
      const Split<2> s = split_last(a.rows);
      a.rows = s.outer;
      a.count = s.outer.count();
      a.cols = s.n;
      a.col_stride[0] = s.inner_stride[0];
      a.col_stride[1] = s.inner_stride[1];
      // Pairs: 16-bit x, unit-stride columns of an even count, every pair 4-byte aligned.
      bool pairs = p.x.type != DType::F32 && a.cols % 2 == 0 && a.col_stride[0] == 1 && a.axis_stride % 2 == 0 &&
                   aligned(p.x.data, 4);
      for (int d = 0; pairs && d < a.rows.ndim; ++d) pairs = a.rows.stride[0][d] % 2 == 0;
      a.pairs = pairs;
    } else {
      const int v = p.x.type == DType::F32 ? kVec<float> : kVec<__half>;
      bool vec = a.axis_stride == 1 && a.n % v == 0 && aligned(p.x.data, kVectorBytes);
      for (int d = 0; vec && d < nd; ++d) vec = a.rows.stride[0][d] % v == 0;
      a.vec = vec;
      const int64_t units = vec ? a.n / v : a.n;  // loads per row
      while (a.tpr < kMaxRowThreads && int64_t(a.tpr) * kElemsPerThread < units) a.tpr *= 2;
    }
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    switch (p.x.type) {
      case DType::F16:
        return launch_op<__half>(a, columns, st);
      case DType::BF16:
        return launch_op<__nv_bfloat16>(a, columns, st);
      default:
        return launch_op<float>(a, columns, st);
    }
  });
}

}  // namespace ga::cuda::tensor_ops
