// The per-thread states the reduction and row kernels accumulate and merge (device.cuh's row_total): aggregates
// with identity() (they live in __shared__ arrays, which take no constructors), add(value, index) for the next
// element, merge(other) for another thread's part, shfl_xor for the warp's butterfly.
//
// The row kernels' hot loop accumulates a thread's own elements in a `Local` (add_chunk over a register chunk of
// N elements, positions as the thread's own 32-bit ordinal of its elements), which is cheaper per element than the
// general state: max is an fmax with a sticky NaN, argmax a compare and two selects, logsumexp one max per chunk
// and one exp per element. to_state(any, map) turns it into the state (map: the thread's ordinal -> the axis index;
// any: whether the thread saw an element).
//
// The rules are the CPU reference's (src/ops/reduce.cpp, backends/cpu/ops.cpp): sums in double; argmax keeps the
// first maximum and a NaN beats every number (the first NaN wins); logsumexp/softmax use a running maximum with the
// sum rescaled when it grows, exp in float32 (its terms are float-accurate, the sum double) and NaN sticky in s.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace ga::cuda::tensor_ops {

constexpr unsigned kFullMask = 0xffffffffu;

struct SumState {
  double s;
  static __device__ __forceinline__ SumState identity() { return {0.0}; }
  __device__ __forceinline__ void add(float v, int64_t) { s += v; }
  __device__ __forceinline__ void merge(const SumState& o) { s += o.s; }
  static __device__ __forceinline__ SumState shfl_xor(const SumState& a, int mask) {
    return {__shfl_xor_sync(kFullMask, a.s, mask)};
  }
  struct Local {
    double s = 0.0;
    template <int N>
    __device__ __forceinline__ void add_chunk(const float* v, int) {
#pragma unroll
      for (int k = 0; k < N; ++k) s += v[k];
    }
    template <class Map>
    __device__ __forceinline__ SumState to_state(bool, const Map&) const {
      return {s};
    }
  };
};

// max alone: a NaN anywhere is the result (any NaN: they are all NaN to a float output).
struct MaxState {
  float m;
  static __device__ __forceinline__ MaxState identity() { return {-INFINITY}; }
  __device__ __forceinline__ void add(float v, int64_t) { m = isnan(m) || v <= m ? m : v; }
  __device__ __forceinline__ void merge(const MaxState& o) { add(o.m, 0); }
  static __device__ __forceinline__ MaxState shfl_xor(const MaxState& a, int mask) {
    return {__shfl_xor_sync(kFullMask, a.m, mask)};
  }
  struct Local {
    float m = -INFINITY;
    bool nan = false;
    template <int N>
    __device__ __forceinline__ void add_chunk(const float* v, int) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        m = fmaxf(m, v[k]);  // fmaxf ignores a NaN operand: the flag keeps it
        nan |= isnan(v[k]);
      }
    }
    template <class Map>
    __device__ __forceinline__ MaxState to_state(bool, const Map&) const {
      return {nan ? NAN : m};
    }
  };
};

// Sum and sum of squares (layer_norm's mean and variance in one pass; rms_norm reads only sq).
struct MomentsState {
  double s, sq;
  static __device__ __forceinline__ MomentsState identity() { return {0.0, 0.0}; }
  __device__ __forceinline__ void add(float v, int64_t) {
    s += v;
    sq += static_cast<double>(v) * v;
  }
  __device__ __forceinline__ void merge(const MomentsState& o) {
    s += o.s;
    sq += o.sq;
  }
  static __device__ __forceinline__ MomentsState shfl_xor(const MomentsState& a, int mask) {
    return {__shfl_xor_sync(kFullMask, a.s, mask), __shfl_xor_sync(kFullMask, a.sq, mask)};
  }
  struct Local {
    double s = 0.0, sq = 0.0;
    template <int N>
    __device__ __forceinline__ void add_chunk(const float* v, int) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const double d = v[k];
        s += d;
        sq = fma(d, d, sq);
      }
    }
    template <class Map>
    __device__ __forceinline__ MomentsState to_state(bool, const Map&) const {
      return {s, sq};
    }
  };
};

