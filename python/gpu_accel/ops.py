"""The engine's CPU tensor ops on numpy float32 arrays (any shape; the ops work along the last axis or
elementwise). They are the functions the CPU backend runs in the forward pass (src/backends/cpu/ops.h), so
their results are the engine's, to the bit. Each returns a new array."""

from . import _C
from ._arrays import cpu_arrays


def rms_norm(x, weight, eps=1e-5):
    """x / sqrt(mean(x**2, axis=-1) + eps) * weight, weight of shape [x.shape[-1]] (mean in double)."""
    x, weight = cpu_arrays("rms_norm", x=x, weight=weight)
    return _C.ops.rms_norm(x, weight, float(eps))


def softmax(x):
    """Softmax along the last axis (max subtracted first, sum in double)."""
    (x,) = cpu_arrays("softmax", x=x)
    return _C.ops.softmax(x)


def silu(x):
    """x * sigmoid(x)."""
    (x,) = cpu_arrays("silu", x=x)
    return _C.ops.silu(x)


def gelu_tanh(x):
    """GELU with PyTorch's tanh approximation (gelu(approximate="tanh"))."""
    (x,) = cpu_arrays("gelu_tanh", x=x)
    return _C.ops.gelu_tanh(x)


def swiglu(gate, up):
    """silu(gate) * up (the Llama FFN's GLU); gate and up of the same shape."""
    gate, up = cpu_arrays("swiglu", gate=gate, up=up)
    return _C.ops.swiglu(gate, up)


def geglu_tanh(gate, up):
    """gelu_tanh(gate) * up (Gemma's GLU); gate and up of the same shape."""
    gate, up = cpu_arrays("geglu_tanh", gate=gate, up=up)
    return _C.ops.geglu_tanh(gate, up)


def softcap(x, cap):
    """cap * tanh(x / cap) (Gemma 2's soft-capping); cap > 0."""
    (x,) = cpu_arrays("softcap", x=x)
    return _C.ops.softcap(x, float(cap))


__all__ = ["rms_norm", "softmax", "silu", "gelu_tanh", "swiglu", "geglu_tanh", "softcap"]
