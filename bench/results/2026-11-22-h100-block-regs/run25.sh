#!/bin/bash
set -u
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; date -u +%FT%TZ; } > $r/environment.txt; cat $r/environment.txt
t0=$(date +%s)
timeout 200 pc/proto_regs2 > $r/proto_regs2.csv 2> $r/proto_regs2.err; echo "proto rc=$? at $(( $(date +%s) - t0 )) s"
/usr/local/cuda/bin/cuobjdump -sass pc/proto_regs2 2>&1 | xz -T4 > $r/sass.txt.xz; echo "sass rc=$?"
