#!/bin/bash
# SASS and ncu of our block_regs 16-bit kernels and torch.compile's Triton
# kernels at few rows x 4096.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r/triton
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
CU=/usr/local/cuda/bin
$CU/cuobjdump -sass dist/lib/libkt_kernels.so > /tmp/all.sass 2>&1; echo "cuobjdump rc=$? $(wc -l < /tmp/all.sass) lines at $(( $(date +%s) - t0 )) s"
python3 - /tmp/all.sass $r <<'PY'
import re, sys
src, r = sys.argv[1], sys.argv[2]
keep = None; out = {}
for line in open(src):
    m = re.match(r'\s*Function : (\S+)', line)
    if m:
        fn = m.group(1); keep = None
        if 'BlockRegsRowKernel' in fn and 'Li8ELi256E' in fn and '6__half' in fn and 'Lb1E' in fn:
            for op in ('2', '3', '4'):
                if 'OpE%sE' % op in fn: keep = 'ours_op%s' % op
        if keep: out.setdefault(keep, []).append(line)
        continue
    if keep: out[keep].append(line)
for k, v in out.items():
    open('%s/%s.sass' % (r, k), 'w').writelines(v)
    print(k, len(v), v[0].strip()[:200])
PY
export TRITON_CACHE_DIR=$r/triton/cache
timeout 240 python3 pc/triton_sass.py > $r/triton/compile.log 2>&1; echo "triton rc=$? at $(( $(date +%s) - t0 )) s"; tail -3 $r/triton/compile.log
for f in $(find $TRITON_CACHE_DIR -name '*.cubin'); do $CU/cuobjdump -sass $f > ${f%.cubin}.sass 2>&1; done
find $TRITON_CACHE_DIR -name '*.sass' | head -20
which ncu || ls /usr/local/cuda/bin | grep -i ncu
NCU=$(which ncu 2>/dev/null || echo /usr/local/cuda/bin/ncu)
M=gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size,launch__grid_size,smsp__cycles_active.avg
for op in layer_norm rms_norm reduce_scale; do for rows in 1 64; do
  timeout 60 $NCU --metrics $M -k regex:BlockRegsRowKernel --launch-count 2 dist/bin/kt_kernel_bench --groups=few_rows --ops=$op --dtypes=float16 --rows=$rows --cols=4096 --out=/tmp/x.json > $r/ncu_ours_${op}_$rows.txt 2>&1; echo "ncu ours $op $rows rc=$? at $(( $(date +%s) - t0 )) s"
done; done
TRITON_CACHE_DIR=$r/triton/cache timeout 180 $NCU --metrics $M -k regex:triton --launch-count 40 python3 pc/triton_sass.py > $r/ncu_triton.txt 2>&1; echo "ncu triton rc=$? at $(( $(date +%s) - t0 )) s"
cat $r/ncu_ours_*.txt | grep -E "BlockRegs|gpu__time|inst_executed|registers|block_size|grid_size|cycles_active" | sed 's/  */ /g' | cut -c1-150 | head -80
grep -E "triton_|gpu__time|inst_executed|registers|block_size|grid_size|cycles_active" $r/ncu_triton.txt | sed 's/  */ /g' | cut -c1-150 | head -80
cd $OUT && tar czf r.tgz r
