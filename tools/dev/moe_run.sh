#!/usr/bin/env bash
# Device run of the MoE kernels (kernels/moe.h, moe_prefill.h): builds the MoE tests and benchmark for sm_90a,
# runs the CPU and CUDA MoE tests, the MoE benchmark, the families' GPU forward (the CUDA engine's MoE op on
# these kernels; built in the background meanwhile), the memory checker on the small MoE tests and the GEMV
# parity test (its kernels gained the Batch policy), each bounded so the whole call ends within LIMIT
# seconds. Logs land in $OUT (8 files); summary.txt has one line per step. Usage (device, repository root):
#   LIMIT=300 [GA_SHARED=<folder with models/tinyllamas>] tools/dev/moe_run.sh
# test_cuda_arch_forward needs ../shared/models/tinyllamas/stories260K.gguf, which does not travel: carry that
# folder (e.g. in .moecarry/shared) and name it in GA_SHARED.
set -u
OUT=${OUT:-/tmp/out}
LIMIT=${LIMIT:-300}
STEPS=${STEPS:-"build test_moe test_cuda_moe bench arch memcheck test_cuda_gemv"}
mkdir -p "$OUT"
. tools/dev/device_steps.sh
B=/tmp/b-moe
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.total --format=csv,noheader
  nproc
} > "$OUT/summary.txt" 2>&1
if has build; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
    ${GA_SHARED:+-DGA_SHARED_DIR=$GA_SHARED} > "$OUT/build.log" 2>&1
  if ! timeout $(( $(left) - 150 )) ninja -C $B -j16 test_moe test_cuda_moe test_cuda_gemv ga_bench_moe >> "$OUT/build.log" 2>&1; then
    grep -E "error|FAILED" -A4 "$OUT/build.log" | head -40 >> "$OUT/summary.txt"
    row build "FAILED after $(( $(date +%s) - T0 )) s"
    echo "$S" >> "$OUT/summary.txt"; cat "$OUT/summary.txt"; exit 1
  fi
  row build "ok after $(( $(date +%s) - T0 )) s"
fi
if has arch; then  # the whole engine: built on 8 cores while the MoE tests run
  ( timeout $(( $(left) - 40 )) ninja -C $B -j8 test_cuda_arch_forward > /tmp/build_arch.log 2>&1; echo $? > /tmp/arch_rc ) &
fi
has test_moe && run_step test_moe 20 test_moe.log $B/bin/test_moe
has test_cuda_moe && run_step cuda_moe 110 test_cuda_moe.log $B/bin/test_cuda_moe
has bench && run_step bench 120 bench_moe.log $B/bin/ga_bench_moe
if has arch; then
  while [[ ! -f /tmp/arch_rc && $(left) -gt 30 ]]; do sleep 1; done
  tail -20 /tmp/build_arch.log >> "$OUT/build.log"
  if [[ -f /tmp/arch_rc && $(cat /tmp/arch_rc) == 0 ]]; then
    run_step arch 60 test_cuda_arch.log $B/bin/test_cuda_arch_forward
  else
    row arch "NOT RUN (build: $(cat /tmp/arch_rc 2>/dev/null || echo unfinished))"
  fi
fi
has memcheck && run_step memcheck 40 memcheck.log $SAN --tool memcheck --error-exitcode 3 $B/bin/test_cuda_moe \
  --gtest_filter='CudaMoePlan.*:CudaMoeGroupedGemm.*:CudaMoeFfn.DecodeStep*:CudaMoeOps.*'
has test_cuda_gemv && run_step cuda_gemv 60 test_cuda_gemv.log $B/bin/test_cuda_gemv
{
  echo "$S"
  grep -hE "^\[  FAILED|cases,|Failure|worst rel L2" "$OUT"/test_cuda_moe.log 2>/dev/null | head -40
  grep -hE "^\[  FAILED|cases," "$OUT"/test_cuda_gemv.log 2>/dev/null | head -10
  grep -hE "^\[  FAILED|Failure|rel L2" "$OUT"/test_cuda_arch.log 2>/dev/null | grep -iE "FAILED|Failure|moe|mixtral" | head -20
  grep -hE "ERROR SUMMARY" "$OUT"/memcheck.log 2>/dev/null
} >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
grep -E "^\|" "$OUT/bench_moe.log" 2>/dev/null | head -120
