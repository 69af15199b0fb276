#!/usr/bin/env python3
"""How much one wrong hyperparameter changes llama.cpp's logits on tests/data/arch, measured against the
transformers logits: shows which mistakes the cross-check tolerance can see.

    python3 tools/reference/sensitivity.py --llamacpp /tmp/llamacpp-ref/llamacpp_logits [--scratch /tmp/arch-sensitivity]

Each row runs the llamacpp_logits program with one GGUF key overridden at load time (--kv; the GGUF files
are not changed) and prints the max-over-rows relative L2 against the file the unmodified run is compared
with (compare_logits.py's pairs). Numpy only.
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import compare_logits as cl

# (model, override, what it pretends)
CASES = [
    ("qwen3", "qwen3.rope.freq_base=float:10000", "rope theta 1e4 instead of 1e6"),
    ("qwen3", "qwen3.attention.layer_norm_rms_epsilon=float:1e-5", "rms eps 1e-5 instead of 1e-6"),
    ("qwen3-yarn", "qwen3.rope.scaling.type=str:none", "YaRN ignored"),
    ("qwen3-yarn", "qwen3.rope.scaling.factor=float:2", "YaRN factor 2 instead of 4"),
    ("gemma2", "gemma2.attention.sliding_window=int:7", "window 7 instead of 8"),
    ("gemma2", "gemma2.attention.sliding_window=int:9", "window 9 instead of 8"),
    ("gemma2", "gemma2.attention.sliding_window=int:512", "no sliding window"),
    ("gemma2", "gemma2.attn_logit_softcapping=float:1e6", "attention softcap ignored"),
    ("gemma2", "gemma2.final_logit_softcapping=float:1e6", "final softcap ignored"),
    ("gemma3", "gemma3.attention.sliding_window=int:7", "window 7 instead of 8"),
    ("gemma3", "gemma3.attention.sliding_window=int:512", "no sliding window"),
    ("gemma3", "gemma3.rope.freq_base_swa=float:1000000", "local rope theta 1e6 instead of 1e4"),
    ("gemma3", "gemma3.rope.scaling.factor=float:1", "global linear x8 ignored"),
    ("phi3-longrope", "phi3.rope.scaling.attn_factor=float:1", "LongRoPE attention factor ignored"),
    ("mixtral", "llama.expert_used_count=int:1", "top-1 instead of top-2"),
    ("qwen2moe", "qwen2moe.expert_used_count=int:3", "top-3 instead of top-2"),
    ("qwen3moe", "qwen3moe.expert_used_count=int:3", "top-3 instead of top-4"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2] / "tests/data/arch")
    ap.add_argument("--llamacpp", type=Path, required=True)
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/arch-sensitivity"))
    args = ap.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)

    print("| model | override (--kv) | pretends | rel L2 vs transformers (max over rows) | argmax agree |")
    print("|---|---|---|---:|---:|")
    for i, (name, kv, what) in enumerate(CASES):
        d = args.root / name
        ref = json.loads((d / "reference.json").read_text())
        out = args.scratch / f"{i:02d}-{name}.f32"
        extra = cl.LLAMACPP_RUNS.get(name, cl.DEFAULT_RUNS)[0][1]
        subprocess.run([str(args.llamacpp), str(d / "model.gguf"), str(out),
                        ",".join(map(str, ref["token_ids"]))] + extra + ["--kv", kv],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        hf_file = cl.PAIRS.get(name, cl.DEFAULT_PAIRS)[0][0]
        c = cl.compare(cl.load(d / hf_file, ref["n_tokens"]), cl.load(out, ref["n_tokens"]))
        print(f"| {name} | `{kv}` | {what} | {c['rel_l2_max']:.2e} | {c['argmax_agree']}/{c['rows']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
