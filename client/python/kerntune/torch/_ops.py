"""The torch.library ops of kerntune.torch: torch.ops.kerntune.<name>.

Each op has a real implementation for CUDA tensors (a launch on the current
stream of the tensor's device: capturable, no host synchronization) and for
CPU tensors (the fp64 reference, for tests and machines without a GPU), and
a fake one (output shapes and dtypes only) that torch.compile traces with.
The implementations go through one function, _launch, which lays the
tensors out as the kernels take them.

Rows are the tensor's last dimension. A tensor whose leading dimensions
fold into one evenly spaced run of rows is used in place (rows at least
cols apart: a slice of a wider tensor); the RMSNorm family also takes two
levels (tokens x heads of a fused qkv tensor: QK-norm without a copy). Any
other input is copied to contiguous memory first; a residual, which is
written back, must be one of those layouts or the op refuses it.
"""

import math

import torch

from kerntune import _errors, _quant
from kerntune.torch import _runtime

_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_LIB = torch.library.Library("kerntune", "DEF")


def _invalid(message):
    return _errors.InvalidArgumentError(message)


def _dtype_name(tensor, what):
    name = _DTYPES.get(tensor.dtype)
    if name is None:
        raise _invalid("%s is %s; kerntune takes float32, float16 and bfloat16" %
                       (what, tensor.dtype))
    return name


def _rows_of(tensor, allow_groups):
    """(rows, cols, row_stride, group_rows, group_stride) of the tensor's rows
    (its last dimension) where they are, or None when no such layout holds
    them: leading dimensions fold into one run of rows, or into two (groups
    of rows) when allow_groups."""
    cols = tensor.shape[-1]
    rows = math.prod(tensor.shape[:-1])
    if cols > 1 and tensor.stride(-1) != 1:
        return None
    runs = []  # (count, stride), outermost first
    for count, stride in zip(tensor.shape[:-1], tensor.stride()[:-1]):
        if count == 1:
            continue
        if runs and runs[-1][1] == stride * count:
            runs[-1] = (runs[-1][0] * count, stride)
        else:
            runs.append((count, stride))
    if not runs:
        return rows, cols, cols, 0, 0
    if len(runs) == 1 and runs[0][1] >= cols:
        return rows, cols, runs[0][1], 0, 0
    if len(runs) == 2 and allow_groups and runs[1][1] >= cols and \
            runs[0][1] >= runs[1][0] * runs[1][1]:
        return rows, cols, runs[1][1], runs[1][0], runs[0][1]
    return None


