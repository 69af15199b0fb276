#!/usr/bin/env python3
"""Cross-checks the llama.cpp logits of tests/data/arch against the transformers logits (numpy only).

    python3 tools/reference/compare_logits.py [--root tests/data/arch] [--llamacpp BIN] [--manifest] [--tol 1e-3]

--llamacpp BIN   first (re)make every logits-llamacpp*.f32 with BIN (tools/reference/llamacpp_logits.cpp,
                 built by build_llamacpp_cpu.sh) from model.gguf and the token ids of reference.json
--scratch DIR    with --llamacpp: write the llama.cpp logits to DIR/<model>/ and compare those (leaves the
                 data folder alone; for diagnostic builds)
--manifest       (re)write ROOT/manifest.json: models, files with sha256, vocab size, n_tokens, cross-check
--tol            exit 1 when a pair's max-over-rows relative L2 exceeds this (default 1e-3)

Per pair: rel L2 = max over the 32 rows of ||llama - hf||_2 / ||hf||_2; max abs = max |llama - hf|;
argmax = rows whose argmax agree; the margin column is the smallest top1 - top2 of the HF row among the
rows that disagree (small margins make a disagreement harmless).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

# the llama.cpp runs per model: (output file, extra program arguments)
LLAMACPP_RUNS = {
    "phi3-longrope": [
        ("logits-llamacpp.f32", []),
        # llama.cpp picks the LongRoPE factors by context size (n_ctx 512 > 64 -> long); pretending the
        # original context is 512 makes it pick the short ones, as transformers does for 32 tokens
        ("logits-llamacpp-short.f32", ["--kv", "phi3.rope.scaling.original_context_length=int:512"]),
    ],
}
# the (transformers file, llama.cpp file, what) pairs per model
PAIRS = {
    "phi3-longrope": [
        ("logits-hf-long.f32", "logits-llamacpp.f32", "long factors"),
        ("logits-hf.f32", "logits-llamacpp-short.f32", "short factors"),
    ],
}
DEFAULT_RUNS = [("logits-llamacpp.f32", [])]
DEFAULT_PAIRS = [("logits-hf.f32", "logits-llamacpp.f32", "")]


def load(path: Path, n_tokens: int) -> np.ndarray:
    a = np.fromfile(path, dtype="<f4")
    return a.reshape(n_tokens, -1)


def compare(hf: np.ndarray, ll: np.ndarray) -> dict:
    h = hf.astype(np.float64)
    d = ll.astype(np.float64) - h
    rel = np.linalg.norm(d, axis=1) / np.linalg.norm(h, axis=1)
    agree = hf.argmax(1) == ll.argmax(1)
    top2 = np.sort(h, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    return dict(rel_l2_max=float(rel.max()), rel_l2_row0=float(rel[0]), max_abs=float(np.abs(d).max()),
                argmax_agree=int(agree.sum()), rows=int(len(rel)),
                min_margin_where_disagree=float(margin[~agree].min()) if (~agree).any() else None,
                hf_max_abs=float(np.abs(h).max()))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2] / "tests/data/arch")
    ap.add_argument("--llamacpp", type=Path, help="llamacpp_logits binary: remake the llama.cpp logits first")
    ap.add_argument("--scratch", type=Path, help="with --llamacpp: write its logits under this folder instead")
    ap.add_argument("--manifest", action="store_true", help="rewrite ROOT/manifest.json")
    ap.add_argument("--tol", type=float, default=1e-3)
    args = ap.parse_args()

    models = sorted(p.parent.name for p in args.root.glob("*/reference.json"))
    rows, bad, manifest = [], [], {}
    for name in models:
        d = args.root / name
        ref = json.loads((d / "reference.json").read_text())
        n = ref["n_tokens"]
        checks = []
        ll_dir = args.scratch / name if args.scratch and args.llamacpp else d
        if (d / "model.gguf").exists():
            if args.llamacpp:
                ll_dir.mkdir(parents=True, exist_ok=True)
                ids = ",".join(str(t) for t in ref["token_ids"])
                for out, extra in LLAMACPP_RUNS.get(name, DEFAULT_RUNS):
                    subprocess.run([str(args.llamacpp), str(d / "model.gguf"), str(ll_dir / out), ids] + extra,
                                   check=True, stdout=subprocess.DEVNULL)
            for hf_file, ll_file, what in PAIRS.get(name, DEFAULT_PAIRS):
                c = compare(load(d / hf_file, n), load(ll_dir / ll_file, n))
                c.update(hf=hf_file, llamacpp=ll_file, what=what)
                checks.append(c)
                rows.append((name + (f" ({what})" if what else ""), c))
                if not c["rel_l2_max"] <= args.tol:
                    bad.append(rows[-1][0])
        manifest[name] = dict(
            hf_class=ref["hf_class"], n_vocab=ref["n_vocab"], n_tokens=n, token_ids=ref["token_ids"],
            files={p.name: dict(bytes=p.stat().st_size, sha256=sha256(p)) for p in sorted(d.iterdir()) if p.is_file()},
            crosscheck=checks)

    print("| model | rel L2 (max over rows) | rel L2 row 0 | max abs | max abs HF logit | argmax agree | min margin where not |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, c in rows:
        m = "-" if c["min_margin_where_disagree"] is None else f"{c['min_margin_where_disagree']:.2g}"
        print(f"| {label} | {c['rel_l2_max']:.2e} | {c['rel_l2_row0']:.2e} | {c['max_abs']:.2e} | "
              f"{c['hf_max_abs']:.3g} | {c['argmax_agree']}/{c['rows']} | {m} |")
    if args.manifest:
        out = dict(description="tests/data/arch: tiny random-weight models (transformers) and llama.cpp GGUF "
                               "conversions with float32 logits of both; see README.md",
                   n_tokens=32, models=manifest)
        (args.root / "manifest.json").write_text(json.dumps(out, indent=1) + "\n")
    if bad:
        print(f"rel L2 above {args.tol}: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
