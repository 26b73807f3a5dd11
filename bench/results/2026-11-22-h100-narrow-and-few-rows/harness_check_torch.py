# PyTorch peers under the three graph-replay methods of proto_harness.cu.
import math, statistics, torch, torch.nn.functional as F
torch._dynamo.config.error_on_recompile = True
L2 = 50e6
flush = torch.empty(int(240e6) // 4, dtype=torch.float32, device="cuda").normal_()
def sets_for(nbytes):
    return max(1, min(64, math.ceil(4 * L2 / (2 * nbytes))))
def timed(fn, xs, extra, mode):
    launches = 20 if mode == "flushed" else max(len(xs), 20)
    seq = [xs[i % len(xs)] for i in range(launches)]
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(seq[0], *extra)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [fn(x, *extra) for x in seq]
    g.replay(); torch.cuda.synchronize()
    reps = 30
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * reps + 1)]
    us = []
    if mode == "steady":
        torch.cuda._sleep(2_000_000)
        ev[0].record()
        for r in range(reps):
            g.replay(); ev[r + 1].record()
        torch.cuda.synchronize()
        us = [ev[r].elapsed_time(ev[r + 1]) * 1e3 / launches for r in range(reps)]
    else:
        for r in range(reps):
            if mode == "flushed":
                flush.sum()
            ev[2 * r].record(); g.replay(); ev[2 * r + 1].record()
            torch.cuda.synchronize()
            us.append(ev[2 * r].elapsed_time(ev[2 * r + 1]) * 1e3 / launches)
    del g, outs
    return statistics.median(us)
cases = [
    ("softmax f32 32768x16", (32768, 16), torch.float32, lambda x: torch.softmax(x, -1), []),
    ("rms f32 49152x32", (49152, 32), torch.float32, lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps=1e-6), ["w"]),
    ("rms f16 49152x128", (49152, 128), torch.float16, lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps=1e-6), ["w"]),
    ("ln f32 64x4096", (64, 4096), torch.float32, lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5), ["w", "b"]),
    ("ln f32 8x4096", (8, 4096), torch.float32, lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5), ["w", "b"]),
    ("ln f32 1x4096", (1, 4096), torch.float32, lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5), ["w", "b"]),
]
for name, shape, dt, f, ex in cases:
    nbytes = math.prod(shape) * torch.finfo(dt).bits // 8
    sets = sets_for(nbytes)
    xs = [torch.randn(shape, dtype=dt, device="cuda") for _ in range(max(sets, 20))]
    extra = [torch.randn(shape[-1], dtype=dt, device="cuda") for _ in ex]
    for mode_name, fn in (("eager", f), ("compile", None)):
        if fn is None:
            torch._dynamo.reset(); fn = torch.compile(f, dynamic=False, fullgraph=True); fn(xs[0], *extra); torch.cuda.synchronize()
        r = {m: timed(fn, xs[:sets] if m != "flushed" else xs[:max(sets, 20)], extra, m) for m in ("steady", "sync", "flushed")}
        print(f"{name:24s} {mode_name:8s} sets {sets:2d} | us: steady {r['steady']:6.2f} sync {r['sync']:6.2f} flushed {r['flushed']:6.2f}", flush=True)
