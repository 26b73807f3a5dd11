#!/bin/bash
# ReduceScale float16 at 1-128 rows x 4096: the library kernel, a minimal
# kernel and a copy of the same layout; PyTorch in the same run.
set -u
[ -x dist/bin/kt_kernel_bench ] || { rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist; }
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
LD_LIBRARY_PATH=$PWD/dist/lib timeout 200 pc/proto_rows64 > $r/proto_rows64.csv 2> $r/proto_rows64.err; echo "proto rc=$? at $(( $(date +%s) - t0 )) s"; grep -h "backend" $r/proto_rows64.err; grep DIFF $r/proto_rows64.csv | head
timeout 60 dist/bin/kt_kernel_bench --groups=few_rows --ops=reduce_scale --dtypes=float16 --rows=1,8,64,128 --cols=4096 --out=$r/kt_rs.json > $r/kt_rs.txt 2>&1; echo "kt bench rc=$?"
python3 -c "
import json,sys
for x in json.load(open('$r/kt_rs.json'))['results']: print('kt_kernel_bench', x['rows'], x['config'], x.get('graph_median_us'))
"
PYTHONUNBUFFERED=1 timeout 150 python3 dist/bin/torch_bench.py --groups few_rows --ops reduce_scale --dtypes float16 --rows 1,8,64,128 --cols 4096 --out $r/torch_rs.json > $r/torch_rs.txt 2>&1
echo "torch rc=$? at $(( $(date +%s) - t0 )) s"
python3 - $r <<'PY'
import csv, json, sys, collections
r=sys.argv[1]
best=collections.defaultdict(lambda: 1e9)
for row in csv.DictReader(open(r+'/proto_rows64.csv')):
    best[(int(row['rows']),row['variant'])]=min(best[(int(row['rows']),row['variant'])],float(row['flushed_us']))
tb={}
for x in json.load(open(r+'/torch_rs.json'))['results']:
    if not x.get('passed'): continue
    us=x.get('graph_median_us') or x['median_us']
    tb[x['rows']]=min(tb.get(x['rows'],1e9),us)
names=['lib b256','lib b512','min 512x1','min 256x2','copy 512x1','copy 256x2']
print('rows  '+'  '.join('%10s'%n for n in names)+'  torch best')
for R in (1,8,64,128):
    print('%4d  '%R+'  '.join('%10.3f'%best[(R,'v%d'%v)] for v in range(6))+'  %.3f'%tb.get(R,0))
print('harness modes (0: 20/sync, 1: 64/sync, 2: 20/queued, 3: 64/queued, 4: tuner TimeGraphReplay 64, 5: tuner TimeGraphReplay 20)')
for v,n in ((0,'lib b256'),(6,'Launch()'),(4,'copy 512x1')):
    for R in (1,8,64,128):
        print('%-10s %4d  '%(n,R)+'  '.join('m%d %7.3f'%(m,best[(R,'v%d'%v if m==0 else 'v%dm%d'%(v,m))]) for m in range(6)))
PY
PROTO_NORMAL=1 LD_LIBRARY_PATH=$PWD/dist/lib timeout 200 pc/proto_rows64 > $r/proto_rows64_normal.csv 2>&1; echo "proto normal rc=$?"
python3 - $r <<'PY'
import csv, sys, collections
r=sys.argv[1]
for f in ('proto_rows64.csv','proto_rows64_normal.csv'):
    best=collections.defaultdict(lambda: 1e9)
    for row in csv.DictReader(open(r+'/'+f)):
        best[(int(row['rows']),row['variant'])]=min(best[(int(row['rows']),row['variant'])],float(row['flushed_us']))
    print(f, ' '.join('R%d: lib %.3f m4 %.3f copy %.3f' % (R, best[(R,'v0')], best[(R,'v0m4')], best[(R,'v4')]) for R in (1,8,64,128)))
PY
cd $OUT && tar czf r.tgz r
