// Reductions along one axis of a strided view: sum, mean, max, argmax, logsumexp.
//
// Each output element is one walk along the axis (stride x.strides[axis]); output elements are split over the
// pool. Sums accumulate in double, as the CPU backend's softmax and rms_norm do, so a float64 reference agrees to
// float32 rounding whatever the length. NaN: max/argmax/logsumexp propagate it (argmax gives the first NaN's
// index, as numpy does). Device::Cuda runs backends/cuda/kernels/tensor_ops (reduce.cu) on the validated views,
// with the same rules.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cuda/kernels/tensor_ops/tensor_ops.h"
#include "ops/ops_common.h"

namespace ga::ops {

using namespace detail;

namespace {

constexpr int64_t kOutputGrain = 64;

struct AxisWalk {
  DType type;
  const void* data;
  int64_t base;
  int64_t stride;
  int64_t n;
  float at(int64_t i) const { return load(type, data, base + i * stride); }
};

double sum_of(const AxisWalk& w) {
  double s = 0.0;
  for (int64_t i = 0; i < w.n; ++i) s += w.at(i);
  return s;
}

int64_t argmax_of(const AxisWalk& w) {
  int64_t best = 0;
  float best_v = w.at(0);
  if (std::isnan(best_v)) return 0;
  for (int64_t i = 1; i < w.n; ++i) {
    const float v = w.at(i);
    if (std::isnan(v)) return i;
    if (v > best_v) {
      best_v = v;
      best = i;
    }
  }
  return best;
}

double logsumexp_of(const AxisWalk& w) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < w.n; ++i) {
    const float v = w.at(i);
    if (std::isnan(v)) return v;
    mx = std::max(mx, v);
  }
  if (std::isinf(mx)) return mx;  // every value -inf (or an empty axis): -inf; a +inf: +inf
  double s = 0.0;
  for (int64_t i = 0; i < w.n; ++i) s += std::exp(static_cast<double>(w.at(i)) - mx);
  return mx + std::log(s);
}

}  // namespace

Status reduce(ReduceOp rop, const TensorView& x, int axis, const TensorView& out, const Exec& exec) {
  return guarded([&] {
    const char* op = reduce_name(rop);
    require_device(exec.device, op);
    check_view(x, op, "x");
    check_view(out, op, "out");
    require_float_type(x.type, op, "x");
    if (rop == ReduceOp::ArgMax) {
      GA_CHECK(out.type == DType::I64, InvalidArgument, op, ": out must be I64, got ", dtype_name(out.type));
    } else {
      require_float_type(out.type, op, "out");
    }
    GA_CHECK(x.ndim >= 1 && axis >= 0 && axis < x.ndim, InvalidArgument, op, ": axis ", axis, " is out of range for x ",
             shape_text(x));
    // x's dims without the axis: the output's shape.
    int64_t rest_shape[kMaxDims] = {}, rest_strides[kMaxDims] = {};
    int nr = 0;
    for (int d = 0; d < x.ndim; ++d) {
      if (d == axis) continue;
      rest_shape[nr] = x.shape[d];
      rest_strides[nr] = x.strides[d];
      ++nr;
    }
    bool shape_ok = out.ndim == nr;
    for (int d = 0; shape_ok && d < nr; ++d) shape_ok = out.shape[d] == rest_shape[d];
    GA_CHECK(shape_ok, InvalidArgument, op, ": out ", shape_text(out), " must have x's shape ", shape_text(x),
             " without axis ", axis);
    const int64_t n = x.shape[axis];
    GA_CHECK(n > 0 || (rop != ReduceOp::Max && rop != ReduceOp::ArgMax), InvalidArgument, op, ": the axis is empty (x ",
             shape_text(x), "), which has no maximum");
    if (exec.device == Device::Cuda) {
      cuda::tensor_ops::reduce({rop, x, axis, out}, exec.stream).throw_if_error();
      return;
    }
    const int64_t count = element_count(out);
    parallel_for(
        exec.pool, count,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t j = begin; j < end; ++j) {
            const AxisWalk w{x.type, x.data, offset_of(j, rest_shape, rest_strides, nr), x.strides[axis], n};
            const int64_t o = offset_of(j, out.shape, out.strides, out.ndim);
            switch (rop) {
              case ReduceOp::Sum:
                store(out.type, out.data, o, static_cast<float>(sum_of(w)));
                break;
              case ReduceOp::Mean:
                store(out.type, out.data, o,
                      n == 0 ? std::numeric_limits<float>::quiet_NaN()
                             : static_cast<float>(sum_of(w) / static_cast<double>(n)));
                break;
              case ReduceOp::Max:
                store(out.type, out.data, o, w.at(argmax_of(w)));
                break;
              case ReduceOp::ArgMax:
                static_cast<int64_t*>(out.data)[o] = argmax_of(w);
                break;
              case ReduceOp::LogSumExp:
                store(out.type, out.data, o, static_cast<float>(logsumexp_of(w)));
                break;
            }
          }
        },
        kOutputGrain);
  });
}

}  // namespace ga::ops
