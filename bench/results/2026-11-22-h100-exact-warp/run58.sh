#!/bin/bash
# The masked softmax float16 every-config sweep to the end; the main grid at
# 256..2048 columns (where defaults use the warp kernel's exact instance).
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
timeout 120 dist/bin/kt_kernel_bench --groups=main --dtypes=float32,float16,bfloat16 --cols=256,512,1024,2048 --commit="$(cat pc/commit)" --out=$r/kernel_bench_main.json > $r/kernel_bench_main.txt 2>&1
echo "kernel_bench main rc=$? at $(( $(date +%s) - t0 )) s"
grep -c WRONG $r/kernel_bench_main.txt
timeout 400 dist/bin/kt_kernels_gpu_test --gtest_filter="*EveryEnumeratedConfig*/scaled_masked_softmax_float16" > $r/sweep_scaled_masked_softmax_float16.log 2>&1
echo "sweep masked f16 rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[sweep\]|Failure|PASSED|FAILED" $r/sweep_scaled_masked_softmax_float16.log | head -3
