#!/usr/bin/env python3
"""bench/summarize.py on a small made-up run: the Markdown tables, and --plot's
PNG of GB/s against cols. Without matplotlib the tables still come out and
--plot says what to install.

  summarize_test.py SOURCE_DIR
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..")
SUMMARIZE = os.path.join(SOURCE_DIR, "bench", "summarize.py")

# Runs summarize.py with `import matplotlib` failing, as where it is not installed.
WITHOUT_MATPLOTLIB = ("import runpy, sys; sys.modules['matplotlib'] = None; "
                      "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def has_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def kernel_bench():
    results = []
    for op in ("softmax", "rms_norm"):
        for cols in (32, 1024, 32768):
            gbps = 1000.0 + cols / 16
            results.append({"group": "main", "op": op, "dtype": "float16", "rows": 49152,
                            "cols": cols, "inner": 1, "config": "warp/b128/p8/g32/r1/w0",
                            "passed": True, "detail": "", "gbps": gbps, "graph_gbps": gbps,
                            "pct_copy": 100 * gbps / 3000.0,
                            "tuned": {"config": "warp/b256/p8/g32/r1/w0", "passed": True,
                                      "graph_replay": True, "gbps": gbps * 1.1}})
    return {"tool": "kt_kernel_bench", "gpu": "NVIDIA H100 80GB HBM3", "date":
            "2026-11-26T02:31:41Z", "commit": "abc1234", "copy_gbps": 3000.0,
            "streams": "one", "results": results}


def torch_bench(ours):
    results = []
    for r in ours["results"]:
        for mode, factor in (("eager", 0.8), ("compile", 0.9)):
            results.append({"group": r["group"], "op": r["op"], "dtype": r["dtype"],
                            "rows": r["rows"], "cols": r["cols"], "inner": 1, "mode": mode,
                            "passed": True, "gbps": r["gbps"] * factor,
                            "graph_gbps": r["graph_gbps"] * factor})
    return {"tool": "torch_bench", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0",
            "triton": "3.6.0", "copy_gbps": 3001.0, "streams": "one", "results": results}


class SummarizeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        ours = kernel_bench()
        self.files = []
        for name, data in (("kt.json", ours), ("torch.json", torch_bench(ours))):
            path = os.path.join(self.tmp.name, name)
            with open(path, "w") as f:
                json.dump(data, f)
            self.files.append(path)
        self.png = os.path.join(self.tmp.name, "gbps_vs_cols.png")

    def tearDown(self):
        self.tmp.cleanup()

    def run_summarize(self, *args, without_matplotlib=False):
        prefix = [sys.executable, "-c", WITHOUT_MATPLOTLIB] if without_matplotlib else [
            sys.executable]
        return subprocess.run(prefix + [SUMMARIZE, *args, *self.files], capture_output=True,
                              text=True)

    def test_tables_need_no_matplotlib(self):
        result = self.run_summarize(without_matplotlib=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("### main", result.stdout)
        # kerntune's tuned 1.1x over compile's 0.9x of the heuristic.
        self.assertIn("geometric mean 1.22x", result.stdout)
        self.assertFalse(os.path.exists(self.png))

    def test_plot_without_matplotlib_says_what_to_install(self):
        result = self.run_summarize("--plot", self.png, without_matplotlib=True)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--plot needs matplotlib (Debian: apt-get install python3-matplotlib",
                      result.stderr)
        self.assertFalse(os.path.exists(self.png))

    @unittest.skipUnless(has_matplotlib(), "matplotlib is not installed "
                         "(deploy/install_deps.sh installs python3-matplotlib)")
    def test_plot_draws_every_point_of_the_group(self):
        result = self.run_summarize("--plot", self.png)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("### main", result.stdout)  # the tables still come out
        self.assertIn(f"{self.png}: 6 main points", result.stderr)
        with open(self.png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertLess(os.path.getsize(self.png), 200_000)

    @unittest.skipUnless(has_matplotlib(), "matplotlib is not installed")
    def test_plot_of_a_group_without_points_is_an_error(self):
        result = self.run_summarize("--plot", self.png, "--plot-group", "llm")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--plot: no llm point has both kerntune and a peer", result.stderr)
        self.assertFalse(os.path.exists(self.png))


if __name__ == "__main__":
    unittest.main()
