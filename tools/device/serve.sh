#!/usr/bin/env bash
# The serving figures of docs/performance.md over HTTP, in one device run: builds `gpu-accel serve` against a carried
# cpp-httplib, serves a model, drives it with N concurrent streaming clients (bench/serve/bench_http.py),
# then measures the same rounds in process (`gpu-accel bench-serve`) for comparison, and prints a table.
#
# Why it is built this way: the GPU machine (Ubuntu 24.04, no network) has OpenSSL's headers but no
# cpp-httplib, so the server is built against Debian's library carried in a folder (tools/device/pack_httplib.sh
# makes it: httplib.h, libcpp-httplib.so + the brotli libraries it links, a relocatable cpp-httplib.pc
# whose Libs carry an rpath to the folder, and pkgconf for a machine without pkg-config). The in-process
# references run first (per prompt length, `gpu-accel bench-serve`: the Session prefill back to back and after
# 20 ms idle, with variants that say where the idle prefill's extra time is, and 5 lone requests through the
# Scheduler), each process alone on the GPU; then one `gpu-accel serve` per server variant (VARIANTS: A/B of
# serving options on the same build), driven by bench_http.py: the first variant serves the CLIENTS rounds and
# 9 lone requests per length, the others the lone requests only (each read by bench_http.py's blocking and its
# spinning reader); last, `gpu-accel run`'s own prompt time and its first token's time (prefill + first sample). The
# tables give TTFT against both, and the lone requests' way in and out from `serve --trace-timing`.
# Server shape: max running = the largest client count, context = longest prompt + max tokens, 2048 KV blocks
# of 16, 512 tokens per step, CUDA graphs, GPU sampling.
#
# Usage (device; from the worktree copy, .httplib carried beside it):
#   GA_SHARED=... GA_HTTPLIB=... OUT=... bash tools/device/serve.sh cuda
# Local check on the CPU (stories260K, small rounds; reuses a build folder when B names one):
#   B=build-http GA_HTTPLIB=.httplib bash tools/device/serve.sh cpu
# Environment: GA_HTTPLIB (the carried folder; default ../.httplib), B (build folder; default /tmp/b), OUT,
#   CLIENTS / PROMPT / MAXTOK (the rounds), TTFT_PROMPTS (more lone-request lengths; cuda: 512), JOBS (build
#   parallelism), QUICK=1 (fits a 300 s call: no in-process rounds, `run` x3), VARIANTS ("name=serve flags;...",
#   default "default="), TTFT_REPEATS (lone requests per length and variant, default 9), BUDGET (seconds after which
#   the server variants and `run` timings are skipped), GPU_TIMING=1 (cuda: the idle prefill timed on the GPU, with
#   the SM clock: see below), RUN_FLAGS_B (`run` timed once more with these flags, e.g. "--prefill-graphs 0"),
#   HOST_MODEL (a small model: the host assistant's cost to a lone request, idle vs busy; see below).
set -uo pipefail
mode=${1:-cuda}
[[ $mode == cuda || $mode == cpu ]] || { echo "usage: serve.sh [cuda|cpu]" >&2; exit 2; }
root=$(pwd)
H=$(cd "${GA_HTTPLIB:-$root/../.httplib}" 2>/dev/null && pwd) || { echo "no carried cpp-httplib folder (GA_HTTPLIB)" >&2; exit 1; }
[[ $mode == cpu ]] && JOBS=${JOBS:-2}
# shellcheck disable=SC2034  # read by finish (common.sh)
KEEP_FILES="table.md all.md"
source "$root/tools/device/common.sh"
# BUDGET (seconds since the start): later steps are skipped once it is spent, so a device call's time limit
# still leaves the table.
over_budget() { [[ -n ${BUDGET:-} ]] && (( $(date +%s) - T0 > BUDGET )); }

if [[ $mode == cuda ]]; then
  note "gpu: $(gpu_state)"
  CLIENTS=${CLIENTS:-1,16,64}; PROMPT=${PROMPT:-128}; MAXTOK=${MAXTOK:-128}
  # shellcheck disable=SC2034  # read by device_build (common.sh)
  CMAKE_ARGS="-DGA_BUILD_SERVER=ON -DGA_BUILD_TESTS=OFF"
