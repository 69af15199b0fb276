#!/usr/bin/env python3
"""CTest `bench_http`: the HTTP load generator (bench/serve/bench_http.py) against `gpu-accel serve` on the CPU.

Why: the serving figures over HTTP (docs/performance.md) are taken on the GPU machine in one run with this generator, so it must be
known to work before: every request completes, its usage counts are right, and a failing request makes it
fail. The counts are checked twice, independently: the generator checks each stream's usage against what it
asked for, and this test checks the server's own counter (/metrics gpu_accel_generated_tokens_total) against
the sum of the generator's figures, and that the batch and the KV cache are empty afterwards.

Usage: test_bench_http.py GPU_ACCEL_BIN MODEL   (exit 77 = skipped: model not fetched, unless
GA_REQUIRE_TEST_DATA=1)
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench", "serve", "bench_http.py")
CLIENTS, PROMPT, MAX_TOKENS, WARMUP_TOKENS = 4, 8, 8, 8


def metrics(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^gpu_accel_(\w+) (\S+)$", text, re.M)}


def bench(url, *extra):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        cmd = [sys.executable, BENCH, "--url", url, "--clients", str(CLIENTS), "--prompt-tokens", str(PROMPT),
               "--timeout", "60", "--json", out, "--check", *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        print(proc.stdout + proc.stderr)
        rounds = json.load(open(out))["rounds"] if os.path.exists(out) else None
        return proc.returncode, rounds


def main():
    binary, model = sys.argv[1], sys.argv[2]
    if not os.path.exists(model):
        print(f"SKIPPED: {model} not found (tools/fetch_test_data.sh)")
        return 1 if os.environ.get("GA_REQUIRE_TEST_DATA") == "1" else 77
    ctx = 64
    server = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--quiet", "--max-batch", str(CLIENTS),
                               "--ctx", str(ctx), "--threads", "2"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in server.stderr:
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url, "the server did not print its address"
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()  # never a full pipe

        rc, rounds = bench(url, "--max-tokens", str(MAX_TOKENS))
        assert rc == 0, f"bench_http.py exited {rc}"
        (r,) = rounds
        assert r["clients"] == CLIENTS and r["failed"] == 0 and not r["errors"], r
        assert r["generated"] == CLIENTS * MAX_TOKENS, r
        assert r["aggregate_tok_s"] > 0 and r["ttft_max_ms"] is not None and r["ttft_max_ms"] > 0, r
        m = metrics(url)
        assert m["generated_tokens_total"] == WARMUP_TOKENS + CLIENTS * MAX_TOKENS, m
        assert m["prompt_tokens_total"] >= (1 + CLIENTS) * PROMPT, m  # >=: a prefix-cache hit is not recomputed
        assert m["requests_running"] == 0 and m["kv_blocks_used"] == 0, m

        # A round whose requests cannot be served (prompt + max_tokens > context: HTTP 400) must fail --check.
        rc, rounds = bench(url, "--max-tokens", str(ctx), "--no-warmup")
        assert rc == 1, f"bench_http.py --check exited {rc} on failing requests"
        assert rounds[0]["failed"] == CLIENTS and any("HTTP 400" in e for e in rounds[0]["errors"]), rounds
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
