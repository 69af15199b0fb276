"""flash-attn's functions on torch CUDA tensors, over our flash kernels (a drop-in for `flash_attn`).

gpu_accel.flash_attn_func and friends come here when given torch tensors (numpy arrays keep the CPU path); this
module imports torch, so `import gpu_accel` does not. Semantics are flash-attn 2's: layout [batch, seqlen, nheads,
headdim]; GQA/MQA (query head i reads KV head i // (nheads // nheads_k)); causal and windows aligned to the
bottom-right corner when seqlen_q != seqlen_k; a row that sees no key gives 0 (and LSE +inf); LSE float32
[batch, nheads, seqlen_q]; head dims up to 256, padded here with zero columns to the next head dim the kernel has
(zeros change no score and give zero output columns, which are cut off again). What the kernels lack raises a
ValueError naming the argument; nothing falls back to another implementation."""

import math

import torch

from . import _torch_kernels as kernels
from . import _torch_ops as ops

_FWD_HEAD_DIMS = (64, 96, 128, 256)  # the forward kernels' (96 runs on the 128 tiles)
_BWD_HEAD_DIMS = (64, 128, 256)      # the backward kernels'
_FP8_HEAD_DIMS = (128, 256)
_MAX_HEAD_DIM = 256
_HALF_DTYPES = (torch.float16, torch.bfloat16)
_FP8_DTYPE = getattr(torch, "float8_e4m3fn", None)


def _require_tensors(op, **tensors):
    device = None
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{op}: {name} is on {t.device}; the torch path runs on CUDA tensors "
                             "(numpy float32 arrays take the CPU path)")
        if device is None:
            device = t.device
        elif t.device != device:
            raise ValueError(f"{op}: {name} is on {t.device}, the others on {device}")


