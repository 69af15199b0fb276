"""Attention in plain PyTorch with flash-attn 2's semantics, and flash-attn's tolerance rule, for the torch suite.

attention_ref follows flash-attn's tests/test_util.py idea: the same formula once in float32 (upcast=True: the
reference) and once at the input precision (upcast=False: what PyTorch itself gets in bf16/fp16); our kernel's
error against the first must stay within a multiple of the second's."""

import math

import torch


def visible_mask(sq, sk, causal, window, device):
    """[sq, sk] bool: query i sees key j (bottom-right aligned: i' = i + sk - sq)."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(sq, device=device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    mask = torch.ones((sq, sk), dtype=torch.bool, device=device)
    if left >= 0:
        mask &= j >= i - left
    if right >= 0:
        mask &= j <= i + right
    return mask


def attention_ref(q, k, v, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None, upcast=True):
    """out [b, sq, h, d] in q's dtype and lse [b, h, sq] float32 (+inf where no key is visible)."""
    dtype = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    k = k.repeat_interleave(h // hk, dim=2)  # query head i reads kv head i // (h // hk)
    v = v.repeat_interleave(h // hk, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q * scale, k)
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    mask = visible_mask(sq, sk, causal, window, q.device)
    # A row that sees no key keeps finite scores until its softmax is zeroed: a row of -inf would make the softmax,
    # and so the reference gradients, NaN.
    seen = mask.any(-1, keepdim=True)  # [sq, 1]
    scores = scores.masked_fill(~mask & seen, float("-inf"))
    lse = torch.logsumexp(scores.float(), dim=-1)
    lse = torch.where(seen[:, 0], lse, torch.full_like(lse, math.inf))
    attn = torch.softmax(scores, dim=-1).masked_fill(~seen, 0.0)  # rows that see no key give 0
    out = torch.einsum("bhts,bshd->bthd", attn, v)
    return out.to(dtype), lse


def max_error(a, b):
    a, b = a.float(), b.float()
    both_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    diff = torch.where(both_inf, torch.zeros_like(a), (a - b).abs())
    return diff.max().item() if diff.numel() else 0.0


def assert_within_rule(name, ours, ref, pt, factor):
    """flash-attn's rule: max|ours - ref| <= factor * max|pt - ref| + 1e-5 (pt: PyTorch at the input precision)."""
    assert not torch.isnan(ours).any(), f"{name}: NaN in our result"
    err, pt_err = max_error(ours, ref), max_error(pt, ref)
    assert err <= factor * pt_err + 1e-5, f"{name}: error {err:.3g} > {factor} x PyTorch's {pt_err:.3g} + 1e-5"
