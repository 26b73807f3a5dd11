#!/bin/bash
# Our copy floor in both process states, and PyTorch's copies timed in its own process.
set -u
[ -x dist/bin/kt_kernel_bench ] || { rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist; }
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
summ() {
python3 - $1 <<'PY'
import csv, sys, collections
best=collections.defaultdict(lambda: 1e9)
for row in csv.DictReader(open(sys.argv[1])):
    try: best[(int(row['rows']),row['variant'])]=min(best[(int(row['rows']),row['variant'])],float(row['flushed_us']))
    except Exception: pass
print(sys.argv[1].split('/')[-1], ' '.join('R%d lib m0 %.3f m4 %.3f copy512x1 m0 %.3f m2 %.3f |' % (R, best[(R,'v0')], best[(R,'v0m4')], best[(R,'v4')], best[(R,'v4m2')]) for R in (1,64)))
PY
}
run() { name=$1; shift; env "$@" LD_LIBRARY_PATH=$PWD/dist/lib timeout 100 pc/proto_rows64_small > $r/$name.csv 2> $r/$name.err; echo "$name rc=$?"; summ $r/$name.csv; }
run fast PROTO_NO_QUICK=1
run slow PROTO_NO_QUICK=1 PROTO_FIRST_MODE=4 PROTO_FIRST_MEMSET=1
timeout 200 python3 pc/torch_probe.py > $r/torch_probe.txt 2>&1; echo "torch probe rc=$?"; cat $r/torch_probe.txt | grep "torch probe" 
cd $OUT && tar czf r.tgz r
