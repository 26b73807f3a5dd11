#!/bin/bash
# Default configs before (b38028d) and after, then a slice of the full
# every-config sweep of kt_kernels_gpu_test (SWEEP_FILTER).
set -u
rm -rf dist && mkdir -p dist && tar xJf dist-pack/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat dist-pack/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
if [ "${DEFAULTS:-1}" = 1 ]; then
mkdir -p /tmp/old/bin /tmp/old/lib && cp dist/lib/* /tmp/old/lib/ && xz -dc dist-pack/libkt_kernels_b38028d.so.xz > /tmp/old/lib/libkt_kernels.so && cp dist-pack/kt_kernel_bench_b38028d /tmp/old/bin/kt_kernel_bench
OPS=softmax,layer_norm,rms_norm,reduce_scale
for i in 1 2; do
LD_LIBRARY_PATH=/tmp/old/lib timeout 40 /tmp/old/bin/kt_kernel_bench --groups=main,few_rows --ops=$OPS --dtypes=float32,float16 --commit=b38028d --out=$r/default_before_$i.json > $r/default_before_$i.log 2>&1; echo "before rc=$? at $(( $(date +%s) - t0 )) s"
timeout 40 dist/bin/kt_kernel_bench --groups=main,few_rows --ops=$OPS --dtypes=float32,float16 --commit="$(cat dist-pack/commit)" --out=$r/default_after_$i.json > $r/default_after_$i.log 2>&1; echo "after rc=$? at $(( $(date +%s) - t0 )) s"
done
python3 dist-pack/compare_defaults.py $r > $r/default_before_after.txt; tail -2 $r/default_before_after.txt
fi
timeout ${SWEEP_S:-450} dist/bin/kt_kernels_gpu_test --gtest_filter="${SWEEP_FILTER:-*EveryEnumeratedConfig*}" > $r/kernels_gpu_sweep.log 2>&1
echo "sweep rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\[ *(OK|FAILED) *\]|^\[sweep\]|^\[coverage\]|Failure" $r/kernels_gpu_sweep.log | head -60
cd $OUT && tar czf r.tgz r && rm -rf r
