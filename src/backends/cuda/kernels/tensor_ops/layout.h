// Host-side index arithmetic shared by the tensor-op launchers: merging the dims of several strided views that
// walk one index space (TensorIterator-style coalescing), so a dense tensor becomes one long row the kernels read
// with 16-byte vectors and a broadcast bias becomes [rows][n] with one stride-0 dim; and the offsets of a row.
//
// Dims<K> is also what the kernels receive: K operands' strides over one shape of up to kMaxDims dims.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "gpu_accel/tensor_ops.h"

#if defined(__CUDACC__)
#define GA_TOPS_HD __host__ __device__
#else
#define GA_TOPS_HD
#endif

namespace ga::cuda::tensor_ops {

using ops::kMaxDims;

template <int K>
struct Dims {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[K][kMaxDims] = {};

  int64_t count() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }

  // The element offsets of linear index `linear` (row-major over shape) in each operand.
  GA_TOPS_HD void offsets(int64_t linear, int64_t* off) const {
    for (int k = 0; k < K; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t i = linear % shape[d];
      linear /= shape[d];
      for (int k = 0; k < K; ++k) off[k] += i * stride[k][d];
    }
  }
};

// The dims of `shape` (ndim of them) with operand k's strides strides[k][d]: size-1 dims dropped, and dim d merged
// into d+1 wherever every operand has stride[d] == stride[d+1] * shape[d+1]. An empty shape stays 0-d (count 1).
template <int K>
Dims<K> coalesce(int ndim, const int64_t* shape, const int64_t* const* strides) {
  Dims<K> out;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    const int o = out.ndim;
    bool merge = o > 0;
    for (int k = 0; merge && k < K; ++k) merge = out.stride[k][o - 1] == strides[k][d] * shape[d];
    if (merge) {
      out.shape[o - 1] *= shape[d];
      for (int k = 0; k < K; ++k) out.stride[k][o - 1] = strides[k][d];
      continue;
    }
    out.shape[o] = shape[d];
    for (int k = 0; k < K; ++k) out.stride[k][o] = strides[k][d];
    ++out.ndim;
  }
  return out;
}

// The last dim split off: `outer` keeps dims [0, ndim - 1), inner is the last one (n = 1, strides 0 when 0-d).
template <int K>
struct Split {
  Dims<K> outer;
  int64_t n = 1;
  int64_t inner_stride[K] = {};
};

template <int K>
Split<K> split_last(const Dims<K>& d) {
  Split<K> s;
  s.outer = d;
  if (d.ndim == 0) return s;
  s.outer.ndim = d.ndim - 1;
  s.n = d.shape[d.ndim - 1];
  for (int k = 0; k < K; ++k) s.inner_stride[k] = d.stride[k][d.ndim - 1];
  return s;
}

}  // namespace ga::cuda::tensor_ops
