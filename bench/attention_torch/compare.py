#!/usr/bin/env python3
"""Our attention kernels against PyTorch SDPA (cuDNN and FlashAttention-2 backends), same GPU, same run.

Methodology of the FlashAttention-3 paper (arXiv 2407.08608, section 4.1): 16k tokens per batch
(batch = 16384 / seqlen), hidden 2048 (n_head = 2048 / head_dim), seqlen 512..16k, causal and not;
FLOPs = 4 * batch * n_head * seqlen^2 * head_dim, halved for causal. All kernels of one problem run on the same
q, k, v tensors ([batch][seq][head][dim] memory, viewed as [batch][head][seq][dim] for SDPA). Our output is
checked against torch's (FA2 backend) every time.

Timing (time_rounds): one timing = CUDA events around back-to-back launches of one backend, at least `--iters`
and at least `--min-timing-ms` of work. The H200 runs these kernels at its power limit (SM clock 1650-1980 MHz), so
a timing depends on what ran just before it: the kernel timed right after a light one (FA2, the mma.sync kernel)
starts at higher clocks. Measured on 2026-11-22: the same kernel timed twice in one round-robin came out 5-10%
apart, always in favour of the one that followed FA2 (a rotated round-robin keeps every backend's predecessor,
so rotation does not remove this). Hence: the backends of one problem are interleaved over `--rounds` rounds, each
timing lasts long enough that the start-up transient is a small share, each backend's figure is the MEDIAN of its
rounds and ratios are ratios of medians. Two leftovers of the predecessor effect showed later (the same kernel in
two columns came out 1-2% apart, run after run): the random order was the same fixed-seed sequence in every run and
problem, so one column's unlucky predecessors repeated, and 7-15 random rounds do not give every column the same
predecessors. Now (1) every timing is preceded by the same conditioning load (`--condition-ms` of a bf16 matmul, the
GPU at its power limit), so no backend starts from the clocks a light predecessor left, and (2) the rounds walk a
balanced order (a Williams Latin square over the backends, shuffled per problem): over a whole cycle of rounds each
backend follows each other one equally often and sits at each position equally often. The claim is
our DEFAULT kernel (what flash_forward picks, schedule -1) against cuDNN; the best of several variants is printed
too, but a maximum over noisy timings is biased upwards. The per-round ratio default / cuDNN is also reported as a
min..max range, and the SM clock (torch.cuda.clock_rate, i.e. NVML, when available) is sampled after each round.

Our kernels come from libga_attention_c.so (bench/attention_torch/ga_attention_c_api.cu; build target
`ga_attention_c`), loaded with ctypes and called on the tensors' device pointers:
  * flash: the Hopper forward (kernels/flash), variants 0-6 (7-10: FP8 only; 12-17: FA3's wide key tiles and
           the lazy O rescale; 19-20: Q in registers; 21: split tail; 24: 21 + the TMA-store epilogue staged in
           the last V slot, the hd 128 non-causal default; 22, 23, 25 retired; -1: flash_forward's default;
           55 / 56: 4 / 13 with dynamic tiles (benchmark builds, -DGA_FLASH_FWD_DYNAMIC=1);
           kernels/flash/flash_fwd_launch.h; 1000 + v, e.g. 999 for the default: v with the causal query tiles
           handed out one head at a time, the order before the L2-aware longest-first one,
           FlashParams::causal_section_heads = 0;
           also for --fp8-variants),
           and variant 11, the mma.sync forward (kernels/flash/flash_fwd_sm80.cuh: what sm_80/86/89 GPUs run;
           --sm80 times only it, against FA2 = the issue's bar >= 0.9x);
  * mma:   the mma.sync prefill (kernels/attention*.cu; fp16 K/V, f32 q/out, causal, one sequence per
           call, so `batch` calls per step), against FA2 on the same fp16 causal problem.

The backward (flash_backward against cuDNN's and FA2's backward) is compare_bwd.py beside this, which reuses
this module's options, loader, timer and JSON output.

--fp8: the FP8 e4m3 forward (target >= 1000 TFLOP/s at hd 128/256, seq >= 4k; rel L2 <= 5e-2). Real bf16
tensors are quantized to torch.float8_e4m3fn with per-tensor scales (descale = amax / 448); ours runs on the
e4m3 bytes (V^T pre-pass included in its time), torch's bf16 SDPA runs on the dequantized inputs: FA2 gives
the reference output, cuDNN bf16 the speed peer, timed in the same process on the same data.

Usage: python3 compare.py --lib build/bench/attention_torch/libga_attention_c.so [--json out.json] [--fp8]
"""
import argparse
import ctypes
import functools
import json
import math
import random
import statistics
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

