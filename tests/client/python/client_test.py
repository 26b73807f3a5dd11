#!/usr/bin/env python3
"""The Python client against a real kerntuned --cpu child on a temp socket.

Every RPC; softmax, log-softmax and LayerNorm on float32 and float16 NumPy
arrays checked against a float64 NumPy reference written here; the newer
ops (softmax along any dim, RMSNorm, ReduceScale, the scaled-masked softmax
of (b, h, q, k) scores) likewise; health;
bad inputs raising KernTuneError with the right gRPC code; registered
shared-memory buffers (zero copy, ownership across processes).

Run by CTest with PYTHONPATH=<build>/client/python and
KERNTUNED_BINARY=<the built kerntuned>. Exits 77 (CTest: skipped) when the
interpreter lacks grpc, protobuf or NumPy.
"""

import gc
import math
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

try:
    import grpc
    import numpy as np

    import kerntune
    from kerntune.v1 import kerntune_pb2 as pb
except ImportError as e:  # pragma: no cover - environment check
    print("SKIP: the Python client needs grpc, protobuf and numpy: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kerntuned_child  # noqa: E402

MAX_REQUEST_BYTES = 1 << 20

# kernels/verify.cc OutputTolerance: (rtol, atol) per dtype; softmax outputs
# can be tiny, so their atol is only a floor. StatsTolerance for mean/inv_std.
TOLERANCE = {
    ("float32", "softmax"): (1e-4, 1e-12),
    ("float32", "log_softmax"): (1e-4, 1e-4),
    ("float32", "layer_norm"): (1e-4, 1e-4),
    ("float16", "softmax"): (2e-3, 1e-7),
    ("float16", "log_softmax"): (2e-3, 2e-3),
    ("float16", "layer_norm"): (2e-3, 2e-3),
}
for _dtype in ("float32", "float16"):
    # RMSNorm and ReduceScale outputs are O(1) like LayerNorm's; the masked
    # softmax's are probabilities like softmax's.
    TOLERANCE[(_dtype, "rms_norm")] = TOLERANCE[(_dtype, "layer_norm")]
    TOLERANCE[(_dtype, "reduce_scale")] = TOLERANCE[(_dtype, "layer_norm")]
    TOLERANCE[(_dtype, "scaled_masked_softmax")] = TOLERANCE[(_dtype, "softmax")]
STATS_TOLERANCE = (1e-4, 1e-4)
SHAPES = [(1, 1), (7, 33), (64, 1000)]


# -- float64 references -------------------------------------------------------

def ref_softmax(x):
    x = x.astype(np.float64)
    shifted = x - x.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


def ref_log_softmax(x):
    x = x.astype(np.float64)
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def ref_layer_norm(x, weight, bias, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=1)
    var = ((x - mean[:, None]) ** 2).mean(axis=1)
    inv_std = 1.0 / np.sqrt(var + eps)
    y = (x - mean[:, None]) * inv_std[:, None]
    if weight is not None:
        y = y * weight.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y, mean, inv_std


def ref_softmax_along(x, axis, log=False):
    x = x.astype(np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    total = np.exp(shifted).sum(axis=axis, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


def ref_rms_norm(x, weight, eps):
    x = x.astype(np.float64)
    inv_rms = 1.0 / np.sqrt((x * x).mean(axis=-1) + eps)
    y = x * inv_rms[..., None]
    if weight is not None:
        y = y * weight.astype(np.float64)
    return y, inv_rms


def ref_reduce_scale(x):
    x = x.astype(np.float64)
    scale = np.abs(x).max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(scale > 0, x / np.where(scale > 0, scale, 1), 0.0)
    return y, scale


def ref_scaled_masked_softmax(x, mask, scale, causal):
    logits = x.astype(np.float64) * scale
    q, k = x.shape[-2:]
    if mask is not None:
        logits = logits + mask.astype(np.float64).reshape(q, k)
    if causal:
        logits = np.where(np.triu(np.ones((q, k), dtype=bool), 1), -np.inf, logits)
    return ref_softmax_along(logits, -1)


def reference(op, x, weight=None, bias=None, eps=1e-5):
    if op == "softmax":
        return ref_softmax(x)
    if op == "log_softmax":
        return ref_log_softmax(x)
    return ref_layer_norm(x, weight, bias, eps)[0]


def random_input(rng, op, dtype, shape):
    mean = 3.0 if op == "layer_norm" else 0.5
    return rng.normal(mean, 2.0, size=shape).astype(dtype)


class CloseMixin:
    def assertClose(self, got, want, tolerance, what=""):
        rtol, atol = tolerance
        got = np.asarray(got, dtype=np.float64)
        self.assertEqual(got.shape, want.shape, what)
        ok = np.abs(got - want) <= atol + rtol * np.abs(want)
        if not ok.all():
            index = tuple(int(i) for i in np.argwhere(~ok)[0])
            self.fail("%s: %d bad elements; first at %s: got %r, want %r (rtol %g, atol %g)"
                      % (what, int((~ok).sum()), index, got[index], want[index], rtol, atol))


class DaemonTestCase(unittest.TestCase):
    """One kerntuned --cpu for the class, and a client of it."""

    extra_args = ("--max_request_bytes=%d" % MAX_REQUEST_BYTES,)

    @classmethod
    def setUpClass(cls):
        binary = kerntuned_child.kerntuned_binary()
        if binary is None:
            raise RuntimeError("set KERNTUNED_BINARY to the kerntuned to test")
        cls.daemon = kerntuned_child.Daemon(binary, cls.extra_args)
        try:
            cls.daemon.wait_serving()
        except Exception:
            cls.daemon.cleanup()
            raise
        cls.client = kerntune.Client(cls.daemon.target, timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.daemon.cleanup()

    def run(self, result=None):
        failures = len(result.failures) + len(result.errors) if result else 0
        outcome = super().run(result)
        if result is not None and len(result.failures) + len(result.errors) > failures:
            sys.stderr.write("kerntuned log:\n%s\n" % self.daemon.log())
        return outcome

    def assertCode(self, context, code, *fragments):
        error = context.exception
        self.assertIsInstance(error, kerntune.KernTuneError)
        self.assertEqual(error.code, code, str(error))
        for fragment in fragments:
            self.assertIn(fragment, error.message)


class TargetTest(unittest.TestCase):
    def test_default_target_follows_the_daemon(self):
        saved = os.environ.get("XDG_RUNTIME_DIR")
        try:
            os.environ["XDG_RUNTIME_DIR"] = "/run/user/1234"
            self.assertEqual(kerntune.default_target(), "unix:/run/user/1234/kerntune.sock")
            self.assertEqual(kerntune.Client().target, "unix:/run/user/1234/kerntune.sock")
            os.environ["XDG_RUNTIME_DIR"] = ""
            self.assertEqual(kerntune.default_target(), "unix:/run/kerntune/kerntune.sock")
            del os.environ["XDG_RUNTIME_DIR"]
            self.assertEqual(kerntune.default_socket_path(), "/run/kerntune/kerntune.sock")
        finally:
            if saved is None:
                os.environ.pop("XDG_RUNTIME_DIR", None)
            else:
                os.environ["XDG_RUNTIME_DIR"] = saved
        self.assertEqual(kerntune.Client("/tmp/x.sock").target, "unix:/tmp/x.sock")
        self.assertEqual(kerntune.Client("localhost:5000").target, "localhost:5000")

    def test_an_absent_daemon_is_unavailable(self):
        with kerntune.Client("unix:/nonexistent/kerntune.sock", timeout=5) as client:
            with self.assertRaises(kerntune.UnavailableError) as context:
                client.status()
        self.assertEqual(context.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIsInstance(context.exception, ConnectionError)
        # It says where it looked and how to start a daemon there.
        self.assertIn("no socket at /nonexistent/kerntune.sock: start the daemon "
                      "(kerntuned --socket=/nonexistent/kerntune.sock; add --cpu",
                      context.exception.message)

    def test_no_daemon_at_the_default_socket_says_how_to_start_one(self):
        saved = os.environ.get("XDG_RUNTIME_DIR")
        with tempfile.TemporaryDirectory() as run_dir:
            os.environ["XDG_RUNTIME_DIR"] = run_dir
            try:
                with kerntune.Client(timeout=5) as client:
                    with self.assertRaises(kerntune.UnavailableError) as context:
                        client.status()
            finally:
                if saved is None:
                    os.environ.pop("XDG_RUNTIME_DIR", None)
                else:
                    os.environ["XDG_RUNTIME_DIR"] = saved
        self.assertIn("no socket at %s/kerntune.sock: start the daemon (kerntuned; add --cpu "
                      "on a machine without a GPU), or pass Client(target=...)" % run_dir,
                      context.exception.message)

    def test_a_socket_without_a_daemon_is_named_as_one(self):
        with tempfile.TemporaryDirectory() as run_dir:
            path = os.path.join(run_dir, "dead.sock")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
                dead.bind(path)  # bound, never listening: a daemon that exited uncleanly
                with kerntune.Client(path, timeout=5) as client:
                    with self.assertRaises(kerntune.UnavailableError) as context:
                        client.status()
        self.assertIn("the socket %s exists but refuses connections: kerntuned exited without "
                      "removing it (start it again) or is still starting" % path,
                      context.exception.message)

    def test_a_socket_that_accepts_again_is_named_as_one(self):
        # A daemon that came back after the call failed; here a listener
        # that says hello and hangs up, so the call fails too.
        with tempfile.TemporaryDirectory() as run_dir:
            path = os.path.join(run_dir, "kerntune.sock")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
                listener.bind(path)
                listener.listen(16)

                def hang_up():
                    while True:
                        try:
                            connection, _ = listener.accept()
                        except OSError:
                            return
                        connection.sendall(b"hello\n")  # speaks first, not HTTP/2
                        connection.close()

                thread = threading.Thread(target=hang_up, daemon=True)
                thread.start()
                with kerntune.Client(path, timeout=5) as client:
                    with self.assertRaises(kerntune.UnavailableError) as context:
                        client.status()
                listener.shutdown(socket.SHUT_RDWR)
                thread.join(5)
        self.assertIn("kerntuned accepts connections at %s again: the call failed while it "
                      "was away" % path, context.exception.message)

    def test_the_status_command_without_a_daemon_names_its_own_flag(self):
        # issue 43: `python3 -m kerntune status` told a CLI user to pass
        # Client(target=...).
        with tempfile.TemporaryDirectory() as run_dir:
            path = os.path.join(run_dir, "kerntune.sock")
            run = subprocess.run([sys.executable, "-m", "kerntune", "status", "--server=" + path,
                                  "--timeout=5"], capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 1, run.stderr)
        self.assertEqual(run.stdout, "")
        self.assertIn("kerntune: unix:%s: no socket at %s: start the daemon (kerntuned "
                      "--socket=%s; add --cpu on a machine without a GPU), or pass "
                      "--server=unix:PATH with the --socket it listens on" % (path, path, path),
                      run.stderr)
        self.assertNotIn("Client(", run.stderr)

    def test_relative_socket_paths_and_bad_targets(self):
        self.assertEqual(kerntune.Client("./kt.sock").target,
                         "unix:" + os.path.join(os.getcwd(), "kt.sock"))
        self.assertEqual(kerntune.Client("../kt.sock").target,
                         "unix:" + os.path.abspath("../kt.sock"))
        self.assertEqual(kerntune.Client("unix:kt.sock").target, "unix:kt.sock")
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            kerntune.Client("kt.sock")
        self.assertIn("target='kt.sock': expected 'unix:PATH', a socket path starting with / "
                      "or ./, or 'host:port'", context.exception.message)

    def test_version_and_generated_modules(self):
        self.assertRegex(kerntune.__version__, r"^\d+\.\d+\.\d+")
        self.assertIn("Run", pb.DESCRIPTOR.services_by_name["KernTune"].methods_by_name)


class DeviceUuidTest(unittest.TestCase):
    """Picking the daemon's device by UUID (no GPU, no daemon needed)."""

    A = "GPU-11111111-2222-3333-4444-555555555555"
    B = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

    @staticmethod
    def devices(*uuids):
        sku = kerntune.GpuSku("H100", 9, 0, 132, 1)
        return [kerntune.Device(i, sku, uuid, "") for i, uuid in enumerate(uuids)]

    def test_format_matches_nvidia_smi(self):
        raw = bytes([0x5b, 0x7f, 0x6b, 0x8a, 0x01, 0x23, 0x45, 0x67,
                     0x89, 0xab, 0xcd, 0xef, 0x00, 0x10, 0xfe, 0xff])
        self.assertEqual(kerntune._types.format_gpu_uuid(raw),
                         "GPU-5b7f6b8a-0123-4567-89ab-cdef0010feff")
        # torch's _CUuuid.bytes is a list of ints
        self.assertEqual(kerntune._types.format_gpu_uuid(list(raw)),
                         "GPU-5b7f6b8a-0123-4567-89ab-cdef0010feff")
        with self.assertRaises(ValueError):
            kerntune._types.format_gpu_uuid(b"short")

    def test_the_daemons_ordinal_of_the_same_gpu(self):
        pick = kerntune._types.daemon_ordinal_for_uuid
        self.assertEqual(pick(self.devices(self.A, self.B), self.B, 0), 1)
        self.assertEqual(pick(self.devices(self.A, self.B), self.B.upper(), 0), 1)
        with self.assertRaises(kerntune.FailedPreconditionError) as context:
            pick(self.devices(self.A), self.B, 0)
        self.assertIn("0=" + self.A, str(context.exception))
        # No UUIDs from the daemon (older, or CPU), or none of our own: the same index.
        self.assertEqual(pick(self.devices("", ""), self.B, 1), 1)
        self.assertEqual(pick([], self.B, 3), 3)
        self.assertEqual(pick(self.devices(self.A), "", 2), 2)

    def test_status_carries_uuid_and_pci_bus_id(self):
        m = pb.GetStatusResponse()
        d = m.devices.add(ordinal=0, uuid=self.A, pci_bus_id="0000:1B:00.0")
        d.sku.name = "H100"
        status = kerntune.Status.from_proto(m)
        self.assertEqual(status.devices[0].uuid, self.A)
        self.assertEqual(status.devices[0].pci_bus_id, "0000:1B:00.0")

    def test_status_carries_each_devices_health_and_counts(self):
        m = pb.GetStatusResponse(backend="gpu")
        m.devices.add(ordinal=0, uuid=self.A, available=True, tuned_entries=12,
                      shipped_entries=300, registered_buffers=2, registered_bytes=4096,
                      runs=10, runs_in_flight=1)
        m.devices.add(ordinal=1, uuid=self.B, available=False,
                      unavailable_reason="cudaErrorIllegalAddress", stale_entries_skipped=4)
        first, second = kerntune.Status.from_proto(m).devices
        self.assertTrue(first.available)
        self.assertEqual((first.tuned_entries, first.shipped_entries, first.registered_buffers,
                          first.registered_bytes, first.runs, first.runs_in_flight),
                         (12, 300, 2, 4096, 10, 1))
        self.assertEqual((second.ordinal, second.uuid), (1, self.B))
        self.assertFalse(second.available)
        self.assertEqual(second.unavailable_reason, "cudaErrorIllegalAddress")
        self.assertEqual(second.stale_entries_skipped, 4)

    def test_every_torch_device_is_mapped_by_its_own_uuid(self):
        # Two GPUs in one process, numbered the other way round by the daemon.
        client = kerntune.Client("unix:/nonexistent/kerntune.sock", timeout=5)
        calls = []
        saved = kerntune._torch.device_uuid
        try:
            kerntune._torch.device_uuid = lambda index: {0: self.B, 1: self.A}[index]
            client.status = lambda: calls.append(1) or kerntune.Status.from_proto(
                pb.GetStatusResponse(devices=[pb.Device(ordinal=0, uuid=self.A),
                                              pb.Device(ordinal=1, uuid=self.B)]))
            for _ in range(3):
                self.assertEqual(client._ordinal(0), 1)
                self.assertEqual(client._ordinal(1), 0)
            self.assertEqual(len(calls), 2)  # GetStatus once per device, not once per client
        finally:
            kerntune._torch.device_uuid = saved
            client.close()

    def test_the_client_maps_torch_devices_by_uuid_once(self):
        client = kerntune.Client("unix:/nonexistent/kerntune.sock", timeout=5)
        calls = []
        saved = kerntune._torch.device_uuid
        try:
            kerntune._torch.device_uuid = lambda index: self.B
            client.status = lambda: calls.append(1) or kerntune.Status.from_proto(
                pb.GetStatusResponse(devices=[pb.Device(ordinal=0, uuid=self.A),
                                              pb.Device(ordinal=1, uuid=self.B)]))
            self.assertEqual(client._ordinal(0), 1)
            self.assertEqual(client._ordinal(0), 1)
            self.assertEqual(len(calls), 1)  # GetStatus once per device
            kerntune._torch.device_uuid = lambda index: ""
            self.assertEqual(client._ordinal(2), 2)  # no UUID from torch: same index
        finally:
            kerntune._torch.device_uuid = saved
            client.close()
        mapped = kerntune.Client("unix:/nonexistent/kerntune.sock", device_map={0: 5})
        self.assertEqual(mapped._ordinal(0), 5)  # an explicit map wins
        mapped.close()


class RpcTest(DaemonTestCase):
    def test_status(self):
        status = self.client.status()
        self.assertIsInstance(status, kerntune.Status)
        self.assertTrue(status.version)
        self.assertTrue(status.kernel_library_version)
        self.assertEqual(status.backend, "cpu")
        self.assertEqual(status.backend_reason, "--cpu given")
        self.assertIn("GPU tuned configs", status.backend_note)
        self.assertEqual(status.devices, [])
        self.assertEqual(status.tuned_entries, 0)
        self.assertEqual(status.shipped_entries, 0)
        self.assertEqual(status.shipped_config_files, [])
        self.assertEqual(status.stale_entries_skipped, 0)
        self.assertTrue(status.database_path.endswith("missing.db"))
        self.assertGreaterEqual(status.uptime_seconds, 0)
        self.assertFalse(status.cuda_ipc_supported)
        # Field numbers of the identity: new ones, so older clients skip them.
        fields = pb.Device.DESCRIPTOR.fields_by_name
        self.assertEqual(fields["uuid"].number, 3)
        self.assertEqual(fields["pci_bus_id"].number, 4)

    def test_get_config(self):
        for dtype in ("bfloat16", np.float16, np.dtype(np.float32)):
            choice = self.client.get_config("layer_norm", dtype, 49152, 4096)
            self.assertEqual(choice.source, "cpu_reference")
            self.assertIsNone(choice.config)
            self.assertIsNone(choice.tuned_shape)
        # Every op, not only the first three (the README said so once).
        for op in kerntune.OPS:
            self.assertEqual(self.client.get_config(op, "float16", 64, 128).source,
                             "cpu_reference", op)
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            self.client.get_config("softmax", "float32", 8, 0)
        self.assertCode(context, grpc.StatusCode.INVALID_ARGUMENT, "shape.cols=0")
        with self.assertRaises(kerntune.InvalidArgumentError):
            self.client.get_config("gelu", "float32", 8, 8)
        with self.assertRaises(kerntune.InvalidArgumentError):
            self.client.get_config("softmax", np.float64, 8, 8)

    def test_list_configs(self):
        configs = self.client.list_configs()
        self.assertIsInstance(configs.sku, kerntune.GpuSku)
        self.assertEqual(configs.entries, [])

    def test_list_buffers(self):
        try:
            buffers = self.client.list_buffers()
        except kerntune.UnimplementedError as e:
            self.skipTest("kerntuned answers UNIMPLEMENTED for ListBuffers "
                          "(the server's buffer registry has not landed): %s" % e)
        self.assertEqual(buffers, [])

    def test_health(self):
        channel = grpc.insecure_channel(self.daemon.target)
        try:
            self.assertEqual(kerntuned_child.health(channel), kerntuned_child.SERVING)
            self.assertEqual(kerntuned_child.health(channel, "kerntune.v1.KernTune"),
                             kerntuned_child.SERVING)
            with self.assertRaises(grpc.RpcError) as context:
                kerntuned_child.health(channel, "no.such.Service")
            self.assertEqual(context.exception.code(), grpc.StatusCode.NOT_FOUND)
        finally:
            channel.close()


class OpsTest(DaemonTestCase, CloseMixin):
    def test_every_op_and_dtype_matches_the_float64_reference(self):
        rng = np.random.default_rng(20261121)
        for op in ("softmax", "log_softmax", "layer_norm"):
            for dtype in ("float32", "float16"):
                for rows, cols in SHAPES:
                    what = "%s %s %dx%d" % (op, dtype, rows, cols)
                    x = random_input(rng, op, dtype, (rows, cols))
                    tolerance = TOLERANCE[(dtype, op)]
                    if op == "layer_norm":
                        weight = rng.normal(1.0, 0.5, cols).astype(dtype)
                        bias = rng.normal(0.0, 0.5, cols).astype(dtype)
                        y = self.client.layer_norm(x, weight, bias)
                        self.assertClose(y, reference(op, x, weight, bias), tolerance, what)
                        y = self.client.layer_norm(x, eps=1e-3)
                        self.assertClose(y, reference(op, x, eps=1e-3), tolerance,
                                         what + " no affine")
                    else:
                        y = getattr(self.client, op)(x)
                        self.assertClose(y, reference(op, x), tolerance, what)
                    self.assertIsInstance(y, np.ndarray)
                    self.assertEqual(y.dtype, np.dtype(dtype), what)
                    self.assertTrue(y.flags.writeable, what)

    def test_out_is_written_and_returned(self):
        rng = np.random.default_rng(1)
        for dtype in ("float32", "float16"):
            x = random_input(rng, "softmax", dtype, (5, 77))
            out = np.full((5, 77), np.nan, dtype=dtype)
            self.assertIs(self.client.log_softmax(x, out=out), out)
            self.assertClose(out, ref_log_softmax(x), TOLERANCE[(dtype, "log_softmax")], dtype)
            # A strided out is filled too (inline results are copied into it).
            wide = np.full((5, 154), np.nan, dtype=dtype)
            self.client.softmax(x, out=wide[:, ::2])
            self.assertClose(wide[:, ::2], ref_softmax(x), TOLERANCE[(dtype, "softmax")], dtype)
            self.assertTrue(np.isnan(wide[:, 1::2].astype(np.float32)).all())

    def test_layer_norm_statistics(self):
        rng = np.random.default_rng(2)
        for dtype in ("float32", "float16"):
            x = random_input(rng, "layer_norm", dtype, (9, 300))
            weight = rng.normal(1.0, 0.5, 300).astype(dtype)
            y, mean, inv_std = self.client.layer_norm(x, weight=weight, eps=1e-4,
                                                      return_stats=True)
            want_y, want_mean, want_inv_std = ref_layer_norm(x, weight, None, 1e-4)
            self.assertClose(y, want_y, TOLERANCE[(dtype, "layer_norm")], dtype)
            self.assertEqual(mean.dtype, np.float32)
            self.assertClose(mean, want_mean, STATS_TOLERANCE, dtype + " mean")
            self.assertClose(inv_std, want_inv_std, STATS_TOLERANCE, dtype + " inv_std")

    def test_softmax_rows_sum_to_one(self):
        # Independent of the reference above: a known input.
        x = np.array([[0, 0, 0, 0], [1, 2, 3, 4]], dtype=np.float32)
        y = self.client.softmax(x)
        np.testing.assert_allclose(y[0], [0.25] * 4, rtol=1e-6)
        np.testing.assert_allclose(y.sum(axis=1), [1.0, 1.0], rtol=1e-6)
        self.assertTrue((np.diff(y[1]) > 0).all())

    def test_strided_and_array_like_inputs(self):
        rng = np.random.default_rng(3)
        big = random_input(rng, "softmax", "float32", (6, 40))
        view = big[1:5, ::3]
        self.assertFalse(view.flags.c_contiguous)
        self.assertClose(self.client.softmax(view), ref_softmax(view),
                         TOLERANCE[("float32", "softmax")], "strided")
        as_list = [[1.0, 2.0, 3.0]]
        with self.assertRaises(kerntune.InvalidArgumentError):
            self.client.softmax(as_list)  # a list becomes float64
        y = self.client.softmax(np.asarray(as_list, dtype=np.float32))
        self.assertClose(y, ref_softmax(np.asarray(as_list)), TOLERANCE[("float32", "softmax")])

    def test_run_returns_the_config_and_time(self):
        result = self.client.run("log_softmax", np.ones((2, 3), dtype=np.float16))
        self.assertIsInstance(result, kerntune.RunResult)
        self.assertEqual(result.backend, "cpu")
        self.assertEqual(result.config.source, "cpu_reference")
        self.assertIsNone(result.config.config)
        self.assertGreaterEqual(result.kernel_time_us, 0)
        self.assertIsNone(result.mean)
        np.testing.assert_allclose(result.output.astype(np.float64), np.log(1 / 3), rtol=2e-3)
        self.assertEqual(result.device_ordinal, -1)  # the CPU backend: no device
        self.assertEqual(result.device_uuid, "")

    def test_device_names_the_daemons_gpu(self):
        sent = []
        call = self.client._call
        self.client._call = lambda method, request: sent.append(request) or call(method, request)
        try:
            x = np.ones((2, 3), dtype=np.float32)
            self.client.run("softmax", x)
            self.assertEqual(sent[-1].device, "")  # the daemon picks
            self.client.run("softmax", x, device=1)
            self.assertEqual(sent[-1].device, "1")
            self.client.layer_norm(x, device="GPU-aaaaaaaa")
            self.assertEqual(sent[-1].device, "GPU-aaaaaaaa")
            for helper in (self.client.softmax, self.client.log_softmax, self.client.rms_norm,
                           self.client.reduce_scale, self.client.scaled_masked_softmax):
                helper(x, device=0)
                self.assertEqual(sent[-1].device, "0", helper.__name__)
            self.client.get_config("softmax", "float32", 2, 3, device=1)
            self.assertEqual(sent[-1].device, "1")
            self.client.list_configs(device="GPU-aaaaaaaa")
            self.assertEqual(sent[-1].device, "GPU-aaaaaaaa")
            count = len(sent)
            for bad in (-1, True, 1.5, b"GPU"):
                with self.assertRaises(kerntune.InvalidArgumentError, msg=repr(bad)):
                    self.client.run("softmax", x, device=bad)
            self.assertEqual(len(sent), count)  # refused before any call
        finally:
            del self.client._call


class NewOpsTest(DaemonTestCase, CloseMixin):
    """Softmax along any dim, RMSNorm, ReduceScale and the scaled-masked softmax."""

    def test_softmax_along_every_dim_of_n_d_arrays(self):
        rng = np.random.default_rng(5)
        for dtype in ("float32", "float16"):
            for shape in ((4, 5, 6), (3, 1, 7, 2), (9,), (2, 33)):
                x = random_input(rng, "softmax", dtype, shape)
                for dim in range(-len(shape), len(shape)):
                    what = "%s %s dim=%d" % (dtype, shape, dim)
                    y = self.client.softmax(x, dim=dim)
                    self.assertEqual(y.shape, x.shape, what)
                    self.assertEqual(y.dtype, x.dtype, what)
                    self.assertClose(y, ref_softmax_along(x, dim), TOLERANCE[(dtype, "softmax")],
                                     "softmax " + what)
                    y = self.client.log_softmax(x, dim=dim)
                    self.assertClose(y, ref_softmax_along(x, dim, log=True),
                                     TOLERANCE[(dtype, "log_softmax")], "log_softmax " + what)
        # Seed 001's shapes, scaled down: dim 0 of [8, 8, 4, 4], dim 1 of [16, 28, 4, 3].
        x = random_input(rng, "softmax", "float32", (8, 8, 4, 4))
        result = self.client.run("softmax", x, dim=0)
        self.assertClose(result.output, ref_softmax_along(x, 0),
                         TOLERANCE[("float32", "softmax")], "dim 0")
        self.assertEqual(result.config.source, "cpu_reference")
        x = random_input(rng, "softmax", "float16", (16, 28, 4, 3))
        self.assertClose(self.client.log_softmax(x, dim=1), ref_softmax_along(x, 1, log=True),
                         TOLERANCE[("float16", "log_softmax")], "dim 1")
        # A strided view along a middle axis is sent as its contiguous copy.
        big = random_input(rng, "softmax", "float32", (4, 10, 6))
        view = big[:, ::2, 1:]
        self.assertClose(self.client.softmax(view, dim=1), ref_softmax_along(view, 1),
                         TOLERANCE[("float32", "softmax")], "strided middle axis")
        # out= of x's shape.
        out = np.full(x.shape, np.nan, dtype=x.dtype)
        self.assertIs(self.client.softmax(x, out=out, dim=2), out)
        self.assertClose(out, ref_softmax_along(x, 2), TOLERANCE[("float16", "softmax")], "out")

    def test_rms_norm(self):
        rng = np.random.default_rng(6)
        for dtype in ("float32", "float16"):
            for shape in ((1, 1), (7, 33), (3, 4, 300)):
                what = "rms_norm %s %s" % (dtype, shape)
                x = random_input(rng, "rms_norm", dtype, shape)
                weight = rng.normal(1.0, 0.5, shape[-1]).astype(dtype)
                y = self.client.rms_norm(x, weight)
                self.assertEqual(y.shape, x.shape)
                self.assertClose(y, ref_rms_norm(x, weight, 1e-6)[0],
                                 TOLERANCE[(dtype, "rms_norm")], what)
                y, inv_rms = self.client.rms_norm(x, eps=1e-2, return_stats=True)
                want_y, want_inv = ref_rms_norm(x, None, 1e-2)
                self.assertClose(y, want_y, TOLERANCE[(dtype, "rms_norm")], what + " no weight")
                self.assertEqual(inv_rms.dtype, np.float32)
                self.assertEqual(inv_rms.shape, x.shape[:-1])
                self.assertClose(inv_rms, want_inv, STATS_TOLERANCE, what + " inv_rms")
        x = np.ones((2, 3), dtype=np.float32)
        for eps in (0.0, -1.0, math.nan):
            with self.assertRaises(kerntune.InvalidArgumentError) as context:
                self.client.rms_norm(x, eps=eps)
            self.assertCode(context, grpc.StatusCode.INVALID_ARGUMENT, "rms_norm.epsilon")
        with self.assertRaises(kerntune.InvalidArgumentError):
            self.client.rms_norm(x, weight=np.ones(4, np.float32))

    def test_reduce_scale(self):
        rng = np.random.default_rng(7)
        for dtype in ("float32", "float16"):
            x = random_input(rng, "reduce_scale", dtype, (5, 6, 129))
            x[1, 2] = 0  # an all-zero row: zeros, scale 0
            y, scale = self.client.reduce_scale(x)
            want_y, want_scale = ref_reduce_scale(x)
            self.assertEqual(y.shape, x.shape)
            self.assertEqual(y.dtype, x.dtype)
            self.assertEqual(scale.shape, (5, 6, 1))
            self.assertEqual(scale.dtype, np.float32)
            self.assertClose(y, want_y, TOLERANCE[(dtype, "reduce_scale")], dtype)
            self.assertClose(scale, want_scale, STATS_TOLERANCE, dtype + " scale")
            self.assertTrue((y[1, 2] == 0).all())
            self.assertEqual(float(scale[1, 2, 0]), 0.0)
            # x comes back as y * scale, within y's rounding.
            self.assertClose(y.astype(np.float64) * scale, x.astype(np.float64),
                             (TOLERANCE[(dtype, "reduce_scale")][0] * 2,
                              float(np.abs(x).max()) * 2e-3), dtype + " y * scale")
            self.assertTrue((np.abs(y.astype(np.float32)) <= 1).all())
        result = self.client.run("reduce_scale", np.array([[-4, 2, 1]], np.float32))
        np.testing.assert_array_equal(result.output, [[-1, 0.5, 0.25]])
        np.testing.assert_array_equal(result.row_scale, [[4]])
        self.assertIsNone(result.mean)

    def test_scaled_masked_softmax(self):
        rng = np.random.default_rng(8)
        for dtype in ("float32", "float16"):
            scores = random_input(rng, "softmax", dtype, (2, 3, 5, 7))
            mask = rng.normal(0, 1, (5, 7)).astype(dtype)
            mask[2, ::3] = -np.inf
            cases = (
                ("mask", dict(mask=mask), ref_scaled_masked_softmax(scores, mask, 1.0, False)),
                ("mask, scale", dict(mask=mask, scale=0.25),
                 ref_scaled_masked_softmax(scores, mask, 0.25, False)),
                ("causal", dict(causal=True),
                 ref_scaled_masked_softmax(scores, None, 1.0, True)),
                ("mask, causal, scale", dict(mask=mask[None, None], causal=True, scale=0.5),
                 ref_scaled_masked_softmax(scores, mask, 0.5, True)),
                ("scale only", dict(scale=2.0),
                 ref_scaled_masked_softmax(scores, None, 2.0, False)),
            )
            for name, kwargs, want in cases:
                what = "%s %s" % (dtype, name)
                y = self.client.scaled_masked_softmax(scores, **kwargs)
                self.assertEqual(y.shape, scores.shape, what)
                self.assertClose(y, want, TOLERANCE[(dtype, "scaled_masked_softmax")], what)
            # Causal: query 0 of every (batch, head) keeps column 0 only.
            y = self.client.scaled_masked_softmax(scores, causal=True)
            np.testing.assert_array_equal(y[:, :, 0, 1:].astype(np.float32), 0)
        # (q, k) scores of one head, 2-d.
        x = random_input(rng, "softmax", "float32", (4, 4))
        self.assertClose(self.client.scaled_masked_softmax(x, causal=True),
                         ref_scaled_masked_softmax(x, None, 1.0, True),
                         TOLERANCE[("float32", "scaled_masked_softmax")], "2-d causal")

    def test_bad_masks(self):
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        scores = np.zeros((2, 3, 5, 7), np.float32)
        for mask, fragment in ((np.zeros((7, 5), np.float32), "want (q, k) = (5, 7)"),
                               (np.zeros((2, 5, 7), np.float32), "want (q, k)"),
                               (np.zeros((5, 7), np.float16), "dtype float16")):
            with self.assertRaises(kerntune.InvalidArgumentError) as context:
                self.client.scaled_masked_softmax(scores, mask)
            self.assertCode(context, invalid, fragment)
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            self.client.scaled_masked_softmax(scores, scale=math.inf)
        self.assertCode(context, invalid, "scaled_masked_softmax.scale=inf must be finite")

    def test_requests_over_the_wire(self):
        # What the daemon itself refuses, by raw request.
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        request = pb.RunRequest(op=pb.OP_LAYER_NORM, dtype=pb.DTYPE_FLOAT32,
                                shape=pb.Shape(rows=2, cols=3, inner=4))
        request.input.inline_data = bytes(2 * 3 * 4 * 4)
        request.layer_norm.epsilon = 1e-5
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            self.client._call(self.client._stub.Run, request)
        self.assertCode(context, invalid, "shape.inner=4: op=layer_norm")
        request = pb.RunRequest(op=pb.OP_SCALED_MASKED_SOFTMAX, dtype=pb.DTYPE_FLOAT32,
                                shape=pb.Shape(rows=6, cols=2))
        request.input.inline_data = bytes(6 * 2 * 4)
        request.scaled_masked_softmax.causal = True
        request.scaled_masked_softmax.mask_rows = 4
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            self.client._call(self.client._stub.Run, request)
        self.assertCode(context, invalid, "mask_rows=4 does not divide shape.rows=6")

    def test_get_config_takes_inner(self):
        choice = self.client.get_config("softmax", "float16", 512, 896, inner=48)
        self.assertEqual(choice.source, "cpu_reference")
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            self.client.get_config("rms_norm", "float16", 512, 896, inner=48)
        self.assertCode(context, grpc.StatusCode.INVALID_ARGUMENT, "shape.inner=48")


class BadInputTest(DaemonTestCase):
    def check(self, error_class, code, call, *fragments):
        with self.assertRaises(error_class) as context:
            call()
        self.assertCode(context, code, *fragments)
        return context.exception

    def test_wrong_dtypes(self):
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        for dtype in (np.float64, np.int32, np.uint16):
            error = self.check(kerntune.InvalidArgumentError, invalid,
                               lambda: self.client.softmax(np.ones((2, 3), dtype=dtype)),
                               "dtype")
            self.assertIsInstance(error, ValueError)
        x = np.ones((2, 3), dtype=np.float16)
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.layer_norm(x, weight=np.ones(3, np.float32)), "weight")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(x, out=np.empty((2, 3), np.float32)), "out")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(np.ones((2, 3), dtype=">f4")), "big-endian")

    def test_wrong_shapes(self):
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(np.ones((), np.float32)), "at least one dimension")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(np.ones((2, 3), np.float32), dim=2),
                   "dim=2 is out of range")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.log_softmax(np.ones((2, 3), np.float32), dim=-3),
                   "dim=-3 is out of range")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(np.ones((2, 3, 0), np.float32), dim=1),
                   "multiply to 0")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.scaled_masked_softmax(np.ones(5, np.float32)),
                   "(..., q, k)")
        x = np.ones((2, 3), dtype=np.float32)
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.layer_norm(x, bias=np.ones(4, np.float32)), "bias", "(3,)")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(x, out=np.empty((3, 2), np.float32)), "out")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(np.ones((2, 3, 4), np.float32),
                                               out=np.empty((2, 12), np.float32)), "out")
        readonly = np.empty((2, 3), np.float32)
        readonly.flags.writeable = False
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(x, out=readonly), "read-only")
        # Empty shapes go to the daemon, which names the field.
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(np.ones((0, 3), np.float32)), "shape.rows=0")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.log_softmax(np.ones((3, 0), np.float16)), "shape.cols=0")

    def test_bad_epsilon_is_refused_by_the_daemon(self):
        x = np.ones((2, 3), dtype=np.float32)
        for eps in (0.0, -1.0, math.nan, math.inf):
            self.check(kerntune.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT,
                       lambda: self.client.layer_norm(x, eps=eps), "layer_norm.epsilon")

    def test_arguments_of_the_wrong_op(self):
        x = np.ones((2, 3), dtype=np.float32)
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.run("softmax", x, weight=np.ones(3, np.float32)),
                   "softmax does not take weight")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.run("layer_norm", x, dim=0), "layer_norm does not take dim")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.run("rms_norm", x, bias=np.ones(3, np.float32)),
                   "rms_norm does not take bias")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.run("reduce_scale", x, eps=1e-3),
                   "reduce_scale does not take eps")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.run("softmax", x, causal=True), "does not take causal")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.run("scaled_masked_softmax", x, return_stats=True),
                   "does not take return_stats")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.run("gelu", x), "op=")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.softmax(x, stream=True), "stream")
        self.check(kerntune.InvalidArgumentError, invalid,
                   lambda: self.client.register(x), "SharedArray")

    def test_the_per_op_methods_have_python_signatures(self):
        # Documented: a keyword a method does not have is Python's TypeError;
        # Client.run names the op's own arguments instead.
        x = np.ones((2, 3), dtype=np.float32)
        with self.assertRaises(TypeError):
            self.client.softmax(x, eps=1e-5)
        with self.assertRaises(TypeError):
            self.client.layer_norm(x, dim=0)

    def test_three_d_input_is_fine(self):
        x = np.random.default_rng(3).standard_normal((2, 4, 1000)).astype(np.float32)
        y = self.client.layer_norm(x)
        self.assertEqual(y.shape, (2, 4, 1000))
        np.testing.assert_allclose(y.reshape(8, 1000),
                                   ref_layer_norm(x.reshape(8, 1000), None, None, 1e-5)[0],
                                   rtol=1e-4, atol=1e-4)

    def test_over_the_request_limit(self):
        x = np.zeros((MAX_REQUEST_BYTES // 4 // 64 + 1, 64), dtype=np.float32)
        error = self.check(kerntune.ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED,
                           lambda: self.client.softmax(x), "--max_request_bytes",
                           "x of shape (4097, 64) float32 is 1048832 bytes, over the daemon's "
                           "limit of 1048576 bytes", "kerntune.shared_array(x)")
        self.assertIsInstance(error, kerntune.KernTuneError)
        # Refused before it was sent: the daemon never saw it.
        self.assertNotIn("RESOURCE_EXHAUSTED", self.daemon.log())
        # A shared input with an inline output: the output is over the limit.
        shared = kerntune.shared_array(x)
        self.check(kerntune.ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED,
                   lambda: self.client.softmax(shared), "the output of shape (4097, 64)")
        # In shared memory both ways, the same shape runs.
        out = kerntune.shared_empty(x.shape, x.dtype)
        np.testing.assert_allclose(self.client.softmax(shared, out=out), 1 / 64)

    def test_the_daemon_stays_up(self):
        self.assertEqual(self.client.status().backend, "cpu")


def _skip_without_buffers(client):
    try:
        client.list_buffers()
    except kerntune.UnimplementedError as e:
        raise unittest.SkipTest(
            "kerntuned answers UNIMPLEMENTED for the buffer RPCs (the server's "
            "RegisterBuffer work has not landed): %s" % e)


class SharedBufferTest(DaemonTestCase, CloseMixin):
    def setUp(self):
        _skip_without_buffers(self.client)
        self.rng = np.random.default_rng(4)

    def tearDown(self):
        gc.collect()

    def test_register_list_unregister(self):
        array = kerntune.shared_empty((4, 8), np.float32)
        self.assertIsInstance(array, kerntune.SharedArray)
        self.assertTrue(array.shm_name)
        with self.client.register(array, label="weights", ttl=60) as buffer:
            self.assertRegex(buffer.id, r"^[0-9a-f]{32}$")
            self.assertEqual(buffer.kind, "host_shm")
            self.assertGreaterEqual(buffer.size_bytes, array.nbytes)
            listed = {b.buffer_id: b for b in self.client.list_buffers()}
            self.assertIn(buffer.id, listed)
            info = listed[buffer.id]
            self.assertEqual(info.kind, "host_shm")
            self.assertEqual(info.label, "weights")
            self.assertEqual(info.ttl_seconds, 60)
            self.assertGreater(info.expires_unix_ms, info.registered_unix_ms)
            status = self.client.status()
            self.assertGreaterEqual(status.registered_buffers, 1)
            self.assertGreaterEqual(status.registered_bytes, array.nbytes)
            self.assertGreaterEqual(status.buffer_owners, 1)
        self.assertTrue(buffer.closed)
        self.assertNotIn(buffer.id, [b.buffer_id for b in self.client.list_buffers()])
        buffer.close()  # idempotent
        with self.assertRaises(kerntune.NotFoundError) as context:
            self.client.unregister(buffer.id)
        self.assertEqual(context.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_runs_in_place_on_shared_arrays(self):
        for dtype in ("float32", "float16"):
            for op in ("softmax", "log_softmax", "layer_norm"):
                what = "%s %s" % (op, dtype)
                data = random_input(self.rng, op, dtype, (12, 65))
                x = kerntune.shared_array(data)
                out = kerntune.shared_empty((12, 65), dtype)
                out[...] = np.nan
                with self.client.register(x), self.client.register(out):
                    result = self.client.run(op, x, out)
                    self.assertIs(result.output, out)
                    self.assertClose(out, reference(op, data), TOLERANCE[(dtype, op)], what)
                    # Rows 3..7 of both: views at an offset of the same buffers.
                    out[...] = np.nan
                    self.client.run(op, x[3:8], out[3:8])
                    self.assertClose(out[3:8], reference(op, data[3:8]), TOLERANCE[(dtype, op)],
                                     what + " rows 3:8")
                    self.assertTrue(np.isnan(out[:3].astype(np.float32)).all())
                    runs = {b.buffer_id: b.runs for b in self.client.list_buffers()}
                    self.assertEqual(len(runs), 2)
                    self.assertTrue(all(n >= 2 for n in runs.values()), runs)

    def test_in_place_and_shared_parameters(self):
        data = random_input(self.rng, "layer_norm", "float32", (5, 40))
        x = kerntune.shared_array(data)
        weight = kerntune.shared_array(self.rng.normal(1, 0.5, 40).astype(np.float32))
        bias = kerntune.shared_array(self.rng.normal(0, 0.5, 40).astype(np.float32))
        y, mean, inv_std = self.client.layer_norm(x, weight, bias, out=x, return_stats=True)
        self.assertIs(y, x)
        want, want_mean, want_inv_std = ref_layer_norm(data, weight, bias, 1e-5)
        self.assertClose(x, want, TOLERANCE[("float32", "layer_norm")], "in place")
        self.assertClose(mean, want_mean, STATS_TOLERANCE, "mean")
        self.assertClose(inv_std, want_inv_std, STATS_TOLERANCE, "inv_std")

    def test_shared_arrays_are_registered_on_first_use_and_dropped_with_them(self):
        data = random_input(self.rng, "softmax", "float32", (3, 10))
        x = kerntune.shared_array(data)
        y = self.client.softmax(x)  # input by buffer, output inline
        self.assertNotIsInstance(y, kerntune.SharedArray)
        self.assertClose(y, ref_softmax(data), TOLERANCE[("float32", "softmax")])
        mine = [b for b in self.client.list_buffers() if b.label == "kerntune-python"]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0].runs, 1)
        del x
        gc.collect()
        self.client.softmax(np.ones((1, 2), np.float32))  # a later call unregisters it
        self.assertEqual([b for b in self.client.list_buffers() if b.label == "kerntune-python"],
                         [])

    def test_a_view_outside_the_buffer_is_out_of_range(self):
        array = kerntune.shared_empty((2, 4), np.float32)
        with self.client.register(array) as buffer:
            request = pb.RunRequest(op=pb.OP_SOFTMAX, dtype=pb.DTYPE_FLOAT32,
                                    shape=pb.Shape(rows=2, cols=4))
            request.input.buffer.buffer_id = buffer.id
            request.input.buffer.offset_bytes = buffer.size_bytes
            request.output.return_inline = True
            with self.assertRaises(kerntune.OutOfRangeError) as context:
                self.client._call(self.client._stub.Run, request)
            self.assertEqual(context.exception.code, grpc.StatusCode.OUT_OF_RANGE)

    def test_another_process_cannot_use_our_buffer(self):
        array = kerntune.shared_empty((2, 4), np.float32)
        array[...] = 1
        with self.client.register(array) as buffer:
            child = textwrap.dedent("""
                import sys
                import grpc
                import kerntune
                from kerntune.v1 import kerntune_pb2 as pb
                target, buffer_id = sys.argv[1:3]
                client = kerntune.Client(target, timeout=30)
                assert client.list_buffers() == [], client.list_buffers()
                request = pb.RunRequest(op=pb.OP_SOFTMAX, dtype=pb.DTYPE_FLOAT32,
                                        shape=pb.Shape(rows=2, cols=4))
                request.input.buffer.buffer_id = buffer_id
                request.output.return_inline = True
                try:
                    client._call(client._stub.Run, request)
                    sys.exit("Run on another process's buffer succeeded")
                except kerntune.NotFoundError as e:
                    print("run:", e)
                try:
                    client.unregister(buffer_id)
                    sys.exit("UnregisterBuffer of another process's buffer succeeded")
                except kerntune.NotFoundError as e:
                    print("unregister:", e)
                client.close()
            """)
            done = subprocess.run([sys.executable, "-c", child, self.daemon.target, buffer.id],
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            self.assertIn("NOT_FOUND", done.stdout)
            # Still ours and still usable.
            self.assertIn(buffer.id, [b.buffer_id for b in self.client.list_buffers()])
            np.testing.assert_allclose(self.client.softmax(array), 0.25)

    def test_outputs_may_not_overlap_inputs(self):
        array = kerntune.shared_array(np.ones((6, 4), np.float32))
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            self.client.softmax(array[0:4], out=array[2:6])
        self.assertCode(context, grpc.StatusCode.INVALID_ARGUMENT, "overlaps")


class LeaseTest(DaemonTestCase, CloseMixin):
    extra_args = ("--buffer_ttl_s=1",)

    def setUp(self):
        _skip_without_buffers(self.client)

    def test_an_automatic_registration_is_renewed_after_its_lease(self):
        data = np.arange(12, dtype=np.float32).reshape(3, 4)
        x = kerntune.shared_array(data)
        self.assertClose(self.client.softmax(x), ref_softmax(data),
                         TOLERANCE[("float32", "softmax")], "first")
        first = [b.buffer_id for b in self.client.list_buffers()]
        self.assertEqual(len(first), 1)
        deadline = time.monotonic() + 10
        while self.client.list_buffers() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.client.list_buffers(), [], "the 1 s lease did not end")
        # The client's id is stale: the daemon answers NOT_FOUND, the client
        # registers the memory again and retries once.
        self.assertClose(self.client.softmax(x), ref_softmax(data),
                         TOLERANCE[("float32", "softmax")], "after the lease")
        second = [b.buffer_id for b in self.client.list_buffers()]
        self.assertEqual(len(second), 1)
        self.assertNotEqual(first, second)

    def test_a_prepared_call_registers_again_after_its_lease(self):
        data = np.arange(12, dtype=np.float32).reshape(3, 4)
        x = kerntune.shared_array(data)
        out = kerntune.shared_empty((3, 4), np.float32)
        with kerntune.Client(self.daemon.target, timeout=30) as client:
            for _ in range(2):  # the second from the memo
                client.softmax(x, out=out)
            self.assertEqual(len(client._prepared), 1)
            deadline = time.monotonic() + 10
            while client.list_buffers() and time.monotonic() < deadline:
                time.sleep(0.2)
            self.assertEqual(client.list_buffers(), [], "the 1 s lease did not end")
            out[...] = 0
            self.assertClose(client.softmax(x, out=out), ref_softmax(data),
                             TOLERANCE[("float32", "softmax")], "after the lease")
            self.assertEqual(len(client.list_buffers()), 2)

    def test_an_explicit_registration_past_its_lease_is_not_found(self):
        x = kerntune.shared_array(np.ones((2, 2), np.float32))
        buffer = self.client.register(x, ttl=1)
        deadline = time.monotonic() + 10
        while self.client.list_buffers() and time.monotonic() < deadline:
            time.sleep(0.2)
        with self.assertRaises(kerntune.NotFoundError):
            self.client.softmax(x)
        buffer.close()  # quiet: the lease already ended
        np.testing.assert_allclose(self.client.softmax(x), 0.5)  # registered afresh


class _Counting:
    """Wraps a client method to count its calls."""

    def __init__(self, client, name):
        self.calls = 0
        self._method = getattr(client, name)
        setattr(client, name, self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._method(*args, **kwargs)


class PreparedCallTest(DaemonTestCase, CloseMixin):
    """The same call again reuses its request (Client._prepared) exactly
    while nothing it depends on changed."""

    def setUp(self):
        _skip_without_buffers(self.client)
        self.rng = np.random.default_rng(7)
        self.prepared = kerntune.Client(self.daemon.target, timeout=30)
        self.builds = _Counting(self.prepared, "_run_host")
        self.sends = _Counting(self.prepared, "_run_request")

    def tearDown(self):
        self.prepared.close()
        gc.collect()

    def softmax_close(self, got, data, what):
        self.assertClose(got, ref_softmax(data.astype(np.float64)),
                         TOLERANCE[("float32", "softmax")], what)

    def test_a_repeated_call_is_built_once_and_reads_the_data_of_the_moment(self):
        data = self.rng.standard_normal((3, 40)).astype(np.float32)
        x = kerntune.shared_array(data)
        out = kerntune.shared_empty((3, 40), np.float32)
        self.softmax_close(self.prepared.softmax(x, out=out), data, "first")
        self.softmax_close(self.prepared.softmax(x, out=out), data, "again")
        fresh = self.rng.standard_normal((3, 40)).astype(np.float32)
        x[...] = fresh
        self.assertIs(self.prepared.softmax(x, out=out), out)
        self.softmax_close(out, fresh, "new data in place")
        result = self.prepared.run("softmax", x, out=out, dim=-1)  # softmax()'s arguments
        self.assertEqual(result.config.source, "cpu_reference")  # run() still says how
        self.assertEqual((self.builds.calls, self.sends.calls), (1, 4))
        self.assertEqual(len(self.prepared._prepared), 1)

    def test_other_objects_options_or_layouts_are_built_anew(self):
        data = self.rng.standard_normal((4, 16)).astype(np.float32)
        x = kerntune.shared_array(data)
        out, other_out = (kerntune.shared_empty((4, 16), np.float32) for _ in range(2))
        self.prepared.softmax(x, out=out)
        self.softmax_close(self.prepared.softmax(x, out=other_out), data, "another out")
        self.prepared.log_softmax(x, out=out)
        np.testing.assert_allclose(out, np.log(ref_softmax(data.astype(np.float64))),
                                   rtol=1e-4, atol=1e-5)
        rows = x[1:3]
        self.softmax_close(self.prepared.softmax(rows, out=out[1:3]), data[1:3], "a view")
        self.softmax_close(self.prepared.softmax(x, out=out, dim=0).T, data.T, "dim=0")
        self.assertEqual(self.builds.calls, 5)
        x.shape = (2, 32)  # the same object, another layout
        self.softmax_close(self.prepared.softmax(x, out=out.reshape(2, 32)),
                           data.reshape(2, 32), "reshaped in place")
        self.assertEqual(self.builds.calls, 6)

    def test_a_new_registration_of_the_memory_is_used_at_once(self):
        data = self.rng.standard_normal((2, 8)).astype(np.float32)
        x = kerntune.shared_array(data)
        out = kerntune.shared_empty((2, 8), np.float32)
        self.prepared.softmax(x, out=out)  # x's and out's memory registered automatically
        with self.prepared.register(x) as explicit:  # ends x's automatic registration
            self.softmax_close(self.prepared.softmax(x, out=out), data, "after register")
            # Built anew, so sent once (a stale id would be sent, refused and
            # sent again), naming the new registration.
            self.assertEqual((self.builds.calls, self.sends.calls), (2, 2))
            (prepared,) = self.prepared._prepared.values()
            self.assertEqual(prepared.request.input.buffer.buffer_id, explicit.id)
        self.softmax_close(self.prepared.softmax(x, out=out), data, "after unregister")
        self.assertEqual((self.builds.calls, self.sends.calls), (3, 3))

    def test_calls_that_send_or_return_data_inline_are_not_prepared(self):
        data = self.rng.standard_normal((2, 8)).astype(np.float32)
        plain_out = np.empty((2, 8), np.float32)
        for _ in range(2):
            self.softmax_close(self.prepared.softmax(data, out=plain_out), data, "inline")
            self.softmax_close(self.prepared.softmax(kerntune.shared_array(data), out=plain_out),
                               data, "output inline")
            self.prepared.layer_norm(kerntune.shared_array(data), return_stats=True,
                                     out=kerntune.shared_empty((2, 8), np.float32))
        self.assertEqual(self.prepared._prepared, {})
        self.assertEqual(self.builds.calls, 6)

    def test_a_prepared_call_holds_only_while_its_objects_live(self):
        # An id alone could be reused by a new object at the same address
        # (a CUDA tensor in another allocation segment, say).
        x, out = np.ones(4, np.float32), np.ones(4, np.float32)
        prepared = kerntune._client._Prepared(0, (x, out, None, None, None), None, None)
        self.assertTrue(prepared.holds((x, out, None, None, None)))
        self.assertFalse(prepared.holds((x, out.copy(), None, None, None)))
        self.assertFalse(prepared.holds((x, out, x, None, None)))
        del out
        gc.collect()
        self.assertFalse(prepared.holds((x, np.ones(4, np.float32), None, None, None)))

    def test_the_memo_is_bounded(self):
        x = kerntune.shared_array(np.ones((1, 4), np.float32))
        out = kerntune.shared_empty((1, 4), np.float32)
        views = [out.view() for _ in range(kerntune._client._MAX_PREPARED + 10)]
        for view in views:
            self.prepared.softmax(x, out=view)
        self.assertLessEqual(len(self.prepared._prepared), kerntune._client._MAX_PREPARED)
        np.testing.assert_allclose(out, 0.25)


def _free_tcp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TcpTest(DaemonTestCase):
    port = _free_tcp_port()
    extra_args = ("--tcp=127.0.0.1:%d" % port,)

    def test_inline_works_and_registration_is_refused_over_tcp(self):
        with kerntune.Client("127.0.0.1:%d" % self.port, timeout=30) as tcp:
            tcp.wait_ready()
            np.testing.assert_allclose(tcp.softmax(np.zeros((1, 4), np.float32)), 0.25)
            x = kerntune.shared_array(np.zeros((1, 4), np.float32))
            for call in (lambda: tcp.register(x), lambda: tcp.softmax(x)):
                with self.assertRaises(kerntune.FailedPreconditionError) as context:
                    call()
                self.assertEqual(context.exception.code, grpc.StatusCode.FAILED_PRECONDITION)


if __name__ == "__main__":
    unittest.main(verbosity=2)
