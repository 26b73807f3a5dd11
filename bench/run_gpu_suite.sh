#!/usr/bin/env bash
# Runs the GPU work from a bundle on a GPU host: the gpu-labelled tests, the
# kernel benchmark on the standard grid, and the PyTorch peers in the same
# run. Results go to $OUT (or ./gpu-results).
#
#   bin/run_gpu_suite.sh [tests|kernel-tests|daemon|daemon-bench|idle-tuning|bench|llm-norm|all|tune] [extra kt_kernel_bench flags...]
#
# tests: the kernel and the daemon gpu-labelled tests (kernel-tests: the
# kernel suites only, each under $KERNEL_TEST_TIMEOUT_S, default 300 s); daemon: the latter,
# then compute-sanitizer memcheck over the daemon and its IPC clients, and
# kt_daemon_bench against a daemon started here (tuned configs from
# $TUNED_DB when given).
# daemon-bench: kt_launch_overhead_bench (launch_overhead.{json,log}), then
# kt_daemon_bench against a kerntuned started here: daemon_bench.{json,log}
# and the daemon's log kerntuned_bench.log ($BENCH_DAEMON_FLAGS go to that
# daemon), and a one-line summary daemon_bench_summary.txt. The JSON holds
# the client figures and the daemon's own stage times (RunTiming) and GPU
# counters (GetStatus.stats). With the daemon's submission queue the same
# run measures it beside gRPC (JSON key "queue"; BENCH_FLAGS=--noqueue
# skips it): the summary's q_* columns are the small Run's p50/p99 through
# the queue, Runs/s with 16 threads on one queue (q_rps16) and on several
# (q_rps16N), and the synchronous 49152x4096 softmax as % of its kernel
# (q_sync%); "-" where the daemon offered no queue. After a "|": the small
# Run back to back (b2b_p50, b2b_p99), 16 threads through one DaemonClient
# (dc_rps16), synchronous 49152x4096 back to back (b2b_sync%) and the
# small-Run p99 under a large-Run flood over alone (fair_p99x). The idle
# daemon's CPU goes to daemon_idle_cpu.txt. $BENCH_FLAGS go to
# kt_daemon_bench.
# $KERNTUNED_FLAGS (e.g. --workers=16) go to every daemon the tests and the
# sanitizer start.
# tune: `kerntune tune` over the standard grid into $OUT/tuning.db, resuming
# from $RESUME_DB when given (a database an earlier, cut-off call brought
# back) and stopped cleanly with SIGINT after $TUNE_LIMIT_S seconds if set.
# $TUNE_GROUPS, $TUNE_OPS and $TUNE_DTYPES narrow it (comma lists; default
# every group — main, few_rows, attention, axis, llm — and every op, each op in
# the groups of its kind). $TUNE_DEVICES goes to --devices (default
# kerntune's: every visible GPU at once; TUNE_DEVICES=0 is a one-GPU tune);
# with several GPUs, tune_summary.txt ends with a line per GPU giving the
# points and candidates it measured, and tune.log names the GPU of each
# point.
# idle-tuning: kt_daemon_bench --idle_tuning against a kerntuned --tune_idle
# started here on an empty store (idle_tuning.json, kerntuned_idle_tuning.log):
# small-Run p50/p99 with nothing to tune and while it tunes (issue 26).
# bench: the kernel benchmark and the PyTorch peers in one run, over
# $BENCH_GROUPS and $BENCH_OPS (default: all, the attention group's
# scaled_masked_softmax and the axis group included; ATTENTION_CAUSAL=1 adds
# the causal mask to the masked softmax on both sides); with $TUNED_DB, tuned
# and heuristic configs are timed side by side, and bench/summarize.py's
# table (kerntune's best vs the best peer per point) goes to
# $OUT/summary.md when python3 can read both files.
# llm-norm: issue 44's ops in one call: kt_kernel_bench on the llm_norm
# group (kernel_bench_llm_norm.{json,log}; dtypes $LLM_NORM_DTYPES, default
# bfloat16,float16; tuned configs from $TUNED_DB when given), then
# llm_norm_peers.py (PyTorch eager and compiled composites, Liger,
# FlashInfer) at the same points (llm_norm_peers.{json,log}), its peers'
# source trees from $PEERS_DIR (default ./.gpu/peers: flashinfer/ and
# liger/src/, exported from their repositories, never part of kerntune),
# $PEER_FLAGS narrowing it (default: bfloat16, rows/tokens {1, 64, 512,
# 8192} x cols {128, 4096, 8192}, which fits one call with torch.compile),
# at most $PEER_TIMEOUT_S seconds (default 420); both go into
# $OUT/llm_norm.tar.gz with summarize_llm_norm.py's side_by_side.csv and
# llm_norm_summary.md (issue 44's checks).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-gpu-results}
what=${1:-all}
shift || true
mkdir -p "$out"
status=0

