"""Tensor ops on numpy arrays: the CPU reference of gpu_accel's tensor-ops library (include/gpu_accel/tensor_ops.h),
with numpy-like signatures. Each returns a new array.

- ``gemm``, ``batched_gemm``: alpha * op(a) @ op(b) + beta * c, with an epilogue bias + activation.
- ``conv2d``: NHWC input, KRSC weights ([out_channels, kh, kw, in_channels / groups]), stride/padding/dilation/groups.
- reductions along an axis: ``sum``, ``mean``, ``max``, ``argmax``, ``logsumexp``.
- elementwise: ``relu``, ``gelu``, ``gelu_tanh``, ``silu``, ``sigmoid``, ``tanh``; ``add``, ``mul`` (broadcasting).
- fused along the last axis: ``rms_norm``, ``layer_norm``, ``softmax``.
- the forward's GLUs and soft-capping (float32 only): ``swiglu``, ``geglu_tanh``, ``softcap``.

dtypes: float32, float16, and bfloat16, which numpy lacks: pass it as uint16 arrays of bfloat16 bits (see
``to_bfloat16`` / ``from_bfloat16``) or as ml_dtypes' ``bfloat16``; results keep the input's dtype (argmax: int64).
The math is float32 (sums in double), rounded once to the output's dtype. Other dtypes raise TypeError; bad shapes
ValueError. Non-contiguous and broadcast views are read in place through their strides (no copy).
"""

import builtins

import numpy as np

from . import _C
from ._arrays import cpu_arrays, is_torch_tensor

_BF16_BITS = np.dtype(np.uint16)
_ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")


# ---- dtypes ----

def _is_ml_bfloat16(dtype):
    return dtype.name == "bfloat16" and dtype.itemsize == 2


def _array(op, name, a):
    """a as a numpy array the library reads (bfloat16 seen as its uint16 bits), or TypeError."""
    if is_torch_tensor(a):
        raise TypeError(f"{op}: {name} is a torch tensor; gpu_accel.ops takes numpy arrays (CPU)")
    if isinstance(a, np.generic):  # a numpy scalar (what 0-d arithmetic returns) is a 0-d array
        a = np.asarray(a)
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{op}: {name} must be a numpy.ndarray, got {type(a).__name__}")
    if _is_ml_bfloat16(a.dtype):
        return a.view(_BF16_BITS)
    if a.dtype not in (np.float32, np.float16, _BF16_BITS):
        raise TypeError(f"{op}: {name} must be float32, float16 or bfloat16 (uint16 bits or ml_dtypes.bfloat16), "
                        f"got {a.dtype}")
    return a


def _result_dtype(*arrays):
    """The output's dtype: the inputs' when they agree, else float32 (as numpy promotes float16 with float32)."""
    dtypes = {a.dtype for a in arrays}
    return dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float32)


def _as_caller_dtype(out, caller):
    """out (uint16 bits for bfloat16) in the dtype the caller used: an ml_dtypes bfloat16 input (`caller`, the
    array as passed) gets a bfloat16 result."""
    dtype = getattr(caller, "dtype", None)
    if dtype is not None and _is_ml_bfloat16(dtype) and out.dtype == _BF16_BITS:
        return out.view(dtype)
    return out


