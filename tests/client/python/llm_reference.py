"""float64 NumPy references of the fused LLM norms, for the Python client's
tests (llm_ops_test.py, queue_test.py, gpu_client_test.py): the residual
add rounded to the storage dtype, RMSNorm with a weight offset, LayerNorm,
and the quantization rules of proto Quantization (round half to even,
saturation, NaN codes, dynamic scales), written here independently of the
daemon's C++ reference.
"""

import numpy as np

QMAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0, "int8": 127.0}
QUANT_DTYPES = tuple(QMAX)
# Every scale mode as (mode, group_size).
SCALE_MODES = (("per_row", 0), ("per_group", 64), ("per_group", 128), ("static", 0))


def round_to(values, dtype):
    """float64 values rounded once to the storage dtype (and back)."""
    return np.asarray(values, dtype=np.float64).astype(dtype).astype(np.float64)


def add_residual(x, residual):
    """r = x + residual in float, rounded to the storage dtype: what the
    add_* ops write back and normalize."""
    return round_to(x.astype(np.float64) + residual.astype(np.float64), x.dtype)


def rms_norm(x, weight, eps, weight_offset=0.0):
    x = np.asarray(x, dtype=np.float64)
    inv_rms = 1.0 / np.sqrt((x * x).mean(axis=-1) + eps)
    with np.errstate(invalid="ignore"):  # inf * 0 for a row with an inf: NaN
        y = x * inv_rms[..., None]
    if weight is not None:
        y = y * (weight_offset + weight.astype(np.float64))
    return y, inv_rms


def layer_norm(x, weight, bias, eps):
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=-1)
    inv_std = 1.0 / np.sqrt(((x - mean[..., None]) ** 2).mean(axis=-1) + eps)
    y = (x - mean[..., None]) * inv_std[..., None]
    if weight is not None:
        y = y * weight.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y, mean, inv_std


def _fp8_positive(dtype):
    """The non-negative finite fp8 values, index = code (ascending)."""
    exponent_bits, mantissa_bits, bias = (4, 3, 7) if dtype == "fp8_e4m3" else (5, 2, 15)
    values = []
    for code in range(1 << (exponent_bits + mantissa_bits)):
        exponent, mantissa = code >> mantissa_bits, code & ((1 << mantissa_bits) - 1)
        if exponent == 0:
            value = mantissa / (1 << mantissa_bits) * 2.0 ** (1 - bias)
        else:
            value = (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)
        if value > QMAX[dtype]:
            break
        values.append(value)
    return np.array(values)


def encode(q, dtype):
    """Codes of q = y / scale (float64): round half to even, saturated to
    +-qmax; NaN: 0x7f (fp8) or 0 (int8). uint8 fp8 bits or int8."""
    q = np.asarray(q, dtype=np.float64)
    if dtype == "int8":
        codes = np.clip(np.rint(np.nan_to_num(q, nan=0.0, posinf=127, neginf=-128)), -128, 127)
        return codes.astype(np.int8)
    table = _fp8_positive(dtype)
    magnitude = np.minimum(np.abs(np.nan_to_num(q, nan=0.0)), table[-1])
    above = np.clip(np.searchsorted(table, magnitude), 0, len(table) - 1)
    below = np.maximum(above - 1, 0)
    down, up = magnitude - table[below], table[above] - magnitude
    code = np.where(down < up, below, np.where(up < down, above,
                                               np.where(below % 2 == 0, below, above)))
    code = code.astype(np.uint8) | np.where(np.signbit(q), 0x80, 0).astype(np.uint8)
    return np.where(np.isnan(q), np.uint8(0x7f), code).astype(np.uint8)


def quantize(y, dtype, mode, group_size=0, scale_ub=0.0, scale=None):
    """(codes, scales) of y (..., cols) float64: scales float32 of shape
    (..., 1) per row, (..., cols / group_size) per group, or the static
    scale broadcast as (..., 1)."""
    y = np.asarray(y, dtype=np.float64)
    qmax = QMAX[dtype]
    cols = y.shape[-1]
    if mode == "static":
        scales = np.full(y.shape[:-1] + (1,), scale, dtype=np.float32)
    else:
        group = group_size if mode == "per_group" else cols
        grouped = np.abs(y.reshape(y.shape[:-1] + (cols // group, group)))
        with np.errstate(invalid="ignore"):
            amax = np.where(np.isnan(grouped), -np.inf, grouped).max(axis=-1)
        amax = np.maximum(amax, 0.0)  # an all-NaN group
        if scale_ub > 0:
            amax = np.minimum(amax, scale_ub)
        scales = np.maximum(amax / qmax, 1.0 / (qmax * 512)).astype(np.float32)
    groups = scales.shape[-1]
    per = np.repeat(scales.astype(np.float64), cols // groups, axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):
        return encode(y / per, dtype), scales


def ordinal(codes, dtype):
    """Codes as integers that step by 1 between adjacent values (fp8 sign and
    magnitude; int8 as is), so |ordinal difference| counts codes apart."""
    codes = np.asarray(codes)
    if dtype == "int8":
        return codes.view(np.int8).astype(np.int64)
    bits = codes.view(np.uint8).astype(np.int64)
    return np.where(bits & 0x80, -(bits & 0x7f), bits & 0x7f)


def codes_apart(got, want, dtype):
    """Per element, how many codes got is from want (NaN codes match NaN)."""
    got_bits, want_bits = np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8)
    if dtype != "int8":
        got_nan = (got_bits & 0x7f) == 0x7f if dtype == "fp8_e4m3" else (got_bits & 0x7f) > 0x7c
        want_nan = (want_bits & 0x7f) == 0x7f if dtype == "fp8_e4m3" else (want_bits & 0x7f) > 0x7c
        apart = np.abs(ordinal(got, dtype) - ordinal(want, dtype))
        return np.where(got_nan | want_nan, np.where(got_nan == want_nan, 0, 1 << 20), apart)
    return np.abs(ordinal(got, dtype) - ordinal(want, dtype))
