#!/usr/bin/env python3
"""PyTorch peer benchmark for kerntune: torch eager and torch.compile on the standard grid.

Times the PyTorch peers of kerntune's row-wise ops on the standard grid of
shared/PERF.md, on the GPU machine, in the same run as kerntune's own C++
benchmark, so that the two sets of figures share one copy roofline:

  softmax      torch.softmax(x, -1)
  log_softmax  torch.log_softmax(x, -1)
  layer_norm   F.layer_norm(x, (cols,), weight, bias, eps=1e-5), with weight
               and bias in the input dtype (kerntune's LayerNorm reads gamma
               and beta too)

each eagerly and under torch.compile(dynamic=False, fullgraph=True).

Grid (groups): "main" rows=49152 x cols 32..32768; "few_rows" rows {1,8,64} x
cols {4096,32768,131072}; "attention" (32*64*s, s) for s in {16,...,512}.
Every op runs on every point, in float32, float16 and bfloat16.

Method (PERF.md):
  * Roofline: a 1 GiB device-to-device copy (dst.copy_(src), uint8), counting
    read + write bytes, median of the repetitions; every figure is reported in
    GB/s (bytes moved / median time, 1 GB = 1e9 bytes) and as % of the copy.
    Bytes moved = input read + output written, plus gamma and beta reads for
    layer_norm (mean/rstd are not counted: the forward does not return them).
  * Timing: CUDA events around each launch after a warm-up; median, p10 and
    p90 over the repetitions. Launches go back to back, so for tiny points
    median_us includes host launch overhead (for torch.compile: guards and
    the Inductor wrapper); graph_median_us is the device time.
  * L2: inputs are random normal views into one pool; when one input/output
    set is under 256 MiB the views rotate over enough sets that
    sets * bytes >= 4 x L2 (L2 taken as at least 60 MB), so every launch reads
    from DRAM; outputs rotate with them (each is kept alive for a full turn).
  * Tiny points (median or ideal copy-speed time under --graph-below-us) are
    also timed under CUDA-graph replay: one graph of 20 launches on distinct
    inputs, L2 flushed by reading a 4 x L2 buffer before each replay, time
    divided by 20. A failed capture gives graph_median_us = null.
  * Correctness: each peer's output is compared with the same op computed by
    torch in float64 on the GPU from the same input, before its time is
    trusted: pass when |out - ref| <= atol + rtol * |ref| everywhere
    (float32 1e-4; float16 2e-3 + 2e-3 rel; bfloat16 1.6e-2 + 1.6e-2 rel).
  * torch.compile: dynamo is reset before every (op, dtype, shape), errors are
    not suppressed and a recompile is an error, so a compiled figure can never
    silently be an eager one; the first call (compile + autotune) is timed on
    the wall clock and reported as compile_s (shorter when Inductor's on-disk
    cache already holds the kernel); a failure is recorded and the run goes on.
    The full grid compiles 225 shapes, about 1 s each on a cold H100.
  * A point whose buffers do not fit in free GPU memory is skipped with the
    reason recorded.

Needs torch only to run: `--help` works without it.

Examples:
  python3 bench/torch_bench.py --out bench/results/torch.json
  python3 bench/torch_bench.py --quick --groups main --dtypes float16 --modes eager
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from datetime import datetime, timezone

OPS = ("softmax", "log_softmax", "layer_norm")
DTYPES = ("float32", "float16", "bfloat16")
DTYPE_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
GROUPS = ("main", "few_rows", "attention")
MODES = ("eager", "compile")

MAIN_ROWS = 49152
MAIN_COLS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
FEW_ROWS = (1, 8, 64)
FEW_COLS = (4096, 32768, 131072)
ATTENTION_S = (16, 32, 64, 128, 512)

LAYER_NORM_EPS = 1e-5
# (atol, rtol) against the float64 reference.
TOLERANCE = {"float32": (1e-4, 0.0), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}

MIB = 1 << 20
COPY_BYTES = 1 << 30
L2_FLOOR_BYTES = 60 * 10**6
ROTATE_BELOW_BYTES = 256 * MIB
ALIGN_ELEMS = 128  # pool views start 256-byte aligned (inductor copies misaligned inputs)
GRAPH_LAUNCHES = 20
REF_CHUNK_BYTES = 256 * MIB  # float64 bytes per reference chunk
MEMORY_MARGIN_BYTES = 2 << 30

DEFAULT_REPS, DEFAULT_WARMUP = 100, 10
QUICK_REPS, QUICK_WARMUP = 20, 3

SHORT_NAMES = {
    "main": "main", "few_rows": "few", "attention": "attn",
    "softmax": "smax", "log_softmax": "lsmax", "layer_norm": "ln",
    "float32": "f32", "float16": "f16", "bfloat16": "bf16",
}


def log(msg):
    print(msg, flush=True)


def short_error(exc):
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


def csv_list(kind, allowed):
    def parse(text):
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{kind}: choose from {','.join(allowed)}")
        return items
    return parse


def csv_ints(text):
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated integers")


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Time PyTorch peers (eager and torch.compile) of softmax, log_softmax "
                    "and layer_norm on kerntune's standard grid (see shared/PERF.md).")
    p.add_argument("--ops", type=csv_list("ops", OPS), default=list(OPS),
                   help="comma list of ops (default: all)")
    p.add_argument("--dtypes", type=csv_list("dtypes", DTYPES), default=list(DTYPES),
                   help="comma list of dtypes (default: all)")
    p.add_argument("--groups", type=csv_list("groups", GROUPS), default=list(GROUPS),
                   help="comma list of grid groups (default: all)")
    p.add_argument("--rows", type=csv_ints, help="keep only points with these row counts")
    p.add_argument("--cols", type=csv_ints, help="keep only points with these column counts")
    p.add_argument("--modes", type=csv_list("modes", MODES), default=list(MODES),
                   help="eager, compile or both (default: eager,compile)")
    p.add_argument("--reps", type=int, help=f"timed repetitions (default {DEFAULT_REPS}, "
                                            f"--quick {QUICK_REPS})")
    p.add_argument("--warmup", type=int, help=f"warm-up launches (default {DEFAULT_WARMUP}, "
                                              f"--quick {QUICK_WARMUP})")
    p.add_argument("--quick", action="store_true", help="fewer repetitions, for smoke runs")
    p.add_argument("--graph-below-us", type=float, default=20.0,
                   help="also time under CUDA-graph replay when the median or the ideal "
                        "copy-speed time is below this (default 20)")
    p.add_argument("--out", help="write the JSON results here (default: stdout summary only)")
    args = p.parse_args(argv)
    if args.reps is None:
        args.reps = QUICK_REPS if args.quick else DEFAULT_REPS
    if args.warmup is None:
        args.warmup = QUICK_WARMUP if args.quick else DEFAULT_WARMUP
    if args.reps < 1 or args.warmup < 0:
        p.error("--reps must be >= 1 and --warmup >= 0")
    return args


def grid_points(groups, rows_filter, cols_filter):
    """The (group, rows, cols) points of the standard grid, restricted by the filters."""
    points = []
    if "main" in groups:
        points += [("main", MAIN_ROWS, c) for c in MAIN_COLS]
    if "few_rows" in groups:
        points += [("few_rows", r, c) for r in FEW_ROWS for c in FEW_COLS]
    if "attention" in groups:
        points += [("attention", 32 * 64 * s, s) for s in ATTENTION_S]
    return [(g, r, c) for g, r, c in points
            if (not rows_filter or r in rows_filter) and (not cols_filter or c in cols_filter)]


def bytes_moved(op, rows, cols, dtype):
    """Input read + output written, plus gamma and beta for layer_norm."""
    size = DTYPE_SIZE[dtype]
    moved = 2 * rows * cols * size
    if op == "layer_norm":
        moved += 2 * cols * size
    return moved


def rotation_sets(set_bytes, l2_bytes, free_bytes):
    """How many input/output sets to rotate over so repeated launches miss an L2 of l2_bytes."""
    if set_bytes >= ROTATE_BELOW_BYTES:
        return 1
    wanted = max(2, math.ceil(4 * l2_bytes / set_bytes))
    return max(2, min(wanted, free_bytes // (4 * set_bytes)))


def percentiles(samples):
    """(p10, median, p90) of a list of floats."""
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    deciles = statistics.quantiles(samples, n=10, method="inclusive")
    return deciles[0], statistics.median(samples), deciles[8]


def build_peers():
    """The PyTorch peer of each op; each takes (x, weight, bias), weight/bias used by layer_norm."""
    import torch
    import torch.nn.functional as F

    def softmax(x, weight, bias):
        return torch.softmax(x, -1)

    def log_softmax(x, weight, bias):
        return torch.log_softmax(x, -1)

    def layer_norm(x, weight, bias):
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=LAYER_NORM_EPS)

    return {"softmax": softmax, "log_softmax": log_softmax, "layer_norm": layer_norm}


class InputRing:
    """Random-normal (rows, cols) inputs: `sets` aligned views into one pool, used in turn."""

    def __init__(self, rows, cols, dtype, sets):
        import torch
        n = rows * cols
        stride = -(-n // ALIGN_ELEMS) * ALIGN_ELEMS
        self.pool = torch.randn(sets * stride, dtype=dtype, device="cuda")
        self.xs = [self.pool[k * stride:k * stride + n].view(rows, cols) for k in range(sets)]
        self.sets = sets
        self._next = 0

    def advance(self):
        """Index of the next set in rotation."""
        k = self._next
        self._next = (k + 1) % self.sets
        return k


class PeerBench:
    """Runs the peers over the grid and collects one result dict per (point, op, dtype, mode)."""

    def __init__(self, args):
        import torch
        import torch._dynamo
        self.torch = torch
        self.args = args
        self.peers = build_peers()
        torch._dynamo.config.suppress_errors = False
        torch._dynamo.config.error_on_recompile = True
        props = torch.cuda.get_device_properties(0)
        self.l2_bytes = max(int(getattr(props, "L2_cache_size", 0)), L2_FLOOR_BYTES)
        # Reading 4 x L2 of float32 evicts every line the timed launches could reuse.
        self.flush_buf = torch.randn(self.l2_bytes, dtype=torch.float32, device="cuda")
        self.copy_gbps = None
        self.results = []

    # --- timing primitives -------------------------------------------------

    def events(self, n):
        return [self.torch.cuda.Event(enable_timing=True) for _ in range(n)]

    def measure_copy_gbps(self):
        """Median bandwidth of a 1 GiB device-to-device copy, read + write bytes."""
        torch = self.torch
        src = torch.randint(0, 256, (COPY_BYTES,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        torch.cuda.synchronize()
        reps = max(self.args.reps, 10)
        starts, ends = self.events(reps), self.events(reps)
        for r in range(reps):
            starts[r].record()
            dst.copy_(src)
            ends[r].record()
        torch.cuda.synchronize()
        median_ms = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
        del src, dst
        torch.cuda.empty_cache()
        return 2 * COPY_BYTES / (median_ms * 1e-3) / 1e9

    def time_launches(self, fn, ring, extra):
        """Per-launch times in us, back-to-back launches over the rotating sets."""
        torch = self.torch
        outs = [None] * ring.sets  # keeps each output alive for a full turn, so outputs rotate too
        for _ in range(self.args.warmup):
            k = ring.advance()
            outs[k] = fn(ring.xs[k], *extra)
        torch.cuda.synchronize()
        reps = self.args.reps
        starts, ends = self.events(reps), self.events(reps)
        for r in range(reps):
            k = ring.advance()
            starts[r].record()
            outs[k] = fn(ring.xs[k], *extra)
            ends[r].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    def flush_l2(self):
        self.flush_buf.sum()

    def time_graph(self, fn, ring, extra):
        """Median per-launch time in us under replay of a graph of GRAPH_LAUNCHES launches."""
        torch = self.torch
        xs = [ring.xs[ring.advance()] for _ in range(GRAPH_LAUNCHES)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up off the capture stream, as the graph docs advise
            fn(xs[0], *extra)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [fn(x, *extra) for x in xs]
        for _ in range(max(self.args.warmup, 1)):
            graph.replay()
        torch.cuda.synchronize()
        reps = self.args.reps
        starts, ends = self.events(reps), self.events(reps)
        for r in range(reps):
            self.flush_l2()
            starts[r].record()
            graph.replay()
            ends[r].record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) * 1e3 / GRAPH_LAUNCHES for s, e in zip(starts, ends)]
        del graph, outs
        return statistics.median(times)

    # --- correctness -------------------------------------------------------

    def check(self, op, dtype, out, x, extra):
        """(max abs error or None if non-finite, passed) against torch in float64, by row chunks."""
        torch = self.torch
        atol, rtol = TOLERANCE[dtype]
        rows, cols = x.shape
        chunk = max(1, REF_CHUNK_BYTES // (cols * 8))
        extra64 = tuple(None if t is None else t.double() for t in extra)
        worst, passed = 0.0, True
        for r0 in range(0, rows, chunk):
            ref = self.peers[op](x[r0:r0 + chunk].double(), *extra64)
            diff = (out[r0:r0 + chunk].double() - ref).abs().nan_to_num(nan=math.inf)
            passed = passed and bool((diff <= atol + rtol * ref.abs()).all())
            worst = max(worst, diff.max().item())
        return (worst if math.isfinite(worst) else None), passed

    # --- one measurement -----------------------------------------------------

    def measure(self, op, dtype, mode, ring, extra, result):
        """Fills `result` for one (op, dtype, mode) on the ring's shape."""
        torch = self.torch
        fn = self.peers[op]
        k = ring.advance()
        if mode == "compile":
            torch._dynamo.reset()
            fn = torch.compile(fn, dynamic=False, fullgraph=True)
            t0 = time.perf_counter()
            out = fn(ring.xs[k], *extra)
            torch.cuda.synchronize()
            result["compile_s"] = round(time.perf_counter() - t0, 3)
        else:
            out = fn(ring.xs[k], *extra)
        result["max_abs_err"], result["passed"] = self.check(op, dtype, out, ring.xs[k], extra)
        del out

        p10, median, p90 = percentiles(self.time_launches(fn, ring, extra))
        moved = bytes_moved(op, result["rows"], result["cols"], dtype)
        result.update(median_us=round(median, 3), p10_us=round(p10, 3), p90_us=round(p90, 3),
                      gbps=round(moved / (median * 1e-6) / 1e9, 1))
        result["pct_copy"] = round(100 * result["gbps"] / self.copy_gbps, 1)

        ideal_us = moved / (self.copy_gbps * 1e9) * 1e6
        if min(median, ideal_us) < self.args.graph_below_us:
            try:
                graph_us = self.time_graph(fn, ring, extra)
                result["graph_median_us"] = round(graph_us, 3)
                result["graph_gbps"] = round(moved / (graph_us * 1e-6) / 1e9, 1)
            except Exception as exc:  # capture unsupported: keep the launch figures
                result["graph_error"] = short_error(exc)
                torch.cuda.synchronize()

    # --- grid --------------------------------------------------------------

    def new_result(self, group, op, dtype, rows, cols, mode):
        return {"group": group, "op": op, "dtype": dtype, "rows": rows, "cols": cols,
                "mode": mode, "median_us": None, "p10_us": None, "p90_us": None,
                "graph_median_us": None, "graph_gbps": None, "gbps": None, "pct_copy": None,
                "max_abs_err": None, "passed": None, "compile_s": None, "error": None,
                "graph_error": None}

    def run_point(self, group, rows, cols, dtype, progress):
        """All ops and modes on one (rows, cols, dtype), sharing one input ring."""
        torch = self.torch
        args = self.args
        size = DTYPE_SIZE[dtype]
        n = rows * cols
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info()[0]
        sets = rotation_sets(2 * n * size, self.l2_bytes, free)
        graph_bytes = GRAPH_LAUNCHES * n * size if 2 * n * size < ROTATE_BELOW_BYTES else 0
        need = ((2 * sets + 1) * n * size + graph_bytes + 6 * REF_CHUNK_BYTES
                + MEMORY_MARGIN_BYTES)
        skip = None
        if need > free:
            skip = f"skipped: needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        else:
            try:
                ring = InputRing(rows, cols, getattr(torch, dtype), sets)
                weight = torch.randn(cols, dtype=getattr(torch, dtype), device="cuda")
                bias = torch.randn(cols, dtype=getattr(torch, dtype), device="cuda")
            except torch.OutOfMemoryError as exc:
                skip = f"skipped: {short_error(exc)}"

        for op in args.ops:
            extra = (weight, bias) if skip is None and op == "layer_norm" else (None, None)
            for mode in args.modes:
                result = self.new_result(group, op, dtype, rows, cols, mode)
                if skip is not None:
                    result["error"] = skip
                else:
                    try:
                        self.measure(op, dtype, mode, ring, extra, result)
                    except Exception as exc:
                        result["error"] = short_error(exc)
                        torch.cuda.empty_cache()
                self.results.append(result)
                log(f"[{next(progress)}] {format_progress(result)} (sets {sets})")


