#!/bin/bash
# The small prototype build run whole: its quick timings (memset inputs)
# first, then the old main loop (inputs copied from the host).
set -u
[ -x dist/bin/kt_kernel_bench ] || { rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist; }
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
LD_LIBRARY_PATH=$PWD/dist/lib timeout 200 pc/proto_rows64_small > $r/small_full.csv 2> $r/small_full.err; echo "small rc=$?"
grep -h "quick" $r/small_full.err | grep lib
python3 - $r <<'PY'
import csv, sys, collections
r=sys.argv[1]
best=collections.defaultdict(lambda: 1e9)
for row in csv.DictReader(open(r+'/small_full.csv')):
    try: best[(int(row['rows']),row['variant'])]=min(best[(int(row['rows']),row['variant'])],float(row['flushed_us']))
    except Exception: pass
for R in (1,8,64,128):
    print('main loop R%d: lib m0 %.3f m4 %.3f  Launch() m4 %.3f  copy m0 %.3f' % (R, best[(R,'v0')], best[(R,'v0m4')], best[(R,'v6m4')], best[(R,'v4')]))
PY
cd $OUT && tar czf r.tgz r
