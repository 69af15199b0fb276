"""Which implementation an op's arrays go to: numpy float32 arrays run on the CPU (gpu_accel._C.ops); torch tensors
go to the torch front (gpu_accel.torch_attention: our CUDA kernels, autograd, custom ops), which only then imports
torch. Nothing is converted between the two behind the caller's back."""

import numpy as np


def is_torch_tensor(x):
    # by the type's module, so that telling needs no torch import (and torch.compile reads it as a constant)
    return type(x).__module__.split(".")[0] == "torch"


def cpu_arrays(op, **arrays):
    """The arrays as C-contiguous float32 numpy arrays, or TypeError naming the argument that is not one."""
    out = []
    for name, a in arrays.items():
        if is_torch_tensor(a):
            raise TypeError(f"{op}: {name} is a torch tensor among numpy arrays; pass all torch tensors (the CUDA "
                            "path) or all numpy float32 arrays (the CPU path)")
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{op}: {name} must be a numpy.ndarray, got {type(a).__name__}")
        if a.dtype != np.float32:
            raise TypeError(f"{op}: {name} must be float32, got {a.dtype} (convert with .astype(numpy.float32))")
        out.append(np.ascontiguousarray(a))
    return out
