"""flash-attn's variable-length and KV-cache functions on torch CUDA tensors, over our Hopper flash kernel's varlen /
paged-KV form (16-bit, forward only: our backward kernel takes dense batches, so these refuse inputs that need a
gradient rather than return a graph that cannot be differentiated)."""

import math

import torch

from . import _torch_ops as ops
from .torch_attention import (_FWD_HEAD_DIMS, _HALF_DTYPES, _check_options, _check_qkv, _kernel_head_dim,
                              _mask_args, _needs_grad, _pad_head_dim, _public_lse, _require_tensors)


def _check_int32_vector(op, name, t, length):
    if t.dtype != torch.int32 or t.dim() != 1 or (length is not None and t.shape[0] != length):
        want = f"[{length}]" if length is not None else "1-d"
        raise ValueError(f"{op}: {name} must be an int32 {want} tensor, got {t.dtype} {tuple(t.shape)}")
    return t.contiguous()


def _refuse_grad(op, *tensors):
    if _needs_grad(*tensors):
        raise ValueError(f"{op}: no backward (our backward kernel takes dense batches only); call it under "
                         "torch.no_grad() or on tensors that do not require grad")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash_attn.flash_attn_varlen_func: q [total_q, h, d], k/v [total_k, hk, d] packed, sequence b owning rows
    cu_seqlens_q[b]:cu_seqlens_q[b+1] (int32 [batch + 1]); max_seqlen_q/k bound every sequence's length. Causal
    is bottom-right aligned per sequence. With block_table [batch, pages] (int32), k/v are paged pools
    [n_pages, page_size, hk, d] and cu_seqlens_k gives each sequence's key count. Returns out [total_q, h, d];
    with return_attn_probs, (out, softmax_lse [h, total_q] float32, None). Forward only."""
    op = "flash_attn_varlen_func"
    _check_qkv(op, q, k, v, _HALF_DTYPES)
    paged = block_table is not None
    if q.dim() != 3 or k.dim() != (4 if paged else 3):
        want = "[n_pages, page_size, nheads_k, headdim]" if paged else "[total_k, nheads_k, headdim]"
        raise ValueError(f"{op}: q must be [total_q, nheads, headdim] and k, v {want}, got {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    _require_tensors(op, q=q, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    cu_q = _check_int32_vector(op, "cu_seqlens_q", cu_seqlens_q, None)
    batch = cu_q.shape[0] - 1
    cu_k = _check_int32_vector(op, "cu_seqlens_k", cu_seqlens_k, batch + 1)
    left, right = _check_options(op, dropout_p, softcap, alibi_slopes, window_size)
    causal, left, right = _mask_args(causal, left, right)
    _refuse_grad(op, q, k, v)
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    seqused_k = None
    if paged:
        _require_tensors(op, q=q, block_table=block_table)
        if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] != batch:
            raise ValueError(f"{op}: block_table must be int32 [batch, pages], got {block_table.dtype} "
                             f"{tuple(block_table.shape)}")
        _check_pool(op, k, v)
        if d not in _FWD_HEAD_DIMS:
            raise ValueError(f"{op}: headdim {d} with a paged KV cache must be one our kernel has "
                             f"({', '.join(map(str, _FWD_HEAD_DIMS))}): a pool is not copied to pad it")
        seqused_k = (cu_k[1:] - cu_k[:-1]).contiguous()
        out, lse = ops.flash_varlen_fwd(q, k, v, cu_q, None, seqused_k, block_table.contiguous(), int(max_seqlen_q),
                                        int(max_seqlen_k), scale, causal, left, right, float(softcap))
    else:
        kd = _kernel_head_dim(op, d, _FWD_HEAD_DIMS)
        qp, kp, vp = (_pad_head_dim(q, kd).contiguous(), _pad_head_dim(k, kd).contiguous(),
                      _pad_head_dim(v, kd).contiguous())
        out, lse = ops.flash_varlen_fwd(qp, kp, vp, cu_q, cu_k, None, None, int(max_seqlen_q), int(max_seqlen_k),
                                        scale, causal, left, right, float(softcap))
        if kd != d:
            out = out[..., :d]
    if return_attn_probs:
        return out, _public_lse(lse), None
    return out


def _check_pool(op, k_cache, v_cache):
    # The kernel finds position j of a page at row page * page_size + j: pages must lie back to back, rows
    # 16-byte aligned (a pool is the caller's memory: it is never copied to fix its layout).
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        unit = 16 // t.element_size()
        if (t.stride(-1) != 1 or t.stride(0) != t.shape[1] * t.stride(1) or
                any(s % unit for s in t.stride()[:-1]) or t.data_ptr() % 16):
            raise ValueError(f"{op}: {name} must have contiguous pages and rows of 16-byte aligned strides, got "
                             f"strides {t.stride()}")


def _append_new_keys(k_cache, v_cache, k, v, cache_seqlens, block_table):
    # flash-attn writes the new keys at positions cache_seqlens[b] .. + seqlen_new of each sequence, in place
    b, s_new = k.shape[0], k.shape[1]
    pos = cache_seqlens.to(torch.int64)[:, None] + torch.arange(s_new, device=k.device)[None, :]  # [b, s_new]
    if block_table is None:
        rows = torch.arange(b, device=k.device)[:, None].expand(b, s_new)
        k_cache[rows, pos] = k
        v_cache[rows, pos] = v
    else:
        page_size = k_cache.shape[1]
        pages = torch.gather(block_table.to(torch.int64), 1, pos // page_size)
        k_cache[pages, pos % page_size] = k
        v_cache[pages, pos % page_size] = v


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """flash_attn.flash_attn_with_kvcache: q [b, sq, h, d]; k_cache/v_cache [b, seqlen_cache, hk, d], or paged
    [n_pages, page_size, hk, d] with block_table [b, pages] (int32); cache_seqlens (int or int32 [b]) the keys
    already in each sequence's cache (default: all of it); k/v [b, s_new, hk, d] (optional) are written into the
    cache in place after them and attended to. Causal is aligned to each sequence's last key. Returns out
    [b, sq, h, d]; with return_softmax_lse, (out, softmax_lse [b, h, sq]). Forward only; rotary embedding,
    cache_batch_idx, cache_leftpad and alibi_slopes are refused. num_splits is accepted and ignored (the kernel
    picks its own work split)."""
    op = "flash_attn_with_kvcache"
    for name, arg in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin), ("cache_batch_idx", cache_batch_idx),
                      ("cache_leftpad", cache_leftpad)):
        if arg is not None:
            raise ValueError(f"{op}: {name} is not supported (apply it before the call)")
    _check_qkv(op, q, k_cache, v_cache, _HALF_DTYPES)
    if q.dim() != 4 or k_cache.dim() != 4:
        raise ValueError(f"{op}: q must be [batch, seqlen, nheads, headdim] and the caches 4-d, got "
                         f"{tuple(q.shape)} and {tuple(k_cache.shape)}")
    left, right = _check_options(op, 0.0, softcap, alibi_slopes, window_size)
    causal, left, right = _mask_args(causal, left, right)
    _refuse_grad(op, q, k_cache, v_cache, *(t for t in (k, v) if t is not None))
    b, sq, h, d = q.shape
    if d not in _FWD_HEAD_DIMS:
        raise ValueError(f"{op}: headdim {d} must be one our kernel has ({', '.join(map(str, _FWD_HEAD_DIMS))}): "
                         "a cache is not copied to pad it")
    paged = block_table is not None
    if paged:
        _require_tensors(op, q=q, block_table=block_table)
        if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] != b:
            raise ValueError(f"{op}: block_table must be int32 [batch, pages], got {block_table.dtype} "
                             f"{tuple(block_table.shape)}")
        capacity = block_table.shape[1] * k_cache.shape[1]
    else:
        if k_cache.shape[0] != b:
            raise ValueError(f"{op}: k_cache has batch {k_cache.shape[0]}, q {b} (cache_batch_idx is not supported)")
        capacity = k_cache.shape[1]
    _check_pool(op, k_cache, v_cache)
    if cache_seqlens is None:
        cache_seqlens = torch.full((b,), capacity if k is None else capacity - k.shape[1], dtype=torch.int32,
                                   device=q.device)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((b,), cache_seqlens, dtype=torch.int32, device=q.device)
    else:
        _require_tensors(op, q=q, cache_seqlens=cache_seqlens)
        cache_seqlens = _check_int32_vector(op, "cache_seqlens", cache_seqlens, b)
    s_new = 0
    if (k is None) != (v is None):
        raise ValueError(f"{op}: give both k and v (the new keys and values) or neither")
    if k is not None:
        _check_qkv(op, q, k, v, _HALF_DTYPES)
        if k.dim() != 4 or k.shape[0] != b or k.shape[2:] != k_cache.shape[2:]:
            raise ValueError(f"{op}: k, v must be [batch, seqlen_new, nheads_k, headdim] matching the cache, got "
                             f"{tuple(k.shape)}")
        _append_new_keys(k_cache, v_cache, k, v, cache_seqlens, block_table)
        s_new = k.shape[1]
    seqused_k = (cache_seqlens + s_new).to(torch.int32)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    cu_q = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32, device=q.device)
    q_rows = q.reshape(b * sq, h, d)
    if paged:
        out, lse = ops.flash_varlen_fwd(q_rows, k_cache, v_cache, cu_q, None, seqused_k, block_table.contiguous(), sq,
                                        capacity, scale, causal, left, right, float(softcap))
    else:
        # A contiguous cache is the packed form: sequence b's keys start at row b * seqlen_cache, seqused_k of them.
        cu_k = torch.arange(0, (b + 1) * capacity, capacity, dtype=torch.int32, device=q.device)
        k_rows = k_cache.reshape(b * capacity, *k_cache.shape[2:])
        v_rows = v_cache.reshape(b * capacity, *v_cache.shape[2:])
        out, lse = ops.flash_varlen_fwd(q_rows, k_rows, v_rows, cu_q, cu_k, seqused_k, None, sq, capacity, scale,
                                        causal, left, right, float(softcap))
    out = out.view(b, sq, h, d)
    if return_softmax_lse:
        return out, _public_lse(lse.view(h, b, sq).permute(1, 0, 2))
    return out


__all__ = ["flash_attn_varlen_func", "flash_attn_with_kvcache"]
