#!/bin/bash
# Few rows x 32768 under the L2-flushed timing: tuned and
# heuristic configs, the copy of the same bytes, PyTorch in the same run.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
OPS=softmax,layer_norm,rms_norm,reduce_scale
rm -f /tmp/t.db
timeout 300 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --rows=1,8 --cols=32768 > $r/tune_32768.txt 2>&1; echo "tune rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_32768.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned_32768.db
timeout 60 dist/bin/kt_kernel_bench --groups=few_rows --ops=$OPS --dtypes=float32,float16 --rows=1,8 --cols=32768 --db=/tmp/t.db --commit="$(cat pc/commit)" --out=$r/kernel_bench_32768.json > $r/kernel_bench_32768.log 2>&1
echo "kernel_bench rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 120 python3 dist/bin/torch_bench.py --groups few_rows --ops $OPS --dtypes float32,float16 --rows 1,8 --cols 32768 --out $r/torch_32768.json > $r/torch_32768.log 2>&1
echo "torch rc=$? at $(( $(date +%s) - t0 )) s"
python3 dist/bin/summarize.py $r/kernel_bench_32768.json $r/torch_32768.json > $r/summary_32768.md 2>$r/summarize.err; echo "summarize rc=$?"
grep -E "^\| " $r/summary_32768.md | awk -F"|" "{print \$2,\$3,\$4,\$10,\$11,\$12,\$(NF-2),\$(NF-1)}"
grep -iE "copy" $r/summary_32768.md | tail -25
cd $OUT && tar czf r.tgz r