# These checks run under torch.compile too (dynamo traces them, on fake tensors): plain loops and conditions only,
# no generator expressions, so that a fullgraph trace has nothing to break on.
def _check_qkv(op, q, k, v, allowed_dtypes):
    kernels.require_module(op)
    _require_tensors(op, q=q, k=k, v=v)
    if q.dim() < 3 or k.dim() < 3 or v.dim() < 3:
        raise ValueError(f"{op}: q, k and v must have [..., nheads, headdim] axes, got shapes {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.dtype not in allowed_dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed_dtypes)
        raise ValueError(f"{op}: q has dtype {q.dtype}; our kernels take {names}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"{op}: q, k and v must have the same dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"{op}: k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ValueError(f"{op}: q and k must have the same headdim, got {d} and {k.shape[-1]}")
    if d < 1 or d > _MAX_HEAD_DIM:
        raise ValueError(f"{op}: headdim {d} is not supported (1..{_MAX_HEAD_DIM})")
    h, hk = q.shape[-2], k.shape[-2]
    if hk < 1 or h % hk != 0:
        raise ValueError(f"{op}: nheads ({h}) must be a multiple of nheads_k ({hk})")


def _check_options(op, dropout_p, softcap, alibi_slopes, window_size):
    if dropout_p != 0.0:
        raise ValueError(f"{op}: dropout_p={dropout_p} is not supported (our kernels have no dropout)")
    if alibi_slopes is not None:
        raise ValueError(f"{op}: alibi_slopes is not supported (our kernels have no ALiBi)")
    if softcap is None or not (0.0 <= softcap < math.inf):  # comparisons only: NaN fails them too
        raise ValueError(f"{op}: softcap must be 0.0 (off) or a finite positive cap, got {softcap}")
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"{op}: window_size must be a pair (left, right), got {window_size!r}")
    left, right = int(window_size[0]), int(window_size[1])
    if left < -1 or right < -1:
        raise ValueError(f"{op}: window_size bounds must be -1 (unbounded) or >= 0, got {window_size!r}")
    return left, right


def _mask_args(causal, left, right):
    # flash-attn: causal is window_right = 0 (the kernels want -1 or 0 beside causal)
    return bool(causal), left, 0 if causal else right


def _kernel_head_dim(op, d, dims):
    for kd in dims:
        if d <= kd:
            return kd
    raise ValueError(f"{op}: headdim {d} is not supported (our kernels have {', '.join(map(str, dims))})")


def _pad_head_dim(t, kd):
    d = t.shape[-1]
    return t if d == kd else torch.nn.functional.pad(t, (0, kd - d))


def _needs_grad(*tensors):
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if t.requires_grad:
            return True
    return False


def _public_lse(lse):
    # flash-attn's value for rows that see no key is +inf; the kernels write -inf (their merge identity)
    return torch.where(lse == -math.inf, math.inf, lse)


def _descale(op, name, x):
    if x is None:
        return 1.0
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise ValueError(f"{op}: {name} must hold one value (our FP8 kernel takes one scale per tensor), "
                             f"got shape {tuple(x.shape)}")
        x = x.item()  # a host sync: pass a float to avoid it
    x = float(x)
    if not (x > 0.0) or math.isinf(x):
        raise ValueError(f"{op}: {name} must be finite and > 0, got {x}")
    return x


def _fp8_forward(op, q, k, v, scale, causal, left, right, softcap, q_descale, k_descale, v_descale):
    if softcap != 0.0:
        raise ValueError(f"{op}: softcap is not supported with FP8 inputs (our FP8 kernel has no soft-capping)")
    if _needs_grad(q, k, v):
        raise ValueError(f"{op}: FP8 inputs have no backward in our kernels (call under torch.no_grad())")
    if q.shape[-1] not in _FP8_HEAD_DIMS:
        raise ValueError(f"{op}: headdim {q.shape[-1]} is not supported with FP8 inputs (our FP8 kernel has "
                         f"{', '.join(map(str, _FP8_HEAD_DIMS))})")
    return ops.flash_fwd_fp8(q, k, v, scale, causal, left, right, _descale(op, "q_descale", q_descale),
                             _descale(op, "k_descale", k_descale), _descale(op, "v_descale", v_descale),
                             torch.bfloat16)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, q_descale=None,
                    k_descale=None, v_descale=None):
    """flash_attn.flash_attn_func on CUDA tensors q [b, sq, h, d], k/v [b, sk, hk, d] (bf16/fp16; FP8 e4m3 with
    FlashAttention-3's q_descale/k_descale/v_descale, output bf16, forward only). Returns out [b, sq, h, d]; with
    return_attn_probs, (out, softmax_lse [b, h, sq] float32, None). Differentiable (our backward kernels) and a
    torch.library custom op (gpu_accel::flash_fwd), so torch.compile(fullgraph=True) traces it."""
    op = "flash_attn_func"
    fp8 = _FP8_DTYPE is not None and isinstance(q, torch.Tensor) and q.dtype == _FP8_DTYPE
    _check_qkv(op, q, k, v, (_FP8_DTYPE,) if fp8 else _HALF_DTYPES)
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"{op}: q, k and v must be 4-d [batch, seqlen, nheads, headdim], got {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"{op}: q and k must have the same batch size, got {q.shape[0]} and {k.shape[0]}")
    left, right = _check_options(op, dropout_p, softcap, alibi_slopes, window_size)
    causal, left, right = _mask_args(causal, left, right)
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    if fp8:
        out, lse = _fp8_forward(op, q, k, v, scale, causal, left, right, softcap, q_descale, k_descale, v_descale)
    else:
        if q_descale is not None or k_descale is not None or v_descale is not None:
            raise ValueError(f"{op}: q_descale/k_descale/v_descale apply to FP8 (float8_e4m3fn) inputs only")
        training = _needs_grad(q, k, v)
        if training and deterministic:
            raise ValueError(f"{op}: deterministic=True is not supported for the backward (our backward kernels "
                             "accumulate dQ with atomic adds)")
        kd = _kernel_head_dim(op, d, _BWD_HEAD_DIMS if training else _FWD_HEAD_DIMS)
        qp, kp, vp = _pad_head_dim(q, kd), _pad_head_dim(k, kd), _pad_head_dim(v, kd)
        out, lse = ops.flash_fwd(qp, kp, vp, scale, causal, left, right, float(softcap))
        if kd != d:
            out = out[..., :d]
    if return_attn_probs:
        return out, _public_lse(lse), None
    return out


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_qkvpacked_func: qkv [b, s, 3, h, d]; the same as flash_attn_func on its three slices
    (views: nothing is copied; the gradient flows back into qkv)."""
    if not isinstance(qkv, torch.Tensor) or qkv.dim() != 5 or qkv.shape[2] != 3:
        shape = tuple(qkv.shape) if isinstance(qkv, torch.Tensor) else type(qkv).__name__
        raise ValueError(f"flash_attn_qkvpacked_func: qkv must be [batch, seqlen, 3, nheads, headdim], got {shape}")
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
                           softcap, alibi_slopes, deterministic, return_attn_probs)


def time_forward(q, k, v, causal=False, iters=20):
    """Milliseconds per forward launch on these tensors, timed from C++ with no Python between launches (the
    reference of bench/python/attention_call_overhead.py). 16-bit, head dims the kernel has."""
    op = "time_forward"
    _check_qkv(op, q, k, v, _HALF_DTYPES)
    out, lse = ops._empty_outputs(q, q.dtype)
    p = kernels.forward_params(q, k, v, out, lse, 1.0 / math.sqrt(q.shape[-1]), causal, -1, 0 if causal else -1,
                               0.0)
    return kernels.time_forward(p, q.device, iters)


__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "time_forward"]
