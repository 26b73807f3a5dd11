#!/bin/bash
# Busy polling under gRPC's "poll" engine (each polling thread polls the
# sockets itself) against the default epoll1, same host.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; nproc; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
OUT=$r/poll GRPC_POLL_STRATEGY=poll GPU_WAIT_MODES="yield yield-bp spin-bp" timeout 280 \
  dist/bin/run_gpu_suite.sh daemon-bench > $r/suite_poll.log 2>&1
echo "poll engine rc=$? at $(( $(date +%s) - t0 )) s"
cat $r/poll/daemon_bench_summary.txt
OUT=$r/epoll1 GPU_WAIT_MODES="yield yield-bp" timeout $(( 560 - ($(date +%s) - t0) )) \
  dist/bin/run_gpu_suite.sh daemon-bench > $r/suite_epoll1.log 2>&1
echo "epoll1 rc=$? at $(( $(date +%s) - t0 )) s"
cat $r/epoll1/daemon_bench_summary.txt
cd $OUT && tar czf r.tgz r