def _input_rows(tensor, allow_groups):
    """The tensor (a contiguous copy when its layout is none of the kernels')
    and its rows' layout."""
    if tensor.is_contiguous():  # the common case, without _rows_of's walk
        cols = tensor.shape[-1]
        return tensor, (tensor.numel() // cols if cols else 0, cols, cols, 0, 0)
    layout = _rows_of(tensor, allow_groups)
    if layout is None:
        tensor = tensor.contiguous()
        layout = _rows_of(tensor, False)
    return tensor, layout


def _vector(tensor, cols, dtype, what):
    """gamma / beta / mask operands: contiguous, of the storage dtype."""
    if tensor is None:
        return None
    if tensor.dtype != dtype:
        raise _invalid("%s is %s and the input %s: give them one dtype" %
                       (what, tensor.dtype, dtype))
    if tensor.numel() != cols:
        raise _invalid("%s has %d elements; the rows have %d" % (what, tensor.numel(), cols))
    return tensor.contiguous()


def _same_device(x, tensors):
    for what, tensor in tensors:
        if tensor is not None and tensor.device != x.device:
            raise _invalid("%s is on %s and the input on %s" % (what, tensor.device, x.device))


# The current stream of a CUDA device as a cudaStream_t: torch's raw getter
# (what Triton's launcher calls) where it has one, else the Stream object's.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(index):
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


def _launch(op, x, y, *, allow_groups=False, gamma=None, beta=None, mask=None, residual=None,
            row_scale=None, quant_scale=None, epsilon=1e-5, scale=1.0, mask_rows=0,
            causal=False, weight_offset=0.0, quant=None, inner=None):
    """Runs `op` from x into y (new, contiguous, x's shape unless inner is
    given: then x and y are contiguous (rows, cols, inner))."""
    rt = _runtime.runtime()
    run = _runtime.Run()
    run.op = rt.enum("op", op)
    run.dtype = rt.enum("dtype", _dtype_name(x, "the input"))
    if inner is not None:
        run.rows, run.cols, run.inner = inner
    else:
        x, (rows, cols, stride, group_rows, group_stride) = _input_rows(x, allow_groups)
        run.rows, run.cols, run.inner = rows, cols, 1
        run.x_row_stride, run.y_row_stride = stride, cols
        if group_rows:
            run.group_rows = group_rows
            run.x_group_stride, run.y_group_stride = group_stride, group_rows * cols
    if run.rows * run.cols * run.inner == 0:
        return
    _same_device(x, (("weight", gamma), ("bias", beta), ("mask", mask),
                     ("residual", residual), ("scale", quant_scale)))
    if residual is not None:
        layout = _rows_of(residual, False)
        if tuple(residual.shape) != tuple(x.shape) or layout is None:
            raise _invalid("the residual (shape %s, strides %s) must have the input's shape "
                           "%s and rows evenly spaced: it is written back in place" %
                           (tuple(residual.shape), residual.stride(), tuple(x.shape)))
        if residual.dtype != x.dtype:
            raise _invalid("the residual is %s and the input %s" % (residual.dtype, x.dtype))
        run.residual = residual.data_ptr()
        run.residual_row_stride = layout[2]
    run.x = x.data_ptr()
    run.y = y.data_ptr()
    for field, tensor in (("gamma", gamma), ("beta", beta), ("mask", mask),
                          ("row_scale", row_scale), ("quant_scale", quant_scale)):
        if tensor is not None:
            setattr(run, field, tensor.data_ptr())
    run.epsilon = epsilon
    run.scale = scale
    run.mask_rows = mask_rows
    run.causal = int(causal)
    run.weight_offset = weight_offset
    run.batch_invariant = _runtime.batch_invariant_enabled()
    if quant is not None:
        run.quant_dtype = rt.enum("quant_dtype", quant[0])
        run.scale_mode = rt.enum("scale_mode", quant[1])
        run.group_size = quant[2]
        run.scale_ub = quant[3]
    if x.device.type == "cuda":
        run.device = x.device.index
        run.stream = _current_stream(x.device.index)
    elif x.device.type == "cpu":
        run.device = -1
    else:
        raise _invalid("the input is on %s; kerntune runs CUDA and CPU tensors" % x.device)
    needed = rt.run(run)
    if needed:
        # Stream-ordered: the allocator hands the bytes to no other stream's
        # work before this launch is done.
        workspace = torch.empty(needed, dtype=torch.uint8, device=x.device)
        run.workspace, run.workspace_bytes = workspace.data_ptr(), needed
        rt.run(run)


def _define(schema, impl, fake):
    """Defines kerntune::<name> with `impl` for CPU and CUDA and its fake."""
    name = schema.split("(", 1)[0]
    _LIB.define(schema)
    _LIB.impl(name, impl, "CPU")
    _LIB.impl(name, impl, "CUDA")
    register_fake = getattr(torch.library, "register_fake", None) or \
        getattr(torch.library, "impl_abstract", None)
    if register_fake is not None:
        register_fake("kerntune::" + name, lib=_LIB)(fake)
    else:  # torch before 2.2: meta tensors reach the fake through the Meta key
        _LIB.impl(name, fake, "Meta")
    FAKES[name] = fake


# name -> fake implementation, for tests on a torch that cannot trace.
FAKES = {}


# Softmax and log-softmax along any dimension.
def _softmax_axis(x, dim):
    dim = dim % x.dim() if x.dim() else 0
    if x.dim() == 0:
        raise _invalid("softmax of a 0-d tensor")
    outer = math.prod(x.shape[:dim])
    inner = math.prod(x.shape[dim + 1:])
    return dim, (outer, x.shape[dim], inner)


def _softmax_impl(op):
    def impl(x, dim):
        dim, shape = _softmax_axis(x, dim)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if shape[2] == 1:
            _launch(op, x, y)
        else:
            _launch(op, x.contiguous(), y, inner=shape)
        return y
    return impl


def _like(x, dim=0):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


_define("softmax(Tensor x, int dim) -> Tensor", _softmax_impl("softmax"), _like)
_define("log_softmax(Tensor x, int dim) -> Tensor", _softmax_impl("log_softmax"), _like)


def _layer_norm(x, weight, bias, eps):
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    cols = x.shape[-1]
    _launch("layer_norm", x, y, gamma=_vector(weight, cols, x.dtype, "the weight"),
            beta=_vector(bias, cols, x.dtype, "the bias"), epsilon=eps)
    return y


_define("layer_norm(Tensor x, Tensor? weight, Tensor? bias, float eps) -> Tensor", _layer_norm,
        lambda x, weight, bias, eps: _like(x))


def _rms_norm(x, weight, eps, weight_offset):
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch("rms_norm", x, y, allow_groups=True,
            gamma=_vector(weight, x.shape[-1], x.dtype, "the weight"), epsilon=eps,
            weight_offset=weight_offset)
    return y


_define("rms_norm(Tensor x, Tensor? weight, float eps, float weight_offset) -> Tensor", _rms_norm,
        lambda x, weight, eps, weight_offset: _like(x))


def _reduce_scale(x):
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    scales = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    _launch("reduce_scale", x, y, row_scale=scales)
    return y, scales


_define("reduce_scale(Tensor x) -> (Tensor, Tensor)", _reduce_scale,
        lambda x: (_like(x), torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)))


