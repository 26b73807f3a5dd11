"""kerntune.torch: kerntune's kernels as PyTorch ops, in this process.

    import torch, kerntune.torch as kt
    y = kt.rms_norm(x, weight, eps=1e-6)                      # torch.ops.kerntune.rms_norm
    y = kt.add_rms_norm(x, residual, weight)                 # residual += x, written back
    codes, scales = kt.rms_norm(x, weight, quant=kerntune.Quant("fp8_e4m3"))
    model = torch.compile(model, fullgraph=True)             # the ops trace as themselves

The ops launch on the current CUDA stream of their tensors' device, so CUDA
graphs capture them and torch.compile keeps them as single nodes (each has a
fake implementation). CPU tensors run kerntune's fp64 reference. Configs are
the node's, chosen as the daemon chooses them: the daemon's when one runs,
else the tuning store's and the shipped files' (configure() says where).

Batch-invariant mode (kt.batch_invariant() around calls, or
kt.set_batch_invariant(True) for the process) makes each row's result
independent of the number of rows. softmax, log_softmax,
scaled_masked_softmax, layer_norm and rms_norm are differentiable (their
backward is torch's composite for now, _autograd.py); the add and
quantizing forms and reduce_scale are inference ops.
"""

import torch

from kerntune import _errors, _quant
from kerntune.torch import _ops, _runtime
from kerntune.torch._runtime import batch_invariant, configure, set_batch_invariant

__all__ = [
    "add_layer_norm",
    "add_rms_norm",
    "batch_invariant",
    "config_for",
    "configs_origin",
    "configure",
    "layer_norm",
    "log_softmax",
    "reduce_scale",
    "rms_norm",
    "scaled_masked_softmax",
    "set_batch_invariant",
    "softmax",
]

_OPS = torch.ops.kerntune


def softmax(x, dim=-1):
    return _OPS.softmax(x, dim)


def log_softmax(x, dim=-1):
    return _OPS.log_softmax(x, dim)


def scaled_masked_softmax(x, mask=None, scale=1.0, causal=False):
    """softmax(x * scale + mask) over the last dimension of (..., q, k)
    scores, the (q, k) mask shared by every leading index; causal masks
    column c of query q when c > q (top-left aligned, as torch's is_causal)."""
    return _OPS.scaled_masked_softmax(x, mask, float(scale), bool(causal))


def reduce_scale(x):
    """(x / max|x| per row, max|x| per row as float32)."""
    return _OPS.reduce_scale(x)


def _quant_args(quant, x):
    if not isinstance(quant, _quant.Quant):
        raise _errors.InvalidArgumentError("quant must be a kerntune.Quant, not %s" %
                                           type(quant).__name__)
    scale = None
    if not quant.dynamic:
        scale = quant.scale
        if not torch.is_tensor(scale):
            # A host value: copied over now (not inside a CUDA graph capture;
            # give a device tensor there).
            scale = torch.full((1,), float(scale), dtype=torch.float32, device=x.device)
    return (quant.dtype, quant.scale_mode, quant.group_size, quant.scale_ub, scale)


def rms_norm(x, weight=None, eps=1e-6, weight_offset=0.0, quant=None):
    """x / sqrt(mean(x^2) + eps) * (weight_offset + weight) over the last
    dimension (Gemma: weight_offset 1). Rows may be a strided view, e.g.
    q of a fused [tokens, 3, heads, head_dim] tensor (QK-norm, no copy).
    With quant (kerntune.Quant): (codes, scales); a static Quant's scales
    come back empty."""
    if quant is None:
        return _OPS.rms_norm(x, weight, float(eps), float(weight_offset))
    return _OPS.rms_norm_quant(x, weight, float(eps), float(weight_offset),
                               *_quant_args(quant, x))


def layer_norm(x, weight=None, bias=None, eps=1e-5, quant=None):
    """LayerNorm over the last dimension; with quant, (codes, scales)."""
    if quant is None:
        return _OPS.layer_norm(x, weight, bias, float(eps))
    return _OPS.layer_norm_quant(x, weight, bias, float(eps), *_quant_args(quant, x))


def add_rms_norm(x, residual, weight=None, eps=1e-6, weight_offset=0.0, quant=None):
    """residual += x (rounded to its dtype, written in place), then
    rms_norm(residual): what LLM engines call between layers."""
    if quant is None:
        return _OPS.add_rms_norm(x, residual, weight, float(eps), float(weight_offset))
    return _OPS.add_rms_norm_quant(x, residual, weight, float(eps), float(weight_offset),
                                   *_quant_args(quant, x))


def add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5, quant=None):
    """residual += x (written in place), then layer_norm(residual)."""
    if quant is None:
        return _OPS.add_layer_norm(x, residual, weight, bias, float(eps))
    return _OPS.add_layer_norm_quant(x, residual, weight, bias, float(eps),
                                     *_quant_args(quant, x))


def config_for(op, x, dim=-1):
    """(config key, source) the runtime launches `op` with on CUDA tensor x:
    source is "tuned", "shipped", "nearest_tuned" or "heuristic", as the
    daemon's GetConfig would answer for the same GPU model."""
    if x.device.type != "cuda":
        raise _errors.InvalidArgumentError("configs are chosen for CUDA tensors; x is on %s" %
                                           x.device)
    if op in ("softmax", "log_softmax"):
        _, (rows, cols, inner) = _ops._softmax_axis(x, dim)
    else:
        rows, cols, inner = x.numel() // max(x.shape[-1], 1), x.shape[-1], 1
    return _runtime.runtime().choose(op, _ops._dtype_name(x, "x"), rows, cols, inner,
                                     x.device.index, _runtime.batch_invariant_enabled())


def configs_origin(device=None):
    """Where the configs of a CUDA device come from now: "daemon unix:..." or
    "store ... + shipped files ...", with any problem."""
    index = torch.cuda.current_device() if device is None else torch.device(device).index or 0
    return _runtime.runtime().describe(index)

# The torch.nn modules, as kerntune.torch.nn.
from kerntune.torch import nn  # noqa: E402,F401  (imports kerntune.torch itself)
