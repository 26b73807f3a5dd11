#!/usr/bin/env python3
"""Host time per eager call: kerntune.torch's ops against torch's own (issue 48).

Issue 48 asks that a kerntune.torch op cost at most torch's own op launch
+ 1 us in eager mode. This times what the host spends per call: N calls in a
row on a small tensor (1 x 256 by default), wall time / N after a warm-up
and one synchronize at the end; the median of --repeats such loops is
reported. It measures the host only while each kernel's GPU time is shorter
than a call's host time (otherwise the GPU sets the pace): check a figure
near a kernel's graph-replay time (kt_kernel_bench) before reading it as
host overhead.

Pairs (kerntune's op: torch's op of the same work, one launch each where
torch has one):
  softmax        kt.softmax(x)              torch.softmax(x, -1)
  log_softmax    kt.log_softmax(x)          torch.log_softmax(x, -1)
  layer_norm     kt.layer_norm(x, w, b)     F.layer_norm(x, (cols,), w, b)
  rms_norm       kt.rms_norm(x, w)          F.rms_norm(x, (cols,), w)
  add_rms_norm   kt.add_rms_norm(x, r, w)   F.rms_norm(x, ...) (torch has no fused
                                            form: its one-launch norm is the bar)

  python3 bench/torch_overhead_bench.py --out overhead.json
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench as tb  # noqa: E402  (finds kerntune.torch in a bundle)


def loop_us(fn, calls, repeats, torch):
    for _ in range(max(calls // 10, 50)):  # warm-up: configs chosen, caches filled
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples), min(samples)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--cols", type=int, default=256)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as F
    kt = tb.import_kerntune_torch()

    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.rows, args.cols, device="cuda", dtype=dtype)
    w = torch.randn(args.cols, device="cuda", dtype=dtype)
    b = torch.randn(args.cols, device="cuda", dtype=dtype)
    r = torch.randn_like(x)
    shape = (args.cols,)
    pairs = {
        "softmax": (lambda: kt.softmax(x), lambda: torch.softmax(x, -1)),
        "log_softmax": (lambda: kt.log_softmax(x), lambda: torch.log_softmax(x, -1)),
        "layer_norm": (lambda: kt.layer_norm(x, w, b), lambda: F.layer_norm(x, shape, w, b)),
        "rms_norm": (lambda: kt.rms_norm(x, w), lambda: F.rms_norm(x, shape, w)),
        "add_rms_norm": (lambda: kt.add_rms_norm(x, r, w), lambda: F.rms_norm(x, shape, w)),
    }
    results = []
    for op, (mine, theirs) in pairs.items():
        kt_us, kt_min = loop_us(mine, args.calls, args.repeats, torch)
        torch_us, torch_min = loop_us(theirs, args.calls, args.repeats, torch)
        results.append({"op": op, "kerntune_us": round(kt_us, 3), "torch_us": round(torch_us, 3),
                        "kerntune_min_us": round(kt_min, 3), "torch_min_us": round(torch_min, 3),
                        "overhead_us": round(kt_us - torch_us, 3)})
        print("%-13s kerntune %6.2f us  torch %6.2f us  overhead %+5.2f us" %
              (op, kt_us, torch_us, kt_us - torch_us), flush=True)
    if args.out:
        doc = {"tool": "torch_overhead_bench", "gpu": torch.cuda.get_device_name(),
               "torch": torch.__version__, "rows": args.rows, "cols": args.cols,
               "dtype": args.dtype, "calls": args.calls, "repeats": args.repeats,
               "results": results}
        tb.write_json(args.out, doc)


if __name__ == "__main__":
    main()
