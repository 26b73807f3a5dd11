#!/bin/bash
# kerntuned under gRPC's poll engine (--grpc_poll_strategy=poll, the daemon
# only; the benchmark client keeps gRPC's default epoll1) against epoll1,
# with and without busy polling, one host, interleaved. Then the daemon's
# GPU tests with the new mode on every daemon.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; nproc; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
bench() {  # name, kerntuned flags...
  local name=$1; shift
  local socket=/tmp/kt-$name.sock
  dist/bin/kerntuned --socket=$socket --db=/nonexistent.db "$@" > $r/kerntuned_$name.log 2>&1 &
  local daemon=$!
  for _ in $(seq 100); do [ -S $socket ] && break; sleep 0.1; done
  timeout 100 dist/bin/kt_daemon_bench --socket=$socket --throughput_seconds=1.5 \
    --out=$r/$name.json > $r/$name.log 2>&1
  echo "$name rc=$? at $(( $(date +%s) - t0 )) s"
  kill -TERM $daemon; wait $daemon
}
for pass in 1 2; do
  bench p${pass}_epoll1_yield --gpu_wait=yield
  bench p${pass}_epoll1_yield-bp --gpu_wait=yield --busy_poll_threads=2
  bench p${pass}_poll_yield-bp --gpu_wait=yield --busy_poll_threads=2 --grpc_poll_strategy=poll
  bench p${pass}_poll_spin-bp --gpu_wait=spin --busy_poll_threads=2 --grpc_poll_strategy=poll
  [ $pass = 1 ] && bench p1_poll_yield --gpu_wait=yield --grpc_poll_strategy=poll
done
python3 pc/summary.py $r/p*.json | tee $r/summary.txt
# Every daemon the tests start runs with the new mode (as run_gpu_suite.sh's KERNTUNED_FLAGS).
printf '#!/bin/sh\nexec "%s" --busy_poll_threads=2 --grpc_poll_strategy=poll --gpu_wait=spin "$@"\n' \
  "$PWD/dist/bin/kerntuned" > /tmp/kerntuned-poll && chmod +x /tmp/kerntuned-poll
export KERNTUNED_BINARY=/tmp/kerntuned-poll
timeout 90 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon gpu test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/daemon_gpu_test.log | head -3
timeout 150 dist/bin/kt_client_gpu_test --gtest_brief=1 > $r/ipc_gpu_test.log 2>&1
echo "ipc gpu test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/ipc_gpu_test.log | head -3
PYTHONPATH=dist/python PYTHONUNBUFFERED=1 timeout 120 python3 dist/python/tests/torch_gpu_test.py > $r/python_gpu_test.log 2>&1
echo "python torch test rc=$? at $(( $(date +%s) - t0 )) s"; tail -2 $r/python_gpu_test.log
cd $OUT && tar czf r.tgz r