else
  CLIENTS=${CLIENTS:-1,4}; PROMPT=${PROMPT:-32}; MAXTOK=${MAXTOK:-32}
  # shellcheck disable=SC2034  # read by device_build (common.sh)
  CMAKE_ARGS="-DGA_CUDA=OFF -DGA_BUILD_SERVER=ON -DGA_BUILD_TESTS=OFF"
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

device_build gpu-accel || finish 1
grep -E "cpp-httplib|HTTP server" "$OUT/build.log"
GA="$B/bin/gpu-accel"
note "gpu-accel links: $(ldd "$GA" | grep -E 'httplib|brotli|libssl' | awk '{print $1 " -> " $3}' | tr '\n' ' ')"

if [[ $mode == cuda ]]; then
  M=/tmp/llama3-1b-f16.gguf
  "$GA" make-model --preset llama3-1b --type F16 --out $M --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" \
    > "$OUT/make-model.log" 2>&1
  note "make-model llama3-1b F16 rc=$?"
  device=cuda
else
  M=$root/models/stories260K.gguf
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
# QUICK=1 (fits a 300 s device call): no 16-client round unless CLIENTS names it, no in-process rounds
# (bench-serve only for the references and 5 lone requests per length), `gpu-accel run` 3 times per length.
QUICK=${QUICK:-0}
RUNS=$([[ $QUICK == 1 ]] && echo 3 || echo 5)
# Server variants, "name=extra serve flags" separated by ';': the first serves the CLIENTS rounds and the lone
# requests, the others only the lone requests (A/B of serving options on the same build, one server each).
VARIANTS=${VARIANTS:-default=}
TTFT_REPEATS=${TTFT_REPEATS:-9}

# The GPU's clocks while the in-process references run (sleeps of 20 ms between prefills): does an idle GPU
# lower its clocks? nvidia-smi samples every 100 ms in the background.
smi_start() {
  [[ $mode == cuda ]] || return 0
  nvidia-smi --query-gpu=timestamp,pstate,clocks.sm,clocks.mem,power.draw --format=csv,noheader -lms 100 \
    > "$OUT/smi-$1.csv" 2>&1 &
  smi_pid=$!
}
smi_stop() {
  [[ $mode == cuda ]] || return 0
  kill "$smi_pid" 2> /dev/null; wait "$smi_pid" 2> /dev/null
  note "GPU clocks during $1 (nvidia-smi every 100 ms; pstate, SM MHz: count): $(awk -F', ' '{print $2 " " $3}' \
    "$OUT/smi-$1.csv" | sort | uniq -c | sort -rn | head -6 | awk '{printf "%s %s %s: %s; ", $2, $3, $4, $1}')"
}

# In process: per length, the Session references (back to back, after 20 ms idle and its variants) and 5 lone
# requests through the Scheduler; unless QUICK, the CLIENTS rounds too (with --profile-steps on a GPU).
smi_start idle-session
if [[ $QUICK != 1 ]]; then
  echo "\$ gpu-accel bench-serve -m $(basename "$M") --device $device --clients $CLIENTS --prompt-tokens $PROMPT --max-tokens $MAXTOK ${profile[*]}" \
    > "$OUT/bench-serve.md"
  timeout 200 "$GA" bench-serve -m "$M" --device $device --clients "$CLIENTS" --prompt-tokens "$PROMPT" \
    --max-tokens "$MAXTOK" "${profile[@]}" >> "$OUT/bench-serve.md" 2>> "$OUT/bench-serve.err"
  note "bench-serve rc=$?"
fi
for p in $PROMPT $TTFT_PROMPTS; do
  echo "\$ gpu-accel bench-serve --clients 1,1,1,1,1 --prompt-tokens $p --max-tokens 8" > "$OUT/bench-serve-$p.md"
  timeout 120 "$GA" bench-serve -m "$M" --device $device --clients 1,1,1,1,1 --prompt-tokens "$p" --max-tokens 8 \
    >> "$OUT/bench-serve-$p.md" 2>> "$OUT/bench-serve.err"
  note "bench-serve references + 5 lone requests at $p prompt tokens rc=$?"
