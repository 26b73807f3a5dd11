#!/bin/bash
# The timers after the RepEvents refactor: flushed graph replay (few rows),
# plain launches (a main-grid point), tuning; figures beside run 5's.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
rm -f /tmp/t.db
timeout 100 dist/bin/kerntune tune --db=/tmp/t.db --ops=softmax,layer_norm,rms_norm,reduce_scale --dtypes=float32,float16 --rows=1,8,64 --cols=4096 > $r/tune_few_rows_4096.txt 2>&1; echo "tune rc=$?"; tail -1 $r/tune_few_rows_4096.txt
timeout 60 dist/bin/kt_kernel_bench --groups=few_rows,main --ops=softmax,layer_norm --dtypes=float16 --rows=1,64,49152 --cols=4096 --db=/tmp/t.db --out=$r/kernel_bench.json > $r/kernel_bench.log 2>&1; echo "bench rc=$?"
tail -12 $r/kernel_bench.log
cd $OUT && tar czf r.tgz r
