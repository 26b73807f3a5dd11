#!/usr/bin/env python3
"""Peers of kerntune's LLM norm ops (issue 44) on the llm_norm grid, on the GPU machine.

Times, at the points of tuner/grid.h's "llm_norm" group, what an inference
engine would call instead of kerntune:

  eager, compile  the unfused PyTorch composites, eagerly and under
                  torch.compile(dynamic=False, fullgraph=True): r = x +
                  residual in the storage dtype, then F.rms_norm /
                  F.layer_norm of r, then (quant ops) vLLM's reference
                  quantization: per-row dynamic scales max(amax / qmax,
                  1 / (qmax * 512)) (vLLM's ref_dynamic_per_token_quant),
                  per-group (1 x group) scales (per_token_group_quant's
                  reference), or a static scale; codes = (y / scale)
                  clamped to +-qmax, cast (fp8) or rounded (int8).
  liger           Liger-Kernel's Triton fused_add_rms_norm_forward (and
                  rms_norm_forward), from a fetched source tree.
  kerntune        kerntune.torch, the in-process runtime's torch ops (the
                  node's configs: --kerntune-db, the shipped files), timed
                  by this same harness as its peers (issue 48).
  flashinfer      FlashInfer's include/flashinfer/norm.cuh kernels
                  (FusedAddRMSNorm, GemmaFusedAddRMSNorm, QKRMSNorm,
                  RMSNormQuant, FusedAddRMSNormQuant: static scales only;
                  LayerNormQuant static and its TensorRT-LLM kernel with
                  per-row dynamic scales), built here from bench/
                  llm_norm_flashinfer.cu with torch.utils.cpp_extension
                  against a fetched FlashInfer tree and called via ctypes.

Points (tuner/grid.h, llm_norm): add_rms_norm, add_layer_norm,
rms_norm_quant, layer_norm_quant, add_rms_norm_quant, add_layer_norm_quant
at rows {1, 16, 64, 512, 8192} x hidden {2048, ..., 16384}; rms_norm per
head: q of a fused [tokens, 3, 32, head_dim] qkv tensor, head_dim {64, 128,
256}, tokens {1, 16, 64, 512, 8192}, into a contiguous output.

Variants (the "variant" field): "plain" (the op as kerntune defines it),
"gemma" (RMSNorm with 1 + weight; add_rms_norm only), and for the quant
ops "<codes>/<scales>": fp8_e4m3/per_row (the group's representative: what
kt_kernel_bench times), fp8_e4m3/static (FlashInfer's quant kernels),
int8/per_row, fp8_e4m3/per_group128. A peer that cannot do a variant is
left out of it (FlashInfer has no dynamic RMSNorm quantization, Liger no
quantization or strided heads).

Method: bench/torch_bench.py's (imported: one copy roofline, the same CUDA
graph replay of max(sets, 20) launches over rotating input sets, the L2
flush for sets that fit in L2, the persisting-L2 reset, one stream); GB/s
by the bytes kerntune's op must move (tuner::PointBytes: x read, residual
read and written back, y written (one-byte codes), weights read, the scales
written or the static scale read; strided rows count their elements), so
every peer of a point shares one numerator. Before it is timed, each peer's
result is checked against float64 from the same inputs: y (dequantized
codes within one code step plus the storage rounding) and the residual
written back.

Output: a compact JSON, one record per (op, dtype, rows, cols, variant,
peer): median_us (graph replay), gbps, events_median_us, passed, error.

Examples:
  python3 bench/llm_norm_peers.py --dry-run
  python3 bench/llm_norm_peers.py --flashinfer .gpu/peers/flashinfer \\
      --liger .gpu/peers/liger/src --out llm_norm_peers.json
  python3 bench/llm_norm_peers.py --ops add_rms_norm --rows 1,8192 --peers eager,flashinfer
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench as tb  # noqa: E402  (the shared timing method)

FUSED_OPS = ("add_rms_norm", "add_layer_norm", "rms_norm_quant", "layer_norm_quant",
             "add_rms_norm_quant", "add_layer_norm_quant")
OPS = FUSED_OPS + ("rms_norm",)  # rms_norm: per head only
DTYPES = ("float16", "bfloat16", "float32")
PEERS = ("eager", "compile", "liger", "flashinfer", "kerntune")
QUANT_VARIANTS = ("fp8_e4m3/per_row", "fp8_e4m3/static", "int8/per_row", "fp8_e4m3/per_group128")
VARIANTS = ("plain", "gemma") + QUANT_VARIANTS
DEFAULT_VARIANTS = ("plain", "fp8_e4m3/per_row", "fp8_e4m3/static")

# tuner/grid.h's llm_norm group.
ROWS = (1, 16, 64, 512, 8192)
HIDDEN = (2048, 4096, 5120, 7168, 8192, 12288, 16384)
HEAD_TOKENS = (1, 16, 64, 512, 8192)
HEADS = 32
HEAD_DIMS = (64, 128, 256)

EPS = 1e-6
QMAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0, "int8": 127.0}
FI_DTYPE = {"float16": 0, "bfloat16": 1}
FI_QUANT = {"fp8_e4m3": 0, "fp8_e5m2": 1, "int8": 2}
FI_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm_norm_flashinfer.cu")


class Point:
    """One llm_norm point: (rows, cols), per_head for the QK-norm points."""

    def __init__(self, op, rows, cols, per_head=False):
        self.op, self.rows, self.cols, self.per_head = op, rows, cols, per_head
        self.tokens = rows // HEADS if per_head else rows

    def name(self):
        return f"{self.op} {self.rows}x{self.cols}" + (" per_head" if self.per_head else "")


def grid_points(ops, rows_filter=None, cols_filter=None):
    points = []
    for op in ops:
        if op == "rms_norm":
            points += [Point(op, t * HEADS, d, per_head=True) for t in HEAD_TOKENS
                       for d in HEAD_DIMS]
        else:
            points += [Point(op, r, h) for r in ROWS for h in HIDDEN]
    # Per-head points are filtered by their token count.
    return [p for p in points if (not rows_filter or p.tokens in rows_filter)
            and (not cols_filter or p.cols in cols_filter)]


def is_quant(op):
    return op.endswith("_quant")


def adds_residual(op):
    return op.startswith("add_")


def is_layer_norm(op):
    return "layer_norm" in op


def parse_variant(variant):
    """("fp8_e4m3", "per_row", 0) for "fp8_e4m3/per_row"; group size for per_group."""
    codes, scales = variant.split("/")
    group = int(scales[len("per_group"):]) if scales.startswith("per_group") else 0
    return codes, ("per_group" if group else scales), group


def variants_of(point, wanted):
    if is_quant(point.op):
        return [v for v in wanted if v in QUANT_VARIANTS]
    if point.op == "add_rms_norm":
        return [v for v in wanted if v in ("plain", "gemma")]
    return ["plain"] if "plain" in wanted else []


def bytes_moved(point, dtype, variant):
    """tuner::PointBytes of the point (kernels::MinimumBytesMoved)."""
    size = tb.DTYPE_SIZE[dtype]
    n = point.rows * point.cols
    moved = n * size  # x
    moved += n * (1 if is_quant(point.op) else size)  # y (codes)
    moved += point.cols * size * (2 if is_layer_norm(point.op) else 1)  # weights
    if adds_residual(point.op):
        moved += 2 * n * size  # read and written back
    if is_quant(point.op):
        _, scales, group = parse_variant(variant)
        moved += {"per_row": point.rows * 4, "static": 4,
                  "per_group": point.rows * (point.cols // max(group, 1)) * 4}[scales]
    return moved


def why_not(peer, point, variant):
    """None when `peer` serves (point, variant), else the reason."""
    if peer in ("eager", "compile", "kerntune"):
        return None
    if peer == "liger":
        if point.op == "add_rms_norm":
            return None
        if point.op == "rms_norm":
            return "Liger's rms_norm views rows as (-1, d): q of a fused qkv tensor is not " \
                   "viewable so"
        return "Liger has no quantizing norm and no fused add LayerNorm"
    if peer == "flashinfer":
        if point.op == "add_layer_norm":
            return "FlashInfer has no fused add LayerNorm"
        if point.op == "rms_norm" and variant != "plain":
            return "QKRMSNorm has no Gemma form"
        if is_quant(point.op):
            codes, scales, _ = parse_variant(variant)
            if point.op == "add_layer_norm_quant":
                return "FlashInfer has no fused add LayerNorm"
            if point.op == "layer_norm_quant":
                return None if scales in ("static", "per_row") else \
                    "FlashInfer's LayerNorm quantizes with static or per-row scales only"
            if scales != "static" or codes == "int8":
                return "FlashInfer's RMSNorm quant kernels take a static fp8 scale only"
        return None
    raise ValueError(peer)


def dry_run_plan(args):
    """(op, dtype, rows, cols, variant, peer, bytes, skipped reason) of every planned run."""
    plan = []
    for point in grid_points(args.ops, args.rows, args.cols):
        for dtype in args.dtypes:
            for variant in variants_of(point, args.variants):
                for peer in args.peers:
                    reason = why_not(peer, point, variant)
                    if peer == "flashinfer" and dtype == "float32":
                        reason = "FlashInfer's norms take float16 and bfloat16 only"
                    plan.append((point.op, dtype, point.rows, point.cols, variant, peer,
                                 bytes_moved(point, dtype, variant), reason))
    return plan


# --- the PyTorch side (GPU machine) -----------------------------------------

def torch_dtype(torch, name):
    return {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
            "int8": torch.int8}[name]


def quantize(torch, y, variant, static_scale):
    """vLLM's reference quantization of y (any float dtype): (codes, scales)."""
    codes, scales, group = parse_variant(variant)
    qmax = QMAX[codes]
    yf = y.float()
    if scales == "static":
        scale = static_scale
    else:
        view = yf.view(*yf.shape[:-1], -1, group) if group else yf
        amax = view.abs().amax(dim=-1, keepdim=True)
        scale = (amax / qmax).clamp(min=1.0 / (qmax * 512))
        yf = view
    q = (yf / scale).clamp(-qmax, qmax)
    if codes == "int8":
        q = q.round().clamp(-128, 127).to(torch.int8)
    else:
        q = q.to(torch_dtype(torch, codes))
    if group:
        q = q.view(y.shape)
        scale = scale.squeeze(-1)
    return q, scale


