import cProfile, pstats, sys, time, io
import torch, kerntune
sock = sys.argv[1]
def t(name, fn, n=3000):
    for _ in range(200): fn()
    ts = []
    for _ in range(n):
        a = time.perf_counter_ns(); fn(); ts.append(time.perf_counter_ns() - a)
    ts.sort()
    print("%-40s p50 %8.2f us  p99 %8.2f us" % (name, ts[len(ts)//2] / 1e3, ts[int(0.99*(len(ts)-1))] / 1e3), flush=True)
storage = torch.empty(2 * 1024, dtype=torch.float16, device="cuda")
x, out = storage[:1024].view(1, 1024), storage[1024:].view(1, 1024)
x.copy_(torch.randn(1, 1024, device="cuda", dtype=torch.float16))
y = torch.empty(1, 1024, dtype=torch.float16, device="cuda")
c = kerntune.Client("unix:" + sock)
t("softmax(x,out) unregistered", lambda: c.softmax(x, out=out))
t("softmax(x) new out unregistered", lambda: c.softmax(x))
buf = c.register(storage)
t("softmax(x,out) registered", lambda: c.softmax(x, out=out))
t("softmax(x) new out", lambda: c.softmax(x))
want = torch.softmax(x.float(), -1)
assert (c.softmax(x).float() - want).abs().max().item() < 1e-3
pr = cProfile.Profile(); pr.enable()
for _ in range(2000): c.softmax(x)
pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22); print(s.getvalue())