done
smi_stop idle-session
# GPU_TIMING=1 (cuda): the Session references once more at PROMPT tokens with GA_PREFILL_GPU_TIMING=1: each prefill
# graph replay timed on the GPU (events around it) and on the host, per phase (back to back, after 20 ms asleep, ...),
# and the SM clock (NVML) after each idle pause and after the prefill that follows it. Says whether the idle
# prefill's extra time is the GPU's own (it grows with the GPU time) or the host's way to it (it does not).
if [[ $mode == cuda && ${GPU_TIMING:-0} == 1 ]]; then
  GA_PREFILL_GPU_TIMING=1 timeout 120 "$GA" bench-serve -m "$M" --device $device --clients 1 --prompt-tokens "$PROMPT" \
    --max-tokens 8 > "$OUT/gpu-timing.md" 2> "$OUT/gpu-timing.err"
  note "bench-serve with GA_PREFILL_GPU_TIMING=1 at $PROMPT tokens rc=$?"
  while IFS= read -r line; do note "$line"; done < <(python3 - "$OUT/gpu-timing.err" <<'PYEOF'
import re, statistics, sys
phase, rows, clocks = "start", {}, []
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("reference phase: "):
        phase = line[len("reference phase: "):].strip()
    m = re.search(r"gpu ([0-9.]+) ms, launch call ([0-9.]+) ms, launch to done ([0-9.]+) ms", line)
    if m:
        rows.setdefault(phase, []).append([float(x) for x in m.groups()])
    m = re.search(r"idle SM clock (-?\d+) MHz, prefill ([0-9.]+) ms, SM clock after it (-?\d+) MHz", line)
    if m:
        clocks.append(m.groups())
for name, r in rows.items():
    med = [statistics.median(c[k] for c in r) for k in range(3)]
    print(f"gpu timing [{name}] n={len(r)}: GPU {med[0]:.4f} ms, launch call {med[1]*1e3:.1f} us, launch -> done "
          f"{med[2]:.4f} ms (GPU all: {' '.join(f'{c[0]:.3f}' for c in r[:12])})")
if clocks:
    print("idle SM clock / prefill ms / SM clock after: " + "; ".join(f"{a} / {b} / {c}" for a, b, c in clocks))
PYEOF
)
fi

# start_server NAME COMMAND...: runs a server command (its stderr in server-NAME.log) and waits for its address;
# sets server (the pid) and url (empty when it did not start, with a note).
start_server() {
  local name=$1
  shift
  "$@" > /dev/null 2> "$OUT/server-$name.log" &
  server=$!
  url=
  for _ in $(seq 1200); do
    url=$(grep -oE "listening on http://[^ ]+" "$OUT/server-$name.log" | head -1 | awk '{print $3}')
    [[ -n $url ]] && break
    kill -0 $server 2> /dev/null || break
    sleep 0.1
  done
  if [[ -z $url ]]; then
    note "server $name did not start: $(tail -3 "$OUT/server-$name.log" | tr '\n' ' ')"
    kill $server 2> /dev/null; wait $server 2> /dev/null
  fi
}

# HTTP: one server per variant, on the device alone (bench-serve has exited); bench_http.py drives it.
IFS=';' read -ra variant_list <<< "$VARIANTS"
first=1
for v in "${variant_list[@]}"; do
  name=${v%%=*}
  extra=${v#*=}
  if over_budget; then note "server variant $name skipped: BUDGET spent"; continue; fi
  # Words of the form NAME=VALUE in a variant go into the server's environment (diagnostic switches such as
  # GA_CUDA_SCHEDULE=spin), the rest are serve flags.
  env_words=(); flag_words=()
  for w in $extra; do
    if [[ $w =~ ^[A-Z_][A-Z0-9_]*= ]]; then env_words+=("$w"); else flag_words+=("$w"); fi
  done
  start_server "$name" env "${env_words[@]}" "$GA" serve -m "$M" --device $device --port 0 --quiet \
    --max-batch "$max_clients" --ctx "$ctx" --kv-blocks 2048 --http-threads $(( max_clients + 16 )) --trace-timing \
    "${flag_words[@]}"
  [[ -n $url ]] || continue
  echo "\$ gpu-accel serve -m $(basename "$M") --device $device --max-batch $max_clients --ctx $ctx --kv-blocks 2048 $extra  [variant $name]" >> "$OUT/http.md"
  for p in $PROMPT $TTFT_PROMPTS; do
    if [[ $first == 1 && $p == "$PROMPT" ]]; then
      rounds=$CLIENTS; tokens=$MAXTOK
    else
      rounds=0; tokens=8
    fi
    timeout 150 python3 bench/serve/bench_http.py --url "$url" --timeout 60 --clients "$rounds" --prompt-tokens "$p" \
      --max-tokens "$tokens" --ttft-repeats "$TTFT_REPEATS" --json "$OUT/http-$name-$p.json" --check \
      >> "$OUT/http.md" 2>> "$OUT/http.err"
    note "bench_http.py variant $name, rounds $rounds, lone requests at $p prompt tokens rc=$?"
  done
  # The server's CPU use while idle (no request for 2 s): busy-waits must end with the requests.
  ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
  t0=$(ticks); sleep 2; t1=$(ticks)
  note "server variant $name idle CPU over 2 s: $(awk -v d=$(( t1 - t0 )) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", 100 * d / hz / 2 }')% of one core"
  kill -TERM $server 2> /dev/null; wait $server 2> /dev/null
  first=0
