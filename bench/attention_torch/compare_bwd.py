#!/usr/bin/env python3
"""Our attention backward (flash_backward) against PyTorch SDPA's cuDNN and FlashAttention-2 backward, same run.

The backward half of compare.py (it reuses its options, library loader, timer and JSON output). FA3 paper methodology: 16k tokens per
batch (batch = 16384 / seqlen), hidden 2048 (n_head = 2048 / head_dim), bf16; FLOPs of the backward = 2.5 x the
forward's (4 * batch * n_head * seqlen^2 * head_dim, halved for causal), the FlashAttention papers' convention.

At head dim 128 each of our kernels is also forced and timed (mma.sync and Hopper, through
ga_flash_backward_set_kernel) and each is checked against FA2; "ours" is flash_backward's pick (the Hopper kernel
there), so "ours" and the forced Hopper one time the same kernel: their difference is the noise left.
Timing: compare.py's time_rounds (every backend of a problem interleaved over --rounds rounds, median reported).

Only the backward is timed: torch's through torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) on a
graph built once per backend (the forward is not re-run); ours through ga_flash_backward on the O and LSE of our
forward (ga_flash_forward, default variant), with the workspace allocated once. Our gradients are compared with
the FA2 backend's (relative L2 per gradient; cuDNN's distance to FA2 is printed beside it as the yardstick).

Usage: python3 compare_bwd.py --lib build/bench/attention_torch/libga_attention_c.so [--json out.json]
"""
import ctypes
import json
import math
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

from compare import (Flash, arg_parser, fa3_problems, fmt_mhz, open_run, ratio_range, rel_l2, round_stats,
                     time_rounds, timing_note, write_json)


def bind_backward(lib):
    if hasattr(lib, "ga_flash_backward_set_kernel"):
        lib.ga_flash_backward_set_kernel.argtypes = [ctypes.c_int]
        lib.ga_flash_backward_set_kernel.restype = None
    vp, i, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    lib.ga_flash_backward.argtypes = [vp, vp, vp, vp, vp, vp, vp, vp, vp, ctypes.POINTER(ctypes.c_int64), i, i, i,
                                      i, i, i, i, i, f, vp, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), vp]
    lib.ga_flash_backward.restype = i


class FlashBwd:
    """ga_flash_backward on [batch][seq][head][dim] tensors; the workspace is sized once and kept."""

    def __init__(self, lib, q, k, v, o, lse, dout, dq, dk, dv, causal, scale):
        b, s, h, d = q.shape
        st = []
        for t in (q, k, v, o, dout, dq, dk, dv):
            st += [t.stride(0), t.stride(1), t.stride(2)]
        self.lib = lib
        self.strides = (ctypes.c_int64 * 24)(*st)
        self.args = [q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), dout.data_ptr(),
                     dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), self.strides,
                     0 if q.dtype == torch.bfloat16 else 1, d, h, k.shape[2], b, s, k.shape[1], int(causal), scale]
        need = ctypes.c_size_t(0)
        err = lib.ga_flash_backward(*self.args, None, 0, ctypes.byref(need), None)
        if err != 0:
            raise RuntimeError(f"ga_flash_backward refused the parameters (cudaError {err})")
        self.ws = torch.empty(need.value + 256, device="cuda", dtype=torch.uint8)
        self.ws_ptr = (self.ws.data_ptr() + 255) // 256 * 256

    def run(self):
        err = self.lib.ga_flash_backward(*self.args, self.ws_ptr, self.ws.numel() - 256, None,
                                         torch.cuda.current_stream().cuda_stream)
        if err != 0:
            raise RuntimeError(f"ga_flash_backward returned cudaError {err}")


def forced_run(lib, kernel, bwd):
    """bwd.run with flash_backward forced to `kernel` for the call (1 mma.sync, 2 Hopper), then the default again,
    so the forced timings can be interleaved with the others."""
    def run():
        lib.ga_flash_backward_set_kernel(kernel)
        try:
            bwd.run()
        finally:
            lib.ga_flash_backward_set_kernel(0)
    return run


def torch_backward(q, k, v, dout, causal, backend):
    """(time_fn, grads): the backward of SDPA on `backend`, graph built once, grads in [b][s][h][d]."""
    qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2),
                                             is_causal=causal).transpose(1, 2)
    grad = lambda: torch.autograd.grad(out, (qs, ks, vs), dout, retain_graph=True)
    return grad, grad()


