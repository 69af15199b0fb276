#!/usr/bin/env bash
# Device re-check after a host-side refactor of the flash library: builds the attention tests and the PyTorch
# harness, runs the flash/engine attention tests and a short compare.py (bf16 hd128, FP8 hd256) for speed.
set -uo pipefail
B=/tmp/b-integ
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF -DGA_BUILD_TESTS=ON > /tmp/cfg.log 2>&1
t0=$(date +%s)
ninja -C $B -j16 test_cuda_flash_attention test_cuda_flash_backward test_cuda_flash_varlen test_cuda_attention test_cuda_forward test_cuda_batch_forward ga_attention_c > /tmp/build.log 2>&1 || { grep -E "error|FAILED" -A4 /tmp/build.log | head -40; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for t in test_cuda_flash_attention test_cuda_flash_backward test_cuda_flash_varlen test_cuda_attention test_cuda_forward test_cuda_batch_forward; do
  timeout 200 $B/bin/$t --gtest_brief=1 > /tmp/$t.log 2>&1; echo "$t rc=$? $(grep -cE '^\[  FAILED' /tmp/$t.log) failed $(grep -E '^\[  PASSED' /tmp/$t.log)"
done
timeout 60 python3 bench/attention_torch/compare.py --lib $B/bench/attention_torch/libga_attention_c.so --head-dims 128 --seqlens 4096,16384 2>&1 | grep -E "^\| 128|configurations"
timeout 60 python3 bench/attention_torch/compare.py --lib $B/bench/attention_torch/libga_attention_c.so --fp8 --head-dims 256 --seqlens 8192 2>&1 | grep -E "^\| 256|configurations"
