#!/bin/bash
# One host: the small prototype build without its quick timings (as calls
# 6-10 ran), with them on a second stream or on the main loop's stream, and
# with a second stream merely touched; clocks logged every 20 ms.
set -u
[ -x dist/bin/kt_kernel_bench ] || { rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist; }
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,power.draw --format=csv,noheader -lms 20 > $r/smi.csv 2>&1 &
smi=$!
sleep 1
summ() {
python3 - $1 <<'PY'
import csv, sys, collections
best=collections.defaultdict(lambda: 1e9)
for row in csv.DictReader(open(sys.argv[1])):
    try: best[(int(row['rows']),row['variant'])]=min(best[(int(row['rows']),row['variant'])],float(row['flushed_us']))
    except Exception: pass
print(sys.argv[1].split('/')[-1], ' '.join('R%d lib m0 %.3f m4 %.3f copy %.3f |' % (R, best[(R,'v0')], best[(R,'v0m4')], best[(R,'v4')]) for R in (1,64)))
PY
}
run() { name=$1; shift; env "$@" LD_LIBRARY_PATH=$PWD/dist/lib timeout 100 pc/proto_rows64_small > $r/$name.csv 2> $r/$name.err; echo "$name rc=$?"; summ $r/$name.csv; grep "quick start " $r/$name.err | grep lib | head -2; }
run a_noquick PROTO_NO_QUICK=1
run copy_memset PROTO_NO_QUICK=1 PROTO_FIRST_MODE=4 PROTO_FIRST_MEMSET=1
run copy_memset_sync PROTO_NO_QUICK=1 PROTO_FIRST_MODE=4 PROTO_FIRST_MEMSET=1 PROTO_FIRST_SYNC=1
run copy_memset_on_stream PROTO_NO_QUICK=1 PROTO_FIRST_MODE=4 PROTO_FIRST_MEMSET_ST=1
run copy_memset_on_stream_sync PROTO_NO_QUICK=1 PROTO_FIRST_MODE=4 PROTO_FIRST_MEMSET_ST=1 PROTO_FIRST_SYNC=1
timeout 60 dist/bin/kt_kernel_bench --groups=few_rows --ops=reduce_scale --dtypes=float16 --rows=1,64 --cols=4096 --out=$r/kt.json > /dev/null 2>&1; echo "kt rc=$?"
python3 -c "
import json
print('kt_kernel_bench', [(x['rows'], round(x['graph_median_us'],3)) for x in json.load(open('$r/kt.json'))['results']])"
sleep 0.3; kill $smi
awk -F', ' '{print $2, $3}' $r/smi.csv | sort | uniq -c | sort -rn | head -5
cd $OUT && tar czf r.tgz r
