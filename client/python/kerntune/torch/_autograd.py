"""Autograd for the differentiable ops of kerntune.torch: softmax,
log_softmax, scaled_masked_softmax, layer_norm and rms_norm.

The backward is torch's own composite of the row's gradient formula,
computed in float32 from what the forward saved: y for the softmaxes, x and
the weights for the norms, whose statistics it recomputes from x. That makes
a training step correct through these ops today; it is not tuned. kerntune's
backward kernels replace it op by op as they land (issue 45). The
inference forms (the add and quantizing norms, reduce_scale) are not
differentiable: their codes and in-place residuals have no gradient.

Registered with torch.library.register_autograd where torch has it (2.4 on:
torch.compile traces the backward), else as an Autograd kernel around a
torch.autograd.Function (older torch, e.g. Debian's 1.13).
"""

import torch

from kerntune import _errors


def _float(t):
    return None if t is None else t.float()


def _leading_sum(t, like):
    """t summed over every dimension but the last, in like's dtype."""
    return t.reshape(-1, t.shape[-1]).sum(0).to(like.dtype)


def softmax_backward(y, dy, dim, scale=1.0):
    """dx of y = softmax(x * scale + constant) along dim."""
    yf, dyf = y.float(), dy.float()
    return (scale * yf * (dyf - (dyf * yf).sum(dim, keepdim=True))).to(y.dtype)


def log_softmax_backward(y, dy, dim):
    yf, dyf = y.float(), dy.float()
    return (dyf - yf.exp() * dyf.sum(dim, keepdim=True)).to(y.dtype)


def layer_norm_backward(x, weight, bias, eps, dy):
    """(dx, dweight, dbias) of y = (x - mean) * rstd * weight + bias."""
    xf, dyf = x.float(), dy.float()
    mean = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xf - mean).pow(2).mean(-1, keepdim=True) + eps)
    x_hat = (xf - mean) * rstd
    g = dyf * weight.float() if weight is not None else dyf
    dx = rstd * (g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True))
    dweight = _leading_sum(dyf * x_hat, weight) if weight is not None else None
    dbias = _leading_sum(dyf, bias) if bias is not None else None
    return dx.to(x.dtype), dweight, dbias


def rms_norm_backward(x, weight, eps, weight_offset, dy):
    """(dx, dweight) of y = x * rstd * (weight_offset + weight)."""
    xf, dyf = x.float(), dy.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = xf * rstd
    g = dyf * (weight_offset + weight.float()) if weight is not None else dyf
    dx = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
    dweight = _leading_sum(dyf * x_hat, weight) if weight is not None else None
    return dx.to(x.dtype), dweight


def _no_mask_grad(mask):
    if mask is not None and mask.requires_grad:
        raise _errors.InvalidArgumentError(
            "scaled_masked_softmax does not differentiate its mask (an additive "
            "constant); detach it")


# name -> (save(ctx, inputs, output), backward(ctx, grad) -> a gradient per input)
def _save_y(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.dim = inputs[1]


def _save_scaled(ctx, inputs, output):
    _no_mask_grad(inputs[1])
    ctx.save_for_backward(output)
    ctx.scale = inputs[2]


def _save_inputs(ctx, inputs, output):
    ctx.save_for_backward(*[t for t in inputs if isinstance(t, torch.Tensor)])
    ctx.is_tensor = [isinstance(t, torch.Tensor) for t in inputs]
    ctx.others = [None if isinstance(t, torch.Tensor) else t for t in inputs]


def _saved(ctx):
    """The forward's inputs again (None where a tensor was not given)."""
    tensors = iter(ctx.saved_tensors)
    return [next(tensors) if is_tensor else other
            for is_tensor, other in zip(ctx.is_tensor, ctx.others)]


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return softmax_backward(y, dy, ctx.dim), None


def _log_softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return log_softmax_backward(y, dy, ctx.dim), None


def _scaled_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return softmax_backward(y, dy, -1, ctx.scale), None, None, None


def _layer_norm_grad(ctx, dy):
    x, weight, bias, eps = _saved(ctx)
    return layer_norm_backward(x, weight, bias, eps, dy) + (None,)


def _rms_norm_grad(ctx, dy):
    x, weight, eps, weight_offset = _saved(ctx)
    dx, dweight = rms_norm_backward(x, weight, eps, weight_offset, dy)
    return dx, dweight, None, None


RULES = {
    "softmax": (_save_y, _softmax_grad),
    "log_softmax": (_save_y, _log_softmax_grad),
    "scaled_masked_softmax": (_save_scaled, _scaled_grad),
    "layer_norm": (_save_inputs, _layer_norm_grad),
    "rms_norm": (_save_inputs, _rms_norm_grad),
}


def _function(op, save, backward):
    """An autograd.Function over torch.ops.kerntune.<op> (older torch)."""
    def forward(ctx, *inputs):
        guard = torch._C._AutoDispatchBelowAutograd()  # the op's own kernel, not this one
        try:
            output = op(*inputs)
        finally:
            del guard
        save(ctx, inputs, output)
        return output

    return type("KerntuneGrad_" + str(op).replace(".", "_"), (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def register(lib, ops):
    """Gives each op of RULES its autograd; `ops` is torch.ops.kerntune."""
    register_autograd = getattr(torch.library, "register_autograd", None)
    for name, (save, backward) in RULES.items():
        if register_autograd is not None:
            register_autograd("kerntune::" + name, backward, setup_context=save, lib=lib)
        else:
            fn = _function(getattr(ops, name).default, save, backward)
            lib.impl(name, lambda *inputs, _fn=fn: _fn.apply(*inputs), "Autograd")
