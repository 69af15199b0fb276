# shellcheck shell=bash
# Sourced by the GPU-machine scripts of tools/device.
#
# The GPU machine runs one command at a time, from a copy of the repository, within a time limit per call, and
# brings back only a few files from $OUT. So every script builds what it needs here, bounds each step by what is
# left of the call, prints a summary last and packs its logs into one archive. One copy of that bookkeeping, so
# that the scripts cannot drift apart in how they build, time and report.
#
# Environment: OUT (files that come back; default /tmp/out), LIMIT (seconds the whole call may take; default 570),
#   B (build folder; default /tmp/b: a warm machine keeps it, and later calls rebuild nothing), JOBS (default 16),
#   GA_SHARED (a copy of ../shared: vocabularies for the benchmark models, stories260K for memcheck).
# Gives:
#   device_build TARGET...     configures a Release sm_90a build in $B (tests on, server off; more CMake arguments
#                              in CMAKE_ARGS, nvcc flags in CUDA_FLAGS) and builds TARGETs; log in $OUT/build.log
#   left                       seconds left of LIMIT
#   note TEXT                  a summary line, printed now and again by finish
#   run_step NAME SECS LOG CMD...  CMD under a timeout of SECS (or what is left), output appended to $OUT/LOG, and a
#                              summary line with its exit code and its tests' / sanitizer's verdict lines
#   bench_model PRESET TYPE    prints the path of a random-weight model of a real shape (gpu-accel make-model with
#                              the 32000-token Llama-2 vocabulary; Phi-3's for phi3*; RWKV's own World vocabulary
#                              for rwkv*), made once in /tmp/models;
#                              needs $B/bin/gpu-accel
#   gpu_state                  one line: the GPU, its clocks, temperature and power now
#   finish [RC]                the summary (also $OUT/summary.txt), every other file of $OUT packed into logs.tgz
#   SAN                        compute-sanitizer
OUT=${OUT:-/tmp/out}
LIMIT=${LIMIT:-570}
B=${B:-/tmp/b}
JOBS=${JOBS:-16}
mkdir -p "$OUT"
T0=$(date +%s)
SUMMARY=()
SAN=compute-sanitizer
command -v $SAN > /dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
export PYTHONUNBUFFERED=1

left() { echo $((LIMIT - ($(date +%s) - T0))); }

note() {
  SUMMARY+=("[$(($(date +%s) - T0)) s] $1")
  echo "== $1"
}

gpu_state() {
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,driver_version \
    --format=csv,noheader 2>&1 | head -1
}

device_build() {
  local t0 rc
  t0=$(date +%s)
  # shellcheck disable=SC2086
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
    -DGA_BUILD_TESTS=ON ${GA_SHARED:+-DGA_SHARED_DIR="$GA_SHARED"} -DCMAKE_CUDA_FLAGS="${CUDA_FLAGS:-}" \
    ${CMAKE_ARGS:-} >> "$OUT/build.log" 2>&1 &&
    ninja -C "$B" -j"$JOBS" "$@" >> "$OUT/build.log" 2>&1
  rc=$?
  note "build ($*) rc=$rc in $(($(date +%s) - t0)) s"
  if [[ $rc -ne 0 ]]; then
    grep -E "error|FAILED" -A4 "$OUT/build.log" | head -60
    return 1
  fi
}

run_step() {
  local name=$1 t=$2 log=$3 l rc step_log
  shift 3
  l=$(left)
  ((l < t)) && t=$l
  if ((t < 8)); then
    note "$name: NOT RUN (no time left)"
    return 0
  fi
  step_log=$(mktemp)
  timeout "$t" "$@" > "$step_log" 2>&1
  rc=$?
  { echo "######## $name (rc=$rc): $*"; cat "$step_log"; } >> "$OUT/$log"
  note "$name rc=$rc $(grep -hE '^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY' "$step_log" | tail -3 |
    tr '\n' ' ' | cut -c1-160)"
  rm -f "$step_log"
  return $rc
}

bench_model() {
  local preset=$1 type=$2 f=/tmp/models/$1-$2.gguf vocab=ggml-vocab-llama-spm.gguf
  # Phi-3 files get Phi-3's own vocabulary: llama.cpp gives a model named like Phi-3 the special tokens of
  # that vocabulary (<|endoftext|>, ...) and refuses the file when they are missing.
  [[ $preset == phi3* ]] && vocab=ggml-vocab-phi-3.gguf
  # RWKV files carry the World vocabulary make-model writes for them (a Llama vocabulary would not fit the arch)
  local vocab_args=(--vocab "$GA_SHARED/vocab/$vocab")
  [[ $preset == rwkv* ]] && vocab_args=()
  mkdir -p /tmp/models
  if [[ ! -f $f ]]; then
    "$B/bin/gpu-accel" make-model --preset "$preset" --type "$type" --out "$f.part" \
      "${vocab_args[@]}" --threads "$JOBS" >> "$OUT/make-model.log" 2>&1 &&
      mv "$f.part" "$f" || { note "make-model $preset $type failed"; return 1; }
  fi
  echo "$f"
}

finish() {
  echo
  echo "######## summary"
  printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
  # Only a few files come back from the device: the summary, the tables the script names, one archive of the rest.
  # shellcheck disable=SC2206
  local keep=(summary.txt ${KEEP_FILES:-})
  local excludes=()
  for k in "${keep[@]}"; do excludes+=(--exclude="$k"); done
  tar czf /tmp/device-logs.tgz -C "$OUT" "${excludes[@]}" . 2> /dev/null &&
    for f in "$OUT"/*; do
      [[ " ${keep[*]} " == *" $(basename "$f") "* ]] || rm -rf "$f"
    done && mv /tmp/device-logs.tgz "$OUT/logs.tgz"
  exit "${1:-0}"
}
