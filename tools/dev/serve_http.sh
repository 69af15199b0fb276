#!/usr/bin/env bash
# Issue 5's serving figures over HTTP, in one device run: builds `gpu-accel serve` against a carried
# cpp-httplib, serves a model, drives it with N concurrent streaming clients (bench/serve/bench_http.py),
# then measures the same rounds in process (`gpu-accel bench-serve`) for comparison, and prints a table.
#
# Why it is built this way: the GPU machine (Ubuntu 24.04, no network) has OpenSSL's headers but no
# cpp-httplib, so the server is built against Debian's library carried in a folder (tools/dev/pack_httplib.sh
# makes it: httplib.h, libcpp-httplib.so + the brotli libraries it links, a relocatable cpp-httplib.pc
# whose Libs carry an rpath to the folder, and pkgconf for a machine without pkg-config). The HTTP rounds run
# first, with the server alone on the GPU; the server stops (its KV pool is sized from free memory) before
# bench-serve builds its own Scheduler with the same shape: max running = the largest client count, context
# = prompt + max tokens, 2048 KV blocks of 16, 512 tokens per step, CUDA graphs, GPU sampling.
#
# Usage (device; from the worktree copy, .httplib carried beside it):
#   cd .dev-http && export GA_SHARED=$PWD/../.fwdshared && OUT=$OUT bash tools/dev/serve_http.sh cuda
# Local check on the CPU (stories260K, small rounds; reuses a build folder when B names one):
#   B=build-http GA_HTTPLIB=/work/main/.httplib bash tools/dev/serve_http.sh cpu
# Environment: GA_HTTPLIB (the carried folder; default ../.httplib), B (build folder; default /tmp/b), OUT,
#   CLIENTS / PROMPT / MAXTOK (the rounds), JOBS (build parallelism).
set -uo pipefail
mode=${1:-cuda}
[[ $mode == cuda || $mode == cpu ]] || { echo "usage: serve_http.sh [cuda|cpu]" >&2; exit 2; }
root=$(pwd)
H=$(cd "${GA_HTTPLIB:-$root/../.httplib}" 2>/dev/null && pwd) || { echo "no carried cpp-httplib folder (GA_HTTPLIB)" >&2; exit 1; }
B=${B:-/tmp/b}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
summary=()
note() { summary+=("$1"); echo "== $1"; }
finish() {
  echo "================ SUMMARY"
  printf '%s\n' "${summary[@]}"
  [[ -f "$OUT/table.md" ]] && cat "$OUT/table.md"
  # At most 8 files come back from the device: the table, everything printed, and one archive of the rest.
  tar czf /tmp/serve-http-logs.tar.gz -C "$OUT" --exclude=table.md --exclude=all.md . &&
    (cd "$OUT" && find . -maxdepth 1 -type f ! -name table.md ! -name all.md -delete) &&
    mv /tmp/serve-http-logs.tar.gz "$OUT/logs.tar.gz"
  exit "${1:-0}"
}

if [[ $mode == cuda ]]; then
  note "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>&1)"
  CLIENTS=${CLIENTS:-1,16,64}; PROMPT=${PROMPT:-128}; MAXTOK=${MAXTOK:-128}; JOBS=${JOBS:-16}
  cuda_args=(-DGA_CUDA=ON -DGA_CUDA_ARCHS=90a)
  nice_cmd=()
else
  CLIENTS=${CLIENTS:-1,4}; PROMPT=${PROMPT:-32}; MAXTOK=${MAXTOK:-32}; JOBS=${JOBS:-2}
  cuda_args=(-DGA_CUDA=OFF)
  nice_cmd=(nice)
fi
max_clients=$(tr ',' '\n' <<< "$CLIENTS" | sort -n | tail -1)
note "host: $(nproc) cores, $(python3 --version 2>&1), glibc $(ldd --version | head -1 | awk '{print $NF}'), openssl/ssl.h: $(ls /usr/include/openssl/ssl.h 2>/dev/null || echo MISSING)"

# pkg-config: the machine's, else the carried pkgconf. The carried .pc comes first on the search path.
if ! command -v pkg-config > /dev/null; then
  export PKG_CONFIG="$H/bin/pkg-config"
  note "pkg-config: none on the machine, using the carried pkgconf"
fi
export PKG_CONFIG_PATH="$H/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$H/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing=$(ldd "$H/lib/libcpp-httplib.so" 2>&1 | grep "not found")
note "carried libcpp-httplib.so loads: ${missing:-yes (every dependency found)}"
[[ -z $missing ]] || finish 1

t0=$(date +%s)
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" -DGA_BUILD_SERVER=ON -DGA_BUILD_TESTS=OFF \
  > "$OUT/build.log" 2>&1
rc=$?
grep -E "cpp-httplib|HTTP server" "$OUT/build.log"
if [[ $rc -eq 0 ]]; then
  "${nice_cmd[@]}" ninja -C "$B" -j"$JOBS" gpu-accel >> "$OUT/build.log" 2>&1
  rc=$?
