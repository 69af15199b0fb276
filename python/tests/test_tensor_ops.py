"""The tensor-ops library (gpu_accel.ops: gemm, conv2d, reductions, elementwise, fused norms) against numpy float64.

The references are computed in float64 from the very values the op read (float16/bfloat16 inputs widened exactly),
so what remains is the op's float32 math and one rounding to the output's dtype. Tolerances (relative, and absolute
against the reference's largest magnitude): float32 2e-5, float16 1e-3 (its half ulp is 4.9e-4), bfloat16 8e-3
(half ulp 3.9e-3).
"""

import math

import numpy as np
import pytest

import gpu_accel
from gpu_accel import ops

RNG = np.random.default_rng(2028)
BF16 = "bfloat16"  # uint16 bits in numpy
DTYPES = [np.float32, np.float16, BF16]
TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float16): 1e-3, np.dtype(np.uint16): 8e-3}


def make(shape, dtype, scale=1.0):
    x = np.asarray(RNG.standard_normal(shape) * scale, dtype=np.float32)
    return ops.to_bfloat16(x) if dtype == BF16 else x.astype(dtype)


def f64(x):
    """The exact values of an array (uint16: bfloat16 bits)."""
    return (ops.from_bfloat16(x) if x.dtype == np.uint16 else x).astype(np.float64)


def check(got, ref, dtype_of_result, factor=1.0):
    tol = TOL[np.dtype(dtype_of_result)] * factor
    scale = max(1.0, float(np.max(np.abs(ref)))) if np.size(ref) else 1.0
    np.testing.assert_allclose(f64(got), ref, rtol=tol, atol=tol * scale)


def dtype_of(dtype):
    return np.dtype(np.uint16) if dtype == BF16 else np.dtype(dtype)


# ---- activations in float64 ----

def gelu64(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


ACT64 = {
    None: lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": gelu64,
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
}


# ---- gemm ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (3, 127, 5), (127, 3, 64), (1, 127, 3), (33, 17, 127)])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_every_dtype_and_transpose(dtype, m, n, k, trans_a, trans_b):
    a = make((k, m) if trans_a else (m, k), dtype)
    b = make((n, k) if trans_b else (k, n), dtype)
    ref = (f64(a).T if trans_a else f64(a)) @ (f64(b).T if trans_b else f64(b))
    got = ops.gemm(a, b, trans_a=trans_a, trans_b=trans_b)
    assert got.shape == (m, n) and got.dtype == dtype_of(dtype)
    check(got, ref, got.dtype)
    wide = ops.gemm(a, b, trans_a=trans_a, trans_b=trans_b, out_dtype=np.float32)
    assert wide.dtype == np.float32
    check(wide, ref, np.float32, factor=5)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_gemm_alpha_beta_bias_activation(activation):
    a, b = make((19, 37), np.float32), make((37, 7), np.float32)
    c, bias = make((19, 7), np.float32), make(7, np.float32)
    ref = ACT64[activation](0.5 * f64(a) @ f64(b) - 1.25 * f64(c) + f64(bias))
    got = ops.gemm(a, b, c, alpha=0.5, beta=-1.25, bias=bias, activation=activation)
    check(got, ref, np.float32)
    np.testing.assert_array_equal(c, c.copy())  # c is read, never written


def test_batched_gemm_broadcast_strided_and_transposed_views():
    a = make((2, 1, 5, 9), np.float16)                       # batch dims broadcast: (2, 1) with (3,)
    b = make((3, 9, 4), np.float16)
    ref = np.matmul(f64(a), f64(b))
    got = ops.batched_gemm(a, b)
    assert got.shape == (2, 3, 5, 4)
    check(got, ref, np.float16)
    big = make((4, 10, 12), np.float32)
    view = big[:, ::2, 1:10]                                 # strided rows, offset columns: read in place
    bt = make((4, 3, 9), np.float32)
    check(ops.batched_gemm(view, bt, trans_b=True), np.matmul(f64(view), np.swapaxes(f64(bt), 1, 2)), np.float32)
    at, b2 = make((9, 6), np.float32), make((9, 2), np.float32)
    check(ops.gemm(at.T, b2), f64(at).T @ f64(b2), np.float32)  # a transposed view (copied: its rows are strided)


def test_batched_gemm_c_broadcast_and_epilogue_in_bf16():
    a, b = make((3, 8, 16), BF16), make((16, 5), BF16)
    c, bias = make((5,), BF16), make((5,), BF16)
    ref = ACT64["silu"](np.matmul(f64(a), f64(b)) + 2.0 * f64(c) + f64(bias))
    got = ops.batched_gemm(a, b, c, beta=2.0, bias=bias, activation="silu")
    assert got.dtype == np.uint16 and got.shape == (3, 8, 5)
    check(got, ref, np.uint16)


def test_gemm_empty_inner_dimension_gives_beta_c():
    c = make((3, 2), np.float32)
    got = ops.gemm(np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32), c, beta=3.0)
    check(got, 3.0 * f64(c), np.float32)


