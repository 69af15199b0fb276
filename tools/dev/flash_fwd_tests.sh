# Sourced by the flash forward device scripts (flash_fwd4.sh, flash_fwd6.sh, flash_fwd7.sh): their build and their
# test and sanitizer steps, which were one copy each differing only in the default CUDA flags, the default variant
# and the per-variant time cap.
#
# build_flash_fwd CUDA_FLAGS, with B (build folder), L (log folder) and el set: the GPU's clocks to $L/gpu.txt, a
# Release sm_90a build of the flash tests and the PyTorch comparison library with ptxas -v and CUDA_FLAGS (exits the
# script on a build error), then the ptxas spills of every Hopper forward kernel and any wgmma serialization warning
# to $L/ptxas.txt.
build_flash_fwd() {
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv \
    > $L/gpu.txt 2>&1
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
    -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v $1" > $L/build.log 2>&1
  ninja -C $B -j16 test_cuda_flash_attention test_cuda_flash_varlen test_cuda_attention ga_attention_c \
    >> $L/build.log 2>&1 ||
    { grep -E "error|FAILED" -A3 $L/build.log | head -40; tail -20 $L/build.log; exit 1; }
  echo "build done at $(el) s"
  grep -A2 "Compiling entry function '_ZN2ga4cuda12flash_detail21flash_fwd_sm90" $L/build.log |
    grep -E "spill" | sort | uniq -c > $L/ptxas.txt
  grep -i "wgmma.*serializ" $L/build.log | sort -u | head -5 >> $L/ptxas.txt
}

# run_flash_fwd_tests DEFAULT_VARIANT MAX_SECONDS_PER_VARIANT, with B (build folder) and L (log folder)
# and the scripts' left / el set; reads TEST_VARIANTS (each word alone through GA_FLASH_TEST_VARIANT, "all" = every
# compiled variant), FP8_TESTS, ENGINE, SANITIZE, SAN_VARIANT (default DEFAULT_VARIANT). Sets flash_rcs,
# fp8_rc, varlen_rc, attn_rc, mem_rc and race_rc for the summary.
run_flash_fwd_tests() {
  flash_rcs=""
  for v in ${TEST_VARIANTS:-$1}; do
    [ $(left) -lt 30 ] && { flash_rcs="$flash_rcs v$v:skipped"; continue; }
    T=$(left); [ $T -gt $2 ] && T=$2
    if [ "$v" = all ]; then
      timeout $T $B/bin/test_cuda_flash_attention > $L/test_flash_${v//,/_}.log 2>&1
    else
      GA_FLASH_TEST_VARIANT=$v timeout $T $B/bin/test_cuda_flash_attention --gtest_filter='-*Fp8*:*Sm75*' \
        > $L/test_flash_${v//,/_}.log 2>&1
    fi
    flash_rcs="$flash_rcs v$v:$?"
  done
  fp8_rc=-
  if [ "${FP8_TESTS:-0}" = 1 ] && [ $(left) -gt 30 ]; then  # the FP8 forward shares the consumer template
    T=$(left); [ $T -gt 60 ] && T=60
    timeout $T $B/bin/test_cuda_flash_attention --gtest_filter='*Fp8ForwardMatches*:*Fp8Small*:*Fp8Unsupported*' \
      > $L/test_flash_fp8.log 2>&1
    fp8_rc=$?
  fi
  flash_rcs="$flash_rcs fp8:$fp8_rc"
  echo "flash tests done at $(el) s"
  varlen_rc=skipped
  if [ $(left) -gt 30 ]; then timeout 40 $B/bin/test_cuda_flash_varlen > $L/test_varlen.log 2>&1; varlen_rc=$?; fi
  attn_rc=-
  if [ "${ENGINE:-0}" = 1 ] && [ $(left) -gt 20 ]; then
    timeout 30 $B/bin/test_cuda_attention > $L/test_attention.log 2>&1; attn_rc=$?
  fi
  mem_rc=-; race_rc=-
  if [ "${SANITIZE:-0}" = 1 ]; then
    SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
    if [ $(left) -gt 25 ]; then
      GA_FLASH_TEST_VARIANT=${SAN_VARIANT:-$1} timeout 60 $SAN --tool memcheck --error-exitcode 9 \
        $B/bin/test_cuda_flash_attention \
        --gtest_filter='CudaFlashAttention.SmallShapesForSanitizer:CudaFlashAttention.SplitTailMergesPieces' \
        > $L/memcheck.log 2>&1
      mem_rc=$?
    fi
    if [ $(left) -gt 25 ]; then
      GA_FLASH_TEST_VARIANT=${SAN_VARIANT:-$1} timeout $(( $(left) - 5 )) $SAN --tool racecheck --racecheck-report all \
        --error-exitcode 9 $B/bin/test_cuda_flash_attention --gtest_filter='CudaFlashAttention.SmallShapesForSanitizer' \
        > $L/racecheck.log 2>&1
      race_rc=$?
    fi
    echo "sanitizers done at $(el) s"
  fi
}