def make_composite(torch, op, variant, static_scale):
    """The unfused composite fn(ops, weight[, bias]) -> outputs tuple."""
    import torch.nn.functional as F
    gemma = variant == "gemma"

    def norm(r, w, b=None):
        d = r.shape[-1]
        if is_layer_norm(op):
            return F.layer_norm(r, (d,), w, b, eps=EPS)
        return F.rms_norm(r, (d,), (1 + w) if gemma else w, eps=EPS)

    def fn(ops, *weights):
        x, residual = ops
        r = x + residual if residual is not None else x
        y = norm(r, *weights)
        outs = quantize(torch, y, variant, static_scale) if is_quant(op) else (y,)
        return outs + ((r,) if residual is not None else ())
    return fn


def load_liger(path):
    """Liger's forward functions from a source tree, without its ops package's
    __init__ (it imports every Liger op and their dependencies)."""
    import importlib
    import types
    sys.path.insert(0, path)
    ops_dir = os.path.join(path, "liger_kernel", "ops")
    if "liger_kernel.ops" not in sys.modules:
        importlib.import_module("liger_kernel")
        stub = types.ModuleType("liger_kernel.ops")
        stub.__path__ = [ops_dir]
        sys.modules["liger_kernel.ops"] = stub
    return importlib.import_module("liger_kernel.ops.fused_add_rms_norm")


