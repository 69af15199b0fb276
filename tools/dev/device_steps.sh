# Sourced by the device scripts of tools/dev (dec7.sh, turing.sh): a whole device call bounded by LIMIT seconds
# from T0, each step given at most its own share of what is left, and a summary table (S) printed last.
# Why a shared file: every script needs the same time bookkeeping and the same one-line verdict per test step, and
# two copies had already drifted (one appended logs, the other overwrote them).
# Needs: LIMIT, STEPS and OUT set by the caller. Gives: T0, left, has, row, run_step, S, SAN (compute-sanitizer).
T0=$(date +%s)
S=""
SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
left() { echo $((LIMIT - ($(date +%s) - T0))); }  # seconds left of the call
has() { [[ " $STEPS " == *" $1 "* ]]; }           # is the step named in STEPS?
row() { S+="$(printf '%-10s %s' "$1" "$2")"$'\n'; }
# run_step NAME SECONDS LOG CMD...: runs CMD under a timeout of SECONDS (or what is left), appending to $OUT/LOG,
# and adds a row with its exit code and the test / sanitizer verdict lines of the log.
run_step() {
  local name=$1 t=$2 log=$3; shift 3
  local l; l=$(left); [ "$l" -lt "$t" ] && t=$l
  if [ "$t" -lt 8 ]; then row "$name" "NOT RUN (time)"; return; fi
  timeout "$t" "$@" >>"$OUT/$log" 2>&1; local rc=$?
  row "$name" "rc=$rc $(grep -hE '^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$log" | tail -3 | tr '\n' ' ' | cut -c1-150)"
}
