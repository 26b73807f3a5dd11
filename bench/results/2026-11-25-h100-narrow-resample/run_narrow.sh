#!/bin/bash
# Narrow rows and attention beside PyTorch again, with the tuned store of
# 2026-11-22 (kernel version unchanged since), one stream, two samples of ours.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
OPS=softmax,layer_norm,rms_norm,reduce_scale
for i in 1 2; do
  timeout 90 dist/bin/kt_kernel_bench --groups=main,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 --cols=16,32,64,128 --db=pc/tuned_narrow.db --commit="$(cat pc/commit)" --out=$r/kernel_bench_$i.json > $r/kernel_bench_$i.txt 2>&1
  echo "kernel_bench $i rc=$? at $(( $(date +%s) - t0 )) s"
done
PYTHONUNBUFFERED=1 timeout 160 python3 dist/bin/torch_bench.py --groups main --ops $OPS --dtypes float32,float16 --cols 32,64,128 --out $r/torch_main.json > $r/torch_main.txt 2>&1
echo "torch main rc=$? at $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 130 python3 dist/bin/torch_bench.py --groups attention --ops softmax,scaled_masked_softmax --dtypes float32,float16 --cols 16,32,64 --out $r/torch_attention.json > $r/torch_attention.txt 2>&1
echo "torch attention rc=$? at $(( $(date +%s) - t0 )) s"
python3 pc/merge_json.py $r/torch_all.json $r/torch_main.json $r/torch_attention.json
for i in 1 2; do
  python3 dist/bin/summarize.py $r/kernel_bench_$i.json $r/torch_all.json > $r/summary_$i.md 2>$r/summarize_$i.err; echo "summarize $i rc=$?"
  grep -A12 "behind the best peer:" $r/summary_$i.md | head -14; grep "over the best peer:" $r/summary_$i.md
done
