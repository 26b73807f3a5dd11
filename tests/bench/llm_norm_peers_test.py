#!/usr/bin/env python3
"""bench/llm_norm_peers.py's CPU side (no torch, no GPU): the llm_norm points
match tuner/grid.h's group, the bytes match tuner::PointBytes (the same
figures tests/tuner/grid_test.cc checks), which peer serves which variant,
and --dry-run's listing.

  llm_norm_peers_test.py SOURCE_DIR
"""

import os
import subprocess
import sys
import unittest

SOURCE_DIR = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(SOURCE_DIR, "bench"))
import llm_norm_peers as peers  # noqa: E402


class LlmNormPeersTest(unittest.TestCase):
    def test_points_are_the_llm_norm_group(self):
        points = peers.grid_points(peers.OPS)
        # As grid_test's LlmNormHoldsTheFusedNormsAndPerHeadRmsNorm: 6 x 35 + 15.
        self.assertEqual(len(points), 6 * 5 * 7 + 5 * 3)
        heads = [p for p in points if p.per_head]
        self.assertEqual({p.op for p in heads}, {"rms_norm"})
        self.assertEqual({p.rows for p in heads}, {t * 32 for t in (1, 16, 64, 512, 8192)})
        self.assertEqual({p.cols for p in heads}, {64, 128, 256})
        # --rows filters per-head points by tokens.
        self.assertEqual(len(peers.grid_points(["rms_norm"], rows_filter=[512])), 3)

    def test_bytes_match_point_bytes(self):
        n = 64 * 4096
        point = peers.Point("add_rms_norm", 64, 4096)
        self.assertEqual(peers.bytes_moved(point, "bfloat16", "plain"), 4 * n * 2 + 4096 * 2)
        point = peers.Point("add_layer_norm", 64, 4096)
        self.assertEqual(peers.bytes_moved(point, "bfloat16", "plain"), 4 * n * 2 + 2 * 4096 * 2)
        point = peers.Point("rms_norm_quant", 64, 4096)
        self.assertEqual(peers.bytes_moved(point, "float16", "fp8_e4m3/per_row"),
                         n * 2 + n + 64 * 4 + 4096 * 2)
        self.assertEqual(peers.bytes_moved(point, "float16", "fp8_e4m3/per_group128"),
                         n * 2 + n + 64 * 32 * 4 + 4096 * 2)
        self.assertEqual(peers.bytes_moved(point, "float16", "fp8_e4m3/static"),
                         n * 2 + n + 4 + 4096 * 2)
        point = peers.Point("add_layer_norm_quant", 64, 4096)
        self.assertEqual(peers.bytes_moved(point, "float16", "int8/per_row"),
                         3 * n * 2 + n + 64 * 4 + 2 * 4096 * 2)
        # Per head: the elements of q, not the k and v between them.
        point = peers.Point("rms_norm", 512 * 32, 128, per_head=True)
        self.assertEqual(peers.bytes_moved(point, "bfloat16", "plain"),
                         2 * 512 * 32 * 128 * 2 + 128 * 2)

    def test_peers_serve_what_they_implement(self):
        add = peers.Point("add_rms_norm", 16, 4096)
        quant = peers.Point("rms_norm_quant", 16, 4096)
        ln_quant = peers.Point("layer_norm_quant", 16, 4096)
        heads = peers.Point("rms_norm", 16 * 32, 128, per_head=True)
        for peer in ("eager", "compile"):
            for point, variant in ((add, "gemma"), (quant, "int8/per_row"), (heads, "plain")):
                self.assertIsNone(peers.why_not(peer, point, variant))
        self.assertIsNone(peers.why_not("liger", add, "gemma"))
        self.assertIsNotNone(peers.why_not("liger", heads, "plain"))
        self.assertIsNone(peers.why_not("flashinfer", add, "gemma"))
        self.assertIsNone(peers.why_not("flashinfer", heads, "plain"))
        self.assertIsNone(peers.why_not("flashinfer", quant, "fp8_e4m3/static"))
        self.assertIn("static", peers.why_not("flashinfer", quant, "fp8_e4m3/per_row"))
        self.assertIsNone(peers.why_not("flashinfer", ln_quant, "fp8_e4m3/per_row"))
        self.assertIsNotNone(peers.why_not("flashinfer", ln_quant, "fp8_e4m3/per_group128"))
        self.assertIsNotNone(peers.why_not("flashinfer", peers.Point("add_layer_norm", 1, 2048),
                                           "plain"))

    def test_variants_belong_to_their_ops(self):
        wanted = list(peers.VARIANTS)
        self.assertEqual(peers.variants_of(peers.Point("add_rms_norm", 1, 2048), wanted),
                         ["plain", "gemma"])
        self.assertEqual(peers.variants_of(peers.Point("add_layer_norm", 1, 2048), wanted),
                         ["plain"])
        self.assertEqual(peers.variants_of(peers.Point("rms_norm_quant", 1, 2048), wanted),
                         list(peers.QUANT_VARIANTS))
        self.assertEqual(peers.parse_variant("fp8_e4m3/per_group128"),
                         ("fp8_e4m3", "per_group", 128))
        self.assertEqual(peers.parse_variant("int8/per_row"), ("int8", "per_row", 0))

    def test_dry_run_lists_the_plan_without_torch(self):
        out = subprocess.run(
            [sys.executable, os.path.join(SOURCE_DIR, "bench", "llm_norm_peers.py"),
             "--dry-run", "--ops", "add_rms_norm_quant", "--rows", "8192", "--cols", "7168",
             "--dtypes", "float32", "--peers", "compile,flashinfer"],
            capture_output=True, text=True, check=True).stdout.splitlines()
        # Two default quant variants x two peers, then the count.
        self.assertEqual(len(out), 5, out)
        self.assertIn("add_rms_norm_quant", out[0])
        self.assertIn("float16 and bfloat16 only", out[1])
        self.assertEqual(out[-1], "4 runs planned, 2 served")
        bad = subprocess.run(
            [sys.executable, os.path.join(SOURCE_DIR, "bench", "llm_norm_peers.py"),
             "--dry-run", "--peers", "cublas"], capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("peers: choose from", bad.stderr)


if __name__ == "__main__":
    unittest.main()