def kernel_profile(fn, reps=5):
    """[(kernel name, calls per run, microseconds per run)] of fn's GPU work, from torch.profiler over `reps` runs
    (after one warm run): says which kernels a backend's backward launches and where its time goes."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None)
        if us is None:
            us = getattr(e, "cuda_time_total", 0.0)
        if us > 0:
            rows.append((e.key, e.count / reps, us / reps))
    return sorted(rows, key=lambda r: -r[2])


def print_profiles(fns, label):
    """The kernel lists of the backends in `fns` for one problem (compare_bwd.py --profile)."""
    for name, fn in fns.items():
        rows = kernel_profile(fn)
        total = sum(r[2] for r in rows)
        print(f"  profile {label} {name}: {total:.1f} us per backward")
        for kname, calls, us in rows[:8]:
            print(f"    {us:8.1f} us {us / total:6.1%} x{calls:g}  {kname[:110]}")


def main():
    ap = arg_parser()
    ap.add_argument("--hopper-schedules", default="",
                    help="also time these schedules of the Hopper kernel (flash_bwd_variants.h; the default is 19: "
                         "1, 12, 16, 17, 20, 21; 9 = preprocess and convert alone, 10 = the (default, wide) "
                         "preprocess alone, 8 = the one-warp-per-row preprocess alone, 18 = 16 without its dQ "
                         "reduction (timing only); 0, 2-4, 6, 7 need -DGA_FLASH_BWD_OLD_SCHEDULES=1); needs "
                         "a library built with -DGA_FLASH_ALL_VARIANTS=ON")
    ap.add_argument("--no-sm80", action="store_true", help="do not time the mma.sync kernel at head dim 128")
    ap.add_argument("--profile", action="store_true",
                    help="also list each backend's kernels per backward with their GPU time (torch.profiler)")
    args = ap.parse_args()
    schedules = [int(x) for x in args.hopper_schedules.split(",") if x]

    lib, dev, dtype = open_run(args)
    bind_backward(lib)
    rows = []
    for d, h, s, b, causal in fa3_problems(args):
        q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
        scale = 1.0 / math.sqrt(d)
        flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
        row = {"head_dim": d, "seqlen": s, "batch": b, "n_head": h, "causal": causal, "dtype": args.dtype}
        grads = {}
        fns = {}  # timed together at the end (time_rounds)
        for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                fns[name], grads[name] = torch_backward(q, k, v, dout, causal, backend)
            except RuntimeError as e:
                row[name] = None
                print(f"  {name} unavailable: {str(e).splitlines()[0]}")
        o = torch.full_like(q, float("nan"))
        lse = torch.full((b, h, s), float("nan"), device="cuda", dtype=torch.float32)
        fwd = Flash(lib, q, k, v, o, lse, causal, scale)
        reason = fwd.reason()
        if reason is not None:
            print(f"flash forward refused ({reason}): no O/LSE for our backward")
        else:
            fwd.run(-1)
            dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
            bwd = FlashBwd(lib, q, k, v, o, lse, dout, dq, dk, dv, causal, scale)
            bwd.run()
            torch.cuda.synchronize()
            ref = grads.get("fa2")
            if ref is not None:
                errs = [rel_l2(ours, theirs) for ours, theirs in zip((dq, dk, dv), ref)]
                row["ours_err"] = max(errs)
                nan = any(torch.isnan(t).any().item() for t in (dq, dk, dv))
                if nan or not row["ours_err"] <= 2e-2:
                    row["ours_bad"] = True
                    print(f"  MISMATCH ours vs FA2: rel L2 dq/dk/dv {errs} nan {nan}")
            if ref is not None and grads.get("cudnn") is not None:
                row["cudnn_err"] = max(rel_l2(a, r) for a, r in zip(grads["cudnn"], ref))
            fns["ours"] = bwd.run
            if d == 128 and hasattr(lib, "ga_flash_backward_set_kernel"):
                # Each of our kernels forced on the same tensors (flash_backward picks one Hopper variant).
                forced_kernels = ([] if args.no_sm80 else [(1, "ours_sm80")]) + [(2, "ours_hopper")]
                forced_kernels += [(10 + v, f"hopper_s{v}") for v in schedules]
                for kernel, key in forced_kernels:
                    lib.ga_flash_backward_set_kernel(kernel)
                    try:
                        for t in (dq, dk, dv):
                            t.fill_(float("nan"))
                        forced = FlashBwd(lib, q, k, v, o, lse, dout, dq, dk, dv, causal, scale)
                        forced.run()
                        torch.cuda.synchronize()
                        timing_only = key in ("hopper_s6", "hopper_s8", "hopper_s9", "hopper_s10", "hopper_s18")
                        if ref is not None and not timing_only:
                            err = max(rel_l2(ours, theirs) for ours, theirs in zip((dq, dk, dv), ref))
                            nan = any(torch.isnan(t).any().item() for t in (dq, dk, dv))
                            row[key + "_err"] = err
                            if nan or not err <= 2e-2:
                                row["ours_bad"] = True
                                print(f"  MISMATCH ours ({key}) vs FA2: rel L2 {err} nan {nan}")
                        fns[key] = forced_run(lib, kernel, forced)
                    finally:
                        lib.ga_flash_backward_set_kernel(0)
        if args.profile:
            print_profiles({k_: f_ for k_, f_ in fns.items() if k_ not in ("ours_sm80", "ours_hopper")},
                           f"s{s} {'causal' if causal else 'full'}")
        times, clocks = time_rounds(fns, args.iters, args.rounds)
        round_stats(row, times, flops, clocks, ours=["ours"])
        del fns
        rows.append(row)
        print(json.dumps({k_: (round(v_, 4) if isinstance(v_, float) else v_) for k_, v_ in row.items()}))
        sys.stdout.flush()
        del q, k, v, dout, o, lse, grads
        if reason is None:
            del dq, dk, dv
        torch.cuda.empty_cache()
    write_json(args.json, dev, rows)
    fmt = lambda x: "-" if x is None else f"{x:.0f}"
    print(f"\nbackward, TFLOP/s (2.5 x forward FLOPs); {timing_note(args)}; range = per-round ours / cuDNN")
    print("| hd | seq | mask | ours | mma.sync | Hopper (forced, timed again) | cuDNN | FA2 | ours/cuDNN | "
          "ours/FA2 | rel L2 ours-FA2 | cuDNN-FA2 | range | MHz |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o_, c_, f_ = r.get("ours"), r.get("cudnn"), r.get("fa2")
        print(f"| {r['head_dim']} | {r['seqlen']} | {'causal' if r['causal'] else 'full'} | {fmt(o_)} | "
              f"{fmt(r.get('ours_sm80'))} | {fmt(r.get('ours_hopper'))} | {fmt(c_)} | "
              f"{fmt(f_)} | " + (f"{o_ / c_:.2f}" if o_ and c_ else "-") + " | " +
              (f"{o_ / f_:.2f}" if o_ and f_ else "-") + f" | {r.get('ours_err', float('nan')):.1e} | "
              f"{r.get('cudnn_err', float('nan')):.1e} | {ratio_range(r)} | {fmt_mhz(r)} |")
    if schedules:
        print("\nHopper schedules (forced), TFLOP/s; s6/s8/s9/s10 = preprocess (+ convert) alone, as shares of ours' time")
        print("| hd | seq | mask | " + " | ".join(f"s{v}" for v in schedules) + " | cuDNN | best/cuDNN |")
        print("|---|---|---|" + "---|" * len(schedules) + "---|---|")
        for r in rows:
            cells, best = [], None
            for v in schedules:
                t = r.get(f"hopper_s{v}")
                if v in (6, 8, 9, 10):
                    cells.append("-" if t is None or not r.get("ours") else f"{r['ours'] / t:.0%}")
                    continue
                cells.append(fmt(t))
                best = t if t is not None and (best is None or t > best) else best
            c_ = r.get("cudnn")
            print(f"| {r['head_dim']} | {r['seqlen']} | {'causal' if r['causal'] else 'full'} | " + " | ".join(cells) +
                  f" | {fmt(c_)} | " + (f"{best / c_:.2f}" if best and c_ else "-") + " |")
    bad = [r for r in rows if r.get("ours_bad") or r.get("ours") is None]
    print(f"\n{len(rows)} configurations, {len(bad)} with a mismatch against torch or not run")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
