#!/bin/bash
# block_regs + L2-flushed timing of small problems: the row-kernel suite
# without its full sweep, special values x3; tuning at few rows x 4096;
# tuned kernels and heuristic beside PyTorch at few rows (both flushed).
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
F='*NarrowRowsAndBatched*:*SpecialValues*:*InPlace*:*Misaligned*:*NormsWithout*:*Illegal*:*BlockRowLoops*'
timeout 170 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter="$F" > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
timeout 60 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=3 > $r/special_values_repeat.log 2>&1
echo "special values x3 rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \] 18 tests" $r/special_values_repeat.log
OPS=softmax,layer_norm,rms_norm,reduce_scale
rm -f /tmp/t.db
timeout 200 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --rows=1,8,64 --cols=4096 > $r/tune_few_rows_4096.txt 2>&1; echo "tune few rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_few_rows_4096.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned.db
timeout 40 dist/bin/kt_kernel_bench --groups=few_rows --ops=$OPS --dtypes=float32,float16 --cols=4096 --db=/tmp/t.db --commit="$(cat pc/commit)" --out=$r/kernel_bench.json > $r/kernel_bench.log 2>&1
echo "kernel_bench rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 80 python3 dist/bin/torch_bench.py --groups few_rows --ops $OPS --dtypes float32,float16 --cols 4096 --out $r/torch_few_rows.json > $r/torch_few_rows.log 2>&1
echo "torch few rc=$? at $(( $(date +%s) - t0 )) s"
python3 dist/bin/summarize.py $r/kernel_bench.json $r/torch_few_rows.json > $r/summary.md 2>$r/summarize.err; echo "summarize rc=$?"
grep -E "^\| " $r/summary.md | awk -F'|' '{print $2,$3,$4,$5,"heur",$7,$10,"tuned",$11,"peer",$(NF-2),$(NF-1)}'
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
if [ -n "$NCU" ]; then
timeout 90 $NCU --set full -k 'regex:Block' -c 15 -o $r/prof_kt pc/proto_ncu > $r/ncu_kt.log 2>&1; echo "ncu kt rc=$? at $(( $(date +%s) - t0 )) s"
timeout 60 $NCU -i $r/prof_kt.ncu-rep --page details --csv > $r/details_kt.csv 2>&1
timeout 60 $NCU -i $r/prof_kt.ncu-rep --page source --csv --print-source sass > $r/sass_kt.csv 2>&1; echo "sass rc=$?"
timeout 150 $NCU --set full --profile-from-start off -k 'regex:triton' -o $r/prof_torch python3 pc/torch_ln.py > $r/ncu_torch.log 2>&1; echo "ncu torch rc=$? at $(( $(date +%s) - t0 )) s"
timeout 60 $NCU -i $r/prof_torch.ncu-rep --page details --csv > $r/details_torch.csv 2>&1
timeout 60 $NCU -i $r/prof_torch.ncu-rep --page source --csv --print-source sass > $r/sass_torch.csv 2>&1
fi
cd $OUT && tar czf r.tgz r
