#!/bin/bash
# Final kernels (float weights after the first row's loads, 16-bit weights
# hidden from hoisting): the kernel suite without its sweep, special values
# x2, split rows, the daemon, the sweeps for the float32 and one 16-bit norm
# pair; few rows x 4096 tuned beside PyTorch, float32/float16/bfloat16.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='-*EveryEnumeratedConfigMatchesTheReference*' > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
timeout 60 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=2 > $r/special_values_repeat.log 2>&1
echo "special values x2 rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \]" $r/special_values_repeat.log
timeout 100 dist/bin/kt_split_row_gpu_test --gtest_brief=1 > $r/split_row_gpu_test.log 2>&1
echo "split rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/split_row_gpu_test.log | head -5
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/daemon_gpu_test.log | head -3
for pair in layer_norm_float32 rms_norm_float32 layer_norm_bfloat16 reduce_scale_float16; do
  timeout 60 dist/bin/kt_kernels_gpu_test --gtest_filter="*EveryEnumeratedConfig*/$pair" > $r/sweep_$pair.log 2>&1
  echo "sweep $pair rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[sweep\]|Failure|^\[  FAILED" $r/sweep_$pair.log | head -3
done
( cd $r && tar czf gpu_test_logs.tgz *.log && rm -f *.log )
OPS=softmax,layer_norm,rms_norm,reduce_scale
rm -f /tmp/t.db
timeout 120 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16,bfloat16 --rows=1,8,64 --cols=4096 > $r/tune_few_rows_4096.txt 2>&1; echo "tune rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_few_rows_4096.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned_few_rows.db
timeout 90 dist/bin/kt_kernel_bench --groups=few_rows --ops=$OPS --dtypes=float32,float16,bfloat16 --rows=1,8,64 --cols=4096 --db=/tmp/t.db --commit="$(cat pc/commit)" --out=$r/kernel_bench_few_rows.json > $r/kernel_bench_few_rows.txt 2>&1
echo "kernel_bench few rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 200 python3 dist/bin/torch_bench.py --groups few_rows --ops $OPS --dtypes float32,float16,bfloat16 --rows 1,8,64 --cols 4096 --out $r/torch_few_rows.json > $r/torch_few_rows.txt 2>&1
echo "torch rc=$? at $(( $(date +%s) - t0 )) s"
python3 dist/bin/summarize.py $r/kernel_bench_few_rows.json $r/torch_few_rows.json > $r/summary_few_rows.md 2>$r/summarize.err; echo "summarize rc=$?"
python3 pc/compare_few_rows.py $r > $r/few_rows_vs_pytorch.txt; cat $r/few_rows_vs_pytorch.txt
cd $OUT && tar czf r.tgz r
