#!/bin/bash
# GPU tests of the batched block loads (batch 2 for 16-bit 8-packs) and the
# narrow/few-rows defaults; default configs before (c3ae088) and after;
# tuning of the few-rows, narrow main-grid and attention points.
set -u
rm -rf dist && mkdir -p dist && tar xJf dist-pack/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat dist-pack/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
F='*NarrowRowsAndBatched*:*SpecialValues*:*InPlace*:*Misaligned*:*NormsWithout*:*Illegal*'
timeout 200 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter="$F" > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
mkdir -p /tmp/old/bin /tmp/old/lib && cp dist/lib/* /tmp/old/lib/ && xz -dc dist-pack/libkt_kernels_c3ae088.so.xz > /tmp/old/lib/libkt_kernels.so && cp dist-pack/kt_kernel_bench_c3ae088 /tmp/old/bin/kt_kernel_bench
OPS=softmax,layer_norm,rms_norm,reduce_scale
for i in 1 2; do
timeout 60 /tmp/old/bin/kt_kernel_bench --groups=main,few_rows,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 --commit=c3ae088 --out=$r/default_before_$i.json > $r/default_before_$i.log 2>&1; echo "before rc=$? at $(( $(date +%s) - t0 )) s"
timeout 60 dist/bin/kt_kernel_bench --groups=main,few_rows,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 --commit="$(cat dist-pack/commit)" --out=$r/default_after_$i.json > $r/default_after_$i.log 2>&1; echo "after rc=$? at $(( $(date +%s) - t0 )) s"
done
python3 dist-pack/compare_defaults.py $r > $r/default_before_after.txt; tail -3 $r/default_before_after.txt
rm -f /tmp/t.db
timeout 150 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --groups=few_rows > $r/tune_few_rows.txt 2>&1; echo "tune few rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_few_rows.txt
timeout 60 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --rows=49152 --cols=32,64,128 > $r/tune_main_narrow.txt 2>&1; echo "tune main rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_main_narrow.txt
timeout 60 dist/bin/kerntune tune --db=/tmp/t.db --ops=softmax,scaled_masked_softmax --dtypes=float32,float16 --groups=attention > $r/tune_attention.txt 2>&1; echo "tune attention rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_attention.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned.db
cd $OUT && tar czf r.tgz r && rm -rf r
