#!/bin/bash
# Paired 16-bit conversions in block_regs only: the kernel suite without its
# sweep, special values x2, split rows, the daemon, the sweep for four
# 16-bit pairs; few rows x 4096 tuned beside PyTorch; the 16-bit main grid
# against the copy of the same bytes.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
timeout 200 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='-*EveryEnumeratedConfigMatchesTheReference*' > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
timeout 60 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=2 > $r/special_values_repeat.log 2>&1
echo "special values x2 rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \]" $r/special_values_repeat.log
timeout 100 dist/bin/kt_split_row_gpu_test --gtest_brief=1 > $r/split_row_gpu_test.log 2>&1
echo "split rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/split_row_gpu_test.log | head -5
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/daemon_gpu_test.log | head -3
for pair in layer_norm_float16 rms_norm_bfloat16 softmax_float16 reduce_scale_bfloat16; do
  timeout 60 dist/bin/kt_kernels_gpu_test --gtest_filter="*EveryEnumeratedConfig*/$pair" > $r/sweep_$pair.log 2>&1
  echo "sweep $pair rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[sweep\]|Failure|^\[  FAILED" $r/sweep_$pair.log | head -3
done
OPS=softmax,layer_norm,rms_norm,reduce_scale
rm -f /tmp/t.db
timeout 150 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --rows=1,8,64 --cols=4096 > $r/tune_few_rows_4096.txt 2>&1; echo "tune rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_few_rows_4096.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned_few_rows.db
timeout 60 dist/bin/kt_kernel_bench --groups=few_rows --ops=$OPS --dtypes=float32,float16 --rows=1,8,64 --cols=4096 --db=/tmp/t.db --commit="$(cat pc/commit)" --out=$r/kernel_bench_few_rows.json > $r/kernel_bench_few_rows.log 2>&1
echo "kernel_bench few rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 150 python3 dist/bin/torch_bench.py --groups few_rows --ops $OPS --dtypes float32,float16 --rows 1,8,64 --cols 4096 --out $r/torch_few_rows.json > $r/torch_few_rows.log 2>&1
echo "torch rc=$? at $(( $(date +%s) - t0 )) s"
python3 dist/bin/summarize.py $r/kernel_bench_few_rows.json $r/torch_few_rows.json > $r/summary_few_rows.md 2>$r/summarize.err; echo "summarize rc=$?"
timeout 120 dist/bin/kt_kernel_bench --groups=main --ops=softmax,layer_norm,rms_norm,reduce_scale --dtypes=float16,bfloat16 --rows=49152 --cols=32,128,1024,4096,32768 --commit="$(cat pc/commit)" --out=$r/kernel_bench_main.json > $r/kernel_bench_main.log 2>&1
echo "kernel_bench main rc=$? at $(( $(date +%s) - t0 )) s"
python3 - $r <<'PY'
import json,sys
r=sys.argv[1]
d=json.load(open(r+'/kernel_bench_main.json'))
for x in d['results']:
    print("%-12s %-9s %6d x %-6d %-34s %8.2f us  %5.1f%% of copy" % (x['op'],x['dtype'],x['rows'],x['cols'],str(x['config'])[:34],x.get('graph_median_us') or x['median_us'],x['pct_copy']))
PY
grep -E "^\| (softmax|layer_norm|rms_norm|reduce_scale) " $r/summary_few_rows.md | awk -F"|" '{print $2,$3,$4,$7,$(NF-3),$(NF-2),$(NF-1)}'
cd $OUT && tar czf r.tgz r
