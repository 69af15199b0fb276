// gpu_accel._C: the extension module. Errors: a ga::Error becomes gpu_accel.Error (a RuntimeError) carrying the
// engine's message and its kind ("io", "invalid_format", ...); InvalidArgument becomes gpu_accel.ArgumentError,
// a subclass of both gpu_accel.Error and ValueError, so `except ValueError` catches every bad argument.
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "gpu_accel/error.h"

namespace py = pybind11;

namespace {

PyObject* g_error = nullptr;
PyObject* g_argument_error = nullptr;

// The kind as a Python identifier-like text (the enumerator's name in snake case).
const char* kind_text(ga::ErrorKind kind) {
  switch (kind) {
    case ga::ErrorKind::InvalidArgument:
      return "invalid_argument";
    case ga::ErrorKind::InvalidFormat:
      return "invalid_format";
    case ga::ErrorKind::Unsupported:
      return "unsupported";
    case ga::ErrorKind::Io:
      return "io";
    case ga::ErrorKind::OutOfMemory:
      return "out_of_memory";
    case ga::ErrorKind::OutOfRange:
      return "out_of_range";
    case ga::ErrorKind::Unavailable:
      return "unavailable";
    case ga::ErrorKind::Internal:
      return "internal";
  }
  return "error";
}

void raise_engine_error(const ga::Error& e) {
  PyObject* type = e.kind() == ga::ErrorKind::InvalidArgument ? g_argument_error : g_error;
  py::object exc = py::reinterpret_steal<py::object>(PyObject_CallFunction(type, "s", e.message().c_str()));
  if (!exc) return;  // the call's own exception is set
  exc.attr("kind") = kind_text(e.kind());
  PyErr_SetObject(type, exc.ptr());
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "gpu_accel's extension module (use the gpu_accel package)";
  g_error =
      PyErr_NewExceptionWithDoc("gpu_accel.Error", "An error from the gpu_accel engine.", PyExc_RuntimeError, nullptr);
  py::object bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_argument_error = PyErr_NewExceptionWithDoc(
      "gpu_accel.ArgumentError", "The engine refused an argument (also a ValueError).", bases.ptr(), nullptr);
  m.attr("Error") = py::handle(g_error);
  m.attr("ArgumentError") = py::handle(g_argument_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ga::Error& e) {
      raise_engine_error(e);
    }
  });

  m.def(
      "build_info",
      [] {
        py::dict d;
        d["version"] = GA_VERSION;
        d["git_commit"] = GA_PY_GIT_COMMIT;
        d["cuda"] = static_cast<bool>(GA_PY_CUDA);
        py::list archs;
        const std::string text = GA_PY_CUDA_ARCHS;
        size_t start = 0;
        while (start < text.size()) {
          const size_t comma = text.find(',', start);
          const size_t end = comma == std::string::npos ? text.size() : comma;
          if (end > start) archs.append(text.substr(start, end - start));
          start = end + 1;
        }
        d["cuda_archs"] = archs;
        return d;
      },
      "The build's version, commit, and whether CUDA was compiled in (with its archs).");
  m.attr("__version__") = GA_VERSION;

  ga::python::register_engine(m);
  ga::python::register_ops(m);
}
