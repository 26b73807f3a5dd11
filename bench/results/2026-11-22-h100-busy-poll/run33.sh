#!/bin/bash
# Busy polling: the daemon's GPU tests, the IPC clients and the sanitizer
# with --busy_poll_threads=2 on every daemon, then kt_daemon_bench in four
# modes (yield, spin, each with and without busy polling), every series also
# from a client that polls for its replies.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; nproc; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
OUT=$r/tests KERNTUNED_FLAGS="--busy_poll_threads=2 --gpu_wait=spin" GPU_WAIT_MODES=spin-bp \
  timeout 300 dist/bin/run_gpu_suite.sh daemon > $r/suite_daemon_bp.log 2>&1
echo "daemon suite (busy polling) rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^==|FAILED|PASSED|ERROR SUMMARY|passed|failed" $r/suite_daemon_bp.log | head -30
tail -4 $r/tests/daemon_bench_summary.txt 2>/dev/null
OUT=$r/bench GPU_WAIT_MODES="yield spin-bp spin yield-bp" timeout $(( 570 - ($(date +%s) - t0) )) \
  dist/bin/run_gpu_suite.sh daemon-bench > $r/suite_bench.log 2>&1
echo "bench rc=$? at $(( $(date +%s) - t0 )) s"
cat $r/bench/daemon_bench_summary.txt
cd $OUT && tar czf r.tgz r