def _scaled_masked_softmax(x, mask, scale, causal):
    if x.dim() < 2:
        raise _invalid("scaled_masked_softmax takes (..., q, k) scores; the input is %d-d" %
                       x.dim())
    q, k = x.shape[-2], x.shape[-1]
    if mask is not None and tuple(mask.shape) != (q, k):
        raise _invalid("the mask is %s; the scores' last two dimensions are (%d, %d)" %
                       (tuple(mask.shape), q, k))
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch("scaled_masked_softmax", x, y, mask=_vector(mask, q * k, x.dtype, "the mask")
            if mask is not None else None, scale=scale,
            mask_rows=q if (mask is not None or causal) else 0, causal=causal)
    return y


_define("scaled_masked_softmax(Tensor x, Tensor? mask, float scale, bool causal) -> Tensor",
        _scaled_masked_softmax, lambda x, mask, scale, causal: _like(x))


# The LLM forms: residual add first (written back), quantized output.
def _add_rms_norm(x, residual, weight, eps, weight_offset):
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch("add_rms_norm", x, y, residual=residual,
            gamma=_vector(weight, x.shape[-1], x.dtype, "the weight"), epsilon=eps,
            weight_offset=weight_offset)
    return y


_define("add_rms_norm(Tensor x, Tensor(a!) residual, Tensor? weight, float eps, "
        "float weight_offset) -> Tensor", _add_rms_norm,
        lambda x, residual, weight, eps, weight_offset: _like(x))


def _add_layer_norm(x, residual, weight, bias, eps):
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    cols = x.shape[-1]
    _launch("add_layer_norm", x, y, residual=residual,
            gamma=_vector(weight, cols, x.dtype, "the weight"),
            beta=_vector(bias, cols, x.dtype, "the bias"), epsilon=eps)
    return y


_define("add_layer_norm(Tensor x, Tensor(a!) residual, Tensor? weight, Tensor? bias, "
        "float eps) -> Tensor", _add_layer_norm,
        lambda x, residual, weight, bias, eps: _like(x))


def codes_dtype(quant_dtype):
    """The torch dtype of a quantizing op's codes."""
    return _quant.Quant(quant_dtype).torch_dtype(torch)


