"""flash_attn_func (CPU) against a numpy float64 reference with flash-attn's semantics: bottom-right aligned
causal mask and windows, GQA/MQA, softcap, softmax_lse, zero rows where no key is visible."""

import math

import numpy as np
import pytest

import gpu_accel
from gpu_accel import flash_attn_func


def reference(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0):
    """out [b, sq, h, d] and lse [b, h, sq] in float64."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    left, right = window
    if causal:
        right = 0
    kh = np.repeat(k, h // hk, axis=2)  # query head i -> kv head i // (h // hk)
    vh = np.repeat(v, h // hk, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kh) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(sq)[:, None] + (sk - sq)
    j = np.arange(sk)[None, :]
    visible = np.ones((sq, sk), dtype=bool)
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    s = np.where(visible, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    any_visible = visible.any(axis=-1)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    p = np.exp(s - mx)
    total = p.sum(axis=-1, keepdims=True)
    out = np.einsum("bhij,bjhd->bihd", np.divide(p, total, out=np.zeros_like(p), where=total > 0), vh)
    with np.errstate(divide="ignore"):
        lse = np.where(any_visible, np.log(total[..., 0]) + mx[..., 0], np.inf)
    return out, lse


def make(b, sq, sk, h, hk, d, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, sq, h, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hk, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hk, d)).astype(np.float32)
    return q, k, v


SEQLENS = [(1, 1), (113, 203), (64, 32), (128, 128), (1, 77), (33, 1)]
HEADS = [(4, 4), (4, 2), (6, 1)]  # MHA, GQA, MQA


@pytest.mark.parametrize("sq,sk", SEQLENS)
@pytest.mark.parametrize("h,hk", HEADS)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_reference(sq, sk, h, hk, causal):
    q, k, v = make(2, sq, sk, h, hk, 32, seed=sq * 1000 + sk)
    out, lse, probs = flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    ref, ref_lse = reference(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == np.float32
    assert lse.shape == (2, h, sq) and lse.dtype == np.float32
    assert probs is None
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-5)


def test_causal_with_more_queries_than_keys_gives_zero_rows():
    # Bottom-right alignment: with sq=64, sk=32 query i sees keys j <= i - 32, so rows 0..31 see nothing.
    q, k, v = make(1, 64, 32, 2, 2, 16)
    out, lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert np.all(out[:, :32] == 0.0)
    assert np.all(np.isposinf(lse[:, :, :32]))
    assert np.all(np.isfinite(lse[:, :, 32:]))


@pytest.mark.parametrize("window,causal", [((16, 0), True), ((8, 8), False), ((-1, 4), False), ((0, 0), False)])
def test_windows(window, causal):
    q, k, v = make(2, 50, 90, 4, 2, 16, seed=7)
    out, lse, _ = flash_attn_func(q, k, v, causal=causal, window_size=window, return_attn_probs=True)
    ref, ref_lse = reference(q, k, v, causal=causal, window=window)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-5)


def test_scale_and_softcap():
    q, k, v = make(1, 20, 30, 2, 1, 8, seed=3)
    q *= 4.0
    out = flash_attn_func(q, k, v, softmax_scale=0.7, softcap=5.0, causal=True)
    ref, _ = reference(q, k, v, scale=0.7, softcap=5.0, causal=True)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_without_return_attn_probs_returns_the_output_only():
    q, k, v = make(1, 3, 3, 1, 1, 4)
    out = flash_attn_func(q, k, v)
    assert isinstance(out, np.ndarray) and out.shape == q.shape


@pytest.mark.parametrize("kwargs,name", [
    (dict(dropout_p=0.1), "dropout_p"),
    (dict(alibi_slopes=np.zeros((1, 2), np.float32)), "alibi_slopes"),
    (dict(softcap=-1.0), "softcap"),
    (dict(window_size=(-2, 0)), "window_size"),
])
def test_unsupported_arguments_raise_value_error(kwargs, name):
    q, k, v = make(1, 4, 4, 2, 2, 8)
    with pytest.raises(ValueError, match=name):
        flash_attn_func(q, k, v, **kwargs)


def test_bad_shapes_raise_value_error():
    q, k, v = make(1, 4, 4, 3, 2, 8)  # 3 query heads over 2 kv heads
    with pytest.raises(ValueError, match="multiple"):
        flash_attn_func(q, k, v)
    q, k, v = make(1, 4, 4, 2, 2, 8)
    with pytest.raises(ValueError, match="headdim"):
        flash_attn_func(q, k, v[..., :4].copy())


def test_non_float32_is_refused():
    q, k, v = make(1, 4, 4, 2, 2, 8)
    with pytest.raises(TypeError, match="float32"):
        flash_attn_func(q.astype(np.float16), k, v)


def test_qkvpacked_equals_unpacked():
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((2, 37, 3, 4, 16)).astype(np.float32)
    packed = gpu_accel.flash_attn_qkvpacked_func(qkv, causal=True)
    unpacked = flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    np.testing.assert_array_equal(packed, unpacked)
    with pytest.raises(ValueError, match="qkv"):
        gpu_accel.flash_attn_qkvpacked_func(qkv[:, :, :2])


def test_cuda_only_functions_refuse_numpy():
    q = np.zeros((8, 2, 16), dtype=np.float32)
    cu = np.array([0, 8], dtype=np.int32)
    with pytest.raises(TypeError, match="torch CUDA tensors"):
        gpu_accel.flash_attn_varlen_func(q, q, q, cu, cu, 8, 8)
    with pytest.raises(TypeError, match="torch CUDA tensors"):
        gpu_accel.flash_attn_with_kvcache(q[None], q[None], q[None])


def test_descales_refused_on_the_cpu_path():
    q = np.zeros((1, 4, 2, 16), dtype=np.float32)
    with pytest.raises(ValueError, match="q_descale"):
        flash_attn_func(q, q, q, q_descale=1.0)
