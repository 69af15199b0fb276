// gpu_accel._flash: the flash-attention kernels (backends/cuda/kernels/flash/flash_attention.h) over raw device
// pointers, for the torch front (gpu_accel/torch_attention.py). No torch C++ here: Python fills a FlashParams /
// FlashBwdParams with tensor.data_ptr(), strides in elements and shapes, allocates outputs and workspace with torch,
// and passes torch.cuda.current_stream().cuda_stream, so the kernels run on the tensors' stream and torch's caching
// allocator owns every byte. The kernels' own checks are the only ones here: a refusal raises ValueError with the
// kernel's reason (flash_unsupported_reason), a launch failure RuntimeError with the CUDA error; the Python side
// checks devices, dtypes and shapes before it gets here, with messages in flash-attn's terms.
#include <cuda_runtime_api.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "backends/cuda/kernels/flash/flash_attention.h"

namespace py = pybind11;

namespace {

using ga::cuda::FlashBwdParams;
using ga::cuda::FlashDtype;
using ga::cuda::FlashParams;

// A device address as Python holds it (tensor.data_ptr(): an int; 0 for "none").
template <typename T>
T* as_pointer(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}
template <typename T>
uintptr_t as_address(T* pointer) {
  return reinterpret_cast<uintptr_t>(pointer);
}

cudaStream_t as_stream(uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }

std::optional<std::string> reason_text(const char* reason) {
  if (reason == nullptr) return std::nullopt;
  return std::string(reason);
}

void raise_on_failure(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // a launch error is sticky only until read: leave the thread's state clean for torch
  throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// Device pointers become int properties: Python passes data_ptr() values and reads them back in tests.
#define GA_POINTER_PROPERTY(cls, Struct, field, Type)                                           \
  cls.def_property(                                                                             \
      #field, [](const Struct& s) { return as_address(s.field); },                              \
      [](Struct& s, uintptr_t a) { s.field = as_pointer<Type>(a); })

void bind_forward_params(py::module_& m) {
  py::enum_<FlashDtype>(m, "FlashDtype")
      .value("bf16", FlashDtype::kBf16)
      .value("f16", FlashDtype::kF16)
      .value("fp8_e4m3", FlashDtype::kFp8E4m3);

  py::class_<FlashParams> p(m, "FlashParams", "ga::cuda::FlashParams: pointers as ints, strides in elements");
  p.def(py::init<>());
  GA_POINTER_PROPERTY(p, FlashParams, q, const void);
  GA_POINTER_PROPERTY(p, FlashParams, k, const void);
  GA_POINTER_PROPERTY(p, FlashParams, v, const void);
  GA_POINTER_PROPERTY(p, FlashParams, o, void);
  GA_POINTER_PROPERTY(p, FlashParams, lse, float);
  GA_POINTER_PROPERTY(p, FlashParams, cu_seqlens_q, const int32_t);
  GA_POINTER_PROPERTY(p, FlashParams, cu_seqlens_k, const int32_t);
  GA_POINTER_PROPERTY(p, FlashParams, seqused_q, const int32_t);
  GA_POINTER_PROPERTY(p, FlashParams, seqused_k, const int32_t);
  GA_POINTER_PROPERTY(p, FlashParams, block_table, const int32_t);
  p.def_readwrite("q_batch_stride", &FlashParams::q_batch_stride)
      .def_readwrite("q_seq_stride", &FlashParams::q_seq_stride)
      .def_readwrite("q_head_stride", &FlashParams::q_head_stride)
      .def_readwrite("k_batch_stride", &FlashParams::k_batch_stride)
      .def_readwrite("k_seq_stride", &FlashParams::k_seq_stride)
      .def_readwrite("k_head_stride", &FlashParams::k_head_stride)
      .def_readwrite("v_batch_stride", &FlashParams::v_batch_stride)
      .def_readwrite("v_seq_stride", &FlashParams::v_seq_stride)
      .def_readwrite("v_head_stride", &FlashParams::v_head_stride)
      .def_readwrite("o_batch_stride", &FlashParams::o_batch_stride)
      .def_readwrite("o_seq_stride", &FlashParams::o_seq_stride)
      .def_readwrite("o_head_stride", &FlashParams::o_head_stride)
      .def_readwrite("dtype", &FlashParams::dtype)
      .def_readwrite("head_dim", &FlashParams::head_dim)
      .def_readwrite("n_head", &FlashParams::n_head)
      .def_readwrite("n_head_kv", &FlashParams::n_head_kv)
      .def_readwrite("batch", &FlashParams::batch)
      .def_readwrite("seqlen_q", &FlashParams::seqlen_q)
      .def_readwrite("seqlen_k", &FlashParams::seqlen_k)
      .def_readwrite("causal", &FlashParams::causal)
      .def_readwrite("softmax_scale", &FlashParams::softmax_scale)
      .def_readwrite("window_left", &FlashParams::window_left)
      .def_readwrite("window_right", &FlashParams::window_right)
      .def_readwrite("softcap", &FlashParams::softcap)
      .def_readwrite("out_dtype", &FlashParams::out_dtype)
      .def_readwrite("descale_q", &FlashParams::descale_q)
      .def_readwrite("descale_k", &FlashParams::descale_k)
      .def_readwrite("descale_v", &FlashParams::descale_v)
      .def_readwrite("total_q", &FlashParams::total_q)
      .def_readwrite("total_k", &FlashParams::total_k)
      .def_readwrite("block_table_stride", &FlashParams::block_table_stride)
      .def_readwrite("page_size", &FlashParams::page_size)
      .def_readwrite("n_pages", &FlashParams::n_pages);
}

void bind_backward_params(py::module_& m) {
  py::class_<FlashBwdParams> p(m, "FlashBwdParams", "ga::cuda::FlashBwdParams: fwd is the forward's FlashParams");
  p.def(py::init<>());
  // By reference: `bp.fwd.q = ...` writes into this struct (not into a copy).
  p.def_property(
      "fwd", [](FlashBwdParams& s) -> FlashParams& { return s.fwd; },
      [](FlashBwdParams& s, const FlashParams& f) { s.fwd = f; }, py::return_value_policy::reference_internal);
  GA_POINTER_PROPERTY(p, FlashBwdParams, dout, const void);
  GA_POINTER_PROPERTY(p, FlashBwdParams, dq, void);
  GA_POINTER_PROPERTY(p, FlashBwdParams, dk, void);
  GA_POINTER_PROPERTY(p, FlashBwdParams, dv, void);
  p.def_readwrite("do_batch_stride", &FlashBwdParams::do_batch_stride)
      .def_readwrite("do_seq_stride", &FlashBwdParams::do_seq_stride)
      .def_readwrite("do_head_stride", &FlashBwdParams::do_head_stride)
      .def_readwrite("dq_batch_stride", &FlashBwdParams::dq_batch_stride)
      .def_readwrite("dq_seq_stride", &FlashBwdParams::dq_seq_stride)
      .def_readwrite("dq_head_stride", &FlashBwdParams::dq_head_stride)
      .def_readwrite("dk_batch_stride", &FlashBwdParams::dk_batch_stride)
      .def_readwrite("dk_seq_stride", &FlashBwdParams::dk_seq_stride)
      .def_readwrite("dk_head_stride", &FlashBwdParams::dk_head_stride)
      .def_readwrite("dv_batch_stride", &FlashBwdParams::dv_batch_stride)
      .def_readwrite("dv_seq_stride", &FlashBwdParams::dv_seq_stride)
      .def_readwrite("dv_head_stride", &FlashBwdParams::dv_head_stride);
}

void forward(const FlashParams& p, uintptr_t workspace, size_t workspace_bytes, uintptr_t stream) {
  if (const char* reason = ga::cuda::flash_unsupported_reason(p)) throw py::value_error(reason);
  raise_on_failure(ga::cuda::flash_forward(p, as_pointer<void>(workspace), workspace_bytes, as_stream(stream)),
                   "flash_forward");
}

void backward(const FlashBwdParams& p, uintptr_t workspace, size_t workspace_bytes, uintptr_t stream) {
  if (const char* reason = ga::cuda::flash_backward_unsupported_reason(p)) throw py::value_error(reason);
  raise_on_failure(ga::cuda::flash_backward(p, as_pointer<void>(workspace), workspace_bytes, as_stream(stream)),
                   "flash_backward");
}

// The C++ side of bench/python/attention_call_overhead.py: `iters` forward launches back to back from here, timed
// with CUDA events in the same stream, in milliseconds per launch: the kernel's time without any Python in between,
// to which the Python call's time on the same tensors is compared.
double time_forward(const FlashParams& p, uintptr_t workspace, size_t workspace_bytes, uintptr_t stream, int iters) {
  if (const char* reason = ga::cuda::flash_unsupported_reason(p)) throw py::value_error(reason);
  if (iters < 1) throw py::value_error("time_forward: iters must be >= 1");
  const cudaStream_t s = as_stream(stream);
  cudaEvent_t start = nullptr, stop = nullptr;
  raise_on_failure(cudaEventCreate(&start), "cudaEventCreate");
  raise_on_failure(cudaEventCreate(&stop), "cudaEventCreate");
  cudaError_t e = cudaEventRecord(start, s);
  for (int i = 0; i < iters && e == cudaSuccess; ++i) {
    e = ga::cuda::flash_forward(p, as_pointer<void>(workspace), workspace_bytes, s);
  }
  if (e == cudaSuccess) e = cudaEventRecord(stop, s);
  float ms = 0.0f;
  if (e == cudaSuccess) {
    py::gil_scoped_release release;  // the wait may be long: other Python threads keep running
    e = cudaEventSynchronize(stop);
  }
  if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  raise_on_failure(e, "time_forward");
  return static_cast<double>(ms) / iters;
}

}  // namespace

PYBIND11_MODULE(_flash, m) {
  m.doc() = "gpu_accel's flash-attention kernels over raw device pointers (use gpu_accel.flash_attn_func)";
  bind_forward_params(m);
  bind_backward_params(m);
  m.def(
      "forward_unsupported_reason",
      [](const FlashParams& p) { return reason_text(ga::cuda::flash_unsupported_reason(p)); },
      "None when flash_forward runs these parameters on the current device, else the kernel's reason.");
  m.def(
      "forward_workspace_bytes", [](const FlashParams& p) { return ga::cuda::flash_plan(p).workspace_bytes; },
      "flash_plan(p).workspace_bytes: device bytes (16-byte aligned) the forward's workspace needs.");
  m.def("forward", &forward, py::arg("params"), py::arg("workspace"), py::arg("workspace_bytes"), py::arg("stream"),
        "flash_forward on `stream` (a cudaStream_t as an int); ValueError with the kernel's reason when refused.");
  m.def(
      "backward_unsupported_reason",
      [](const FlashBwdParams& p) { return reason_text(ga::cuda::flash_backward_unsupported_reason(p)); },
      "None when flash_backward runs these parameters on the current device, else the kernel's reason.");
  m.def(
      "backward_workspace_bytes",
      [](const FlashBwdParams& p) { return ga::cuda::flash_backward_plan(p).workspace_bytes; },
      "flash_backward_plan(p).workspace_bytes: device bytes (256-byte aligned) the backward's workspace needs.");
  m.def("backward", &backward, py::arg("params"), py::arg("workspace"), py::arg("workspace_bytes"),
        py::arg("stream"), "flash_backward on `stream`; ValueError with the kernel's reason when refused.");
  m.def("time_forward", &time_forward, py::arg("params"), py::arg("workspace"), py::arg("workspace_bytes"),
        py::arg("stream"), py::arg("iters"), "Milliseconds per flash_forward launch, timed from C++ (benchmarks).");
}
