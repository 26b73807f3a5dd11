#!/usr/bin/env python3
"""The Python client's submission queue (client/python/kerntune/_queue.py)
against a real kerntuned --cpu child.

How it writes the words the daemon reads (checked from another process);
every op through the queue giving the bytes the same Run gives over gRPC;
the daemon's errors in completions with the gRPC codes and messages;
threads sharing one queue; the Runs that go over gRPC instead (inline
tensors, TCP, a daemon without queues, a queue that cannot open now or
closed before a Run reached it, a forked child); a queue the daemon closes
and a daemon killed (-9) or stopped while a Run waits.

Run by CTest like client_test.py; exits 77 (skipped) without grpc, protobuf
or NumPy, and skips the queue tests off Linux x86-64.
"""

import mmap
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from unittest import mock

try:
    import grpc
    import numpy as np

    import kerntune
    from kerntune import _queue
    from kerntune.v1 import kerntune_pb2 as pb
except ImportError as e:  # pragma: no cover - environment check
    print("SKIP: the Python client needs grpc, protobuf and numpy: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kerntuned_child  # noqa: E402
from client_test import (TOLERANCE, STATS_TOLERANCE, CloseMixin, DaemonTestCase,  # noqa: E402
                         _free_tcp_port, _skip_without_buffers, random_input, ref_layer_norm,
                         ref_reduce_scale, ref_rms_norm, ref_scaled_masked_softmax,
                         ref_softmax_along)

ENTRIES = 8


def _skip_unless_supported():
    if not _queue.QUEUE_SUPPORTED:
        raise unittest.SkipTest("submission queues need Linux on x86-64")


class IndexWordTest(unittest.TestCase):
    """The daemon reads sq_tail and cq_head at any moment, from another
    process: every store must change the word in one piece. A second
    process reads the word as fast as it can while this one stores values
    that are never 0; a store that goes through 0 (struct.pack_into zeroes
    its target first) shows up within a fraction of a second."""

    READY, STOP = 1024, 1025  # words past the header, for the handshake

    def test_an_index_store_never_shows_another_value(self):
        _skip_unless_supported()
        reader = textwrap.dedent("""
            import mmap, sys
            with open(sys.argv[1], "r+b") as f:
                words = memoryview(mmap.mmap(f.fileno(), 0)).cast("I")
            index, ready, stop = (int(a) for a in sys.argv[2:5])
            words[ready] = 1
            reads = bad = 0
            while not words[stop]:
                for _ in range(1000):
                    if words[index] == 0:
                        bad += 1
                reads += 1000
            print(reads, bad)
        """)
        size = _queue.region_bytes(ENTRIES)
        with tempfile.NamedTemporaryFile(dir="/dev/shm") as backing:
            backing.truncate(size)
            region = mmap.mmap(backing.fileno(), size)
            queue = _queue.RunQueue(None, "test", region, ENTRIES)
            queue._store(_queue._SQ_TAIL, 1)
            child = subprocess.Popen(
                [sys.executable, "-c", reader, backing.name, str(_queue._SQ_TAIL // 4),
                 str(self.READY), str(self.STOP)], stdout=subprocess.PIPE, text=True)
            try:
                words = memoryview(region).cast("I")
                until = time.monotonic() + 10
                while not words[self.READY] and time.monotonic() < until:
                    time.sleep(0.001)
                self.assertEqual(words[self.READY], 1, "the reader did not start")
                until = time.monotonic() + 0.5
                value = 1
                while time.monotonic() < until:
                    for _ in range(1000):
                        value = value % 1000 + 1
                        queue._store(_queue._SQ_TAIL, value)
                words[self.STOP] = 1
                reads, bad = (int(n) for n in child.communicate(timeout=30)[0].split())
            finally:
                child.kill()
                child.wait()
            self.assertGreater(reads, 0)
            self.assertEqual(bad, 0, "%d of %d reads saw sq_tail at 0" % (bad, reads))
            words.release()


class _CountingRun:
    """Wraps a client's gRPC Run stub to count the Runs sent over gRPC."""

    def __init__(self, client):
        self.calls = 0
        self._run = client._stub.Run
        client._stub.Run = self

    def __call__(self, request, **kwargs):
        self.calls += 1
        return self._run(request, **kwargs)


class _RpcError(grpc.RpcError):
    """What a stub raises for a status the test picks."""

    def __init__(self, code, details):
        super().__init__(details)
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class _FailingOpenQueue:
    """Replaces a client's OpenQueue stub: the first `failures` calls raise
    `code`, later ones go to the daemon."""

    def __init__(self, client, code, failures=None):
        self.calls = 0
        self._open = client._stub.OpenQueue
        self._code = code
        self._failures = failures
        client._stub.OpenQueue = self

    def __call__(self, request, **kwargs):
        self.calls += 1
        if self._failures is None or self.calls <= self._failures:
            raise _RpcError(self._code, "OpenQueue refused by the test")
        return self._open(request, **kwargs)


def _host_request(client, op, x, out, **refs):
    """A RunRequest on shared arrays built as client builds one (its own
    registrations); refs: {"layer_norm.mean": array, ...}."""
    used = []
    request = pb.RunRequest(op=op, dtype=pb.DTYPE_FLOAT32,
                            shape=pb.Shape(rows=x.shape[0], cols=x.shape[1]))
    client._host_ref(request.input, x, used)
    client._host_ref(request.output, out, used)
    for path, array in refs.items():
        message = request
        for name in path.split("."):
            message = getattr(message, name)
        client._host_ref(message, array, used)
    return request


class QueueTest(DaemonTestCase, CloseMixin):
    """Runs on shared arrays through the submission queue against the same
    Runs over gRPC. A daemon of its own, so open_queues counts only this
    class's clients; it also listens on TCP."""

    port = _free_tcp_port()
    extra_args = DaemonTestCase.extra_args + ("--tcp=127.0.0.1:%d" % port,)

    def setUp(self):
        _skip_unless_supported()
        _skip_without_buffers(self.client)
        self.rng = np.random.default_rng(23)
        self.queued = kerntune.Client(self.daemon.target, timeout=30)
        self.grpc = kerntune.Client(self.daemon.target, timeout=30, use_queue=False)
        self.queued_grpc_runs = _CountingRun(self.queued)
        self.grpc_grpc_runs = _CountingRun(self.grpc)

    def tearDown(self):
        self.queued.close()
        self.grpc.close()

    def open_queues(self):
        return self.client.status().open_queues

    def assertSameBytes(self, by_queue, by_grpc, what):
        self.assertEqual(np.asarray(by_queue).tobytes(), np.asarray(by_grpc).tobytes(), what)

    def test_every_op_gives_the_bytes_grpc_gives(self):
        self.assertTrue(self.queued.use_queue)
        self.assertFalse(self.grpc.use_queue)
        for dtype in ("float32", "float16"):
            x2 = kerntune.shared_array(random_input(self.rng, "layer_norm", dtype, (9, 70)))
            x3 = kerntune.shared_array(random_input(self.rng, "softmax", dtype, (3, 5, 7)))
            weight = kerntune.shared_array(self.rng.normal(1, 0.5, 70).astype(dtype))
            bias = kerntune.shared_array(self.rng.normal(0, 0.5, 70).astype(dtype))
            mask = kerntune.shared_array(self.rng.normal(0, 1, (5, 7)).astype(dtype))
            x64 = np.asarray(x2).astype(np.float64)
            cases = (
                ("softmax", x2, {}, ref_softmax_along(x2, -1)),
                ("log_softmax", x2, {}, ref_softmax_along(x2, -1, log=True)),
                ("softmax dim=1", x3, {"dim": 1}, ref_softmax_along(x3, 1)),
                ("log_softmax dim=0", x3, {"dim": 0}, ref_softmax_along(x3, 0, log=True)),
                ("layer_norm", x2, {"weight": weight, "bias": bias},
                 ref_layer_norm(x64, weight, bias, 1e-5)[0]),
                ("layer_norm", x2, {"eps": 1e-3}, ref_layer_norm(x64, None, None, 1e-3)[0]),
                ("rms_norm", x2, {"weight": weight}, ref_rms_norm(x2, weight, 1e-6)[0]),
                ("scaled_masked_softmax", x3, {"mask": mask, "scale": 0.5, "causal": True},
                 ref_scaled_masked_softmax(x3, mask, 0.5, True)),
            )
            for name, x, kwargs, want in cases:
                op = name.split()[0]
                what = "%s %s %s" % (name, dtype, sorted(kwargs))
                by_queue = kerntune.shared_empty(x.shape, dtype)
                by_grpc = kerntune.shared_empty(x.shape, dtype)
                by_queue[...] = np.nan
                by_grpc[...] = np.nan
                result = self.queued.run(op, x, by_queue, **kwargs)
                self.grpc.run(op, x, by_grpc, **kwargs)
                self.assertIs(result.output, by_queue, what)
                self.assertEqual(result.backend, "cpu", what)
                self.assertClose(by_queue, want, TOLERANCE[(dtype, op)], what)
                self.assertSameBytes(by_queue, by_grpc, what)
            # Views at an offset into the same shared memory.
            out = kerntune.shared_empty((9, 70), dtype)
            self.queued.softmax(x2[2:5], out=out[4:7])
            self.assertClose(out[4:7], ref_softmax_along(x2[2:5], -1),
                             TOLERANCE[(dtype, "softmax")], "offsets " + dtype)
        self.assertEqual(self.queued_grpc_runs.calls, 0, "the queue carried every run")
        self.assertGreater(self.grpc_grpc_runs.calls, 0)
        self.assertIsNotNone(self.queued._queue_id())
        self.assertIsNone(self.grpc._queue_id())

    def test_fused_norms_give_the_bytes_grpc_gives(self):
        # Every fused norm with every tensor in shared memory (x, out, weight,
        # the residual, the dynamic scales, the static scale; a strided
        # per-head view): the queue carries them all and gives gRPC's bytes.
        import llm_reference as ref

        T, H, D = 3, 4, 128
        for dtype in ("float32", "float16"):
            x = kerntune.shared_array(random_input(self.rng, "rms_norm", dtype, (6, 256)))
            weight = kerntune.shared_array(self.rng.normal(1, 0.5, 256).astype(dtype))
            bias = kerntune.shared_array(self.rng.normal(0, 0.5, 256).astype(dtype))
            before = random_input(self.rng, "rms_norm", dtype, (6, 256))
            static = kerntune.Quant("int8", "static",
                                    scale=kerntune.shared_array(np.array([0.02], np.float32)))
            cases = [
                ("add_rms_norm", {"weight": weight, "weight_offset": 1.0}, None),
                ("add_layer_norm", {"weight": weight, "bias": bias}, None),
                ("rms_norm_quant", {"weight": weight}, kerntune.Quant("fp8_e4m3")),
                ("layer_norm_quant", {"weight": weight, "bias": bias},
                 kerntune.Quant("fp8_e5m2", "per_group", group_size=64)),
                ("add_rms_norm_quant", {"weight": weight}, static),
                ("add_layer_norm_quant", {}, kerntune.Quant("int8", "per_group",
                                                             group_size=128)),
            ]
            for op, kwargs, quant in cases:
                what = "%s %s" % (op, dtype)
                outputs = []
                for client in (self.queued, self.grpc):
                    kwargs = dict(kwargs)
                    if quant is not None:
                        kwargs["quant"] = quant
                        out = kerntune.shared_empty(x.shape, quant.numpy_dtype())
                        if quant.dynamic:
                            kwargs["scales"] = kerntune.shared_empty(
                                (6, quant.scales_per_row(256)), np.float32)
                    else:
                        out = kerntune.shared_empty(x.shape, dtype)
                    if op.startswith("add_"):
                        kwargs["residual"] = kerntune.shared_array(before)
                    result = client.run(op, x, out, **kwargs)
                    self.assertIs(result.output, out, what)
                    outputs.append([out] + [kwargs[k] for k in ("residual", "scales")
                                            if k in kwargs])
                if op.startswith("add_"):
                    r = ref.add_residual(x, before)
                    np.testing.assert_array_equal(outputs[0][1].astype(np.float64), r, what)
                for by_queue, by_grpc in zip(*outputs):
                    self.assertSameBytes(by_queue, by_grpc, what)
            # QK-norm of a per-head view, in place, through the queue.
            qkv = kerntune.shared_array(random_input(self.rng, "rms_norm", dtype,
                                                     (T, 3 * H * D)))
            want = np.array(qkv)
            for client in (self.queued, self.grpc):
                q = qkv.reshape(T, 3, H, D)[:, 0]
                client.rms_norm(q, None, 1e-6, out=q)
            # Twice normalized is normalized (up to rounding): compare with
            # the reference of once.
            self.assertClose(qkv.reshape(T, 3, H, D)[:, 0],
                             ref.rms_norm(ref.rms_norm(want.reshape(T, 3, H, D)[:, 0], None,
                                                       1e-6)[0], None, 1e-6)[0],
                             TOLERANCE[(dtype, "rms_norm")], "qk-norm " + dtype)
        self.assertEqual(self.queued_grpc_runs.calls, 0, "the queue carried every run")

    def test_stats_and_scales_into_client_memory(self):
        # What NumPy callers get inline, a descriptor points at shared memory
        # (as torch callers' device tensors).
        x = kerntune.shared_array(random_input(self.rng, "layer_norm", "float32", (6, 40)))
        weight = kerntune.shared_array(self.rng.normal(1, 0.5, 40).astype(np.float32))
        outputs = {}
        for client in (self.queued, self.grpc):
            y = [kerntune.shared_empty((6, 40), np.float32) for _ in range(3)]
            rows = [kerntune.shared_empty(6, np.float32) for _ in range(4)]
            for array in y + rows:
                array[...] = np.nan
            requests = [
                _host_request(client, pb.OP_LAYER_NORM, x, y[0], **{
                    "layer_norm.gamma": weight, "layer_norm.mean": rows[0],
                    "layer_norm.inv_std": rows[1]}),
                _host_request(client, pb.OP_RMS_NORM, x, y[1], **{
                    "rms_norm.weight": weight, "rms_norm.inv_rms": rows[2]}),
                _host_request(client, pb.OP_REDUCE_SCALE, x, y[2], **{
                    "reduce_scale.row_scale": rows[3]}),
            ]
            requests[0].layer_norm.epsilon = 1e-5
            requests[1].rms_norm.epsilon = 1e-6
            for request in requests:
                self.assertTrue(_queue.queue_carries(request), request.op)
                client._run_request(request)
            outputs[client] = y + rows
        y_ln, mean, inv_std = ref_layer_norm(x, weight, None, 1e-5)
        y_rms, inv_rms = ref_rms_norm(x, weight, 1e-6)
        y_rs, scale = ref_reduce_scale(x)
        got = outputs[self.queued]
        self.assertClose(got[0], y_ln, TOLERANCE[("float32", "layer_norm")], "layer_norm")
        self.assertClose(got[3], mean, STATS_TOLERANCE, "mean")
        self.assertClose(got[4], inv_std, STATS_TOLERANCE, "inv_std")
        self.assertClose(got[1], y_rms, TOLERANCE[("float32", "rms_norm")], "rms_norm")
        self.assertClose(got[5], inv_rms, STATS_TOLERANCE, "inv_rms")
        self.assertClose(got[2], y_rs, TOLERANCE[("float32", "reduce_scale")], "reduce_scale")
        self.assertClose(got[6], scale[:, 0], STATS_TOLERANCE, "row_scale")
        for i, (a, b) in enumerate(zip(got, outputs[self.grpc])):
            self.assertSameBytes(a, b, "output %d" % i)
        self.assertEqual(self.queued_grpc_runs.calls, 0)
        self.assertEqual(self.grpc_grpc_runs.calls, 3)

    def test_errors_carry_the_grpc_code_and_message(self):
        array = kerntune.shared_array(np.ones((6, 4), np.float32))
        out = kerntune.shared_empty((6, 4), np.float32)

        def unknown_buffer(request):
            request.input.buffer.buffer_id = "0" * 32

        def past_the_end(request):
            request.output.buffer.offset_bytes = 6 * 4 * 4

        def no_rows(request):
            request.shape.rows = 0

        def overlap(request):
            request.shape.rows = 2
            request.output.buffer.CopyFrom(request.input.buffer)
            request.output.buffer.offset_bytes = 8

        def device_memory(request):
            request.input.cuda_ipc.handle = bytes(64)

        def bad_epsilon(request):
            request.op = pb.OP_LAYER_NORM
            request.layer_norm.epsilon = -1.0

        cases = ((unknown_buffer, grpc.StatusCode.NOT_FOUND),
                 (past_the_end, grpc.StatusCode.OUT_OF_RANGE),
                 (no_rows, grpc.StatusCode.INVALID_ARGUMENT),
                 (overlap, grpc.StatusCode.INVALID_ARGUMENT),
                 (device_memory, grpc.StatusCode.FAILED_PRECONDITION),
                 (bad_epsilon, grpc.StatusCode.INVALID_ARGUMENT))
        for spoil, code in cases:
            errors = []
            for client in (self.queued, self.grpc):
                request = _host_request(client, pb.OP_SOFTMAX, array, out)
                spoil(request)
                self.assertTrue(_queue.queue_carries(request), spoil.__name__)
                with self.assertRaises(kerntune.KernTuneError) as context:
                    client._run_request(request)
                errors.append(context.exception)
            by_queue, by_grpc = errors
            self.assertEqual(by_grpc.code, code, "%s: %s" % (spoil.__name__, by_grpc))
            self.assertIs(type(by_queue), type(by_grpc), spoil.__name__)
            self.assertEqual(by_queue.code, by_grpc.code, spoil.__name__)
            self.assertEqual(by_queue.message, by_grpc.message, spoil.__name__)
        self.assertEqual(self.queued_grpc_runs.calls, 0, "every error came through the queue")
        self.assertEqual(self.grpc_grpc_runs.calls, len(cases))
        # The public API raises the same: in and out overlap.
        with self.assertRaises(kerntune.InvalidArgumentError) as context:
            self.queued.softmax(array[0:4], out=array[2:6])
        self.assertCode(context, grpc.StatusCode.INVALID_ARGUMENT, "overlaps")
        self.assertEqual(self.queued_grpc_runs.calls, 0)

    def test_threads_share_the_queue(self):
        failures = []
        data = random_input(self.rng, "softmax", "float32", (16, 32))
        x = kerntune.shared_array(data)
        weight = kerntune.shared_array(np.linspace(0.5, 1.5, 32, dtype=np.float32))

        def work(op, kwargs, want):
            try:
                out = kerntune.shared_empty((16, 32), np.float32)
                for i in range(50):
                    rows = slice(i % 16, 16)
                    out[...] = np.nan
                    self.queued.run(op, x[rows], out[rows], **kwargs)
                    self.assertClose(out[rows], want[rows], TOLERANCE[("float32", op)],
                                     "%s run %d" % (op, i))
            except Exception as error:  # pylint: disable=broad-except
                failures.append(error)

        jobs = [("softmax", {}, ref_softmax_along(data, -1)),
                ("log_softmax", {}, ref_softmax_along(data, -1, log=True)),
                ("rms_norm", {"weight": weight}, ref_rms_norm(data, weight, 1e-6)[0]),
                ("layer_norm", {}, ref_layer_norm(data, None, None, 1e-5)[0])] * 2
        threads = [threading.Thread(target=work, args=job) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertFalse(any(thread.is_alive() for thread in threads), "a thread hangs")
        self.assertEqual(failures, [])
        self.assertEqual(self.queued_grpc_runs.calls, 0)
        self.assertEqual(self.open_queues(), 1)

    # -- what goes over gRPC --------------------------------------------------

    def test_inline_tensors_go_over_grpc(self):
        data = random_input(self.rng, "layer_norm", "float32", (3, 8))
        shared = kerntune.shared_array(data)
        self.queued.softmax(data)  # inline in, inline out
        self.queued.softmax(shared)  # shared in, inline out
        self.queued.layer_norm(shared, out=kerntune.shared_empty((3, 8), np.float32),
                               return_stats=True)  # mean and inv_std inline
        self.queued.reduce_scale(shared, out=kerntune.shared_empty((3, 8), np.float32))
        self.queued.softmax(data, out=kerntune.shared_empty((3, 8), np.float32))
        self.assertEqual(self.queued_grpc_runs.calls, 5)
        self.assertIsNone(self.queued._queue_id(), "no run needed a queue")
        self.assertEqual(self.open_queues(), 0)

    def test_a_tcp_client_has_no_queue(self):
        with kerntune.Client("127.0.0.1:%d" % self.port, timeout=30) as tcp:
            self.assertFalse(tcp.use_queue)
            np.testing.assert_allclose(tcp.softmax(np.zeros((1, 4), np.float32)), 0.25)
        # The daemon refuses a queue over TCP: FAILED_PRECONDITION, for good.
        with kerntune.Client("127.0.0.1:%d" % self.port, timeout=30) as tcp:
            with self.assertRaises(kerntune.FailedPreconditionError):
                _queue.RunQueue.open(tcp._stub, 10)

    def test_a_daemon_without_queues_is_served_over_grpc(self):
        opens = _FailingOpenQueue(self.queued, grpc.StatusCode.UNIMPLEMENTED)
        x = kerntune.shared_array(np.ones((2, 4), np.float32))
        out = kerntune.shared_empty((2, 4), np.float32)
        for _ in range(3):
            out[...] = 0
            self.queued.softmax(x, out=out)
            np.testing.assert_allclose(out, 0.25)
        self.assertEqual(opens.calls, 1, "asked once")
        self.assertEqual(self.queued_grpc_runs.calls, 3)
        self.assertIsNone(self.queued._queue_id())

    def test_a_queue_that_cannot_open_now_is_tried_again(self):
        opens = _FailingOpenQueue(self.queued, grpc.StatusCode.RESOURCE_EXHAUSTED, failures=1)
        x = kerntune.shared_array(np.ones((2, 4), np.float32))
        out = kerntune.shared_empty((2, 4), np.float32)
        with mock.patch.object(kerntune._client, "_QUEUE_RETRY_S", 0.3):
            self.queued.softmax(x, out=out)
            self.queued.softmax(x, out=out)
            self.assertEqual((opens.calls, self.queued_grpc_runs.calls), (1, 2),
                             "over gRPC, no second OpenQueue at once")
            time.sleep(0.3)
            self.queued.softmax(x, out=out)
        self.assertEqual((opens.calls, self.queued_grpc_runs.calls), (2, 2))
        self.assertIsNotNone(self.queued._queue_id())

    def test_a_run_that_never_reached_a_closed_queue_goes_over_grpc(self):
        x = kerntune.shared_array(np.ones((2, 4), np.float32))
        out = kerntune.shared_empty((2, 4), np.float32)
        self.queued.softmax(x, out=out)
        queue = self.queued._queue
        self.queued._stub.CloseQueue(pb.CloseQueueRequest(queue_id=queue.id), timeout=10)
        self.assertTrue(queue.closed)
        outcome = queue.run(_host_request(self.queued, pb.OP_SOFTMAX, x, out), 10)
        self.assertFalse(outcome.submitted)
        self.assertIsInstance(outcome.error, kerntune.UnavailableError)
        # The queue closed between the client's pick and the submission.
        out[...] = 0
        with mock.patch.object(self.queued, "_queue_for", return_value=queue):
            self.queued.softmax(x, out=out)
        np.testing.assert_allclose(out, 0.25)
        self.assertEqual(self.queued_grpc_runs.calls, 1)

    def test_a_queue_the_daemon_closed_is_reopened(self):
        x = kerntune.shared_array(np.ones((2, 4), np.float32))
        out = kerntune.shared_empty((2, 4), np.float32)
        self.queued.softmax(x, out=out)
        first = self.queued._queue_id()
        self.assertIsNotNone(first)
        self.queued._stub.CloseQueue(pb.CloseQueueRequest(queue_id=first), timeout=10)
        out[...] = 0
        self.queued.softmax(x, out=out)
        np.testing.assert_allclose(out, 0.25)
        self.assertNotEqual(self.queued._queue_id(), first)
        self.assertEqual(self.queued_grpc_runs.calls, 0)
        self.assertEqual(self.open_queues(), 1)

    def test_open_queues_while_the_client_is_open(self):
        self.assertEqual(self.open_queues(), 0)
        x = kerntune.shared_array(np.ones((2, 4), np.float32))
        out = kerntune.shared_empty((2, 4), np.float32)
        self.grpc.softmax(x, out=out)
        self.assertEqual(self.open_queues(), 0, "use_queue=False opens no queue")
        self.assertEqual(self.grpc_grpc_runs.calls, 1)
        self.queued.softmax(x, out=out)
        np.testing.assert_allclose(out, 0.25)
        self.assertEqual(self.open_queues(), 1)
        self.queued.softmax(x, out=out)
        self.assertEqual(self.open_queues(), 1, "one queue per client")
        self.queued.close()
        self.assertEqual(self.open_queues(), 0, "close() closes the queue")

    def test_a_request_too_large_for_a_descriptor_goes_over_grpc(self):
        x = kerntune.shared_array(np.ones((2, 4), np.float32))
        out = kerntune.shared_empty((2, 4), np.float32)
        self.queued.softmax(x, out=out)  # the queue is open
        request = _host_request(self.queued, pb.OP_SOFTMAX, x, out)
        # A device selector no daemon has, long enough to overflow a slot.
        request.device = "GPU-" + "f" * _queue.MAX_REQUEST_BYTES
        with self.assertRaises(kerntune.KernTuneError) as raised:
            self.queued._run_request(request)
        self.assertIn("got 1012 bytes", raised.exception.message)
        self.assertEqual(self.queued_grpc_runs.calls, 1)
        self.queued.softmax(x, out=out)
        self.assertEqual(self.queued_grpc_runs.calls, 1, "the queue still serves")

    def test_a_forked_child_leaves_its_parents_queue_alone(self):
        x = kerntune.shared_array(np.ones((2, 4), np.float32))
        out = kerntune.shared_empty((2, 4), np.float32)
        self.queued.softmax(x, out=out)
        request = _host_request(self.queued, pb.OP_SOFTMAX, x, out)
        self.assertIs(self.queued._queue_for(request), self.queued._queue)
        pid = os.fork()
        if pid == 0:  # the child: no gRPC, no test machinery, only the choice
            os._exit(0 if self.queued._queue_for(request) is None else 1)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0,
                         "the child would have written into its parent's queue")
        self.queued.softmax(x, out=out)
        self.assertEqual(self.queued_grpc_runs.calls, 0)


class DaemonGoneTest(unittest.TestCase):
    """A daemon of its own per test, stopped, killed or closing a queue
    while a Run waits: the Run fails at once, not at its deadline."""

    def setUp(self):
        _skip_unless_supported()
        self.binary = kerntuned_child.kerntuned_binary()
        if self.binary is None:
            raise RuntimeError("set KERNTUNED_BINARY to the kerntuned to test")
        self.daemons = []
        self.daemon = self.start_daemon()
        self.client = kerntune.Client(self.daemon.target, timeout=60)
        _skip_without_buffers(self.client)
        self.grpc_runs = _CountingRun(self.client)
        self.x = kerntune.shared_array(np.ones((2, 4), np.float32))
        self.out = kerntune.shared_empty((2, 4), np.float32)
        self.client.softmax(self.x, out=self.out)  # opens the queue
        self.queue = self.client._queue
        self.assertIsNotNone(self.queue)

    def tearDown(self):
        self.client.close()
        for daemon in self.daemons:
            if daemon.process.poll() is None:
                os.kill(daemon.process.pid, signal.SIGCONT)
            daemon.cleanup()

    def start_daemon(self, socket=None):
        daemon = kerntuned_child.Daemon(self.binary, socket=socket)
        self.daemons.append(daemon)
        daemon.wait_serving()
        return daemon

    def stop_daemon(self):
        """SIGSTOP, and waits until every thread of the daemon has stopped:
        the signal stops them one after the other, and a busy machine can
        leave the poller running for milliseconds."""
        pid = self.daemon.process.pid
        os.kill(pid, signal.SIGSTOP)
        until = time.monotonic() + 10
        while time.monotonic() < until:
            states = []
            for task in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/stat" % (pid, task)) as stat:
                    states.append(stat.read().rsplit(")", 1)[1].split()[0])
            if all(state == "T" for state in states):
                return
            time.sleep(0.001)
        self.fail("kerntuned did not stop: thread states %s" % states)

    def run_in_thread(self, call):
        """Starts `call` in a thread; returns a dict that gets its outcome and when."""
        outcome = {}

        def target():
            try:
                outcome["result"] = call()
            except Exception as error:  # pylint: disable=broad-except
                outcome["error"] = error
            outcome["at"] = time.monotonic()

        outcome["thread"] = threading.Thread(target=target)
        outcome["thread"].start()
        return outcome

    def wait_submitted(self, sq_tail):
        until = time.monotonic() + 10
        while self.queue._load(_queue._SQ_TAIL) != sq_tail and time.monotonic() < until:
            time.sleep(0.001)
        self.assertEqual(self.queue._load(_queue._SQ_TAIL), sq_tail, "the Run was not submitted")

    def test_a_run_waiting_when_the_daemon_is_killed_fails_at_once(self):
        self.stop_daemon()
        waiting = self.run_in_thread(lambda: self.client.softmax(self.x, out=self.out))
        self.wait_submitted(2)
        time.sleep(0.5)  # asleep on the futex, its first probes unanswered
        killed_at = time.monotonic()
        self.daemon.process.kill()
        self.daemon.process.wait()
        waiting["thread"].join(30)
        self.assertFalse(waiting["thread"].is_alive())
        error = waiting.get("error")
        self.assertIsInstance(error, kerntune.UnavailableError, repr(waiting))
        self.assertIn("kerntuned went away; the Run was in flight", error.message)
        self.assertIn("exists but refuses connections", error.message)
        self.assertLess(waiting["at"] - killed_at, 3.0, "failed at once, not at 60 s")
        # Nothing answers now: the next Run, over gRPC, says so at once too.
        start = time.monotonic()
        with self.assertRaises(kerntune.UnavailableError):
            self.client.softmax(self.x, out=self.out)
        self.assertLess(time.monotonic() - start, 3.0)
        self.assertEqual(self.grpc_runs.calls, 1)
        # A new daemon on the same socket gets a new queue, once the channel
        # is back (gRPC's reconnect backoff) and the OpenQueue retry is due.
        self.start_daemon(socket=self.daemon.socket)
        self.client.wait_ready(timeout=30)
        time.sleep(kerntune._client._QUEUE_RETRY_S)
        self.out[...] = 0
        self.client.softmax(self.x, out=self.out)
        np.testing.assert_allclose(self.out, 0.25)
        self.assertEqual(self.grpc_runs.calls, 1)
        self.assertNotIn(self.client._queue_id(), (None, self.queue.id))

    def test_a_restarted_daemon_is_found_within_a_second(self):
        # issue 43: a client kept failing for 20 s after its daemon came
        # back from a 30 s outage (gRPC's reconnect backoff, growing to
        # 120 s), saying "nothing answers" while the daemon was up.
        grpc_only = kerntune.Client(self.daemon.target, timeout=60, use_queue=False)
        self.addCleanup(grpc_only.close)
        grpc_only.status()
        self.daemon.process.kill()
        self.daemon.process.wait()
        # 5 s of outage, calling all along: gRPC's default backoff would be
        # 1, 1.6, 2.6 s ... apart by now.
        until = time.monotonic() + 5
        while time.monotonic() < until:
            for client in (self.client, grpc_only):
                with self.assertRaises(kerntune.UnavailableError) as down:
                    client.status()
            time.sleep(0.05)
        self.assertIn("exists but refuses connections: kerntuned exited without removing it",
                      down.exception.message)
        self.start_daemon(socket=self.daemon.socket)
        serving = time.monotonic()
        for client in (self.client, grpc_only):
            while True:
                try:
                    client.status()
                    break
                except kerntune.UnavailableError as error:
                    self.assertLess(time.monotonic() - serving, 10, error.message)
                    time.sleep(0.01)
            # Within _RECONNECT_MAX_MS (plus gRPC's 20% jitter), with slack for CI.
            self.assertLess(time.monotonic() - serving, 2.0)
        # The first run after it goes through a new queue (its shared
        # arrays registered again), not into the dead daemon's.
        self.out[...] = 0
        self.client.softmax(self.x, out=self.out)
        np.testing.assert_allclose(self.out, 0.25)
        self.assertEqual(self.grpc_runs.calls, 0)
        self.assertNotIn(self.client._queue_id(), (None, self.queue.id))

    def test_a_run_waiting_when_the_daemon_is_replaced_on_its_socket_fails_at_once(self):
        # The new daemon answers on the socket, but the queue was the old
        # one's: the waiting Run learns from the old process's exit.
        self.stop_daemon()
        waiting = self.run_in_thread(lambda: self.client.softmax(self.x, out=self.out))
        self.wait_submitted(2)
        killed_at = time.monotonic()
        self.daemon.process.kill()
        self.daemon.process.wait()
        self.start_daemon(socket=self.daemon.socket)
        waiting["thread"].join(30)
        self.assertFalse(waiting["thread"].is_alive())
        error = waiting.get("error")
        self.assertIsInstance(error, kerntune.UnavailableError, repr(waiting))
        self.assertIn("kerntuned went away; the Run was in flight (its process exited)",
                      error.message)
        self.assertLess(waiting["at"] - killed_at, 3.0, "failed at once, not at 60 s")

    def test_a_stopped_daemon_is_waited_for_until_the_deadline(self):
        # Stopped, it answers no probe; that is not gone.
        self.client.timeout = 1.5
        self.stop_daemon()
        start = time.monotonic()
        with self.assertRaises(kerntune.DeadlineExceededError):
            self.client.softmax(self.x, out=self.out)
        self.assertGreaterEqual(time.monotonic() - start, 1.5)
        os.kill(self.daemon.process.pid, signal.SIGCONT)
        # Its late answer is dropped; the queue serves the next Run.
        self.out[...] = 0
        self.client.softmax(self.x, out=self.out)
        np.testing.assert_allclose(self.out, 0.25)
        self.assertIs(self.client._queue, self.queue)
        self.assertEqual(self.grpc_runs.calls, 0)

    def test_a_full_queue_spends_the_deadline_once(self):
        # Stopped, the daemon answers nothing: `entries` Runs fill the ring
        # and one more waits for a slot until its deadline, then fails
        # instead of starting over on gRPC.
        self.client.timeout = 1.5
        self.stop_daemon()
        entries = self.queue._entries
        waiting = [self.run_in_thread(lambda: self.client.softmax(self.x, out=self.out))
                   for _ in range(entries + 1)]
        for outcome in waiting:
            outcome["thread"].join(30)
        errors = [outcome.get("error") for outcome in waiting]
        self.assertTrue(all(isinstance(error, kerntune.DeadlineExceededError)
                            for error in errors), errors)
        self.assertEqual(sum(error.message == "the queue stayed full" for error in errors), 1)
        self.assertEqual(self.grpc_runs.calls, 0, "the full queue's Run went over gRPC")

    def test_a_run_in_flight_when_the_daemon_closes_the_queue_fails_at_once(self):
        # A Run that takes the CPU backend seconds, and the queue closed
        # while the daemon computes it.
        big = kerntune.shared_array(np.ones((2048, 8192), np.float32))
        big_out = kerntune.shared_empty((2048, 8192), np.float32)
        self.client.register(big)
        self.client.register(big_out)
        waiting = self.run_in_thread(lambda: self.client.softmax(big, out=big_out))
        self.wait_submitted(2)
        until = time.monotonic() + 10
        while self.queue._load(_queue._SQ_HEAD) != 2 and time.monotonic() < until:
            time.sleep(0.001)
        closed_at = time.monotonic()
        self.client._stub.CloseQueue(pb.CloseQueueRequest(queue_id=self.queue.id), timeout=10)
        waiting["thread"].join(30)
        error = waiting.get("error")
        self.assertIsInstance(error, kerntune.UnavailableError, repr(waiting))
        self.assertEqual(error.message, "kerntuned closed the submission queue by its owner; "
                         "the Run was in flight")
        self.assertLess(waiting["at"] - closed_at, 1.0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
