#!/bin/bash
# block_regs ReduceScale float16 with a compile-time full row (no per-pack
# predicates) against the library kernel and the minimal kernel, both states.
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
for R in (1,8,64,128):
    print(sys.argv[1].split('/')[-1], 'R%d lib %.3f full %.3f (%.3fx) min512x1 %.3f min256x2 %.3f copy %.3f' % (R, best[(R,'v0')], best[(R,'v1')], best[(R,'v0')]/best[(R,'v1')], best[(R,'v2')], best[(R,'v3')], best[(R,'v4')]))
PY
}
run() { name=$1; shift; env "$@" LD_LIBRARY_PATH=$PWD/dist/lib timeout 100 pc/proto_full > $r/$name.csv 2> $r/$name.err; echo "$name rc=$?"; grep DIFF $r/$name.csv | head -3; summ $r/$name.csv; }
run first_state PROTO_NO_QUICK=1
run after_trigger PROTO_NO_QUICK=1 PROTO_FIRST_MODE=4 PROTO_FIRST_MEMSET=1
cd $OUT && tar czf r.tgz r
