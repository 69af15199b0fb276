#!/usr/bin/env python3
"""Parity of `gpu-accel logits` with Hugging Face transformers on random-weight models.

Why: the C++ tests compare the Hugging Face load path with the GGUF path and llama.cpp's logits,
which proves the loader reproduces llama.cpp's reading of a checkpoint. This script closes the
loop against transformers itself, the reference for what a Hugging Face folder means: config
defaults, rotate-half RoPE on unpermuted Q/K rows, Llama-3 and linear RoPE scaling, Qwen2's q/k/v
biases and tied embeddings, Mistral's explicit head_dim, RWKV-4's stored time_decay and rescaling,
and RWKV-7 in flash-linear-attention's layout (fla's RWKV7ForCausalLM, the fla-hub models' format).

How: for each variant, build a small model with transformers from a config, overwrite every
parameter with seeded random values scaled so activations and attention are far from trivial
(transformers' 0.02 init gives near-uniform attention that would hide RoPE errors), save_pretrained
to a temporary folder (safetensors + config.json, no tokenizer), run transformers' forward on fixed
random token ids in float32 and float64, run `gpu-accel logits --all` on the same folder and ids, and
compare. Fails (exit 1) when any relative L2 error exceeds --tol (default 1e-4; float32 rounding
alone gives about 1e-6).

Needs PyTorch and transformers (4.4x or 5.x); no internet. The RWKV-7 case also needs the `fla` package
(flash-linear-attention) and a CUDA GPU, its kernels being Triton ones: without them it prints SKIPPED with
the reason (a run in which nothing was compared fails). Run from the repository root:
    python3 tools/hf_parity/run_parity.py --gpu-accel build/bin/gpu-accel
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

SEED = 1234
N_TOKENS = 37

# Shared shape of the small models (as asked for: hidden 256, 4 layers, 8 heads, 4 KV heads).
BASE = dict(
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    vocab_size=1000,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    hidden_act="silu",
)


def transformers_major():
    return int(transformers.__version__.split(".")[0])


def rope_kwargs(theta, scaling):
    """RoPE settings in the spelling of the installed transformers.

    5.x keeps everything in one `rope_parameters` dict (rope_theta included); 4.x has `rope_theta`
    plus a `rope_scaling` dict. `scaling` is None or a dict with rope_type and its parameters.
    """
    if transformers_major() >= 5:
        params = {"rope_type": "default", "rope_theta": theta}
        if scaling is not None:
            params.update(scaling)
        return {"rope_parameters": params}
    return {"rope_theta": theta, "rope_scaling": scaling}


LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Small on purpose: with head_dim 32 and theta 1e4 the pairs then fall in all three bands
    # (unscaled, blended, fully scaled) and the scaling visibly changes logits within 37 tokens.
    "original_max_position_embeddings": 32,
}


def fla_rwkv7():
    """fla's (config class, model class, None), or (None, None, why not) when it cannot run here."""
    try:
        from fla.models import RWKV7Config, RWKV7ForCausalLM  # flash-linear-attention
    except Exception as e:  # not installed, or its Triton import failed
        return None, None, "fla (flash-linear-attention) is not importable: %s: %s" % (type(e).__name__, e)
    if not torch.cuda.is_available():
        return None, None, "fla's RWKV-7 kernels are Triton kernels and need a CUDA GPU"
    return RWKV7Config, RWKV7ForCausalLM, None


# Per-variant settings beside the config: where transformers' forward runs and whether it runs in float64.
RUN_ON = {"rwkv7-fla": {"device": "cuda", "float64": False}}


