"""Which implementation an op's arrays go to. Today: numpy float32 arrays run on the CPU (gpu_accel._C.ops).
The torch / DLPack path (CUDA kernels, autograd) will be one more branch here; until it exists, such tensors
are refused with a TypeError instead of being copied through numpy behind the caller's back."""

import numpy as np


def _is_torch_tensor(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "__dlpack__")


def cpu_arrays(op, **arrays):
    """The arrays as C-contiguous float32 numpy arrays, or TypeError naming the argument that is not one."""
    out = []
    for name, a in arrays.items():
        if _is_torch_tensor(a):
            raise TypeError(
                f"{op}: {name} is a torch tensor; this build of gpu_accel takes numpy float32 arrays only "
                "(the torch/CUDA path is not available yet)")
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{op}: {name} must be a numpy.ndarray, got {type(a).__name__}")
        if a.dtype != np.float32:
            raise TypeError(f"{op}: {name} must be float32, got {a.dtype} (convert with .astype(numpy.float32))")
        out.append(np.ascontiguousarray(a))
    return out
