#!/bin/bash
# The LayerNorm tolerance test, the suite without its sweep, special values,
# then the every-config sweep for the pairs SWEEP_FILTER names.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
F='*LayerNormTolerance*:*NarrowRowsAndBatched*:*SpecialValues*:*InPlace*:*Misaligned*:*NormsWithout*:*Illegal*:*BlockRowLoops*'
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter="$F" > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
timeout 60 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=5 > $r/special_values_repeat.log 2>&1
echo "special values x5 rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \] 18 tests" $r/special_values_repeat.log
left=$(( 575 - ($(date +%s) - t0) ))
timeout $left dist/bin/kt_kernels_gpu_test --gtest_filter="${SWEEP_FILTER}" > $r/kernels_gpu_sweep.log 2>&1
echo "sweep rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[ *(OK|FAILED) *\]|^\[sweep\]|^\[coverage\]|Failure" $r/kernels_gpu_sweep.log | head -40
cd $OUT && tar czf r.tgz r
