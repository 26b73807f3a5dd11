#!/bin/bash
# The full every-config sweep of kt_kernels_gpu_test, as far as one slot goes.
set -u
rm -rf dist && mkdir -p dist && tar xJf dist-pack/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat dist-pack/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
timeout ${SWEEP_S:-540} dist/bin/kt_kernels_gpu_test --gtest_filter="${SWEEP_FILTER:-*EveryEnumeratedConfig*}" > $r/kernels_gpu_sweep.log 2>&1
echo "sweep rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[ *(OK|FAILED) *\]|^\[sweep\]|^\[coverage\]|Failure" $r/kernels_gpu_sweep.log | head -60
cd $OUT && tar czf r.tgz r && rm -rf r
