"""What calling our attention from Python costs: gpu_accel.flash_attn_func on torch tensors (argument checks, the
custom op's dispatch, output and workspace allocation, the params struct, the launch) against the same kernel
launched back to back from C++ on the same tensors (gpu_accel.torch_attention.time_forward: CUDA events around
`iters` launches, no Python between them). Both are timed in the GPU's clock (CUDA events in the stream), in
interleaved rounds, medians; the Python call is within target when its time per call is at most 1.03x the C++
one. Also prints the host time of one Python call (what it adds when the GPU is not the bottleneck).

Usage (GPU machine, PYTHONPATH with the CUDA build of the package): python3 bench/python/attention_call_overhead.py
  [--batch 4 --seqlen 4096 --heads 32 --kv-heads 8 --head-dim 128 --rounds 7 --iters 20 --target 1.03]
Exit status 1 when a shape is over the target."""

import argparse
import statistics
import sys
import time

import torch

import gpu_accel
from gpu_accel import torch_attention


def python_call_ms(q, k, v, causal, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        gpu_accel.flash_attn_func(q, k, v, causal=causal)
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def host_call_us(q, k, v, causal, iters):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        gpu_accel.flash_attn_func(q, k, v, causal=causal)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--target", type=float, default=1.03)
    a = ap.parse_args()

    torch.manual_seed(0)
    shape_q = (a.batch, a.seqlen, a.heads, a.head_dim)
    shape_kv = (a.batch, a.seqlen, a.kv_heads, a.head_dim)
    q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16)
    # a few large matmuls first, so the clocks have settled before anything is timed
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        x @ x
    torch.cuda.synchronize()

    print(f"# gpu_accel.flash_attn_func call overhead on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"# q {list(shape_q)}, k/v {list(shape_kv)}, bf16; {a.rounds} interleaved rounds of {a.iters} calls, "
          "medians\n")
    print("| causal | C++ launches ms | Python calls ms | ratio | host us / Python call |")
    print("| --- | ---: | ---: | ---: | ---: |")
    over = []
    for causal in (False, True):
        python_call_ms(q, k, v, causal, 3)  # warm-up: first-call costs (imports, op registration, workspace)
        torch_attention.time_forward(q, k, v, causal, 3)
        cpp, py = [], []
        for _ in range(a.rounds):
            cpp.append(torch_attention.time_forward(q, k, v, causal, a.iters))
            py.append(python_call_ms(q, k, v, causal, a.iters))
        host = host_call_us(q, k, v, causal, a.iters)
        c, p = statistics.median(cpp), statistics.median(py)
        ratio = p / c
        print(f"| {causal} | {c:.4f} | {p:.4f} | {ratio:.4f} | {host:.1f} |")
        if ratio > a.target:
            over.append(f"causal={causal}: {ratio:.4f}")
    print()
    if over:
        print(f"FAIL Python call over {a.target}x the C++ launches: " + ", ".join(over))
        return 1
    print(f"PASS Python call within {a.target}x the C++ launches (both causal and not)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
