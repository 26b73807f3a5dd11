# Does ordinary PyTorch work on the legacy default stream put torch's process
# into the slower per-launch state? Times a Triton copy (graph of 20, L2
# flushed) on a side stream, before and after argv[1] done 64 times.
import statistics, sys, torch, triton, triton.language as tl

@triton.jit
def copy_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m), mask=m)

trig = sys.argv[1]
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    flush = torch.empty(50 * 2**20, device="cuda", dtype=torch.float32)
    sets = {name: ([torch.empty(n, device="cuda", dtype=dt) for _ in range(20)],
                   [torch.empty(n, device="cuda", dtype=dt) for _ in range(20)], blk, nw)
            for name, n, dt, blk, nw in (("1x4096h", 4096, torch.float16, 4096, 16),
                                         ("32768x16f", 32768 * 16, torch.float32, 1024, 4))}
torch.cuda.synchronize()

def time_graph(name):
    xs, ys, blk, nw = sets[name]
    fn = lambda x, y: copy_kernel[(triton.cdiv(x.numel(), blk),)](x, y, x.numel(), BLOCK=blk, num_warps=nw)
    with torch.cuda.stream(side):
        fn(xs[0], ys[0]); torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            for x, y in zip(xs, ys): fn(x, y)
        g.replay(); torch.cuda.synchronize()
        s = [torch.cuda.Event(enable_timing=True) for _ in range(41)]
        e = [torch.cuda.Event(enable_timing=True) for _ in range(41)]
        for i in range(41):
            flush.sum(); s[i].record(); g.replay(); e[i].record()
            torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 / len(xs) for a, b in zip(s, e))

def measure(when):
    print(f"torch {trig} {when} " + " ".join(f"{n} {time_graph(n):.3f}" for n in sets), flush=True)

measure("before1"); measure("before2")
buf = torch.empty(64, 2048, device="cuda")
for i in range(64):
    if trig == "fill_legacy": buf[i].fill_(1.0)
    elif trig == "randn_legacy": torch.randn(2048, device="cuda")
    elif trig == "zero_legacy": buf[i].zero_()
    elif trig == "h2d_legacy": buf[i].copy_(torch.ones(2048))
    elif trig == "fill_side":
        with torch.cuda.stream(side): buf[i].fill_(1.0)
    elif trig != "none": raise SystemExit("unknown " + trig)
torch.cuda.synchronize()
measure("after1"); measure("after2")
