"""gpu_accel's flash-attn functions on torch CUDA tensors (our flash kernels) against a float32 PyTorch reference
with flash-attn's tolerance rule (torch_reference.py): forward and backward, bf16/fp16, head dims 64/128/256 (and
padded ones), causal and not, GQA/MQA, seqlen pairs up to (4096, 4096); varlen batches; the KV cache (paged and
contiguous); torch.compile(fullgraph=True) equal to eager; the ValueErrors for what the kernels lack.

Skipped, with the reason, without torch, without a CUDA GPU or on a CPU build of the package; GA_REQUIRE_TORCH_CUDA=1
(tools/device/python_torch.sh) turns those skips into failures, so a GPU run can never pass by running nothing."""

import itertools
import math
import os

import pytest

_REQUIRED = os.environ.get("GA_REQUIRE_TORCH_CUDA") == "1"


def _unavailable(reason):
    if _REQUIRED:
        pytest.fail(f"GA_REQUIRE_TORCH_CUDA=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    import torch
except ImportError:
    _unavailable("torch is not installed (the torch front needs it)")
if not torch.cuda.is_available():
    _unavailable("no CUDA GPU is visible to torch")
try:
    from gpu_accel import _flash  # noqa: F401
except ImportError:
    _unavailable("this gpu_accel build has no CUDA module (gpu_accel._flash: configure with GA_CUDA)")

import gpu_accel  # noqa: E402
from torch_reference import assert_within_rule, attention_ref, max_error  # noqa: E402

DTYPES = [torch.bfloat16, torch.float16]
SEQLENS = [(1, 1), (113, 203), (203, 113), (1000, 1000)]
HEADS = [(4, 4), (4, 2), (4, 1)]  # MHA, GQA, MQA


def _qkv(b, sq, sk, h, hk, d, dtype, requires_grad=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, generator=g)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def _close(a, b, rel=1e-2):
    return max_error(a, b) <= rel * b.float().abs().max().item() + 1e-5


def _check_forward_backward(q, k, v, backward=True, **kw):
    out, lse, none = gpu_accel.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
    assert none is None
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    causal, window, softcap = kw.get("causal", False), kw.get("window_size", (-1, -1)), kw.get("softcap", 0.0)
    ref, lse_ref = attention_ref(q, k, v, causal, window, softcap)
    pt, lse_pt = attention_ref(q, k, v, causal, window, softcap, upcast=False)
    assert_within_rule("out", out, ref, pt, 2)
    # the LSE: ours is f32 throughout; PyTorch's at the input precision is a loose bound, so it gets a floor
    assert max_error(lse, lse_ref) <= max(2 * max_error(lse_pt, lse_ref), 1e-3) + 1e-5
    if not backward:
        return
    g = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    dq_ref, dk_ref, dv_ref = torch.autograd.grad(ref, (q, k, v), g)
    dq_pt, dk_pt, dv_pt = torch.autograd.grad(pt, (q, k, v), g)
    for name, ours, r, p in (("dq", dq, dq_ref, dq_pt), ("dk", dk, dk_ref, dk_pt), ("dv", dv, dv_ref, dv_pt)):
        assert ours.shape == r.shape
        assert_within_rule(name, ours, r, p, 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads", HEADS, ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("seqlens", SEQLENS, ids=lambda s: f"{s[0]}x{s[1]}")
def test_forward_backward(dtype, d, causal, heads, seqlens):
    sq, sk = seqlens
    q, k, v = _qkv(2, sq, sk, heads[0], heads[1], d, dtype, requires_grad=True)
    _check_forward_backward(q, k, v, causal=causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_long_4096(causal):
    q, k, v = _qkv(1, 4096, 4096, 4, 2, 128, torch.bfloat16, requires_grad=True)
    _check_forward_backward(q, k, v, causal=causal)


@pytest.mark.parametrize("d", [40, 96, 160])
def test_head_dims_padded(d):
    # flash-attn takes any head dim <= 256; ours pads to the next one the kernels have (96 to 128 for the backward)
    q, k, v = _qkv(2, 113, 203, 4, 2, d, torch.float16, requires_grad=True)
    _check_forward_backward(q, k, v, causal=True)
    with torch.no_grad():  # forward only: 96 runs on the forward kernel's own 96
        q2, k2, v2 = (t.detach() for t in (q, k, v))
        _check_forward_backward(q2, k2, v2, backward=False, causal=True)


def test_window_softcap_scale():
    q, k, v = _qkv(2, 257, 300, 4, 2, 128, torch.bfloat16, requires_grad=True)
    _check_forward_backward(q, k, v, causal=True, window_size=(64, 0))
    _check_forward_backward(q, k, v, window_size=(32, 16))
    _check_forward_backward(q, k, v, softcap=30.0, causal=True)
    out = gpu_accel.flash_attn_func(q, k, v, softmax_scale=0.05)
    ref, _ = attention_ref(q, k, v, softmax_scale=0.05)
    pt, _ = attention_ref(q, k, v, softmax_scale=0.05, upcast=False)
    assert_within_rule("out (softmax_scale)", out, ref, pt, 2)


def test_masked_rows_give_zero_and_inf_lse():
    q, k, v = _qkv(1, 200, 50, 2, 2, 64, torch.bfloat16)
    out, lse, _ = gpu_accel.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    # query i sees keys j <= i + 50 - 200: the first 150 rows see none
    assert torch.all(out[:, :150] == 0)
    assert torch.all(torch.isposinf(lse[:, :, :150]))
    assert torch.isfinite(lse[:, :, 150:]).all()


def test_non_contiguous_inputs_and_qkvpacked():
    qkv = torch.randn(2, 129, 3, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = gpu_accel.flash_attn_qkvpacked_func(qkv, causal=True)
    q, k, v = (qkv[:, :, i].detach().clone().requires_grad_(True) for i in range(3))
    out2 = gpu_accel.flash_attn_func(q, k, v, causal=True)
    assert _close(out, out2)
    g = torch.randn_like(out)
    (dqkv,) = torch.autograd.grad(out, (qkv,), g)
    grads = torch.autograd.grad(out2, (q, k, v), g)
    for i in range(3):  # dQ is summed with atomic adds: equal up to the order of the additions
        assert _close(dqkv[:, :, i], grads[i])
    # a transposed layout (head stride > seq stride), as [b, h, s, d] tensors .transpose(1, 2) give
    qt, kt, vt = (torch.randn(2, 4, 77, 64, device="cuda", dtype=torch.float16).transpose(1, 2) for _ in range(3))
    _check_forward_backward(qt, kt, vt, backward=False)


def test_runs_on_the_current_stream():
    q, k, v = _qkv(2, 512, 512, 4, 4, 128, torch.bfloat16)
    expected = gpu_accel.flash_attn_func(q, k, v, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = gpu_accel.flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    assert _close(out, expected)


def _varlen_batch(lens_q, lens_k, h, hk, d, dtype, seed=1):
    g = torch.Generator(device="cuda").manual_seed(seed)
    cu_q = torch.tensor([0, *itertools.accumulate(lens_q)], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, *itertools.accumulate(lens_k)], dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lens_q), h, d, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(sum(lens_k), hk, d, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(sum(lens_k), hk, d, device="cuda", dtype=dtype, generator=g)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen(dtype, d, causal):
    lens_q, lens_k = [1, 113, 203, 7, 300], [5, 203, 113, 7, 300]
    q, k, v, cu_q, cu_k = _varlen_batch(lens_q, lens_k, 4, 2, d, dtype)
    out, lse, _ = gpu_accel.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                                   return_attn_probs=True)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    starts_q, starts_k = cu_q.tolist(), cu_k.tolist()
    for b in range(len(lens_q)):
        qs, ks = slice(starts_q[b], starts_q[b + 1]), slice(starts_k[b], starts_k[b + 1])
        qb, kb, vb = q[qs][None], k[ks][None], v[ks][None]
        ref, lse_ref = attention_ref(qb, kb, vb, causal)
        pt, _ = attention_ref(qb, kb, vb, causal, upcast=False)
        assert_within_rule(f"varlen seq {b}", out[qs][None], ref, pt, 2)
        assert max_error(lse[:, qs][None], lse_ref) <= 1e-2


def _paged_cache(b, capacity, page_size, hk, d, dtype, seed=2):
    # a shuffled pool: sequence b's page i sits at block_table[b, i]
    pages_per_seq = capacity // page_size
    n_pages = b * pages_per_seq + 3  # spare pages the table never names
    g = torch.Generator(device="cuda").manual_seed(seed)
    k_cache = torch.randn(n_pages, page_size, hk, d, device="cuda", dtype=dtype, generator=g)
    v_cache = torch.randn(n_pages, page_size, hk, d, device="cuda", dtype=dtype, generator=g)
    perm = torch.randperm(n_pages, generator=torch.Generator().manual_seed(seed))[: b * pages_per_seq]
    block_table = perm.view(b, pages_per_seq).to(torch.int32).cuda()
    return k_cache, v_cache, block_table


def _gather_pages(cache, block_table, b, n):
    page_size = cache.shape[1]
    pos = torch.arange(n, device="cuda")
    return cache[block_table[b, pos // page_size].long(), pos % page_size]  # [n, hk, d]


@pytest.mark.parametrize("page_size", [16, 128])
@pytest.mark.parametrize("s_new", [0, 1, 7], ids=["no-new", "decode", "chunk"])
@pytest.mark.parametrize("d", [64, 128])
def test_kvcache_paged(page_size, s_new, d):
    b, hk, h, capacity, dtype = 3, 2, 8, 512, torch.bfloat16
    k_cache, v_cache, block_table = _paged_cache(b, capacity, page_size, hk, d, dtype)
    cache_seqlens = torch.tensor([5, 100, 257], dtype=torch.int32, device="cuda")
    sq = max(s_new, 1)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
    k_new = torch.randn(b, s_new, hk, d, device="cuda", dtype=dtype) if s_new else None
    v_new = torch.randn(b, s_new, hk, d, device="cuda", dtype=dtype) if s_new else None
    out, lse = gpu_accel.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=cache_seqlens,
                                                 block_table=block_table, causal=True, return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (b, h, sq)
    for i in range(b):
        n = int(cache_seqlens[i]) + s_new
        kb, vb = _gather_pages(k_cache, block_table, i, n)[None], _gather_pages(v_cache, block_table, i, n)[None]
        if s_new:  # the new keys were written in place after the cached ones
            assert torch.equal(kb[0, -s_new:], k_new[i]) and torch.equal(vb[0, -s_new:], v_new[i])
        ref, lse_ref = attention_ref(q[i:i + 1], kb, vb, causal=True)
        pt, _ = attention_ref(q[i:i + 1], kb, vb, causal=True, upcast=False)
        assert_within_rule(f"kvcache seq {i}", out[i:i + 1], ref, pt, 2)
        assert max_error(lse[i:i + 1], lse_ref) <= 1e-2


def test_kvcache_contiguous():
    b, hk, h, d, capacity, s_new, dtype = 2, 2, 4, 128, 300, 3, torch.float16
    k_cache = torch.randn(b, capacity, hk, d, device="cuda", dtype=dtype)
    v_cache = torch.randn(b, capacity, hk, d, device="cuda", dtype=dtype)
    cache_seqlens = torch.tensor([10, 200], dtype=torch.int32, device="cuda")
    q = torch.randn(b, s_new, h, d, device="cuda", dtype=dtype)
    k_new, v_new = (torch.randn(b, s_new, hk, d, device="cuda", dtype=dtype) for _ in range(2))
    out = gpu_accel.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=cache_seqlens,
                                            causal=True)
    for i in range(b):
        n = int(cache_seqlens[i]) + s_new
        assert torch.equal(k_cache[i, n - s_new:n], k_new[i])
        ref, _ = attention_ref(q[i:i + 1], k_cache[i:i + 1, :n], v_cache[i:i + 1, :n], causal=True)
        pt, _ = attention_ref(q[i:i + 1], k_cache[i:i + 1, :n], v_cache[i:i + 1, :n], causal=True, upcast=False)
        assert_within_rule(f"contiguous kvcache seq {i}", out[i:i + 1], ref, pt, 2)


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="this torch has no float8_e4m3fn")
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fp8_forward(d, causal):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("our FP8 kernel is Hopper's (sm_90a)")
    q, k, v = _qkv(2, 1000, 1000, 4, 2, d, torch.float32)
    scales = [t.abs().amax().item() / 448.0 for t in (q, k, v)]  # e4m3's largest finite value is 448
    q8, k8, v8 = ((t / s).to(torch.float8_e4m3fn) for t, s in zip((q, k, v), scales))
    out = gpu_accel.flash_attn_func(q8, k8, v8, causal=causal, q_descale=scales[0],
                                    k_descale=torch.tensor([scales[1]], device="cuda"), v_descale=scales[2])
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    deq = [t.float() * s for t, s in zip((q8, k8, v8), scales)]
    ref, _ = attention_ref(*deq, causal=causal)
    rel_l2 = ((out.float() - ref).norm() / ref.norm()).item()
    assert rel_l2 <= 5e-2, f"FP8 relative L2 error {rel_l2:.3g}"  # the C++ suite's FP8 bound (docs/testing.md)


class _Attention(torch.nn.Module):
    def __init__(self, dim=256, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wkv = torch.nn.Linear(dim, 2 * kv_heads * self.hd, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.hd)
        k, v = self.wkv(x).view(b, s, 2, self.kv_heads, self.hd).unbind(2)
        return gpu_accel.flash_attn_func(q, k, v, causal=True).reshape(b, s, -1)


def test_torch_compile_fullgraph_equals_eager():
    torch.manual_seed(0)
    model = _Attention().cuda().to(torch.bfloat16)
    x = torch.randn(2, 300, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    eager = model(x)
    (gx_eager,) = torch.autograd.grad(eager.float().square().sum(), (x,))
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x)
    (gx,) = torch.autograd.grad(out.float().square().sum(), (x,))
    # the attention is the same kernel; only the projections around it may be fused differently
    assert max_error(out, eager) <= 1e-2 * eager.abs().max().item()
    assert max_error(gx, gx_eager) <= 2e-2 * gx_eager.abs().max().item()


def test_torch_compile_of_the_torch_front_itself():
    # The same without gpu_accel.flash_attn_func's numpy/torch dispatch in the traced code: tells a graph break in
    # the dispatch from one in the torch front when the test above fails.
    from gpu_accel import torch_attention

    q, k, v = _qkv(1, 200, 300, 4, 1, 128, torch.float16)
    fn = torch.compile(lambda q, k, v: torch_attention.flash_attn_func(q, k, v, causal=True), fullgraph=True)
    assert _close(fn(q, k, v), torch_attention.flash_attn_func(q, k, v, causal=True), rel=1e-3)


def test_custom_ops_are_registered():
    import gpu_accel.torch_attention  # noqa: F401  (registers the ops; other tests may not have run first)

    assert hasattr(torch.ops.gpu_accel, "flash_fwd") and hasattr(torch.ops.gpu_accel, "flash_bwd")
    q, k, v = _qkv(1, 64, 64, 2, 2, 64, torch.bfloat16)
    torch.library.opcheck(torch.ops.gpu_accel.flash_fwd.default, (q, k, v, 0.125, True, -1, 0, 0.0),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("case,match", [
    (dict(dropout_p=0.1), "dropout_p"),
    (dict(alibi_slopes="slopes"), "alibi_slopes"),
    (dict(softcap=-1.0), "softcap"),
    (dict(window_size=(-2, 0)), "window_size"),
    (dict(q_descale=1.0), "q_descale"),
])
def test_refused_arguments(case, match):
    q, k, v = _qkv(1, 16, 16, 2, 2, 64, torch.bfloat16)
    if "alibi_slopes" in case:
        case = dict(alibi_slopes=torch.ones(2, device="cuda"))
    with pytest.raises(ValueError, match=match):
        gpu_accel.flash_attn_func(q, k, v, **case)


def test_refused_inputs():
    q, k, v = _qkv(1, 16, 16, 4, 2, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="dtype"):
        gpu_accel.flash_attn_func(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="on cpu"):
        gpu_accel.flash_attn_func(q.cpu(), k.cpu(), v.cpu())
    with pytest.raises(ValueError, match="multiple of nheads_k"):
        gpu_accel.flash_attn_func(q[:, :, :3], k, v)
    with pytest.raises(ValueError, match="headdim"):
        big = torch.zeros(1, 16, 2, 512, device="cuda", dtype=torch.bfloat16)
        gpu_accel.flash_attn_func(big, big, big)
    with pytest.raises(ValueError, match="same shape"):
        gpu_accel.flash_attn_func(q, k, v[:, :8])
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    with pytest.raises(ValueError, match="deterministic"):
        gpu_accel.flash_attn_func(qg, kg, vg, deterministic=True)
    with pytest.raises(ValueError, match="no backward"):
        cu = torch.tensor([0, 16], dtype=torch.int32, device="cuda")
        gpu_accel.flash_attn_varlen_func(qg[0], kg[0], vg[0], cu, cu, 16, 16)
    with pytest.raises(ValueError, match="rotary_cos"):
        gpu_accel.flash_attn_with_kvcache(q, k, v, rotary_cos=torch.ones(1, device="cuda"))
    with pytest.raises(TypeError):
        gpu_accel.flash_attn_varlen_func(q.cpu().numpy(), k, v, None, None, 16, 16)
    if hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability() == (9, 0):
        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
        with pytest.raises(ValueError, match="softcap"):
            gpu_accel.flash_attn_func(q8[:, :, :, :64], k8, v8, softcap=5.0)


def test_kernel_refusal_names_the_reason():
    # A paged pool whose page size the kernel cannot assemble key tiles from: the kernel's own sentence comes back.
    k_cache, v_cache, block_table = _paged_cache(1, 48, 24, 2, 64, torch.bfloat16)
    q = torch.randn(1, 1, 2, 64, device="cuda", dtype=torch.bfloat16)
    seqlens = torch.tensor([30], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="page_size"):
        gpu_accel.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, block_table=block_table)


def test_numpy_keeps_the_cpu_path():
    np = pytest.importorskip("numpy")
    q = np.random.default_rng(0).standard_normal((1, 5, 2, 8)).astype(np.float32)
    out = gpu_accel.flash_attn_func(q, q, q, causal=True)
    assert isinstance(out, np.ndarray)
    assert math.isfinite(float(out.sum()))
