# Which per-launch state is PyTorch's process in? Times two copies of one
# row-block layout (torch's copy_ and a Triton kernel with 512 threads x 16 B,
# the prototype's "copy 512x1") the way torch_bench.py times its peers
# (graph of 20 launches, L2 flushed by a read before each replay), on the
# current (legacy default) stream and on a side stream.
import statistics, sys, torch, triton, triton.language as tl

@triton.jit
def copy_kernel(x, y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = row * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs))

flush = torch.empty(4 * 50 * 2**20 // 4, device="cuda", dtype=torch.float32)
def time_graph(fn, xs, ys, stream):
    with torch.cuda.stream(stream):
        fn(xs[0], ys[0]); torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for x, y in zip(xs, ys): fn(x, y)
        for _ in range(3): g.replay()
        torch.cuda.synchronize()
        s = [torch.cuda.Event(enable_timing=True) for _ in range(31)]
        e = [torch.cuda.Event(enable_timing=True) for _ in range(31)]
        for i in range(31):
            flush.sum(); s[i].record(); g.replay(); e[i].record()
        torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 / len(xs) for a, b in zip(s, e))

side = torch.cuda.Stream()
for rows in (1, 64):
    xs = [torch.randn(rows, 4096, device="cuda", dtype=torch.float16) for _ in range(20)]
    ys = [torch.empty_like(x) for x in xs]
    for sname, st in (("current", torch.cuda.current_stream()), ("side", side)):
        t_copy = time_graph(lambda x, y: y.copy_(x), xs, ys, st)
        t_tri = time_graph(lambda x, y: copy_kernel[(rows,)](x, y, BLOCK=4096, num_warps=16), xs, ys, st)
        print(f"torch probe rows {rows} stream {sname}: copy_ {t_copy:.3f} us, triton copy 512x1 {t_tri:.3f} us", flush=True)
