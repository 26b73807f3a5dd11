#!/bin/bash
# Paired 16-bit conversions in the load/store functors: the kernel suite
# without its full sweep, special values x3, split rows, the daemon, then
# the every-config sweep for the 16-bit op x dtype pairs while time lasts.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
timeout 200 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='-*EveryEnumeratedConfigMatchesTheReference*' > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
timeout 60 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=3 > $r/special_values_repeat.log 2>&1
echo "special values x3 rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \]" $r/special_values_repeat.log
timeout 100 dist/bin/kt_split_row_gpu_test --gtest_brief=1 > $r/split_row_gpu_test.log 2>&1
echo "split rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/split_row_gpu_test.log | head -5
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/daemon_gpu_test.log | head -3
for pair in layer_norm_float16 rms_norm_bfloat16 softmax_float16 reduce_scale_float16 layer_norm_bfloat16 scaled_masked_softmax_bfloat16 log_softmax_bfloat16 rms_norm_float16 softmax_bfloat16; do
  left=$(( 560 - ($(date +%s) - t0) )); [ $left -lt 40 ] && { echo "no time for $pair"; continue; }
  timeout $left dist/bin/kt_kernels_gpu_test --gtest_filter="*EveryEnumeratedConfig*/$pair" > $r/sweep_$pair.log 2>&1
  echo "sweep $pair rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[sweep\]|Failure|^\[  FAILED" $r/sweep_$pair.log | head -3
done
cd $OUT && tar czf r.tgz r
