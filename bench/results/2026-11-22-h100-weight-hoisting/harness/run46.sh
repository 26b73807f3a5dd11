#!/bin/bash
# The same quick timings from two builds of one source on one host: with
# the tuner's backend linked in (and used), and without; kt_kernel_bench too.
set -u
[ -x dist/bin/kt_kernel_bench ] || { rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist; }
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
for round in 1 2; do
  PROTO_QUICK_ONLY=1 LD_LIBRARY_PATH=$PWD/dist/lib timeout 60 pc/proto_rows64_small > /dev/null 2> $r/small_$round.err; echo "small rc=$?"
  PROTO_QUICK_ONLY=1 LD_LIBRARY_PATH=$PWD/dist/lib timeout 60 pc/proto_rows64 > /dev/null 2> $r/big_$round.err; echo "big rc=$?"
  timeout 60 dist/bin/kt_kernel_bench --groups=few_rows --ops=reduce_scale --dtypes=float16 --rows=1,64 --cols=4096 --out=$r/kt_$round.json > /dev/null 2>&1; echo "kt rc=$?"
  for b in small big; do grep -h "quick start " $r/${b}_$round.err | sed "s/^/$b round $round: /"; grep -h "backend pass 1" $r/${b}_$round.err | sed "s/^/$b round $round: /"; done
  python3 -c "
import json
print('kt_kernel_bench round $round:', [(x['rows'], round(x['graph_median_us'],3), round(x['copy_same_bytes_graph_gbps'] or 0)) for x in json.load(open('$r/kt_$round.json'))['results']])"
done
cd $OUT && tar czf r.tgz r
