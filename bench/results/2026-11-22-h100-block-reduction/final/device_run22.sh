#!/bin/bash
# The special-values test of every op x dtype, repeated with fresh seeds;
# then the rest of the full every-config sweep (SWEEP_FILTER).
set -u
rm -rf dist && mkdir -p dist && tar xJf dist-pack/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat dist-pack/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=${REPEAT:-10} > $r/special_values_repeat.log 2>&1
echo "special values x${REPEAT:-10} rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \] 18 tests" $r/special_values_repeat.log; grep -E "FAILED|Failure" $r/special_values_repeat.log | head -5
timeout ${SWEEP_S:-450} dist/bin/kt_kernels_gpu_test --gtest_filter="${SWEEP_FILTER:-*EveryEnumeratedConfig*}" > $r/kernels_gpu_sweep.log 2>&1
echo "sweep rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[ *(OK|FAILED) *\]|^\[sweep\]|^\[coverage\]|Failure" $r/kernels_gpu_sweep.log | head -40
cd $OUT && tar czf r.tgz r && rm -rf r