from timing_order import balanced_orders


def load_lib(path):
    lib = ctypes.CDLL(path)
    vp, i, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    strides = ctypes.POINTER(ctypes.c_int64)
    common = [vp, vp, vp, vp, vp, strides, i, i, i, i, i, i, i, i, f]
    lib.ga_flash_unsupported_reason.argtypes = common
    lib.ga_flash_unsupported_reason.restype = ctypes.c_char_p
    lib.ga_flash_forward.argtypes = common + [i, vp]
    lib.ga_flash_forward.restype = i
    lib.ga_flash_forward_ws.argtypes = common + [i, vp, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), vp]
    lib.ga_flash_forward_ws.restype = i
    lib.ga_flash_forward_fp8.argtypes = common[:14] + [f, f, f, f, i, vp, ctypes.c_size_t,
                                                       ctypes.POINTER(ctypes.c_size_t), vp]
    lib.ga_flash_forward_fp8.restype = i
    lib.ga_mma_prefill_workspace_bytes.argtypes = [i, i, i, i]
    lib.ga_mma_prefill_workspace_bytes.restype = ctypes.c_size_t
    lib.ga_mma_prefill.argtypes = [vp, vp, vp, vp, vp, ctypes.c_size_t, i, i, i, i, f, vp]
    lib.ga_mma_prefill.restype = i
    return lib


