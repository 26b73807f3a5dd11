#!/bin/bash
# Which host-side work flips the per-launch state (state_probe.cu, torch_state.py).
set -u
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version --format=csv; date -u +%FT%TZ; } > $r/environment.txt; cat $r/environment.txt
p() { timeout 30 pc/state_probe "$@" >> $r/probe.txt 2>&1 || echo "rc=$? $*" >> $r/probe.txt; }
for rep in 1 2; do
  p none 64
  for t in memset_legacy memset_legacy_async memset_measuring memset_blocking memset_nonblocking_other memset_ptds memcpy_d2d_legacy memcpy_h2d_legacy memcpy_h2d_measuring memcpy_d2d_measuring kernel_legacy kernel_measuring malloc_free device_sync; do p $t 64; done
  p memset_legacy 64 newstream
  for n in 1 8 16 32 48 63 65 128; do p memset_legacy $n; done
  p kernel_legacy 1; p kernel_legacy 8
done
cat $r/probe.txt
for rep in 1 2; do for t in none fill_legacy randn_legacy zero_legacy h2d_legacy fill_side; do timeout 60 python3 pc/torch_state.py $t >> $r/torch.txt 2>&1 || echo "rc=$? $t" >> $r/torch.txt; done; done
cat $r/torch.txt
