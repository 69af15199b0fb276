"""The torch side of gpu_accel._flash: fills the kernels' params structs from torch tensors (data_ptr(), strides in
elements, shapes), allocates workspaces with torch, and launches on the tensors' current stream. Every function
here takes tensors already checked and laid out by the callers (dtype, device, head dim the kernel has, last dim
contiguous); what is left to refuse is the kernel's own call: it raises ValueError with the kernel's reason.

Imported only by the torch front (torch_attention.py), so `import gpu_accel` never imports torch."""

import torch

try:
    from . import _flash
except ImportError:  # a CPU build of the package: no CUDA module
    _flash = None

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
if hasattr(torch, "float8_e4m3fn"):
    _DTYPES[torch.float8_e4m3fn] = "fp8_e4m3"


def require_module(op):
    if _flash is None:
        raise ValueError(f"{op}: this build of gpu_accel has no CUDA kernels (gpu_accel._flash is missing: "
                         "the package was built without GA_CUDA); torch tensors need the CUDA build")
    return _flash


def kernel_dtype(dtype):
    return getattr(_flash.FlashDtype, _DTYPES[dtype])


def _strides3(t):
    # [batch][seq][head][dim] (or packed [row][head][dim]: batch stride 0), in elements
    s = t.stride()
    return (s[0], s[1], s[2]) if t.dim() == 4 else (0, s[0], s[1])


def forward_params(q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap):
    """FlashParams for q/out [b, sq, h, d] (or packed [total_q, h, d]), k/v [b, sk, hk, d] (or packed / paged)."""
    p = _flash.FlashParams()
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
    p.lse = lse.data_ptr()
    p.q_batch_stride, p.q_seq_stride, p.q_head_stride = _strides3(q)
    p.k_batch_stride, p.k_seq_stride, p.k_head_stride = _strides3(k)
    p.v_batch_stride, p.v_seq_stride, p.v_head_stride = _strides3(v)
    p.o_batch_stride, p.o_seq_stride, p.o_head_stride = _strides3(out)
    p.dtype = kernel_dtype(q.dtype)
    p.head_dim = q.shape[-1]
    p.n_head = q.shape[-2]
    p.n_head_kv = k.shape[-2]
    if q.dim() == 4:
        p.batch, p.seqlen_q, p.seqlen_k = q.shape[0], q.shape[1], k.shape[1]
    p.causal = bool(causal)
    p.softmax_scale = float(softmax_scale)
    p.window_left, p.window_right = int(window_left), int(window_right)
    p.softcap = float(softcap)
    return p


def _workspace(nbytes, device):
    # torch's caching allocator hands out 512-byte aligned blocks: the kernels ask for 16 (forward) and 256 (backward)
    if nbytes == 0:
        return None, 0, 0
    ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return ws, ws.data_ptr(), nbytes


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


def launch_forward(op, p, device):
    """flash_forward on the current stream of `device`; ValueError with the kernel's reason when refused."""
    with torch.cuda.device(device):
        reason = _flash.forward_unsupported_reason(p)
        if reason is not None:
            raise ValueError(f"{op}: our flash kernel refuses these arguments: {reason}")
        ws, ptr, nbytes = _workspace(_flash.forward_workspace_bytes(p), device)
        _flash.forward(p, ptr, nbytes, _stream(device))
        del ws  # freed to the caching allocator in stream order: the launch above owns it until it ends


def time_forward(p, device, iters):
    """Milliseconds per launch of the same forward, timed from C++ (bench/python/attention_call_overhead.py)."""
    with torch.cuda.device(device):
        ws, ptr, nbytes = _workspace(_flash.forward_workspace_bytes(p), device)
        ms = _flash.time_forward(p, ptr, nbytes, _stream(device), iters)
        del ws
        return ms


def launch_backward(op, dout, q, k, v, out, lse, dq, dk, dv, softmax_scale, causal, window_left, window_right,
                    softcap):
    """flash_backward: dq like q, dk/dv like k/v (GQA: summed over each KV head's query heads by the kernel)."""
    bp = _flash.FlashBwdParams()
    bp.fwd = forward_params(q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap)
    bp.dout, bp.dq, bp.dk, bp.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    bp.do_batch_stride, bp.do_seq_stride, bp.do_head_stride = _strides3(dout)
    bp.dq_batch_stride, bp.dq_seq_stride, bp.dq_head_stride = _strides3(dq)
    bp.dk_batch_stride, bp.dk_seq_stride, bp.dk_head_stride = _strides3(dk)
    bp.dv_batch_stride, bp.dv_seq_stride, bp.dv_head_stride = _strides3(dv)
    device = q.device
    with torch.cuda.device(device):
        reason = _flash.backward_unsupported_reason(bp)
        if reason is not None:
            raise ValueError(f"{op}: our flash backward kernel refuses these arguments: {reason}")
        ws, ptr, nbytes = _workspace(_flash.backward_workspace_bytes(bp), device)
        _flash.backward(bp, ptr, nbytes, _stream(device))
        del ws
