"""Quantized norm outputs: kerntune.Quant (what a *_quant op writes) and
kerntune.dequantize (codes back to float32, for NumPy, which has no fp8).

The rules are the daemon's (proto Quantization): code = round-half-to-even(y
/ scale), saturated to the code type's finite range; NaN gives the fp8 NaN
code (0 for int8). A dynamic scale is max(min(amax, scale_ub) / qmax, 1 /
(qmax * 512)), amax the max |y| of its row or group, qmax 448 (fp8 e4m3),
57344 (fp8 e5m2) or 127 (int8).
"""

import math

import numpy as np

from kerntune import _errors
from kerntune import _torch
from kerntune.v1 import kerntune_pb2 as pb

QUANT_DTYPES = {
    "fp8_e4m3": pb.QUANT_DTYPE_FP8_E4M3,
    "fp8_e5m2": pb.QUANT_DTYPE_FP8_E5M2,
    "int8": pb.QUANT_DTYPE_INT8,
}
SCALE_MODES = {
    "static": pb.SCALE_MODE_STATIC,
    "per_row": pb.SCALE_MODE_PER_ROW,
    "per_group": pb.SCALE_MODE_PER_GROUP,
}
# The largest finite code value (kernels/types.h QuantMax).
QUANT_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0, "int8": 127.0}
GROUP_SIZES = (64, 128)

# Other spellings of the code types: kernels::ParseQuantDType's, and the
# names of torch's and ml_dtypes' dtypes.
_ALIASES = {
    "e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
}
# The torch dtype of each code type (looked up by name: torch before 2.1 has
# no float8 dtypes, and then fp8 codes come as torch.uint8).
_TORCH_DTYPES = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "int8": "int8"}


def _invalid(message):
    return _errors.InvalidArgumentError(message)


def quant_dtype_name(dtype):
    """"fp8_e4m3", "fp8_e5m2" or "int8" from a name, a torch dtype or a NumPy dtype."""
    if isinstance(dtype, str):
        name = dtype[len("torch."):] if dtype.startswith("torch.") else dtype
    elif _torch.is_dtype(dtype):
        name = str(dtype)[len("torch."):]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)
    name = _ALIASES.get(name, name)
    if name not in QUANT_DTYPES:
        raise _invalid("quant dtype=%s must be fp8_e4m3, fp8_e5m2 or int8 (or "
                       "torch.float8_e4m3fn, torch.float8_e5m2, torch.int8)" % (dtype,))
    return name


class Quant:
    """How a norm quantizes its output (the ops' quant= argument).

    dtype: "fp8_e4m3" (OCP e4m3fn, max 448), "fp8_e5m2" (max 57344) or
    "int8"; torch.float8_e4m3fn, torch.float8_e5m2 and torch.int8 name them
    too. scale_mode: "per_row" (one scale per row, computed from its max
    |y|), "per_group" (one per group_size consecutive elements of a row: 64
    or 128, dividing the row; the "1 x 128 block" layout) or "static" (the
    caller's scale). scale_ub: the dynamic modes' upper bound on max |y|
    (vLLM's scale_ub; 0 = none). scale: static only, y ~= code * scale: a
    finite float > 0, or one float32 in a shared array or a CUDA tensor
    (read when the op runs, as vLLM's static fp8 scale).

    Immutable; equal Quants are interchangeable.
    """

    __slots__ = ("dtype", "scale_mode", "group_size", "scale_ub", "scale")

    def __init__(self, dtype, scale_mode="per_row", *, group_size=0, scale_ub=0.0, scale=None):
        dtype = quant_dtype_name(dtype)
        if scale_mode not in SCALE_MODES:
            raise _invalid("scale_mode=%r must be per_row, per_group or static" % (scale_mode,))
        group_size = int(group_size or 0)
        if scale_mode == "per_group":
            if group_size not in GROUP_SIZES:
                raise _invalid("group_size=%d must be 64 or 128 (scale_mode=per_group)"
                               % group_size)
        elif group_size:
            raise _invalid("group_size=%d is for scale_mode=per_group, not %s"
                           % (group_size, scale_mode))
        scale_ub = float(scale_ub or 0.0)
        if not (math.isfinite(scale_ub) and scale_ub >= 0):
            raise _invalid("scale_ub=%r must be finite and >= 0 (0: no bound)" % (scale_ub,))
        if scale_mode == "static":
            if scale is None:
                raise _invalid("scale_mode=static needs scale= (a float > 0, or one float32 "
                               "in a shared array or CUDA tensor)")
            if scale_ub:
                raise _invalid("scale_ub bounds the dynamic scales; scale_mode=static "
                               "takes none")
            if isinstance(scale, (int, float, np.floating, np.integer)) and not isinstance(
                    scale, bool):
                scale = float(scale)
                if not (math.isfinite(scale) and scale > 0):
                    raise _invalid("scale=%r must be finite and > 0" % (scale,))
            elif not (isinstance(scale, np.ndarray) or _torch.is_tensor(scale)):
                raise _invalid("scale must be a float, a NumPy array or a torch tensor, "
                               "not %s" % type(scale).__name__)
        elif scale is not None:
            raise _invalid("scale= is the static scale; scale_mode=%s computes its own "
                           "(they come back as the call's scales)" % scale_mode)
        for slot, value in (("dtype", dtype), ("scale_mode", scale_mode),
                            ("group_size", group_size), ("scale_ub", scale_ub),
                            ("scale", scale)):
            object.__setattr__(self, slot, value)

    def __setattr__(self, name, value):
        raise AttributeError("kerntune.Quant is immutable")

    @property
    def dynamic(self):
        return self.scale_mode != "static"

    @property
    def scale_tensor(self):
        """The static scale when it is an array or tensor (it travels as a
        tensor of its own), else None."""
        return None if isinstance(self.scale, float) or self.scale is None else self.scale

    def key(self):
        """What a prepared call compares (an array scale is keyed as an array)."""
        scale = self.scale if isinstance(self.scale, float) else None
        return (self.dtype, self.scale_mode, self.group_size, self.scale_ub, scale)

    def scales_per_row(self, cols):
        """Scales per row: cols / group_size per_group, 1 per_row (0 static)."""
        if self.scale_mode == "per_group":
            return cols // self.group_size
        return 1 if self.dynamic else 0

    def fill(self, message):
        """Fills a pb.Quantization, except its scale and scales refs."""
        message.dtype = QUANT_DTYPES[self.dtype]
        message.scale_mode = SCALE_MODES[self.scale_mode]
        if self.group_size:
            message.group_size = self.group_size
        if self.scale_ub:
            message.scale_ub = self.scale_ub

    def numpy_dtype(self):
        """The NumPy dtype of new codes: int8, or uint8 holding fp8 bits."""
        return np.dtype(np.int8) if self.dtype == "int8" else np.dtype(np.uint8)

    def numpy_accepts(self, dtype):
        """Whether a NumPy `out` of `dtype` can hold the codes: int8 for int8;
        uint8 (the bits) or ml_dtypes' matching float8 for fp8."""
        dtype = np.dtype(dtype)
        if dtype.itemsize != 1:
            return False
        if self.dtype == "int8":
            return dtype == np.int8
        return dtype == np.uint8 or _ALIASES.get(dtype.name) == self.dtype

    def torch_dtype(self, torch):
        """The torch dtype of new codes: float8_e4m3fn / float8_e5m2 / int8,
        torch.uint8 for fp8 on a torch without float8."""
        return getattr(torch, _TORCH_DTYPES[self.dtype], None) or torch.uint8

    def torch_accepts(self, torch, dtype):
        """Whether a torch `out` of `dtype` can hold the codes: the code type's
        own dtype, or torch.uint8 for fp8 bits."""
        return dtype == self.torch_dtype(torch) or (self.dtype != "int8"
                                                    and dtype == torch.uint8)

    def __eq__(self, other):
        if not isinstance(other, Quant):
            return NotImplemented
        return self.key() == other.key() and self.scale_tensor is other.scale_tensor

    def __hash__(self):
        return hash((self.key(), id(self.scale_tensor)))

    def __repr__(self):
        parts = ["%r" % self.dtype, "%r" % self.scale_mode]
        if self.group_size:
            parts.append("group_size=%d" % self.group_size)
        if self.scale_ub:
            parts.append("scale_ub=%r" % self.scale_ub)
        if self.scale is not None:
            parts.append("scale=%r" % (self.scale if isinstance(self.scale, float)
                                       else type(self.scale).__name__))
        return "kerntune.Quant(%s)" % ", ".join(parts)