def time_ms(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def sm_clock_mhz():
    """The SM clock now in MHz (torch.cuda.clock_rate reads it through NVML), or None when it cannot be read."""
    try:
        return float(torch.cuda.clock_rate())
    except Exception:  # no pynvml / NVML on this machine: the clock column stays empty
        return None


LEGACY_TIMING = False  # --legacy-timing: one timing per backend, torch first, to measure what the interleaving changes


MIN_TIMING_MS = 0.0  # --min-timing-ms
CONDITION_MS = 0.0  # --condition-ms


class Conditioner:
    """The same load before every timing: bf16 matmuls for about CONDITION_MS, so each timed backend starts from the
    clocks and power state of a heavy kernel, whatever ran before it."""

    def __init__(self, ms):
        self.launches = 0
        if ms <= 0:
            return
        self.a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        self.b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        per_call = time_ms(lambda: torch.mm(self.a, self.b), 5, warmup=2)
        self.launches = max(1, math.ceil(ms / max(per_call, 1e-3)))

    def __call__(self):
        for _ in range(self.launches):
            torch.mm(self.a, self.b)


@functools.lru_cache(maxsize=None)
def conditioner(ms):
    """One Conditioner per run (its operands and launch count), not one per timed problem."""
    return Conditioner(ms)


def time_rounds(fns, iters, rounds, warmup=3):
    """Interleaved timing of the backends of one problem: ({name: [ms of each round]}, [SM MHz after each round]).

    Every fn is warmed up first (which also sizes its launch count: at least `iters` and at least MIN_TIMING_MS of
    work); then `rounds` rounds each time every fn once, each timing right after the same conditioning load, the
    rounds following the rows of a balanced order (balanced_orders) over the fns, shuffled per problem with a seed
    drawn from the names and the time, so no run repeats another's order."""
    names = list(fns)
    if LEGACY_TIMING:  # one timing each, torch's backends first, each right after its own warm-up
        names = [n for n in ("fa2", "cudnn") if n in fns] + [n for n in names if n not in ("fa2", "cudnn")]
        return {name: [time_ms(fns[name], iters, warmup)] for name in names}, []
    launches = {}
    for name in names:
        per_call = time_ms(fns[name], warmup, warmup=1)
        launches[name] = max(iters, math.ceil(MIN_TIMING_MS / max(per_call, 1e-3)))
    condition = conditioner(CONDITION_MS)
    torch.cuda.synchronize()
    times = {name: [] for name in names}
    clocks = []
    order_rng = random.Random(f"{names}-{time.time_ns()}")
    shuffled = order_rng.sample(names, len(names))
    orders = balanced_orders(len(names))
    start_row = order_rng.randrange(len(orders))
    for r in range(rounds):
        for index in orders[(start_row + r) % len(orders)]:
            name = shuffled[index]
            condition()
            times[name].append(time_ms(fns[name], launches[name], warmup=0))
        mhz = sm_clock_mhz()
        if mhz is not None:
            clocks.append(mhz)
    return times, clocks


def timing_note(args):
    """The summary tables' line on how the medians were taken."""
    return (f"medians of {args.rounds} rounds in a balanced order, each timing after {args.condition_ms:g} ms of "
            f"conditioning matmuls, >= {args.iters} launches and >= {args.min_timing_ms:g} ms per timing")


def median(xs):
    return statistics.median(xs) if xs else None


def round_stats(row, times, flops, clocks, ours=()):
    """Fills row[name] = TFLOP/s of the median round for each timed name, row["rounds"], row["mhz"] (median SM
    clock) and, when cuDNN and some of `ours` were timed, row["ratio_min"] / row["ratio_max"]: the per-round
    ratio of our best variant to cuDNN (the spread the medians hide). Returns the medians in ms."""
    med = {name: median(ts) for name, ts in times.items()}
    for name, ms in med.items():
        row[name] = flops / ms / 1e9
        row[name + "_spread"] = max(times[name]) / min(times[name]) - 1.0  # slowest / fastest round - 1
        row[name + "_rounds_ms"] = list(times[name])  # per round, for paired comparisons after the run
    row["rounds"] = len(next(iter(times.values()))) if times else 0
    row["mhz"] = median(clocks)
    if "cudnn" in times:  # paired: the median over rounds of cuDNN / this backend in the same round
        for name in times:
            if name.startswith("flash"):
                row[name + "_paired"] = median([times["cudnn"][r] / t for r, t in enumerate(times[name])])
    ours = [o for o in ours if o in times]
    if "cudnn" in times and ours:
        per_round = [max(times["cudnn"][r] / times[o][r] for o in ours) for r in range(row["rounds"])]
        row["ratio_min"], row["ratio_max"] = min(per_round), max(per_round)
    return med

def fa3_problems(args):
    """The FA3 paper's problems for --head-dims x --seqlens, full then causal: 16k tokens per batch (batch =
    16384 / seqlen, at least 1) and hidden 2048 (n_head = 2048 / head_dim). Yields (head_dim, n_head, seqlen,
    batch, causal)."""
    masks = [m for m in getattr(args, "masks", "full,causal").split(",") if m]
    for d in [int(x) for x in args.head_dims.split(",")]:
        for s in [int(x) for x in args.seqlens.split(",")]:
            for causal in [m == "causal" for m in masks]:
                yield d, 2048 // d, s, max(1, 16384 // s), causal


def arg_parser():
    """The options compare.py and compare_bwd.py share: the library, a JSON file, iterations and the grid."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--json")
    ap.add_argument("--iters", type=int, default=10, help="launches per timing (at least)")
    ap.add_argument("--min-timing-ms", type=float, default=40.0,
                    help="each timing runs at least this much work (launches added), so the clock transient after "
                         "the previous backend is a small share")
    ap.add_argument("--condition-ms", type=float, default=10.0,
                    help="before every timing, this much bf16 matmul work (the same predecessor for every backend); "
                         "0: none (the method before conditioning)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timings per backend (median reported)")
    ap.add_argument("--legacy-timing", action="store_true",
                    help="one timing per backend, torch first, without the interleaving (for comparison)")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--masks", default="full,causal", help="which of full / causal to time (e.g. --masks full)")
    return ap


def open_run(args):
    """(lib, device name, torch dtype): the library loaded, torch seeded, the versions printed."""
    global LEGACY_TIMING, MIN_TIMING_MS, CONDITION_MS
    LEGACY_TIMING = args.legacy_timing
    MIN_TIMING_MS = args.min_timing_ms
    CONDITION_MS = args.condition_ms
    if LEGACY_TIMING:
        args.rounds = 1
    lib = load_lib(args.lib)
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    print(f"device: {dev}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    return lib, dev, dtype


def write_json(path, dev, rows):
    if path:
        with open(path, "w") as fjson:
            json.dump({"device": dev, "torch": torch.__version__, "rows": rows}, fjson, indent=1)


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)).item()


class Flash:
    def __init__(self, lib, q, k, v, o, lse, causal, scale):
        b, s, h, d = q.shape
        self.lib, self.q, self.k, self.v, self.o, self.lse = lib, q, k, v, o, lse
        st = []
        for t in (q, k, v, o):
            st += [t.stride(0), t.stride(1), t.stride(2)]
        self.strides = (ctypes.c_int64 * 12)(*st)
        self.args = [q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), self.strides,
                     0 if q.dtype == torch.bfloat16 else 1, d, h, k.shape[2], b, s, k.shape[1], int(causal), scale]
        # flash_plan's workspace (the split-tail variant's partials; none for the others), allocated once per problem
        need = ctypes.c_size_t(0)
        lib.ga_flash_forward_ws(*self.args, -1, None, 0, ctypes.byref(need), None)
        self.ws_bytes = need.value
        self.ws = torch.empty(max(self.ws_bytes, 16), device=q.device, dtype=torch.uint8)

    def reason(self):
        r = self.lib.ga_flash_unsupported_reason(*self.args)
        return None if r is None else r.decode()

    def try_run(self, sched):
        """cudaError of one call (CUDA_ERROR_NOT_SUPPORTED: variant not compiled in this build)."""
        return self.lib.ga_flash_forward_ws(*self.args, sched, self.ws.data_ptr(), self.ws_bytes, None,
                                            torch.cuda.current_stream().cuda_stream)

    def run(self, sched):
        err = self.try_run(sched)
        if err != 0:
            raise RuntimeError(f"ga_flash_forward returned cudaError {err}")


SM80_VARIANT = 11  # kFlashSm80Variant (kernels/flash/flash_attention.h)

# FP8 variants tried (kernels/flash/flash_fwd_launch.h: 0-10; 28, 29, 32-34 = FA3's 224-key tile at hd 128: alone,
# + split-chain softmax (the default), + ping-pong, 3-deep ring, lazy rescale; 39 = the hd 256 default, the overlap
# schedule with the split chains, 40 / 41 its one-tile / 3-stage twins; 43 = 29 with the PV wait pinned below the
# softmax, 48 = three consumer warpgroups on 192 x 128 tiles; 57 / 58 = 39 / 29 with V^T made in the kernel); the ones this build did not compile
# answer cudaErrorNotSupported and are skipped. -1 = the default (fp8_default_variant). --fp8-variants narrows the list.
FP8_VARIANTS = list(range(-1, 11)) + [28, 29, 32, 33, 34, 39, 40, 41, 43, 48, 57, 58]
CUDA_ERROR_NOT_SUPPORTED = 801


def quantize_e4m3(x):
    """(e4m3 tensor, descale): x ~= e4m3.float() * descale, per-tensor scale amax / 448."""
    descale = x.float().abs().amax().clamp(min=1e-30).item() / 448.0
    return (x.float() / descale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), descale


class FlashFp8:
    def __init__(self, lib, q8, k8, v8, o, lse, causal, scale, descales):
        b, s, h, d = q8.shape
        self.lib = lib
        st = []
        for t in (q8, k8, v8, o):
            st += [t.stride(0), t.stride(1), t.stride(2)]
        self.strides = (ctypes.c_int64 * 12)(*st)
        self.keep = (q8, k8, v8, o, lse)
        self.args = [q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), o.data_ptr(), lse.data_ptr(), self.strides,
                     0 if o.dtype == torch.bfloat16 else 1, d, h, k8.shape[2], b, s, k8.shape[1], int(causal), scale,
                     *descales]
        need = ctypes.c_size_t(0)
        err = lib.ga_flash_forward_fp8(*self.args, -1, None, 0, ctypes.byref(need), None)
        if err != 0:
            raise RuntimeError(f"ga_flash_forward_fp8 refused the parameters (cudaError {err})")
        self.ws_bytes = need.value
        self.ws = torch.empty(max(self.ws_bytes, 16), device="cuda", dtype=torch.uint8)

    def try_run(self, sched):
        """cudaError of one call (sched -2: the V^T pre-pass alone)."""
        return self.lib.ga_flash_forward_fp8(*self.args, sched, self.ws.data_ptr(), self.ws_bytes, None,
                                             torch.cuda.current_stream().cuda_stream)

    def run(self, sched):
        err = self.try_run(sched)
        if err != 0:
            raise RuntimeError(f"ga_flash_forward_fp8 returned cudaError {err}")


def fp8_main(args, lib, dev):
    rows = []
    for d, h, s, b, causal in fa3_problems(args):
        q8, dq = quantize_e4m3(torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16))
        k8, dk = quantize_e4m3(torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16))
        v8, dv = quantize_e4m3(torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16))
        qd, kd, vd = [(t.float() * sc).to(torch.bfloat16) for t, sc in ((q8, dq), (k8, dk), (v8, dv))]
        o = torch.full((b, s, h, d), float("nan"), device="cuda", dtype=torch.bfloat16)
        lse = torch.full((b, h, s), float("nan"), device="cuda", dtype=torch.float32)
        scale = 1.0 / math.sqrt(d)
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        row = {"head_dim": d, "seqlen": s, "batch": b, "n_head": h, "causal": causal, "dtype": "fp8"}
        ref = sdpa(qd, kd, vd, causal, SDPBackend.FLASH_ATTENTION)
        fns = {}
        try:
            sdpa(qd, kd, vd, causal, SDPBackend.CUDNN_ATTENTION)
            fns["cudnn"] = lambda: sdpa(qd, kd, vd, causal, SDPBackend.CUDNN_ATTENTION)
        except RuntimeError as e:
            row["cudnn"] = None
            print(f"  cudnn unavailable: {str(e).splitlines()[0]}")
        fl = FlashFp8(lib, q8, k8, v8, o, lse, causal, scale, (dq, dk, dv))
        fns["vt"] = lambda: fl.run(-2)  # V^T pre-pass alone
        for sc in FP8_VARIANTS:
            o.fill_(float("nan"))
            err = fl.try_run(sc)
            if err == CUDA_ERROR_NOT_SUPPORTED and sc >= 0:
                continue  # not compiled in this build
            if err != 0:
                raise RuntimeError(f"ga_flash_forward_fp8 variant {sc} returned cudaError {err}")
            torch.cuda.synchronize()
            err = rel_l2(o, ref)
            nan = torch.isnan(o).any().item()
            key = "fp8_default" if sc < 0 else f"fp8_v{sc}"
            fns[key] = lambda sc=sc: fl.run(sc)
            row[key + "_err"] = err
            if nan or not err <= 5e-2:
                row[key + "_bad"] = True
                print(f"  MISMATCH fp8 variant {sc}: rel L2 {err:.3e} nan {nan}")
        times, clocks = time_rounds(fns, args.iters, args.rounds)
        med = round_stats(row, times, flops, clocks, ours=["fp8_default"] if "fp8_default" in fns else
                          [k_ for k_ in fns if k_.startswith("fp8_")])
        del row["vt"], row["vt_spread"]  # a pass, not attention: its time in us instead
        row["vt_us"] = med["vt"] * 1e3
        row["fp8_default_ms"] = med["fp8_default"]
        rows.append(row)
        print(json.dumps({k_: (round(v_, 4) if isinstance(v_, float) else v_) for k_, v_ in row.items()}))
        sys.stdout.flush()
        del q8, k8, v8, qd, kd, vd, o, lse, ref, fl
        torch.cuda.empty_cache()
    write_json(args.json, dev, rows)
    print(f"\n{timing_note(args)}; range = per-round default fp8 / cuDNN")
    print("\n| hd | seq | mask | ours fp8 (default) | variants | V^T pass us (% of default) | cuDNN bf16 | ours/cuDNN"
          " | >= 1000 | max rel L2 | range | MHz |")
    print("|---|---:|---|---:|---|---:|---:|---:|---|---:|---|---:|")
    for r in rows:
        ours = r.get("fp8_default") or 0
        var = ", ".join(f"v{sc} {r[f'fp8_v{sc}']:.0f}" for sc in FP8_VARIANTS if sc >= 0 and f"fp8_v{sc}" in r)
        errs = [v_ for k_, v_ in r.items() if k_.endswith("_err")]
        cud = r.get("cudnn")
        vt = f"{r['vt_us']:.1f} ({100 * r['vt_us'] / (1e3 * r['fp8_default_ms']):.1f}%)"
        print(f"| {r['head_dim']} | {r['seqlen']} | {'causal' if r['causal'] else 'full'} | {ours:.0f} | {var} | "
              f"{vt} | {'-' if cud is None else f'{cud:.0f}'} | {'-' if not cud else f'{ours / cud:.2f}'} | "
              f"{'yes' if ours >= 1000 else 'no'} | {max(errs):.1e} | {ratio_range(r)} | {fmt_mhz(r)} |")
    bad = [r for r in rows if any(k_.endswith("_bad") for k_ in r)]
    print(f"\n{len(rows)} FP8 configurations, {len(bad)} with a mismatch against torch (bar 5e-2)")
    return 1 if bad else 0


def ratio_range(r):
    return f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}" if "ratio_min" in r else "-"


def fmt_mhz(r):
    return "-" if r.get("mhz") is None else f"{r['mhz']:.0f}"


def sdpa(q, k, v, causal, backend):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=causal).transpose(1, 2)


def main():
    ap = arg_parser()
    # -1 = flash_forward's default; the lean build compiles 1, 4, 12, 13 (0-6 need -DGA_FLASH_ALL_VARIANTS=ON,
    # 14-17 -DGA_FLASH_FWD_CANDIDATES=1, 19-20 -DGA_FLASH_FWD_QREG=1, 51-52 (the pinned PV wait)
    # -DGA_FLASH_FWD_PIN=1); uncompiled ones are skipped. Pass
    # "--schedules=-1,..." (leading minus).
    ap.add_argument("--schedules", default="-1,1,4,12,13")
    ap.add_argument("--mma", action="store_true", help="also time the mma.sync prefill (fp16, causal)")
    ap.add_argument("--fp8", action="store_true", help="the FP8 e4m3 forward instead (head dims 128, 256)")
    ap.add_argument("--fp8-variants", default="",
                    help="with --fp8: the variants to time (\"--fp8-variants=-1,4,28\"; default: every compiled one)")
    ap.add_argument("--sm80", action="store_true",
                    help="time the mma.sync forward (variant 7, kFlashSm80Variant) only: --schedules 7")
    args = ap.parse_args()
    if args.sm80:
        args.schedules = str(SM80_VARIANT)

    lib, dev, dtype = open_run(args)
    if args.fp8:
        global FP8_VARIANTS
        if args.fp8_variants:
            FP8_VARIANTS = [int(x) for x in args.fp8_variants.split(",")]
        if args.head_dims == "64,128,256":
            args.head_dims = "128,256"
        return fp8_main(args, lib, dev)
    scheds = [int(x) for x in args.schedules.split(",")]
    rows = []
    for d, h, s, b, causal in fa3_problems(args):
        q = torch.randn(b, s, h, d, device="cuda", dtype=dtype)
        k = torch.randn(b, s, h, d, device="cuda", dtype=dtype)
        v = torch.randn(b, s, h, d, device="cuda", dtype=dtype)
        o = torch.full_like(q, float("nan"))
        lse = torch.full((b, h, s), float("nan"), device="cuda", dtype=torch.float32)
        scale = 1.0 / math.sqrt(d)
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        row = {"head_dim": d, "seqlen": s, "batch": b, "n_head": h, "causal": causal, "dtype": args.dtype}
        ref = sdpa(q, k, v, causal, SDPBackend.FLASH_ATTENTION)
        fns = {}
        fl = Flash(lib, q, k, v, o, lse, causal, scale)
        reason = fl.reason()
        if reason is not None:
            print(f"flash refused: {reason}")
        else:
            for sc in scheds:
                o.fill_(float("nan"))
                e = fl.try_run(sc)
                if e == CUDA_ERROR_NOT_SUPPORTED:
                    continue  # not compiled in this build
                if e != 0:
                    raise RuntimeError(f"ga_flash_forward variant {sc} returned cudaError {e}")
                torch.cuda.synchronize()
                err = rel_l2(o, ref)
                nan = torch.isnan(o).any().item()
                fns[f"flash{sc}"] = lambda sc=sc: fl.run(sc)
                row[f"flash{sc}_err"] = err
                if nan or not err <= 1e-2:
                    row[f"flash{sc}_bad"] = True
                    print(f"  MISMATCH flash sched {sc}: rel L2 {err:.3e} nan {nan}")
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            try:
                sdpa(q, k, v, causal, backend)
                fns[name] = lambda backend=backend: sdpa(q, k, v, causal, backend)
            except RuntimeError as e:
                row[name] = None
                print(f"  {name} unavailable: {str(e).splitlines()[0]}")
        times, clocks = time_rounds(fns, args.iters, args.rounds)
        # The range is that of the default kernel (-1) when it was timed, else of the best variant per round.
        round_stats(row, times, flops, clocks,
                    ours=["flash-1"] if "flash-1" in fns else [f"flash{sc}" for sc in scheds])
        if args.mma and causal and d <= 128:
            q16, k16, v16 = q.half(), k.half(), v.half()
            q32 = q16.float()
            out32 = torch.full_like(q32, float("nan"))
            ws_bytes = lib.ga_mma_prefill_workspace_bytes(s, h, h, d)
            ws = torch.zeros(max(ws_bytes, 16), device="cuda", dtype=torch.uint8)
            stream = torch.cuda.current_stream().cuda_stream

            def mma_all():
                for bi in range(b):
                    e = lib.ga_mma_prefill(q32[bi].data_ptr(), k16[bi].data_ptr(), v16[bi].data_ptr(),
                                           out32[bi].data_ptr(), ws.data_ptr(), ws_bytes, s, h, h, d,
                                           scale, stream)
                    if e != 0:
                        raise RuntimeError(f"ga_mma_prefill returned cudaError {e}")
            mma_all()
            ref16 = sdpa(q16, k16, v16, True, SDPBackend.FLASH_ATTENTION)
            row["mma_err"] = rel_l2(out32, ref16)
            mma_times, _ = time_rounds({"mma": mma_all, "fa2_f16": lambda: sdpa(q16, k16, v16, True,
                                                                                 SDPBackend.FLASH_ATTENTION)},
                                       args.iters, args.rounds)
            for name, ts in mma_times.items():
                row[name] = flops / median(ts) / 1e9
        rows.append(row)
        best = max((row.get(f"flash{sc}") or 0) for sc in scheds)
        print(json.dumps({k_: (round(v_, 4) if isinstance(v_, float) else v_) for k_, v_ in row.items()}),
              f"best/cudnn {best / row['cudnn']:.3f}" if row.get("cudnn") else "")
        sys.stdout.flush()
        del q, k, v, o, lse, ref
        torch.cuda.empty_cache()
    write_json(args.json, dev, rows)
    # Summary table last (TFLOP/s)
    print(f"\n{timing_note(args)}; default = s-1 (what flash_forward picks) when timed; "
          "range = per-round default / cuDNN")
    print(f"\n| hd | seq | mask | " + " | ".join(f"ours s{sc}" for sc in scheds) +
          " | cuDNN | FA2 | default/cuDNN | best/cuDNN | best/FA2 | max rel L2 | range | MHz |")
    print("|---" * (10 + len(scheds)) + "|")
    for r in rows:
        ours = [r.get(f"flash{sc}") for sc in scheds]
        best = max((x or 0) for x in ours)
        default = r.get("flash-1")
        errs = [r.get(f"flash{sc}_err") or 0 for sc in scheds]
        fmt = lambda x: "-" if x is None else f"{x:.0f}"
        print(f"| {r['head_dim']} | {r['seqlen']} | {'causal' if r['causal'] else 'full'} | " +
              " | ".join(fmt(x) for x in ours) + f" | {fmt(r.get('cudnn'))} | {fmt(r.get('fa2'))} | " +
              (f"{default / r['cudnn']:.2f}" if default and r.get("cudnn") else "-") + " | " +
              (f"{best / r['cudnn']:.2f}" if r.get("cudnn") else "-") + " | " +
              (f"{best / r['fa2']:.2f}" if r.get("fa2") else "-") + f" | {max(errs):.1e} | {ratio_range(r)} | "
              f"{fmt_mhz(r)} |")
    if any(f"flash{sc}_paired" in r for r in rows for sc in scheds):
        # The same rounds paired: per round cuDNN time / our time, median over the rounds (less spread than the ratio
        # of medians when the clock drifts between rounds; both are in the JSON).
        print("\npaired: median over rounds of (cuDNN / ours in the same round)\n")
        print("| hd | seq | mask | " + " | ".join(f"s{sc}/cuDNN" for sc in scheds) + " |")
        print("|---" * (3 + len(scheds)) + "|")
        for r in rows:
            cells = [r.get(f"flash{sc}_paired") for sc in scheds]
            print(f"| {r['head_dim']} | {r['seqlen']} | {'causal' if r['causal'] else 'full'} | " +
                  " | ".join("-" if x is None else f"{x:.3f}" for x in cells) + " |")
    if any("mma" in r for r in rows):
        print("\n| hd | seq | mma.sync prefill (fp16 causal) | FA2 fp16 causal | ratio | rel L2 |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            if "mma" in r:
                print(f"| {r['head_dim']} | {r['seqlen']} | {r['mma']:.0f} | {r['fa2_f16']:.0f} | "
                      f"{r['mma'] / r['fa2_f16']:.2f} | {r['mma_err']:.1e} |")
    bad = [r for r in rows if any(k_.endswith("_bad") for k_ in r)]
    print(f"\n{len(rows)} configurations, {len(bad)} with a mismatch against torch")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
