"""flash_attn_func with flash-attn's signature and semantics, on numpy float32 arrays (the CPU attention)."""

import math

from . import _C
from ._arrays import cpu_arrays


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Scaled dot-product attention as flash_attn.flash_attn_func computes it.

    q: [batch, seqlen_q, nheads, headdim]; k, v: [batch, seqlen_k, nheads_k, headdim], float32 numpy arrays;
    nheads a multiple of nheads_k (GQA/MQA: query head i reads key/value head i // (nheads // nheads_k)).
    softmax_scale: default 1/sqrt(headdim). causal: query i sees keys j <= i + seqlen_k - seqlen_q (the mask is
    aligned to the bottom-right corner when seqlen_q != seqlen_k). window_size=(left, right): query i sees keys
    in [i + seqlen_k - seqlen_q - left, i + seqlen_k - seqlen_q + right], -1 meaning unbounded (causal sets
    right = 0). softcap > 0: scores become softcap * tanh(scores / softcap). A query row that sees no key
    gives zeros (and softmax_lse +inf, as flash-attn).

    Returns out [batch, seqlen_q, nheads, headdim]; with return_attn_probs, (out, softmax_lse, None) where
    softmax_lse [batch, nheads, seqlen_q] float32 is the log-sum-exp of each row's (scaled) scores.
    dropout_p > 0 and alibi_slopes are not supported and raise ValueError. deterministic is accepted (the CPU
    path is always deterministic).
    """
    if dropout_p != 0.0:
        raise ValueError(f"flash_attn_func: dropout_p={dropout_p} is not supported (only 0.0: inference)")
    if alibi_slopes is not None:
        raise ValueError("flash_attn_func: alibi_slopes is not supported")
    if softcap is None or not (softcap >= 0.0) or math.isinf(softcap):
        raise ValueError(f"flash_attn_func: softcap must be 0.0 (off) or a finite positive cap, got {softcap}")
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"flash_attn_func: window_size must be a pair (left, right), got {window_size!r}") from None
    if left < -1 or right < -1:
        raise ValueError(f"flash_attn_func: window_size bounds must be -1 (unbounded) or >= 0, got {window_size!r}")
    q, k, v = cpu_arrays("flash_attn_func", q=q, k=k, v=v)
    if q.ndim != 4:
        raise ValueError(f"flash_attn_func: q must be [batch, seqlen, nheads, headdim], got shape {q.shape}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    out, lse = _C.ops.flash_attn(q, k, v, scale, bool(causal), left, right, float(softcap), bool(return_attn_probs))
    if return_attn_probs:
        return out, lse, None
    return out


__all__ = ["flash_attn_func"]
