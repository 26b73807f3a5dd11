# scratch: the cp.async norm prototype against torch.compile, same harness (torch_bench.py's).
import ctypes, json, statistics, sys, types
sys.path.insert(0, sys.argv[1])  # folder of torch_bench.py
import torch, torch_bench as tb
lib = ctypes.CDLL(sys.argv[2])
lib.pnorm.restype = ctypes.c_int
lib.pnorm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_void_p]
out_path = sys.argv[3]
ROWS = int(sys.argv[4]) if len(sys.argv) > 4 else 8192
hidden = [int(c) for c in sys.argv[5].split(",")] if len(sys.argv) > 5 else [4096, 5120, 8192, 12288]
args = types.SimpleNamespace(reps=30, warmup=5, causal=False, modes=["compile"])
pb = tb.PeerBench(args)
DT = {"float32": 0, "float16": 1, "bfloat16": 2}
lib.punroll.restype = ctypes.c_int
lib.punroll.argtypes = [ctypes.c_int] * 5 + [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_void_p]
lib.ptwo.restype = ctypes.c_int
lib.ptwo.argtypes = [ctypes.c_int] * 5 + [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_void_p]
CONFIGS = [("smem", b, 1, -1, 0) for b in (256, 512)]  # cp.async, one block per row
CONFIGS += [("two", b, 2, v, 0) for b in (512, 1024) for v in (8, 16)]
CONFIGS += [("unroll", b, v, 0, 0) for b in (256, 512, 1024) for v in (8, 16)]
results = []
def graph_us(fn, ring, extra):
    med = statistics.median(pb.time_launches(fn, ring, extra))
    return statistics.median(pb.time_graph(fn, ring, extra, med))
for cols in hidden:
    point = tb.Point("llm", ROWS, cols, ops=tb.LLM_NORM_OPS)
    for dtype in ("float32", "float16", "bfloat16"):
        tdt = getattr(torch, dtype)
        size = tb.DTYPE_SIZE[dtype]; n = point.elements
        torch.cuda.empty_cache()
        sets = tb.rotation_sets(2 * n * size, pb.l2_bytes, torch.cuda.mem_get_info()[0])
        ring = tb.InputRing(point.shape, tdt, sets, flush=sets * 2 * n * size < 4 * pb.l2_bytes)
        copy_ev, copy_graph = pb.time_copy_same(ring)
        copy_gbps = 2 * n * size / copy_graph / 1e3
        for op in ("layer_norm", "rms_norm"):
            extra = tb.make_extra(op, point, tdt)
            moved = tb.bytes_moved(op, point, dtype)
            ref, _ = tb.make_peer(op, point, False)
            torch._dynamo.reset()
            comp = torch.compile(ref, dynamic=False, fullgraph=True)
            comp(ring.xs[0], *extra); torch.cuda.synchronize()
            row = {"op": op, "dtype": dtype, "rows": ROWS, "cols": cols, "copy_same_graph_gbps": round(copy_gbps, 1)}
            tc = [graph_us(comp, ring, extra) for _ in range(2)]
            row["compile_us"] = [round(t, 3) for t in tc]
            ln = 1 if op == "layer_norm" else 0
            eps = tb.LAYER_NORM_EPS if ln else tb.RMS_NORM_EPS
            w = extra[0]; b = extra[1] if ln else extra[0]
            protos = {}
            for (kind, blk, nbuf, bps, st) in CONFIGS:
                occ = [0]
                def fn(x, *e, kind=kind, blk=blk, nbuf=nbuf, bps=bps, st=st):
                    y = torch.empty_like(x)
                    if kind == "smem":
                        occ[0] = lib.pnorm(ln, DT[dtype], blk, nbuf, bps, st, x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ROWS, cols, eps, torch.cuda.current_stream().cuda_stream)
                    elif kind == "unroll":
                        occ[0] = lib.punroll(ln, DT[dtype], blk, nbuf, bps, x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ROWS, cols, eps, torch.cuda.current_stream().cuda_stream)
                    else:
                        occ[0] = lib.ptwo(ln, DT[dtype], blk, nbuf, bps, x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ROWS, cols, eps, torch.cuda.current_stream().cuda_stream)
                    return y
                y = fn(ring.xs[0])
                torch.cuda.synchronize()
                if occ[0] <= 0:
                    protos[f"{kind}/b{blk}/{nbuf}/{bps}"] = {"error": occ[0]}; continue
                err, ok = pb.check(ref, dtype, y, ring.xs[0], extra)
                t = graph_us(fn, ring, extra)
                protos[f"{kind}/b{blk}/{nbuf}/{bps}"] = {"us": round(t, 3), "occ": occ[0], "ok": ok, "err": err}
            row["proto"] = protos
            good = {k: v for k, v in protos.items() if v.get("ok")}
            best = min(good, key=lambda k: good[k]["us"])
            tc.append(graph_us(comp, ring, extra))
            row["compile_us"].append(round(tc[-1], 3))
            row["best"] = best; row["best_us"] = good[best]["us"]
            row["ratio_vs_compile_best"] = round(min(tc) / good[best]["us"], 4)
            row["best_pct_copy"] = round(100 * moved / good[best]["us"] / 1e3 / copy_gbps, 1)
            row["compile_pct_copy"] = round(100 * moved / min(tc) / 1e3 / copy_gbps, 1)
            results.append(row)
            print(f"{op} {dtype} {ROWS}x{cols}: compile {row['compile_us']} ({row['compile_pct_copy']}%) proto best {best} {row['best_us']} ({row['best_pct_copy']}%) ratio {row['ratio_vs_compile_best']} fails {[k for k,v in protos.items() if v.get('ok') is False]} top {sorted(((v['us'],k) for k,v in protos.items() if v.get('ok')))[:4]}", flush=True)
        del ring
json.dump(results, open(out_path, "w"), indent=1)
