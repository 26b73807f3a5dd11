# Scratch: does torch.compile's norm kernel leave L2 lines behind (evict_last) that speed up a later read of the same input?
import ctypes, sys, torch, torch.nn.functional as F
op, dtype, rows, cols = sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
x = torch.randn(rows, cols, device="cuda", dtype=dtype); w = torch.randn(cols, device="cuda", dtype=dtype); b = torch.randn(cols, device="cuda", dtype=dtype)
y2 = torch.empty_like(x)
f = torch.compile((lambda x: F.layer_norm(x, (cols,), w, b, eps=1e-5)) if op == "layer_norm" else (lambda x: F.rms_norm(x, (cols,), w, eps=1e-6)), dynamic=False, fullgraph=True)
for _ in range(3): f(x)
rt = None
for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
    try: rt = ctypes.CDLL(name); break
    except OSError: pass
def reset():
    torch.cuda.synchronize(); r = rt.cudaCtxResetPersistingL2Cache(); torch.cuda.synchronize(); return r
def graph_time(fn, launches=20, replays=30):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(); g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(launches): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(replays):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); e.record(); e.synchronize(); ts.append(a.elapsed_time(e) * 1000 / launches)
    ts.sort(); return ts[len(ts) // 2]
copy = lambda: y2.copy_(x)
print("reset", reset())
print(f"{op} {sys.argv[2]} {rows}x{cols}: copy clean {graph_time(copy):.2f}", end="")
print(f" | norm {graph_time(lambda: f(x)):.2f} | copy after norm {graph_time(copy):.2f}", end="")
reset(); print(f" | copy after reset {graph_time(copy):.2f} | norm after reset {graph_time(lambda: f(x)):.2f}")
