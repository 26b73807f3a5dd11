"""The client's side of a submission queue (kerntune.v1 OpenQueue): Runs whose
tensors are all in client memory (registered buffers, CUDA IPC handles)
travel as descriptors in shared memory instead of gRPC calls.

The layout and the protocol are proto/run_queue_layout.h's and this follows
the C++ client (client/run_queue.cc) step for step. Nothing here is part of
the API a user sees: Client uses one queue per client when the daemon
offers it (a Unix socket target) and falls back to gRPC otherwise.

Memory ordering: the header's index words are read and written through a
memoryview of the region cast to native uint32 ("I"), whose item get and
set are each one aligned 4-byte load or store (a 4-byte memcpy in CPython).
Never struct.pack_into for a word the daemon reads: it zeroes its target
before writing the value, and a daemon that read sq_tail or cq_head in that
window took the 0 for a garbage index and closed the queue (kBadIndex).
Queues are used on x86-64 only (QUEUE_SUPPORTED), whose memory model (TSO)
keeps stores in program order and loads in program order: writing a
descriptor slot and then sq_tail publishes the slot (the release the C++
client asks for), and reading cq_tail and then a completion slot reads the
slot that cq_tail covers (the acquire). The one reordering x86-64 allows, a
later load passing an earlier store, matters where a store is followed by
a load the other side races with (sq_tail then need_wakeup); there
_full_fence() issues a locked instruction, as the C++ client's seq_cst
store does.

Thread-safe: one lock guards the ring; a thread waiting for its completion
drains every ready completion and hands each to the thread that waits for
it, as the C++ client does.

A daemon that closes the queue writes `closed` and wakes cq_tail: waiting
Runs fail at once. One that dies writes nothing, so while Runs wait in
silence one of them checks every _PROBE_AFTER_S whether the daemon still
runs: through a pidfd of the process that listened on the socket when the
queue opened (readable once it exits; a daemon restarted on the same
socket is a new process, as the C++ client sees it), else, where the pid
cannot be known, by asking the socket (gRPC health) whether anything still
answers. A daemon gone fails every waiting Run with UNAVAILABLE instead of
at their deadlines.
"""

import ctypes
import mmap
import os
import platform
import select
import socket
import struct
import sys
import threading
import time

import grpc

from kerntune import _errors
from kerntune.v1 import kerntune_pb2 as pb

# Queues need Linux futexes and x86-64's store order (see above).
QUEUE_SUPPORTED = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")

# proto/run_queue_layout.h
QUEUE_MAGIC = 0x3151544B  # "KTQ1"
LAYOUT_VERSION = 1
MIN_ENTRIES = 8
MAX_ENTRIES = 1024
SUBMISSION_SLOT_BYTES = 1024
COMPLETION_SLOT_BYTES = 512
RINGS_OFFSET = 4096
_SUBMISSION_HEADER = struct.Struct("<QII")  # tag, length, flags
_COMPLETION_HEADER = struct.Struct("<QiI")  # tag, code, length
MAX_REQUEST_BYTES = SUBMISSION_SLOT_BYTES - _SUBMISSION_HEADER.size
MAX_COMPLETION_PAYLOAD = COMPLETION_SLOT_BYTES - _COMPLETION_HEADER.size
# RegionHeader offsets (static_asserted in the C++ header).
_MAGIC, _VERSION, _ENTRIES = 0, 4, 8
_SQ_TAIL, _SQ_HEAD, _CQ_TAIL, _CQ_HEAD = 64, 128, 192, 256
_DOORBELL, _NEED_WAKEUP, _CLIENT_WAITING, _CLOSED = 320, 324, 384, 448

# linux/futex.h, x86-64 syscall numbers; shared (not private) futexes: the
# daemon waits on the same words in its own mapping.
_SYS_FUTEX = 202
_FUTEX_WAIT = 0
_FUTEX_WAKE = 1