struct ArgMaxState {
  float v;
  int64_t i;  // INT64_MAX until the first element: any element, even -inf, beats it on the index
  static __device__ __forceinline__ ArgMaxState identity() { return {-INFINITY, INT64_MAX}; }
  // a comes before b in numpy's order: a NaN first (the lower index among NaNs), then the larger value, then
  // the lower index.
  static __device__ __forceinline__ bool beats(const ArgMaxState& a, const ArgMaxState& b) {
    if (isnan(a.v)) return !isnan(b.v) || a.i < b.i;
    if (isnan(b.v)) return false;
    return a.v > b.v || (a.v == b.v && a.i < b.i);
  }
  __device__ __forceinline__ void add(float v, int64_t index) { merge({v, index}); }
  __device__ __forceinline__ void merge(const ArgMaxState& o) {
    if (beats(o, *this)) *this = o;
  }
  static __device__ __forceinline__ ArgMaxState shfl_xor(const ArgMaxState& a, int mask) {
    return {__shfl_xor_sync(kFullMask, a.v, mask),
            static_cast<int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(a.i), mask))};
  }
  // The thread's elements come in increasing axis order, so "first maximum, first NaN" is: replace only on a
  // strictly larger value or a NaN, and never once a NaN is held. The first element (ordinal 0) is the best
  // until something beats it, which covers a thread of all -inf.
  struct Local {
    float m = -INFINITY;
    int pos = 0;
    template <int N>
    __device__ __forceinline__ void add_chunk(const float* v, int pos0) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const bool take = !(v[k] <= m) && !isnan(m);
        m = take ? v[k] : m;
        pos = take ? pos0 + k : pos;
      }
    }
    template <class Map>
    __device__ __forceinline__ ArgMaxState to_state(bool any, const Map& map) const {
      return any ? ArgMaxState{m, map(pos)} : identity();
    }
  };
};

// sum over the elements of exp(x - m), m the largest element so far (never NaN: a NaN element makes s NaN).
struct LseState {
  float m;
  double s;
  static __device__ __forceinline__ LseState identity() { return {-INFINITY, 0.0}; }
  __device__ __forceinline__ void add(float v, int64_t) {
    if (isnan(v)) {
      s = NAN;
    } else if (v > m) {
      if (s != 0.0) s *= static_cast<double>(expf(m - v));
      m = v;
      s += 1.0;
    } else if (v == m) {
      s += 1.0;  // also +inf after +inf, where v - m would be NaN
    } else {
      s += static_cast<double>(expf(v - m));  // v = -inf: + 0
    }
  }
  static __device__ __forceinline__ double scaled(double s, float m, float to) {
    if (s == 0.0 || m == to) return s;
    return s * static_cast<double>(expf(m - to));
  }
  __device__ __forceinline__ void merge(const LseState& o) {
    const float to = fmaxf(m, o.m);
    s = scaled(s, m, to) + scaled(o.s, o.m, to);
    m = to;
  }
  static __device__ __forceinline__ LseState shfl_xor(const LseState& a, int mask) {
    return {__shfl_xor_sync(kFullMask, a.m, mask), __shfl_xor_sync(kFullMask, a.s, mask)};
  }
  // Per chunk: its max first, then, when the running max stays finite (the common case), one exp per element
  // summed in float32 (N terms in (0, 1], relative error ~N * 2^-24, far inside float32 output rounding) and
  // added to the double sum; __expf of an argument <= 0 is within a few float32 ulp of expf. A NaN element
  // makes its term and so s NaN, as add() does. An infinite running max (-inf: all -inf so far; +inf) takes
  // add()'s exact per-element rules.
  struct Local {
    float m = -INFINITY;
    double s = 0.0;
    template <int N>
    __device__ __forceinline__ void add_chunk(const float* v, int) {
      float cm = v[0];
#pragma unroll
      for (int k = 1; k < N; ++k) cm = fmaxf(cm, v[k]);
      const float to = fmaxf(m, cm);
      if (isfinite(to)) {
        if (s != 0.0 && to != m) s *= static_cast<double>(__expf(m - to));
        m = to;
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < N; ++k) t += __expf(v[k] - to);
        s += static_cast<double>(t);
      } else {
        LseState st{m, s};
#pragma unroll
        for (int k = 0; k < N; ++k) st.add(v[k], 0);
        m = st.m;
        s = st.s;
      }
    }
    template <class Map>
    __device__ __forceinline__ LseState to_state(bool, const Map&) const {
      return {m, s};
    }
  };
  // log(sum exp x) as the CPU reference gives it: NaN for a NaN, the infinite maximum itself (+inf, or -inf for an
  // all -inf or empty axis), else m + log(s).
  __device__ __forceinline__ float logsumexp() const {
    if (isnan(s)) return NAN;
    if (isinf(m)) return m;
    return static_cast<float>(static_cast<double>(m) + log(s));
  }
};

}  // namespace ga::cuda::tensor_ops