def _fp8_table(exponent_bits, mantissa_bits, bias, has_inf):
    """float32 values of the 256 codes of an OCP fp8 type."""
    values = np.empty(256, dtype=np.float32)
    exponent_max = (1 << exponent_bits) - 1
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent = (code >> mantissa_bits) & exponent_max
        mantissa = code & ((1 << mantissa_bits) - 1)
        if has_inf and exponent == exponent_max:
            value = math.inf if mantissa == 0 else math.nan
        elif not has_inf and exponent == exponent_max and mantissa == (1 << mantissa_bits) - 1:
            value = math.nan  # e4m3fn: S.1111.111 is NaN, no infinities
        elif exponent == 0:
            value = mantissa / (1 << mantissa_bits) * 2.0 ** (1 - bias)
        else:
            value = (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)
        values[code] = sign * value
    return values


_DECODE = {}


def decode(codes, dtype):
    """float32 values of codes (int8, or uint8 fp8 bits) of quant dtype `dtype`."""
    dtype = quant_dtype_name(dtype)
    codes = np.asarray(codes)
    if dtype == "int8":
        return codes.view(np.int8).astype(np.float32)
    table = _DECODE.get(dtype)
    if table is None:
        table = _DECODE[dtype] = (_fp8_table(4, 3, 7, False) if dtype == "fp8_e4m3"
                                  else _fp8_table(5, 2, 15, True))
    return table[codes.view(np.uint8)]


def dequantize(codes, scales, dtype):
    """code * scale as float32 NumPy: the values a quantized norm stands for.

    codes: NumPy codes (int8, uint8 fp8 bits or an ml_dtypes float8), or a
    torch tensor (moved to the CPU). scales: a float (static), or the
    call's scales ((..., 1) per row, (..., cols / group_size) per group).
    dtype: the Quant's code type (or the Quant itself).
    """
    if isinstance(dtype, Quant):
        dtype = dtype.dtype
    if _torch.is_tensor(codes):
        codes = codes.detach().cpu()
        codes = codes.view(_torch.torch_module().uint8 if codes.element_size() == 1
                           and str(codes.dtype) != "torch.int8" else codes.dtype).numpy()
    if _torch.is_tensor(scales):
        scales = scales.detach().cpu().numpy()
    values = decode(codes, dtype)
    scales = np.asarray(scales, dtype=np.float32)
    if scales.ndim == 0 or scales.shape[-1] in (0, 1):
        return values * scales
    groups = scales.shape[-1]
    cols = values.shape[-1]
    if cols % groups:
        raise _invalid("codes have %d columns, not a multiple of the %d scales per row"
                       % (cols, groups))
    return (values.reshape(values.shape[:-1] + (groups, cols // groups))
            * scales[..., None]).reshape(values.shape)
