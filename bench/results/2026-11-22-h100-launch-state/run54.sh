#!/bin/bash
# Does the launch state wear off (decay probe)? How many launches on a
# second stream flip it? GPU tests at 2ae6a6b (Upload on a stream); a second
# sample of both tools with --streams=one.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
PROBE_DECAY_MS=4000 PROBE_GAP_MS=100 timeout 30 pc/state_probe memset_legacy 64 > $r/decay_memset_legacy.txt 2>&1
PROBE_DECAY_MS=4000 PROBE_GAP_MS=100 timeout 30 pc/state_probe memset_nonblocking_other 64 > $r/decay_memset_other.txt 2>&1
PROBE_DECAY_MS=1500 PROBE_GAP_MS=0 timeout 30 pc/state_probe kernel_legacy 64 > $r/decay_kernel_legacy_nogap.txt 2>&1
for n in 2 3 4 5 6; do timeout 30 pc/state_probe kernel_legacy $n >> $r/threshold.txt 2>&1; done
echo "probes at $(( $(date +%s) - t0 )) s"
awk '{print $4, $6}' $r/decay_memset_legacy.txt | tr '\n' ' ' | head -c 1500; echo
awk '{print $4, $6}' $r/decay_memset_other.txt | tr '\n' ' ' | head -c 1500; echo
grep after1 $r/threshold.txt
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='-*EveryEnumeratedConfigMatchesTheReference*' > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -8
timeout 100 dist/bin/kt_split_row_gpu_test --gtest_brief=1 > $r/split_row_gpu_test.log 2>&1
echo "split rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/split_row_gpu_test.log | head -5
timeout 60 dist/bin/kt_axis_gpu_test --gtest_brief=1 > $r/axis_gpu_test.log 2>&1
echo "axis rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/axis_gpu_test.log | head -5
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/daemon_gpu_test.log | head -3
rm -f /tmp/t.db; timeout 60 dist/bin/kerntune tune --db=/tmp/t.db --ops=rms_norm --dtypes=float16 --rows=1,64 --cols=4096 > $r/tune_smoke.txt 2>&1; echo "tune rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_smoke.txt
( cd $r && tar czf gpu_test_logs.tgz *.log && rm -f *.log )
. pc/bench_lib.sh
kb_all one
tb_all one
summ one