# ---- conv2d ----

def conv2d_reference(x, w, bias, stride, padding, dilation, groups):
    """A direct loop over output pixels, taps and channels, in float64 (NHWC x, KRSC w)."""
    x, w = f64(x), f64(w)
    n, h, wd, c = x.shape
    k, r, s, cg = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    p = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    q = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
    xp = np.zeros((n, h + 2 * ph, wd + 2 * pw, c))
    xp[:, ph:ph + h, pw:pw + wd] = x
    out = np.zeros((n, p, q, k))
    kg = k // groups
    for o in range(k):
        g = o // kg
        for i in range(r):
            for j in range(s):
                patch = xp[:, i * dh: i * dh + sh * (p - 1) + 1: sh, j * dw: j * dw + sw * (q - 1) + 1: sw,
                           g * cg:(g + 1) * cg]
                out[..., o] += patch @ w[o, i, j]
    if bias is not None:
        out += f64(bias)
    return out


def pair(v):
    return (v, v) if isinstance(v, int) else v


@pytest.mark.parametrize("case", [
    dict(shape=(2, 9, 7, 6), k=8, rs=(3, 3)),
    dict(shape=(2, 9, 7, 6), k=8, rs=(3, 3), stride=2, padding=1),
    dict(shape=(1, 11, 10, 4), k=6, rs=(3, 2), stride=(1, 2), padding=(2, 1), dilation=(2, 3)),
    dict(shape=(2, 8, 8, 6), k=9, rs=(3, 3), padding=1, groups=3),
    dict(shape=(1, 7, 5, 4), k=4, rs=(3, 3), padding=1, groups=4),          # depthwise
    dict(shape=(3, 1, 127, 3), k=5, rs=(1, 1)),                             # 1x1, odd sizes
    dict(shape=(1, 127, 3, 1), k=1, rs=(5, 1), stride=3, dilation=2),
])
def test_conv2d_against_a_direct_loop(case):
    stride, padding, dilation = (pair(case.get(name, default)) for name, default in
                                 (("stride", 1), ("padding", 0), ("dilation", 1)))
    groups = case.get("groups", 1)
    x = make(case["shape"], np.float32)
    w = make((case["k"],) + case["rs"] + (case["shape"][3] // groups,), np.float32)
    got = ops.conv2d(x, w, stride=case.get("stride", 1), padding=case.get("padding", 0),
                     dilation=case.get("dilation", 1), groups=groups)
    ref = conv2d_reference(x, w, None, stride, padding, dilation, groups)
    assert got.shape == ref.shape
    check(got, ref, np.float32)


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_conv2d_half_types_bias_activation(dtype):
    x, w, bias = make((2, 8, 8, 16), dtype), make((12, 3, 3, 4), dtype), make(12, dtype)
    got = ops.conv2d(x, w, bias, padding=1, groups=4, activation="relu")
    ref = np.maximum(conv2d_reference(x, w, bias, (1, 1), (1, 1), (1, 1), 4), 0.0)
    assert got.dtype == dtype_of(dtype)
    check(got, ref, got.dtype)


# ---- reductions ----

def reduce_reference(name, x, axis):
    if name == "logsumexp":
        mx = np.max(x, axis=axis, keepdims=True)
        return np.squeeze(mx, axis=axis) + np.log(np.sum(np.exp(x - mx), axis=axis))
    return getattr(np, name)(x, axis=axis)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "argmax", "logsumexp"])