def variants():
    """(name, config class, model class, config kwargs) for each model we compare; a class of None with the
    kwargs {"skip": reason} is a variant that cannot run here."""
    fla_config, fla_model, fla_missing = fla_rwkv7()
    return [
        ("llama", transformers.LlamaConfig, transformers.LlamaForCausalLM,
         dict(BASE, tie_word_embeddings=False, **rope_kwargs(10000.0, None))),
        ("llama-rope-llama3", transformers.LlamaConfig, transformers.LlamaForCausalLM,
         dict(BASE, tie_word_embeddings=False, **rope_kwargs(10000.0, LLAMA3_SCALING))),
        ("llama-rope-linear", transformers.LlamaConfig, transformers.LlamaForCausalLM,
         dict(BASE, tie_word_embeddings=False, **rope_kwargs(10000.0, {"rope_type": "linear", "factor": 4.0}))),
        # head_dim 48 != hidden / heads (32): the explicit head_dim path, and 2 KV heads.
        ("mistral-head-dim-48", transformers.MistralConfig, transformers.MistralForCausalLM,
         dict(BASE, num_key_value_heads=2, head_dim=48, sliding_window=4096, tie_word_embeddings=False,
              **rope_kwargs(10000.0, None))),
        # Qwen2: q/k/v biases, tied embeddings, a large rope base.
        ("qwen2-tied", transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
         dict(BASE, tie_word_embeddings=True, use_sliding_window=False, **rope_kwargs(1000000.0, None))),
        # RWKV-4: time_decay stored as trained (-exp at load) and, with rescale_every 2, transformers'
        # eval-mode rescaling of the output matrices (the forward halves the stream to match).
        ("rwkv4-rescale-2", transformers.RwkvConfig, transformers.RwkvForCausalLM,
         dict(hidden_size=BASE["hidden_size"], attention_hidden_size=BASE["hidden_size"], intermediate_size=1024,
              num_hidden_layers=BASE["num_hidden_layers"], vocab_size=BASE["vocab_size"], context_length=256,
              rescale_every=2, tie_word_embeddings=False)),
        # RWKV-7, fla's layout: head_dim 64 (4 heads), explicit LoRA widths, plain torch norms (fuse_norm off;
        # the group norm's eps is head_dim * norm_eps either way). 37 tokens take fla's recurrent kernel.
        ("rwkv7-fla", fla_config, fla_model,
         {"skip": fla_missing} if fla_missing else
         dict(hidden_size=BASE["hidden_size"], num_hidden_layers=BASE["num_hidden_layers"], head_dim=64,
              intermediate_size=1024, decay_low_rank_dim=32, a_low_rank_dim=32, v_low_rank_dim=32,
              gate_low_rank_dim=64, norm_eps=1e-5, fuse_norm=False, vocab_size=BASE["vocab_size"],
              tie_word_embeddings=False)),
    ]


