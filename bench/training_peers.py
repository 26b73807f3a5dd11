#!/usr/bin/env python3
"""Peers of kerntune's training ops (issue 45) at issue 45's training shapes, on the GPU machine.

Times what a training step would call instead of kerntune:

  eager     PyTorch eager: the ATen backward op that autograd's node runs
            (SoftmaxBackward0 -> aten._softmax_backward_data,
            LogSoftmaxBackward0 -> aten._log_softmax_backward_data,
            NativeLayerNormBackward0 -> aten.native_layer_norm_backward,
            F.rms_norm's _fused_rms_norm node -> aten._fused_rms_norm_backward;
            torch without it: the formula), called directly: the same
            kernels, and only the backward is timed (autograd would run the
            node on the stream its forward ran on, not the graph's capture
            stream). cross_entropy: F.cross_entropy and torch.autograd.grad of
            the loss inside the timed function, forward and backward (the
            training step's loss).
  compile   torch.compile(dynamic=False, fullgraph=True) of the same ATen
            backward op, which Inductor decomposes as it does in a compiled
            training step's backward graph (dumped compiled graphs hold
            exactly these ops); cross_entropy: the compiled F.cross_entropy
            (AOTAutograd's forward and backward graphs) and autograd.grad.
            compile_kernels records how many kernels Inductor generated (0
            suggests it fell back to the ATen op).
  liger     Liger-Kernel from a source tree (--liger): the functions its
            autograd Functions' backward calls: _softmax_backward
            (LigerSoftmaxFunction), layer_norm_backward
            (LigerLayerNormFunction), rms_norm_backward (LigerRMSNormFunction,
            offset 0, casting_mode "llama", in place: dx is written over dy, its
            default). cross_entropy: LigerCrossEntropyFunction's forward
            syncs with the host (target_mask.sum().item(), the label asserts),
            so it cannot be captured in a CUDA graph: the timed function
            launches the same liger_cross_entropy_kernel with the arguments
            cross_entropy_forward gives it (the valid-row count is taken once,
            on the host, before timing; the count's mask and sum kernels are
            kept, the label asserts left out), and its loss and gradient are
            checked bit for bit against LigerCrossEntropyFunction's own. Its
            backward does no work on the gradient when grad_output is 1.0, as
            here. Liger has no log-softmax backward.
  kerntune  not served yet: kerntune.torch has no training ops (KERNTUNE_OPS
            and make_kerntune below are the one place to wire them).

Points: softmax_backward, log_softmax_backward, layer_norm_backward and
rms_norm_backward at tokens {4096, 8192, 16384} x hidden {2048, 4096, 8192};
cross_entropy at tokens {4096, 8192} x vocab {32000, 50257, 128256, 151936}
(issue 45's tuner grid). Each in bfloat16, float16 and float32.

Inputs (random, never zeros): softmax_backward / log_softmax_backward: y =
softmax / log_softmax of N(0, 1) logits (in float64, then stored), dy N(0, 1).
Norms: x = 0.5 + 2 N(0, 1) (so mean != 0 and rstd ~ 0.5: a kernel that
confuses x with x-hat fails), dy N(0, 1), gamma / weight 1 + 0.5 N(0, 1), beta
0.5 N(0, 1); mean and rstd from x in float64 (eps 1e-5 LayerNorm, 1e-6 RMSNorm),
stored as float32 (rows, 1), the layout ATen's ops save and take; every peer is
given the same statistics (Liger's own forward would save them in the input
dtype). cross_entropy: logits N(0, 1), int64 labels uniform in [0, vocab), 1 in
4 rows ignore_index (-100); row 0 ignored, row 1's label vocab - 1, row 2's 0;
reduction mean over the valid rows.

Bytes moved (the GB/s numerator, shared by every peer of a point; n = rows x
cols, s = the dtype's size):
  softmax_backward, log_softmax_backward: y and dy read, dx written: 3 n s.
  layer_norm_backward: x and dy read, dx written (3 n s); gamma read, dgamma and
      dbeta written (3 cols s); mean and rstd read as float32 (8 rows).
  rms_norm_backward: 3 n s; weight read, dweight written (2 cols s); rstd read
      (4 rows).
  cross_entropy (forward + backward): logits read once and the gradient
      written once in place of them (2 n s); int64 labels read (8 rows); the
      per-row loss written as float32 (4 rows).

Method: bench/torch_bench.py's PeerBench (imported: one copy roofline, the same
CUDA graph replay of max(sets, 20) launches over rotating input sets, the L2
flush for sets that fit in L2, the persisting-L2 reset, one stream); the
headline median_us is the graph replay's per-launch median, events_median_us
the events figure; copy_same_gbps is a clone of the point's n-element input
timed the same way. Peers that write in place (Liger's RMSNorm backward and
cross-entropy) overwrite their rotating set's dy / logits as they are timed;
the cost of these memory-bound kernels does not depend on the values.

Checks, before a peer is timed, on its output from a fresh copy of the inputs
against float64 from the same stored inputs (the backward ops against their
formulas with the given statistics; cross_entropy against softmax - one-hot over
the valid count, in row chunks). An element passes when |got - ref| <= floor +
atol * m + rtol * |ref| (+ slack for row sums), NaN never:
  (atol, rtol)  torch_bench.TOLERANCE per dtype; the cross-entropy gradient
                CE_GRAD_TOLERANCE (eager and Inductor keep log-probabilities in
                the storage dtype: |log p| up to ~18 at these vocabularies, so
                bfloat16's exp() of them is off by up to 6.5%);
  m             the magnitude of the terms the element is made of (e.g. softmax
                backward: |y| (|dy| + |sum dy y|)), so that small outputs (dx of
                a softmax over 8192 columns is ~1e-4) are checked to their own
                scale; the loss: the mean |row loss|;
  floor         float16's subnormal step (2^-24), 0 for the others;
  slack         dgamma, dbeta, dweight (sums over rows): 6 x (the dtype's
                unit roundoff + 2^-16) x sqrt(sum of the squared terms): rounded
                products (Liger's "llama" mode multiplies in the input dtype, as
                HF Llama's autograd does) and float32 accumulation.
passed, max_err (the largest |got - ref|) and err_ratio (the largest |got - ref|
/ bound: under 1 passes) are recorded.

cross_entropy also records peak_extra_bytes: torch.cuda.max_memory_allocated()
during one forward + backward (after reset_peak_memory_stats) minus what was
allocated before it (the inputs and this harness's buffers), on the path a user
calls (Liger: LigerCrossEntropyFunction itself). Issue 45 requires kerntune's
to be no more than Liger's.

Output: a compact JSON, one record per (op, dtype, rows, cols, peer): bytes,
median_us (graph replay), gbps, events_median_us, copy_same_gbps, passed,
max_err, err_ratio, error ("not served: ..." when the peer has no such op),
impl, compile_s and compile_kernels (compile), peak_extra_bytes
(cross_entropy).

Examples:
  python3 bench/training_peers.py --dry-run
  python3 bench/training_peers.py --liger .gpu/peers/liger/src --out training_peers.json
  python3 bench/training_peers.py --ops cross_entropy --rows 8192 --cols 128256 \\
      --dtypes bfloat16 --peers eager,liger --quick
"""

