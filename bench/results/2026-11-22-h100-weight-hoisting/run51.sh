#!/bin/bash
# Narrow rows (49152 x 32/64/128) and the attention grid, tuned, beside
# PyTorch (eager, torch.compile) in the same run, at the session's kernels.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
OPS=softmax,layer_norm,rms_norm,reduce_scale
rm -f /tmp/t.db
timeout 60 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --rows=49152 --cols=32,64,128 > $r/tune_main_narrow.txt 2>&1; echo "tune main rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_main_narrow.txt
timeout 60 dist/bin/kerntune tune --db=/tmp/t.db --ops=softmax,scaled_masked_softmax --dtypes=float32,float16 --groups=attention > $r/tune_attention.txt 2>&1; echo "tune attention rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_attention.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned.db
timeout 60 dist/bin/kt_kernel_bench --groups=main,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 \
   --cols=16,32,64,128 --db=/tmp/t.db --commit="$(cat pc/commit)" --out=$r/kernel_bench.json > $r/kernel_bench.txt 2>&1
echo "kernel_bench rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 150 python3 dist/bin/torch_bench.py --groups main --ops $OPS --dtypes float32,float16 --cols 32,64,128 --out $r/torch_main.json > $r/torch_main.txt 2>&1
echo "torch main rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 120 python3 dist/bin/torch_bench.py --groups attention --ops softmax,scaled_masked_softmax --dtypes float32,float16 --cols 16,32,64 --out $r/torch_attention.json > $r/torch_attention.txt 2>&1
echo "torch attention rc=$? at $(( $(date +%s) - t0 )) s"
python3 - $r <<'PY'
import json,sys,os
r=sys.argv[1]; merged=None
for f in ('torch_main.json','torch_attention.json'):
    p=os.path.join(r,f)
    if os.path.exists(p):
        d=json.load(open(p))
        if merged is None: merged=d
        else: merged['results']+=d['results']
if merged: json.dump(merged, open(os.path.join(r,'torch_all.json'),'w'))
PY
python3 dist/bin/summarize.py $r/kernel_bench.json $r/torch_all.json > $r/summary.md 2>$r/summarize.err; echo "summarize rc=$?"
grep -A3 "best over the best peer\|behind the best peer" $r/summary.md | head -20
cd $OUT && tar czf r.tgz r