# As the Python client's: (..., 1) per row (vLLM's per-token layout, so
# codes * scales dequantizes), (..., cols / group_size) per group.
def _scales_shape(x, scale_mode, group_size):
    if scale_mode == "per_group":
        return tuple(x.shape[:-1]) + (x.shape[-1] // group_size,)
    return tuple(x.shape[:-1]) + (1,)


# One implementation for the four quantizing ops. Their schemas take what
# the op reads: the add forms a residual (written back), LayerNorm's a
# bias, RMSNorm's a weight offset.
_QUANT_ARGS = ("str quant_dtype, str scale_mode, int group_size, float scale_ub, "
               "Tensor? static_scale")


def _quantize(op, x, residual, weight, bias, eps, weight_offset, quant_dtype, scale_mode,
              group_size, scale_ub, static_scale):
    codes = torch.empty(x.shape, dtype=codes_dtype(quant_dtype), device=x.device)
    cols = x.shape[-1]
    if scale_mode == "static":
        if static_scale is None or static_scale.numel() != 1 or \
                static_scale.dtype != torch.float32:
            raise _invalid("scale_mode=static reads its scale from a one-element float32 "
                           "tensor on the input's device")
        scales = None
    else:
        if static_scale is not None:
            raise _invalid("scale_mode=%s computes its scales; give no static scale" %
                           scale_mode)
        scales = torch.empty(_scales_shape(x, scale_mode, group_size), dtype=torch.float32,
                             device=x.device)
    _launch(op, x, codes, allow_groups=op == "rms_norm_quant", residual=residual,
            gamma=_vector(weight, cols, x.dtype, "the weight"),
            beta=_vector(bias, cols, x.dtype, "the bias"), row_scale=scales,
            quant_scale=static_scale, epsilon=eps, weight_offset=weight_offset,
            quant=(quant_dtype, scale_mode, group_size, scale_ub))
    return codes, scales if scales is not None else torch.empty(0, device=x.device)


def _quant_fake(x, quant_dtype, scale_mode, group_size):
    codes = torch.empty(x.shape, dtype=codes_dtype(quant_dtype), device=x.device)
    shape = (0,) if scale_mode == "static" else _scales_shape(x, scale_mode, group_size)
    return codes, torch.empty(shape, dtype=torch.float32, device=x.device)


def _rms_norm_quant(x, weight, eps, weight_offset, *quant):
    return _quantize("rms_norm_quant", x, None, weight, None, eps, weight_offset, *quant)


def _layer_norm_quant(x, weight, bias, eps, *quant):
    return _quantize("layer_norm_quant", x, None, weight, bias, eps, 0.0, *quant)


def _add_rms_norm_quant(x, residual, weight, eps, weight_offset, *quant):
    return _quantize("add_rms_norm_quant", x, residual, weight, None, eps, weight_offset,
                     *quant)


def _add_layer_norm_quant(x, residual, weight, bias, eps, *quant):
    return _quantize("add_layer_norm_quant", x, residual, weight, bias, eps, 0.0, *quant)


_define("rms_norm_quant(Tensor x, Tensor? weight, float eps, float weight_offset, %s) -> "
        "(Tensor, Tensor)" % _QUANT_ARGS, _rms_norm_quant,
        lambda x, weight, eps, weight_offset, *quant: _quant_fake(x, *quant[:3]))
_define("layer_norm_quant(Tensor x, Tensor? weight, Tensor? bias, float eps, %s) -> "
        "(Tensor, Tensor)" % _QUANT_ARGS, _layer_norm_quant,
        lambda x, weight, bias, eps, *quant: _quant_fake(x, *quant[:3]))
_define("add_rms_norm_quant(Tensor x, Tensor(a!) residual, Tensor? weight, float eps, "
        "float weight_offset, %s) -> (Tensor, Tensor)" % _QUANT_ARGS, _add_rms_norm_quant,
        lambda x, residual, weight, eps, weight_offset, *quant: _quant_fake(x, *quant[:3]))
_define("add_layer_norm_quant(Tensor x, Tensor(a!) residual, Tensor? weight, Tensor? bias, "
        "float eps, %s) -> (Tensor, Tensor)" % _QUANT_ARGS, _add_layer_norm_quant,
        lambda x, residual, weight, bias, eps, *quant: _quant_fake(x, *quant[:3]))


# The differentiable ops' backward (softmaxes, layer_norm, rms_norm).
from kerntune.torch import _autograd  # noqa: E402  (after the ops it registers for)

_autograd.register(_LIB, torch.ops.kerntune)
