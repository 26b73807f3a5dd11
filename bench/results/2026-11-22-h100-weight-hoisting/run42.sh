#!/bin/bash
# Few rows x 4096: tuning, then the tuned and default configs beside PyTorch
# (eager, torch.compile) in the same run, float32, float16 and bfloat16.
set -u
[ -x dist/bin/kt_kernel_bench ] || { rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist; }
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
OPS=softmax,layer_norm,rms_norm,reduce_scale
rm -f /tmp/t.db
timeout 170 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16,bfloat16 --rows=1,8,64 --cols=4096 > $r/tune_few_rows_4096.txt 2>&1; echo "tune rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_few_rows_4096.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned_few_rows.db
timeout 90 dist/bin/kt_kernel_bench --groups=few_rows --ops=$OPS --dtypes=float32,float16,bfloat16 --rows=1,8,64 --cols=4096 --db=/tmp/t.db --commit="$(cat pc/commit)" --out=$r/kernel_bench_few_rows.json > $r/kernel_bench_few_rows.log 2>&1
echo "kernel_bench few rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 240 python3 dist/bin/torch_bench.py --groups few_rows --ops $OPS --dtypes float32,float16,bfloat16 --rows 1,8,64 --cols 4096 --out $r/torch_few_rows.json > $r/torch_few_rows.log 2>&1
echo "torch rc=$? at $(( $(date +%s) - t0 )) s"
python3 dist/bin/summarize.py $r/kernel_bench_few_rows.json $r/torch_few_rows.json > $r/summary_few_rows.md 2>$r/summarize.err; echo "summarize rc=$?"
python3 pc/compare_few_rows.py $r > $r/few_rows_vs_pytorch.txt; cat $r/few_rows_vs_pytorch.txt
timeout 40 dist/bin/kt_kernel_bench --groups=main --ops=layer_norm,rms_norm --dtypes=float16,bfloat16 --rows=49152 --cols=1024 --commit="$(cat pc/commit)" --out=$r/kernel_bench_main_1024.json > $r/kernel_bench_main_1024.log 2>&1
echo "kernel_bench main 1024 rc=$? at $(( $(date +%s) - t0 )) s"
python3 - $r <<'PY'
import json,sys
for x in json.load(open(sys.argv[1]+'/kernel_bench_main_1024.json'))['results']:
    print("%-12s %-9s %6d x %-6d %-34s %8.2f us  %5.1f%% of copy" % (x['op'],x['dtype'],x['rows'],x['cols'],str(x['config'])[:34],x.get('graph_median_us') or x['median_us'],x['pct_copy']))
PY
cd $OUT && tar czf r.tgz r
