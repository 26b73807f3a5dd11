#!/usr/bin/env python3
"""The Python client against a kerntuned --cpu child whose TCP listener
speaks TLS, asks for client certificates and wants a bearer token, with
certificates made for the test by tests/testing/make_test_certs.sh.

Run by CTest like client_test.py. Exits 77 (CTest: skipped) when the
interpreter lacks grpc, protobuf or NumPy.
"""

import os
import socket
import subprocess
import sys
import tempfile
import unittest

try:
    import grpc
    import numpy as np

    import kerntune
except ImportError as e:  # pragma: no cover - environment check
    print("SKIP: the Python client needs grpc, protobuf and numpy: %s" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kerntuned_child  # noqa: E402

MAKE_CERTS = os.path.join(HERE, os.pardir, os.pardir, "testing", "make_test_certs.sh")
TOKEN = "kt-python-test-token-31"


def _free_tcp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = tempfile.TemporaryDirectory(prefix="kt_py_certs_")
        subprocess.run(["sh", MAKE_CERTS, cls.certs.name], check=True, capture_output=True)
        token_file = cls.path("token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.target = "127.0.0.1:%d" % _free_tcp_port()
        binary = kerntuned_child.kerntuned_binary()
        if binary is None:
            raise RuntimeError("set KERNTUNED_BINARY to the kerntuned to test")
        cls.daemon = kerntuned_child.Daemon(binary, (
            "--tcp=" + cls.target, "--tls_cert=" + cls.path("server.pem"),
            "--tls_key=" + cls.path("server.key"), "--tls_client_ca=" + cls.path("ca.pem"),
            "--token_file=" + token_file))
        try:
            cls.daemon.wait_serving()
        except Exception:
            cls.daemon.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.daemon.cleanup()
        cls.certs.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.certs.name, name)

    @classmethod
    def pem(cls, name):
        with open(cls.path(name), "rb") as f:
            return f.read()

    def client(self, **overrides):
        options = dict(root_certificates=self.pem("ca.pem"),
                       certificate_chain=self.pem("client.pem"),
                       private_key=self.pem("client.key"), token=TOKEN)
        options.update(overrides)
        return kerntune.Client(self.target, timeout=30, **options)

    def test_runs_with_its_certificate_and_token(self):
        with self.client() as tls:
            np.testing.assert_allclose(tls.softmax(np.zeros((2, 4), np.float32)), 0.25)
            self.assertEqual(tls.status().backend, "cpu")

    def test_a_missing_or_wrong_token_is_unauthenticated(self):
        for token, message in ((None, "no bearer token"),
                               ("not-" + TOKEN, "the bearer token is not the one")):
            with self.client(token=token) as tls:
                with self.assertRaises(kerntune.KernTuneError) as context:
                    tls.status()
                self.assertEqual(context.exception.code, grpc.StatusCode.UNAUTHENTICATED)
                self.assertIn(message, context.exception.message)

    def test_without_a_client_certificate_or_trusting_another_ca_it_cannot_connect(self):
        for overrides in (dict(certificate_chain=None, private_key=None),
                          dict(root_certificates=self.pem("other_ca.pem"))):
            with self.client(**overrides) as tls:
                with self.assertRaises(kerntune.UnavailableError):
                    tls.status()

    def test_options_that_do_not_fit_are_refused_up_front(self):
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            kerntune.Client(self.daemon.target, token=TOKEN)
        self.assertIn("TLS and tokens are for TCP targets", context.exception.message)
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            kerntune.Client(self.target, token=TOKEN)
        self.assertIn("needs TLS: pass root_certificates", context.exception.message)


if __name__ == "__main__":
    unittest.main(verbosity=2)