def to_bfloat16(x):
    """float32 (or anything numpy converts to it) -> uint16 bfloat16 bits, round to nearest even, NaN kept."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return np.asarray(np.where(nan, ((bits >> 16) | 64).astype(np.uint16), rounded), dtype=np.uint16)


def from_bfloat16(bits):
    """uint16 bfloat16 bits -> float32 (exact)."""
    wide = np.asarray(np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16, dtype=np.uint32)
    return wide.view(np.float32)  # (0-d arrays too: numpy makes scalars of their arithmetic)


def _activation(op, activation):
    name = "none" if activation is None else activation
    if name not in _ACTIVATIONS:
        raise ValueError(f"{op}: activation must be one of {', '.join(_ACTIVATIONS[1:])} or None, got {activation!r}")
    return name


def _out_dtype(op, out_dtype, default):
    if out_dtype is None:
        return default
    if isinstance(out_dtype, str) and out_dtype == "bfloat16":
        return _BF16_BITS
    dt = np.dtype(out_dtype)
    if _is_ml_bfloat16(dt):
        return _BF16_BITS
    if dt not in (np.float32, np.float16, _BF16_BITS):
        raise TypeError(f"{op}: out_dtype must be float32, float16 or bfloat16, got {dt}")
    return dt


# ---- gemm ----

def _inner_contiguous(a):
    """a with a unit-stride last axis (a copy only when it has none)."""
    if a.ndim and a.shape[-1] > 1 and a.strides[-1] != a.itemsize:
        return np.ascontiguousarray(a)
    return a


def batched_gemm(a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, bias=None, activation=None,
                 out_dtype=None):
    """act(alpha * op(a) @ op(b) + beta * c + bias) over batches, as numpy.matmul broadcasts them.

    a: [..., m, k] ([..., k, m] with trans_a), b: [..., k, n] ([..., n, k] with trans_b); the leading (batch) dims
    broadcast against each other, a broadcast operand is read once per batch without copying. c (optional, read
    when beta != 0, never modified) broadcasts to the result [..., m, n]; bias is [n]; activation one of relu, gelu,
    gelu_tanh, silu, sigmoid, tanh. out_dtype defaults to the inputs' dtype (float32 when they differ).
    """
    op = "batched_gemm"
    caller = a
    a, b = _array(op, "a", a), _array(op, "b", b)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"{op}: a and b must have at least 2 dimensions, got {a.shape} and {b.shape}")
    m, k = (a.shape[-1], a.shape[-2]) if trans_a else a.shape[-2:]
    kb, n = (b.shape[-1], b.shape[-2]) if trans_b else b.shape[-2:]
    if k != kb:
        raise ValueError(f"{op}: the inner dimensions differ: op(a) is {(m, k)}, op(b) is {(kb, n)}")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"{op}: the batch dimensions of a {a.shape} and b {b.shape} do not broadcast") from None
    dtype = _out_dtype(op, out_dtype, _result_dtype(a, b))
    out = np.empty(batch + (m, n), dtype=dtype)
    if c is not None:
        c = _array(op, "c", c)
        if c.dtype != dtype:
            raise TypeError(f"{op}: c's dtype {c.dtype} must be the result's ({dtype})")
        try:
            out[...] = np.broadcast_to(c, out.shape)
        except ValueError:
            raise ValueError(f"{op}: c {c.shape} does not broadcast to the result {out.shape}") from None
    elif beta != 0.0:
        raise ValueError(f"{op}: beta = {beta} needs c")
    if bias is not None:
        bias = np.ascontiguousarray(_array(op, "bias", bias))
        if bias.shape != (n,):
            raise ValueError(f"{op}: bias must have shape ({n},) (one value per result column), got {bias.shape}")
    nb = int(np.prod(batch, dtype=np.int64))
    a3 = _inner_contiguous(np.broadcast_to(a, batch + a.shape[-2:])).reshape((nb,) + a.shape[-2:])
    b3 = _inner_contiguous(np.broadcast_to(b, batch + b.shape[-2:])).reshape((nb,) + b.shape[-2:])
    _C.ops.gemm(a3, b3, out.reshape((nb, m, n)), bias, float(alpha), float(beta) if c is not None else 0.0,
                bool(trans_a), bool(trans_b), _activation(op, activation))
    return _as_caller_dtype(out, caller)


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, bias=None, activation=None,
         out_dtype=None):
    """act(alpha * op(a) @ op(b) + beta * c + bias) for 2-d a [m, k] and b [k, n] (see batched_gemm)."""
    for name, x in (("a", a), ("b", b)):
        if isinstance(x, np.ndarray) and x.ndim != 2:
            raise ValueError(f"gemm: {name} must be 2-d, got shape {x.shape} (batched_gemm takes batches)")
    return batched_gemm(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b, bias=bias,
                        activation=activation, out_dtype=out_dtype)


# ---- conv2d ----

def _pair(op, name, v, minimum):
    pair = (v, v) if isinstance(v, (int, np.integer)) else tuple(v)
    if len(pair) != 2 or any(not isinstance(p, (int, np.integer)) or p < minimum for p in pair):
        raise ValueError(f"{op}: {name} must be an int or a pair of ints >= {minimum}, got {v!r}")
    return int(pair[0]), int(pair[1])


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, activation=None):
    """2-d convolution (cross-correlation, as torch's conv2d) of NHWC x [n, h, w, c] with KRSC weight
    [k, kh, kw, c / groups]: returns [n, p, q, k], p = (h + 2 pad_h - dil_h (kh - 1) - 1) // stride_h + 1.

    stride, padding (symmetric) and dilation are ints or (h, w) pairs; output channel o sees the input channels of
    group o // (k / groups); bias [k] and activation are applied to the sums. An implicit GEMM on the CPU.
    """
    op = "conv2d"
    caller = x
    x, weight = _array(op, "x", x), _array(op, "weight", weight)
    if x.ndim != 4 or weight.ndim != 4:
        raise ValueError(f"{op}: x must be 4-d [n, h, w, c] and weight [k, kh, kw, c / groups], got {x.shape} and "
                         f"{weight.shape}")
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{op}: groups must be an int >= 1, got {groups!r}")
    n, h, w, ch = x.shape
    k, r, s, cg = weight.shape
    if cg * groups != ch or k % groups:
        raise ValueError(f"{op}: weight {weight.shape} with groups={groups} does not fit x's {ch} channels (weight's "
                         f"last dim times groups must be {ch}, and groups must divide its {k} output channels)")
    stride, padding, dilation = (_pair(op, "stride", stride, 1), _pair(op, "padding", padding, 0),
                                 _pair(op, "dilation", dilation, 1))
    if bias is not None:
        bias = np.ascontiguousarray(_array(op, "bias", bias))
        if bias.shape != (k,):
            raise ValueError(f"{op}: bias must have shape ({k},), got {bias.shape}")
    p, q = _C.ops.conv2d_output_hw(h, w, r, s, stride, padding, dilation)
    out = np.empty((n, p, q, k), dtype=_result_dtype(x, weight))
    _C.ops.conv2d(np.ascontiguousarray(x), np.ascontiguousarray(weight), bias, out, stride, padding, dilation,
                  int(groups), _activation(op, activation))
    return _as_caller_dtype(out, caller)


# ---- reductions ----

def _reduce(op, x, axis, keepdims):
    caller = x
    x = _array(op, "x", x)
    if axis is None:
        x, axis = x.reshape(-1), 0
    if not isinstance(axis, (int, np.integer)) or not -x.ndim <= axis < builtins.max(x.ndim, 1) or x.ndim == 0:
        raise ValueError(f"{op}: axis {axis!r} is out of range for an array of shape {x.shape}")
    axis = int(axis) % x.ndim
    shape = x.shape[:axis] + x.shape[axis + 1:]
    out = np.empty(shape, dtype=np.int64 if op == "argmax" else x.dtype)
    _C.ops.reduce(op, x, axis, out)
    if keepdims:
        out = np.expand_dims(out, axis)
    return out if op == "argmax" else _as_caller_dtype(out, caller)


def sum(x, axis=None, keepdims=False):  # noqa: A001 (numpy's name)
    """Sum along axis (None: all elements), accumulated in double."""
    return _reduce("sum", x, axis, keepdims)


def mean(x, axis=None, keepdims=False):
    """Mean along axis (None: all elements), accumulated in double; an empty axis gives NaN."""
    return _reduce("mean", x, axis, keepdims)


def max(x, axis=None, keepdims=False):  # noqa: A001
    """Maximum along axis (None: all elements); NaN propagates. An empty axis is a ValueError."""
    return _reduce("max", x, axis, keepdims)


def argmax(x, axis=None, keepdims=False):
    """Index (int64) of the first maximum along axis (None: of the flattened array); a NaN wins, as in numpy."""
    return _reduce("argmax", x, axis, keepdims)


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) along axis, the maximum subtracted first; an all -inf row gives -inf."""
    return _reduce("logsumexp", x, axis, keepdims)


# ---- elementwise ----

def _unary(op, x):
    caller = x
    x = _array(op, "x", x)
    out = np.empty(x.shape, dtype=x.dtype)
    _C.ops.unary(op, x, out)
    return _as_caller_dtype(out, caller)


def relu(x):
    """max(x, 0)."""
    return _unary("relu", x)


def gelu(x):
    """The exact GELU, x/2 (1 + erf(x / sqrt 2)) (torch's gelu default)."""
    return _unary("gelu", x)


def gelu_tanh(x):
    """GELU with PyTorch's tanh approximation (gelu(approximate="tanh"))."""
    return _unary("gelu_tanh", x)


def silu(x):
    """x * sigmoid(x)."""
    return _unary("silu", x)


def sigmoid(x):
    """1 / (1 + exp(-x))."""
    return _unary("sigmoid", x)


def tanh(x):
    """tanh(x)."""
    return _unary("tanh", x)


def _scalar_like(v, arr):
    """A Python number as a 0-d array of arr's (library) dtype: bfloat16 bits for uint16."""
    if arr.dtype == _BF16_BITS:
        return to_bfloat16(np.float32(v))
    return np.asarray(v, dtype=arr.dtype)


def _binary(op, a, b):
    # a Python number meets an array in the array's dtype, as numpy 2 does
    caller = b if isinstance(a, (int, float)) else a
    if isinstance(a, (int, float)) and isinstance(b, np.ndarray):
        a = _scalar_like(a, _array(op, "b", b))
    if isinstance(b, (int, float)) and isinstance(a, np.ndarray):
        b = _scalar_like(b, _array(op, "a", a))
    a, b = _array(op, "a", a), _array(op, "b", b)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None
    out = np.empty(shape, dtype=_result_dtype(a, b))
    _C.ops.binary(op, a, b, out)
    return _as_caller_dtype(out, caller)


def add(a, b):
    """a + b with numpy's broadcasting (a Python number takes the array's dtype)."""
    return _binary("add", a, b)


def mul(a, b):
    """a * b with numpy's broadcasting (a Python number takes the array's dtype)."""
    return _binary("mul", a, b)


# ---- fused norms and softmax ----

def rms_norm(x, weight, eps=1e-5):
    """x / sqrt(mean(x**2, axis=-1) + eps) * weight, weight of shape [x.shape[-1]] (the engine's kernel)."""
    caller = x
    x, weight = _array("rms_norm", "x", x), _array("rms_norm", "weight", weight)
    out = np.empty(x.shape, dtype=x.dtype)
    _C.ops.rms_norm(x, weight, float(eps), out)
    return _as_caller_dtype(out, caller)


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias along the last axis (biased variance, as torch's layer_norm);
    weight and bias [x.shape[-1]] are optional."""
    caller = x
    x = _array("layer_norm", "x", x)
    weight = None if weight is None else _array("layer_norm", "weight", weight)
    bias = None if bias is None else _array("layer_norm", "bias", bias)
    out = np.empty(x.shape, dtype=x.dtype)
    _C.ops.layer_norm(x, weight, bias, float(eps), out)
    return _as_caller_dtype(out, caller)


def softmax(x, axis=-1):
    """Softmax along axis (default the last; max subtracted first, sum in double)."""
    caller = x
    x = _array("softmax", "x", x)
    if x.ndim == 0 or not isinstance(axis, (int, np.integer)) or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"softmax: axis {axis!r} is out of range for an array of shape {x.shape}")
    out = np.empty(x.shape, dtype=x.dtype)
    # the library works along the last axis: both arrays are viewed with `axis` moved there (no copy)
    _C.ops.softmax(np.moveaxis(x, axis, -1), np.moveaxis(out, axis, -1))
    return _as_caller_dtype(out, caller)


# ---- the forward's GLUs (float32, the engine's kernels) ----

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


__all__ = ["gemm", "batched_gemm", "conv2d", "sum", "mean", "max", "argmax", "logsumexp", "relu", "gelu",
           "gelu_tanh", "silu", "sigmoid", "tanh", "add", "mul", "rms_norm", "layer_norm", "softmax", "swiglu",
           "geglu_tanh", "softcap", "to_bfloat16", "from_bfloat16"]
