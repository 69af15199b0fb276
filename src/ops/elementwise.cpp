// Elementwise ops on strided views: act(x), and a + b / a * b with numpy's broadcasting.
//
// Both walk the output as rows of its last dimension (each operand's offset of a row is computed once from the
// row's index, so any strides work: broadcasts are stride 0) and split the rows over the pool. The activations
// are the CPU backend's (backends/cpu/activation.h), so values match the engine's forward bit for bit.
// Device::Cuda runs backends/cuda/kernels/tensor_ops (elementwise.cu) on the same validated views.
#include "backends/cuda/kernels/tensor_ops/tensor_ops.h"
#include "ops/ops_common.h"

namespace ga::ops {

using namespace detail;

namespace {

constexpr int64_t kRowGrain = 16;  // rows per scheduling unit: a row may be a single element

// Operand `v` aligned right against `out` (numpy's rule): its strides over out's dims, 0 where v has size 1 or
// lacks the dim.
void broadcast_strides(const TensorView& v, const TensorView& out, const char* op, const char* name, int64_t* st) {
  GA_CHECK(v.ndim <= out.ndim, InvalidArgument, op, ": ", name, " ", shape_text(v), " has more dimensions than the ",
           "output ", shape_text(out));
  const int lead = out.ndim - v.ndim;
  for (int d = 0; d < out.ndim; ++d) {
    if (d < lead) {
      st[d] = 0;
      continue;
    }
    const int64_t n = v.shape[d - lead];
    GA_CHECK(n == out.shape[d] || n == 1, InvalidArgument, op, ": ", name, " ", shape_text(v),
             " does not broadcast to the output shape ", shape_text(out));
    st[d] = n == 1 ? 0 : v.strides[d - lead];
  }
}

}  // namespace

Status unary(Activation act, const TensorView& x, const TensorView& out, const Exec& exec) {
  return guarded([&] {
    const char* op = activation_name(act);
    require_device(exec.device, op);
    check_view(x, op, "x");
    check_view(out, op, "out");
    require_float_type(x.type, op, "x");
    require_float_type(out.type, op, "out");
    check_same_shape(x, out, op, "x", "out");
    if (exec.device == Device::Cuda) {
      cuda::tensor_ops::unary({act, x, out}, exec.stream).throw_if_error();
      return;
    }
    const int nd = out.ndim;
    const int64_t n = nd == 0 ? 1 : out.shape[nd - 1];
    const int64_t rows = n == 0 ? 0 : element_count(out) / n;
    const int64_t xs = nd == 0 ? 0 : x.strides[nd - 1];
    const int64_t os = nd == 0 ? 0 : out.strides[nd - 1];
    parallel_for(
        exec.pool, rows,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t xo = offset_of(r, x.shape, x.strides, nd - (nd > 0));
            const int64_t oo = offset_of(r, out.shape, out.strides, nd - (nd > 0));
            for (int64_t i = 0; i < n; ++i) {
              store(out.type, out.data, oo + i * os, activate(act, load(x.type, x.data, xo + i * xs)));
            }
          }
        },
        kRowGrain);
  });
}

Status binary(BinaryOp bop, const TensorView& a, const TensorView& b, const TensorView& out, const Exec& exec) {
  return guarded([&] {
    const char* op = bop == BinaryOp::Add ? "add" : "mul";
    require_device(exec.device, op);
    check_view(a, op, "a");
    check_view(b, op, "b");
    check_view(out, op, "out");
    require_float_type(a.type, op, "a");
    require_float_type(b.type, op, "b");
    require_float_type(out.type, op, "out");
    int64_t as[kMaxDims] = {}, bs[kMaxDims] = {};
    broadcast_strides(a, out, op, "a", as);
    broadcast_strides(b, out, op, "b", bs);
    if (exec.device == Device::Cuda) {
      // a and b as views of out's shape: the kernels take the broadcast as stride-0 dims
      TensorView ax = out, bx = out;
      ax.type = a.type;
      ax.data = a.data;
      bx.type = b.type;
      bx.data = b.data;
      for (int d = 0; d < out.ndim; ++d) {
        ax.strides[d] = as[d];
        bx.strides[d] = bs[d];
      }
      cuda::tensor_ops::binary({bop, ax, bx, out}, exec.stream).throw_if_error();
      return;
    }
    const int nd = out.ndim;
    const int outer = nd - (nd > 0);
    const int64_t n = nd == 0 ? 1 : out.shape[nd - 1];
    const int64_t rows = n == 0 ? 0 : element_count(out) / n;
    const int64_t ai = nd == 0 ? 0 : as[nd - 1], bi = nd == 0 ? 0 : bs[nd - 1];
    const int64_t oi = nd == 0 ? 0 : out.strides[nd - 1];
    const bool add = bop == BinaryOp::Add;
    parallel_for(
        exec.pool, rows,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t ao = offset_of(r, out.shape, as, outer);
            const int64_t bo = offset_of(r, out.shape, bs, outer);
            const int64_t oo = offset_of(r, out.shape, out.strides, outer);
            for (int64_t i = 0; i < n; ++i) {
              const float x = load(a.type, a.data, ao + i * ai);
              const float y = load(b.type, b.data, bo + i * bi);
              store(out.type, out.data, oo + i * oi, add ? x + y : x * y);
            }
          }
        },
        kRowGrain);
  });
}

}  // namespace ga::ops
