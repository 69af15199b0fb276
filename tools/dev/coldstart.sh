#!/usr/bin/env bash
# Device run of "the first prefill of a new length" (docs/results/2026-11-22-h200-serving.md, section
# "First prefill of a new length"): builds gpu-accel, the GEMM test and the GEMM first-call bench, runs the
# CUDA tests, then measures
#   1. the GEMM alone (bench_gemm_first_call): first call vs warm per (shape, n), GemmEx vs the bucketed
#      cuBLASLt path, lazy vs eager module loading, and the warm speed of both paths over many n;
#   2. `gpu-accel run` at several prompt lengths, one process each (so each length is the first after
#      start-up): its reported prompt time vs the same prompt's prefill repeated (--time-prompt-again),
#      and its start-up (session + warm-up) time; "old" = GA_GEMM=gemmex GA_WARMUP=prefill512 (the tree
#      before this change), "new" = the defaults;
#   3. gpu-accel bench pp512/tg128 with the copy / GEMM ceilings, old GEMM path vs new.
# Usage on the device: GA_SHARED=... OUT=... tools/dev/coldstart.sh (two runs on 2026-11-22: ~60-70 s each)
set -uo pipefail
B=/tmp/b-coldstart
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/models
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
summary=()
note() { summary+=("$1"); echo "== [$(el) s] $1"; }
finish() {
  echo; echo "######## summary"; printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
  [[ -f "$OUT/table.md" ]] && cat "$OUT/table.md"
  # At most 8 files come back from the device: the summary, the table and one archive of every log.
  tar czf /tmp/coldstart-logs.tgz -C "$OUT" --exclude=summary.txt --exclude=table.md . &&
    find "$OUT" -mindepth 1 ! -name summary.txt ! -name table.md -delete && mv /tmp/coldstart-logs.tgz "$OUT/logs.tgz"
  exit "${1:-0}"
}

note "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader 2>&1)"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$OUT/build.log" 2>&1
ninja -C $B -j16 gpu-accel >> "$OUT/build.log" 2>&1
rc=$?
note "build gpu-accel rc=$rc"
[[ $rc -eq 0 ]] || { grep -E "error|FAILED" -A4 "$OUT/build.log" | head -60; finish 1; }
G=$B/bin/gpu-accel
M1=/tmp/models/llama3-1b-f16.gguf
M7=/tmp/models/llama2-7b-q4_0.gguf
VOC=$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf
# the models are made while the tests build and run (CPU work; the tests are correctness only)
( $G make-model --preset llama3-1b --type f16 --out $M1 --vocab $VOC --threads 8 > "$OUT/make.log" 2>&1
  echo "make 1B F16 rc=$? at $(el) s" >> "$OUT/make.log"
  $G make-model --preset llama2-7b --type q4_0 --out $M7 --vocab $VOC --threads 8 >> "$OUT/make.log" 2>&1;
  echo "make 7B Q4_0 rc=$? at $(el) s" >> "$OUT/make.log" ) &
MAKE=$!
ninja -C $B -j16 test_cuda_gemm test_cuda_forward test_cuda_batch_forward test_cuda_scheduler \
  ga_bench_gemm_first_call >> "$OUT/build.log" 2>&1
rc=$?
note "build tests rc=$rc"
[[ $rc -eq 0 ]] || { grep -E "error|FAILED" -A4 "$OUT/build.log" | head -60; }

for t in test_cuda_gemm test_cuda_forward test_cuda_batch_forward test_cuda_scheduler; do
  timeout 90 $B/bin/$t --gtest_brief=1 > /tmp/$t.log 2>&1
  rc=$?
  { echo "######## $t rc=$rc"; cat /tmp/$t.log; } >> "$OUT/tests.log"
  note "$t rc=$rc: $(grep -cE '^\[  FAILED' /tmp/$t.log) failed; $(grep -E '^\[  PASSED|SKIPPED' /tmp/$t.log | head -1)"