def randomize(model, seed):
    """Seeded weights with activations of order 1: embeddings N(0, 1), matrices N(0, 1/fan_in),
    norm weights 1 + N(0, 0.1^2), biases N(0, 0.5^2). Tied parameters are drawn once."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 1.0 if "embed_tokens" in name or "embeddings" in name else p.shape[1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * 0.5)
            else:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float32))


def build(config_cls, model_cls, kwargs, seed):
    config = config_cls(**kwargs)
    try:
        config._attn_implementation = "eager"  # plain softmax attention, no fused kernels
    except (AttributeError, ValueError):
        pass  # sdpa is as exact in float32; the eager choice only removes one variable
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32).eval()
    randomize(model, seed)
    return model


def transformers_logits(model, ids, dtype, device="cpu"):
    m = model.to(device=device, dtype=dtype)
    with torch.no_grad():
        out = m(input_ids=torch.tensor([ids], dtype=torch.long, device=device)).logits[0]  # [n_tokens, n_vocab]
    model.to(device="cpu", dtype=torch.float32)
    return out.to(device="cpu", dtype=torch.float64)


def gpu_accel_logits(binary, folder, ids, out_path, threads):
    cmd = [binary, "logits", "-m", folder, "--tokens", ",".join(str(i) for i in ids), "--out", out_path, "--all",
           "--threads", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("gpu-accel failed (exit %d): %s\n%s" % (proc.returncode, " ".join(cmd),
                                                                   proc.stderr.strip()))
    with open(out_path, "rb") as f:
        data = bytearray(f.read())
    values = torch.frombuffer(data, dtype=torch.float32).to(torch.float64)
    return values.reshape(len(ids), -1), proc.stdout.strip()


def rel_l2(a, b):
    """||a - b|| / ||b|| for 1-D tensors."""
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)).item()


def compare(ours, ref):
    rows = [rel_l2(ours[t], ref[t]) for t in range(ref.shape[0])]
    return {
        "last": rows[-1],
        "all": max(rows),
        "max_abs": (ours - ref).abs().max().item(),
        "argmax_same": int((ours.argmax(dim=-1) == ref.argmax(dim=-1)).sum().item()),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-accel", default="build/bin/gpu-accel", help="path of the gpu-accel binary")
    parser.add_argument("--tol", type=float, default=1e-4, help="largest accepted relative L2 error")
    parser.add_argument("--threads", type=int, default=0, help="gpu-accel CPU threads (0: all)")
    parser.add_argument("--keep", action="store_true", help="keep the model folders (their paths are printed)")
    parser.add_argument("--only", default="", help="run only variants whose name contains this text")
    args = parser.parse_args()

    binary = os.path.abspath(args.gpu_accel)
    if not os.access(binary, os.X_OK):
        print("error: %s is not an executable (build it first, or pass --gpu-accel)" % binary, file=sys.stderr)
        return 2
    print("torch %s, transformers %s, gpu-accel %s" % (torch.__version__, transformers.__version__, binary))

    ids = torch.randint(0, BASE["vocab_size"], (N_TOKENS,), generator=torch.Generator().manual_seed(SEED)).tolist()
    results = []
    failed = False
    work = tempfile.mkdtemp(prefix="ga_hf_parity_")
    for name, config_cls, model_cls, kwargs in variants():
        if args.only and args.only not in name:
            continue
        folder = os.path.join(work, name)
        if config_cls is None:
            results.append({"name": name, "skipped": kwargs["skip"]})
            continue
        run_on = RUN_ON.get(name, {})
        device = run_on.get("device", "cpu")
        try:
            model = build(config_cls, model_cls, kwargs, SEED)
            model.save_pretrained(folder)
            with open(os.path.join(folder, "config.json")) as f:
                saved = json.load(f)
            ref32 = transformers_logits(model, ids, torch.float32, device)
            # (fla's kernels have no float64: its float32 reference stands in the float64 column)
            ref64 = transformers_logits(model, ids, torch.float64, device) if run_on.get("float64", True) else ref32
            start = time.time()
            ours, summary = gpu_accel_logits(binary, folder, ids, os.path.join(work, name + ".f32"), args.threads)
            seconds = time.time() - start
            if ours.shape != ref32.shape:
                raise RuntimeError("gpu-accel gave logits of shape %s, transformers %s" % (tuple(ours.shape),
                                                                                             tuple(ref32.shape)))
            r32, r64 = compare(ours, ref32), compare(ours, ref64)
            ok = max(r32["last"], r32["all"], r64["last"], r64["all"]) <= args.tol
            row = {"name": name, "arch": saved.get("architectures", ["?"])[0], "r32": r32, "r64": r64,
                   "ok": ok, "seconds": seconds, "summary": summary}
            if "llama3" in name or "linear" in name:
                # How much the scaling matters: transformers with and without it, same weights.
                plain = build(config_cls, model_cls, dict(kwargs, **rope_kwargs(10000.0, None)), SEED)
                row["scaling_effect"] = rel_l2(transformers_logits(plain, ids, torch.float64).flatten(),
                                               ref64.flatten())
            results.append(row)
            failed |= not ok
        except Exception as e:  # report every variant, then fail
            results.append({"name": name, "error": "%s: %s" % (type(e).__name__, e)})
            failed = True

    print()
    print("| model | architecture | rel L2 last (f32 ref) | rel L2 all rows (f32 ref) | rel L2 all rows (f64 ref) "
          "| max abs (f32 ref) | argmax equal | status |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in results:
        if "skipped" in r:
            print("| %s | | | | | | | SKIPPED: %s |" % (r["name"], r["skipped"].replace("|", "/").replace("\n", " ")))
            continue
        if "error" in r:
            print("| %s | | | | | | | ERROR: %s |" % (r["name"], r["error"].replace("|", "/").replace("\n", " ")))
            continue
        print("| %s | %s | %.2e | %.2e | %.2e | %.2e | %d/%d | %s |" % (
            r["name"], r["arch"], r["r32"]["last"], r["r32"]["all"], r["r64"]["all"], r["r32"]["max_abs"],
            r["r32"]["argmax_same"], N_TOKENS, "ok" if r["ok"] else "FAIL (> %.0e)" % args.tol))
    print()
    for r in results:
        if "scaling_effect" in r:
            print("%s: the RoPE scaling itself changes transformers' logits by %.2e rel L2 (so the check can see it)"
                  % (r["name"], r["scaling_effect"]))
    print("%d tokens, seed %d; gpu-accel: float32 with a float32 KV cache" % (N_TOKENS, SEED))
    if args.keep:
        print("model folders kept in %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    if not any("r32" in r for r in results):
        print("nothing was compared")
        failed = True
    print("FAILED" if failed else "PASSED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
