#!/bin/bash
# Does the tuner's backend leave the process slower? The same quick timings
# before and after GpuBackend::Create/Prepare/Measure, with the SM clock
# logged by nvidia-smi every 20 ms.
set -u
[ -x dist/bin/kt_kernel_bench ] || { rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist; }
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,clocks.max.sm,clocks.applications.graphics --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,power.draw --format=csv,noheader -lms 20 > $r/smi.csv 2>&1 &
smi=$!
sleep 1
PROTO_QUICK_ONLY=1 LD_LIBRARY_PATH=$PWD/dist/lib timeout 120 pc/proto_rows64 > $r/quick.csv 2> $r/quick.err; echo "quick rc=$?"
sleep 0.5; kill $smi
grep -E "quick|backend" $r/quick.err
python3 - $r <<'PY'
import sys, datetime
r=sys.argv[1]
rows=[l.strip().split(', ') for l in open(r+'/smi.csv') if l.count(',')>=4]
clk=[]
for x in rows:
    try:
        t=datetime.datetime.strptime(x[0],'%Y/%m/%d %H:%M:%S.%f').replace(tzinfo=datetime.timezone.utc).timestamp()
        clk.append((t,int(x[1].split()[0]),x[3]))
    except Exception: pass
print('smi samples', len(clk), 'sm clock min/max', min(c[1] for c in clk) if clk else None, max(c[1] for c in clk) if clk else None)
for l in open(r+'/quick.err'):
    if not l.startswith('quick'): continue
    t=int(l.split('t=')[1].split()[0])/1000.0
    near=[c for c in clk if abs(c[0]-t)<0.3]
    print(l.strip(), '| sm MHz near:', sorted(set(c[1] for c in near)), sorted(set(c[2] for c in near)))
PY
cd $OUT && tar czf r.tgz r
