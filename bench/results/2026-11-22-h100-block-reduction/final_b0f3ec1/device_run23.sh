#!/bin/bash
# Final check at the last commit: the row-kernel suite without its full sweep
# (with BlockRowLoops), special values repeated, split rows, the daemon.
set -u
rm -rf dist && mkdir -p dist && tar xJf dist-pack/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat dist-pack/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
F='*NarrowRowsAndBatched*:*SpecialValues*:*InPlace*:*Misaligned*:*NormsWithout*:*Illegal*:*BlockRowLoops*'
timeout 150 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter="$F" > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=10 > $r/special_values_repeat.log 2>&1
echo "special values x10 rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \] 18 tests" $r/special_values_repeat.log
timeout 60 dist/bin/kt_split_row_gpu_test --gtest_brief=1 > $r/split_row_gpu_test.log 2>&1
echo "split_row_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/split_row_gpu_test.log | head -3
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/daemon_gpu_test.log
cd $OUT && tar czf r.tgz r && rm -rf r
