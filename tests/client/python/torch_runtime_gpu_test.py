#!/usr/bin/env python3
"""kerntune.torch on a GPU: every op on CUDA tensors of each dtype against a
float64 torch reference; the configs it launches with are the daemon's
(GetConfig of a GPU kerntuned child on the same store and shipped files, at
200 random shapes per op); the ops inside torch.compile(fullgraph=True) and
inside a captured CUDA graph give the eager results; a non-default stream
is used as given.

Label gpu. Exits 77 (skipped) without torch, CUDA or kerntuned.
"""

import os
import random
import sys
import unittest

try:
    import torch

    import kerntune
    import kerntune.torch as kt
    import kerntune.torch.nn as ktnn
except ImportError as e:  # pragma: no cover - environment check
    print("SKIP: needs torch and the kerntune package: %s" % e)
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: no CUDA device")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kerntuned_child  # noqa: E402

TOLERANCE = {torch.float32: (2e-5, 1e-5), torch.float16: (2e-3, 2e-3),
             torch.bfloat16: (1.6e-2, 1.6e-2)}
DTYPES = tuple(TOLERANCE)
# The fused norms (add, quant) hold a row in registers: their longest rows.
FUSED_MAX_COLS = 16384


def rms_ref(x, w, eps, offset=0.0):
    x = x.double()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * (offset + w.double())


def layer_ref(x, w, b, eps):
    return torch.nn.functional.layer_norm(x.double(), x.shape[-1:], w.double(), b.double(), eps)


DAEMON = None


def setUpModule():
    # Every op of this process takes its configs from this daemon.
    global DAEMON
    binary = kerntuned_child.kerntuned_binary()
    if binary is not None:
        DAEMON = kerntuned_child.Daemon(binary, cpu=False)
        kt.configure(server=DAEMON.target)


def tearDownModule():
    if DAEMON is not None:
        DAEMON.stop()


