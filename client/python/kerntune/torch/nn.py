"""Modules that replace torch.nn's with kerntune's ops and load their
state_dicts: RMSNorm, LayerNorm, Softmax, LogSoftmax.

    norm = kerntune.torch.nn.RMSNorm(4096, eps=1e-6)
    norm.load_state_dict(torch_norm.state_dict())

from_torch(module) makes the kerntune module of a torch one, its weights
shared. kerntune normalizes over the last dimension only, so
normalized_shape has one dimension.
"""

import numbers

import torch

from kerntune import _errors
import kerntune.torch as _kt

__all__ = ["LayerNorm", "LogSoftmax", "RMSNorm", "Softmax", "from_torch"]


def _features(normalized_shape):
    if isinstance(normalized_shape, numbers.Integral):
        return int(normalized_shape)
    shape = tuple(normalized_shape)
    if len(shape) != 1:
        raise _errors.InvalidArgumentError(
            "normalized_shape=%s: kerntune normalizes over the last dimension only" % (shape,))
    return int(shape[0])


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm's parameters and state_dict; weight_offset: the
    weight is applied as (weight_offset + weight), Gemma's 1."""

    def __init__(self, normalized_shape, eps=1e-6, elementwise_affine=True, weight_offset=0.0,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (_features(normalized_shape),)
        self.eps = 1e-6 if eps is None else float(eps)
        self.weight_offset = float(weight_offset)
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(
                torch.full(self.normalized_shape, 1.0 - self.weight_offset, device=device,
                           dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x, residual=None, quant=None):
        """rms_norm(x); with a residual, add_rms_norm (the residual is
        updated in place); with quant, (codes, scales)."""
        if residual is None:
            return _kt.rms_norm(x, self.weight, self.eps, self.weight_offset, quant=quant)
        return _kt.add_rms_norm(x, residual, self.weight, self.eps, self.weight_offset,
                                quant=quant)

    def extra_repr(self):
        return "%s, eps=%s, elementwise_affine=%s, weight_offset=%s" % (
            self.normalized_shape, self.eps, self.elementwise_affine, self.weight_offset)


class LayerNorm(torch.nn.Module):
    """torch.nn.LayerNorm's parameters and state_dict."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (_features(normalized_shape),)
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(
                torch.ones(self.normalized_shape, device=device, dtype=dtype))
            self.bias = torch.nn.Parameter(
                torch.zeros(self.normalized_shape, device=device, dtype=dtype)) if bias else None
        else:
            self.register_parameter("weight", None)
        if not (elementwise_affine and bias):
            self.register_parameter("bias", None)

    def forward(self, x, residual=None, quant=None):
        if residual is None:
            return _kt.layer_norm(x, self.weight, self.bias, self.eps, quant=quant)
        return _kt.add_layer_norm(x, residual, self.weight, self.bias, self.eps, quant=quant)

    def extra_repr(self):
        return "%s, eps=%s, elementwise_affine=%s" % (self.normalized_shape, self.eps,
                                                      self.elementwise_affine)


class Softmax(torch.nn.Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, x):
        return _kt.softmax(x, self.dim)

    def extra_repr(self):
        return "dim=%s" % self.dim


class LogSoftmax(Softmax):
    def forward(self, x):
        return _kt.log_softmax(x, self.dim)


def from_torch(module):
    """The kerntune module of a torch.nn RMSNorm, LayerNorm, Softmax or
    LogSoftmax (or of a module with the same attributes, such as
    transformers' LlamaRMSNorm: weight and variance_epsilon), its
    parameters shared."""
    if isinstance(module, torch.nn.Softmax):
        return Softmax(module.dim)
    if isinstance(module, torch.nn.LogSoftmax):
        return LogSoftmax(module.dim)
    if isinstance(module, torch.nn.LayerNorm):
        made = LayerNorm(module.normalized_shape, module.eps, elementwise_affine=False)
        made.weight, made.bias = module.weight, module.bias
        made.elementwise_affine = module.weight is not None
        return made
    if type(module).__name__.endswith("RMSNorm"):
        # torch.nn.RMSNorm (eps None: its dtype's machine epsilon, weight None
        # without elementwise_affine) or transformers' (variance_epsilon).
        weight = getattr(module, "weight", None)
        eps = getattr(module, "eps", getattr(module, "variance_epsilon", None))
        shape = getattr(module, "normalized_shape", None)
        features = weight.shape[-1] if weight is not None else (shape and shape[-1])
        if features:
            if eps is None:
                dtype = weight.dtype if weight is not None else torch.get_default_dtype()
                eps = torch.finfo(dtype).eps
            made = RMSNorm(features, eps, elementwise_affine=False)
            if weight is not None:
                made.weight = weight
                made.elementwise_affine = True
            return made
    raise _errors.InvalidArgumentError("from_torch: %s has no kerntune module" %
                                       type(module).__name__)
