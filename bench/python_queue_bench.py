#!/usr/bin/env python3
"""The small Run from the Python client with torch tensors (issue 23).

A 1 x 1024 float16 softmax on CUDA tensors in a registered allocation, sent
back to back through the daemon's submission queue (the client's default)
into `out` (a prepared call: the same request again) and into a new tensor
each call, and over gRPC (use_queue=False), each series twice, alternating;
prints p50/p99 per series and writes them as JSON.

    python3 bench/python_queue_bench.py --socket=/tmp/kt.sock [--calls=3000] [--out=FILE]

Needs a running kerntuned on the GPU and kerntune's Python package on
PYTHONPATH (the bundle's python/).
"""

import argparse
import json
import statistics
import time

import torch

import kerntune


def series(client, x, out, calls):
    """Microseconds per Run, after 200 untimed ones; out=None: a new output
    tensor each call (a call the client cannot prepare)."""
    times = []
    for i in range(calls + 200):
        start = time.perf_counter()
        client.softmax(x, out=out)
        elapsed = (time.perf_counter() - start) * 1e6
        if i >= 200:
            times.append(elapsed)
    times.sort()
    return {"p50_us": statistics.median(times), "p99_us": times[int(0.99 * (len(times) - 1))],
            "calls": calls}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    # One allocation holding both tensors, registered: the Runs refer to it.
    storage = torch.empty(2 * 1024, dtype=torch.float16, device="cuda")
    x, out = storage[:1024].view(1, 1024), storage[1024:].view(1, 1024)
    x.copy_(torch.randn(1, 1024, device="cuda", dtype=torch.float16))
    torch.cuda.synchronize()
    want = torch.softmax(x.float(), dim=-1)
    results = {}
    with kerntune.Client("unix:" + args.socket) as queued, \
            kerntune.Client("unix:" + args.socket, use_queue=False) as grpc_only:
        buffers = [queued.register(storage), grpc_only.register(storage)]
        for round_ in (1, 2):
            for name, client, into in (("queue", queued, out), ("queue_new_out", queued, None),
                                       ("grpc", grpc_only, out)):
                out.zero_()
                result = series(client, x, into, args.calls)
                got = client.softmax(x) if into is None else out
                error = (got.float() - want).abs().max().item()
                if error > 1e-3:
                    raise SystemExit(f"{name}: wrong result, max error {error}")
                results[f"{name}_{round_}"] = result
                print(f"{name} (round {round_}): p50 {result['p50_us']:.1f} us, "
                      f"p99 {result['p99_us']:.1f} us")
        for buffer in buffers:
            buffer.close()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"shape": [1, 1024], "dtype": "float16", "torch": torch.__version__,
                       "series": results}, f, indent=1)


if __name__ == "__main__":
    main()
