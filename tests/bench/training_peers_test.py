#!/usr/bin/env python3
"""bench/training_peers.py's CPU side (no GPU): the points are issue 45's
training shapes, the bytes each op must move, which peer serves which op, the
arguments, --dry-run's listing; and with torch (Debian's python3-torch, a CPU
build, is enough) the float64 references against torch.autograd, the eager
peers on CPU tensors, and check()'s verdicts: it passes the reference rounded
to the storage dtype and the known low-precision paths (bfloat16
log-probabilities in eager cross-entropy, Liger's bfloat16 products in dweight),
and fails wrong scales, missing rows, unwritten and NaN outputs.

Without torch the rest runs and the test exits 77 (CTest: skipped).

  training_peers_test.py SOURCE_DIR
"""

import os
import subprocess
import sys
import unittest

SOURCE_DIR = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(SOURCE_DIR, "bench"))
import training_peers as peers  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the torch-free tests still run
    torch = None

SCRIPT = os.path.join(SOURCE_DIR, "bench", "training_peers.py")


class GridTest(unittest.TestCase):
    def test_points_are_issue_45s_training_shapes(self):
        points = peers.grid_points(peers.OPS)
        self.assertEqual(len(points), 4 * 3 * 3 + 2 * 4)
        ce = [p for p in points if p.op == "cross_entropy"]
        self.assertEqual({(p.rows, p.cols) for p in ce},
                         {(t, v) for t in (4096, 8192) for v in (32000, 50257, 128256, 151936)})
        norms = [p for p in points if p.op == "rms_norm_backward"]
        self.assertEqual({(p.rows, p.cols) for p in norms},
                         {(t, h) for t in (4096, 8192, 16384) for h in (2048, 4096, 8192)})
        # Filters: tokens and columns.
        self.assertEqual(len(peers.grid_points(peers.OPS, rows_filter=[16384])), 4 * 3)
        self.assertEqual([p.name() for p in peers.grid_points(["cross_entropy"], [8192], [50257])],
                         ["cross_entropy 8192x50257"])
        self.assertEqual(peers.grid_points(["cross_entropy"], cols_filter=[4096]), [])

    def test_bytes_moved(self):
        n = 8192 * 4096
        p = peers.Point("softmax_backward", 8192, 4096)
        self.assertEqual(peers.bytes_moved(p, "bfloat16"), 3 * n * 2)
        p = peers.Point("log_softmax_backward", 8192, 4096)
        self.assertEqual(peers.bytes_moved(p, "float32"), 3 * n * 4)
        p = peers.Point("layer_norm_backward", 8192, 4096)
        # x, dy, dx; gamma, dgamma, dbeta; float32 mean and rstd.
        self.assertEqual(peers.bytes_moved(p, "float16"), 3 * n * 2 + 3 * 4096 * 2 + 2 * 8192 * 4)
        p = peers.Point("rms_norm_backward", 8192, 4096)
        self.assertEqual(peers.bytes_moved(p, "bfloat16"), 3 * n * 2 + 2 * 4096 * 2 + 8192 * 4)
        p = peers.Point("cross_entropy", 8192, 128256)
        # Logits read, gradient written in place; int64 labels; float32 row losses.
        self.assertEqual(peers.bytes_moved(p, "bfloat16"), 2 * 8192 * 128256 * 2 + 8192 * 12)

    def test_peers_serve_what_they_implement(self):
        for op in peers.OPS:
            self.assertIsNone(peers.why_not("eager", op))
            self.assertIsNone(peers.why_not("compile", op))
            self.assertEqual(peers.why_not("kerntune", op),
                             "kerntune.torch has no training ops yet")
        self.assertIn("log-softmax", peers.why_not("liger", "log_softmax_backward"))
        for op in ("softmax_backward", "layer_norm_backward", "rms_norm_backward",
                   "cross_entropy"):
            self.assertIsNone(peers.why_not("liger", op))

    def test_kerntune_hook_is_unwired(self):
        self.assertEqual(peers.KERNTUNE_OPS, ())
        with self.assertRaises(NotImplementedError):
            peers.make_kerntune("cross_entropy", 128256)

    def test_arguments(self):
        args = peers.parse_args([])
        self.assertEqual(args.ops, list(peers.OPS))
        self.assertEqual(args.dtypes, ["bfloat16", "float16", "float32"])
        self.assertEqual(args.peers, ["eager", "compile", "liger", "kerntune"])
        self.assertEqual(args.liger, ".gpu/peers/liger/src")
        self.assertFalse(args.causal)
        args = peers.parse_args(["--quick", "--ops", "cross_entropy", "--rows", "4096,8192",
                                 "--cols", "50257", "--peers", "eager,liger"])
        self.assertEqual((args.reps, args.warmup), (peers.tb.QUICK_REPS, peers.tb.QUICK_WARMUP))
        self.assertEqual((args.rows, args.cols), ([4096, 8192], [50257]))
        self.assertEqual(args.peers, ["eager", "liger"])

    def test_dry_run_lists_the_plan_without_torch(self):
        out = subprocess.run(
            [sys.executable, SCRIPT, "--dry-run", "--ops", "log_softmax_backward,cross_entropy",
             "--rows", "8192", "--cols", "4096,50257", "--dtypes", "float16"],
            capture_output=True, text=True, check=True).stdout.splitlines()
        # One log-softmax point and one cross-entropy point x four peers, then the count.
        self.assertEqual(len(out), 9, out)
        self.assertTrue(out[0].startswith("log_softmax_backward  float16    8192   4096 eager"))
        self.assertIn("skip: Liger has no log-softmax backward", out[2])
        self.assertIn("skip: kerntune.torch has no training ops yet", out[7])
        self.assertEqual(out[-1], "8 runs planned, 5 served")
        for args, message in ((["--peers", "apex"], "peers: choose from"),
                              (["--ops", "softmax"], "ops: choose from"),
                              (["--reps", "0"], "--reps must be >= 1")):
            bad = subprocess.run([sys.executable, SCRIPT, "--dry-run"] + args,
                                 capture_output=True, text=True)
            self.assertEqual(bad.returncode, 2, args)
            self.assertIn(message, bad.stderr)
        none = subprocess.run([sys.executable, SCRIPT, "--dry-run", "--ops", "cross_entropy",
                               "--rows", "16384"], capture_output=True, text=True)
        self.assertIn("no training point matches", none.stderr)