def format_progress(r):
    head = f"{r['group']} {r['op']} {r['dtype']} {r['rows']}x{r['cols']} {r['mode']}:"
    if r["compile_s"] is not None:
        head += f" compile {r['compile_s']:.2f}s"
    if r["median_us"] is None:
        return f"{head} ERROR {r['error']}"
    err = "nan/inf" if r["max_abs_err"] is None else f"{r['max_abs_err']:.1e}"
    text = (f"{head} {r['median_us']:.2f}us (p10 {r['p10_us']:.2f} p90 {r['p90_us']:.2f}) "
            f"{r['gbps']:.0f} GB/s {r['pct_copy']:.0f}% err {err} "
            f"{'ok' if r['passed'] else 'FAIL'}")
    if r["graph_median_us"] is not None:
        text += f" graph {r['graph_median_us']:.2f}us {r['graph_gbps']:.0f} GB/s"
    elif r["graph_error"]:
        text += f" graph failed: {r['graph_error']}"
    return text


def format_table(results, copy_gbps):
    """One aligned line per (group, op, dtype, rows, cols): eager and compile GB/s."""
    by_key = {}
    for r in results:
        by_key.setdefault((r["group"], r["op"], r["dtype"], r["rows"], r["cols"]), {})[r["mode"]] = r

    def cell(r):
        if r is None:
            return "-"
        if r["gbps"] is None:
            return "skip" if (r["error"] or "").startswith("skipped") else "err"
        return f"{r['gbps']:.0f}" + ("" if r["passed"] else "!")

    order = {name: i for names in (GROUPS, OPS, DTYPES) for i, name in enumerate(names)}
    lines = [f"GB/s (copy roofline {copy_gbps:.0f} GB/s); '!' = failed fp64 check, "
             "err/skip: see JSON; graph-replay figures in JSON",
             f"{'grp':<4} {'op':<5} {'dt':<4} {'rows':>7} {'cols':>6} {'eager':>6} {'compl':>6}"]
    for key in sorted(by_key, key=lambda k: (order[k[0]], order[k[1]], order[k[2]], k[3], k[4])):
        group, op, dtype, rows, cols = key
        modes = by_key[key]
        lines.append(f"{SHORT_NAMES[group]:<4} {SHORT_NAMES[op]:<5} {SHORT_NAMES[dtype]:<4} "
                     f"{rows:>7} {cols:>6} {cell(modes.get('eager')):>6} "
                     f"{cell(modes.get('compile')):>6}")
    return "\n".join(lines)


