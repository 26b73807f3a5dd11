#!/bin/bash
# ncu of our tuned warp kernel and torch.compile's for RMSNorm float32
# 49152 x 64 (and two more narrow points); torch.compile's generated code.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
t0=$(date +%s)
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind
for w in rms32 rms16 ln32; do
  TORCH_LOGS=output_code timeout 120 python3 pc/triton_peek.py $w > $r/code_$w.txt 2>&1
  timeout 120 ncu --kernel-name regex:triton --launch-skip 10 --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats python3 pc/triton_peek.py $w > $r/ncu_torch_$w.txt 2>&1
  echo "$w rc=$? at $(( $(date +%s) - t0 )) s"
done
for pt in "rms_norm float32 64" "rms_norm float16 128" "layer_norm float32 64"; do set -- $pt
  timeout 120 ncu --kernel-name regex:WarpRowKernel --launch-skip 30 --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats \
    dist/bin/kt_kernel_bench --groups=main --ops=$1 --dtypes=$2 --rows=49152 --cols=$3 --db=pc/tuned_narrow.db --reps=5 > $r/ncu_ours_$1_$2_$3.txt 2>&1
  echo "ours $pt rc=$? at $(( $(date +%s) - t0 )) s"
done
grep -h -E "^  [a-z_]+|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Waves Per SM|Theoretical Occ" $r/ncu_*.txt | head -120
