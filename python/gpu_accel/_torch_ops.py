"""The torch.library custom ops over our flash kernels (namespace gpu_accel::), with fake kernels so torch.compile
(fullgraph=True) traces them without running them, and the backward registered as their autograd formula.

Each op takes tensors whose head dim the kernel has (the public functions pad it) and returns new, contiguous
tensors; the fake kernels promise exactly those shapes, dtypes and strides. The LSE is the kernel's: -inf on rows
that see no key (the public functions turn it into flash-attn's +inf for the caller; the backward wants the
kernel's). Layout fixes the kernels need (last dim contiguous, 16-byte aligned addresses and strides) happen in
the real kernels here, where tensors have addresses, so traced graphs see none of them."""

import math
from typing import Optional, Tuple

import torch

from . import _torch_kernels as kernels

Tensor = torch.Tensor


def _aligned(t):
    # The kernels load rows by TMA / 16-byte vectors: address and every stride but the last in 16-byte units, and
    # no broadcast (stride 0) axis longer than 1 (an expand()ed K/V for MQA, say: the kernels refuse those).
    unit = 16 // t.element_size()
    if t.stride(-1) != 1 or t.data_ptr() % 16 != 0:
        return False
    for size, stride in zip(t.shape[:-1], t.stride()[:-1]):
        if stride % unit != 0 or (stride == 0 and size > 1):
            return False
    return True


def _kernel_layout(t):
    return t if _aligned(t) else t.contiguous()


def _empty_outputs(q, out_dtype):
    out = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    return out, lse


def _no_key_rows(out, lse):
    # seqlen_k == 0: every row sees no key (flash-attn: zeros); the kernels' LSE convention for such rows is -inf
    out.zero_()
    lse.fill_(-math.inf)
    return out, lse


@torch.library.custom_op("gpu_accel::flash_fwd", mutates_args=(), device_types="cuda")
def flash_fwd(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float, causal: bool, window_left: int,
              window_right: int, softcap: float) -> Tuple[Tensor, Tensor]:
    """out [b, sq, h, d] (q's dtype), lse [b, h, sq] float32; q [b, sq, h, d], k/v [b, sk, hk, d] 16-bit."""
    out, lse = _empty_outputs(q, q.dtype)
    if q.numel() == 0:
        return out, lse
    if k.shape[1] == 0:
        return _no_key_rows(out, lse)
    q, k, v = _kernel_layout(q), _kernel_layout(k), _kernel_layout(v)
    p = kernels.forward_params(q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap)
    kernels.launch_forward("flash_attn_func", p, q.device)
    return out, lse


@flash_fwd.register_fake
def _(q, k, v, softmax_scale, causal, window_left, window_right, softcap):
    return _empty_outputs(q, q.dtype)


@torch.library.custom_op("gpu_accel::flash_bwd", mutates_args=(), device_types="cuda")
def flash_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, softmax_scale: float,
              causal: bool, window_left: int, window_right: int, softcap: float) -> Tuple[Tensor, Tensor, Tensor]:
    """dq like q, dk / dv like k / v (contiguous), from the forward's out and (kernel) lse."""
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if q.numel() == 0 or k.shape[1] == 0:  # nothing to attend to: every gradient is 0
        return dq.zero_(), dk.zero_(), dv.zero_()
    dout, q, k, v, out = (_kernel_layout(t) for t in (dout, q, k, v, out))
    kernels.launch_backward("flash_attn_func backward", dout, q, k, v, out, lse.contiguous(), dq, dk, dv,
                            softmax_scale, causal, window_left, window_right, softcap)
    return dq, dk, dv


@flash_bwd.register_fake
def _(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap):
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device), torch.empty(k.shape, dtype=k.dtype, device=k.device),
            torch.empty(v.shape, dtype=v.dtype, device=v.device))


def _fwd_setup_context(ctx, inputs, output):
    q, k, v, softmax_scale, causal, window_left, window_right, softcap = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.args = (softmax_scale, causal, window_left, window_right, softcap)


def _fwd_backward(ctx, dout, dlse):
    # dlse is ignored, as flash-attn ignores it: the LSE is an auxiliary output, not part of the differentiated graph
    q, k, v, out, lse = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv = flash_bwd(dout, q, k, v, out, lse, *ctx.args)
    return dq, dk, dv, None, None, None, None, None


flash_fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)


@torch.library.custom_op("gpu_accel::flash_fwd_fp8", mutates_args=(), device_types="cuda")
def flash_fwd_fp8(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float, causal: bool, window_left: int,
                  window_right: int, descale_q: float, descale_k: float, descale_v: float,
                  out_dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    """FP8 e4m3 q/k/v with per-tensor descales; out [b, sq, h, d] in out_dtype (bf16/fp16), lse [b, h, sq]."""
    out, lse = _empty_outputs(q, out_dtype)
    if q.numel() == 0:
        return out, lse
    if k.shape[1] == 0:
        return _no_key_rows(out, lse)
    q, k, v = _kernel_layout(q), _kernel_layout(k), _kernel_layout(v)
    p = kernels.forward_params(q, k, v, out, lse, softmax_scale, causal, window_left, window_right, 0.0)
    p.out_dtype = kernels.kernel_dtype(out_dtype)
    p.descale_q, p.descale_k, p.descale_v = float(descale_q), float(descale_k), float(descale_v)
    kernels.launch_forward("flash_attn_func (fp8)", p, q.device)
    return out, lse


@flash_fwd_fp8.register_fake
def _(q, k, v, softmax_scale, causal, window_left, window_right, descale_q, descale_k, descale_v, out_dtype):
    return _empty_outputs(q, out_dtype)


@torch.library.custom_op("gpu_accel::flash_varlen_fwd", mutates_args=(), device_types="cuda")
def flash_varlen_fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Optional[Tensor],
                     seqused_k: Optional[Tensor], block_table: Optional[Tensor], max_seqlen_q: int,
                     max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int, window_right: int,
                     softcap: float) -> Tuple[Tensor, Tensor]:
    """Packed q [total_q, h, d]; keys packed k/v [total_k, hk, d] (cu_seqlens_k) or paged pools
    [n_pages, page_size, hk, d] (block_table [b, pages] with seqused_k [b]); out like q, lse [h, total_q]."""
    total_q = q.shape[0]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[1], total_q), dtype=torch.float32, device=q.device)
    batch = cu_seqlens_q.shape[0] - 1
    if total_q == 0 or batch == 0:
        return out, lse
    if max_seqlen_k == 0:
        return _no_key_rows(out, lse)
    q, k, v = _kernel_layout(q), k, v  # k/v: the caller checked their layout (a paged pool must not be copied)
    p = kernels.forward_params(q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap)
    p.batch, p.seqlen_q, p.seqlen_k = batch, int(max_seqlen_q), int(max_seqlen_k)
    p.total_q = total_q
    p.cu_seqlens_q = cu_seqlens_q.data_ptr()
    if seqused_k is not None:
        p.seqused_k = seqused_k.data_ptr()
    if block_table is None:
        p.cu_seqlens_k = cu_seqlens_k.data_ptr()
        p.total_k = k.shape[0]
    else:
        p.block_table = block_table.data_ptr()
        p.block_table_stride = block_table.stride(0)
        p.page_size = k.shape[1]
        p.n_pages = k.shape[0]
    kernels.launch_forward("flash_attn_varlen_func", p, q.device)
    return out, lse


@flash_varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q, max_seqlen_k, softmax_scale,
      causal, window_left, window_right, softcap):
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device))
