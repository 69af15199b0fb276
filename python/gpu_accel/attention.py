"""flash-attn's functions with its signatures and semantics: numpy float32 arrays run on the CPU attention (a
reference), torch tensors on our CUDA kernels (gpu_accel.torch_attention, imported only when a tensor comes)."""

import math

from . import _C
from ._arrays import cpu_arrays, is_torch_tensor


def _torch_front():
    from . import torch_attention
    return torch_attention


def _torch_varlen():
    from . import torch_varlen
    return torch_varlen


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *, q_descale=None,
                    k_descale=None, v_descale=None):
    """Scaled dot-product attention as flash_attn.flash_attn_func computes it.

    torch CUDA tensors (bf16/fp16, or FP8 e4m3 with FlashAttention-3's q_descale/k_descale/v_descale) run on our
    kernels, with autograd and torch.compile: gpu_accel.torch_attention.flash_attn_func. The rest of this text is
    the CPU path's (numpy float32).

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
    if is_torch_tensor(q):
        return _torch_front().flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                                              alibi_slopes, deterministic, return_attn_probs, q_descale=q_descale,
                                              k_descale=k_descale, v_descale=v_descale)
    if q_descale is not None or k_descale is not None or v_descale is not None:
        raise ValueError("flash_attn_func: q_descale/k_descale/v_descale apply to FP8 torch tensors only")
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


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_qkvpacked_func: qkv [batch, seqlen, 3, nheads, headdim]; flash_attn_func on its q, k,
    v slices (torch tensors: views, the gradient flows back into qkv; numpy float32: the CPU path)."""
    if is_torch_tensor(qkv):
        return _torch_front().flash_attn_qkvpacked_func(qkv, dropout_p, softmax_scale, causal, window_size, softcap,
                                                        alibi_slopes, deterministic, return_attn_probs)
    (qkv,) = cpu_arrays("flash_attn_qkvpacked_func", qkv=qkv)
    if qkv.ndim != 5 or qkv.shape[2] != 3:
        raise ValueError(f"flash_attn_qkvpacked_func: qkv must be [batch, seqlen, 3, nheads, headdim], got shape "
                         f"{qkv.shape}")
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
                           softcap, alibi_slopes, deterministic, return_attn_probs)


def _cuda_only(op, q):
    if not is_torch_tensor(q):
        raise TypeError(f"{op}: takes torch CUDA tensors (our Hopper kernel's varlen / KV-cache form); the CPU path "
                        "has flash_attn_func and flash_attn_qkvpacked_func only")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash_attn.flash_attn_varlen_func on torch CUDA tensors: gpu_accel.torch_varlen.flash_attn_varlen_func."""
    _cuda_only("flash_attn_varlen_func", q)
    return _torch_varlen().flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                  dropout_p, softmax_scale, causal, window_size, softcap,
                                                  alibi_slopes, deterministic, return_attn_probs, block_table)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """flash_attn.flash_attn_with_kvcache on torch CUDA tensors: gpu_accel.torch_varlen.flash_attn_with_kvcache."""
    _cuda_only("flash_attn_with_kvcache", q)
    return _torch_varlen().flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                                                   cache_batch_idx, cache_leftpad, block_table, softmax_scale,
                                                   causal, window_size, softcap, rotary_interleaved, alibi_slopes,
                                                   num_splits, return_softmax_lse)


__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"]
