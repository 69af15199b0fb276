#!/usr/bin/env python3
"""Reads what session 11's FP8 investigation needed from Nsight Compute and cuobjdump output (issue 4, dev tool).

  sass_stalls.py stalls SRC.csv [N]
      SRC.csv = `ncu -i REPORT --page source --csv --print-source sass` of a run with `--section SourceCounters`
      (tools/dev/fp8_ncu_source.sh writes it). Prints the warp stall reasons over all samples, the samples and
      executions per opcode with each opcode's top stall reasons, and the N hottest instructions (default 12) with
      the 3 instructions before each, e.g. the WARPGROUP.DEPBAR a key loop waits at.
  sass_stalls.py order SASS.txt NAME_PART [CHARS]
      SASS.txt = `cuobjdump --dump-sass` text (plain or .gz). For each kernel whose name contains NAME_PART: the
      order of its wgmma, wgmma waits, mbarrier, shuffle, MUFU and F2FP instructions, runs of one kind folded ("MUFUx114"),
      the first CHARS characters (default 3000). Shows where a kernel waits for its GEMMs relative to its softmax (the
      hoisted PV wait of docs/results/2026-11-28-h200-session11.md: `DEPBAR.LE gsb0, 0x1` straight followed by
      `DEPBAR.LE gsb0, 0x0`, then the MUFU run).
"""
import collections
import csv
import gzip
import re
import sys


def opcode(source):
    toks = source.strip().split()
    if not toks:
        return ""
    op = toks[1] if toks[0].startswith("@") and len(toks) > 1 else toks[0]
    return op.split(".")[0]


def stalls(path, top_n):
    rows = list(csv.reader(open(path)))
    hdr = rows[1]
    ix = {h: i for i, h in enumerate(hdr)}
    data = [r for r in rows[2:] if len(r) >= len(hdr)]
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    samples = lambda r: int(r[ix["Warp Stall Sampling (All Samples)"]] or 0)
    executed = lambda r: int(r[ix["Instructions Executed"]] or 0)
    total = sum(samples(r) for r in data)
    by_reason, by_op, op_exec = collections.Counter(), collections.Counter(), collections.Counter()
    op_reasons = collections.defaultdict(collections.Counter)
    for r in data:
        op = opcode(r[ix["Source"]])
        by_op[op] += samples(r)
        op_exec[op] += executed(r)
        for h in reasons:
            if r[ix[h]]:
                v = int(float(r[ix[h]]))
                by_reason[h[6:]] += v
                op_reasons[op][h[6:]] += v
    print(f"{total} samples")
    for k, v in by_reason.most_common():
        if v:
            print(f"  {k:20s} {v:8d} {100 * v / total:5.1f}%")
    print("by opcode: samples, executed, top stall reasons")
    for op, v in by_op.most_common(20):
        top = " ".join(f"{k}:{n}" for k, n in op_reasons[op].most_common(3))
        print(f"  {op:12s} {v:8d} {100 * v / total:5.1f}%  exec {op_exec[op]:>10d}  {top}")
    print(f"the {top_n} hottest instructions (3 before each)")
    hot = sorted(range(len(data)), key=lambda i: -samples(data[i]))[:top_n]
    for i in sorted(hot):
        print(f"  [{i}] {samples(data[i])} samples, executed {executed(data[i])}: {data[i][ix['Source']].strip()[:90]}")
        for q in data[max(0, i - 3):i]:
            print(f"        {q[ix['Source']].strip()[:90]}")


def order(path, name_part, chars):
    opener = gzip.open if path.endswith(".gz") else open
    kernels, cur = {}, None
    with opener(path, "rt") as f:
        for line in f:
            if "Function :" in line:
                cur = line.split("Function :")[1].strip()
                kernels[cur] = []
                continue
            m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*)", line)
            if m and cur is not None:
                kernels[cur].append((m.group(2), m.group(3)))
    keep = ("WARPGROUP", "QGMMA", "HGMMA", "MUFU", "SYNCS", "SHFL", "BAR", "F2FP", "VOTE", "NANOSLEEP")
    for name, ops in kernels.items():
        if name_part not in name:
            continue
        seq, last, count = [], None, 0
        for op, args in ops:
            base = op.split(".")[0]
            if base not in keep:
                continue
            folded = base in ("QGMMA", "HGMMA", "MUFU", "SHFL", "F2FP")  # operands / modifiers do not matter here
            label = op + args.strip()[:12] if base == "WARPGROUP" else base if folded else op
            if label == last:
                count += 1
                continue
            if last:
                seq.append(last + (f"x{count}" if count > 1 else ""))
            last, count = label, 1
        if last:
            seq.append(last + (f"x{count}" if count > 1 else ""))
        print(f"{name}: {len(ops)} instructions")
        print(" ".join(seq)[:chars])
        print()


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "stalls":
        stalls(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 12)
    elif len(sys.argv) >= 4 and sys.argv[1] == "order":
        order(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 3000)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
