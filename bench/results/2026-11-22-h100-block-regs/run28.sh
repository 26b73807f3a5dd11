#!/bin/bash
set -u
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; date -u +%FT%TZ; } > $r/environment.txt; cat $r/environment.txt
timeout 200 pc/proto_regs3 > $r/proto_regs3.csv 2> $r/proto_regs3.err; echo "proto rc=$?"
/usr/local/cuda/bin/cuobjdump -sass pc/proto_regs3 2>&1 | xz -T4 > $r/sass3.txt.xz
