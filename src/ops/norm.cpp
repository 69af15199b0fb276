// The fused row ops along the last axis: rms_norm, layer_norm, softmax.
//
// Each row is gathered into a float32 scratch row (any type, any strides), normalised by the CPU backend's own
// kernel (backends/cpu/ops.h: the forward's rms_norm, layer_norm and softmax, so the values are the engine's),
// and rounded into out. Rows are split over the pool; weight and bias are widened to float32 once per call.
// Device::Cuda runs backends/cuda/kernels/tensor_ops (norm.cu) on the validated views.
#include <vector>

#include "backends/cpu/ops.h"
#include "backends/cuda/kernels/tensor_ops/tensor_ops.h"
#include "ops/ops_common.h"

namespace ga::ops {

using namespace detail;

namespace {

constexpr int64_t kRowGrain = 4;

struct Rows {
  int64_t count = 0;  // rows (the product of every dim but the last)
  int64_t n = 0;      // the last dim
};

Rows check_rows(const TensorView& x, const TensorView& out, const char* op) {
  check_view(x, op, "x");
  check_view(out, op, "out");
  require_float_type(x.type, op, "x");
  require_float_type(out.type, op, "out");
  GA_CHECK(x.ndim >= 1, InvalidArgument, op, ": x must have at least one dimension");
  check_same_shape(x, out, op, "x", "out");
  const int64_t n = x.shape[x.ndim - 1];
  return {n == 0 ? 0 : element_count(x) / n, n};
}

// A 1-d [n] parameter is well formed (false: absent, data == nullptr, and optional).
bool check_param(const TensorView& v, int64_t n, const char* op, const char* name, bool required) {
  if (v.data == nullptr) {
    GA_CHECK(!required, InvalidArgument, op, ": ", name, " is required");
    return false;
  }
  check_view(v, op, name);
  require_float_type(v.type, op, name);
  GA_CHECK(v.ndim == 1 && v.shape[0] == n, InvalidArgument, op, ": ", name, " ", shape_text(v), " must have shape [", n,
           "] (x's last dimension)");
  return true;
}

// A 1-d [n] parameter as float32 (empty when the view has no data and is optional).
std::vector<float> widen_param(const TensorView& v, int64_t n, const char* op, const char* name, bool required) {
  if (!check_param(v, n, op, name, required)) return {};
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = load(v.type, v.data, i * v.strides[0]);
  return out;
}

// fn(row) on each row's float32 copy, in place; the result is stored into out.
template <typename Fn>
void for_each_row(const TensorView& x, const TensorView& out, const Rows& rows, ThreadPool* pool, Fn fn) {
  const int outer = x.ndim - 1;
  const int64_t xs = x.strides[outer], os = out.strides[outer];
  parallel_for(
      pool, rows.count,
      [&](int64_t begin, int64_t end, int) {
        std::vector<float> row(static_cast<size_t>(rows.n));
        for (int64_t r = begin; r < end; ++r) {
          const int64_t xo = offset_of(r, x.shape, x.strides, outer);
          const int64_t oo = offset_of(r, out.shape, out.strides, outer);
          for (int64_t i = 0; i < rows.n; ++i) row[static_cast<size_t>(i)] = load(x.type, x.data, xo + i * xs);
          fn(row.data());
          for (int64_t i = 0; i < rows.n; ++i) store(out.type, out.data, oo + i * os, row[static_cast<size_t>(i)]);
        }
      },
      kRowGrain);
}

void check_eps(float eps, const char* op) {
  GA_CHECK(eps >= 0.0f && std::isfinite(eps), InvalidArgument, op, ": eps must be finite and >= 0, got ", eps);
}

}  // namespace

Status rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out, const Exec& exec) {
  return guarded([&] {
    require_device(exec.device, "rms_norm");
    const Rows rows = check_rows(x, out, "rms_norm");
    check_eps(eps, "rms_norm");
    if (exec.device == Device::Cuda) {
      check_param(weight, rows.n, "rms_norm", "weight", true);
      cuda::tensor_ops::row_op({cuda::tensor_ops::RowOp::RmsNorm, x, weight, {}, out, eps}, exec.stream)
          .throw_if_error();
      return;
    }
    const std::vector<float> w = widen_param(weight, rows.n, "rms_norm", "weight", true);
    for_each_row(x, out, rows, exec.pool, [&](float* r) { cpu::rms_norm(r, w.data(), r, rows.n, eps); });
  });
}

Status layer_norm(const TensorView& x, const TensorView& weight, const TensorView& bias, float eps,
                  const TensorView& out, const Exec& exec) {
  return guarded([&] {
    require_device(exec.device, "layer_norm");
    const Rows rows = check_rows(x, out, "layer_norm");
    check_eps(eps, "layer_norm");
    if (exec.device == Device::Cuda) {
      check_param(weight, rows.n, "layer_norm", "weight", false);
      check_param(bias, rows.n, "layer_norm", "bias", false);
      cuda::tensor_ops::row_op({cuda::tensor_ops::RowOp::LayerNorm, x, weight, bias, out, eps}, exec.stream)
          .throw_if_error();
      return;
    }
    std::vector<float> w = widen_param(weight, rows.n, "layer_norm", "weight", false);
    std::vector<float> b = widen_param(bias, rows.n, "layer_norm", "bias", false);
    // The backend's kernel takes both or neither: a missing one is the identity (times 1 and plus 0 are exact).
    if (!w.empty() || !b.empty()) {
      if (w.empty()) w.assign(static_cast<size_t>(rows.n), 1.0f);
      if (b.empty()) b.assign(static_cast<size_t>(rows.n), 0.0f);
    }
    const float* wp = w.empty() ? nullptr : w.data();
    const float* bp = b.empty() ? nullptr : b.data();
    for_each_row(x, out, rows, exec.pool, [&](float* r) { cpu::layer_norm(r, wp, bp, r, rows.n, eps); });
  });
}

Status softmax(const TensorView& x, const TensorView& out, const Exec& exec) {
  return guarded([&] {
    require_device(exec.device, "softmax");
    const Rows rows = check_rows(x, out, "softmax");
    if (exec.device == Device::Cuda) {
      cuda::tensor_ops::row_op({cuda::tensor_ops::RowOp::Softmax, x, {}, {}, out, 0.0f}, exec.stream).throw_if_error();
      return;
    }
    for_each_row(x, out, rows, exec.pool, [&](float* r) { cpu::softmax(r, rows.n); });
  });
}

}  // namespace ga::ops
