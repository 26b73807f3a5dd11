#!/usr/bin/env python3
"""The Python client's fused LLM norms against a real kerntuned --cpu child:
add_rms_norm / add_layer_norm (the residual written back), Gemma's
weight_offset, quantized outputs (fp8 e4m3, fp8 e5m2, int8 codes with
static, per-row and per-group scales) and strided rows (a per-head view of
a fused qkv tensor normalized in place), each checked against the float64
NumPy reference of llm_reference.py; the client's own checks (kerntune.Quant,
row layouts) without a daemon; and the bad inputs it refuses.

Run by CTest like client_test.py; exits 77 (skipped) without grpc, protobuf
or NumPy.
"""

import os
import sys
import unittest

try:
    import grpc
    import numpy as np

    import kerntune
    from kerntune import _rows
    from kerntune.v1 import kerntune_pb2 as pb
except ImportError as e:  # pragma: no cover - environment check
    print("SKIP: the Python client needs grpc, protobuf and numpy: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_reference as ref  # noqa: E402
from client_test import (TOLERANCE, STATS_TOLERANCE, CloseMixin, DaemonTestCase,  # noqa: E402
                         _skip_without_buffers)

EPS = 1e-6
DTYPES = ("float32", "float16")
# The four norms a quantizing call can be: (method, adds a residual).
NORMS = (("rms_norm", False), ("layer_norm", False), ("add_rms_norm", True),
         ("add_layer_norm", True))


def static_scale(dtype):
    """A static scale under which the larger |y| of N(0, 1)-ish rows saturate."""
    return 2.5 / ref.QMAX[dtype]


def quant_for(dtype, mode, group_size):
    if mode == "static":
        return kerntune.Quant(dtype, "static", scale=static_scale(dtype))
    return kerntune.Quant(dtype, mode, group_size=group_size)


class QuantTest(unittest.TestCase):
    """kerntune.Quant and kerntune.dequantize, no daemon."""

    def test_names_and_defaults(self):
        quant = kerntune.Quant("e4m3")
        self.assertEqual((quant.dtype, quant.scale_mode, quant.group_size, quant.scale_ub),
                         ("fp8_e4m3", "per_row", 0, 0.0))
        self.assertEqual(kerntune.Quant("float8_e5m2").dtype, "fp8_e5m2")
        self.assertEqual(kerntune.Quant(np.int8).dtype, "int8")
        self.assertEqual(kerntune.Quant("int8", "per_group", group_size=64),
                         kerntune.Quant("int8", "per_group", group_size=64))
        with self.assertRaises(AttributeError):
            quant.dtype = "int8"

    def test_bad_quants_name_the_argument(self):
        for kwargs, fragment in [
            (dict(dtype="fp16"), "dtype=fp16"),
            (dict(dtype="int8", scale_mode="per_block"), "scale_mode='per_block'"),
            (dict(dtype="int8", scale_mode="per_group"), "group_size=0 must be 64 or 128"),
            (dict(dtype="int8", scale_mode="per_group", group_size=32), "group_size=32"),
            (dict(dtype="int8", group_size=64), "group_size=64 is for scale_mode=per_group"),
            (dict(dtype="int8", scale_ub=-1), "scale_ub=-1.0"),
            (dict(dtype="int8", scale_ub=float("nan")), "scale_ub=nan"),
            (dict(dtype="int8", scale_mode="static"), "needs scale="),
            (dict(dtype="int8", scale_mode="static", scale=0.0), "scale=0.0 must be finite"),
            (dict(dtype="int8", scale_mode="static", scale=float("nan")), "scale=nan"),
            (dict(dtype="int8", scale_mode="static", scale=1.0, scale_ub=2.0), "scale_ub"),
            (dict(dtype="int8", scale=1.0), "scale= is the static scale"),
        ]:
            dtype = kwargs.pop("dtype")
            with self.assertRaises(kerntune.InvalidArgumentError) as context:
                kerntune.Quant(dtype, **kwargs)
            self.assertIn(fragment, str(context.exception), kwargs)

    def test_dequantize_decodes_every_code(self):
        codes = np.array([0x00, 0x01, 0x38, 0x7e, 0xfe, 0x7f], np.uint8)
        values = kerntune.dequantize(codes, 2.0, "fp8_e4m3")
        np.testing.assert_array_equal(values[:5], [0.0, 2.0 ** -9 * 2, 2.0, 896.0, -896.0])
        self.assertTrue(np.isnan(values[5]))
        values = kerntune.dequantize(np.array([0x7b, 0x7c, 0x3c], np.uint8), 1.0, "fp8_e5m2")
        np.testing.assert_array_equal(values, [57344.0, np.inf, 1.0])
        codes = np.array([[-128, 127, 3, 4]], np.int8)
        values = kerntune.dequantize(codes, np.array([[0.5, 2.0]], np.float32), "int8")
        np.testing.assert_array_equal(values, [[-64.0, 63.5, 6.0, 8.0]])
        # The reference's encoding is dequantize's inverse on the codes.
        for dtype in ref.QUANT_DTYPES:
            every = (np.arange(256, dtype=np.uint8) if dtype != "int8"
                     else np.arange(-128, 128).astype(np.int8))
            decoded = kerntune.dequantize(every, 1.0, dtype)
            finite = np.isfinite(decoded)
            again = ref.encode(decoded[finite].astype(np.float64), dtype)
            np.testing.assert_array_equal(ref.ordinal(again, dtype),
                                          ref.ordinal(every[finite], dtype), dtype)


class RowLayoutTest(unittest.TestCase):
    """kerntune._rows: which strided views are row layouts, no daemon."""

    def test_views(self):
        T, H, D = 4, 8, 64
        qkv = np.zeros((T, 3 * H * D), np.float32)

        def layout(view):
            return _rows.of(view.shape, [s // view.itemsize for s in view.strides])

        q = qkv.reshape(T, 3, H, D)[:, 0]
        self.assertEqual(layout(q), (D, H, 3 * H * D))
        self.assertEqual(_rows.extent(layout(q), T * H, D), (T - 1) * 3 * H * D + H * D)
        self.assertEqual(layout(qkv.reshape(T, 3 * H, D)), (D, 0, 0))
        self.assertEqual(layout(qkv[:, :D]), (3 * H * D, 0, 0))
        self.assertEqual(layout(qkv.reshape(T, 3, H, D)[:, 1, 2]), (3 * H * D, 0, 0))
        self.assertIsNone(layout(qkv.reshape(T, 3, H, D)[:, :2, :4]))  # three levels
        self.assertIsNone(layout(qkv.reshape(T, 3 * H, D)[:, :, ::2]))  # strided columns
        self.assertIsNone(_rows.of((4, 8), (4, 1)))  # rows overlap
        self.assertIsNone(_rows.of((4, 8), (0, 1)))  # broadcast rows
        contiguous = layout(np.zeros((T * H, D), np.float32))
        self.assertTrue(_rows.is_contiguous(contiguous, D))
        self.assertIsNone(_rows.proto(contiguous, contiguous, None, D))
        message = _rows.proto(_rows.with_groups(layout(q), H),
                              _rows.with_groups(contiguous, H), contiguous, D)
        self.assertEqual((message.input, message.output, message.residual, message.group_rows,
                          message.input_group, message.output_group),
                         (D, D, D, H, 3 * H * D, H * D))


class TorchLayoutTest(unittest.TestCase):
    """What the CUDA path reads from torch tensors (strides, code dtypes),
    on CPU tensors: no GPU or daemon needed. Skipped without torch."""

    def setUp(self):
        try:
            import torch
        except ImportError:
            raise unittest.SkipTest("torch is not installed")
        self.torch = torch

    def test_per_head_views_and_code_dtypes(self):
        torch = self.torch
        from kerntune import _client

        T, H, D = 4, 8, 64
        qkv = torch.zeros((T, 3 * H * D))
        layout = _client._Layout((T, H, D), T * H, D, 1, 0)
        rows = _client.Client._cuda_rows(qkv.view(T, 3, H, D)[:, 0], layout)
        self.assertEqual(rows, (D, H, 3 * H * D))
        self.assertEqual(_client.Client._cuda_rows(torch.zeros((T, H, D)), layout), (D, 0, 0))
        self.assertIsNone(_client.Client._cuda_rows(qkv.view(T, 3, H, D)[:, :, :, ::2],
                                                    _client._Layout((T, 3, H, D // 2), T * 3 * H,
                                                                    D // 2, 1, 0)))
        float8 = hasattr(torch, "float8_e4m3fn")
        for name, want in (("fp8_e4m3", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2")):
            quant = kerntune.Quant(name)
            got = quant.torch_dtype(torch)
            self.assertEqual(got, getattr(torch, want) if float8 else torch.uint8, name)
            self.assertTrue(quant.torch_accepts(torch, torch.uint8))
            self.assertFalse(quant.torch_accepts(torch, torch.int8))
            self.assertEqual(kerntune.Quant(getattr(torch, want, name)).dtype, name)
        self.assertEqual(kerntune.Quant(torch.int8).torch_dtype(torch), torch.int8)
        self.assertFalse(kerntune.Quant("int8").torch_accepts(torch, torch.uint8))


class LlmOpsTest(DaemonTestCase, CloseMixin):
    def setUp(self):
        _skip_without_buffers(self.client)
        self.rng = np.random.default_rng(44)

    def data(self, shape, dtype, mean=0.5):
        return self.rng.normal(mean, 2.0, size=shape).astype(dtype)

    def reference(self, method, x, residual, weight, bias, weight_offset=0.0):
        """(y float64, r) of a norm method: r = the residual written back."""
        r = ref.add_residual(x, residual) if residual is not None else x
        if "rms" in method:
            return ref.rms_norm(r, weight, EPS, weight_offset)[0], r
        return ref.layer_norm(r, weight, bias, EPS)[0], r

    def call(self, method, x, residual, weight, bias, **kwargs):
        args = (x, residual) if method.startswith("add_") else (x,)
        if "rms" in method:
            return getattr(self.client, method)(*args, weight, EPS, **kwargs)
        return getattr(self.client, method)(*args, weight, bias, EPS, **kwargs)

    def assertCodes(self, got, want, dtype, what):
        self.assertEqual(got.shape, want.shape, what)
        apart = ref.codes_apart(got, want, dtype)
        if apart.max(initial=0) > 1:
            index = tuple(int(i) for i in np.argwhere(apart > 1)[0])
            self.fail("%s: code %s at %s is %d codes from the reference's %s"
                      % (what, got[index], index, apart[index], want[index]))

    def test_add_norms_write_the_residual_back(self):
        for method in ("add_rms_norm", "add_layer_norm"):
            for dtype in DTYPES:
                for shape in [(1, 1), (7, 256), (3, 5, 130)]:
                    what = "%s %s %s" % (method, dtype, shape)
                    x, before = self.data(shape, dtype), self.data(shape, dtype)
                    residual = kerntune.shared_array(before)
                    weight, bias = self.data(shape[-1:], dtype), self.data(shape[-1:], dtype)
                    y = self.call(method, x, residual, weight, bias)
                    want, r = self.reference(method, x, before, weight, bias)
                    np.testing.assert_array_equal(residual.astype(np.float64), r, what)
                    self.assertClose(y, want, TOLERANCE[(dtype, "layer_norm")], what)
                    self.assertEqual(y.dtype, np.dtype(dtype))

    def test_add_norm_in_place_with_stats(self):
        x = self.data((6, 512), "float16")
        before = self.data((6, 512), "float16")
        weight = self.data((512,), "float16")
        shared_x = kerntune.shared_array(x)
        residual = kerntune.shared_array(before)
        y, inv_rms = self.client.add_rms_norm(shared_x, residual, weight, EPS, return_stats=True,
                                              out=shared_x)
        self.assertIs(y, shared_x)
        r = ref.add_residual(x, before)
        want, want_inv_rms = ref.rms_norm(r, weight, EPS)
        self.assertClose(y, want, TOLERANCE[("float16", "rms_norm")])
        self.assertClose(inv_rms, want_inv_rms, STATS_TOLERANCE)
        np.testing.assert_array_equal(residual.astype(np.float64), r)

    def test_weight_offset(self):
        for dtype in DTYPES:
            x, weight = self.data((9, 300), dtype), self.data((300,), dtype, mean=0.0)
            for offset in (1.0, -0.5):
                y = self.client.rms_norm(x, weight, EPS, weight_offset=offset)
                want, _ = ref.rms_norm(x, weight, EPS, offset)
                self.assertClose(y, want, TOLERANCE[(dtype, "rms_norm")], "%s %g" % (dtype, offset))
            result = self.client.run("rms_norm", x, weight=weight, weight_offset=1.0)
            self.assertClose(result.output, ref.rms_norm(x, weight, EPS, 1.0)[0],
                             TOLERANCE[(dtype, "rms_norm")])

    def test_quantized_norms(self):
        cols = 256
        for method, adds in NORMS:
            for dtype in DTYPES:
                for qdtype in ref.QUANT_DTYPES:
                    for mode, group in ref.SCALE_MODES:
                        what = "%s %s -> %s %s %d" % (method, dtype, qdtype, mode, group)
                        x = self.data((2, 3, cols), dtype)
                        before = self.data((2, 3, cols), dtype) if adds else None
                        residual = kerntune.shared_array(before) if adds else None
                        weight, bias = self.data((cols,), dtype), self.data((cols,), dtype)
                        quant = quant_for(qdtype, mode, group)
                        codes, scales = self.call(method, x, residual, weight, bias, quant=quant)
                        y, r = self.reference(method, x, before, weight, bias)
                        want, want_scales = ref.quantize(y, qdtype, mode, group,
                                                         scale=quant.scale)
                        self.assertEqual(codes.dtype, quant.numpy_dtype(), what)
                        self.assertCodes(codes, want, qdtype, what)
                        if mode == "static":
                            self.assertEqual(scales, quant.scale, what)
                        else:
                            self.assertEqual(scales.dtype, np.float32, what)
                            self.assertClose(scales, want_scales.astype(np.float64),
                                             (1e-6, 0.0), what)
                        if adds:
                            np.testing.assert_array_equal(residual.astype(np.float64), r, what)

    def test_scale_ub_bounds_the_dynamic_scale(self):
        x = self.data((4, 128), "float32")
        weight = np.ones(128, np.float32)
        quant = kerntune.Quant("fp8_e4m3", "per_row", scale_ub=0.5)
        codes, scales = self.client.rms_norm(x, weight, EPS, quant=quant)
        y, _ = ref.rms_norm(x, weight, EPS)
        want, want_scales = ref.quantize(y, "fp8_e4m3", "per_row", scale_ub=0.5)
        self.assertClose(scales, want_scales.astype(np.float64), (1e-6, 0.0))
        np.testing.assert_allclose(scales, 0.5 / 448, rtol=1e-6)
        self.assertCodes(codes, want, "fp8_e4m3", "scale_ub")
        self.assertEqual(int(codes.view(np.uint8).max()), 0xfe)  # saturated at -448

    def test_special_values_quantize_as_documented(self):
        # Row 0 has a NaN (its y is NaN: NaN codes, amax ignores NaN), row 1
        # an inf, row 2 is all zeros (the smallest scale), row 3 is huge.
        x = self.data((4, 64), "float32")
        x[0, 3] = np.nan
        x[1, 5] = np.inf
        x[2] = 0
        x[3] *= 1e30
        for qdtype in ref.QUANT_DTYPES:
            quant = kerntune.Quant(qdtype, "per_row")
            codes, scales = self.client.rms_norm(x, None, EPS, quant=quant)
            y, _ = ref.rms_norm(x, None, EPS)
            want, want_scales = ref.quantize(y, qdtype, "per_row")
            self.assertCodes(codes, want, qdtype, qdtype)
            self.assertClose(scales, want_scales.astype(np.float64), (1e-6, 0.0), qdtype)

    def test_codes_into_a_given_out_and_scales(self):
        x = self.data((8, 256), "float16")
        weight = self.data((256,), "float16")
        out = kerntune.shared_empty((8, 256), np.uint8)
        scales = kerntune.shared_empty((8, 2), np.float32)
        quant = kerntune.Quant("fp8_e4m3", "per_group", group_size=128)
        codes, got_scales = self.client.rms_norm(x, weight, EPS, out=out, quant=quant,
                                                 scales=scales)
        self.assertIs(codes, out)
        self.assertIs(got_scales, scales)
        y, _ = ref.rms_norm(x, weight, EPS)
        want, want_scales = ref.quantize(y, "fp8_e4m3", "per_group", 128)
        self.assertCodes(out, want, "fp8_e4m3", "out")
        self.assertClose(scales, want_scales.astype(np.float64), (1e-6, 0.0))
        # A plain NumPy out and scales are filled from the inline reply.
        plain_out, plain_scales = np.empty((8, 256), np.uint8), np.empty((8, 2), np.float32)
        self.client.rms_norm(x, weight, EPS, out=plain_out, quant=quant, scales=plain_scales)
        np.testing.assert_array_equal(plain_out, out)
        np.testing.assert_array_equal(plain_scales, scales)

    def test_static_scale_in_shared_memory(self):
        x = self.data((4, 128), "float32")
        scale = kerntune.shared_array(np.array([4.0 / 127], np.float32))
        quant = kerntune.Quant("int8", "static", scale=scale)
        codes, got = self.client.rms_norm(x, None, EPS, quant=quant)
        self.assertIs(got, scale)
        want, _ = ref.quantize(ref.rms_norm(x, None, EPS)[0], "int8", "static",
                               scale=float(scale[0]))
        self.assertCodes(codes, want, "int8", "static scale")

    def test_qk_norm_of_a_strided_view_in_place(self):
        T, H, D = 5, 4, 128
        for dtype in DTYPES:
            qkv = kerntune.shared_array(self.data((T, 3 * H * D), dtype))
            before = np.array(qkv)
            weight = self.data((D,), dtype)
            q = qkv.reshape(T, 3, H, D)[:, 0]
            self.assertFalse(q.flags.c_contiguous)
            y = self.client.rms_norm(q, weight, EPS, out=q)
            self.assertIs(y, q)
            want, _ = ref.rms_norm(before.reshape(T, 3, H, D)[:, 0], weight, EPS)
            self.assertClose(q, want, TOLERANCE[(dtype, "rms_norm")], dtype)
            # k and v are left as they were.
            np.testing.assert_array_equal(qkv.reshape(T, 3, H, D)[:, 1:],
                                          before.reshape(T, 3, H, D)[:, 1:])
            # k into a new array, and k's codes.
            k = qkv.reshape(T, 3, H, D)[:, 1]
            want_k, _ = ref.rms_norm(before.reshape(T, 3, H, D)[:, 1], weight, EPS)
            self.assertClose(self.client.rms_norm(k, weight, EPS), want_k,
                             TOLERANCE[(dtype, "rms_norm")], dtype)
            codes, scales = self.client.rms_norm(k, weight, EPS,
                                                 quant=kerntune.Quant("fp8_e4m3"))
            want_codes, want_scales = ref.quantize(want_k, "fp8_e4m3", "per_row")
            self.assertCodes(codes, want_codes, "fp8_e4m3", dtype)
            self.assertEqual(scales.shape, (T, H, 1))

    def test_strided_residual_and_out(self):
        x = self.data((6, 256), "float32")
        wide = kerntune.shared_array(self.data((6, 512), "float32"))
        residual = wide[:, 128:384]  # rows 512 elements apart
        before = np.array(residual)
        out_wide = kerntune.shared_empty((6, 1024), np.float32)
        out = out_wide[:, 256:512]
        weight = self.data((256,), "float32")
        self.client.add_rms_norm(x, residual, weight, EPS, out=out)
        r = ref.add_residual(x, before)
        np.testing.assert_array_equal(residual.astype(np.float64), r)
        self.assertClose(out, ref.rms_norm(r, weight, EPS)[0], TOLERANCE[("float32", "rms_norm")])

    def test_bad_inputs(self):
        x = self.data((4, 128), "float32")
        weight = self.data((128,), "float32")
        shared = kerntune.shared_array(self.data((4, 128), "float32"))
        read_only = kerntune.shared_array(self.data((4, 128), "float32"))
        read_only.flags.writeable = False
        fp8 = kerntune.Quant("fp8_e4m3")
        client = self.client
        for call, fragments in [
            (lambda: client.add_rms_norm(x, x.copy(), weight), ["residual must be a shared array"]),
            (lambda: client.add_rms_norm(x, shared.astype(np.float16), weight),
             ["residual has dtype float16"]),
            (lambda: client.add_rms_norm(x, shared[:2], weight), ["residual has", "(2, 128)"]),
            (lambda: client.add_rms_norm(x, read_only, weight), ["residual is read-only"]),
            (lambda: client.run("add_rms_norm", x, weight=weight), ["needs residual="]),
            (lambda: client.run("rms_norm_quant", x), ["needs quant="]),
            (lambda: client.run("rms_norm", x, quant=fp8), ["rms_norm does not take quant"]),
            (lambda: client.run("layer_norm", x, weight_offset=1.0),
             ["does not take weight_offset"]),
            (lambda: client.rms_norm(x, weight, quant="fp8_e4m3"), ["must be a kerntune.Quant"]),
            (lambda: client.rms_norm(x, weight, quant=fp8, out=np.empty((4, 128), np.float32)),
             ["out has dtype float32", "fp8_e4m3 codes"]),
            (lambda: client.rms_norm(x, weight, quant=kerntune.Quant("int8"),
                                     out=np.empty((4, 128), np.uint8)), ["out has dtype uint8"]),
            (lambda: client.rms_norm(x[:, :64], weight[:64],
                                     quant=kerntune.Quant("int8", "per_group", group_size=128)),
             ["64 columns, not a multiple of group_size=128"]),
            (lambda: client.rms_norm(x, None, weight_offset=1.0), ["needs a weight"]),
            (lambda: client.rms_norm(x, weight, weight_offset=float("inf")),
             ["weight_offset=inf must be finite"]),
            (lambda: client.rms_norm(x, weight, quant=fp8, scales=np.empty((4, 2), np.float32)),
             ["scales has", "want float32 and (4, 1)"]),
            (lambda: client.rms_norm(x, weight, quant=kerntune.Quant("int8", "static", scale=1.0),
                                     scales=np.empty((4, 1), np.float32)),
             ["scale_mode=static has none"]),
        ]:
            with self.assertRaises(kerntune.InvalidArgumentError) as context:
                call()
            self.assertCode(context, grpc.StatusCode.INVALID_ARGUMENT, *fragments)

    def test_the_daemon_refuses_what_only_it_can_see(self):
        x = self.data((4, 128), "float32")
        for value in (0.0, float("nan")):
            scale = kerntune.shared_array(np.array([value], np.float32))
            with self.assertRaises(kerntune.InvalidArgumentError) as context:
                self.client.rms_norm(x, None, EPS,
                                     quant=kerntune.Quant("int8", "static", scale=scale))
            self.assertIn("scale", context.exception.message)
        # A residual that is also the output.
        residual = kerntune.shared_array(self.data((4, 128), "float32"))
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            self.client.add_rms_norm(x, residual, None, EPS, out=residual)
        self.assertIn("residual", context.exception.message)
        # The daemon keeps serving.
        self.assertClose(self.client.rms_norm(x, None, EPS), ref.rms_norm(x, None, EPS)[0],
                         TOLERANCE[("float32", "rms_norm")])


class RequestTest(unittest.TestCase):
    """The requests the client builds, without sending them (no daemon)."""

    def test_queue_carries_fused_norms_in_client_memory_only(self):
        from kerntune import _queue

        def request(residual_inline=False, scale_inline=False, scales_inline=False,
                    mode=pb.SCALE_MODE_PER_ROW):
            r = pb.RunRequest(op=pb.OP_ADD_RMS_NORM_QUANT)
            r.input.buffer.buffer_id = r.output.buffer.buffer_id = "b"
            params = r.rms_norm
            if residual_inline:
                params.residual.inline_data = b"\0" * 4
            else:
                params.residual.buffer.buffer_id = "b"
            params.quant.scale_mode = mode
            if mode == pb.SCALE_MODE_STATIC:
                if scale_inline:
                    params.quant.scale.inline_data = b"\0" * 4
                else:
                    params.quant.scale.buffer.buffer_id = "b"
            elif not scales_inline:
                params.quant.scales.buffer.buffer_id = "b"
            return r

        self.assertTrue(_queue.queue_carries(request()))
        self.assertTrue(_queue.queue_carries(request(mode=pb.SCALE_MODE_STATIC)))
        self.assertFalse(_queue.queue_carries(request(residual_inline=True)))
        self.assertFalse(_queue.queue_carries(request(scales_inline=True)))
        self.assertFalse(_queue.queue_carries(request(mode=pb.SCALE_MODE_STATIC,
                                                      scale_inline=True)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
