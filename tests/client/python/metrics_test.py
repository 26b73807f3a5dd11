#!/usr/bin/env python3
"""kerntuned's Prometheus endpoint, scraped and parsed with a real parser.

A kerntuned --cpu child serves /metrics on a free loopback port. The test
sends a known series of good and malformed Runs and one shared-memory
registration, scrapes before and after, parses both with
prometheus_client's text parser, and checks that each counter moved by
exactly what was sent and that the gauges say what the daemon holds.

Run by CTest like client_test.py; exits 77 (skipped) without grpc, numpy or
prometheus_client (Debian: python3-prometheus-client).
"""

import os
import socket
import sys
import time
import unittest
import urllib.request

try:
    import grpc
    import numpy as np
    from prometheus_client.parser import text_string_to_metric_families

    import kerntune
    from kerntune.v1 import kerntune_pb2 as pb
    from kerntune.v1 import kerntune_pb2_grpc as pb_grpc
except ImportError as e:  # pragma: no cover - environment check
    print("SKIP: the metrics test needs grpc, numpy and prometheus_client: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kerntuned_child  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(address):
    """{(name, sorted label items): value} of every sample."""
    with urllib.request.urlopen("http://%s/metrics" % address, timeout=10) as reply:
        text = reply.read().decode()
    samples = {}
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, names


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        binary = kerntuned_child.kerntuned_binary()
        if binary is None:
            raise RuntimeError("set KERNTUNED_BINARY to the kerntuned to test")
        cls.address = "127.0.0.1:%d" % free_port()
        cls.daemon = kerntuned_child.Daemon(binary, ("--metrics_address=" + cls.address,))
        try:
            cls.daemon.wait_serving()
        except Exception:
            cls.daemon.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.daemon.cleanup()

    def test_counters_move_by_what_was_sent(self):
        before, names = scrape(self.address)
        self.assertIn("kerntune_build_info", names)
        foreign = sorted(n for n in names
                         if not n.startswith("kerntune_") and not n.startswith("exposer_"))
        self.assertEqual(foreign, [])  # exposer_*: prometheus-cpp's own

        good, bad_shape, bad_op = 5, 3, 2
        rng = np.random.default_rng(1)
        with kerntune.Client(self.daemon.target, timeout=30) as client:
            for _ in range(good):
                x = rng.standard_normal((4, 64)).astype(np.float32)
                y = client.softmax(x)
                e = np.exp(x - x.max(axis=1, keepdims=True))
                np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
            shared = kerntune.shared_array(np.ones((2, 8), np.float32))
            client.register(shared)
            channel = grpc.insecure_channel(self.daemon.target)
            stub = pb_grpc.KernTuneStub(channel)
            for _ in range(bad_shape):
                request = pb.RunRequest(op=pb.OP_SOFTMAX, dtype=pb.DTYPE_FLOAT32,
                                        shape=pb.Shape(rows=4, cols=0))
                request.input.inline_data = b""
                request.output.return_inline = True
                with self.assertRaises(grpc.RpcError) as raised:
                    stub.Run(request, timeout=10)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            for _ in range(bad_op):
                with self.assertRaises(grpc.RpcError) as raised:
                    stub.Run(pb.RunRequest(op=42, dtype=pb.DTYPE_FLOAT16), timeout=10)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            channel.close()
            time.sleep(2.5)  # the gauges are set once a second
            after, _ = scrape(self.address)

            def moved(name, **labels):
                return value(after, name, **labels) - value(before, name, **labels)

            runs = "kerntune_runs_total"
            self.assertEqual(moved(runs, op="softmax", dtype="float32", device="cpu",
                                   path="grpc", code="OK"), good)
            self.assertEqual(moved(runs, op="softmax", dtype="float32", device="none",
                                   path="grpc", code="INVALID_ARGUMENT"), bad_shape)
            self.assertEqual(moved(runs, op="invalid", dtype="float16", device="none",
                                   path="grpc", code="INVALID_ARGUMENT"), bad_op)
            total = sum(v for (n, _), v in after.items() if n == runs)
            total -= sum(v for (n, _), v in before.items() if n == runs)
            self.assertEqual(total, good + bad_shape + bad_op)
            self.assertEqual(moved("kerntune_run_handler_seconds_count", op="softmax",
                                   device="cpu"), good)
            # The CPU backend always times its reference.
            self.assertEqual(moved("kerntune_run_kernel_seconds_count", op="softmax",
                                   device="cpu"), good)
            self.assertEqual(value(after, "kerntune_registered_buffers", device="host"), 1)
            self.assertEqual(value(after, "kerntune_registered_bytes", device="host"), 64)
            self.assertEqual(value(after, "kerntune_buffer_owners"), 1)
            self.assertEqual(value(after, "kerntune_device_up", device="cpu", uuid="",
                                   sku="cpu"), 1)
            shared.unlink()


if __name__ == "__main__":
    unittest.main()