{
  nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,memory.total,clocks.max.sm,clocks.max.mem,compute_mode --format=csv
  echo "cpus: $(nproc)"
  echo "commit: ${KT_COMMIT:-unknown}"
  date -u +%Y-%m-%dT%H:%M:%SZ
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

if [ "$what" = tests ] || [ "$what" = all ] || [ "$what" = kernel-tests ]; then
  # The row kernels, the middle-axis kernel and the split-row kernel, each
  # over every enumerated config of its shapes; KERNEL_TEST_FILTER narrows.
  for suite in kernels axis split_row; do
    echo "== GPU tests: kt_${suite}_gpu_test"
    timeout "${KERNEL_TEST_TIMEOUT_S:-300}" "$here/kt_${suite}_gpu_test" --gtest_brief=1 \
      --gtest_filter="${KERNEL_TEST_FILTER:-*}" > "$out/${suite}_gpu_test.log" 2>&1 || status=1
    grep -E '^\[(coverage|sweep)\]|FAILED|PASSED|Failure|error' "$out/${suite}_gpu_test.log" \
      | head -40
  done
fi

if [ "$what" = tests ] || [ "$what" = daemon ] || [ "$what" = all ]; then
  echo "== daemon GPU tests${KERNTUNED_FLAGS:+ (kerntuned $KERNTUNED_FLAGS)}"
  export KERNTUNED_BINARY="$here/kerntuned" KERNTUNE_BINARY="$here/kerntune"
  if [ -n "${KERNTUNED_FLAGS:-}" ]; then
    # The tests start $KERNTUNED_BINARY with their own flags: add ours.
    KERNTUNED_BINARY=$(mktemp /tmp/kerntuned-flags.XXXXXX)
    printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$here/kerntuned" "$KERNTUNED_FLAGS" \
      > "$KERNTUNED_BINARY"
    chmod +x "$KERNTUNED_BINARY"
  fi
  timeout 90 "$here/kt_kerntuned_gpu_test" --gtest_brief=1 > "$out/daemon_gpu_test.log" 2>&1 \
    || status=1
  grep -E 'FAILED|PASSED|Failure|error' "$out/daemon_gpu_test.log" | head -20
  echo "== multi-process CUDA IPC (C++ clients)"
  timeout 240 "$here/kt_client_gpu_test" --gtest_brief=1 > "$out/ipc_gpu_test.log" 2>&1 || status=1
  grep -E 'FAILED|PASSED|Failure|error' "$out/ipc_gpu_test.log" | head -20
  # The Python GPU tests (a bundle's python/tests): name, seconds, what it checks.
  while read -r name seconds title; do
    test_file="$here/../python/tests/$name.py"
    [ -f "$test_file" ] || continue
    echo "== $title"
    PYTHONPATH="$here/../python" PYTHONUNBUFFERED=1 timeout "$seconds" python3 "$test_file" \
      > "$out/$name.log" 2>&1 || status=1
    tail -5 "$out/$name.log"
  done <<'TESTS'
torch_gpu_test 200 multi-process CUDA IPC (Python clients with torch)
torch_runtime_gpu_test 300 in-process runtime (kerntune.torch: CUDA ops, daemon configs, compile, graphs)
TESTS
fi

if [ "$what" = daemon ]; then
  echo "== compute-sanitizer memcheck over the daemon and its IPC clients"
  timeout 120 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
    "$here/kt_client_gpu_test" --gtest_filter='*KerntuneRunThroughIpc*' \
    > "$out/sanitizer.log" 2>&1 || status=1
  grep -E 'ERROR SUMMARY|FAILED|PASSED|error' "$out/sanitizer.log" | head -10
fi

if [ "$what" = daemon ] || [ "$what" = daemon-bench ]; then
  # The launch path's host-side steps in one process, before any daemon runs.
  echo "== launch-path overhead (kt_launch_overhead_bench)"
  timeout 120 "$here/kt_launch_overhead_bench" --benchmark_out="$out/launch_overhead.json" \
    --benchmark_out_format=json > "$out/launch_overhead.log" 2>&1 || status=1
  cat "$out/launch_overhead.log"
  echo "== daemon benchmark"
  socket=$(mktemp -u /tmp/kerntune-bench.XXXXXX.sock)
  "$here/kerntuned" --socket="$socket" --db="${TUNED_DB:-/nonexistent.db}" \
    ${BENCH_DAEMON_FLAGS:-} > "$out/kerntuned_bench.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
  timeout 160 "$here/kt_daemon_bench" --socket="$socket" ${BENCH_FLAGS:-} \
    --out="$out/daemon_bench.json" > "$out/daemon_bench.log" 2>&1 || status=1
  cat "$out/daemon_bench.log"
  # The idle daemon: its CPU time over 5 s, once its pollers' idle period
  # (well under a second) has passed after the bench's last call.
  sleep 1
  ticks() { awk '{print $14 + $15}' "/proc/$daemon/stat" 2> /dev/null || echo -1; }
  before=$(ticks); sleep 5; after=$(ticks)
  if [ "$before" -ge 0 ] && [ "$after" -ge 0 ]; then
    awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" \
      'BEGIN { printf "idle daemon: %.2f%% of one core over 5 s\n", 100 * t / hz / 5 }' \
      | tee "$out/daemon_idle_cpu.txt"
  else
    echo "idle daemon: not measured, the daemon exited" | tee "$out/daemon_idle_cpu.txt"
    status=1
  fi
  kill -TERM "$daemon"; wait "$daemon" || status=1
  # The headline figures on one line.
  python3 - "$out/daemon_bench.json" > "$out/daemon_bench_summary.txt" 2>&1 <<'PY' || status=1
import json, sys
# cp_*: the same from a client that polls for its replies.
# q_*: the same Run through the submission queue (rps16: 16 threads on one
# queue, rps16N: on several), and its synchronous bandwidth.
print("%8s %8s %9s %8s %8s %8s %8s %8s %8s %7s %7s %7s %7s %7s %7s %7s %7s %7s %7s %7s %8s %8s %7s" % (
    "run_p50", "echo_p50", "overhead", "handler", "launch", "gpuwait", "outside",
    "cp_echo", "cp_ovh", "sync%", "cp_sync%", "events%", "self%", "pipe1%", "pipeN%", "rps1",
    "rps4", "rps16", "q_p50", "q_p99", "q_rps16", "q_rps16N", "q_sync%"))
d = json.load(open(sys.argv[1]))
lat, bw = d["latency"], d["bandwidth"]
rps = {t["clients"]: t["runs_per_s"] for t in d.get("throughput", [])}
cp = lat.get("client_polls", {})
print("%8.1f %8.1f %9.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.0f %7.0f %7.0f" % (
    lat["run_p50_us"], lat["echo_p50_us"], lat["overhead_p50_us"],
    lat["server"]["handler_p50_us"], lat["server"]["kernel_launch_p50_us"],
    lat["server"]["gpu_wait_p50_us"],
    lat["server"]["outside_handler_p50_us"], cp.get("echo_p50_us", 0),
    cp.get("overhead_p50_us", 0), bw["sync_pct_of_kernel"],
    bw.get("sync_client_polls_pct_of_kernel", 0),
    bw["events"]["pct_of_kernel"], bw["daemon_chained"]["pct_of_kernel"],
    bw["pipelined"]["pct_of_kernel"], bw["pipelined_deep"]["pct_of_kernel"],
    rps.get(1, 0), rps.get(4, 0), rps.get(16, 0)), end="")
q = d.get("queue", {})
if q.get("available"):
    levels = q.get("throughput", [])
    qrps = {(t["threads"], t["queues"]): t["runs_per_s"] for t in levels if "queues" in t}
    spread = max((r for (t, n), r in qrps.items() if t == 16 and n > 1), default=0)
    dc16 = max((t["runs_per_s"] for t in levels if t.get("client") == "DaemonClient"
                and t["threads"] == 16), default=0)
    b2b = q.get("latency_back_to_back", {})
    bw_b2b = q["bandwidth"].get("back_to_back", {})
    fair = q.get("fairness", {})
    print(" %7.1f %7.1f %8.0f %8.0f %7.1f | b2b_p50 %.1f b2b_p99 %.1f dc_rps16 %.0f b2b_sync%% %.1f fair_p99x %.2f" % (
        q["latency"]["run_p50_us"], q["latency"]["run_p99_us"], qrps.get((16, 1), 0), spread,
        q["bandwidth"]["sync_pct_of_kernel"], b2b.get("run_p50_us", 0), b2b.get("run_p99_us", 0),
        dc16, bw_b2b.get("pct_of_kernel", 0), fair.get("p99_ratio", 0)))
else:
    print(" %7s %7s %8s %8s %7s" % ("-", "-", "-", "-", "-"))
PY
  cat "$out/daemon_bench_summary.txt"
fi

if [ "$what" = idle-tuning ]; then
  # A daemon with --tune_idle and an empty store of its own: a client's
  # small-Run latency with nothing to tune, then with problems waiting.
  echo "== the idle tuner's effect on small Runs (kt_daemon_bench --idle_tuning)"
  socket=$(mktemp -u /tmp/kerntune-idle.XXXXXX.sock)
  store=$(mktemp -u /tmp/kerntune-idle.XXXXXX.db)
  "$here/kerntuned" --socket="$socket" --db="$store" --tune_idle --devices=0 \
    > "$out/kerntuned_idle_tuning.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
  timeout 420 "$here/kt_daemon_bench" --socket="$socket" --idle_tuning \
    --out="$out/idle_tuning.json" || status=1
  kill -TERM "$daemon"; wait "$daemon" || status=1
  rm -f "$store"
fi

if [ "$what" = llm-norm ]; then
  echo "== kernel benchmark, llm_norm group"
  llm_flags=()
  [ -n "${TUNED_DB:-}" ] && llm_flags=(--db="$TUNED_DB")
  "$here/kt_kernel_bench" --groups=llm_norm --dtypes="${LLM_NORM_DTYPES:-bfloat16,float16}" \
    --out "$out/kernel_bench_llm_norm.json" --commit "${KT_COMMIT:-}" "${llm_flags[@]}" "$@" \
    > "$out/kernel_bench_llm_norm.log" 2>&1 || status=1
  tail -3 "$out/kernel_bench_llm_norm.log"
  echo "== llm_norm peers"
  peers=${PEERS_DIR:-$PWD/.gpu/peers}
  # shellcheck disable=SC2086  # PEER_FLAGS is a list of flags
  PYTHONUNBUFFERED=1 timeout "${PEER_TIMEOUT_S:-420}" python3 "$here/llm_norm_peers.py" \
    --flashinfer "$peers/flashinfer" --liger "$peers/liger/src" \
    --build-dir /tmp/kt_flashinfer_norm --out "$out/llm_norm_peers.json" \
    ${PEER_FLAGS:---dtypes bfloat16 --rows 1,64,512,8192 --cols 128,4096,8192} \
    > "$out/llm_norm_peers.log" 2>&1 || status=1
  tail -2 "$out/llm_norm_peers.log"
  python3 "$here/summarize_llm_norm.py" "$out/kernel_bench_llm_norm.json" \
    "$out/llm_norm_peers.json" --csv "$out/side_by_side.csv" > "$out/llm_norm_summary.md" \
    && sed -n '/### Checks/,$p' "$out/llm_norm_summary.md" || status=1
  (cd "$out" && tar -czf llm_norm.tar.gz environment.txt kernel_bench_llm_norm.* \
    llm_norm_peers.* side_by_side.csv llm_norm_summary.md 2> /dev/null) || status=1
fi

bench_flags=()
if [ "$what" = tune ]; then
  echo "== kerntune tune"
  [ -n "${RESUME_DB:-}" ] && cp "$RESUME_DB" "$out/tuning.db"
  limit=()
  [ -n "${TUNE_LIMIT_S:-}" ] && limit=(timeout -s INT "$TUNE_LIMIT_S")
  start=$(date +%s)
  tune_flags=()
  [ -n "${TUNE_GROUPS:-}" ] && tune_flags+=(--groups="$TUNE_GROUPS")
  [ -n "${TUNE_OPS:-}" ] && tune_flags+=(--ops="$TUNE_OPS")
  [ -n "${TUNE_DTYPES:-}" ] && tune_flags+=(--dtypes="$TUNE_DTYPES")
  [ -n "${TUNE_DEVICES:-}" ] && tune_flags+=(--devices="$TUNE_DEVICES")
  echo "tune flags: ${tune_flags[*]:-(the whole standard grid)}"
  "${limit[@]}" "$here/kerntune" tune --db="$out/tuning.db" "${tune_flags[@]}" \
    > "$out/tune_summary.txt" 2> "$out/tune.log"
  tune_status=$?
  echo "tune wall time: $(( $(date +%s) - start )) s (exit $tune_status)" | tee -a "$out/tune_summary.txt"
  # The totals, each SKU's heading and the per-GPU lines (several GPUs).
  grep -E '^(== |[0-9]+ points tuned|speedup over|GPU [0-9]+ \(|GPU [0-9]+: |tune wall time)' \
    "$out/tune_summary.txt"
  grep -E '^kerntune tune: on ' "$out/tune.log"
  tail -3 "$out/tune.log"
  # 130: stopped by the limit with every finished point kept; resume later.
  [ "$tune_status" = 0 ] || status=$tune_status
fi

[ -n "${TUNED_DB:-}" ] && bench_flags=(--db="$TUNED_DB")
peer_flags=()
if [ -n "${BENCH_GROUPS:-}" ]; then
  bench_flags+=(--groups="$BENCH_GROUPS")
  peer_flags+=(--groups "$BENCH_GROUPS")
fi
if [ -n "${BENCH_OPS:-}" ]; then
  bench_flags+=(--ops="$BENCH_OPS")
  peer_flags+=(--ops "$BENCH_OPS")
fi
if [ "${ATTENTION_CAUSAL:-0}" = 1 ]; then
  bench_flags+=(--causal)
  peer_flags+=(--causal)
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  echo "== kernel benchmark"
  "$here/kt_kernel_bench" --out "$out/kernel_bench.json" --commit "${KT_COMMIT:-}" \
    "${bench_flags[@]}" "$@" > "$out/kernel_bench.log" 2>&1 || status=1
  tail -3 "$out/kernel_bench.log"
  echo "== PyTorch peers"
  PYTHONUNBUFFERED=1 python3 "$here/torch_bench.py" --out "$out/torch_bench.json" \
    "${peer_flags[@]}" > "$out/torch_bench.log" 2>&1 || status=1
  tail -2 "$out/torch_bench.log"
  if [ -f "$here/summarize.py" ] && [ -f "$out/kernel_bench.json" ] && \
     [ -f "$out/torch_bench.json" ]; then
    python3 "$here/summarize.py" "$out/kernel_bench.json" "$out/torch_bench.json" \
      > "$out/summary.md" 2> "$out/summarize.log" && tail -4 "$out/summary.md"
  fi
fi
exit $status