done
grep -h "heuristic queries" /tmp/test_cuda_gemm.log | head -2
wait $MAKE
note "models: $(grep -h '^make' $OUT/make.log | tr '\n' ' ')"

# ---- 1. the GEMM alone ----
GB=$B/bin/ga_bench_gemm_first_call
SW=9,13,16,17,20,21,24,25,32,33,40,41,48,57,64,65,72,80,81,96,97,99,112,113,128,129,144,160,161,192,193,224,225,256,257,288,320,321,384,385,407,448,449,480,512
SW7=9,17,33,65,81,99,113,129,161,200,257,321,407,449,512
{
  echo '```'
  echo "\$ ga_bench_gemm_first_call (GA_GEMM=gemmex: cublasGemmEx; default: bucketed cuBLASLt, heuristic at the bound;"
  echo "   GA_GEMM_BUCKET_REP=lower: at the bucket's smallest n); --first 99,129,407,1000,2000,13 runs first (default)"
  GA_GEMM=gemmex timeout 30 $GB --sweep $SW
  timeout 30 $GB --prewarm --sweep $SW
  GA_GEMM_BUCKET_REP=lower timeout 30 $GB --prewarm --sweep $SW
  GA_GEMM=gemmex timeout 30 $GB --shapes 7b --sweep $SW7
  timeout 30 $GB --shapes 7b --prewarm --sweep $SW7
  GA_GEMM_BUCKET_REP=lower timeout 30 $GB --shapes 7b --prewarm --sweep $SW7
  echo '```'
} > "$OUT/gemm.md" 2>&1
# warm layer GEMM time per n of each bucketed configuration / GemmEx's (1B and 7B shapes)
python3 - "$OUT/gemm.md" > "$OUT/gemm_ratio.md" <<'PY'
import sys, re
blocks = []  # (config, {name: values}) in file order; each "SWEEP cfg n:" line starts one
for line in open(sys.argv[1]):
    m = re.match(r"SWEEP (\S+) (\S+):(.*)", line)
    if not m: continue
    if m.group(2) == "n": blocks.append((m.group(1), {}))
    blocks[-1][1][m.group(2)] = m.group(3).split()
ex = None
for cfg, d in blocks:
    if cfg.startswith("gemmex"):
        ex = d
        continue
    if ex is None or ex["n"] != d["n"]: continue
    ns = d["n"]
    for key in [k for k in d if k != "n"]:
        r = [float(b) / float(a) for a, b in zip(ex[key], d[key])]
        w = max(range(len(r)), key=lambda i: r[i])
        print(f"| {cfg} / gemmex | {key} | mean {sum(r)/len(r):.3f} | max {r[w]:.3f} at n={ns[w]} | min {min(r):.3f} |")
    print(f"| {cfg} / gemmex layer by n | " + " ".join(f"{n}:{float(b)/float(a):.2f}" for n, a, b in zip(ns, ex["layer_ms"], d["layer_ms"])) + " |")
PY
note "gemm bench done"

