// The pieces of gpu_accel._C: each file registers its part of the module.
#pragma once

#include <pybind11/pybind11.h>

namespace ga::python {

void register_engine(pybind11::module_& m);  // engine.cpp: the LLM core (model, tokenizer, session)
void register_ops(pybind11::module_& m);     // ops.cpp: the CPU tensor ops on numpy arrays
void register_tensor_ops(pybind11::module_& ops);  // tensor_ops.cpp: the tensor-ops library, into _C.ops

}  // namespace ga::python
