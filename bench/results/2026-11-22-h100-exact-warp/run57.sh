#!/bin/bash
# The warp kernel's exact instance (0.1.0+k8): GPU tests, narrow rows and
# attention tuned again and beside PyTorch, all on one stream.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='-*EveryEnumeratedConfigMatchesTheReference*' > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -8; grep "narrow+batched" $r/kernels_gpu_test.log | head -3
for pair in softmax_float32 rms_norm_float32 layer_norm_float16 scaled_masked_softmax_float16 reduce_scale_bfloat16; do
  timeout 60 dist/bin/kt_kernels_gpu_test --gtest_filter="*EveryEnumeratedConfig*/$pair" > $r/sweep_$pair.log 2>&1
  echo "sweep $pair rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[sweep\]|Failure|^\[  FAILED" $r/sweep_$pair.log | head -3
done
timeout 100 dist/bin/kt_split_row_gpu_test --gtest_brief=1 > $r/split_row_gpu_test.log 2>&1
echo "split rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/split_row_gpu_test.log | head -3
timeout 60 dist/bin/kt_axis_gpu_test --gtest_brief=1 > $r/axis_gpu_test.log 2>&1
echo "axis rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/axis_gpu_test.log | head -3
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/daemon_gpu_test.log | head -3
( cd $r && tar czf gpu_test_logs.tgz *.log && rm -f *.log )
OPS=softmax,layer_norm,rms_norm,reduce_scale
rm -f /tmp/t.db
timeout 90 dist/bin/kerntune tune --db=/tmp/t.db --ops=$OPS --dtypes=float32,float16 --rows=49152 --cols=32,64,128 > $r/tune_main_narrow.txt 2>&1; echo "tune main rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_main_narrow.txt
timeout 90 dist/bin/kerntune tune --db=/tmp/t.db --ops=softmax,scaled_masked_softmax --dtypes=float32,float16 --groups=attention > $r/tune_attention.txt 2>&1; echo "tune attention rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 $r/tune_attention.txt
python3 -c "import sqlite3; c=sqlite3.connect('/tmp/t.db'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()"; cp /tmp/t.db $r/tuned.db
timeout 60 dist/bin/kt_kernel_bench --groups=main,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 --cols=16,32,64,128 --db=/tmp/t.db --commit="$(cat pc/commit)" --out=$r/kernel_bench.json > $r/kernel_bench.txt 2>&1
echo "kernel_bench rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 150 python3 dist/bin/torch_bench.py --groups main --ops $OPS --dtypes float32,float16 --cols 32,64,128 --out $r/torch_main.json > $r/torch_main.txt 2>&1
echo "torch main rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 120 python3 dist/bin/torch_bench.py --groups attention --ops softmax,scaled_masked_softmax --dtypes float32,float16 --cols 16,32,64 --out $r/torch_attention.json > $r/torch_attention.txt 2>&1
echo "torch attention rc=$? at $(( $(date +%s) - t0 )) s"
python3 pc/merge_json.py $r/torch_all.json $r/torch_main.json $r/torch_attention.json
python3 dist/bin/summarize.py $r/kernel_bench.json $r/torch_all.json > $r/summary.md 2>$r/summarize.err; echo "summarize rc=$?"
grep -A12 "behind the best peer:" $r/summary.md | head -14; grep "over the best peer:" $r/summary.md
