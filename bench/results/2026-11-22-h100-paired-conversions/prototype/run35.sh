#!/bin/bash
# Paired float16 conversions in block_regs (prototype), their SASS size, and
# PyTorch's few-row float16 norms in the same run.
set -u
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; date -u +%FT%TZ; } > $r/environment.txt; cat $r/environment.txt
t0=$(date +%s)
timeout 200 pc/proto_h2 > $r/proto_h2.csv 2> $r/proto_h2.err; echo "proto rc=$? at $(( $(date +%s) - t0 )) s"
grep MISMATCH $r/proto_h2.csv
/usr/local/cuda/bin/cuobjdump -sass pc/proto_h2 > $r/proto_h2.sass 2>&1
python3 - $r/proto_h2.sass > $r/sass_counts.txt <<'PY'
import re, sys, collections
fn=None; counts=collections.OrderedDict(); ops={}
for line in open(sys.argv[1]):
    m=re.match(r'\s*Function : (\S+)', line)
    if m: fn=m.group(1); counts[fn]=0; ops[fn]=collections.Counter(); continue
    m=re.match(r'\s*/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)', line)
    if m and fn: counts[fn]+=1; ops[fn][m.group(1).split('.')[0]]+=1
for fn,c in counts.items():
    if 'BlockRegs' not in fn: continue
    top=", ".join("%s %d"%(k,v) for k,v in ops[fn].most_common(12))
    print(c, fn[:160]); print("   ", top)
PY
cat $r/sass_counts.txt | head -40
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
PYTHONUNBUFFERED=1 timeout 200 python3 dist/bin/torch_bench.py --groups few_rows --ops layer_norm,rms_norm,reduce_scale,softmax --dtypes float16 --cols 4096 --out $r/torch_few_rows.json > $r/torch_few_rows.log 2>&1
echo "torch rc=$? at $(( $(date +%s) - t0 )) s"
python3 - $r <<'PY'
import json,sys,csv,collections
r=sys.argv[1]
best=collections.defaultdict(lambda: 1e9)
for row in csv.DictReader(open(r+'/proto_h2.csv')):
    k=(row['op'],int(row['rows']),row['variant'])
    best[k]=min(best[k],float(row['flushed_us']))
try:
    t=json.load(open(r+'/torch_few_rows.json'))
    recs=t['results'] if isinstance(t,dict) and 'results' in t else t
except Exception as e:
    recs=[]; print('torch json', e)
tb={}
for x in recs:
    try:
        k=(x['op'],int(x['rows']))
        us=x.get('graph_median_us') or x['median_us']
        tb[k]=min(tb.get(k,1e9),us)
    except Exception: pass
for op in ['layer_norm','rms_norm','reduce_scale','softmax']:
    for R in [1,8,64]:
        a=best[(op,R,'per_element')]; b=best[(op,R,'paired_h2')]; t=tb.get((op,R))
        print("%-12s %3d  per_element %.3f  paired %.3f  (%.3fx)  torch best %s" % (op,R,a,b,a/b, "%.3f"%t if t else "?"))
PY
cd $OUT && tar czf r.tgz r
