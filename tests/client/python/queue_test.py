#!/usr/bin/env python3
"""The Python client's submission queue (client/python/kerntune/_queue.py)
against a real kerntuned --cpu child.

How it writes the words the daemon reads (checked from another process); a
queue the daemon closes and a daemon killed (-9) or stopped while a Run
waits.

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

try:
    import grpc  # noqa: F401
    import numpy as np

    import kerntune
    from kerntune import _queue
    from kerntune.v1 import kerntune_pb2 as pb
except ImportError as e:  # pragma: no cover - environment check
    print("SKIP: the Python client needs grpc, protobuf and numpy: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kerntuned_child  # noqa: E402
from client_test import _skip_without_buffers  # noqa: E402

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

    def start_daemon(self):
        daemon = kerntuned_child.Daemon(self.binary)
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
        self.assertIn("is kerntuned still running?", error.message)
        self.assertLess(waiting["at"] - killed_at, 3.0, "failed at once, not at 60 s")
        # Nothing answers now: the next Run, over gRPC, says so at once too.
        start = time.monotonic()
        with self.assertRaises(kerntune.UnavailableError):
            self.client.softmax(self.x, out=self.out)
        self.assertLess(time.monotonic() - start, 3.0)
        self.assertEqual(self.grpc_runs.calls, 1)

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