def make_liger(module, variant):
    offset, casting = (1.0, "gemma") if variant == "gemma" else (0.0, "llama")

    def fn(ops, w):
        x, residual = ops
        y, r = module.fused_add_rms_norm_forward(x, residual, w, EPS, offset, casting)[:2]
        return y, r
    return fn


def make_kerntune(point, variant, static_scale):
    """kerntune.torch's op as fn(ops, weight[, bias]) -> the composite's outputs."""
    import kerntune
    import kerntune.torch as kt
    offset = 1.0 if variant == "gemma" else 0.0
    quant = None
    if is_quant(point.op):
        codes, scales, group = parse_variant(variant)
        quant = kerntune.Quant(codes, scales, group_size=group,
                               scale=static_scale if scales == "static" else None)
    norm = {"add_rms_norm": kt.add_rms_norm, "add_layer_norm": kt.add_layer_norm,
            "rms_norm_quant": kt.rms_norm, "layer_norm_quant": kt.layer_norm,
            "add_rms_norm_quant": kt.add_rms_norm, "add_layer_norm_quant": kt.add_layer_norm,
            "rms_norm": kt.rms_norm}[point.op]
    layer = is_layer_norm(point.op)

    def fn(ops, *weights):
        x, residual = ops
        args = (x, residual) if residual is not None else (x,)
        kwargs = {"eps": EPS, "quant": quant}
        if not layer:
            kwargs["weight_offset"] = offset
        out = norm(*args, *weights, **kwargs)
        outs = out if quant is not None else (out,)
        if quant is not None and not quant.dynamic:
            outs = (outs[0], static_scale)
        return tuple(outs) + ((residual,) if residual is not None else ())
    return fn


