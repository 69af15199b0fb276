"""PyTorch SDPA on the engine's prefill-attention shapes (bench/cuda/bench_prefill_attention.cu): GQA 32/8,
head_dim 128, fp16, causal, 512/2048/8192 tokens, batch 1; the FlashAttention-2 and cuDNN backends, K/V
expanded to 32 heads beforehand (not timed) so every backend takes them. Median-free mean of 20 calls after
3 warm-ups (CUDA events). Prints a markdown table in TFLOP/s (4 * head_dim FLOPs per visible pair)."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from compare import time_ms  # the same CUDA-event timer as the flash comparison (this folder)


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    print("\n| tokens | SDPA flash (FA2) us | TFLOP/s | SDPA cuDNN us | TFLOP/s |\n|---:|---:|---:|---:|---:|")
    for t in (512, 2048, 8192):
        q = torch.randn(1, 32, t, 128, device="cuda", dtype=torch.float16)
        k = torch.randn(1, 8, t, 128, device="cuda", dtype=torch.float16).repeat_interleave(4, dim=1)
        v = torch.randn(1, 8, t, 128, device="cuda", dtype=torch.float16).repeat_interleave(4, dim=1)
        flops = 4.0 * 128 * 32 * t * (t + 1) / 2
        cells = []
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            try:
                with sdpa_kernel([backend]):
                    us = 1e3 * time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 20)
                cells += [f"{us:.1f}", f"{flops / us / 1e6:.1f}"]
            except RuntimeError as e:  # a backend this torch/GPU lacks
                cells += ["n/a", str(e).splitlines()[0][:40]]
        print(f"| {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