def test_reductions_along_every_axis(dtype, name):
    x = make((3, 127, 5), dtype, scale=2.0)
    for axis in (0, 1, 2, -1):
        got = getattr(ops, name)(x, axis=axis)
        ref = reduce_reference(name, f64(x), axis)
        if name == "argmax":
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, ref)
        else:
            assert got.dtype == dtype_of(dtype) and got.shape == ref.shape
            check(got, ref, got.dtype)
    flat = getattr(ops, name)(x)                             # axis=None: the whole array
    ref = reduce_reference(name, f64(x).reshape(-1), 0)
    if name == "argmax":
        assert flat == ref
    else:
        check(flat, ref, flat.dtype)
    kept = getattr(ops, name)(x, axis=1, keepdims=True)
    assert kept.shape == (3, 1, 5)


def test_reductions_of_strided_views_and_special_values():
    x = make((6, 8), np.float32)[::2, 1::3]
    check(ops.sum(x, axis=0), f64(x).sum(axis=0), np.float32)
    y = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf]], np.float32)
    assert np.isnan(ops.max(y, axis=1)[0])
    assert ops.argmax(y, axis=1).tolist() == np.argmax(y, axis=1).tolist() == [1, 0]
    lse = ops.logsumexp(y, axis=1)
    assert np.isnan(lse[0]) and lse[1] == -np.inf


# ---- elementwise ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])
def test_unary_activations(dtype, name):
    x = make((3, 127), dtype, scale=3.0)
    got = getattr(ops, name)(x)
    assert got.dtype == dtype_of(dtype) and got.shape == x.shape
    check(got, ACT64[name](f64(x)), got.dtype)
    if dtype == np.float32:
        strided = x[:, ::3]                                  # non-contiguous: read through its strides
        check(getattr(ops, name)(strided), ACT64[name](f64(strided)), np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((3, 1), (4,)), ((2, 1, 5), (3, 1)), ((1,), (127,)), ((4, 3), (4, 3)),
                                    ((), (2, 3)), ((5, 1, 1), (1, 3, 127))])
def test_add_mul_broadcast(dtype, shapes):
    a, b = make(shapes[0], dtype), make(shapes[1], dtype)
    for name, fn in (("add", np.add), ("mul", np.multiply)):
        got = getattr(ops, name)(a, b)
        ref = fn(f64(a), f64(b))
        assert got.shape == ref.shape and got.dtype == dtype_of(dtype)
        check(got, ref, got.dtype)


def test_add_mul_scalars_and_mixed_dtypes():
    x = make((2, 3), np.float16)
    check(ops.add(x, 2.5), f64(x) + 2.5, np.float16)
    check(ops.mul(3.0, x), 3.0 * f64(x), np.float16)
    bits = make((4,), BF16)
    check(ops.mul(bits, 0.5), 0.5 * f64(bits), np.uint16)      # a number meets bfloat16 bits as bfloat16
    y = make((3,), np.float32)
    mixed = ops.add(x, y)
    assert mixed.dtype == np.float32                         # numpy's promotion of float16 with float32
    check(mixed, f64(x) + f64(y), np.float32)


# ---- fused norms and softmax ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 3, 127])
def test_rms_norm_layer_norm_softmax(dtype, n):
    x, w, b = make((4, 5, n), dtype, scale=2.0), make(n, dtype), make(n, dtype)
    x64, w64, b64 = f64(x), f64(w), f64(b)
    rms = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + 1e-6) * w64
    check(ops.rms_norm(x, w, eps=1e-6), rms, dtype_of(dtype))
    mean = x64.mean(axis=-1, keepdims=True)
    normed = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
    # the mean is rounded to float32 before it is subtracted, so allow a few roundings of the output type
    check(ops.layer_norm(x, w, b), normed * w64 + b64, dtype_of(dtype), factor=4)
    check(ops.layer_norm(x), normed, dtype_of(dtype), factor=4)
    check(ops.layer_norm(x, bias=b), normed + b64, dtype_of(dtype), factor=4)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    check(ops.softmax(x), e / e.sum(axis=-1, keepdims=True), dtype_of(dtype))