# ---- 2. gpu-accel run, one process per prompt length ----
words() { python3 -c "import sys; print(' '.join(['the'] * (int(sys.argv[1]) - 1)))" "$1"; }
echo "| model | config | prompt tokens | start-up: session ms | warm-up ms | first prompt ms | again (median of 5) ms | first / again |" > "$OUT/runs.md"
echo "|---|---|---:|---:|---:|---:|---:|---:|" >> "$OUT/runs.md"
run_one() {  # model-label model config-label env... -- length
  local label=$1 model=$2 cfg=$3 len=$4; shift 4
  local log=/tmp/run_${label}_${cfg}_${len}.log
  env "$@" timeout 60 $G run -m $model --device cuda -p "$(words $len)" -n 4 --temp 0 --ignore-eos -c 4096 \
    --time-prompt-again 5 > /dev/null 2> $log
  local rc=$?
  echo "######## $label $cfg $len rc=$rc ($*)" >> "$OUT/run.log"; cat $log >> "$OUT/run.log"
  local su wu first again ratio n
  su=$(sed -n 's/^start-up: session \([0-9.]*\) ms.*/\1/p' $log)
  wu=$(sed -n 's/^start-up: .*warm-up \([0-9.]*\) ms.*/\1/p' $log)
  n=$(sed -n 's/^prompt: \([0-9]*\) tokens in \([0-9.]*\) ms.*/\1/p' $log)
  first=$(sed -n 's/^prompt: \([0-9]*\) tokens in \([0-9.]*\) ms.*/\2/p' $log)
  again=$(sed -n 's/^prompt again: .* in \([0-9.]*\) ms.*/\1/p' $log)
  ratio=$(sed -n 's/^prompt again: .*first \/ again = \([0-9.]*\).*/\1/p' $log)
  echo "| $label | $cfg | ${n:-rc$rc} | $su | $wu | $first | $again | $ratio |" >> "$OUT/runs.md"
}
for len in 1 7 9 13 50 99 129 200 257 300 407 512 1000 2000; do run_one 1B-F16 $M1 new $len; done
for len in 99 407; do run_one 1B-F16 $M1 old $len GA_GEMM=gemmex GA_WARMUP=prefill512; done
for len in 99 129 257 407; do run_one 1B-F16 $M1 lower $len GA_GEMM_BUCKET_REP=lower; done
note "1B runs done"

# ---- 3. bench pp512/tg128, old GEMM path vs new ----
{
  echo '```'
  echo "\$ GA_GEMM=gemmex gpu-accel bench -m llama3-1b-f16.gguf -p 512 -n 128 -r 3 --device cuda"
  GA_GEMM=gemmex timeout 60 $G bench -m $M1 -p 512 -n 128 -r 3 --device cuda 2>&1 | grep -v "^\[" 
  echo "\$ gpu-accel bench -m llama3-1b-f16.gguf -p 512 -n 128 -r 3 --device cuda"
  timeout 60 $G bench -m $M1 -p 512 -n 128 -r 3 --device cuda 2>&1 | grep -v "^\["
  echo '```'
} > "$OUT/bench.md"
note "1B bench done"

if [[ -f $M7 && $(el) -lt 140 ]]; then
  for len in 99 300 407 1000; do run_one 7B-Q4_0 $M7 new $len; done
  for len in 99 407; do run_one 7B-Q4_0 $M7 old $len GA_GEMM=gemmex GA_WARMUP=prefill512; done
  note "7B runs done"
fi
if [[ $(el) -lt 165 ]]; then  # issue 5: TTFT at 1 client vs the Session prefill (both after the warm-up)
  for pt in 128 512; do
    echo "\$ gpu-accel bench-serve -m llama3-1b-f16.gguf --device cuda --clients 1,1,1 --prompt-tokens $pt --max-tokens 16" >> "$OUT/bench.md"
    timeout 30 $G bench-serve -m $M1 --device cuda --clients 1,1,1 --prompt-tokens $pt --max-tokens 16 >> "$OUT/bench.md" 2>> "$OUT/bench.err"
    note "bench-serve $pt rc=$?"
  done
fi
if [[ -f $M7 && $(el) -lt 170 ]]; then
  {
    echo '```'
    for cfg in gemmex new; do
      echo "\$ GA_GEMM=$cfg gpu-accel bench -m llama2-7b-q4_0.gguf -p 512 -n 128 -r 2 --device cuda"
      GA_GEMM=$cfg timeout 30 $G bench -m $M7 -p 512 -n 128 -r 2 --device cuda 2>&1 | grep -v "^\["
    done
    echo '```'
  } >> "$OUT/bench.md"
  note "7B bench done"
fi
{ printf '%s\n' "${summary[@]}" | grep "^test_"; cat "$OUT/runs.md"; grep -h "config .*first GEMM\|prewarm .*calls\|all 4\|heuristic queries" "$OUT/gemm.md"; cat "$OUT/gemm_ratio.md";
  grep -h "pp512 \|tg128 \|TTFT\|reference Session" "$OUT/bench.md"; } > "$OUT/table.md"
finish 0
