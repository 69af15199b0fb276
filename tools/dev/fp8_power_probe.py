#!/usr/bin/env python3
"""Power and clock of FP8 attention kernels held busy (session 15 diagnostic): each backend runs back to back for
--seconds; the second half is timed with CUDA events while NVML's power draw and SM clock are sampled, so each row
gives TFLOP/s, watts, MHz and TFLOP/s per GHz (the work per clock the kernel gets, independent of the power limit's
clock). The cuBLASLt FP8 GEMM (torch._scaled_mm, 8192^3) is the reference for a kernel that keeps the tensor cores busy.
Usage: fp8_power_probe.py --lib libga_attention_c.so [--variants -1,61] [--head-dim 128] [--seq 8192] [--causal]"""
import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "attention_torch"))
import compare  # noqa: E402  (load_lib, quantize_e4m3, FlashFp8)


def hold(fn, seconds, flops):
    """Runs fn back to back for `seconds`; times the second half and samples NVML in it."""
    t_end = time.time() + seconds / 2
    while time.time() < t_end:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    watts, mhz, calls = [], [], 0
    start.record()
    t_end = time.time() + seconds / 2
    while time.time() < t_end:
        for _ in range(5):
            fn()
        calls += 5
        watts.append(torch.cuda.power_draw() / 1000.0)
        mhz.append(float(torch.cuda.clock_rate()))
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / calls
    tflops = flops / ms / 1e9
    w, f = sum(watts) / len(watts), sum(mhz) / len(mhz)
    return tflops, w, f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--variants", default="-1")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    lib = compare.load_lib(args.lib)
    d, s = args.head_dim, args.seq
    h, b = 2048 // d, max(1, 16384 // s)
    q8, dq = compare.quantize_e4m3(torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16))
    k8, dk = compare.quantize_e4m3(torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16))
    v8, dv = compare.quantize_e4m3(torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16))
    o = torch.empty((b, s, h, d), device="cuda", dtype=torch.bfloat16)
    lse = torch.empty((b, h, s), device="cuda", dtype=torch.float32)
    fl = compare.FlashFp8(lib, q8, k8, v8, o, lse, args.causal, 1.0 / math.sqrt(d), (dq, dk, dv))
    flops = 4 * b * h * s * s * d / (2 if args.causal else 1)
    n = 8192
    a8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device="cuda")
    gemm = lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    print(f"| kernel (hd {d}, seq {s}, {'causal' if args.causal else 'full'}) | TFLOP/s | W | MHz | TFLOP/s per GHz |")
    print("|---|---:|---:|---:|---:|")
    rows = [("cuBLASLt fp8 GEMM 8192^3", gemm, 2.0 * n ** 3)]
    rows += [(f"fp8 attention v{v}", (lambda v=v: fl.run(v)), flops) for v in map(int, args.variants.split(","))]
    for name, fn, fl_ops in rows + rows[:1]:
        t, w, f = hold(fn, args.seconds, fl_ops)
        print(f"| {name} | {t:.0f} | {w:.0f} | {f:.0f} | {t / (f / 1000):.0f} |")


if __name__ == "__main__":
    main()