def test_softmax_along_another_axis():
    x = make((7, 3, 5), np.float32, scale=4.0)
    x64 = f64(x)
    e = np.exp(x64 - x64.max(axis=0, keepdims=True))
    check(ops.softmax(x, axis=0), e / e.sum(axis=0, keepdims=True), np.float32)


def test_ml_dtypes_bfloat16_when_installed():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed (uint16 bits cover bfloat16)")
    x = make((4, 8), np.float32).astype(ml_dtypes.bfloat16)
    got = ops.silu(x)
    assert got.dtype == x.dtype
    check(got.view(np.uint16), ACT64["silu"](x.astype(np.float64)), np.uint16)


def test_bfloat16_bits_round_trip():
    x = np.array([1.0, -2.5, 3.14159, np.inf, 1e-40], np.float32)
    back = ops.from_bfloat16(ops.to_bfloat16(x))
    np.testing.assert_allclose(back[:3], x[:3], rtol=4e-3)
    assert back[3] == np.inf
    assert np.isnan(ops.from_bfloat16(ops.to_bfloat16(np.array([np.nan], np.float32))))[0]


# ---- errors ----

def test_bad_dtypes_are_type_errors():
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        ops.gemm(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(TypeError, match="numpy"):
        ops.relu([1.0, 2.0])
    with pytest.raises(TypeError, match="int32"):
        ops.sum(np.zeros(3, np.int32))
    with pytest.raises(TypeError, match="out_dtype"):
        ops.gemm(make((2, 2), np.float32), make((2, 2), np.float32), out_dtype=np.float64)
    with pytest.raises(TypeError, match="c's dtype"):
        ops.gemm(make((2, 2), np.float32), make((2, 2), np.float32), make((2, 2), np.float16), beta=1.0)


def test_bad_shapes_are_value_errors():
    f = np.float32
    with pytest.raises(ValueError, match="inner dimensions"):
        ops.gemm(make((3, 4), f), make((5, 2), f))
    with pytest.raises(ValueError, match="2-d"):
        ops.gemm(make((2, 3, 4), f), make((4, 2), f))
    with pytest.raises(ValueError, match="batch dimensions"):
        ops.batched_gemm(make((2, 3, 4), f), make((3, 4, 2), f))
    with pytest.raises(ValueError, match="bias"):
        ops.gemm(make((3, 4), f), make((4, 2), f), bias=make(3, f))
    with pytest.raises(ValueError, match="needs c"):
        ops.gemm(make((3, 4), f), make((4, 2), f), beta=1.0)
    with pytest.raises(ValueError, match="activation"):
        ops.gemm(make((3, 4), f), make((4, 2), f), activation="swish")
    with pytest.raises(ValueError, match="groups"):
        ops.conv2d(make((1, 4, 4, 6), f), make((4, 3, 3, 2), f), groups=2)
    with pytest.raises(ValueError, match="stride"):
        ops.conv2d(make((1, 4, 4, 2), f), make((4, 3, 3, 2), f), stride=0)
    with pytest.raises(ValueError, match="axis"):
        ops.sum(make((2, 3), f), axis=2)
    with pytest.raises(ValueError, match="no maximum"):          # the library's own refusal (ArgumentError)
        ops.max(np.zeros((2, 0), f), axis=1)
    with pytest.raises(gpu_accel.ArgumentError):
        ops.argmax(np.zeros((0,), f), axis=0)
    with pytest.raises(ValueError, match="broadcast"):
        ops.add(make((2, 3), f), make((4,), f))
    with pytest.raises(ValueError, match=r"weight \[7\] must have shape \[8\]"):
        ops.rms_norm(make((2, 8), f), make(7, f))
    with pytest.raises(ValueError, match="axis"):
        ops.softmax(make((2, 3), f), axis=3)
