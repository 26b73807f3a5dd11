#!/bin/bash
# Final check at the last commit: the suite without its sweep (with the
# LayerNorm tolerance test), special values x3, two sweep pairs through the
# refactored block dispatch, tuning of few rows, the daemon.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
F='*LayerNormTolerance*:*NarrowRowsAndBatched*:*SpecialValues*:*InPlace*:*Misaligned*:*NormsWithout*:*Illegal*:*BlockRowLoops*'
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter="$F" > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
timeout 60 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=3 > $r/special_values_repeat.log 2>&1
echo "special values x3 rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \] 18 tests" $r/special_values_repeat.log
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_filter='*EveryEnumeratedConfig*/layer_norm_float16:*EveryEnumeratedConfig*/softmax_float32:*EveryEnumeratedConfig*/reduce_scale_bfloat16' > $r/kernels_gpu_sweep.log 2>&1
echo "sweep rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[ *(OK|FAILED) *\]|^\[sweep\]|^\[coverage\]|Failure" $r/kernels_gpu_sweep.log | head
rm -f /tmp/t.db
timeout 100 dist/bin/kerntune tune --db=/tmp/t.db --ops=softmax,layer_norm,rms_norm,reduce_scale --dtypes=float32,float16 --rows=1,8,64 --cols=4096 > $r/tune_few_rows_4096.txt 2>&1; echo "tune few rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_few_rows_4096.txt
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/daemon_gpu_test.log
cd $OUT && tar czf r.tgz r