def operands(op, rows, cols, dtype="float32", seed=0):
    torch.manual_seed(seed)
    return peers.make_operands(torch, peers.Point(op, rows, cols), dtype, "cpu")


def grads_of(fn, inputs, dy):
    """torch.autograd's gradients of fn(*inputs) (float64 leaves) along dy."""
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    return torch.autograd.grad(fn(*leaves), leaves, dy.double())


@unittest.skipIf(torch is None, "needs torch")
class ReferenceTest(unittest.TestCase):
    """The float64 references against torch.autograd of the forward ops."""

    def assert_close(self, got, want, tol=1e-10):
        self.assertLess((got - want).abs().max().item(), tol)

    def test_softmax_backward(self):
        z = torch.randn(6, 33, dtype=torch.float64)
        dy = torch.randn(6, 33, dtype=torch.float64)
        (dx,) = grads_of(lambda x: torch.softmax(x, -1), [z], dy)
        (expected,) = peers.reference(torch, "softmax_backward", (dy, torch.softmax(z, -1)), ())
        self.assert_close(expected.ref, dx)
        (dx,) = grads_of(lambda x: torch.log_softmax(x, -1), [z], dy)
        (expected,) = peers.reference(torch, "log_softmax_backward",
                                      (dy, torch.log_softmax(z, -1)), ())
        self.assert_close(expected.ref, dx)

    def test_layer_norm_backward(self):
        (dy, x, mean, rstd), (gamma, beta) = operands("layer_norm_backward", 7, 40)
        x64 = x.double()
        # The statistics are x's (float64, stored as float32).
        self.assert_close(mean.double(), x64.mean(-1, keepdim=True), 1e-6)
        self.assertTrue(torch.allclose(rstd.double(), torch.rsqrt(
            x64.var(-1, unbiased=False, keepdim=True) + peers.LAYER_NORM_EPS), rtol=1e-6))
        want = grads_of(lambda x, g, b: F.layer_norm(x, (40,), g, b, peers.LAYER_NORM_EPS),
                        [x, gamma, beta], dy)
        got = peers.reference(torch, "layer_norm_backward", (dy, x, mean, rstd), (gamma, beta))
        self.assertEqual([e.name for e in got], ["dx", "dgamma", "dbeta"])
        # Against autograd's statistics, which the float32 ones round: ~1e-7.
        for e, w in zip(got, want):
            self.assert_close(e.ref, w, 1e-5)
        # With the stored statistics themselves: exact.
        exact = peers.reference(torch, "layer_norm_backward",
                                (dy, x, x64.mean(-1, keepdim=True), torch.rsqrt(
                                    x64.var(-1, unbiased=False, keepdim=True)
                                    + peers.LAYER_NORM_EPS)), (gamma, beta))
        for e, w in zip(exact, want):
            self.assert_close(e.ref, w)

    def test_rms_norm_backward(self):
        (dy, x, rstd), (w,) = operands("rms_norm_backward", 7, 40)
        x64 = x.double()

        def rms_norm(x, w):  # F.rms_norm's math (torch >= 2.4 has it)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + peers.RMS_NORM_EPS) * w
        want = grads_of(rms_norm, [x, w], dy)
        exact_rstd = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + peers.RMS_NORM_EPS)
        self.assertTrue(torch.allclose(rstd.double(), exact_rstd, rtol=1e-6))
        got = peers.reference(torch, "rms_norm_backward", (dy, x, exact_rstd), (w,))
        self.assertEqual([e.name for e in got], ["dx", "dweight"])
        for e, g in zip(got, want):
            self.assert_close(e.ref, g)

    def test_cross_entropy(self):
        (logits, labels), _ = operands("cross_entropy", 64, 301)
        self.assertEqual(labels[0].item(), peers.IGNORE_INDEX)
        self.assertEqual(labels[1:3].tolist(), [300, 0])
        valid = labels != peers.IGNORE_INDEX
        self.assertTrue(((labels[valid] >= 0) & (labels[valid] < 301)).all())
        self.assertTrue(0 < (~valid).sum().item() < 64)
        leaf = logits.double().requires_grad_()
        loss = F.cross_entropy(leaf, labels, ignore_index=peers.IGNORE_INDEX)
        (grad,) = torch.autograd.grad(loss, leaf)
        row_loss, expected = peers.cross_entropy_rows(torch, logits, labels, valid.sum().item())
        self.assert_close(row_loss.sum() / valid.sum(), loss)
        self.assert_close(expected.ref, grad)
        self.assertEqual(expected.ref[~valid].abs().max().item(), 0.0)
        # By chunks (the GPU check's path) as in one piece: a float32 exact copy passes.
        peers_chunk = peers.REF_CHUNK_BYTES
        try:
            peers.REF_CHUNK_BYTES = 301 * 8 * 5  # 5 rows a chunk
            passed, _, ratio = peers.check(torch, "cross_entropy", "float32",
                                           (loss.float(), grad.float()), (logits, labels), ())
        finally:
            peers.REF_CHUNK_BYTES = peers_chunk
        self.assertTrue(passed)
        self.assertLess(ratio, 0.01)


