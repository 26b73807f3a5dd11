#!/usr/bin/env python3
"""kerntune.torch on CPU tensors: every op through torch.ops.kerntune and the
in-process runtime library (its host path runs the fp64 reference), checked
against the independent float64 NumPy references of llm_reference.py and
client_test.py; the row layouts it takes in place (slices, per-head views of
a fused qkv tensor) and those it copies; the residual written back; the
quantized outputs; the gradients of the differentiable ops; the fake
implementations torch.compile traces with; the nn modules loading torch's
state_dicts; and the inputs it refuses.

Needs torch (Debian's python3-torch is enough: a CPU build); exits 77
(CTest: skipped) without it. CUDA tensors, torch.compile and CUDA graphs are
tested on a GPU (torch_runtime_gpu_test.py).
"""

import math
import os
import sys
import unittest

try:
    import numpy as np
    import torch

    import kerntune
    import kerntune.torch as kt
    import kerntune.torch.nn as ktnn
    from kerntune.torch import _ops
except ImportError as e:  # pragma: no cover - environment check
    print("SKIP: kerntune.torch needs torch, grpc, protobuf and numpy: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_reference as ref  # noqa: E402

# The host path rounds the fp64 result once to the storage dtype: within
# one rounding of it (bfloat16: 8 bits of mantissa).
RTOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
ATOL = {torch.float32: 1e-7, torch.float16: 1e-5, torch.bfloat16: 1e-4}
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def f64(tensor):
    return tensor.detach().to(torch.float64).numpy()


def added(x, residual):
    """x + residual in float64, rounded once to their dtype: what the add
    forms write back and normalize."""
    return f64((x.double() + residual.double()).to(x.dtype))


class OpsTest(unittest.TestCase):
    def setUp(self):
        self.generator = torch.Generator().manual_seed(len(self.id()))

    def randn(self, *shape, dtype=torch.float32):
        return torch.randn(*shape, generator=self.generator).to(dtype)

    def assertClose(self, got, want, dtype):
        np.testing.assert_allclose(f64(got), want, rtol=RTOL[dtype], atol=ATOL[dtype])

    def test_softmax_and_log_softmax_along_every_dim(self):
        for dtype in DTYPES:
            x = self.randn(3, 5, 7, dtype=dtype)
            for dim in (0, 1, 2, -1):
                shifted = f64(x) - f64(x).max(axis=dim, keepdims=True)
                want = np.exp(shifted) / np.exp(shifted).sum(axis=dim, keepdims=True)
                with self.subTest(dtype=dtype, dim=dim):
                    y = kt.softmax(x, dim)
                    self.assertEqual((y.shape, y.dtype), (x.shape, dtype))
                    self.assertClose(y, want, dtype)
                    self.assertClose(kt.log_softmax(x, dim), np.log(want), dtype)

    def test_norms(self):
        for dtype in DTYPES:
            x = self.randn(4, 6, 96, dtype=dtype)
            w, b = self.randn(96, dtype=dtype), self.randn(96, dtype=dtype)
            with self.subTest(dtype=dtype):
                self.assertClose(kt.layer_norm(x, w, b, 1e-5),
                                 ref.layer_norm(f64(x), f64(w), f64(b), 1e-5)[0], dtype)
                self.assertClose(kt.layer_norm(x), ref.layer_norm(f64(x), None, None, 1e-5)[0],
                                 dtype)
                self.assertClose(kt.rms_norm(x, w, 1e-6, weight_offset=1.0),
                                 ref.rms_norm(f64(x), f64(w), 1e-6, 1.0)[0], dtype)
                self.assertClose(kt.rms_norm(x), ref.rms_norm(f64(x), None, 1e-6)[0], dtype)

    def test_rows_in_place_and_copied(self):
        qkv = self.randn(5, 3, 4, 64)  # [tokens, q/k/v, heads, head_dim]
        q = qkv[:, 0]
        self.assertEqual(_ops._rows_of(q, True), (20, 64, 64, 4, 3 * 4 * 64))
        self.assertIsNone(_ops._rows_of(q, False))
        wide = self.randn(6, 100)[:, :64]
        self.assertEqual(_ops._rows_of(wide, False), (6, 64, 100, 0, 0))
        transposed = self.randn(64, 6).t()
        self.assertIsNone(_ops._rows_of(transposed, True))
        w = self.randn(64)
        for name, x in (("qk-norm view", q), ("slice", wide), ("transposed", transposed),
                        ("k view", qkv[:, 1])):
            with self.subTest(name):
                before = qkv.clone()
                self.assertClose(kt.rms_norm(x, w), ref.rms_norm(f64(x), f64(w), 1e-6)[0],
                                 torch.float32)
                self.assertClose(kt.softmax(x), f64(torch.softmax(x.double(), -1)),
                                 torch.float32)
                self.assertTrue(torch.equal(qkv, before))  # inputs are only read

    def test_add_forms_write_the_residual_back(self):
        for dtype in DTYPES:
            x, residual = self.randn(7, 128, dtype=dtype), self.randn(7, 128, dtype=dtype)
            w, b = self.randn(128, dtype=dtype), self.randn(128, dtype=dtype)
            r = added(x, residual)
            with self.subTest(dtype=dtype, op="add_rms_norm"):
                written = residual.clone()
                y = kt.add_rms_norm(x, written, w, 1e-6, weight_offset=0.5)
                np.testing.assert_array_equal(f64(written), r)
                self.assertClose(y, ref.rms_norm(r, f64(w), 1e-6, 0.5)[0], dtype)
            with self.subTest(dtype=dtype, op="add_layer_norm"):
                written = residual.clone()
                y = kt.add_layer_norm(x, written, w, b)
                np.testing.assert_array_equal(f64(written), r)
                self.assertClose(y, ref.layer_norm(r, f64(w), f64(b), 1e-5)[0], dtype)
        # A residual in a slice of a wider buffer is written where it is.
        buffer = self.randn(4, 200)
        residual = buffer[:, :128]
        x = self.randn(4, 128)
        want = f64(residual) + f64(x)
        kt.add_rms_norm(x, residual)
        np.testing.assert_allclose(f64(buffer[:, :128]), want, rtol=1e-6)

    def test_quantized_outputs(self):
        x = self.randn(6, 256) * 3
        residual = self.randn(6, 256)
        w, b = self.randn(256), self.randn(256)
        for dtype in ref.QUANT_DTYPES:
            for mode, group in ref.SCALE_MODES:
                scale = 2.5 / ref.QMAX[dtype]
                quant = kerntune.Quant(dtype, mode, group_size=group,
                                       scale=scale if mode == "static" else None)
                for name in ("rms_norm", "layer_norm", "add_rms_norm", "add_layer_norm"):
                    with self.subTest(dtype=dtype, mode=mode, group=group, op=name):
                        written = residual.clone()
                        if name == "rms_norm":
                            codes, scales = kt.rms_norm(x, w, quant=quant)
                            y = ref.rms_norm(f64(x), f64(w), 1e-6)[0]
                        elif name == "layer_norm":
                            codes, scales = kt.layer_norm(x, w, b, quant=quant)
                            y = ref.layer_norm(f64(x), f64(w), f64(b), 1e-5)[0]
                        elif name == "add_rms_norm":
                            codes, scales = kt.add_rms_norm(x, written, w, quant=quant)
                            y = ref.rms_norm(added(x, residual), f64(w),
                                             1e-6)[0]
                        else:
                            codes, scales = kt.add_layer_norm(x, written, w, b, quant=quant)
                            y = ref.layer_norm(added(x, residual), f64(w),
                                               f64(b), 1e-5)[0]
                        self.assertEqual(codes.dtype, _ops.codes_dtype(dtype))
                        self.assertEqual(codes.shape, x.shape)
                        want_codes, want_scales = ref.quantize(y, dtype, mode, group,
                                                               scale=scale)
                        if mode == "static":
                            self.assertEqual(scales.numel(), 0)
                        else:
                            np.testing.assert_allclose(
                                scales.numpy().reshape(want_scales.shape), want_scales,
                                rtol=1e-6)
                        got = codes.view(torch.int8 if dtype == "int8" else torch.uint8)
                        apart = ref.codes_apart(got.numpy(), want_codes, dtype)
                        self.assertLessEqual(int(apart.max()), 1)  # rounding ties only
                        if name.startswith("add"):
                            np.testing.assert_array_equal(
                                f64(written), added(x, residual))

    def test_reduce_scale_and_scaled_masked_softmax(self):
        x = self.randn(3, 4, 50)
        y, scales = kt.reduce_scale(x)
        amax = np.abs(f64(x)).max(axis=-1)
        self.assertEqual(scales.shape, (3, 4))
        np.testing.assert_allclose(scales.numpy(), amax, rtol=1e-6)
        self.assertClose(y, f64(x) / amax[..., None], torch.float32)

        scores = self.randn(2, 3, 5, 8)
        mask = self.randn(5, 8)
        for causal in (False, True):
            with self.subTest(causal=causal):
                logits = f64(scores) * 0.125 + f64(mask)
                if causal:
                    logits = np.where(np.arange(8)[None, :] > np.arange(5)[:, None], -np.inf,
                                      logits)
                want = np.exp(logits - logits.max(-1, keepdims=True))
                want /= want.sum(-1, keepdims=True)
                self.assertClose(kt.scaled_masked_softmax(scores, mask, 0.125, causal), want,
                                 torch.float32)

    def test_empty_tensors(self):
        self.assertEqual(kt.rms_norm(torch.empty(0, 64)).shape, (0, 64))
        self.assertEqual(kt.softmax(torch.empty(4, 0), -1).shape, (4, 0))

    def test_bad_inputs_are_refused(self):
        x = self.randn(4, 64)
        cases = [
            ("integer input", lambda: kt.softmax(torch.ones(2, 3, dtype=torch.int32)),
             "float32, float16 and bfloat16"),
            ("weight dtype", lambda: kt.rms_norm(x, torch.ones(64, dtype=torch.float16)),
             "give them one dtype"),
            ("weight length", lambda: kt.layer_norm(x, torch.ones(63)), "63 elements"),
            ("residual shape", lambda: kt.add_rms_norm(x, torch.zeros(4, 32)),
             "the residual"),
            ("residual layout", lambda: kt.add_rms_norm(x, torch.zeros(64, 4).t()),
             "written back in place"),
            ("epsilon", lambda: kt.rms_norm(x, None, eps=0.0), "epsilon"),
            ("quant", lambda: kt.rms_norm(x, quant="fp8"), "kerntune.Quant"),
            ("group size", lambda: kt.rms_norm(self.randn(2, 96),
                                               quant=kerntune.Quant("int8", "per_group",
                                                                    group_size=64)),
             "group"),
            ("mask shape", lambda: kt.scaled_masked_softmax(self.randn(2, 5, 8),
                                                            torch.zeros(4, 8)), "the mask"),
        ]
        for name, call, message in cases:
            with self.subTest(name):
                with self.assertRaises(kerntune.InvalidArgumentError) as raised:
                    call()
                self.assertIn(message, str(raised.exception))


class AutogradTest(unittest.TestCase):
    """The differentiable ops' gradients against float64 torch autograd of
    the op's own definition (not kerntune's backward formulas)."""

    def setUp(self):
        self.generator = torch.Generator().manual_seed(len(self.id()))

    def leaf(self, *shape, dtype=torch.float32):
        return torch.randn(*shape, generator=self.generator).to(dtype).requires_grad_()

    def check(self, mine, theirs, inputs, dtype):
        """mine(*inputs) and theirs(*float64 copies) give the same gradients
        of a random dy: within 1e-5 (float32) / 3e-2 (bfloat16: y and dy are
        stored in 8 bits of mantissa) of each gradient's largest entry."""
        y = mine(*inputs)
        dy = torch.randn(y.shape, generator=self.generator).to(dtype)
        got = torch.autograd.grad(y, inputs, dy)
        wide = [t.detach().double().requires_grad_() for t in inputs]
        want = torch.autograd.grad(theirs(*wide), wide, dy.double())
        tol = 1e-5 if dtype == torch.float32 else 3e-2
        for g, w in zip(got, want):
            self.assertEqual((g.shape, g.dtype), (w.shape, dtype))
            scale = w.abs().max().item()
            self.assertLessEqual((g.double() - w).abs().max().item(), tol * scale + 1e-7)

    def test_softmaxes(self):
        for dtype in (torch.float32, torch.bfloat16):
            with self.subTest(dtype=dtype):
                x = self.leaf(3, 5, 40, dtype=dtype)
                self.check(lambda x: kt.softmax(x), lambda x: torch.softmax(x, -1), [x], dtype)
                self.check(lambda x: kt.softmax(x, 1), lambda x: torch.softmax(x, 1), [x], dtype)
                self.check(lambda x: kt.log_softmax(x, 0), lambda x: torch.log_softmax(x, 0),
                           [x], dtype)
                scores = self.leaf(2, 3, 8, 8, dtype=dtype)
                mask = torch.randn(8, 8, generator=self.generator).to(dtype)
                self.check(lambda s: kt.scaled_masked_softmax(s, mask, 0.25, causal=True),
                           lambda s: torch.softmax((s * 0.25 + mask.double()).masked_fill(
                               torch.ones(8, 8, dtype=torch.bool).triu(1), -math.inf), -1),
                           [scores], dtype)

    def test_norms_with_and_without_weights(self):
        def layer_ref(x, w=None, b=None):
            return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, 1e-5)

        def rms_ref(x, w=None, offset=0.0):
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            return y if w is None else y * (offset + w)

        for dtype in (torch.float32, torch.bfloat16):
            with self.subTest(dtype=dtype):
                x, w, b = self.leaf(6, 96, dtype=dtype), self.leaf(96, dtype=dtype), \
                    self.leaf(96, dtype=dtype)
                self.check(lambda x, w, b: kt.layer_norm(x, w, b), layer_ref, [x, w, b], dtype)
                self.check(lambda x: kt.layer_norm(x), layer_ref, [x], dtype)
                self.check(lambda x, w: kt.rms_norm(x, w, 1e-6, 1.0),
                           lambda x, w: rms_ref(x, w, 1.0), [x, w], dtype)
                self.check(lambda x: kt.rms_norm(x), rms_ref, [x], dtype)

    def test_qk_norm_of_a_strided_view_gives_the_fused_tensor_its_gradient(self):
        qkv = self.leaf(4, 3, 2, 32)  # [tokens, q/k/v, heads, head_dim]
        w = self.leaf(32)
        self.check(lambda qkv, w: kt.rms_norm(qkv[:, 0], w),
                   lambda qkv, w: qkv[:, 0] * torch.rsqrt(
                       qkv[:, 0].pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                   [qkv, w], torch.float32)

    def test_modules_train(self):
        norm = ktnn.RMSNorm(16)
        torch.nn.init.normal_(norm.weight)
        x = torch.randn(5, 16, generator=self.generator)
        norm(x).square().sum().backward()
        w = norm.weight.detach().double().requires_grad_()
        xd = x.double()
        (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + norm.eps) * w).square().sum() \
            .backward()
        np.testing.assert_allclose(f64(norm.weight.grad), f64(w.grad), rtol=1e-5, atol=1e-6)

    def test_a_mask_that_wants_a_gradient_is_refused(self):
        scores = self.leaf(1, 1, 4, 4)
        mask = self.leaf(4, 4)
        with self.assertRaisesRegex(kerntune.InvalidArgumentError, "does not differentiate"):
            kt.scaled_masked_softmax(scores, mask)


