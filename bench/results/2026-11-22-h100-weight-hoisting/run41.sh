#!/bin/bash
# 16-bit weights widened inside block_regs' row loop: the kernel suite
# without its sweep, special values x2, split rows, the daemon, the sweeps
# for the four 16-bit norm pairs; the 16-bit main grid against the copy.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
timeout 120 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='-*EveryEnumeratedConfigMatchesTheReference*' > $r/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[coverage|FAILED|PASSED|Failure" $r/kernels_gpu_test.log | head -20
timeout 60 dist/bin/kt_kernels_gpu_test --gtest_brief=1 --gtest_filter='*SpecialValues*' --gtest_repeat=2 > $r/special_values_repeat.log 2>&1
echo "special values x2 rc=$? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED  \]" $r/special_values_repeat.log
timeout 100 dist/bin/kt_split_row_gpu_test --gtest_brief=1 > $r/split_row_gpu_test.log 2>&1
echo "split rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/split_row_gpu_test.log | head -5
KERNTUNED_BINARY=$PWD/dist/bin/kerntuned timeout 60 dist/bin/kt_kerntuned_gpu_test --gtest_brief=1 > $r/daemon_gpu_test.log 2>&1
echo "daemon rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED" $r/daemon_gpu_test.log | head -3
for pair in layer_norm_float16 layer_norm_bfloat16 rms_norm_float16 rms_norm_bfloat16; do
  timeout 60 dist/bin/kt_kernels_gpu_test --gtest_filter="*EveryEnumeratedConfig*/$pair" > $r/sweep_$pair.log 2>&1
  echo "sweep $pair rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[sweep\]|Failure|^\[  FAILED" $r/sweep_$pair.log | head -3
done
timeout 150 dist/bin/kt_kernel_bench --groups=main --ops=layer_norm,rms_norm --dtypes=float16,bfloat16 --rows=49152 --cols=1024,4096,32768 --commit="$(cat pc/commit)" --out=$r/kernel_bench_main.json > $r/kernel_bench_main.log 2>&1
echo "kernel_bench main rc=$? at $(( $(date +%s) - t0 )) s"
python3 - $r <<'PY'
import json,sys
r=sys.argv[1]
d=json.load(open(r+'/kernel_bench_main.json'))
for x in d['results']:
    print("%-12s %-9s %6d x %-6d %-34s %8.2f us  %5.1f%% of copy" % (x['op'],x['dtype'],x['rows'],x['cols'],str(x['config'])[:34],x.get('graph_median_us') or x['median_us'],x['pct_copy']))
PY
timeout 150 pc/proto_xfirst > $r/proto_xfirst.csv 2> $r/proto_xfirst.err; echo "proto rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "MISMATCH|DIFFERS" $r/proto_xfirst.csv; tail -2 $r/proto_xfirst.err
python3 - $r <<'PY'
import csv, sys, collections
r=sys.argv[1]
best=collections.defaultdict(lambda: 1e9)
for row in csv.DictReader(open(r+'/proto_xfirst.csv')):
    k=(row['op'],row['dtype'],int(row['rows']),int(row['cols']),row['block'],row['variant'])
    best[k]=min(best[k],float(row['flushed_us']))
for k in sorted(set(k[:5] for k in best)):
    a=best[k+('v0',)]; b=best[k+('v1',)]; c=best[k+('v2',)]
    print("%-10s %-8s %6d x %-5d %-5s v0 %8.3f  v1 %8.3f (%.3fx)  v2 %8.3f (%.3fx)" % (k+(a,b,a/b,c,a/c)))
PY
cd $OUT && tar czf r.tgz r