@unittest.skipIf(torch is None, "needs torch")
class EagerPeerTest(unittest.TestCase):
    """make_eager's functions on CPU tensors pass check() (those that torch's
    CPU kernels have for the dtype)."""

    def test_eager_peers_pass(self):
        cases = [(op, "float32") for op in peers.OPS] + [
            ("softmax_backward", "bfloat16"), ("log_softmax_backward", "bfloat16"),
            ("rms_norm_backward", "bfloat16"), ("cross_entropy", "bfloat16")]
        for op, dtype in cases:
            with self.subTest(op=op, dtype=dtype):
                cols = 1000 if op == "cross_entropy" else 256
                ops, extra = operands(op, 48, cols, dtype)
                fn, impl = peers.make_eager(torch, op, cols)
                outs = fn(tuple(t.clone() for t in ops), *extra)
                passed, err, ratio = peers.check(torch, op, dtype, outs, ops, extra)
                self.assertTrue(passed, (impl, err, ratio))
                self.assertLess(ratio, 1.0)


@unittest.skipIf(torch is None, "needs torch")
class CheckTest(unittest.TestCase):
    """check() passes the reference rounded to the storage dtype and the known
    lower-precision paths, and fails wrong outputs."""

    def rounded(self, expected, dtype):
        return tuple(e.ref.to(getattr(torch, dtype)) for e in expected)

    def verdict(self, op, dtype, outs, ops, extra):
        return peers.check(torch, op, dtype, outs, ops, extra)[0]

    def test_rounded_reference_passes_and_wrong_outputs_fail(self):
        for op in peers.BACKWARD_OPS:
            for dtype in peers.DTYPES:
                with self.subTest(op=op, dtype=dtype):
                    ops, extra = operands(op, 64, 512, dtype)
                    expected = peers.reference(torch, op, ops, extra)
                    good = self.rounded(expected, dtype)
                    self.assertTrue(self.verdict(op, dtype, good, ops, extra))
                    # dx 5% too large (the bfloat16 bound is about 3%).
                    self.assertFalse(self.verdict(op, dtype, (good[0] * 1.05,) + good[1:],
                                                  ops, extra))
                    # An element left unwritten (zero), a NaN.
                    for poison in (0.0, float("nan")):
                        dx = good[0].clone()
                        dx[5, 7] = poison
                        self.assertFalse(self.verdict(op, dtype, (dx,) + good[1:], ops, extra))
                    # A weight gradient that misses rows (a block of a split reduction).
                    if len(good) > 1:
                        rows = peers.reference(torch, op, tuple(t[8:] for t in ops), extra)
                        self.assertFalse(self.verdict(
                            op, dtype, good[:1] + self.rounded(rows[1:], dtype), ops, extra))

    def test_softmax_backward_is_checked_at_its_own_scale(self):
        # dx of a softmax over 512 columns is ~1e-3: an absolute bfloat16
        # tolerance (1.6e-2) would pass zeros.
        ops, extra = operands("softmax_backward", 64, 512, "bfloat16")
        (expected,) = peers.reference(torch, "softmax_backward", ops, extra)
        self.assertLess(expected.ref.abs().max().item(), 0.1)
        self.assertFalse(self.verdict("softmax_backward", "bfloat16",
                                      (torch.zeros_like(ops[0]),), ops, extra))

    def test_liger_llama_rounding_in_dweight_passes(self):
        # Liger's "llama" casting (HF Llama's autograd) sums dy * x-hat with
        # the product rounded to bfloat16: within the row-sum slack.
        ops, extra = operands("rms_norm_backward", 2048, 256, "bfloat16")
        dy, x, rstd = ops
        expected = peers.reference(torch, "rms_norm_backward", ops, extra)
        xhat = (x.float() * rstd).bfloat16()
        dweight = (dy * xhat).float().sum(0).bfloat16()  # products rounded, float32 sum
        self.assertTrue(self.verdict("rms_norm_backward", "bfloat16",
                                     (expected[0].ref.bfloat16(), dweight), ops, extra))

    def test_cross_entropy_verdicts(self):
        for dtype in peers.DTYPES:
            with self.subTest(dtype=dtype):
                (logits, labels), _ = operands("cross_entropy", 64, 3001, dtype)
                valid = labels != peers.IGNORE_INDEX
                n = valid.sum().item()
                row_loss, expected = peers.cross_entropy_rows(torch, logits, labels, n)
                t = getattr(torch, dtype)
                loss, grad = (row_loss.sum() / n).to(t), expected.ref.to(t)
                ops = (logits, labels)
                self.assertTrue(self.verdict("cross_entropy", dtype, (loss, grad), ops, ()))
                # The mean over all rows, not the valid ones.
                self.assertFalse(self.verdict("cross_entropy", dtype,
                                              (loss, (expected.ref * n / 64).to(t)), ops, ()))
                self.assertFalse(self.verdict("cross_entropy", dtype,
                                              ((row_loss.sum() / 64).to(t), grad), ops, ()))
                # An ignored row with a gradient; the logits left in place (unwritten).
                wrong = expected.ref.clone()
                wrong[0] = expected.ref[1]  # row 0 is ignored, row 1 is not
                self.assertFalse(self.verdict("cross_entropy", dtype, (loss, wrong.to(t)),
                                              ops, ()))
                self.assertFalse(self.verdict("cross_entropy", dtype, (loss, logits), ops, ()))
                # Without the one-hot: every label's entry is off by 1/n.
                self.assertFalse(self.verdict(
                    "cross_entropy", dtype,
                    (loss, (torch.softmax(logits.double(), -1) * valid[:, None] / n).to(t)),
                    ops, ()))

    def test_eager_bfloat16_log_probabilities_pass(self):
        # Eager keeps log_softmax in the storage dtype and takes exp() of it
        # in the backward: up to 6.5% off per element at |log p| >= 16.
        (logits, labels), _ = operands("cross_entropy", 64, 151936 // 16, "bfloat16")
        z = (logits.double() * 3).bfloat16()  # |log p| up to ~20
        lsm = torch.log_softmax(z.double(), -1).bfloat16().double()
        valid = labels != peers.IGNORE_INDEX
        n = valid.sum().item()
        onehot = torch.zeros_like(lsm).scatter_(-1, labels.clamp(min=0)[:, None], 1.0)
        grad = ((lsm.exp() - onehot) * valid[:, None] / n).bfloat16()
        loss = (-(lsm.gather(-1, labels.clamp(min=0)[:, None]).squeeze(-1) * valid).sum()
                / n).bfloat16()
        self.assertLess(lsm.min().item(), -16)
        self.assertTrue(self.verdict("cross_entropy", "bfloat16", (loss, grad), (z, labels), ()))


if __name__ == "__main__":
    result = unittest.main(exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    if torch is None:
        print("SKIP: the reference and check tests need torch")
        sys.exit(77)