class GpuOpsTest(unittest.TestCase):
    def close(self, got, want, dtype):
        rtol, atol = TOLERANCE[dtype]
        torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol)

    def test_ops_match_the_reference(self):
        torch.manual_seed(0)
        for dtype in DTYPES:
            for rows, cols in ((1, 4096), (64, 8192), (333, 1000), (8, 131072)):
                with self.subTest(dtype=dtype, rows=rows, cols=cols):
                    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
                    w = torch.randn(cols, device="cuda", dtype=dtype)
                    b = torch.randn(cols, device="cuda", dtype=dtype)
                    self.close(kt.softmax(x), torch.softmax(x.double(), -1), dtype)
                    self.close(kt.log_softmax(x), torch.log_softmax(x.double(), -1), dtype)
                    self.close(kt.rms_norm(x, w, 1e-6, 1.0), rms_ref(x, w, 1e-6, 1.0), dtype)
                    self.close(kt.layer_norm(x, w, b), layer_ref(x, w, b, 1e-5), dtype)
                    residual = torch.randn_like(x)
                    if cols > FUSED_MAX_COLS:  # the fused norms hold a row in registers
                        with self.assertRaisesRegex(kerntune.InvalidArgumentError, "limit"):
                            kt.add_rms_norm(x, residual, w)
                        continue
                    r = (x.double() + residual.double()).to(dtype)
                    y = kt.add_rms_norm(x, residual, w)
                    torch.testing.assert_close(residual, r, rtol=0, atol=0)
                    self.close(y, rms_ref(r, w, 1e-6), dtype)
            x = torch.randn(4, 8, 16, device="cuda", dtype=dtype)
            self.close(kt.softmax(x, 1), torch.softmax(x.double(), 1), dtype)
            qkv = torch.randn(16, 3, 8, 128, device="cuda", dtype=dtype)
            w = torch.randn(128, device="cuda", dtype=dtype)
            want = rms_ref(qkv[:, 0], w, 1e-6)
            self.close(kt.rms_norm(qkv[:, 0], w), want, dtype)

    def test_quantized_codes_dequantize_to_the_norm(self):
        x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        for quant in (kerntune.Quant("fp8_e4m3"), kerntune.Quant("int8"),
                      kerntune.Quant("fp8_e4m3", "per_group", group_size=128)):
            with self.subTest(quant=quant):
                codes, scales = kt.rms_norm(x, w, quant=quant)
                per = scales.repeat_interleave(4096 // scales.shape[-1], -1) \
                    if scales.dim() == 2 else scales[:, None]
                y = codes.float() * per
                want = rms_ref(x, w, 1e-6).float()
                # Half a code step of the coarsest code (e4m3: 2^-3 relative).
                torch.testing.assert_close(y, want, rtol=0.07, atol=per.max().item())

    def test_config_choice_is_the_daemons(self):
        if DAEMON is None:
            self.skipTest("no kerntuned binary")
        client = kerntune.Client(DAEMON.target)
        rng = random.Random(5)
        ops = ("softmax", "log_softmax", "layer_norm", "rms_norm", "add_rms_norm",
               "rms_norm_quant")
        served = 0
        for op in ops:
            for _ in range(200):
                dtype = rng.choice(DTYPES)
                rows = 2 ** rng.randint(0, 14)
                cols = 2 ** rng.randint(4, 15) + rng.choice((0, 0, rng.randint(1, 99)))
                x = torch.empty(rows, cols, device="cuda", dtype=dtype)
                # A shape the op cannot run (the fused norms: whole 16-byte
                # packs, at most FUSED_MAX_COLS) is refused by both alike.
                try:
                    mine = kt.config_for(op, x)
                except kerntune.KernTuneError as e:
                    mine = type(e)
                try:
                    theirs = client.get_config(op, str(dtype)[len("torch."):], rows, cols)
                    theirs = (theirs.config.key, theirs.source)
                except kerntune.KernTuneError as e:
                    theirs = type(e)
                self.assertEqual(mine, theirs, (op, dtype, rows, cols))
                served += not isinstance(mine, type)
        self.assertGreater(served, 900)
        self.assertIn("daemon " + DAEMON.target, kt.configs_origin())

    def test_backward_eager_and_compiled(self):
        torch.manual_seed(3)
        x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)

        def loss(x, w):
            return kt.log_softmax(kt.rms_norm(x, w).float(), -1).square().sum()

        eager = torch.autograd.grad(loss(x, w), (x, w))
        xd = x.detach().double().requires_grad_()
        wd = w.detach().double().requires_grad_()
        want = torch.autograd.grad(torch.log_softmax(rms_ref(xd, wd, 1e-6), -1).square().sum(),
                                   (xd, wd))
        for got, ref in zip(eager, want):
            scale = ref.abs().max().item()
            self.assertLess((got.double() - ref).abs().max().item(), 3e-2 * scale)
        compiled = torch.autograd.grad(torch.compile(loss, fullgraph=True)(x, w), (x, w))
        for got, ref in zip(compiled, eager):
            torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())

    @torch.no_grad()
    def test_compile_and_graph_capture_give_the_eager_results(self):
        norm = ktnn.RMSNorm(4096).cuda().to(torch.bfloat16)

        def block(x, residual):
            h = norm(x, residual)
            return kt.softmax(h.float(), -1)

        x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
        residual = torch.randn_like(x)
        eager_residual = residual.clone()
        eager = block(x, eager_residual)
        compiled = torch.compile(block, fullgraph=True)
        compiled_residual = residual.clone()
        torch.testing.assert_close(compiled(x, compiled_residual), eager, rtol=0, atol=0)
        torch.testing.assert_close(compiled_residual, eager_residual, rtol=0, atol=0)

        static_x = x.clone()
        static_residual = residual.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm up outside the capture
            block(static_x, static_residual.clone())
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = block(static_x, static_residual)
        static_residual.copy_(residual)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(static_out, eager, rtol=0, atol=0)
        torch.testing.assert_close(static_residual, eager_residual, rtol=0, atol=0)

    def test_batch_invariant_mode_gives_each_row_the_same_bits_at_any_rows(self):
        torch.manual_seed(2)
        quant = kerntune.Quant("fp8_e4m3")
        calls = {
            "softmax": lambda x, w, r: kt.softmax(x),
            "log_softmax": lambda x, w, r: kt.log_softmax(x),
            "layer_norm": lambda x, w, r: kt.layer_norm(x, w, w),
            "rms_norm": lambda x, w, r: kt.rms_norm(x, w),
            "add_rms_norm": lambda x, w, r: kt.add_rms_norm(x, r, w),
            "rms_norm_fp8": lambda x, w, r: kt.rms_norm(x, w, quant=quant)[0].view(torch.uint8),
            "reduce_scale": lambda x, w, r: kt.reduce_scale(x)[0],
        }
        fused = ("add_rms_norm", "rms_norm_fp8")
        for dtype in DTYPES:
            for cols in (128, 4096, 8192, 65536):
                x = torch.randn(8192, cols, device="cuda", dtype=dtype)
                w = torch.randn(cols, device="cuda", dtype=dtype)
                residual = torch.randn_like(x)
                with kt.batch_invariant():
                    for name, call in calls.items():
                        if name in fused and cols > FUSED_MAX_COLS:
                            continue
                        full = call(x, w, residual.clone())
                        for rows in (1, 3, 64, 257, 4096):
                            with self.subTest(dtype=dtype, cols=cols, op=name, rows=rows):
                                part = call(x[:rows], w, residual[:rows].clone())
                                self.assertTrue(torch.equal(part, full[:rows]))

    def test_the_readmes_compile_example_runs(self):
        here = os.path.dirname(os.path.abspath(__file__))
        # In a bundle: <prefix>/python/tests -> <prefix>/python/README.md.
        for path in (os.path.join(here, "..", "README.md"),
                     os.path.join(here, "..", "..", "..", "client", "python", "README.md")):
            if os.path.exists(path):
                break
        else:
            self.skipTest("no client/python/README.md here")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        marker = text.index("torch_runtime_gpu_test.py runs it) -->")
        start = text.index("```python\n", marker) + len("```python\n")
        code = text[start:text.index("```", start)]
        exec(compile(code, path, "exec"), {"__name__": "readme_example"})

    def test_runs_on_the_current_stream(self):
        x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            y = kt.softmax(x)
        stream.synchronize()
        self.close(y, torch.softmax(x.double(), -1), torch.float16)


if __name__ == "__main__":
    unittest.main()