import argparse
import math
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench as tb  # noqa: E402  (the shared timing method)

BACKWARD_OPS = ("softmax_backward", "log_softmax_backward", "layer_norm_backward",
                "rms_norm_backward")
OPS = BACKWARD_OPS + ("cross_entropy",)
DTYPES = ("bfloat16", "float16", "float32")
PEERS = ("eager", "compile", "liger", "kerntune")

# Issue 45's training shapes.
TOKENS = (4096, 8192, 16384)
HIDDEN = (2048, 4096, 8192)
CE_TOKENS = (4096, 8192)
VOCABS = (32000, 50257, 128256, 151936)

LAYER_NORM_EPS = tb.LAYER_NORM_EPS
RMS_NORM_EPS = tb.RMS_NORM_EPS
IGNORE_INDEX = -100
IGNORED_ONE_IN = 4  # labels: about 1 row in 4 is ignore_index (prompt tokens, padding)

# See the docstring's "Checks".
CE_GRAD_TOLERANCE = {"float32": (1e-4, 0.0), "float16": (1e-2, 1e-2),
                     "bfloat16": (5e-2, 5e-2)}
SUBNORMAL_FLOOR = {"float32": 0.0, "float16": 2.0 ** -24, "bfloat16": 0.0}
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
FP32_ACCUMULATION = 2.0 ** -16
ROW_SUM_SIGMAS = 6
REF_CHUNK_BYTES = tb.REF_CHUNK_BYTES  # float64 bytes per cross-entropy reference chunk

LIGER_MODULES = ("utils", "softmax", "layer_norm", "rms_norm", "cross_entropy")


class Point:
    """One training point: `rows` tokens of `cols` (hidden size or vocabulary)."""

    def __init__(self, op, rows, cols):
        self.op, self.rows, self.cols = op, rows, cols

    def name(self):
        return f"{self.op} {self.rows}x{self.cols}"


