#!/bin/bash
# block_regs (two-pass LayerNorm) + few-row heuristic + L2-flushed timing:
# suites, tuning and the PyTorch comparison at few rows x 4096, then part of
# the every-config sweep (SWEEP_FILTER).
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
F='*NarrowRowsAndBatched*:*SpecialValues*:*InPlace*:*Misaligned*:*NormsWithout*:*Illegal*:*BlockRowLoops*'
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter="$F" > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
timeout 60 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=5 > $r/special_values_repeat.log 2>&1
echo "special values x5 rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \] 18 tests" $r/special_values_repeat.log
timeout 60 dist/bin/kt_split_row_gpu_test --gtest_brief=1 > $r/split_row_gpu_test.log 2>&1
echo "split_row_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/split_row_gpu_test.log | head -3
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/daemon_gpu_test.log
OPS=softmax,layer_norm,rms_norm,reduce_scale
rm -f /tmp/t.db
timeout 100 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --rows=1,8,64 --cols=4096 > $r/tune_few_rows_4096.txt 2>&1; echo "tune few rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_few_rows_4096.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned.db
timeout 40 dist/bin/kt_kernel_bench --groups=few_rows --ops=$OPS --dtypes=float32,float16 --cols=4096 --db=/tmp/t.db --commit="$(cat pc/commit)" --out=$r/kernel_bench.json > $r/kernel_bench.log 2>&1
echo "kernel_bench rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 80 python3 dist/bin/torch_bench.py --groups few_rows --ops $OPS --dtypes float32,float16 --cols 4096 --out $r/torch_few_rows.json > $r/torch_few_rows.log 2>&1
echo "torch few rc=$? at $(( $(date +%s) - t0 )) s"
python3 dist/bin/summarize.py $r/kernel_bench.json $r/torch_few_rows.json > $r/summary.md 2>$r/summarize.err; echo "summarize rc=$?"
grep -E "^\| " $r/summary.md | awk -F'|' '{print $2,$3,$4,"heur",$7,$10,"tuned",$11,"peer",$(NF-2),$(NF-1)}'
left=$(( 570 - ($(date +%s) - t0) ))
timeout $left dist/bin/kt_kernels_gpu_test --gtest_filter="${SWEEP_FILTER}" > $r/kernels_gpu_sweep.log 2>&1
echo "sweep rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[ *(OK|FAILED) *\]|^\[sweep\]|^\[coverage\]|Failure" $r/kernels_gpu_sweep.log | head -40
cd $OUT && tar czf r.tgz r
