#!/usr/bin/env python3
"""The Python client's submission queue (client/python/kerntune/_queue.py).

How it writes the words the daemon reads, checked from another process.

Run by CTest like client_test.py; exits 77 (skipped) without grpc, protobuf
or NumPy, and skips the queue tests off Linux x86-64.
"""

import mmap
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

try:
    import grpc  # noqa: F401
    import numpy as np  # noqa: F401

    from kerntune import _queue
except ImportError as e:  # pragma: no cover - environment check
    print("SKIP: the Python client needs grpc, protobuf and numpy: %s" % e)
    sys.exit(77)

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


if __name__ == "__main__":
    unittest.main(verbosity=2)
