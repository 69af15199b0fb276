"""gpu_accel: the gpu_accel LLM engine and its kernels from Python.

- ``gpu_accel.LLM``: load a model (GGUF or a Hugging Face folder), generate, chat, tokenize, logits.
- ``gpu_accel.flash_attn_func`` (and ``flash_attn_qkvpacked_func``, ``flash_attn_varlen_func``,
  ``flash_attn_with_kvcache``): flash-attn's API. torch CUDA tensors run on our kernels (autograd, torch.compile;
  CUDA builds); numpy float32 arrays on the CPU attention. torch is imported only when a tensor comes.
- ``gpu_accel.ops``: tensor ops on numpy arrays (gemm, batched_gemm, conv2d, reductions, elementwise, rms_norm,
  layer_norm, softmax), the CPU reference of the C++ tensor-ops library.
- ``gpu_accel.build_info()``: version, commit, whether CUDA was compiled in and for which archs.

Errors raised by the engine are ``gpu_accel.Error`` (a ``RuntimeError``) with the engine's message and a
``kind`` attribute ("io", "invalid_format", "unsupported", ...); arguments the engine or the package refuse
raise ``ValueError`` (the engine's own are ``gpu_accel.ArgumentError``, both an ``Error`` and a ``ValueError``).
See docs/python.md.
"""

from . import _C
from ._C import ArgumentError, Error
from . import ops
from .attention import flash_attn_func, flash_attn_qkvpacked_func, flash_attn_varlen_func, flash_attn_with_kvcache
from .llm import LLM

__version__ = _C.__version__


def build_info():
    """A dict: ``version``, ``git_commit``, ``cuda`` (bool), ``cuda_archs`` (list of str, empty without CUDA)."""
    return dict(_C.build_info())


__all__ = ["LLM", "Error", "ArgumentError", "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_with_kvcache", "ops", "build_info", "__version__"]