def grid_points(ops, rows_filter=None, cols_filter=None):
    points = []
    for op in ops:
        if op == "cross_entropy":
            points += [Point(op, t, v) for t in CE_TOKENS for v in VOCABS]
        else:
            points += [Point(op, t, h) for t in TOKENS for h in HIDDEN]
    return [p for p in points if (not rows_filter or p.rows in rows_filter)
            and (not cols_filter or p.cols in cols_filter)]


def bytes_moved(point, dtype):
    """The bytes the op must move (the docstring's "Bytes moved")."""
    size = tb.DTYPE_SIZE[dtype]
    n = point.rows * point.cols
    if point.op in ("softmax_backward", "log_softmax_backward"):
        return 3 * n * size
    if point.op == "layer_norm_backward":
        return 3 * n * size + 3 * point.cols * size + 2 * point.rows * 4
    if point.op == "rms_norm_backward":
        return 3 * n * size + 2 * point.cols * size + point.rows * 4
    if point.op == "cross_entropy":
        return 2 * n * size + point.rows * 8 + point.rows * 4
    raise ValueError(point.op)


# --- kerntune: the one place to wire when kerntune.torch has training ops ---

KERNTUNE_OPS = ()  # the ops of OPS that kerntune.torch serves; add each as it lands


def make_kerntune(op, cols):
    """kerntune.torch's op, called as make_eager's function is (same operands,
    same outputs, in the same order)."""
    raise NotImplementedError(f"kerntune.torch has no {op} yet: wire it in "
                              "bench/training_peers.py's make_kerntune (issue 45)")


def why_not(peer, op):
    """None when `peer` serves `op`, else the reason."""
    if peer in ("eager", "compile"):
        return None
    if peer == "liger":
        return "Liger has no log-softmax backward" if op == "log_softmax_backward" else None
    if peer == "kerntune":
        return None if op in KERNTUNE_OPS else "kerntune.torch has no training ops yet"
    raise ValueError(peer)


def dry_run_plan(args):
    """(op, dtype, rows, cols, peer, bytes, skipped reason) of every planned run."""
    return [(point.op, dtype, point.rows, point.cols, peer, bytes_moved(point, dtype),
             why_not(peer, point.op))
            for point in grid_points(args.ops, args.rows, args.cols)
            for dtype in args.dtypes for peer in args.peers]


# --- inputs and float64 references (any device: the CPU tests use them) ------

def make_operands(torch, point, dtype, device):
    """(operands, extra): the op's per-launch tensors (the first is the
    n-element one a copy is timed on) and the shared weights."""
    t = getattr(torch, dtype)
    rows, cols = point.rows, point.cols
    if point.op in ("softmax_backward", "log_softmax_backward"):
        z = torch.randn(rows, cols, device=device, dtype=torch.float64)
        y = (torch.softmax(z, -1) if point.op == "softmax_backward"
             else torch.log_softmax(z, -1)).to(t)
        del z
        return (torch.randn(rows, cols, device=device).to(t), y), ()
    if point.op in ("layer_norm_backward", "rms_norm_backward"):
        x = (0.5 + 2 * torch.randn(rows, cols, device=device)).to(t)
        dy = torch.randn(rows, cols, device=device).to(t)
        w = (1 + 0.5 * torch.randn(cols, device=device)).to(t)
        xd = x.double()
        if point.op == "rms_norm_backward":
            rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + RMS_NORM_EPS)
            return (dy, x, rstd.float()), (w,)
        mean = xd.mean(-1, keepdim=True)
        rstd = torch.rsqrt((xd - mean).pow(2).mean(-1, keepdim=True) + LAYER_NORM_EPS)
        beta = (0.5 * torch.randn(cols, device=device)).to(t)
        return (dy, x, mean.float(), rstd.float()), (w, beta)
    if point.op == "cross_entropy":
        logits = torch.randn(rows, cols, device=device, dtype=t)
        labels = torch.randint(0, cols, (rows,), device=device)
        labels[torch.randint(0, IGNORED_ONE_IN, (rows,), device=device) == 0] = IGNORE_INDEX
        labels[0] = IGNORE_INDEX
        labels[1:3] = torch.tensor([cols - 1, 0], device=device)  # the vocabulary's ends
        return (logits, labels), ()
    raise ValueError(point.op)