done

# HOST_MODEL (a small model's path): what the host assistant costs a lone request. One server with --host-model (the
# host on the CPU, its default), lone requests with the host idle, then kept busy by /v1/host/ask questions
# (bench_http.py --host-busy): the bar is a busy host's TTFT <= 1.05x the idle host's.
if [[ -n ${HOST_MODEL:-} ]] && ! over_budget; then
  start_server host "$GA" serve -m "$M" --device $device --port 0 --quiet --ctx "$ctx" --kv-blocks 2048 \
    --host-model "$HOST_MODEL"
  if [[ -n $url ]]; then
    for mode in idle busy; do
      busy_flag=(); [[ $mode == busy ]] && busy_flag=(--host-busy)
      timeout 150 python3 bench/serve/bench_http.py --url "$url" --timeout 60 --clients 0 --prompt-tokens "$PROMPT" \
        --max-tokens 8 --ttft-repeats "$TTFT_REPEATS" "${busy_flag[@]}" --json "$OUT/http-host-$mode.json" --check \
        >> "$OUT/http.md" 2>> "$OUT/http.err"
      note "bench_http.py with the host $mode, lone requests at $PROMPT prompt tokens rc=$?"
    done
    kill -TERM $server 2> /dev/null; wait $server 2> /dev/null
    note "host assistant: $(python3 -c '
import json, statistics, sys
m = [statistics.median(json.load(open(f))["lone_ttft_ms"]) for f in sys.argv[1:]]
print(f"lone TTFT median idle {m[0]:.3f} ms, busy {m[1]:.3f} ms, busy / idle {m[1] / m[0]:.3f}")
' "$OUT/http-host-idle.json" "$OUT/http-host-busy.json" 2>&1)"
  fi
fi

# The reference the TTFT is held to: `gpu-accel run`'s own "prompt: N tokens in X ms" (one prefill per process, after
# the upload), RUNS processes per length, with a text of exactly the same number of tokens: the model's vocabulary is
# the real Llama SPM one, where "the" after a space is one token, so p - 1 of them and the BOS make p (the table
# checks the count `run` prints; the prefill's time does not depend on which ids they are).
for p in $PROMPT $TTFT_PROMPTS; do
  if over_budget; then note "gpu-accel run at $p tokens skipped: BUDGET spent"; continue; fi
  text=$(python3 -c "import sys; print(' '.join(['the'] * max(1, int(sys.argv[1]) - 1)))" "$p")
  : > "$OUT/run-$p.txt"
  for _ in $(seq "$RUNS"); do
    # The prompt time (the forward) and the first token's time (the forward and the first token's sampling: what
    # a server's TTFT covers before HTTP), one line per process.
    timeout 60 "$GA" run -m "$M" --device $device -p "$text" -n 1 --temp 0 2>&1 |
      grep -oE "prompt: [0-9]+ tokens in [0-9.]+ ms|first token: [0-9.]+ ms" | paste -sd' ' >> "$OUT/run-$p.txt"
  done
  note "gpu-accel run x$RUNS at ~$p tokens: $(tr '\n' ' ' < "$OUT/run-$p.txt")"
  cold=$(timeout 60 "$GA" run -m "$M" --device $device -p "$text" -n 1 --temp 0 --no-warmup 2>&1 |
    grep -oE "prompt: [0-9]+ tokens in [0-9.]+ ms")
  note "gpu-accel run --no-warmup at ~$p tokens (the cold first prefill): $cold"
  # RUN_FLAGS_B (e.g. "--prefill-graphs 0"): the same reference once more with other run flags, for comparison.
  if [[ -n ${RUN_FLAGS_B:-} ]]; then
    : > "$OUT/run-b-$p.txt"
    for _ in $(seq "$RUNS"); do
      # shellcheck disable=SC2086
      timeout 60 "$GA" run -m "$M" --device $device -p "$text" -n 1 --temp 0 $RUN_FLAGS_B 2>&1 |
        grep -oE "prompt: [0-9]+ tokens in [0-9.]+ ms" >> "$OUT/run-b-$p.txt"
    done
    note "gpu-accel run $RUN_FLAGS_B x$RUNS at ~$p tokens: $(tr '\n' ' ' < "$OUT/run-b-$p.txt")"
  fi
