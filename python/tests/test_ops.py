"""The CPU ops against numpy float64 references."""

import numpy as np
import pytest

from gpu_accel import ops

RNG = np.random.default_rng(1234)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def test_rms_norm():
    x, w = rand(3, 5, 64), rand(64)
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + 1e-6) * w
    got = ops.rms_norm(x, w, eps=1e-6)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_softmax():
    x = rand(4, 7, 100, scale=5.0)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(ops.softmax(x), e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)


def silu64(g):
    return g / (1.0 + np.exp(-g))


def gelu_tanh64(g):
    return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g**3)))


def test_activations_and_glus():
    g, u = rand(6, 33, scale=3.0), rand(6, 33)
    g64, u64 = g.astype(np.float64), u.astype(np.float64)
    np.testing.assert_allclose(ops.silu(g), silu64(g64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.gelu_tanh(g), gelu_tanh64(g64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.swiglu(g, u), silu64(g64) * u64, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.geglu_tanh(g, u), gelu_tanh64(g64) * u64, rtol=1e-5, atol=1e-6)


def test_softcap():
    x = rand(50, scale=40.0)
    np.testing.assert_allclose(ops.softcap(x, 30.0), 30.0 * np.tanh(x.astype(np.float64) / 30.0), rtol=1e-5,
                               atol=1e-5)


def test_non_contiguous_input_is_accepted():
    x = rand(8, 16)[:, ::2]
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(ops.softmax(x), e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_wrong_dtype_is_refused_not_converted():
    with pytest.raises(TypeError, match="float32"):
        ops.softmax(np.zeros(4, dtype=np.float64))
    with pytest.raises(TypeError, match="numpy"):
        ops.softmax([1.0, 2.0])


def test_bad_shapes_raise_value_error():
    with pytest.raises(ValueError, match="weight"):
        ops.rms_norm(rand(2, 8), rand(7))
    with pytest.raises(ValueError, match="same shape"):
        ops.swiglu(rand(2, 8), rand(2, 7))
