#!/usr/bin/env bash
# Runs the GPU work from a bundle on a GPU host: the gpu-labelled tests, the
# kernel benchmark on the standard grid, and the PyTorch peers in the same
# run. Results go to $OUT (or ./gpu-results).
#
#   bin/run_gpu_suite.sh [tests|bench|all|tune] [extra kt_kernel_bench flags...]
#
# tune: `kerntune tune` over the standard grid into $OUT/tuning.db (resuming
# if that file already holds points), then the benchmark with --db so tuned
# and heuristic configs are timed side by side, then the PyTorch peers.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-gpu-results}
what=${1:-all}
shift || true
mkdir -p "$out"
status=0

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  echo "commit: ${KT_COMMIT:-unknown}"
  date -u +%Y-%m-%dT%H:%M:%SZ
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

if [ "$what" = tests ] || [ "$what" = all ]; then
  echo "== GPU tests"
  timeout 300 "$here/kt_kernels_gpu_test" --gtest_brief=1 > "$out/gpu_test.log" 2>&1 || status=1
  grep -E '^\[(coverage|sweep)\]|FAILED|PASSED|Failure|error' "$out/gpu_test.log" | head -60
fi

bench_flags=()
if [ "$what" = tune ]; then
  echo "== kerntune tune"
  start=$(date +%s)
  "$here/kerntune" tune --db="$out/tuning.db" > "$out/tune_summary.txt" 2> "$out/tune.log" \
    || status=1
  echo "tune wall time: $(( $(date +%s) - start )) s" | tee -a "$out/tune_summary.txt"
  tail -4 "$out/tune_summary.txt"
  bench_flags=(--db="$out/tuning.db")
fi

if [ "$what" = bench ] || [ "$what" = all ] || [ "$what" = tune ]; then
  echo "== kernel benchmark"
  "$here/kt_kernel_bench" --out "$out/kernel_bench.json" --commit "${KT_COMMIT:-}" \
    "${bench_flags[@]}" "$@" > "$out/kernel_bench.log" 2>&1 || status=1
  tail -3 "$out/kernel_bench.log"
  echo "== PyTorch peers"
  PYTHONUNBUFFERED=1 python3 "$here/torch_bench.py" --out "$out/torch_bench.json" \
    > "$out/torch_bench.log" 2>&1 || status=1
  tail -2 "$out/torch_bench.log"
fi
exit $status
