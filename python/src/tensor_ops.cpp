// The tensor-ops library (include/gpu_accel/tensor_ops.h) on numpy arrays: each array becomes a TensorView of
// its own strides (no copy: broadcast views keep their 0 strides), outputs are arrays the Python layer
// (gpu_accel/ops.py) allocated. dtypes: float32, float16, and uint16 holding bfloat16 bits (numpy has no
// bfloat16; ops.py also views ml_dtypes' bfloat16 so); argmax writes int64. A refused call raises the library's
// ga::Error (InvalidArgument: gpu_accel.ArgumentError, a ValueError). The GIL is released while an op runs, on a
// process-wide thread pool that runs one op at a time.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <string>

#include "bindings.h"
#include "core/thread_pool.h"
#include "gpu_accel/tensor_ops.h"

namespace py = pybind11;

namespace ga::python {

namespace {

ThreadPool& op_pool() {
  static ThreadPool pool(0);  // every core, started on the first op
  return pool;
}

// One op at a time on the pool: ThreadPool runs one parallel_for at a time, and Python threads may call ops
// concurrently once the GIL is released.
std::mutex& op_pool_mutex() {
  static std::mutex mutex;
  return mutex;
}

ops::Exec cpu_exec() {
  ops::Exec exec;
  exec.pool = &op_pool();
  return exec;
}

DType dtype_of(const py::array& a, const std::string& what) {
  const py::dtype dt = a.dtype();
  if (dt.is(py::dtype::of<float>())) return DType::F32;
  if (dt.kind() == 'f' && dt.itemsize() == 2) return DType::F16;
  if (dt.kind() == 'u' && dt.itemsize() == 2) return DType::BF16;
  if (dt.kind() == 'i' && dt.itemsize() == 8) return DType::I64;
  throw py::type_error(what + ": unsupported dtype " + py::str(static_cast<const py::handle&>(dt)).cast<std::string>() +
                       " (float32, float16, or uint16 bfloat16 bits)");
}

ops::TensorView view_of(const py::array& a, const std::string& what, bool writable) {
  GA_CHECK(a.ndim() <= ops::kMaxDims, InvalidArgument, what, ": ", a.ndim(), " dimensions (at most ", ops::kMaxDims,
           ")");
  ops::TensorView v;
  v.type = dtype_of(a, what);
  if (writable) {
    GA_CHECK(a.writeable(), InvalidArgument, what, ": the output array is read-only");
    v.data = const_cast<void*>(a.data());
  } else {
    v.data = const_cast<void*>(a.data());
  }
  v.ndim = static_cast<int>(a.ndim());
  const py::ssize_t item = a.itemsize();
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = a.shape(d);
    GA_CHECK(a.strides(d) % item == 0, InvalidArgument, what, ": a stride of ", a.strides(d),
             " bytes is not a whole number of elements");
    v.strides[d] = a.strides(d) / item;
  }
  return v;
}

ops::TensorView optional_view(const std::optional<py::array>& a, const std::string& what) {
  return a ? view_of(*a, what, false) : ops::TensorView{};
}

ops::Activation activation_of(const std::string& name) {
  static const std::pair<const char*, ops::Activation> kNames[] = {
      {"none", ops::Activation::None},          {"relu", ops::Activation::Relu}, {"gelu", ops::Activation::Gelu},
      {"gelu_tanh", ops::Activation::GeluTanh}, {"silu", ops::Activation::Silu}, {"sigmoid", ops::Activation::Sigmoid},
      {"tanh", ops::Activation::Tanh}};
  for (const auto& [text, act] : kNames) {
    if (name == text) return act;
  }
  throw py::value_error("unknown activation '" + name + "' (none, relu, gelu, gelu_tanh, silu, sigmoid, tanh)");
}

ops::ReduceOp reduce_of(const std::string& name) {
  for (const ops::ReduceOp op :
       {ops::ReduceOp::Sum, ops::ReduceOp::Mean, ops::ReduceOp::Max, ops::ReduceOp::ArgMax, ops::ReduceOp::LogSumExp}) {
    if (name == ops::reduce_name(op)) return op;
  }
  throw py::value_error("unknown reduction '" + name + "'");
}

template <typename Fn>
void run_released(Fn&& fn) {
  ops::Status status;
  {
    py::gil_scoped_release release;  // before the lock: a thread waiting for the pool must not hold the GIL
    const std::lock_guard<std::mutex> lock(op_pool_mutex());
    status = fn();
  }
  status.throw_if_error();
}

// An epilogue's bias: a contiguous [n] array (`what`: the op, `per`: what one value is for, for the error).
ops::TensorView bias_view(const py::array& bias, const char* what, int64_t n, const char* per) {
  const ops::TensorView b = view_of(bias, std::string(what) + ": bias", false);
  GA_CHECK(b.ndim == 1 && b.shape[0] == n && (b.strides[0] == 1 || n <= 1), InvalidArgument, what,
           ": bias must be a contiguous [", n, "] (", per, ")");
  return b;
}

// a [batch, rows, cols] of op(A) storage (last stride 1), likewise b; c [batch, m, n] written.
void gemm(const py::array& a, const py::array& b, const py::array& c, const std::optional<py::array>& bias, float alpha,
          float beta, bool trans_a, bool trans_b, const std::string& activation) {
  GA_CHECK(a.ndim() == 3 && b.ndim() == 3 && c.ndim() == 3, InvalidArgument, "gemm: internal: 3-d operands expected");
  const ops::TensorView av = view_of(a, "gemm: a", false), bv = view_of(b, "gemm: b", false);
  const ops::TensorView cv = view_of(c, "gemm: c", true);
  for (const ops::TensorView* v : {&av, &bv, &cv}) {
    GA_CHECK(v->shape[2] <= 1 || v->strides[2] == 1, InvalidArgument,
             "gemm: internal: the last axis of each operand must be contiguous");
  }
  ops::GemmDesc d;
  d.trans_a = trans_a;
  d.trans_b = trans_b;
  d.m = trans_a ? av.shape[2] : av.shape[1];
  d.k = trans_a ? av.shape[1] : av.shape[2];
  d.n = trans_b ? bv.shape[1] : bv.shape[2];
  const int64_t kb = trans_b ? bv.shape[2] : bv.shape[1];
  GA_CHECK(kb == d.k, InvalidArgument, "gemm: the inner dimensions differ: op(a) is [", d.m, ", ", d.k, "], op(b) is [",
           kb, ", ", d.n, "]");
  GA_CHECK(cv.shape[0] == av.shape[0] && cv.shape[0] == bv.shape[0] && cv.shape[1] == d.m && cv.shape[2] == d.n,
           InvalidArgument, "gemm: internal: c must be [batch, m, n]");
  d.a_type = av.type;
  d.b_type = bv.type;
  d.c_type = cv.type;
  // The stride of a unit (or empty-row) dimension can be anything numpy likes: the library wants a row length.
  const auto ld = [](const ops::TensorView& v) {
    return v.shape[1] > 1 && v.shape[2] > 0 ? v.strides[1] : std::max<int64_t>(1, v.shape[2]);
  };
  d.lda = ld(av);
  d.ldb = ld(bv);
  d.ldc = ld(cv);
  d.batch = std::max<int64_t>(1, cv.shape[0]);
  d.stride_a = av.shape[0] > 1 ? av.strides[0] : 0;
  d.stride_b = bv.shape[0] > 1 ? bv.strides[0] : 0;
  d.stride_c = cv.shape[0] > 1 ? cv.strides[0] : 0;
  if (cv.shape[0] == 0) return;
  ops::GemmArgs args;
  args.a = av.data;
  args.b = bv.data;
  args.c = cv.data;
  args.alpha = alpha;
  args.beta = beta;
  if (bias) {
    const ops::TensorView biasv = bias_view(*bias, "gemm", d.n, "one value per column of the result");
    d.has_bias = true;
    d.bias_type = biasv.type;
    args.bias = biasv.data;
  }
  d.activation = activation_of(activation);
  const ops::Exec exec = cpu_exec();
  ops::GemmPlan plan;
  ops::plan_gemm(d, exec, &plan).throw_if_error();
  std::vector<float> workspace(plan.workspace_bytes / sizeof(float) + 1);
  run_released([&] { return ops::run_gemm(plan, args, workspace.data(), exec); });
}

// The filter window's stride, padding and dilation, (height, width) each.
void set_window(ops::Conv2dDesc& d, std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding,
                std::pair<int64_t, int64_t> dilation) {
  d.stride_h = stride.first;
  d.stride_w = stride.second;
  d.pad_h = padding.first;
  d.pad_w = padding.second;
  d.dil_h = dilation.first;
  d.dil_w = dilation.second;
}

// x [n, h, w, c], filter [k, r, s, c / groups], out [n, p, q, k], all C-contiguous.
void conv2d(const py::array& x, const py::array& filter, const std::optional<py::array>& bias, const py::array& out,
            std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding,
            std::pair<int64_t, int64_t> dilation, int64_t groups, const std::string& activation) {
  const ops::TensorView xv = view_of(x, "conv2d: x", false), fv = view_of(filter, "conv2d: weight", false);
  const ops::TensorView ov = view_of(out, "conv2d: out", true);
  GA_CHECK(xv.ndim == 4 && fv.ndim == 4 && ov.ndim == 4, InvalidArgument,
           "conv2d: x must be [n, h, w, c] and weight [k, r, s, c / groups]");
  ops::Conv2dDesc d;
  d.batch = xv.shape[0];
  d.h = xv.shape[1];
  d.w = xv.shape[2];
  d.c = xv.shape[3];
  d.k = fv.shape[0];
  d.r = fv.shape[1];
  d.s = fv.shape[2];
  set_window(d, stride, padding, dilation);
  d.groups = groups;
  GA_CHECK(groups >= 1 && fv.shape[3] * groups == d.c, InvalidArgument, "conv2d: weight's last dimension ", fv.shape[3],
           " times groups ", groups, " must be x's channels ", d.c);
  d.x_type = xv.type;
  d.filter_type = fv.type;
  d.out_type = ov.type;
  ops::Conv2dArgs args;
  args.x = xv.data;
  args.filter = fv.data;
  args.out = ov.data;
  if (bias) {
    const ops::TensorView bv = bias_view(*bias, "conv2d", d.k, "one value per output channel");
    d.has_bias = true;
    d.bias_type = bv.type;
    args.bias = bv.data;
  }
  d.activation = activation_of(activation);
  const ops::Exec exec = cpu_exec();
  ops::Conv2dPlan plan;
  ops::plan_conv2d(d, exec, &plan).throw_if_error();
  GA_CHECK(ov.shape[0] == d.batch && ov.shape[1] == plan.p && ov.shape[2] == plan.q && ov.shape[3] == d.k,
           InvalidArgument, "conv2d: internal: out must be [n, p, q, k]");
  std::vector<float> workspace(plan.workspace_bytes / sizeof(float) + 1);
  run_released([&] { return ops::run_conv2d(plan, args, workspace.data(), exec); });
}

// conv2d's output height and width (so Python allocates exactly what the plan computes).
std::pair<int64_t, int64_t> conv2d_output_hw(int64_t h, int64_t w, int64_t r, int64_t s,
                                             std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding,
                                             std::pair<int64_t, int64_t> dilation) {
  ops::Conv2dDesc d;
  d.batch = 1;
  d.h = h;
  d.w = w;
  d.c = 1;
  d.k = 1;
  d.r = r;
  d.s = s;
  set_window(d, stride, padding, dilation);
  ops::Conv2dPlan plan;
  ops::plan_conv2d(d, ops::Exec{}, &plan).throw_if_error();
  return {plan.p, plan.q};
}

}  // namespace

