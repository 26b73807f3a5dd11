#!/bin/bash
# What ends the launch state (reset probe); few rows x 4096/32768/131072
# tuned (one-stream tuner) beside PyTorch, all on one stream, final commit.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
for then in new_stream_1 new_stream_8 legacy_1 measuring_64 big_free; do PROBE_THEN=$then timeout 30 pc/state_probe memset_nonblocking_other 64 >> $r/reset.txt 2>&1; done
PROBE_THEN=other_1 timeout 30 pc/state_probe memset_nonblocking_other 64 >> $r/reset.txt 2>&1
PROBE_THEN=new_stream_1 timeout 30 pc/state_probe memset_legacy 64 >> $r/reset.txt 2>&1
grep -E "then|after1" $r/reset.txt | awk '{print $1, $4, $5, $6}'
echo "probes at $(( $(date +%s) - t0 )) s"
OPS=softmax,layer_norm,rms_norm,reduce_scale
rm -f /tmp/t.db
timeout 200 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16,bfloat16 --groups=few_rows > $r/tune_few_rows.txt 2>&1; echo "tune rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_few_rows.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned_few_rows.db
timeout 100 dist/bin/kt_kernel_bench --groups=few_rows --ops=$OPS --dtypes=float32,float16,bfloat16 --db=/tmp/t.db --commit="$(cat pc/commit)" --out=$r/kernel_bench_few_rows.json > $r/kernel_bench_few_rows.txt 2>&1
echo "kernel_bench rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 300 python3 dist/bin/torch_bench.py --groups few_rows --ops $OPS --dtypes float32,float16,bfloat16 --out $r/torch_few_rows.json > $r/torch_few_rows.txt 2>&1
echo "torch rc=$? at $(( $(date +%s) - t0 )) s"
python3 dist/bin/summarize.py $r/kernel_bench_few_rows.json $r/torch_few_rows.json > $r/summary_few_rows.md 2>$r/summarize.err; echo "summarize rc=$?"
grep -A12 "behind the best peer:\|over the best peer:\|split rows" $r/summary_few_rows.md | head -40