fi
note "configure + build (server ON) rc=$rc in $(( $(date +%s) - t0 )) s"
if [[ $rc -ne 0 ]]; then grep -E "error|Error|FAILED" -A4 "$OUT/build.log" | head -60; finish 1; fi
GA="$B/bin/gpu-accel"
note "gpu-accel links: $(ldd "$GA" | grep -E 'httplib|brotli|libssl' | awk '{print $1 " -> " $3}' | tr '\n' ' ')"

if [[ $mode == cuda ]]; then
  M=/tmp/llama3-1b-f16.gguf
  "$GA" make-model --preset llama3-1b --type F16 --out $M --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" \
    > "$OUT/make-model.log" 2>&1
  note "make-model llama3-1b F16 rc=$?"
  device=cuda
else
  M=${GA_SHARED:-$root/../shared}/models/tinyllamas/stories260K.gguf
  device=cpu
fi
# TTFT is also measured at longer prompts (TTFT_PROMPTS, lone requests only): at 128 tokens a 1B model's
# prefill is ~1.7 ms, so the fixed cost of the way in and out is a large share of it.
TTFT_PROMPTS=${TTFT_PROMPTS:-$([[ $mode == cuda ]] && echo 512)}
longest=$PROMPT
for p in $TTFT_PROMPTS; do (( p > longest )) && longest=$p; done
ctx=$(( longest + MAXTOK ))
profile=()
[[ $mode == cuda ]] && profile=(--profile-steps)

# HTTP: the server on the device alone; bench_http.py starts it (--port 0), waits for /health, stops it.
serve_cmd="$GA serve -m $M --device $device --port 0 --quiet --max-batch $max_clients --ctx $ctx --kv-blocks 2048 \
--http-threads $(( max_clients + 16 ))"
echo "\$ $serve_cmd" > "$OUT/http.md"
timeout 240 python3 bench/serve/bench_http.py --server-cmd "$serve_cmd" --server-log "$OUT/server.log" --timeout 120 \
  --clients "$CLIENTS" --prompt-tokens "$PROMPT" --max-tokens "$MAXTOK" --ttft-repeats 9 --json "$OUT/http.json" --check \
  >> "$OUT/http.md" 2>> "$OUT/http.err"
note "bench_http.py --clients $CLIENTS --prompt-tokens $PROMPT --max-tokens $MAXTOK rc=$?"
for p in $TTFT_PROMPTS; do
  timeout 120 python3 bench/serve/bench_http.py --server-cmd "$serve_cmd" --server-log "$OUT/server-$p.log" \
    --timeout 60 --clients 1 --prompt-tokens "$p" --max-tokens 8 --ttft-repeats 9 --json "$OUT/http-$p.json" --check \
    >> "$OUT/http.md" 2>> "$OUT/http.err"
  note "bench_http.py TTFT at $p prompt tokens rc=$?"
done

# In process, the same rounds (and the Session prefill / decode references `gpu-accel run` uses).
echo "\$ gpu-accel bench-serve -m $(basename "$M") --device $device --clients $CLIENTS --prompt-tokens $PROMPT --max-tokens $MAXTOK ${profile[*]}" \
  > "$OUT/bench-serve.md"
timeout 200 "$GA" bench-serve -m "$M" --device $device --clients "$CLIENTS" --prompt-tokens "$PROMPT" \
  --max-tokens "$MAXTOK" "${profile[@]}" >> "$OUT/bench-serve.md" 2>> "$OUT/bench-serve.err"
note "bench-serve rc=$?"
for p in $TTFT_PROMPTS; do
  echo "\$ gpu-accel bench-serve --clients 1,1,1,1,1 --prompt-tokens $p --max-tokens 8 ${profile[*]}" > "$OUT/bench-serve-$p.md"
  timeout 120 "$GA" bench-serve -m "$M" --device $device --clients 1,1,1,1,1 --prompt-tokens "$p" --max-tokens 8 \
    "${profile[@]}" >> "$OUT/bench-serve-$p.md" 2>> "$OUT/bench-serve.err"
  note "bench-serve TTFT at $p prompt tokens rc=$?"
done

# The issue's reference literally: `gpu-accel run`'s own "prompt: N tokens in X ms" (one prefill per process, after
# the upload), 5 processes per length, with a text of about the same number of tokens (the model's vocabulary is
# the real Llama SPM one; ~17.5 tokens per repetition of the sentence below).
for p in $PROMPT $TTFT_PROMPTS; do
  text=$(python3 -c "import sys; print(' '.join(['the cat sat on the mat and looked at the dog by the door'] * max(1, round(int(sys.argv[1]) / 17.5))))" "$p")
  : > "$OUT/run-$p.txt"
  for k in 1 2 3 4 5; do
    timeout 60 "$GA" run -m "$M" --device $device -p "$text" -n 1 --temp 0 2>&1 | grep -oE "prompt: [0-9]+ tokens in [0-9.]+ ms" >> "$OUT/run-$p.txt"
  done
  note "gpu-accel run x5 at ~$p tokens: $(head -1 "$OUT/run-$p.txt")"
  cold=$(timeout 60 "$GA" run -m "$M" --device $device -p "$text" -n 1 --temp 0 --no-warmup 2>&1 |
    grep -oE "prompt: [0-9]+ tokens in [0-9.]+ ms")
  note "gpu-accel run --no-warmup at ~$p tokens (the cold first prefill): $cold"