# How a thread waits for its completion, as client/run_queue.cc does: it
# spins (a small Run's answer comes within _SPIN_S), then keeps looking but
# yields the core between looks (a large Run's answer is seen at once, not
# a futex wake-up later), and past _YIELD_SPIN_S sleeps on the futex; both
# counted from the start of the wait, not of each sleep. The longest single
# sleep: how soon a waiter sees a close the daemon wrote while it was
# falling asleep, or its deadline.
_SPIN_S = 30e-6
_YIELD_SPIN_S = 2e-3
_MAX_SLEEP_S = 0.1
# A killed daemon writes nothing: after this long without a completion
# while Runs wait, one waiter checks whether the daemon still runs (its
# pidfd, else the socket's gRPC health), and again each time as long.
_PROBE_AFTER_S = 0.25
_PROBE_TIMEOUT_S = 1.0

# UnavailableErrors that explain themselves, for Client._raise (no "is
# kerntuned running?" hint): the daemon's own while it drains (over gRPC or
# in a completion), and the queue's closes.
EXPLAINED_UNAVAILABLE = ("kerntuned is shutting down", "kerntuned closed the submission queue",
                         "the client closed its submission queue")

# grpc.health.v1: any answer, even NOT_SERVING, proves the daemon is there.
HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check"

# RegionHeader.closed (proto::queue::CloseReason), for messages.
_CLOSE_REASONS = {
    1: "by its owner",
    2: "as its owner exited",
    3: "for a bad index",
    4: "as its region shrank",
    5: "as it shuts down",
}

_libc = None
_fence_lock = threading.Lock()


def _syscall():
    global _libc
    if _libc is None:
        # CDLL releases the GIL around the call: a thread asleep on the
        # futex does not stop the others.
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc.syscall


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _full_fence():
    """A full memory barrier: acquiring an uncontended lock is a locked
    compare-exchange in CPython (sem_trywait or PyMutex), which on x86-64
    orders every earlier store before every later load."""
    with _fence_lock:
        pass


def daemon_pidfd(socket_path):
    """A pidfd of the process listening on the Unix socket `socket_path`, or
    None when it cannot be known (client/run_queue.cc OpenDaemonPidfd): the
    pid from the peer credentials of a connection of our own (gRPC does not
    expose its socket), 0 when the daemon is in a pid namespace we cannot
    see."""
    if not socket_path or not hasattr(os, "pidfd_open"):
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(socket_path)
            credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                struct.calcsize("3i"))
        pid = struct.unpack("3i", credentials)[0]
        return os.pidfd_open(pid) if pid > 0 else None
    except OSError:
        return None


def _status_code(number):
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code
    return grpc.StatusCode.UNKNOWN


def _in_memory(message, field=None):
    ref = getattr(message, field) if field else message
    return ref.HasField("buffer") or ref.HasField("cuda_ipc")


def queue_carries(request):
    """Whether a queue can carry `request` (run_queue.cc QueueCarries): every
    tensor in client memory and no output returned inline; RunQueue.run
    checks that it fits a descriptor. The daemon refuses the others; they
    go over gRPC."""
    if not _in_memory(request.input) or not _in_memory(request.output):
        return False
    ln = request.layer_norm
    if ((ln.HasField("gamma") and not _in_memory(ln.gamma))
            or (ln.HasField("beta") and not _in_memory(ln.beta)) or ln.want_mean_inv_std):
        return False
    rms = request.rms_norm
    if (rms.HasField("weight") and not _in_memory(rms.weight)) or rms.want_inv_rms:
        return False
    # The fused norms: a residual is client memory or refused; a static scale
    # may be inline; dynamic scales come back inline unless they have a place.
    for params in (ln, rms):
        if params.HasField("residual") and not _in_memory(params.residual):
            return False
        if params.HasField("quant"):
            quant = params.quant
            if quant.HasField("scale") and not _in_memory(quant.scale):
                return False
            if quant.scale_mode != pb.SCALE_MODE_STATIC and not _in_memory(quant.scales):
                return False
    # reduce_scale's scales come back inline unless they have a place.
    if request.op == pb.OP_REDUCE_SCALE and not _in_memory(request.reduce_scale.row_scale):
        return False
    masked = request.scaled_masked_softmax
    if masked.HasField("mask") and not _in_memory(masked.mask):
        return False
    return True


