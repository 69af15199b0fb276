#!/usr/bin/env bash
# Session 14 probe: is the lone prefill's penalty after an idle pause (Session prefill 1.51 back to back, 1.59 after
# 20 ms asleep; a 300 us busy-wait after the pause does not remove it, a decode step does) the CPU's deep idle state
# (its caches flushed while the core is power-gated)? The same in-process references (`gpu-accel bench-serve`) with
# and without a PM QoS request holding CPU wake-up latency at 0 (/dev/cpu_dma_latency, as tuned's latency-performance
# profile does), plus what the machine's idle driver offers.
set -uo pipefail
OUT=${OUT:-/tmp/out}; B=/tmp/b14; mkdir -p "$OUT"
{
  echo "cpuidle driver: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>&1), governor: $(cat /sys/devices/system/cpu/cpuidle/current_governor_ro /sys/devices/system/cpu/cpuidle/current_governor 2>/dev/null | head -1)"
  for s in /sys/devices/system/cpu/cpu0/cpuidle/state*; do echo "  $(basename $s): $(cat $s/name) latency $(cat $s/latency) us usage $(cat $s/usage)"; done
  echo "cpufreq: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1) $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq 2>&1)"
  ls -l /dev/cpu_dma_latency 2>&1; id -u; grep -m1 "model name" /proc/cpuinfo; grep -c hypervisor /proc/cpuinfo
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF -DGA_BUILD_TESTS=OFF > "$OUT/build.log" 2>&1 &&
  ninja -C $B -j16 gpu-accel >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
M=/tmp/llama3-1b-f16.gguf
$B/bin/gpu-accel make-model --preset llama3-1b --type F16 --out $M --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" > /dev/null 2>&1
ref() { timeout 120 $B/bin/gpu-accel bench-serve -m $M --device cuda --clients 1,1,1,1,1 --prompt-tokens 128 --max-tokens 8 2>/dev/null | grep -iE "reference|TTFT 1 client|idle|prefill" | head -12; }
qos_on() { python3 -c "
import os, struct, time, sys
fd = os.open('/dev/cpu_dma_latency', os.O_WRONLY); os.write(fd, struct.pack('i', int(sys.argv[1]))); time.sleep(600)" "$1" & qos=$!; sleep 0.5; }
for round in 1 2; do
  echo "== round $round: default"; ref
  qos_on 0; echo "== round $round: PM QoS cpu_dma_latency 0"; ref; kill $qos; wait $qos 2>/dev/null
  qos_on 20; echo "== round $round: PM QoS cpu_dma_latency 20 us"; ref; kill $qos; wait $qos 2>/dev/null
done
for s in /sys/devices/system/cpu/cpu0/cpuidle/state*; do echo "  $(basename $s): $(cat $s/name) usage $(cat $s/usage)"; done