done

python3 - "$OUT" "$PROMPT" $TTFT_PROMPTS > "$OUT/table.md" <<'PYEOF'
import json, os, re, statistics, sys
out, main_prompt, extra = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3:]]
def load_http(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return {}
def load_inproc(path):
    rounds, prefill_ms, profile = {}, None, None
    if not os.path.exists(path):
        return rounds, prefill_ms, profile
    for line in open(path):
        m = re.search(r"reference Session .*\): prefill ([0-9.]+) ms", line)
        if m: prefill_ms = float(m.group(1))
        if line.startswith("prefill of the"): profile = line.strip()
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0].isdigit():  # | clients | generated | wall | aggregate | steady | TTFT mean | TTFT max | failed |
            rounds.setdefault(int(cells[0]), []).append({"aggregate_tok_s": float(cells[3]), "ttft_mean_ms": float(cells[5]),
                                                          "failed": int(cells[7])})
    return rounds, prefill_ms, profile
def f(v, spec): return "-" if v is None else format(v, spec)

results = load_http(f"{out}/http.json")
http = {r["clients"]: r for r in results.get("rounds", [])}
inproc_all, prefill_ms, profile = load_inproc(f"{out}/bench-serve.md")
inproc = {n: rs[0] for n, rs in inproc_all.items()}
print("| clients | HTTP tok/s | in-process tok/s | HTTP / in-process | HTTP TTFT mean ms | HTTP TTFT max ms | HTTP server-side TTFT mean ms | in-process TTFT mean ms | HTTP failed | max client CPU % |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n in sorted(set(http) | set(inproc)):
    h, p = http.get(n, {}), inproc.get(n, {})
    ht, pt = h.get("aggregate_tok_s"), p.get("aggregate_tok_s")
    print(f"| {n} | {f(ht, '.1f')} | {f(pt, '.1f')} | {f(ht / pt if ht and pt else None, '.3f')} | {f(h.get('ttft_mean_ms'), '.2f')} "
          f"| {f(h.get('ttft_max_ms'), '.2f')} | {f(h.get('server_ttft_mean_ms'), '.2f')} | {f(p.get('ttft_mean_ms'), '.2f')} | {f(h.get('failed'), 'd')} | {f(h.get('client_cpu_pct'), '.0f')} |")
for name, rounds in (("HTTP", http), ("in-process", inproc)):
    if 1 in rounds and len(rounds) > 1 and rounds[1]["aggregate_tok_s"]:
        most = max(rounds)
        print(f"{name}: aggregate {most} clients / 1 client = {rounds[most]['aggregate_tok_s'] / rounds[1]['aggregate_tok_s']:.2f}x (target >= 20x)")

# TTFT at 1 client against the Session prefill of the same length (target: within 10%).
print()
print("| prompt tokens | Session prefill ms | HTTP TTFT median ms (lone, client) | / prefill | server-side median ms | / prefill | headers (TTFB) median ms | in-process TTFT median ms | / prefill | gpu-accel run prompt ms (median of 5; tokens) | HTTP TTFT / run |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for p in [main_prompt] + extra:
    h = results if p == main_prompt else load_http(f"{out}/http-{p}.json")
    rounds, pre, prof = (inproc_all, prefill_ms, profile) if p == main_prompt else load_inproc(f"{out}/bench-serve-{p}.md")
    lone, srv, ttfb = h.get("lone_ttft_ms", []), h.get("lone_server_ttft_ms", []), h.get("lone_ttfb_ms", [])
    med = lambda v: statistics.median(v) if v else None
    ratio = lambda v: v / pre if v is not None and pre else None
    inp = med([r["ttft_mean_ms"] for r in rounds.get(1, [])])
    runs = [(int(m.group(1)), float(m.group(2))) for m in
            (re.search(r"prompt: (\d+) tokens in ([0-9.]+) ms", l) for l in open(f"{out}/run-{p}.txt")
             if os.path.exists(f"{out}/run-{p}.txt")) if m] if os.path.exists(f"{out}/run-{p}.txt") else []
    run_ms = med([r[1] for r in runs])
    # run's prompt time per token, scaled to exactly p tokens (its text tokenizes to about p)
    run_at_p = run_ms * p / runs[0][0] if runs else None
    print(f"| {p} | {f(pre, '.3f')} | {f(med(lone), '.3f')} | {f(ratio(med(lone)), '.3f')} | {f(med(srv), '.3f')} "
          f"| {f(ratio(med(srv)), '.3f')} | {f(med(ttfb), '.3f')} | {f(inp, '.3f')} | {f(ratio(inp), '.3f')} "
          f"| {f(run_ms, '.3f')}; {runs[0][0] if runs else '-'} | {f(med(lone) / run_at_p if run_at_p and lone else None, '.3f')} |")
    if prof:
        print(f"  {p} tokens: {prof}")
PYEOF
cat "$OUT/http.md" "$OUT"/bench-serve*.md > "$OUT/all.md"
finish 0