class Expected:
    """One output's float64 reference and how far from it a result may be:
    floor + atol * magnitude + rtol * |ref|, plus for sums over rows
    (rss: the root of the summed squared terms) the rounding slack."""

    def __init__(self, name, ref, magnitude=1.0, rss=None, tolerance=None):
        self.name, self.ref, self.magnitude, self.rss = name, ref, magnitude, rss
        self.tolerance = tolerance or tb.TOLERANCE


def row_sum(name, terms):
    """The Expected of a sum over rows of `terms` (dgamma, dbeta, dweight)."""
    return Expected(name, terms.sum(0), rss=terms.pow(2).sum(0).sqrt())


def reference(torch, op, operands, extra):
    """float64 Expected outputs of a backward op, in the peers' output order."""
    if op == "softmax_backward":
        dy, y = (t.double() for t in operands)
        s = (dy * y).sum(-1, keepdim=True)
        return [Expected("dx", y * (dy - s), magnitude=y.abs() * (dy.abs() + s.abs()))]
    if op == "log_softmax_backward":
        dy, y = (t.double() for t in operands)
        p, s = y.exp(), dy.sum(-1, keepdim=True)
        return [Expected("dx", dy - p * s, magnitude=dy.abs() + p * s.abs())]
    if op == "layer_norm_backward":
        dy, x, mean, rstd = (t.double() for t in operands)
        gamma = extra[0].double()
        xhat = (x - mean) * rstd
        g = dy * gamma
        c_g, c_gx = g.mean(-1, keepdim=True), (g * xhat).mean(-1, keepdim=True)
        return [Expected("dx", rstd * (g - c_g - xhat * c_gx),
                         magnitude=rstd * (g.abs() + c_g.abs() + (xhat * c_gx).abs())),
                row_sum("dgamma", dy * xhat), row_sum("dbeta", dy)]
    if op == "rms_norm_backward":
        dy, x, rstd = (t.double() for t in operands)
        xhat = x * rstd
        g = dy * extra[0].double()
        c = (g * xhat).mean(-1, keepdim=True)
        return [Expected("dx", rstd * (g - xhat * c),
                         magnitude=rstd * (g.abs() + (xhat * c).abs())),
                row_sum("dweight", dy * xhat)]
    raise ValueError(op)


def cross_entropy_rows(torch, logits, labels, n_valid):
    """float64 (per-row losses, gradient Expected) of a block of rows; n_valid:
    the whole batch's count of rows that are not ignore_index (reduction mean)."""
    z = logits.double()
    valid = labels != IGNORE_INDEX
    safe = labels.clamp(min=0).unsqueeze(-1)
    lse = torch.logsumexp(z, -1, keepdim=True)
    row_loss = torch.where(valid, (lse - z.gather(-1, safe)).squeeze(-1),
                           torch.zeros_like(lse.squeeze(-1)))
    p = torch.exp(z - lse)
    onehot = torch.zeros_like(p).scatter_(-1, safe, 1.0)
    scale = valid.double().unsqueeze(-1) / n_valid
    return row_loss, Expected("grad", (p - onehot) * scale, magnitude=(p + onehot) * scale,
                              tolerance=CE_GRAD_TOLERANCE)


def compare(torch, dtype, got, expected):
    """(passed, max |got - ref| or None if not finite, max |got - ref| / bound)."""
    atol, rtol = expected.tolerance[dtype]
    ref = expected.ref
    bound = SUBNORMAL_FLOOR[dtype] + atol * expected.magnitude + rtol * ref.abs()
    if expected.rss is not None:
        bound = bound + ROW_SUM_SIGMAS * (UNIT_ROUNDOFF[dtype] + FP32_ACCUMULATION) * expected.rss
    diff = (got.double().reshape(ref.shape) - ref).abs().nan_to_num(nan=math.inf)
    ratio = torch.where(diff == 0, torch.zeros_like(diff), diff / bound)
    worst = diff.max().item()
    return (bool((diff <= bound).all()), worst if math.isfinite(worst) else None,
            ratio.max().item())


def merge(results):
    """One (passed, max_err, err_ratio) of several compare() results."""
    passed = all(r[0] for r in results)
    errs = [r[1] for r in results]
    worst = None if None in errs else max(errs)
    ratio = max(r[2] for r in results)
    return passed, worst, (ratio if math.isfinite(ratio) else None)


def check(torch, op, dtype, outs, operands, extra, expected=None):
    """(passed, max_err, err_ratio) of a peer's outputs against float64 from
    the same operands; `expected`: reference()'s, when already computed."""
    if op == "cross_entropy":
        return check_cross_entropy(torch, dtype, outs, *operands)
    expected = expected or reference(torch, op, operands, extra)
    if len(outs) != len(expected):
        raise ValueError(f"{op}: {len(outs)} outputs, expected "
                         f"{', '.join(e.name for e in expected)}")
    return merge([compare(torch, dtype, got, e) for got, e in zip(outs, expected)])


