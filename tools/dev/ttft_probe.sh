#!/usr/bin/env bash
# Dev probe of a lone request's TTFT over HTTP on the GPU machine (issue 5), run after serve_http.sh cuda in the
# same call (it reuses that build and model): per-request head / first data / server TTFT at 128 and 512 prompt
# ids (tools/dev/ttft_probe.py), and, where strace exists, a syscall timeline of three 512-id requests (which
# thread waits where between the request's arrival and the first token's write). Output: $OUT/probe.txt.
set -uo pipefail
B=${B:-/tmp/b}
OUT=${OUT:-/tmp/out}
GA=$B/bin/gpu-accel
M=/tmp/llama3-1b-f16.gguf
port=18300
{
  echo "cpu: $(lscpu | grep -E 'Model name' | sed 's/  */ /g'); governor $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo n/a)"
  echo "cpuidle states: $(cat /sys/devices/system/cpu/cpu0/cpuidle/state*/name 2>/dev/null | tr '\n' ' ') latency us: $(cat /sys/devices/system/cpu/cpu0/cpuidle/state*/latency 2>/dev/null | tr '\n' ' ')"
  "$GA" serve -m $M --device cuda --port $port --quiet --max-batch 4 --ctx 640 --kv-blocks 512 > /tmp/probe-server.log 2>&1 &
  server=$!
  for _ in $(seq 200); do curl -sf http://127.0.0.1:$port/health > /dev/null 2>&1 && break; sleep 0.1; done
  python3 tools/dev/ttft_probe.py $port 128 5 > /dev/null  # warm-up
  for p in 128 512 128 512; do python3 tools/dev/ttft_probe.py $port $p 30; done
  if command -v strace > /dev/null; then
    timeout 20 strace -f -tt -e trace=futex,poll,ppoll,select,recvfrom,sendto,write,clock_nanosleep,nanosleep,sched_yield \
      -p $server -o /tmp/strace.txt &
    tracer=$!
    sleep 1
    python3 tools/dev/ttft_probe.py $port 512 3
    sleep 0.5
    kill $tracer 2> /dev/null; wait $tracer 2> /dev/null
    echo "strace: $(wc -l < /tmp/strace.txt) lines; the last request's timeline:"
    last=$(grep -n 'recvfrom(.*POST /v1/completions' /tmp/strace.txt | tail -1 | cut -d: -f1)
    [[ -n $last ]] && tail -n +"$last" /tmp/strace.txt | grep -v -E 'ENOENT' | head -120
  else
    echo "no strace on this machine"
  fi
  kill $server; wait $server 2> /dev/null
} > "$OUT/probe.txt" 2>&1
cat "$OUT/probe.txt" | head -20
