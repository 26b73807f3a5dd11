#!/usr/bin/env python3
"""PyTorch peer benchmark for kerntune: torch eager and torch.compile on the standard grid.

Times the PyTorch peers of kerntune's row-wise ops on the standard grid of
shared/PERF.md, on the GPU machine, in the same run as kerntune's own C++
benchmark, so that the two sets of figures share one copy roofline:

  softmax        torch.softmax(x, dim): the last axis, or dim 1 of an
                 (outer, dim, inner) tensor (axis group)
  log_softmax    torch.log_softmax(x, dim), likewise
  layer_norm     F.layer_norm(x, (cols,), weight, bias, eps=1e-5), with weight
                 and bias in the input dtype (kerntune's LayerNorm reads gamma
                 and beta too)
  rms_norm       F.rms_norm(x, (cols,), weight, eps=1e-6) (torch >= 2.4; else
                 x * rsqrt(mean(x^2) + eps) * weight, recorded as rms_norm_impl)
  reduce_scale   scale = x.abs().amax(dim=-1, keepdim=True); y = x / scale
  scaled_masked_softmax
                 torch.softmax(x * scale + mask, -1) on (batch 32, heads 64, s, s)
                 with an (s, s) additive mask in the input dtype (N(0, 1), 1 in 8
                 entries -inf, never on the diagonal) and scale 1/sqrt(s); with
                 --causal also x.masked_fill(triu(ones(s, s), 1), -inf)

each eagerly and under torch.compile(dynamic=False, fullgraph=True); with
--modes ...,kerntune also kerntune.torch's op, timed here as its peers are.

Grid (groups, as tuner/grid.h): "main" rows=49152 x cols 32..32768 and
"few_rows" rows {1,8,64} x cols {4096,32768,131072} for the row ops (softmax,
log_softmax, layer_norm, rms_norm, reduce_scale); "attention" (32*64*s, s)
for s in {16,...,512}: softmax and scaled_masked_softmax; "axis" (outer, dim,
inner) = (1, 128, 32768) and (512, 896, 48) (seed 001): softmax and
log_softmax along dim; "llm" rows {1,16,2048} x vocab {32000,50257,128256,151936}:
softmax and log_softmax over logits, and rows {1,64,8192} x hidden
{4096,5120,8192,12288}: layer_norm and rms_norm. Each in float32, float16 and bfloat16.

Method (PERF.md):
  * Roofline: a 1 GiB device-to-device copy (dst.copy_(src), uint8), counting
    read + write bytes, median of the repetitions; every figure is reported in
    GB/s (bytes moved / median time, 1 GB = 1e9 bytes) and as % of the copy.
    Bytes moved are kerntune's (tuner::PointBytes), so a GB/s ratio is a time
    ratio: input read + output written, plus gamma and beta reads for
    layer_norm, the weight for rms_norm, the mask for scaled_masked_softmax,
    and rows float32 scales for reduce_scale (mean/rstd are not counted: the
    forwards do not return them).
  * Timing, as kt_kernel_bench times kerntune (tuner/measure.h), two ways at
    every point, each with a spin kernel (torch.cuda._sleep) queued first so
    that every timed launch is queued before the GPU reaches it and host
    overhead (for torch.compile: guards and the Inductor wrapper) never
    shows as GPU time:
      - graph (the headline, graph_*): one CUDA graph of S = max(sets, 20)
        launches over the rotating sets, replayed between a pair of events,
        time divided by S; repetitions scaled down for long launches (at
        least 10, about 0.2 s of replays);
      - events (for reference, median_us, p10_us, p90_us, gbps): CUDA events
        around each launch after a warm-up.
    A failed capture gives graph_median_us = null.
  * The same-size copy, timed both ways on the same sets (x.clone(): the
    input read and written once), is each point's ceiling under the same
    method: copy_same_bytes_gbps and copy_same_bytes_graph_gbps, and
    graph_pct_copy_same = graph_gbps as % of the latter.
  * L2: inputs are random normal views into one pool; when one input/output
    set is under 256 MiB the views rotate over enough sets (at most 64) that
    sets * bytes >= 4 x L2 (L2 taken as at least 60 MB); outputs rotate with
    them (each is kept alive for a full turn). Sets that together stay under
    4 x L2 would be read from L2: then L2 is flushed (a 4 x L2 buffer read)
    before each timed launch and each replay, outside the events.
  * Correctness: each peer's output (both outputs of reduce_scale) is
    compared with the same op computed by torch in float64 on the GPU from
    the same input, before its time is trusted: pass when |out - ref| <= atol
    + rtol * |ref| everywhere, NaN only where the reference has NaN (float32
    1e-4; float16 2e-3 + 2e-3 rel; bfloat16 1.6e-2 + 1.6e-2 rel).
  * torch.compile: dynamo is reset before every (op, dtype, shape), errors are
    not suppressed and a recompile is an error, so a compiled figure can never
    silently be an eager one; the first call (compile + autotune) is timed on
    the wall clock and reported as compile_s (shorter when Inductor's on-disk
    cache already holds the kernel); a failure is recorded and the run goes on.
  * A point whose buffers do not fit in free GPU memory is skipped with the
    reason recorded.
  * Persisting L2 lines: before each timing (events and graph alike) the
    context's L2 lines left at evict_last priority are reset to normal
    (cudaCtxResetPersistingL2Cache, as tuner/measure.h does). Inductor's
    norm kernels read x with evict_last, and such lines outlast any amount
    of normal traffic: on the H100 a copy of the same buffer ran 3-4% faster
    after a compiled norm (bench/results/2026-11-27-h100-reread-l2-leak/).
  * One stream: once a process has done device work (8 launches are enough)
    on a second stream, every later launch can cost ~0.35 us more
    (tuner/measure.h). Like kt_kernel_bench, this tool launches everything on
    the current stream, the graph warm-up included, so the two compare in
    the same state ("streams": "one" in both JSON files).

Needs torch only to run: `--help` works without it.

Examples:
  python3 bench/torch_bench.py --out bench/results/torch.json
  python3 bench/torch_bench.py --quick --groups main --dtypes float16 --modes eager
  python3 bench/torch_bench.py --groups attention,axis --ops softmax,scaled_masked_softmax
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

OPS = ("softmax", "log_softmax", "layer_norm", "rms_norm", "reduce_scale",
       "scaled_masked_softmax")
DTYPES = ("float32", "float16", "bfloat16")
DTYPE_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
GROUPS = ("main", "few_rows", "attention", "axis", "llm")
MODES = ("eager", "compile", "kerntune")
DEFAULT_MODES = ("eager", "compile")

# The ops of each group (tuner/grid.h).
ROW_OPS = ("softmax", "log_softmax", "layer_norm", "rms_norm", "reduce_scale")
GROUP_OPS = {
    "main": ROW_OPS,
    "few_rows": ROW_OPS,
    "attention": ("softmax", "scaled_masked_softmax"),
    "axis": ("softmax", "log_softmax"),
    "llm": ("softmax", "log_softmax", "layer_norm", "rms_norm"),
}

MAIN_ROWS = 49152
MAIN_COLS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
FEW_ROWS = (1, 8, 64)
FEW_COLS = (4096, 32768, 131072)
ATTENTION_BATCH, ATTENTION_HEADS = 32, 64
ATTENTION_S = (16, 32, 64, 128, 512)
AXIS_SHAPES = ((1, 128, 32768), (512, 896, 48))  # (outer, dim, inner), seed 001
LLM_ROWS = (1, 16, 2048)
LLM_VOCABS = (32000, 50257, 128256, 151936)
LLM_LOGITS_OPS = ("softmax", "log_softmax")
LLM_NORM_ROWS = (1, 64, 8192)
LLM_HIDDEN = (4096, 5120, 8192, 12288)
LLM_NORM_OPS = ("layer_norm", "rms_norm")

LAYER_NORM_EPS = 1e-5
RMS_NORM_EPS = 1e-6
MASK_MASKED_FRACTION = 8  # 1 in 8 mask entries is -inf (kernels/verify.h)
# (atol, rtol) against the float64 reference.
TOLERANCE = {"float32": (1e-4, 0.0), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}

MIB = 1 << 20
COPY_BYTES = 1 << 30
L2_FLOOR_BYTES = 60 * 10**6
ROTATE_BELOW_BYTES = 256 * MIB
ALIGN_ELEMS = 128  # pool views start 256-byte aligned (inductor copies misaligned inputs)
GRAPH_LAUNCHES = 20  # at least; tuner/gpu_backend.cc kLaunchesPerGraph
MAX_ROTATION_SETS = 64  # tuner/gpu_backend.cc kMaxRotationSets
MIN_GRAPH_REPS = 10
GRAPH_BUDGET_US = 200_000  # replays per measurement: about this long
# The spin kernel before timed launches: cycles (~2 GHz) for the host to
# queue each repetition (a Python-level call, events, a flush), plus a base.
HOLD_BASE_CYCLES = 2_000_000
HOLD_CYCLES_PER_REP = 400_000
REF_CHUNK_BYTES = 256 * MIB  # float64 bytes per reference chunk
MEMORY_MARGIN_BYTES = 2 << 30

DEFAULT_REPS, DEFAULT_WARMUP = 100, 10
QUICK_REPS, QUICK_WARMUP = 20, 3

SHORT_NAMES = {
    "main": "main", "few_rows": "few", "attention": "attn", "axis": "axis", "llm": "llm",
    "softmax": "smax", "log_softmax": "lsmax", "layer_norm": "ln", "rms_norm": "rms",
    "reduce_scale": "rscl", "scaled_masked_softmax": "msmax",
    "float32": "f32", "float16": "f16", "bfloat16": "bf16",
}


def load_cudart():
    """The CUDA runtime torch loaded (ctypes): torch does not expose
    cudaCtxResetPersistingL2Cache."""
    import ctypes
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    sys.exit("torch_bench needs the CUDA runtime library (libcudart.so) to reset persisting L2 lines")


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
        description="Time PyTorch peers (eager and torch.compile) of kerntune's ops "
                    "(softmax, log_softmax, layer_norm, rms_norm, reduce_scale, "
                    "scaled_masked_softmax) on its standard grid (see shared/PERF.md).")
    p.add_argument("--ops", type=csv_list("ops", OPS), default=list(OPS),
                   help="comma list of ops (default: all)")
    p.add_argument("--dtypes", type=csv_list("dtypes", DTYPES), default=list(DTYPES),
                   help="comma list of dtypes (default: all)")
    p.add_argument("--groups", type=csv_list("groups", GROUPS), default=list(GROUPS),
                   help="comma list of grid groups (default: all)")
    p.add_argument("--rows", type=csv_ints, help="keep only points with these row counts")
    p.add_argument("--cols", type=csv_ints, help="keep only points with these column counts")
    p.add_argument("--modes", type=csv_list("modes", MODES), default=list(DEFAULT_MODES),
                   help="eager, compile, kerntune (kerntune.torch in this harness); "
                   "default: eager,compile")
    p.add_argument("--reps", type=int, help=f"timed repetitions (default {DEFAULT_REPS}, "
                                            f"--quick {QUICK_REPS})")
    p.add_argument("--warmup", type=int, help=f"warm-up launches (default {DEFAULT_WARMUP}, "
                                              f"--quick {QUICK_WARMUP})")
    p.add_argument("--quick", action="store_true", help="fewer repetitions, for smoke runs")
    p.add_argument("--causal", action="store_true",
                   help="scaled_masked_softmax: add the causal mask to the additive one "
                        "(as kt_kernel_bench --causal)")
    p.add_argument("--out", help="write the JSON results here (default: stdout summary only)")
    args = p.parse_args(argv)
    if args.reps is None:
        args.reps = QUICK_REPS if args.quick else DEFAULT_REPS
    if args.warmup is None:
        args.warmup = QUICK_WARMUP if args.quick else DEFAULT_WARMUP
    if args.reps < 1 or args.warmup < 0:
        p.error("--reps must be >= 1 and --warmup >= 0")
    return args


class Point:
    """One grid point: the kerntune view (rows, cols, inner) and the tensor torch sees."""

    def __init__(self, group, rows, cols, inner=1, ops=None):
        self.group, self.rows, self.cols, self.inner = group, rows, cols, inner
        self.group_ops = ops or GROUP_OPS[group]  # a group's points may hold some of its ops
        if inner > 1:
            self.shape, self.dim = (rows, cols, inner), 1  # softmax along the middle axis
        elif group == "attention":
            # (batch, heads, q, k) with q = k = s: the masked peer adds an (s, s) mask.
            self.shape = (ATTENTION_BATCH, ATTENTION_HEADS, cols, cols)
            self.dim = -1
        else:
            self.shape, self.dim = (rows, cols), -1
        self.elements = rows * cols * inner

    def ops(self, wanted):
        return [op for op in self.group_ops if op in wanted]


def grid_points(groups, rows_filter, cols_filter):
    """The points of the standard grid, restricted by the filters."""
    points = []
    if "main" in groups:
        points += [Point("main", MAIN_ROWS, c) for c in MAIN_COLS]
    if "few_rows" in groups:
        points += [Point("few_rows", r, c) for r in FEW_ROWS for c in FEW_COLS]
    if "attention" in groups:
        points += [Point("attention", ATTENTION_BATCH * ATTENTION_HEADS * s, s)
                   for s in ATTENTION_S]
    if "axis" in groups:
        points += [Point("axis", *shape) for shape in AXIS_SHAPES]
    if "llm" in groups:
        points += [Point("llm", r, v, ops=LLM_LOGITS_OPS) for r in LLM_ROWS for v in LLM_VOCABS]
        points += [Point("llm", r, h, ops=LLM_NORM_OPS) for r in LLM_NORM_ROWS for h in LLM_HIDDEN]
    return [p for p in points
            if (not rows_filter or p.rows in rows_filter)
            and (not cols_filter or p.cols in cols_filter)]


def bytes_moved(op, point, dtype, masked=True):
    """kerntune's bytes for the point (tuner::PointBytes): input read + output
    written, plus gamma and beta for layer_norm, the weight for rms_norm, the
    float32 scales for reduce_scale and the (s, s) mask for
    scaled_masked_softmax."""
    size = DTYPE_SIZE[dtype]
    moved = 2 * point.elements * size
    if op == "layer_norm":
        moved += 2 * point.cols * size
    if op == "rms_norm":
        moved += point.cols * size
    if op == "reduce_scale":
        moved += point.rows * 4
    if op == "scaled_masked_softmax" and masked:
        moved += point.cols * point.cols * size
    return moved


def rotation_sets(set_bytes, l2_bytes, free_bytes):
    """How many input/output sets to rotate over so repeated launches miss an
    L2 of l2_bytes (at most MAX_ROTATION_SETS: smaller sets get L2 flushes)."""
    if set_bytes >= ROTATE_BELOW_BYTES:
        return 1
    wanted = max(2, math.ceil(4 * l2_bytes / set_bytes))
    return max(2, min(wanted, MAX_ROTATION_SETS, free_bytes // (4 * set_bytes)))


def graph_reps(reps, launches, median_us):
    """Replays of a graph of `launches` launches of about median_us each:
    `reps`, fewer for long launches (GRAPH_BUDGET_US), never under
    MIN_GRAPH_REPS."""
    affordable = int(GRAPH_BUDGET_US / max(launches * median_us, 1e-3))
    return max(MIN_GRAPH_REPS, min(reps, affordable))


def percentiles(samples):
    """(p10, median, p90) of a list of floats."""
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    deciles = statistics.quantiles(samples, n=10, method="inclusive")
    return deciles[0], statistics.median(samples), deciles[8]


def make_peer(op, point, causal):
    """The PyTorch peer of `op` at `point`: fn(x, *extra), the extra tensors
    (weight, bias, mask) as make_extra gives them. Returns (fn, impl note)."""
    import torch
    import torch.nn.functional as F

    dim = point.dim
    if op == "softmax":
        return (lambda x: torch.softmax(x, dim)), None
    if op == "log_softmax":
        return (lambda x: torch.log_softmax(x, dim)), None
    if op == "layer_norm":
        return (lambda x, weight, bias: F.layer_norm(x, (x.shape[-1],), weight, bias,
                                                     eps=LAYER_NORM_EPS)), None
    if op == "rms_norm":
        if hasattr(F, "rms_norm"):
            return (lambda x, weight: F.rms_norm(x, (x.shape[-1],), weight,
                                                 eps=RMS_NORM_EPS)), "F.rms_norm"
        def rms_norm(x, weight):  # torch < 2.4: the usual composition
            rms = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + RMS_NORM_EPS)
            return (x.float() * rms).to(x.dtype) * weight
        return rms_norm, "rsqrt(mean(x^2) + eps) composition"
    if op == "reduce_scale":
        def reduce_scale(x):
            scale = x.abs().amax(dim=-1, keepdim=True)
            return x / scale, scale
        return reduce_scale, None
    if op == "scaled_masked_softmax":
        scale = 1.0 / math.sqrt(point.cols)
        if causal:
            upper = torch.ones(point.cols, point.cols, dtype=torch.bool,
                               device="cuda").triu(1)

            def masked_softmax(x, mask):
                return torch.softmax((x * scale + mask).masked_fill(upper, -math.inf), -1)
        else:
            def masked_softmax(x, mask):
                return torch.softmax(x * scale + mask, -1)
        return masked_softmax, None
    raise ValueError(op)


def import_kerntune_torch():
    """kerntune.torch: from the path, else from the bundle this script is in
    (<bundle>/bin/torch_bench.py beside <bundle>/python)."""
    try:
        import kerntune.torch as kt
    except ImportError:
        bundle_python = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
        if not os.path.isdir(os.path.join(bundle_python, "kerntune")):
            raise
        sys.path.insert(0, bundle_python)
        import kerntune.torch as kt
    return kt


def make_kerntune(op, point, causal):
    """kerntune.torch's op, called as make_peer's fn is (mode "kerntune":
    kerntune in this harness, beside its peers, for issue 48's decode sizes)."""
    kt = import_kerntune_torch()

    dim = point.dim
    if op == "softmax":
        return lambda x: kt.softmax(x, dim)
    if op == "log_softmax":
        return lambda x: kt.log_softmax(x, dim)
    if op == "layer_norm":
        return lambda x, weight, bias: kt.layer_norm(x, weight, bias, eps=LAYER_NORM_EPS)
    if op == "rms_norm":
        return lambda x, weight: kt.rms_norm(x, weight, eps=RMS_NORM_EPS)
    if op == "reduce_scale":
        def reduce_scale(x):
            y, scale = kt.reduce_scale(x)
            return y, scale.unsqueeze(-1)  # as the peer's keepdim amax
        return reduce_scale
    if op == "scaled_masked_softmax":
        scale = 1.0 / math.sqrt(point.cols)
        return lambda x, mask: kt.scaled_masked_softmax(x, mask, scale, causal)
    raise ValueError(op)


def make_extra(op, point, dtype):
    """The extra inputs of `op`: weights N(1, 0.5) / N(0, 0.5) and the mask."""
    import torch
    cols = point.cols
    if op == "layer_norm":
        return (1 + 0.5 * torch.randn(cols, dtype=dtype, device="cuda"),
                0.5 * torch.randn(cols, dtype=dtype, device="cuda"))
    if op == "rms_norm":
        return (1 + 0.5 * torch.randn(cols, dtype=dtype, device="cuda"),)
    if op == "scaled_masked_softmax":
        mask = torch.randn(cols, cols, dtype=torch.float32, device="cuda")
        masked = torch.randint(0, MASK_MASKED_FRACTION, (cols, cols), device="cuda") == 0
        masked.fill_diagonal_(False)  # every query keeps its own column, even causal
        return (mask.masked_fill(masked, -math.inf).to(dtype),)
    return ()


class InputRing:
    """Random-normal inputs of one shape: `sets` aligned views into one pool,
    used in turn. flush: the sets together fit in 4 x L2, so L2 is flushed
    before each timed launch."""

    def __init__(self, shape, dtype, sets, flush):
        import torch
        n = math.prod(shape)
        stride = -(-n // ALIGN_ELEMS) * ALIGN_ELEMS
        self.pool = torch.randn(sets * stride, dtype=dtype, device="cuda")
        self.xs = [self.pool[k * stride:k * stride + n].view(shape) for k in range(sets)]
        self.sets = sets
        self.flush = flush
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
        torch._dynamo.config.suppress_errors = False
        torch._dynamo.config.error_on_recompile = True
        props = torch.cuda.get_device_properties(0)
        self.l2_bytes = max(int(getattr(props, "L2_cache_size", 0)), L2_FLOOR_BYTES)
        # Reading 4 x L2 of float32 evicts every line the timed launches could reuse.
        self.flush_buf = torch.randn(self.l2_bytes, dtype=torch.float32, device="cuda")
        self.cudart = load_cudart()
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

    def reset_persisting_l2(self):
        """After the stream's work so far, returns L2 lines left at evict_last
        priority to normal, so that no earlier measurement's cache hints time
        the next (the module docstring's "Persisting L2 lines")."""
        self.torch.cuda.synchronize()
        err = self.cudart.cudaCtxResetPersistingL2Cache()
        if err != 0:
            raise RuntimeError(f"cudaCtxResetPersistingL2Cache failed: CUDA error {err}")

    def hold_stream(self, reps):
        """Queues a spin kernel long enough for the host to queue `reps`
        repetitions behind it (tuner/measure.h's SpinKernel)."""
        self.torch.cuda._sleep(HOLD_BASE_CYCLES + HOLD_CYCLES_PER_REP * reps)

    def time_launches(self, fn, ring, extra):
        """Per-launch times in us: events around each launch over the rotating sets."""
        torch = self.torch
        outs = [None] * ring.sets  # keeps each output alive for a full turn, so outputs rotate too
        self.reset_persisting_l2()
        for _ in range(self.args.warmup):
            k = ring.advance()
            outs[k] = fn(ring.xs[k], *extra)
        torch.cuda.synchronize()
        reps = self.args.reps
        starts, ends = self.events(reps), self.events(reps)
        self.hold_stream(reps)
        for r in range(reps):
            k = ring.advance()
            if ring.flush:
                self.flush_l2()
            starts[r].record()
            outs[k] = fn(ring.xs[k], *extra)
            ends[r].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    def flush_l2(self):
        self.flush_buf.sum()

    def time_graph(self, fn, ring, extra, median_us):
        """Per-launch times in us under replay of one graph of S = max(sets,
        GRAPH_LAUNCHES) launches over the rotating sets; median_us (the
        events figure) sets how many replays."""
        torch = self.torch
        launches = max(ring.sets, GRAPH_LAUNCHES)
        xs = [ring.xs[ring.advance()] for _ in range(launches)]
        # Warm up on the current stream, not a side one as the graph docs
        # suggest: work on a second stream can change every later launch's
        # cost (see "One stream" above). The op already ran here eagerly.
        self.reset_persisting_l2()
        fn(xs[0], *extra)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        outs = []
        with torch.cuda.graph(graph):
            for x in xs:
                out = fn(x, *extra)
                # Rotating sets keep their outputs (written in turn, as
                # kerntune's); one large set rewrites one output.
                if ring.sets > 1:
                    outs.append(out)
                del out
        for _ in range(max(self.args.warmup, 1)):
            graph.replay()
        torch.cuda.synchronize()
        reps = graph_reps(self.args.reps, GRAPH_LAUNCHES, median_us)
        starts, ends = self.events(reps), self.events(reps)
        self.hold_stream(reps)
        for r in range(reps):
            if ring.flush:
                self.flush_l2()
            starts[r].record()
            graph.replay()
            ends[r].record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) * 1e3 / launches for s, e in zip(starts, ends)]
        del graph, outs
        return times

    # --- correctness -------------------------------------------------------

    def check(self, fn, dtype, out, x, extra):
        """(max abs error or None if non-finite, passed) against the same peer in float64,
        by chunks of the leading dimension (every op reduces a later one)."""
        torch = self.torch
        atol, rtol = TOLERANCE[dtype]
        per_slice = max(1, x.numel() // x.shape[0])
        chunk = max(1, REF_CHUNK_BYTES // (per_slice * 8))
        extra64 = tuple(t.double() for t in extra)
        outs = out if isinstance(out, tuple) else (out,)
        worst, passed = 0.0, True
        for r0 in range(0, x.shape[0], chunk):
            refs = fn(x[r0:r0 + chunk].double(), *extra64)
            refs = refs if isinstance(refs, tuple) else (refs,)
            for got, ref in zip(outs, refs):
                got = got[r0:r0 + chunk].double()
                both_nan = got.isnan() & ref.isnan()
                diff = (got - ref).abs().nan_to_num(nan=math.inf).masked_fill(both_nan, 0)
                bound = atol + rtol * ref.abs().nan_to_num(nan=0.0, posinf=0.0)
                passed = passed and bool((diff <= bound).all())
                worst = max(worst, diff.max().item())
        return (worst if math.isfinite(worst) else None), passed

    # --- one measurement -----------------------------------------------------

    def measure(self, op, point, dtype, mode, ring, extra, result):
        """Fills `result` for one (op, dtype, mode) on the ring's shape."""
        torch = self.torch
        fn, impl = make_peer(op, point, self.args.causal)
        if impl:
            result["impl"] = impl
        reference = fn
        if mode == "kerntune":
            fn = make_kerntune(op, point, self.args.causal)
            result["impl"] = "kerntune.torch"
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
        result["max_abs_err"], result["passed"] = self.check(reference, dtype, out,
                                                             ring.xs[k], extra)
        del out

        p10, median, p90 = percentiles(self.time_launches(fn, ring, extra))
        moved = result["bytes"]
        result.update(median_us=round(median, 3), p10_us=round(p10, 3), p90_us=round(p90, 3),
                      gbps=round(moved / (median * 1e-6) / 1e9, 1))
        result["pct_copy"] = round(100 * result["gbps"] / self.copy_gbps, 1)
        try:
            graph_us = statistics.median(self.time_graph(fn, ring, extra, median))
            result["graph_median_us"] = round(graph_us, 3)
            result["graph_gbps"] = round(moved / (graph_us * 1e-6) / 1e9, 1)
        except Exception as exc:  # capture unsupported: keep the events figures
            result["graph_error"] = short_error(exc)
            torch.cuda.synchronize()

    def time_copy_same(self, ring):
        """(events, graph) median us of x.clone() on the ring: the point's
        input read and written once, timed as the peers are."""
        copy = self.torch.clone
        median = statistics.median(self.time_launches(copy, ring, ()))
        return median, statistics.median(self.time_graph(copy, ring, (), median))

    # --- grid --------------------------------------------------------------

    def new_result(self, point, op, dtype, mode):
        masked = op == "scaled_masked_softmax"
        return {"group": point.group, "op": op, "dtype": dtype, "rows": point.rows,
                "cols": point.cols, "inner": point.inner, "shape": list(point.shape),
                "dim": point.dim, "mask": masked,
                "causal": masked and self.args.causal,
                "mask_rows": point.cols if masked else 0,
                "bytes": bytes_moved(op, point, dtype), "mode": mode,
                "median_us": None, "p10_us": None, "p90_us": None,
                "graph_median_us": None, "graph_gbps": None, "gbps": None, "pct_copy": None,
                "copy_same_bytes_gbps": None, "copy_same_bytes_graph_gbps": None,
                "graph_pct_copy_same": None,
                "max_abs_err": None, "passed": None, "compile_s": None, "error": None,
                "graph_error": None}

    def run_point(self, point, dtype, ops, progress):
        """The point's ops and modes on one dtype, sharing one input ring."""
        torch = self.torch
        args = self.args
        size = DTYPE_SIZE[dtype]
        n = point.elements
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info()[0]
        sets = rotation_sets(2 * n * size, self.l2_bytes, free)
        # The graph's outputs: one per launch when the sets rotate.
        graph_bytes = max(sets, GRAPH_LAUNCHES) * n * size if sets > 1 else n * size
        need = ((2 * sets + 1) * n * size + graph_bytes + 6 * REF_CHUNK_BYTES
                + MEMORY_MARGIN_BYTES)
        skip = None
        copy_same = None
        if need > free:
            skip = f"skipped: needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        else:
            try:
                ring = InputRing(point.shape, getattr(torch, dtype), sets,
                                 flush=sets * 2 * n * size < 4 * self.l2_bytes)
                copy_same = self.time_copy_same(ring)
            except torch.OutOfMemoryError as exc:
                skip = f"skipped: {short_error(exc)}"

        for op in ops:
            for mode in args.modes:
                result = self.new_result(point, op, dtype, mode)
                if skip is not None:
                    result["error"] = skip
                else:
                    copied = 2 * n * size
                    result["copy_same_bytes_gbps"] = round(copied / copy_same[0] / 1e3, 1)
                    result["copy_same_bytes_graph_gbps"] = round(copied / copy_same[1] / 1e3, 1)
                    try:
                        extra = make_extra(op, point, getattr(torch, dtype))
                        self.measure(op, point, dtype, mode, ring, extra, result)
                        if result["graph_gbps"] is not None:
                            result["graph_pct_copy_same"] = round(
                                100 * result["graph_gbps"] / result["copy_same_bytes_graph_gbps"],
                                1)
                    except Exception as exc:
                        result["error"] = short_error(exc)
                        torch.cuda.empty_cache()
                self.results.append(result)
                log(f"[{next(progress)}] {format_progress(result)} (sets {sets})")


def point_text(r):
    inner = r.get("inner", 1)
    return f"{r['rows']}x{r['cols']}" + (f"x{inner}" if inner > 1 else "")


def format_progress(r):
    head = f"{r['group']} {r['op']} {r['dtype']} {point_text(r)} {r['mode']}:"
    if r["compile_s"] is not None:
        head += f" compile {r['compile_s']:.2f}s"
    if r["median_us"] is None:
        return f"{head} ERROR {r['error']}"
    err = "nan/inf" if r["max_abs_err"] is None else f"{r['max_abs_err']:.1e}"
    text = (f"{head} {r['median_us']:.2f}us (p10 {r['p10_us']:.2f} p90 {r['p90_us']:.2f}) "
            f"{r['gbps']:.0f} GB/s {r['pct_copy']:.0f}% err {err} "
            f"{'ok' if r['passed'] else 'FAIL'}")
    if r["graph_median_us"] is not None:
        text += (f" graph {r['graph_median_us']:.2f}us {r['graph_gbps']:.0f} GB/s "
                 f"{r['graph_pct_copy_same']:.0f}% of copy-same")
    elif r["graph_error"]:
        text += f" graph failed: {r['graph_error']}"
    return text


def format_table(results, copy_gbps):
    """One aligned line per (group, op, dtype, rows, cols): eager and compile GB/s."""
    by_key = {}
    for r in results:
        key = (r["group"], r["op"], r["dtype"], r["rows"], r["cols"], r.get("inner", 1))
        by_key.setdefault(key, {})[r["mode"]] = r

    def cell(r):
        if r is None:
            return "-"
        if r["gbps"] is None:
            return "skip" if (r["error"] or "").startswith("skipped") else "err"
        graph = r["graph_gbps"] is not None
        return (f"{r['graph_gbps'] if graph else r['gbps']:.0f}" + ("" if graph else "e")
                + ("" if r["passed"] else "!"))

    order = {name: i for names in (GROUPS, OPS, DTYPES) for i, name in enumerate(names)}
    lines = [f"GB/s under graph replay (copy roofline {copy_gbps:.0f} GB/s); 'e' = events "
             "figure (the capture failed), '!' = failed fp64 check, err/skip: see JSON",
             f"{'grp':<4} {'op':<5} {'dt':<4} {'rows':>7} {'cols':>6} {'inner':>6} "
             f"{'eager':>6} {'compl':>6}"]
    for key in sorted(by_key, key=lambda k: (order[k[0]], order[k[1]], order[k[2]], k[3], k[4],
                                             k[5])):
        group, op, dtype, rows, cols, inner = key
        modes = by_key[key]
        lines.append(f"{SHORT_NAMES[group]:<4} {SHORT_NAMES[op]:<5} {SHORT_NAMES[dtype]:<4} "
                     f"{rows:>7} {cols:>6} {inner:>6} {cell(modes.get('eager')):>6} "
                     f"{cell(modes.get('compile')):>6}")
    return "\n".join(lines)


def add_peer_harness_args(p):
    """The arguments the per-issue peer harnesses (llm_norm_peers.py,
    training_peers.py) share: repetitions, Liger's source, kerntune.torch's
    config source, the output; finish_peer_harness_args applies them."""
    p.add_argument("--reps", type=int, default=DEFAULT_REPS)
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--liger", default=".gpu/peers/liger/src",
                   help="the directory that holds Liger-Kernel's liger_kernel package")
    p.add_argument("--kerntune-db", help="the tuning store kerntune.torch takes configs "
                   "from (default: kerntune's; the shipped files after it)")
    p.add_argument("--kerntune-server", default="none",
                   help="the daemon kerntune.torch asks for configs (default none: the store)")
    p.add_argument("--out", help="write the JSON results here")
    p.add_argument("--dry-run", action="store_true",
                   help="list the planned runs (no torch, no GPU) and exit")


def print_dry_run(plan, row_text):
    """A peer harness's --dry-run: each planned run (row_text of its entry,
    whose last item is the reason it is skipped, or None), then the count."""
    for entry in plan:
        reason = entry[-1]
        print(row_text(entry) + (f"  skip: {reason}" if reason else ""))
    served = sum(1 for entry in plan if entry[-1] is None)
    print(f"{len(plan)} runs planned, {served} served")


def finish_peer_harness_args(p, args):
    if args.quick:
        args.reps, args.warmup = QUICK_REPS, QUICK_WARMUP
    args.causal = False  # PeerBench reads it
    if args.reps < 1 or args.warmup < 0:
        p.error("--reps must be >= 1 and --warmup >= 0")
    return args


def peer_harness_doc(tool, torch, copy_gbps, **fields):
    """A peer harness's JSON document: the machine and software, then fields."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    doc = {"tool": tool, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton_version, "cuda": torch.version.cuda,
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "copy_gbps": round(copy_gbps, 1), "streams": "one"}
    doc.update(fields)
    return doc


def run_peer_harness(bench, points, dtypes, runs, out, doc, started):
    """Runs bench.run_point over points x dtypes (the JSON rewritten after
    each), logs the summary and exits 1 when a served run failed."""
    progress = (f"{i}/{runs}" for i in range(1, runs + 1))
    for point in points:
        for dtype in dtypes:
            bench.run_point(point, dtype, progress)
            if out:
                write_json(out, doc)
    failed = [r for r in bench.results if r["passed"] is False
              or (r["error"] and not r["error"].startswith("not served"))]
    log(f"wall {time.perf_counter() - started:.0f}s; {len(bench.results)} records, "
        f"{len(failed)} failed or errored" + (f"; JSON: {out}" if out else ""))
    if failed:
        sys.exit(1)


def write_json(path, doc):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    points = grid_points(args.groups, args.rows, args.cols)
    if not any(p.ops(args.ops) for p in points):
        sys.exit("no grid points match the filters (each op runs in the groups of its kind: "
                 + "; ".join(f"{g}: {','.join(ops)}" for g, ops in GROUP_OPS.items()) + ")")

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
           "reps": args.reps, "warmup": args.warmup, "causal": args.causal,
           "streams": "one",
           "results": bench.results}
    runs = sum(len(p.ops(args.ops)) for p in points) * len(args.dtypes) * len(args.modes)
    log(f"{doc['gpu']} torch {doc['torch']} triton {doc['triton']} cuda {doc['cuda']}; "
        f"copy {bench.copy_gbps:.0f} GB/s; {len(points)} points x {len(args.dtypes)} dtypes, "
        f"{runs} (op, dtype, point, mode) runs; reps {args.reps} warmup {args.warmup}")

    progress = (f"{i}/{runs}" for i in range(1, runs + 1))
    for point in points:
        ops = point.ops(args.ops)
        if not ops:
            continue
        for dtype in args.dtypes:
            bench.run_point(point, dtype, ops, progress)
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