def check_cross_entropy(torch, dtype, outs, logits, labels):
    """check() of (mean loss, logits' gradient), by row chunks."""
    loss, grad = outs
    n_valid = int((labels != IGNORE_INDEX).sum())
    chunk = max(1, REF_CHUNK_BYTES // (logits.shape[1] * 8))
    results, loss_sum, abs_sum = [], 0.0, 0.0
    for r0 in range(0, logits.shape[0], chunk):
        rows = slice(r0, r0 + chunk)
        row_loss, expected = cross_entropy_rows(torch, logits[rows], labels[rows], n_valid)
        results.append(compare(torch, dtype, grad[rows], expected))
        loss_sum += row_loss.sum().item()
        abs_sum += row_loss.abs().sum().item()
    mean = torch.tensor(loss_sum / n_valid, dtype=torch.float64, device=loss.device)
    results.append(compare(torch, dtype, loss, Expected("loss", mean,
                                                        magnitude=abs_sum / n_valid)))
    return merge(results)


# --- the peers (eager also runs on the CPU: the tests call it) ---------------

def make_eager(torch, op, cols):
    """(fn(operands, *extra) -> outputs tuple, what it calls)."""
    import torch.nn.functional as F
    aten = torch.ops.aten
    if op == "softmax_backward":
        return (lambda ops: (aten._softmax_backward_data(ops[0], ops[1], -1, ops[1].dtype),),
                "aten._softmax_backward_data")
    if op == "log_softmax_backward":
        return (lambda ops: (aten._log_softmax_backward_data(ops[0], ops[1], -1,
                                                             ops[1].dtype),),
                "aten._log_softmax_backward_data")
    if op == "layer_norm_backward":
        def layer_norm_backward(ops, gamma, beta):
            dy, x, mean, rstd = ops
            return tuple(aten.native_layer_norm_backward(dy, x, [cols], mean, rstd, gamma, beta,
                                                         [True, True, True]))
        return layer_norm_backward, "aten.native_layer_norm_backward"
    if op == "rms_norm_backward":
        if hasattr(aten, "_fused_rms_norm_backward"):
            def rms_norm_backward(ops, w):
                dy, x, rstd = ops
                return tuple(aten._fused_rms_norm_backward(dy, x, [cols], rstd, w, [True, True]))
            return rms_norm_backward, "aten._fused_rms_norm_backward"

        def rms_norm_formula(ops, w):  # torch before _fused_rms_norm: its autograd's math
            dy, x, rstd = ops
            xhat = x.float() * rstd
            g = dy.float() * w.float()
            dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
            return dx.to(x.dtype), (dy.float() * xhat).sum(0).to(w.dtype)
        return rms_norm_formula, "float32 formula (no aten._fused_rms_norm_backward)"
    if op == "cross_entropy":
        return make_cross_entropy(torch, lambda logits, labels: F.cross_entropy(
            logits, labels, ignore_index=IGNORE_INDEX)), "F.cross_entropy + autograd.grad"
    raise ValueError(op)


def make_cross_entropy(torch, loss_fn):
    """fn((logits, labels)) -> (mean loss, logits' gradient): the forward and
    torch.autograd.grad, as a training step's loss."""
    def fn(ops):
        logits, labels = ops
        leaf = logits.detach().requires_grad_()
        loss = loss_fn(leaf, labels)
        (grad,) = torch.autograd.grad(loss, leaf)
        return loss.detach(), grad
    return fn


def make_compiled(torch, op, cols):
    torch._dynamo.reset()
    if op == "cross_entropy":
        import torch.nn.functional as F
        loss_fn = torch.compile(lambda logits, labels: F.cross_entropy(
            logits, labels, ignore_index=IGNORE_INDEX), dynamic=False, fullgraph=True)
        return make_cross_entropy(torch, loss_fn), "torch.compile(F.cross_entropy) + autograd.grad"
    fn, impl = make_eager(torch, op, cols)
    return torch.compile(fn, dynamic=False, fullgraph=True), f"torch.compile({impl})"


def load_liger(path):
    """Liger's op modules from a source tree, without its ops package's
    __init__ (it imports every Liger op and their dependencies), as
    llm_norm_peers.load_liger does."""
    import importlib
    import types
    sys.path.insert(0, path)
    ops_dir = os.path.join(path, "liger_kernel", "ops")
    if "liger_kernel.ops" not in sys.modules:
        importlib.import_module("liger_kernel")
        stub = types.ModuleType("liger_kernel.ops")
        stub.__path__ = [ops_dir]
        sys.modules["liger_kernel.ops"] = stub
    return types.SimpleNamespace(**{name: importlib.import_module(f"liger_kernel.ops.{name}")
                                    for name in LIGER_MODULES})


def make_liger(torch, liger, op, cols, n_valid):
    """(fn, user_fn, what it calls): user_fn is what a user calls, where it
    differs from the timed fn (cross_entropy); n_valid: the labels' count of
    valid rows (cross_entropy)."""
    if op == "softmax_backward":
        block, warps = liger.utils.calculate_settings(cols)

        def softmax_backward(ops):
            dy, y = ops
            return (liger.softmax._softmax_backward(dy, y, block, warps, cols > block),)
        return softmax_backward, None, "liger softmax._softmax_backward"
    if op == "layer_norm_backward":
        def layer_norm_backward(ops, gamma, beta):
            dy, x, mean, rstd = ops
            return tuple(liger.layer_norm.layer_norm_backward(dy, x, gamma, beta, mean, rstd))
        return layer_norm_backward, None, "liger layer_norm.layer_norm_backward"
    if op == "rms_norm_backward":
        block, warps = liger.utils.calculate_settings(cols)
        llama = liger.rms_norm._str_to_casting_mode["llama"]

        def rms_norm_backward(ops, w):
            dy, x, rstd = ops
            return tuple(liger.rms_norm.rms_norm_backward(dy, x, w, rstd, 0.0, llama, block,
                                                          warps, True, None))
        return rms_norm_backward, None, "liger rms_norm.rms_norm_backward (llama, in place)"
    if op == "cross_entropy":
        ce = liger.cross_entropy
        return (make_liger_cross_entropy_kernel(torch, ce, n_valid),
                make_cross_entropy(torch, lambda logits, labels: ce.LigerCrossEntropyFunction.apply(
                    logits, labels, None, IGNORE_INDEX, 0.0, 0.0, "mean", None, False)[0]),
                "liger_cross_entropy_kernel as LigerCrossEntropyFunction launches it")
    raise ValueError(op)


def make_liger_cross_entropy_kernel(torch, ce, n_valid):
    """fn((logits, labels)) -> (mean loss, gradient in place of the logits):
    the GPU work of Liger's cross_entropy_forward (mean reduction, no weight,
    softcap, z-loss or smoothing) without its host syncs."""
    import triton

    def fn(ops):
        logits, labels = ops
        rows, vocab = logits.shape
        loss_1d = torch.zeros(rows, dtype=logits.dtype, device=logits.device)
        (labels != IGNORE_INDEX).sum()  # Liger's count of valid rows, less its .item()
        blackwell = ce.infer_device_arch().startswith("blackwell")
        warps = 16 if ce.is_hip() else (8 if logits.element_size() == 2 and blackwell else 32)
        ce.liger_cross_entropy_kernel[(rows,)](
            X_ptr=logits, X_stride=logits.stride(-2), Y_ptr=labels, Y_stride=labels.stride(-1),
            weight_ptr=None, loss_ptr=loss_1d, z_loss_ptr=None, loss_stride=loss_1d.stride(-1),
            token_accuracy_ptr=None, token_accuracy_stride=0, predicted_tokens_ptr=None,
            predicted_tokens_stride=0, n_cols=vocab, n_non_ignore=n_valid,
            sum_non_ignore_weight=n_valid, ignore_index=IGNORE_INDEX, weight_sum=0.0,
            lse_square_scale=0.0, label_smoothing=0.0, reduction="mean", softcap=None,
            RETURN_Z_LOSS=False, RETURN_TOKEN_ACCURACY=False, RETURN_PREDICTED_TOKENS=False,
            BLOCK_SIZE=min(ce.MAX_FUSED_SIZE, triton.next_power_of_2(vocab)), HAS_WEIGHT=False,
            HAS_SOFTCAPPING=False, HAS_GRADIENTS=True, num_warps=warps)
        return torch.sum(loss_1d), logits
    return fn


# --- the GPU run -------------------------------------------------------------

class OperandRing:
    """`sets` copies of one point's operands, used in turn (torch_bench's
    InputRing protocol: xs, sets, flush, advance), and the pristine originals."""

    def __init__(self, torch, point, dtype, sets, flush):
        self.pristine, self.extra = make_operands(torch, point, dtype, "cuda")
        self.xs = [self.fresh() for _ in range(sets)]
        self.sets, self.flush, self._next = sets, flush, 0

    def advance(self):
        k = self._next
        self._next = (k + 1) % self.sets
        return k

    def fresh(self):
        """A copy of the original operands (some peers write theirs in place)."""
        return tuple(t.clone() for t in self.pristine)


def peak_extra_bytes(torch, fn, ops, extra):
    """(peak bytes allocated during fn beyond those allocated before it, outputs)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    outs = fn(ops, *extra)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before, outs


def inductor_kernel_count(reset=False):
    """Inductor's count of kernels generated since its last reset (None where
    this torch has no such metric); reset: start counting again."""
    try:
        from torch._inductor import metrics
    except ImportError:
        return None
    if reset:
        metrics.reset()
    return getattr(metrics, "generated_kernel_count", None)


class TrainingBench:
    def __init__(self, args):
        import torch
        self.torch = torch
        self.args = args
        self.timer = tb.PeerBench(args)  # timing, L2 flush, copy roofline
        self.results = []
        self.liger = None
        if "liger" in args.peers and any(why_not("liger", op) is None for op in args.ops):
            self.liger = load_liger(args.liger)
        if "kerntune" in args.peers and any(op in KERNTUNE_OPS for op in args.ops):
            kt = tb.import_kerntune_torch()
            kt.configure(server=args.kerntune_server, db=args.kerntune_db)

    def make(self, peer, point, ring):
        """(fn, user_fn or None, impl) of `peer` at `point`."""
        torch = self.torch
        if peer in ("eager", "compile"):
            fn, impl = (make_eager if peer == "eager" else make_compiled)(torch, point.op,
                                                                          point.cols)
            return fn, None, impl
        if peer == "liger":
            n_valid = (int((ring.pristine[1] != IGNORE_INDEX).sum())
                       if point.op == "cross_entropy" else None)
            return make_liger(torch, self.liger, point.op, point.cols, n_valid)
        return make_kerntune(point.op, point.cols), None, "kerntune.torch"

    def run_point(self, point, dtype, progress):
        torch = self.torch
        size = tb.DTYPE_SIZE[dtype]
        n = point.rows * point.cols
        moved = bytes_moved(point, dtype)
        torch.cuda.empty_cache()
        records = [self.new_record(point, dtype, peer, moved) for peer in self.args.peers]
        ring = None
        if any(why_not(rec["peer"], point.op) is None for rec in records):
            try:
                sets = tb.rotation_sets(moved, self.timer.l2_bytes, torch.cuda.mem_get_info()[0])
                ring = OperandRing(torch, point, dtype, sets,
                                   flush=sets * moved < 4 * self.timer.l2_bytes)
                copy_us = statistics.median(self.timer.time_graph(
                    lambda ops: ops[0].clone(), ring, (), 10.0))
                expected = (None if point.op == "cross_entropy" else
                            reference(torch, point.op, ring.pristine, ring.extra))
            except Exception as exc:  # out of memory, say: every peer of the point records it
                ring = None
                skip = f"skipped: {tb.short_error(exc)}"
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        for rec in records:
            reason = why_not(rec["peer"], point.op)
            if reason:
                rec["error"] = f"not served: {reason}"
            elif ring is None:
                rec["error"] = skip
            else:
                rec["copy_same_gbps"] = round(2 * n * size / copy_us / 1e3, 1)
                self.measure(rec["peer"], point, dtype, ring, expected, rec)
            self.results.append(rec)
            tb.log(f"[{next(progress)}] {format_record(rec)}")

    @staticmethod
    def new_record(point, dtype, peer, moved):
        rec = {"op": point.op, "dtype": dtype, "rows": point.rows, "cols": point.cols,
               "peer": peer, "impl": None, "bytes": moved, "median_us": None, "gbps": None,
               "events_median_us": None, "copy_same_gbps": None, "passed": None,
               "max_err": None, "err_ratio": None, "error": None}
        if peer == "compile":
            rec.update(compile_s=None, compile_kernels=None)
        if point.op == "cross_entropy":
            rec["peak_extra_bytes"] = None
        return rec

    def measure(self, peer, point, dtype, ring, expected, rec):
        torch = self.torch
        extra = ring.extra
        try:
            fn, user_fn, rec["impl"] = self.make(peer, point, ring)
            if peer == "compile":
                inductor_kernel_count(reset=True)
            started = time.perf_counter()
            outs = fn(ring.fresh(), *extra)
            torch.cuda.synchronize()
            if peer == "compile":
                rec["compile_s"] = round(time.perf_counter() - started, 3)
                rec["compile_kernels"] = inductor_kernel_count()
            rec["passed"], rec["max_err"], rec["err_ratio"] = check(
                torch, point.op, dtype, outs, ring.pristine, extra, expected)
            if point.op == "cross_entropy":
                rec["peak_extra_bytes"], user_outs = peak_extra_bytes(
                    torch, user_fn or fn, ring.fresh(), extra)
                if user_fn is not None and not all(torch.equal(a, b)
                                                   for a, b in zip(outs, user_outs)):
                    rec["passed"] = False
                    rec["error"] = "the timed kernel's outputs differ from the user path's"
                del user_outs
            del outs
            events = statistics.median(self.timer.time_launches(fn, ring, extra))
            rec["events_median_us"] = round(events, 3)
            graph = statistics.median(self.timer.time_graph(fn, ring, extra, events))
            rec["median_us"] = round(graph, 3)
            rec["gbps"] = round(rec["bytes"] / graph / 1e3, 1)
        except Exception as exc:  # recorded; the run goes on
            rec["error"] = tb.short_error(exc)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def format_record(r):
    head = f"{r['op']} {r['dtype']} {r['rows']}x{r['cols']} {r['peer']}:"
    if r["median_us"] is None:
        return f"{head} {r['error']}"
    text = (f"{head} {r['median_us']:.2f} us {r['gbps']:.0f} GB/s "
            f"(copy-same {r['copy_same_gbps']:.0f}) {'ok' if r['passed'] else 'FAIL'}")
    if r.get("err_ratio") is not None:
        text += f" err/bound {r['err_ratio']:.2f}"
    if r.get("peak_extra_bytes") is not None:
        text += f" peak extra {r['peak_extra_bytes'] / 2**20:.1f} MiB"
    if r.get("compile_s") is not None:
        text += f" compile {r['compile_s']:.1f}s {r['compile_kernels']} kernels"
    return text


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=tb.csv_list("ops", OPS), default=list(OPS))
    p.add_argument("--dtypes", type=tb.csv_list("dtypes", DTYPES), default=list(DTYPES))
    p.add_argument("--peers", type=tb.csv_list("peers", PEERS), default=list(PEERS))
    p.add_argument("--rows", type=tb.csv_ints, help="keep only points with these token counts")
    p.add_argument("--cols", type=tb.csv_ints,
                   help="keep only points with these hidden sizes / vocabularies")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed of the inputs")
    tb.add_peer_harness_args(p)
    return tb.finish_peer_harness_args(p, p.parse_args(argv))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    plan = dry_run_plan(args)
    if not plan:
        sys.exit("no training point matches the filters")
    if args.dry_run:
        tb.print_dry_run(plan, lambda e: f"{e[0]:<21} {e[1]:<8} {e[2]:>6} {e[3]:>6} {e[4]:<8} "
                                         f"{e[5]:>11}")
        return
    import torch
    if not torch.cuda.is_available():
        sys.exit("training_peers needs a CUDA GPU")
    # Inductor repeats this notice for every long-row softmax it compiles.
    warnings.filterwarnings("ignore", message=r"\s*Online softmax is disabled")
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    bench = TrainingBench(args)
    bench.timer.copy_gbps = bench.timer.measure_copy_gbps()
    doc = tb.peer_harness_doc(
        "training_peers", torch, bench.timer.copy_gbps, peer_sources=read_versions(args),
        reps=args.reps, warmup=args.warmup, seed=args.seed, ignore_index=IGNORE_INDEX,
        ignored_one_in=IGNORED_ONE_IN, layer_norm_eps=LAYER_NORM_EPS,
        rms_norm_eps=RMS_NORM_EPS, results=bench.results)
    tb.log(f"{doc['gpu']} torch {doc['torch']} triton {doc['triton']}; copy "
           f"{bench.timer.copy_gbps:.0f} GB/s; {len(plan)} runs")
    tb.run_peer_harness(bench, grid_points(args.ops, args.rows, args.cols), args.dtypes,
                        len(plan), args.out, doc, started)


def read_versions(args):
    """The peers' source commits, from the VERSIONS file in the folders above
    the Liger tree (.gpu/peers/VERSIONS for .gpu/peers/liger/src)."""
    folder = os.path.abspath(args.liger)
    for _ in range(2):
        folder = os.path.dirname(folder)
        path = os.path.join(folder, "VERSIONS")
        if os.path.exists(path):
            with open(path) as f:
                return [line.strip() for line in f if line.strip()]
    return None


if __name__ == "__main__":
    main()
