#!/bin/bash
# Narrow rows and few rows x 4096: prototype (rows per access 1..8, two packs
# per lane), tuning of the points where the tuned kernel was not yet compared,
# and kernel + PyTorch benchmarks of those points in the same run.
set -u
rm -rf dist && mkdir -p dist && tar xzf dist-pack/kt.tar.gz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat dist-pack/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
xz -dkc dist-pack/proto_narrow.xz > /tmp/pn && chmod +x /tmp/pn
timeout 170 /tmp/pn > $r/proto_narrow.txt 2>&1; echo "proto rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "#1 |best r|variants" $r/proto_narrow.txt
cp dist-pack/tuned.db /tmp/tuned.db
OPS=softmax,layer_norm,rms_norm,reduce_scale
timeout 90 dist/bin/kerntune tune --db=/tmp/tuned.db --ops=$OPS --dtypes=float32,float16 --rows=1,8,64 --cols=4096 > $r/tune_few_rows_4096.txt 2>&1
echo "tune few rc=$? at $(( $(date +%s) - t0 )) s"; tail -2 $r/tune_few_rows_4096.txt
timeout 60 dist/bin/kerntune tune --db=/tmp/tuned.db --ops=$OPS --dtypes=float32,float16 --rows=49152 --cols=32,64,128 > $r/tune_main_narrow.txt 2>&1
echo "tune main rc=$? at $(( $(date +%s) - t0 )) s"; tail -2 $r/tune_main_narrow.txt
timeout 60 dist/bin/kerntune tune --db=/tmp/tuned.db --ops=softmax,scaled_masked_softmax --dtypes=float32,float16 --groups=attention > $r/tune_attention.txt 2>&1
echo "tune attention rc=$? at $(( $(date +%s) - t0 )) s"; tail -2 $r/tune_attention.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/tuned.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"
cp /tmp/tuned.db $r/tuned.db
timeout 70 dist/bin/kt_kernel_bench --groups=few_rows,main,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 \
   --cols=16,32,64,128,4096 --db=/tmp/tuned.db --commit="$(cat dist-pack/commit)" --out=$r/kernel_bench.json > $r/kernel_bench.log 2>&1
echo "kernel_bench rc=$? at $(( $(date +%s) - t0 )) s"
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
PYTHONUNBUFFERED=1 timeout 100 python3 dist/bin/torch_bench.py --groups few_rows --ops $OPS --dtypes float32,float16 --cols 4096 --out $r/torch_few_rows.json > $r/torch_few_rows.log 2>&1
echo "torch few rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 70 python3 dist/bin/torch_bench.py --groups main --ops $OPS --dtypes float32,float16 --cols 32,64,128 --out $r/torch_main.json > $r/torch_main.log 2>&1
echo "torch main rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 60 python3 dist/bin/torch_bench.py --groups attention --ops softmax,scaled_masked_softmax --dtypes float32,float16 --cols 16,32,64 --out $r/torch_attention.json > $r/torch_attention.log 2>&1
echo "torch attention rc=$? at $(( $(date +%s) - t0 )) s"
python3 - $r <<'PY'
import json,sys,os
r=sys.argv[1]
merged=None
for f in ('torch_few_rows.json','torch_main.json','torch_attention.json'):
    p=os.path.join(r,f)
    if os.path.exists(p):
        d=json.load(open(p))
        if merged is None: merged=d
        else: merged['results']+=d['results']
if merged: json.dump(merged, open(os.path.join(r,'torch_all.json'),'w'))
PY
python3 dist/bin/summarize.py $r/kernel_bench.json $r/torch_all.json > $r/summary.md 2>$r/summarize.err; echo "summarize rc=$?"
grep -E "^\| " $r/summary.md | awk -F'|' '{print $2,$3,$4,$5,$7,$(NF-2),$(NF-1)}' | head -90
mkdir -p $r/inductor_kernels; find /tmp/inductor -name "*.py" -size -60k -exec grep -l "triton_heuristics\|@triton.jit" {} \; 2>/dev/null | head -80 | xargs -r -I{} cp {} $r/inductor_kernels/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
