#!/bin/bash
# Final: GPU tests; default configs before (c3ae088) and after; tuning of the
# few-rows, narrow main-grid and attention points; tuned kernels beside
# PyTorch at those points; the daemon's GPU test.
set -u
rm -rf dist && mkdir -p dist && tar xJf dist-pack/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat dist-pack/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
F='*NarrowRowsAndBatched*:*SpecialValues*:*InPlace*:*Misaligned*:*NormsWithout*:*Illegal*'
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter="$F" > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
mkdir -p /tmp/old/bin /tmp/old/lib && cp dist/lib/* /tmp/old/lib/ && xz -dc dist-pack/libkt_kernels_c3ae088.so.xz > /tmp/old/lib/libkt_kernels.so && cp dist-pack/kt_kernel_bench_c3ae088 /tmp/old/bin/kt_kernel_bench
OPS=softmax,layer_norm,rms_norm,reduce_scale
for i in 1 2; do
timeout 40 /tmp/old/bin/kt_kernel_bench --groups=main,few_rows,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 --commit=c3ae088 --out=$r/default_before_$i.json > $r/default_before_$i.log 2>&1; echo "before rc=$? at $(( $(date +%s) - t0 )) s"
timeout 40 dist/bin/kt_kernel_bench --groups=main,few_rows,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 --commit="$(cat dist-pack/commit)" --out=$r/default_after_$i.json > $r/default_after_$i.log 2>&1; echo "after rc=$? at $(( $(date +%s) - t0 )) s"
done
python3 dist-pack/compare_defaults.py $r > $r/default_before_after.txt; tail -2 $r/default_before_after.txt
rm -f /tmp/t.db
timeout 120 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --groups=few_rows > $r/tune_few_rows.txt 2>&1; echo "tune few rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_few_rows.txt
timeout 45 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --rows=49152 --cols=32,64,128 > $r/tune_main_narrow.txt 2>&1; echo "tune main rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_main_narrow.txt
timeout 50 dist/bin/kerntune tune --db=/tmp/t.db --ops=softmax,scaled_masked_softmax --dtypes=float32,float16 --groups=attention > $r/tune_attention.txt 2>&1; echo "tune attention rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_attention.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned.db
timeout 40 dist/bin/kt_kernel_bench --groups=few_rows,main,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 \
   --cols=16,32,64,128,4096,32768,131072 --db=/tmp/t.db --commit="$(cat dist-pack/commit)" --out=$r/kernel_bench.json > $r/kernel_bench.log 2>&1
echo "kernel_bench rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 110 python3 dist/bin/torch_bench.py --groups few_rows --ops $OPS --dtypes float32,float16 --out $r/torch_few_rows.json > $r/torch_few_rows.log 2>&1
echo "torch few rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 60 python3 dist/bin/torch_bench.py --groups main --ops $OPS --dtypes float32,float16 --cols 32,64,128 --out $r/torch_main.json > $r/torch_main.log 2>&1
echo "torch main rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 45 python3 dist/bin/torch_bench.py --groups attention --ops softmax,scaled_masked_softmax --dtypes float32,float16 --cols 16,32,64 --out $r/torch_attention.json > $r/torch_attention.log 2>&1
echo "torch attention rc=$? at $(( $(date +%s) - t0 )) s"
python3 - $r <<'PY'
import json,sys,os
r=sys.argv[1]; merged=None
for f in ('torch_few_rows.json','torch_main.json','torch_attention.json'):
    p=os.path.join(r,f)
    if os.path.exists(p):
        d=json.load(open(p))
        if merged is None: merged=d
        else: merged['results']+=d['results']
if merged: json.dump(merged, open(os.path.join(r,'torch_all.json'),'w'))
PY
python3 dist/bin/summarize.py $r/kernel_bench.json $r/torch_all.json > $r/summary.md 2>$r/summarize.err; echo "summarize rc=$?"
grep -E "^\| " $r/summary.md | awk -F'|' '{v=$(NF-1); gsub(/[ g]/,"",v); if (v+0>0 && v+0<1.0) print $2,$3,$4,$5,"heur",$10,"tuned",$11,"peer",$(NF-2),$(NF-1)}'
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/daemon_gpu_test.log
cd $OUT && tar czf r.tgz r && rm -rf r
