#!/usr/bin/env bash
# Session 10 FP8 head dim 256 run: the new default 39 (persistent overlap + split chains) against one tile per CTA (40)
# and a 3-deep ring (41), same run, and their parity tests (benchmark build: GA_FLASH_FP8_WIDE).
B=/tmp/b-fp8w
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-DGA_FLASH_FP8_WIDE=1" > $OUT/build.log 2>&1
ninja -C $B -j16 test_cuda_flash_attention ga_attention_c >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
timeout 150 python3 bench/attention_torch/compare.py --lib $B/bench/attention_torch/libga_attention_c.so --fp8 \
  --head-dims 256 --seqlens 4096,8192,16384 --rounds 7 --fp8-variants=-1,40,41 > $OUT/fp8_hd256.md 2>&1
echo "compare rc=$?"; tail -9 $OUT/fp8_hd256.md
GA_SHARED=$PWD/.fwdshared GA_FLASH_TEST_VARIANT=40,41 timeout 150 $B/bin/test_cuda_flash_attention \
  --gtest_filter='*Fp8ForwardMatches*:*Fp8ScoresThatJump*:*Fp8SmallShapes*:*Fp8Long*' > $OUT/test_fp8.log 2>&1
echo "fp8 tests rc=$?"; grep -E "flash forward|PASSED|FAILED" $OUT/test_fp8.log | head