def build_flashinfer(torch, include_dir, build_dir):
    """Builds bench/llm_norm_flashinfer.cu once; the ctypes library."""
    import ctypes
    from torch.utils.cpp_extension import load
    os.makedirs(build_dir, exist_ok=True)
    load(name="kt_flashinfer_norm", sources=[FI_SOURCE], extra_include_paths=[include_dir],
         # torch's extension flags hide the 16-bit types' conversions
         # (-D__CUDA_NO_BFLOAT16_CONVERSIONS__ ...), which FlashInfer uses.
         extra_cuda_cflags=["-O3", "-std=c++17", "-DENABLE_FP8", "-DENABLE_BF16",
                            "--expt-relaxed-constexpr", "-U__CUDA_NO_HALF_OPERATORS__",
                            "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
                            "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                            "-U__CUDA_NO_BFLOAT16_OPERATORS__",
                            "-U__CUDA_NO_BFLOAT162_OPERATORS__"],
         build_directory=build_dir, is_python_module=False, verbose=False)
    lib = ctypes.CDLL(os.path.join(build_dir, "kt_flashinfer_norm.so"))
    for name in ("kt_fi_rms_norm", "kt_fi_fused_add_rms_norm", "kt_fi_qk_rms_norm",
                 "kt_fi_rms_norm_quant", "kt_fi_fused_add_rms_norm_quant",
                 "kt_fi_layer_norm_quant"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


def make_flashinfer(torch, lib, point, dtype, variant, static_scale):
    """fn(ops, *weights) over FlashInfer's kernels, on the current stream."""
    import ctypes
    P, U, F = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_float
    dt = FI_DTYPE[dtype]
    rows, d = point.rows, point.cols

    def stream():
        return P(torch.cuda.current_stream().cuda_stream)

    def ptr(t):
        return P(t.data_ptr())

    def check(err, what):
        if err != 0:
            raise RuntimeError(f"FlashInfer {what}: CUDA error {err}")

    op = point.op
    if op == "rms_norm":  # QKRMSNorm over q of the fused qkv tensor
        def fn(ops, w):
            x, _ = ops
            y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            check(lib.kt_fi_qk_rms_norm(dt, ptr(x), ptr(w), ptr(y), U(point.tokens), U(HEADS),
                                        U(d), U(x.stride(0)), U(x.stride(1)), U(y.stride(0)),
                                        U(y.stride(1)), F(EPS), stream()), "QKRMSNorm")
            return (y,)
        return fn
    if op == "add_rms_norm":  # in place: x <- norm(x + r), r <- x + r
        gemma = int(variant == "gemma")

        def fn(ops, w):
            x, r = ops
            check(lib.kt_fi_fused_add_rms_norm(dt, gemma, ptr(x), ptr(r), ptr(w), U(rows), U(d),
                                               U(d), U(d), F(EPS), stream()), "FusedAddRMSNorm")
            return x, r
        return fn
    codes, scales, _ = parse_variant(variant)
    qt = FI_QUANT[codes]
    qdtype = torch_dtype(torch, codes)
    if op == "layer_norm_quant":
        def fn(ops, g, b):
            x, _ = ops
            y = torch.empty((rows, d), dtype=qdtype, device=x.device)
            if scales == "static":
                check(lib.kt_fi_layer_norm_quant(dt, qt, ptr(x), ptr(g), ptr(b), ptr(y),
                                                 ptr(static_scale), P(None), U(rows), U(d),
                                                 F(EPS), stream()), "LayerNormQuant")
                return y, static_scale
            s = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
            check(lib.kt_fi_layer_norm_quant(dt, qt, ptr(x), ptr(g), ptr(b), ptr(y), P(None),
                                             ptr(s), U(rows), U(d), F(EPS), stream()),
                  "generalLayerNorm per-token")
            return y, s
        return fn

    def fn(ops, w):  # RMSNormQuant / FusedAddRMSNormQuant, static scale
        x, r = ops
        y = torch.empty((rows, d), dtype=qdtype, device=x.device)
        if r is None:
            check(lib.kt_fi_rms_norm_quant(dt, qt, ptr(x), ptr(w), ptr(y), U(rows), U(d), U(d),
                                           U(d), ptr(static_scale), F(EPS), stream()),
                  "RMSNormQuant")
            return y, static_scale
        check(lib.kt_fi_fused_add_rms_norm_quant(dt, qt, ptr(x), ptr(r), ptr(w), ptr(y), U(rows),
                                                 U(d), U(d), U(d), U(d), ptr(static_scale),
                                                 F(EPS), stream()), "FusedAddRMSNormQuant")
        return y, static_scale, r
    return fn


class OperandRing:
    """`sets` copies of one point's (x, residual), used in turn (torch_bench's
    InputRing protocol: xs, sets, flush, advance). Per-head points keep
    whole fused qkv tensors and rotate views of their q."""

    def __init__(self, torch, point, dtype, sets, flush):
        t = getattr(torch, dtype)
        shape = (point.tokens, 3, HEADS, point.cols) if point.per_head else (point.rows,
                                                                            point.cols)
        base = torch.randn(shape, dtype=t, device="cuda")
        base_r = (torch.randn(shape, dtype=t, device="cuda")
                  if adds_residual(point.op) else None)
        self.buffers = [(base.clone(), None if base_r is None else base_r.clone())
                        for _ in range(sets)]
        self.xs = [(x[:, 0] if point.per_head else x, r) for x, r in self.buffers]
        self.pristine = (base, base_r)
        self.sets, self.flush, self._next = sets, flush, 0

    def advance(self):
        k = self._next
        self._next = (k + 1) % self.sets
        return k

    def fresh(self, point):
        """A copy of the original operands (the peers write some in place)."""
        x, r = (t.clone() if t is not None else None for t in self.pristine)
        return (x[:, 0] if point.per_head else x, r)


def reference(torch, point, ops, weights, variant):
    """float64 (y, r) of the op from pristine operands; r rounded to the storage dtype."""
    x, residual = ops
    r = (x.float() + residual.float()).to(x.dtype) if residual is not None else x
    rd = r.double()
    w = weights[0].double()
    if is_layer_norm(point.op):
        mean = rd.mean(-1, keepdim=True)
        var = (rd - mean).pow(2).mean(-1, keepdim=True)
        y = (rd - mean) * torch.rsqrt(var + EPS) * w + weights[1].double()
    else:
        w = 1 + w if variant == "gemma" else w
        y = rd * torch.rsqrt(rd.pow(2).mean(-1, keepdim=True) + EPS) * w
    return y, (r if residual is not None else None)


def check(torch, point, dtype, variant, outs, y_ref, r_ref):
    """(passed, max error) of a peer's outputs against the float64 reference."""
    atol, rtol = tb.TOLERANCE[dtype]
    worst = 0.0
    if is_quant(point.op):
        codes, scales, group = parse_variant(variant)
        q, scale = outs[0], outs[1]
        s = scale.float()
        if group:
            s = s.repeat_interleave(group, dim=-1)
        deq = q.float().view(y_ref.shape) * s.expand_as(y_ref) if s.numel() > 1 else \
            q.float().view(y_ref.shape) * s
        # One code step (fp8: 2^-3 of the value, and the subnormal step;
        # int8: one scale) plus the storage rounding of y before quantizing.
        step = (2.0 ** -3 if codes == "fp8_e4m3" else 2.0 ** -2 if codes == "fp8_e5m2" else 0)
        sub = {"fp8_e4m3": 2.0 ** -9, "fp8_e5m2": 2.0 ** -16, "int8": 1.0}[codes]
        sref = s.double() if s.numel() > 1 else s.double().expand_as(y_ref)
        bound = (step + rtol) * y_ref.abs() + sub * sref.expand_as(y_ref) * 1.01 + atol
        qmax = QMAX[codes]
        clipped = y_ref.clamp(-qmax * sref, qmax * sref)  # static scales saturate
        diff = (deq.double() - clipped).abs()
        worst = diff.max().item()
        passed = bool((diff <= bound).all())
        if scales != "static":
            want = (y_ref.abs().view(*y_ref.shape[:-1], -1, group) if group else y_ref.abs())
            want = (want.amax(-1) / qmax).clamp(min=1.0 / (qmax * 512))
            got = scale.double().view(want.shape)
            passed = passed and bool(((got - want).abs() <= max(2 * rtol, 1e-5) * want).all())
    else:
        y = outs[0].double()
        diff = (y - y_ref).abs()
        worst = diff.max().item()
        passed = bool((diff <= atol + rtol * y_ref.abs()).all())
    if r_ref is not None:
        passed = passed and bool(torch.equal(outs[-1].view(r_ref.shape), r_ref))
    return passed, worst


class LlmNormBench:
    def __init__(self, args):
        import torch
        self.torch = torch
        self.args = args
        self.timer = tb.PeerBench(args)  # timing, L2 flush, copy roofline
        self.results = []
        self.liger = None
        self.fi = None
        if "liger" in args.peers:
            self.liger = load_liger(args.liger)
        if "flashinfer" in args.peers:
            self.fi = build_flashinfer(torch, os.path.join(args.flashinfer, "include"),
                                       args.build_dir)
        if "kerntune" in args.peers:
            kt = tb.import_kerntune_torch()
            kt.configure(server=args.kerntune_server, db=args.kerntune_db)

    def weights(self, point, dtype):
        torch = self.torch
        t = getattr(torch, dtype)
        w = 1 + 0.5 * torch.randn(point.cols, dtype=t, device="cuda")
        if is_layer_norm(point.op):
            return (w, 0.5 * torch.randn(point.cols, dtype=t, device="cuda"))
        return (w,)

    def make(self, peer, point, dtype, variant, static_scale):
        torch = self.torch
        if peer in ("eager", "compile"):
            fn = make_composite(torch, point.op, variant, static_scale)
            if peer == "compile":
                torch._dynamo.reset()
                fn = torch.compile(fn, dynamic=False, fullgraph=True)
            return fn
        if peer == "liger":
            return make_liger(self.liger, variant)
        if peer == "kerntune":
            return make_kerntune(point, variant, static_scale)
        return make_flashinfer(torch, self.fi, point, dtype, variant, static_scale)

    def run_point(self, point, dtype, progress):
        torch = self.torch
        size = tb.DTYPE_SIZE[dtype]
        set_bytes = point.rows * point.cols * size * (3 if point.per_head else 1) * (
            2 if adds_residual(point.op) else 1) + point.rows * point.cols * size
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info()[0]
        sets = tb.rotation_sets(set_bytes, self.timer.l2_bytes, free)
        ring = OperandRing(torch, point, dtype, sets,
                           flush=sets * set_bytes < 4 * self.timer.l2_bytes)
        weights = self.weights(point, dtype)
        y_ref, r_ref = reference(torch, point, ring.fresh(point), weights, "plain")
        copy_us = statistics.median(self.timer.time_graph(
            lambda ops: ops[0].clone(), ring, (), 10.0))
        for variant in variants_of(point, self.args.variants):
            if variant == "gemma":
                y_ref, r_ref = reference(torch, point, ring.fresh(point), weights, "gemma")
            static_scale = None
            if is_quant(point.op):
                codes = parse_variant(variant)[0]
                # A static scale that fits the data, as a calibration would.
                static_scale = (y_ref.abs().max().float() / QMAX[codes]).reshape(1).cuda()
            for peer in self.args.peers:
                rec = {"op": point.op, "dtype": dtype, "rows": point.rows, "cols": point.cols,
                       "layout": "q_of_qkv_heads32" if point.per_head else "contiguous",
                       "variant": variant, "peer": peer,
                       "bytes": bytes_moved(point, dtype, variant), "median_us": None,
                       "gbps": None, "events_median_us": None,
                       "copy_same_gbps": round(2 * point.rows * point.cols * size / copy_us
                                               / 1e3, 1),
                       "passed": None, "max_err": None, "error": None}
                reason = why_not(peer, point, variant)
                if peer == "flashinfer" and dtype == "float32":
                    reason = "FlashInfer's norms take float16 and bfloat16 only"
                if reason:
                    rec["error"] = f"not served: {reason}"
                else:
                    self.measure(peer, point, dtype, variant, static_scale, ring, weights,
                                 y_ref, r_ref, rec)
                self.results.append(rec)
                tb.log(f"[{next(progress)}] {format_record(rec)}")

    def measure(self, peer, point, dtype, variant, static_scale, ring, weights, y_ref, r_ref,
                rec):
        torch = self.torch
        try:
            fn = self.make(peer, point, dtype, variant, static_scale)
            outs = fn(ring.fresh(point), *weights)
            torch.cuda.synchronize()
            rec["passed"], rec["max_err"] = check(torch, point, dtype, variant, outs, y_ref,
                                                  r_ref)
            del outs
            events = statistics.median(self.timer.time_launches(fn, ring, weights))
            graph = statistics.median(self.timer.time_graph(fn, ring, weights, events))
            rec["events_median_us"] = round(events, 3)
            rec["median_us"] = round(graph, 3)
            rec["gbps"] = round(rec["bytes"] / graph / 1e3, 1)
        except Exception as exc:  # recorded; the run goes on
            rec["error"] = tb.short_error(exc)
            torch.cuda.synchronize()


def format_record(r):
    head = f"{r['op']} {r['dtype']} {r['rows']}x{r['cols']} {r['variant']} {r['peer']}:"
    if r["median_us"] is None:
        return f"{head} {r['error']}"
    return (f"{head} {r['median_us']:.2f} us {r['gbps']:.0f} GB/s "
            f"(copy-same {r['copy_same_gbps']:.0f}) {'ok' if r['passed'] else 'FAIL'}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=tb.csv_list("ops", OPS), default=list(OPS))
    p.add_argument("--dtypes", type=tb.csv_list("dtypes", DTYPES),
                   default=["bfloat16", "float16"])
    p.add_argument("--peers", type=tb.csv_list("peers", PEERS), default=list(PEERS))
    p.add_argument("--variants", type=tb.csv_list("variants", VARIANTS),
                   default=list(DEFAULT_VARIANTS),
                   help=f"default {','.join(DEFAULT_VARIANTS)}; all: {','.join(VARIANTS)}")
    p.add_argument("--rows", type=tb.csv_ints,
                   help="keep only points with these row counts (per-head points: tokens)")
    p.add_argument("--cols", type=tb.csv_ints, help="keep only points with these column counts")
    p.add_argument("--flashinfer", default=".gpu/peers/flashinfer",
                   help="a FlashInfer source tree (its include/ is used)")
    p.add_argument("--build-dir", default="/tmp/kt_flashinfer_norm",
                   help="where the FlashInfer binding is built")
    tb.add_peer_harness_args(p)
    return tb.finish_peer_harness_args(p, p.parse_args(argv))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    plan = dry_run_plan(args)
    if not plan:
        sys.exit("no llm_norm point matches the filters")
    if args.dry_run:
        tb.print_dry_run(plan, lambda e: f"{e[0]:<20} {e[1]:<8} {e[2]:>6} {e[3]:>6} {e[4]:<21} "
                                         f"{e[5]:<10} {e[6]:>11}")
        return
    import torch
    if not torch.cuda.is_available():
        sys.exit("llm_norm_peers needs a CUDA GPU")
    started = time.perf_counter()
    bench = LlmNormBench(args)
    bench.timer.copy_gbps = bench.timer.measure_copy_gbps()
    doc = tb.peer_harness_doc("llm_norm_peers", torch, bench.timer.copy_gbps,
                              peer_sources=read_versions(args), eps=EPS, results=bench.results)
    tb.run_peer_harness(bench, grid_points(args.ops, args.rows, args.cols), args.dtypes,
                        len(plan), args.out, doc, started)


def read_versions(args):
    """The peers' source commits, from the VERSIONS file beside the trees when present."""
    path = os.path.join(os.path.dirname(os.path.abspath(args.flashinfer)), "VERSIONS")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


if __name__ == "__main__":
    main()
