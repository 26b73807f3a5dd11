#!/usr/bin/env python3
"""bench/summarize_llm_norm.py on a small made-up run: points joined across the two
tools by op, shape and variant (QK-norm's layout and the quant variants
named differently on each side), kerntune's tuned time preferred to its
heuristic, and issue 44's checks (ties within 2%, the prefill geometric
mean, 95% of copy at 8192 tokens, decode apart).

  summarize_llm_norm_test.py SOURCE_DIR
"""

import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..")
SUMMARIZE = os.path.join(SOURCE_DIR, "bench", "summarize_llm_norm.py")


def ours(op, rows, cols, variant, heuristic_us, tuned_us=None, copy_us=None):
    bytes_moved = 1000 * rows * cols // 64
    r = {"group": "llm_norm", "op": op, "dtype": "bfloat16", "rows": rows, "cols": cols,
         "inner": 1, "variant": variant, "bytes": bytes_moved,
         "config": "block_regs/b256/p8/g32/r1/w0", "passed": True,
         "graph_median_us": heuristic_us, "tuned": None,
         "copy_same_bytes_graph_gbps": bytes_moved / ((copy_us or heuristic_us) * 1e3)}
    if tuned_us is not None:
        r["tuned"] = {"config": "block_regs/b128/p8/g32/r1/w0", "passed": True,
                      "median_us": tuned_us, "graph_replay": True, "gbps": 1.0}
    return r


def peer(op, rows, cols, variant, name, us, passed=True):
    return {"op": op, "dtype": "bfloat16", "rows": rows, "cols": cols, "variant": variant,
            "peer": name, "median_us": us, "passed": passed}


class SummarizeLlmNormTest(unittest.TestCase):
    def run_summary(self, kernel_results, peer_results):
        with tempfile.TemporaryDirectory() as d:
            kb, pe, table = (os.path.join(d, n) for n in ("kb.json", "pe.json", "t.csv"))
            with open(kb, "w") as f:
                json.dump({"gpu": "H100", "commit": "abc", "date": "2026-12-07",
                           "results": kernel_results}, f)
            with open(pe, "w") as f:
                json.dump({"date": "2026-12-07", "torch": "2.11", "triton": "3",
                           "results": peer_results}, f)
            out = subprocess.run([sys.executable, SUMMARIZE, kb, pe, "--csv", table],
                                 capture_output=True, text=True, check=True).stdout
            with open(table) as f:
                return out, list(csv.DictReader(f))

    def test_joins_variants_prefers_tuned_and_checks_issue_44(self):
        kernel_results = [
            # Tuned 90 us against liger's 100: 1.111x; 90 / 88 us copy: 97.8%.
            ours("add_rms_norm", 8192, 4096, "", 120.0, tuned_us=90.0, copy_us=88.0),
            # 50 us against compile's 50.5: a tie (0.99x would be too); 60% of copy.
            ours("rms_norm_quant", 8192, 4096, "fp8_e4m3 per_row", 50.0, copy_us=30.0),
            # QK-norm: rows are tokens x 32 heads; 8192 tokens. Behind by 10%.
            ours("rms_norm", 262144, 128, "x_stride=128 group_rows=32", 55.0),
            # Decode: 1 token, 0.8x.
            ours("add_rms_norm", 1, 4096, "", 3.0),
            # No peer timed it: left out.
            ours("add_layer_norm", 8192, 4096, "", 90.0),
        ]
        peer_results = [
            peer("add_rms_norm", 8192, 4096, "plain", "liger", 100.0),
            peer("add_rms_norm", 8192, 4096, "plain", "compile", 101.0),
            peer("add_rms_norm", 8192, 4096, "plain", "eager", 80.0, passed=False),
            peer("rms_norm_quant", 8192, 4096, "fp8_e4m3/per_row", "compile", 50.5),
            peer("rms_norm", 262144, 128, "plain", "flashinfer", 50.0),
            peer("add_rms_norm", 1, 4096, "plain", "liger", 2.4),
        ]
        out, table = self.run_summary(kernel_results, peer_results)
        self.assertEqual(len(table), 4)
        by_op = {(row["op"], row["rows"]): row for row in table}
        add = by_op[("add_rms_norm", "8192")]
        self.assertEqual(add["best_peer"], "liger")  # eager failed its check
        self.assertEqual(add["kerntune_us"], "90.00")
        self.assertEqual(add["heuristic_us"], "120.00")
        self.assertEqual(add["config"], "block_regs/b128/p8/g32/r1/w0")
        self.assertEqual(add["ratio"], "1.111")
        self.assertEqual(add["pct_copy"], "97.8")
        self.assertEqual(by_op[("rms_norm_quant", "8192")]["variant"], "fp8_e4m3/per_row")
        self.assertIn("prefill points behind the best peer by more than 2%: 1 of 3", out)
        self.assertIn("rms_norm 262144x128 plain: 0.909x flashinfer", out)
        self.assertIn("8192-token points under 95% of the same-size copy: 1 of 3", out)
        self.assertIn("rms_norm_quant 8192x4096 fp8_e4m3/per_row: 60.0%", out)
        # (1.111 * 1.0099 * 0.909) ** (1/3)
        self.assertIn("prefill geometric mean over the best peer: 1.007x", out)
        self.assertIn("decode (1-64 tokens, launch-bound): geometric mean 0.800x", out)

    def test_kerntune_torch_in_the_peers_harness_is_beside_them_not_one_of_them(self):
        kernel_results = [ours("add_rms_norm", 1, 4096, "", 3.0),
                          ours("add_rms_norm", 8192, 4096, "", 90.0)]
        peer_results = [
            peer("add_rms_norm", 1, 4096, "plain", "liger", 2.4),
            peer("add_rms_norm", 1, 4096, "plain", "kerntune", 2.0),  # faster, still not a peer
            peer("add_rms_norm", 8192, 4096, "plain", "liger", 100.0),
            peer("add_rms_norm", 8192, 4096, "plain", "kerntune", 105.0),
        ]
        out, table = self.run_summary(kernel_results, peer_results)
        decode = next(row for row in table if row["rows"] == "1")
        self.assertEqual(decode["best_peer"], "liger")
        self.assertEqual(decode["kerntune_torch_us"], "2.00")
        self.assertEqual(decode["torch_ratio"], "1.200")
        self.assertIn("kerntune.torch in the peers' harness (issue 48)", out)
        self.assertIn("decode (1-64 tokens): geometric mean 1.200x the best peer", out)
        self.assertIn("prefill (512+ tokens): geometric mean 0.952x the best peer, min 0.952x; "
                      "behind by more than 2% at 1 of 1", out)
        self.assertIn("add_rms_norm 8192x4096 plain: 105.00 us vs 100.00 liger", out)


if __name__ == "__main__":
    unittest.main()
