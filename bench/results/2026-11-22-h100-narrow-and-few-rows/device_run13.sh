#!/bin/bash
# Graph-replay method check (kt steady vs sync vs torch's flushed) on our
# kernels and on PyTorch's; split candidates from 4096 columns tuned.
set -u
rm -rf dist && mkdir -p dist && tar xzf dist-pack/kt.tar.gz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat dist-pack/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
xz -dkc dist-pack/proto_harness.xz > /tmp/ph && chmod +x /tmp/ph
timeout 120 /tmp/ph > $r/proto_harness.txt 2>&1; echo "proto rc=$? at $(( $(date +%s) - t0 )) s"; cat $r/proto_harness.txt
PYTHONUNBUFFERED=1 timeout 150 python3 dist-pack/torch_harness.py > $r/torch_harness.txt 2>&1; echo "torch rc=$? at $(( $(date +%s) - t0 )) s"; cat $r/torch_harness.txt | grep -v Warning
cp dist-pack/tuned12.db /tmp/t.db
OPS=softmax,layer_norm,rms_norm,reduce_scale
timeout 120 dist/bin/kerntune tune --db=/tmp/t.db --force --ops=$OPS --dtypes=float32,float16 --rows=1,8,64 --cols=4096 > $r/tune_few_rows_4096_split.txt 2>&1
echo "tune rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^[a-z_]+ +float" $r/tune_few_rows_4096_split.txt | tail -24; tail -2 $r/tune_few_rows_4096_split.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned.db
cd $OUT && tar czf r.tgz r && rm -rf r