class BatchInvariantTest(unittest.TestCase):
    def test_mode_is_per_thread_inside_a_block_and_per_process_outside(self):
        from kerntune.torch import _runtime
        self.assertFalse(_runtime.batch_invariant_enabled())
        with kt.batch_invariant():
            self.assertTrue(_runtime.batch_invariant_enabled())
            with kt.batch_invariant(False):
                self.assertFalse(_runtime.batch_invariant_enabled())
            self.assertTrue(_runtime.batch_invariant_enabled())
            # The host path runs in the mode too.
            x = torch.randn(5, 64)
            np.testing.assert_allclose(f64(kt.rms_norm(x)), ref.rms_norm(f64(x), None, 1e-6)[0],
                                       rtol=1e-6, atol=1e-7)
        self.assertFalse(_runtime.batch_invariant_enabled())
        kt.set_batch_invariant(True)
        try:
            self.assertTrue(_runtime.batch_invariant_enabled())
            with kt.batch_invariant(False):
                self.assertFalse(_runtime.batch_invariant_enabled())
        finally:
            kt.set_batch_invariant(False)


class RegistrationTest(unittest.TestCase):
    def test_every_op_is_registered_with_its_fake(self):
        ops = ("softmax", "log_softmax", "layer_norm", "rms_norm", "reduce_scale",
               "scaled_masked_softmax", "add_rms_norm", "add_layer_norm", "rms_norm_quant",
               "layer_norm_quant", "add_rms_norm_quant", "add_layer_norm_quant")
        self.assertEqual(sorted(_ops.FAKES), sorted(ops))
        for name in ops:
            schema = getattr(torch.ops.kerntune, name).default._schema
            writes = [a.name for a in schema.arguments
                      if a.alias_info is not None and a.alias_info.is_write]
            self.assertEqual(writes, ["residual"] if name.startswith("add") else [], name)

    def test_fakes_give_shapes_and_dtypes_without_data(self):
        x = torch.empty(2, 3, 256, dtype=torch.bfloat16, device="meta")
        fakes = _ops.FAKES
        self.assertEqual(fakes["softmax"](x, 1).shape, x.shape)
        y, scales = fakes["reduce_scale"](x)
        self.assertEqual((y.dtype, scales.shape, scales.dtype),
                         (torch.bfloat16, (2, 3), torch.float32))
        for mode, group, shape in (("per_row", 0, (2, 3, 1)), ("per_group", 128, (2, 3, 2)),
                                   ("static", 0, (0,))):
            codes, scales = fakes["add_rms_norm_quant"](x, x, None, 1e-6, 0.0, "int8", mode,
                                                        group, 0.0, None)
            self.assertEqual((codes.shape, codes.dtype), (x.shape, torch.int8))
            self.assertEqual(tuple(scales.shape), shape)
        self.assertEqual(fakes["rms_norm_quant"](x, None, 1e-6, 0.0, "fp8_e4m3", "per_row", 0,
                                                 0.0, None)[0].dtype,
                         _ops.codes_dtype("fp8_e4m3"))
        self.assertTrue(all(t.device.type == "meta" for t in fakes["layer_norm_quant"](
            x, None, None, 1e-5, "fp8_e5m2", "per_row", 0, 0.0, None)))


class LlamaRMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm, as far as from_torch reads it."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm (torch 2.4+) as far as from_torch reads it."""

    def __init__(self, hidden, eps=None, elementwise_affine=True):
        super().__init__()
        self.normalized_shape = (hidden,)
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden)) if elementwise_affine else None


class ModulesTest(unittest.TestCase):
    def test_layer_norm_loads_torchs_state_dict(self):
        torch.manual_seed(3)
        theirs = torch.nn.LayerNorm(96, eps=1e-5)
        with torch.no_grad():
            theirs.weight.normal_()
            theirs.bias.normal_()
        ours = ktnn.LayerNorm(96)
        ours.load_state_dict(theirs.state_dict())
        x = torch.randn(5, 96)
        with torch.no_grad():
            np.testing.assert_allclose(ours(x).numpy(), theirs(x).numpy(), rtol=1e-4,
                                       atol=1e-5)
            np.testing.assert_allclose(ktnn.from_torch(theirs)(x).numpy(), theirs(x).numpy(),
                                       rtol=1e-4, atol=1e-5)

    def test_rms_norm_loads_a_state_dict_and_replaces_llamas(self):
        llama = LlamaRMSNorm(64)
        with torch.no_grad():
            llama.weight.normal_()
        ours = ktnn.RMSNorm(64)
        ours.load_state_dict(llama.state_dict())
        x = torch.randn(3, 64)
        want = ref.rms_norm(f64(x), f64(llama.weight), 1e-6)[0]
        with torch.no_grad():
            np.testing.assert_allclose(f64(ours(x)), want, rtol=1e-6, atol=1e-7)
            replaced = ktnn.from_torch(llama)
            self.assertIs(replaced.weight, llama.weight)
            np.testing.assert_allclose(f64(replaced(x)), want, rtol=1e-6, atol=1e-7)
            residual = torch.randn(3, 64)
            r = f64(residual) + f64(x)
            np.testing.assert_allclose(f64(ours(x, residual)),
                                       ref.rms_norm(r, f64(llama.weight), 1e-6)[0], rtol=1e-5)
        gemma = ktnn.RMSNorm(64, weight_offset=1.0)
        self.assertTrue(torch.equal(gemma.weight, torch.zeros(64)))  # the identity at start
        with self.assertRaises(kerntune.InvalidArgumentError):
            ktnn.RMSNorm((4, 64))

    def test_torchs_rms_norm_without_eps_or_weight(self):
        x = torch.randn(3, 64)
        with torch.no_grad():
            replaced = ktnn.from_torch(RMSNorm(64))
            self.assertEqual(replaced.eps, torch.finfo(torch.float32).eps)
            bare = ktnn.from_torch(RMSNorm(64, eps=1e-5, elementwise_affine=False))
            self.assertIsNone(bare.weight)
            np.testing.assert_allclose(f64(bare(x)), ref.rms_norm(f64(x), None, 1e-5)[0],
                                       rtol=1e-6, atol=1e-7)
        with self.assertRaises(kerntune.InvalidArgumentError):
            ktnn.from_torch(torch.nn.Linear(4, 4))

    def test_softmax_modules(self):
        x = torch.randn(2, 7, 3)
        np.testing.assert_allclose(ktnn.Softmax(1)(x).numpy(), torch.softmax(x, 1).numpy(),
                                   rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(ktnn.from_torch(torch.nn.LogSoftmax(-1))(x).numpy(),
                                   torch.log_softmax(x, -1).numpy(), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    # No daemon, no store, no shipped files: the host path needs no configs.
    kt.configure(server="none", db=os.devnull, configs=os.devnull)
    unittest.main()