done

python3 - "$OUT" "$PROMPT" "$VARIANTS" $TTFT_PROMPTS > "$OUT/table.md" <<'PYEOF'
import json, os, re, statistics, sys
out, main_prompt, variants = sys.argv[1], int(sys.argv[2]), [v.split("=", 1)[0] for v in sys.argv[3].split(";") if v]
prompts = [main_prompt] + [int(p) for p in sys.argv[4:]]
def load_json(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return {}
def num(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None
def load_inproc(path):
    """bench-serve's output: rounds by client count, the Session references."""
    rounds, ref = {}, {}
    if not os.path.exists(path):
        return rounds, ref
    text = open(path).read()
    ref["prefill"] = num(r"reference Session .*\): prefill ([0-9.]+) ms", text)
    ref["idle"] = num(r"prefill after \d+ ms idle: ([0-9.]+) ms", text)
    ref["idle_spinning"] = num(r"busy-waiting through the gap \(GPU idle\) ([0-9.]+) ms", text)
    ref["idle_then_spin"] = num(r"us busy ([0-9.]+) ms", text)
    ref["idle_then_step"] = num(r"then one decode step ([0-9.]+) ms", text)
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0].isdigit():  # | clients | generated | wall | aggregate | steady | TTFT mean | TTFT max | failed |
            rounds.setdefault(int(cells[0]), []).append({"aggregate_tok_s": float(cells[3]), "ttft_mean_ms": float(cells[5]),
                                                          "failed": int(cells[7])})
    return rounds, ref
def f(v, spec): return "-" if v is None else format(v, spec)
med = lambda v: statistics.median(v) if v else None

# Throughput rounds (the first variant's server; in process too unless QUICK).
results = load_json(f"{out}/http-{variants[0]}-{main_prompt}.json")
http = {r["clients"]: r for r in results.get("rounds", [])}
inproc_all, _ = load_inproc(f"{out}/bench-serve.md")
inproc = {n: rs[0] for n, rs in inproc_all.items()}
if http:
    print(f"Rounds over HTTP (server variant '{variants[0]}'), {main_prompt} prompt tokens:")
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
    print()

# Session prefill references: back to back (strict) and after 20 ms idle with its variants; `gpu-accel run`'s own.
print("| prompt tokens | Session prefill ms (back to back) | after 20 ms idle | idle, thread busy-waiting | idle, then 300 us busy | idle, then 1 decode step | in-process TTFT median of 5 | gpu-accel run prompt ms (median; tokens) | gpu-accel run first token ms (prefill + first sample, median) |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
refs, runs = {}, {}
for p in prompts:
    rounds, ref = load_inproc(f"{out}/bench-serve-{p}.md")
    refs[p] = ref
    lines = open(f"{out}/run-{p}.txt").read().splitlines() if os.path.exists(f"{out}/run-{p}.txt") else []
    rs = [(int(m.group(1)), float(m.group(2))) for m in (re.search(r"prompt: (\d+) tokens in ([0-9.]+) ms", l) for l in lines) if m]
    firsts = [float(m.group(1)) for m in (re.search(r"first token: ([0-9.]+) ms", l) for l in lines) if m]
    runs[p] = (med([r[1] for r in rs]), rs[0][0] if rs else None, med(firsts))
    inp = med([r["ttft_mean_ms"] for r in rounds.get(1, [])])
    print(f"| {p} | {f(ref.get('prefill'), '.3f')} | {f(ref.get('idle'), '.3f')} | {f(ref.get('idle_spinning'), '.3f')} "
          f"| {f(ref.get('idle_then_spin'), '.3f')} | {f(ref.get('idle_then_step'), '.3f')} | {f(inp, '.3f')} "
          f"| {f(runs[p][0], '.3f')}; {f(runs[p][1], 'd')} | {f(runs[p][2], '.3f')} |")
print()

# Lone requests over HTTP, per server variant (median of TTFT_REPEATS): TTFT at the client against the references;
# "spinning reader": the same requests read by a client that polls its socket (no client wake-up; bench_http.py).
print("| prompt tokens | server variant | HTTP TTFT median ms (client) | / Session prefill | / run's prompt time (same length; scaled linearly if run's count differs) | / run's first token | spinning reader TTFT median ms | / run's prompt time | / run's first token | server-side median ms | / prefill | headers (TTFB) median ms | HTTP TTFT min ms | HTTP round trip (GET /health) median ms | TTFT - round trip, / run |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for p in prompts:
    pre = refs[p].get("prefill")
    run_ms, run_tokens, run_first = runs[p]
    run_at_p = run_ms * p / run_tokens if run_ms and run_tokens else None
    first_at_p = run_first * p / run_tokens if run_first and run_tokens else None
    for v in variants:
        h = load_json(f"{out}/http-{v}-{p}.json")
        lone, srv, ttfb = h.get("lone_ttft_ms", []), h.get("lone_server_ttft_ms", []), h.get("lone_ttfb_ms", [])
        spin = h.get("lone_spin_ttft_ms", [])
        ratio = lambda x, ref: x / ref if x is not None and ref else None
        rtt = h.get("http_round_trip_ms", [])
        beyond = med(lone) - med(rtt) if lone and rtt else None
        print(f"| {p} | {v} | {f(med(lone), '.3f')} | {f(ratio(med(lone), pre), '.3f')} | {f(ratio(med(lone), run_at_p), '.3f')} "
              f"| {f(ratio(med(lone), first_at_p), '.3f')} | {f(med(spin), '.3f')} | {f(ratio(med(spin), run_at_p), '.3f')} "
              f"| {f(ratio(med(spin), first_at_p), '.3f')} | {f(med(srv), '.3f')} | {f(ratio(med(srv), pre), '.3f')} | {f(med(ttfb), '.3f')} | {f(min(lone) if lone else None, '.3f')} "
              f"| {f(med(rtt), '.3f')} | {f(ratio(beyond, run_at_p), '.3f')} |")
print()

# Where a lone request's time goes: the client's send and first-data times (CLOCK_MONOTONIC) matched with the
# server's `--trace-timing` line of the same request (its head time lies between them). Medians, ms; per reader.
# The way in split further (the trace's later fields): send -> the connection found readable (the worker's wait:
# busy-waiting or woken from poll), -> head parsed (httplib), -> route entered (pre-routing incl. the scheduler's
# wake-up hint, httplib's routing), -> body read, -> JSON parsed and checked, -> submit.
# The way out split: first token -> taken from the channel by the stream's thread, -> its SSE chunk built, -> written.
print("| prompt tokens | server variant | reader | matched | send -> head parsed (socket, wake-up, httplib) | head -> submit (body, JSON, checks) | submit -> first token (scheduler, prefill) | first token -> written (hand-off, SSE) | written -> client has it (client wake-up, read) | client TTFT | send -> readable | readable -> head | head -> routed | routed -> body read | body -> parsed | parsed -> submit | first token -> taken | taken -> built | built -> written | readable -> first bytes seen | the scheduler's hint (expect_request) | hint -> head parsed |")
print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
lone_traces = {}  # (prompt, variant): the matched trace lines of lone requests (both readers)
trace = re.compile(r"timing \S+: head ([0-9.]+) submit ([0-9.]+) first_token ([0-9.]+) written ([0-9.]+)"
                   r"(?: readable ([0-9.]+) routed ([0-9.]+) body ([0-9.]+) parsed ([0-9.]+)"
                   r" taken ([0-9.]+) built ([0-9.]+))?(?: arrived ([0-9.]+) hinted ([0-9.]+))?")
for p in prompts:
    for v in variants:
        lines = open(f"{out}/server-{v}.log", errors="replace").read() if os.path.exists(f"{out}/server-{v}.log") else ""
        traces = [tuple(float(x) if x else None for x in m.groups()) for m in trace.finditer(lines)]
        for reader, key in (("blocking", "lone_request_times"), ("spinning", "lone_spin_request_times")):
            rows = []
            for t in load_json(f"{out}/http-{v}-{p}.json").get(key, []):
                sent, arrived = t["sent_s"], t["sent_s"] + t["ttft_ms"] / 1e3
                hits = [tr for tr in traces if sent <= tr[0] <= arrived]
                if len(hits) == 1:
                    lone_traces.setdefault((p, v), []).append(hits[0])
                    head, submit, first, written, readable, routed, body, parsed, taken, built, bytes_at, hinted = hits[0]
                    row = [head - sent, submit - head, first - submit, written - first, arrived - written, arrived - sent]
                    if readable and readable >= sent:  # 0: the request's bytes were there before any wait
                        row += [readable - sent, head - readable, routed - head, body - routed, parsed - body, submit - parsed,
                                taken - first, built - taken, written - built]
                        if bytes_at and hinted and bytes_at >= readable:  # the first bytes' hook (the scheduler's hint)
                            row += [bytes_at - readable, hinted - bytes_at, head - hinted]
                    rows.append(row)
            cols = [med([r[k] * 1e3 for r in rows if len(r) > k]) for k in range(18)] if rows else [None] * 18
            print(f"| {p} | {v} | {reader} | {len(rows)} | " + " | ".join(f(c, '.3f') for c in cols) + " |")

# submit -> first token split by the scheduler's own times (servers started with GA_SCHEDULER_TRACE=1): -> the
# scheduler thread's wake-up (the loop's), -> its forward's start (admission, the step's batch), -> the forward's
# end (metadata copy, prefill graph, logits copy, sync), -> first token (sampling, the callback). Medians, ms.
# The line also has "chosen T device D": the tokens chosen (before emission) and whether the step
# sampled on the device (then the forward returns with the step still queued: its end is the launch's end).
sched = re.compile(r"scheduler lone prefill: tokens (\d+) woken ([0-9.]+) forward ([0-9.]+) forward_done ([0-9.]+) sampled ([0-9.]+)(?: chosen ([0-9.]+) device (\d))?")
rows_out = []
for p in prompts:
    for v in variants:
        lines = open(f"{out}/server-{v}.log", errors="replace").read() if os.path.exists(f"{out}/server-{v}.log") else ""
        steps = [tuple(float(x) if x is not None else 0.0 for x in m.groups()[1:]) for m in sched.finditer(lines)
                 if int(m.group(1)) == p]
        if not steps:
            continue
        parts = []
        for tr in lone_traces.get((p, v), []):
            submit, first = tr[1], tr[2]
            hits = [st for st in steps if submit - 0.0005 <= st[1] <= first]
            if len(hits) == 1:
                woken, start, done, sampled, chosen, device = hits[0]
                chosen = chosen if chosen > 0 else done
                parts.append([woken - submit, start - woken, done - start, chosen - done, first - chosen, first - submit,
                              device])
        if parts:
            cols = [med([x[k] * 1e3 for x in parts]) for k in range(6)] + [med([x[6] for x in parts])]
            allf = " ".join(f"{x[2] * 1e3:.3f}" for x in parts[:20])
            rows_out.append(f"| {p} | {v} | {len(parts)} | " + " | ".join(f(c, '.3f') for c in cols) + f" | {allf} |")
if rows_out:
    print()
    print("| prompt tokens | server variant | matched | submit -> scheduler woken | woken -> forward start | forward call (host rows: copy in, graph, logits out, sync; device: copy in, launch) | forward call end -> token chosen (host sampling, or the GPU's step + sampling) | chosen -> first token (emission, callback) | submit -> first token | sampled on device | forward ms, each |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows_out))
PYEOF
cat "$OUT/http.md" "$OUT"/bench-serve*.md > "$OUT/all.md" 2> /dev/null
cat "$OUT/table.md"
finish 0