void register_tensor_ops(py::module_& ops_module) {
  py::module_& m = ops_module;
  m.def("gemm", &gemm, py::arg("a"), py::arg("b"), py::arg("c"), py::arg("bias"), py::arg("alpha"), py::arg("beta"),
        py::arg("trans_a"), py::arg("trans_b"), py::arg("activation"));
  m.def("conv2d", &conv2d, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("out"), py::arg("stride"),
        py::arg("padding"), py::arg("dilation"), py::arg("groups"), py::arg("activation"));
  m.def("conv2d_output_hw", &conv2d_output_hw);
  m.def(
      "unary",
      [](const std::string& name, const py::array& x, const py::array& out) {
        const ops::Activation act = activation_of(name);
        const ops::TensorView xv = view_of(x, name, false), ov = view_of(out, name, true);
        run_released([&] { return ops::unary(act, xv, ov, cpu_exec()); });
      },
      py::arg("op"), py::arg("x"), py::arg("out"));
  m.def(
      "binary",
      [](const std::string& name, const py::array& a, const py::array& b, const py::array& out) {
        if (name != "add" && name != "mul") throw py::value_error("unknown binary op '" + name + "'");
        const ops::BinaryOp op = name == "add" ? ops::BinaryOp::Add : ops::BinaryOp::Mul;
        const ops::TensorView av = view_of(a, name, false), bv = view_of(b, name, false);
        const ops::TensorView ov = view_of(out, name, true);
        run_released([&] { return ops::binary(op, av, bv, ov, cpu_exec()); });
      },
      py::arg("op"), py::arg("a"), py::arg("b"), py::arg("out"));
  m.def(
      "reduce",
      [](const std::string& name, const py::array& x, int axis, const py::array& out) {
        const ops::ReduceOp op = reduce_of(name);
        const ops::TensorView xv = view_of(x, name, false), ov = view_of(out, name, true);
        run_released([&] { return ops::reduce(op, xv, axis, ov, cpu_exec()); });
      },
      py::arg("op"), py::arg("x"), py::arg("axis"), py::arg("out"));
  m.def(
      "rms_norm",
      [](const py::array& x, const py::array& weight, float eps, const py::array& out) {
        const ops::TensorView xv = view_of(x, "rms_norm: x", false), wv = view_of(weight, "rms_norm: weight", false);
        const ops::TensorView ov = view_of(out, "rms_norm: out", true);
        run_released([&] { return ops::rms_norm(xv, wv, eps, ov, cpu_exec()); });
      },
      py::arg("x"), py::arg("weight"), py::arg("eps"), py::arg("out"));
  m.def(
      "layer_norm",
      [](const py::array& x, const std::optional<py::array>& weight, const std::optional<py::array>& bias, float eps,
         const py::array& out) {
        const ops::TensorView xv = view_of(x, "layer_norm: x", false);
        const ops::TensorView wv = optional_view(weight, "layer_norm: weight");
        const ops::TensorView bv = optional_view(bias, "layer_norm: bias");
        const ops::TensorView ov = view_of(out, "layer_norm: out", true);
        run_released([&] { return ops::layer_norm(xv, wv, bv, eps, ov, cpu_exec()); });
      },
      py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("eps"), py::arg("out"));
  m.def(
      "softmax",
      [](const py::array& x, const py::array& out) {
        const ops::TensorView xv = view_of(x, "softmax: x", false), ov = view_of(out, "softmax: out", true);
        run_released([&] { return ops::softmax(xv, ov, cpu_exec()); });
      },
      py::arg("x"), py::arg("out"));
}

}  // namespace ga::python
