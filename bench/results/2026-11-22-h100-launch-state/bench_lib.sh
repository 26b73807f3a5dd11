# Shared by run53.sh / run54.sh: kt_kernel_bench and torch_bench at one --streams setting.
OPS=softmax,layer_norm,rms_norm,reduce_scale
kb() { local st=$1 tag=$2; shift 2
  timeout 100 dist/bin/kt_kernel_bench --streams=$st --commit="$(cat pc/commit)" "$@" --out=$r/kb_${tag}_${st}.json > $r/kb_${tag}_${st}.txt 2>&1
  echo "kt_kernel_bench $tag $st rc=$? at $(( $(date +%s) - t0 )) s"; }
kb_all() { local st=$1
  kb $st few --groups=few_rows --ops=$OPS --dtypes=float32,float16,bfloat16 --rows=1,8,64 --cols=4096 --db=pc/tuned_few_rows.db
  kb $st narrow --groups=main,attention --ops=$OPS,scaled_masked_softmax --dtypes=float32,float16 --cols=16,32,64,128 --db=pc/tuned_narrow.db; }
tb() { local st=$1 tag=$2; shift 2
  PYTHONUNBUFFERED=1 timeout 150 python3 dist/bin/torch_bench.py --streams $st "$@" --out $r/tb_${tag}_${st}.json > $r/tb_${tag}_${st}.txt 2>&1
  echo "torch_bench $tag $st rc=$? at $(( $(date +%s) - t0 )) s"; }
tb_all() { local st=$1
  tb $st few --groups few_rows --ops $OPS --dtypes float32,float16,bfloat16 --rows 1,8,64 --cols 4096
  tb $st main --groups main --ops $OPS --dtypes float32,float16 --cols 32,64,128
  tb $st attention --groups attention --ops softmax,scaled_masked_softmax --dtypes float32,float16 --cols 16,32,64; }
summ() { local st=$1
  python3 pc/merge_json.py $r/tb_narrow_$st.json $r/tb_main_$st.json $r/tb_attention_$st.json
  python3 dist/bin/summarize.py $r/kb_few_$st.json $r/tb_few_$st.json > $r/summary_few_$st.md 2>> $r/summarize.err
  python3 dist/bin/summarize.py $r/kb_narrow_$st.json $r/tb_narrow_$st.json > $r/summary_narrow_$st.md 2>> $r/summarize.err
  for f in $r/summary_few_$st.md $r/summary_narrow_$st.md; do echo "== $f"; grep -A1 "behind the best peer:\|over the best peer:" $f | head -4; done; }
