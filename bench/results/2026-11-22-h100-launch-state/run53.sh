#!/bin/bash
# Launch state A: both tools with --streams=one (few rows x 4096, narrow rows,
# attention), then ours and torch's attention with --streams=several, one host.
set -u
rm -rf dist && mkdir -p dist && tar xJf pc/kt.tar.xz -C dist
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; echo "commit: $(cat pc/commit)"; date -u +%FT%TZ; } > $r/environment.txt
cat $r/environment.txt
t0=$(date +%s)
. pc/bench_lib.sh
kb_all one
tb_all one
summ one
kb_all several
tb several attention --groups attention --ops softmax,scaled_masked_softmax --dtypes float32,float16 --cols 16,32,64
python3 pc/merge_json.py $r/tb_narrow_several.json $r/tb_attention_several.json
python3 dist/bin/summarize.py $r/kb_narrow_several.json $r/tb_narrow_several.json > $r/summary_attention_several.md 2>> $r/summarize.err
grep -A1 "behind the best peer:\|over the best peer:" $r/summary_attention_several.md | head -4
cat $r/summarize.err | head