def _valid_entries(entries):
    return MIN_ENTRIES <= entries <= MAX_ENTRIES and entries & (entries - 1) == 0


def _completion_offset(entries):
    return RINGS_OFFSET + entries * SUBMISSION_SLOT_BYTES


def region_bytes(entries):
    return _completion_offset(entries) + entries * COMPLETION_SLOT_BYTES


def _close_on_daemon(stub, queue_id):
    try:
        stub.CloseQueue(pb.CloseQueueRequest(queue_id=queue_id), timeout=2.0)
    except grpc.RpcError:
        pass  # else it ends with this process


class _Waiter:
    __slots__ = ("done", "error", "response")

    def __init__(self):
        self.done = False
        self.error = None
        self.response = None


class Outcome:
    """submitted: False when the request never reached the queue: it does
    not fit a descriptor (no error) or the queue is closed (an
    UnavailableError): the caller may send it another way; or the queue
    stayed full until the deadline (a DeadlineExceededError). True once it
    may have run. Then response (a RunResponse) or error (a KernTuneError)."""

    __slots__ = ("submitted", "response", "error")

    def __init__(self, submitted, response=None, error=None):
        self.submitted = submitted
        self.response = response
        self.error = error


class RunQueue:
    """One open queue, mapped. open() raises a KernTuneError when the daemon
    has no queues (UNIMPLEMENTED), refuses one (FAILED_PRECONDITION over
    TCP) or its layout is not this client's.

    How a waiting Run notices a daemon that died without closing the queue:
    daemon_pidfd, a pidfd of the daemon's process (daemon_pidfd(); the
    queue owns it), else health_check, HEALTH_CHECK_METHOD on the daemon's
    channel (bytes in and out); neither: never.
    """

    def __init__(self, stub, queue_id, region, entries, health_check=None, daemon_pidfd=None):
        self._stub = stub
        self.id = queue_id
        # A forked child inherits the mapping but must not write into it.
        self.pid = os.getpid()
        self._health_check = health_check
        self._daemon_pidfd = daemon_pidfd
        # The region's address, for the futex calls.
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(region))
        # The index words, each stored and loaded in one piece (see above).
        self._words = memoryview(region).cast("I")
        self._mm = region
        self._entries = entries
        self._mask = entries - 1
        self._completions = _completion_offset(entries)
        self._lock = threading.Lock()
        self._sq_tail = 0
        self._cq_head = 0
        self._next_tag = 1
        self._waiting = {}  # tag -> _Waiter, submitted and not yet answered
        self._sleepers = 0
        # Closed by this client, or the UnavailableError that says the daemon died.
        self._closed_here = False
        self._gone = None
        # When the daemon last showed it is alive (a completion, a probe),
        # and whether a waiter is asking it now.
        self._heard_at = time.monotonic()
        self._probing = False

    @classmethod
    def open(cls, stub, timeout, health_check=None, socket_path=None):
        """Opens a queue on the daemon behind `stub`; socket_path: its Unix
        socket, whose listener's pidfd tells when the daemon exits."""
        try:
            opened = stub.OpenQueue(pb.OpenQueueRequest(), timeout=timeout)
        except grpc.RpcError as error:
            raise _errors.from_rpc_error(error) from None

        def fail(error):
            _close_on_daemon(stub, opened.queue_id)
            return error

        entries = opened.entries
        if (opened.layout_version != LAYOUT_VERSION or not _valid_entries(entries)
                or opened.region_bytes != region_bytes(entries)):
            raise fail(_errors.UnimplementedError(
                "the daemon's queue layout (version %d, %d entries) is not this client's "
                "(version %d)" % (opened.layout_version, entries, LAYOUT_VERSION)))
        name = opened.shm_name.lstrip("/")
        path = "/dev/shm/" + name
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            raise fail(_errors.FailedPreconditionError(
                "opening the queue %s: %s" % (opened.shm_name, error.strerror))) from None
        region = None
        try:
            if os.fstat(fd).st_size == opened.region_bytes:
                region = mmap.mmap(fd, opened.region_bytes, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            region = None
        finally:
            os.close(fd)
            # Mapped (or not): the name has done its job.
            try:
                os.unlink(path)
            except OSError:
                pass
        if region is None:
            raise fail(_errors.FailedPreconditionError(
                "mapping the queue %s failed" % opened.shm_name))
        queue = cls(stub, opened.queue_id, region, entries, health_check,
                    daemon_pidfd(socket_path))
        if (queue._load(_MAGIC) != QUEUE_MAGIC or queue._load(_VERSION) != LAYOUT_VERSION
                or queue._load(_ENTRIES) != entries):
            queue.close()
            raise _errors.UnimplementedError("the queue's header is not this client's layout")
        return queue

    def close(self):
        """CloseQueue (the daemon also ends it when this process exits). A
        Run still waiting fails; the region is unmapped with the last
        reference to this object, so never under a thread that reads it."""
        with self._lock:
            if self._closed_here:
                return
            self._closed_here = True
        if self._gone is None:
            _close_on_daemon(self._stub, self.id)

    def __del__(self):
        pidfd, self._daemon_pidfd = getattr(self, "_daemon_pidfd", None), None
        if pidfd is not None:
            os.close(pidfd)

    # -- the words ------------------------------------------------------------

    def _load(self, offset):
        return self._words[offset >> 2]

    def _store(self, offset, value):
        self._words[offset >> 2] = value & 0xFFFFFFFF

    def _futex(self, offset, op, value, timeout_s=None):
        timespec = None
        if timeout_s is not None:
            seconds = int(timeout_s)
            timespec = ctypes.byref(_Timespec(seconds, int((timeout_s - seconds) * 1e9)))
        _syscall()(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(self._base + offset),
                   ctypes.c_int(op), ctypes.c_uint32(value), timespec, None, ctypes.c_int(0))

    def _ring_doorbell(self):
        # Only this client writes the doorbell, under self._lock.
        self._store(_DOORBELL, self._load(_DOORBELL) + 1)
        _full_fence()
        self._futex(_DOORBELL, _FUTEX_WAKE, 1)

    @property
    def closed(self):
        """Whether the queue takes no more Runs: closed here or by the daemon,
        or the daemon is gone."""
        return self._closed_here or self._gone is not None or self._load(_CLOSED) != 0

    def _closed_error(self, what):
        """Why the queue is closed, as the UnavailableError of a Run that `what`."""
        if self._gone is not None:
            return _errors.UnavailableError(
                "kerntuned went away; the Run %s (%s)" % (what, self._gone.message))
        reason = self._load(_CLOSED)
        if reason == 5:
            # The words a gRPC Run gets from a draining daemon.
            return _errors.UnavailableError(
                "kerntuned is shutting down: it closed the submission queue; the Run %s" % what)
        if self._closed_here and reason in (0, 1):
            return _errors.UnavailableError(
                "the client closed its submission queue; the Run %s" % what)
        return _errors.UnavailableError("kerntuned closed the submission queue %s; the Run %s"
                                        % (_CLOSE_REASONS.get(reason, "(%d)" % reason), what))

    # -- completions ----------------------------------------------------------

    def _drain(self):
        """Moves every ready completion to its waiter (self._lock held)."""
        tail = self._load(_CQ_TAIL)
        if tail == self._cq_head:
            return
        self._heard_at = time.monotonic()
        mm = self._mm
        while self._cq_head != tail:
            slot = self._completions + (self._cq_head & self._mask) * COMPLETION_SLOT_BYTES
            self._cq_head = (self._cq_head + 1) & 0xFFFFFFFF
            tag, code, length = _COMPLETION_HEADER.unpack_from(mm, slot)
            waiter = self._waiting.pop(tag, None)
            if waiter is None:
                continue  # its caller gave up waiting
            start = slot + _COMPLETION_HEADER.size
            payload = mm[start:start + min(length, MAX_COMPLETION_PAYLOAD)]
            if code == 0:
                try:
                    waiter.response = pb.RunResponse.FromString(payload)
                except Exception:  # google.protobuf.message.DecodeError
                    waiter.error = _errors.error_for(
                        grpc.StatusCode.DATA_LOSS, "the daemon's completion does not parse")
            else:
                waiter.error = _errors.error_for(
                    _status_code(code), payload.decode("utf-8", errors="replace"))
            waiter.done = True
        self._store(_CQ_HEAD, self._cq_head)
        _full_fence()
        # A daemon that stopped taking descriptors for want of completion
        # slots may sleep: the slots just freed are news for it.
        if self._load(_NEED_WAKEUP) != 0:
            self._ring_doorbell()

    def _wait(self, since, until):
        """Waits (self._lock held, released meanwhile) for a completion past
        cq_head, a close or `until`, at most _MAX_SLEEP_S: spins, then
        yields, while the wait that began at `since` is young, then sleeps
        on the futex; so a long Run costs at most _YIELD_SPIN_S of looking.
        Then, if the daemon has been silent for _PROBE_AFTER_S, asks whether
        it is still there."""
        seen = self._cq_head
        self._lock.release()
        try:
            now = time.monotonic()
            end = now + (_MAX_SLEEP_S if until is None else min(until - now, _MAX_SLEEP_S))
            while self._load(_CQ_TAIL) == seen and not self.closed:
                now = time.monotonic()
                if now >= end or now - since >= _YIELD_SPIN_S:
                    break
                if now - since >= _SPIN_S:
                    os.sched_yield()  # releases the GIL too
            if self._load(_CQ_TAIL) == seen and not self.closed and now < end:
                self._sleep(seen, end - now)
        finally:
            self._lock.acquire()
        if self._load(_CQ_TAIL) == seen and not self.closed:
            self._probe(until)

    def _sleep(self, seen, timeout_s):
        """FUTEX_WAIT on cq_tail while it is `seen`, with client_waiting set."""
        with self._lock:
            self._sleepers += 1
            if self._sleepers == 1:
                self._store(_CLIENT_WAITING, 1)
                # client_waiting before cq_tail is read again: the daemon
                # stores cq_tail and then reads client_waiting, so either it
                # wakes this thread or the re-check sees the completion.
                _full_fence()
        try:
            if self._load(_CQ_TAIL) == seen and not self.closed:
                # Returns at once when cq_tail moved after the re-check.
                self._futex(_CQ_TAIL, _FUTEX_WAIT, seen, timeout_s)
        finally:
            with self._lock:
                self._sleepers -= 1
                if self._sleepers == 0:
                    self._store(_CLIENT_WAITING, 0)

    def gone_quiet(self):
        """Whether the daemon's process has exited, looked at (its pidfd)
        only after _PROBE_AFTER_S without news: a daemon killed while no
        Run waited leaves its queue looking open, and a Run sent into it
        would wait for a probe and fail. Cheap otherwise: one clock read."""
        if self._daemon_pidfd is None or time.monotonic() - self._heard_at < _PROBE_AFTER_S:
            return self._gone is not None
        with self._lock:
            self._heard_at = time.monotonic()  # the next look is as far away
            if self._gone is None and select.select([self._daemon_pidfd], [], [], 0)[0]:
                self._gone = _errors.UnavailableError("its process exited")
        return self._gone is not None

    def _probe(self, until):
        """(self._lock held) After _PROBE_AFTER_S without news from the
        daemon, one waiter checks whether it is still there; when it is
        not, the queue is gone and every waiter fails."""
        now = time.monotonic()
        if self._probing or now - self._heard_at < _PROBE_AFTER_S:
            return
        if self._daemon_pidfd is not None:
            self._heard_at = now  # the next check is as far away
            if select.select([self._daemon_pidfd], [], [], 0)[0]:
                self._gone = _errors.UnavailableError("its process exited")
            return
        if self._health_check is None:
            return
        timeout = _PROBE_TIMEOUT_S if until is None else min(_PROBE_TIMEOUT_S, until - now)
        if timeout <= 0:
            return
        self._probing = True
        self._lock.release()
        try:
            gone = self._daemon_gone(timeout)
        finally:
            self._lock.acquire()
            self._probing = False
        if gone is None:
            self._heard_at = time.monotonic()
        else:
            self._gone = gone

    def _daemon_gone(self, timeout):
        """An UnavailableError when nothing answers at the daemon's socket;
        None when the daemon answered (whatever it said) or did not in time:
        a busy daemon is not a dead one."""
        try:
            self._health_check(b"", timeout=timeout)  # HealthCheckRequest{} is empty
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                return _errors.from_rpc_error(error)
        except ValueError:
            pass  # the client closed its channel meanwhile, and so the queue
        return None

    # -- runs -----------------------------------------------------------------

    def run(self, request, timeout, data=None):
        """Submits `request` (queue_carries; data: it serialized, when the
        caller has it) and waits up to `timeout` seconds (None: no limit)
        for its completion: the daemon's answer with the same code and
        message as a gRPC Run. Returns an Outcome."""
        if data is None:
            data = request.SerializeToString()
        if len(data) > MAX_REQUEST_BYTES:
            return Outcome(False)
        since = time.monotonic()
        until = None if timeout is None else since + timeout
        me = _Waiter()
        with self._lock:
            # A free descriptor slot: at most `entries` Runs unanswered.
            while True:
                if self.closed:
                    return Outcome(False, error=self._closed_error("was not sent"))
                self._drain()
                if ((self._sq_tail - self._cq_head) & 0xFFFFFFFF) < self._entries:
                    break
                if until is not None and time.monotonic() >= until:
                    return Outcome(False, error=_errors.DeadlineExceededError(
                        "the queue stayed full"))
                self._wait(since, until)
            tag = self._next_tag
            self._next_tag += 1
            slot = RINGS_OFFSET + (self._sq_tail & self._mask) * SUBMISSION_SLOT_BYTES
            # The slot first, then sq_tail: x86-64 keeps the two stores in order.
            _SUBMISSION_HEADER.pack_into(self._mm, slot, tag, len(data), 0)
            self._mm[slot + _SUBMISSION_HEADER.size:
                     slot + _SUBMISSION_HEADER.size + len(data)] = data
            self._sq_tail = (self._sq_tail + 1) & 0xFFFFFFFF
            self._store(_SQ_TAIL, self._sq_tail)
            # sq_tail before need_wakeup is read: the daemon sets need_wakeup
            # and then looks at sq_tail, so one of the two sides sees the other.
            _full_fence()
            if not self._waiting:
                self._heard_at = time.monotonic()  # silence counts from here
            self._waiting[tag] = me
            if self._load(_NEED_WAKEUP) != 0:
                self._ring_doorbell()

            since = time.monotonic()
            while True:
                self._drain()
                if me.done:
                    break
                if self.closed:
                    me.error = self._closed_error("was in flight")
                elif until is not None and time.monotonic() >= until:
                    me.error = _errors.DeadlineExceededError("no answer from the daemon in time")
                if me.error is not None:
                    self._waiting.pop(tag, None)
                    break
                self._wait(since, until)
        return Outcome(True, me.response, me.error)