def write_json(path, doc):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    points = grid_points(args.groups, args.rows, args.cols)
    if not points:
        sys.exit("no grid points match the filters")

    import torch
    if not torch.cuda.is_available():
        sys.exit("torch_bench needs a CUDA GPU")
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    # Inductor repeats this notice for every long-row softmax it compiles.
    warnings.filterwarnings("ignore", message=r"\s*Online softmax is disabled")

    started = time.perf_counter()
    bench = PeerBench(args)
    bench.copy_gbps = bench.measure_copy_gbps()
    doc = {"tool": "torch_bench", "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "triton": triton_version, "cuda": torch.version.cuda,
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "copy_gbps": round(bench.copy_gbps, 1), "l2_bytes_assumed": bench.l2_bytes,
           "reps": args.reps, "warmup": args.warmup, "results": bench.results}
    log(f"{doc['gpu']} torch {doc['torch']} triton {doc['triton']} cuda {doc['cuda']}; "
        f"copy {bench.copy_gbps:.0f} GB/s; {len(points)} points x {len(args.dtypes)} dtypes x "
        f"{len(args.ops)} ops x {len(args.modes)} modes; reps {args.reps} warmup {args.warmup}")

    total = len(points) * len(args.dtypes) * len(args.ops) * len(args.modes)
    progress = (f"{i}/{total}" for i in range(1, total + 1))
    for group, rows, cols in points:
        for dtype in args.dtypes:
            bench.run_point(group, rows, cols, dtype, progress)
            if args.out:
                write_json(args.out, doc)

    compile_times = [r["compile_s"] for r in bench.results if r["compile_s"] is not None]
    failed = [r for r in bench.results if r["error"] or r["passed"] is False]
    log(f"\nwall {time.perf_counter() - started:.0f}s; compiled {len(compile_times)} shapes in "
        f"{sum(compile_times):.0f}s (max {max(compile_times, default=0):.1f}s); "
        f"{len(failed)} of {len(bench.results)} results failed or errored"
        + (f"; JSON: {args.out}" if args.out else ""))
    log(format_table(bench.results, bench.copy_gbps))


if __name__ == "__main__":
    main()
