"""A kerntuned child process for the Python client tests.

Started on a Unix socket in a fresh temp dir, waited for until it serves
(the socket chmodded to 0660, then grpc.health.v1 SERVING), stopped with
SIGTERM (SIGKILL if it lingers) and reaped; its log is kept for failures.
"""

import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time

import grpc

HEALTH_METHOD = "/grpc.health.v1.Health/Check"
SERVING = 1


def kerntuned_binary():
    """$KERNTUNED_BINARY, else a bundle's bin/kerntuned, else None.

    In a bundle this file is <prefix>/python/tests/kerntuned_child.py.
    """
    path = os.environ.get("KERNTUNED_BINARY", "")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "kerntuned"),
                      os.path.join(here, os.pardir, os.pardir, "bin", "kerntuned")):
        if os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    return None


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def health(channel, service="", timeout=5.0, wait_for_ready=False):
    """grpc.health.v1 Check: the ServingStatus number (1 = SERVING).

    Uses grpc_health when installed; Debian's python3-grpcio does not ship
    it, so otherwise the two tiny messages are encoded by hand
    (HealthCheckRequest{string service = 1}, HealthCheckResponse{enum
    status = 1}). Raises grpc.RpcError as a stub would.
    """
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except ImportError:
        pass
    else:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout,
                           wait_for_ready=wait_for_ready)
        return reply.status
    name = service.encode()
    request = b"\x0a" + _varint(len(name)) + name if name else b""
    check = channel.unary_unary(HEALTH_METHOD)
    reply = check(request, timeout=timeout, wait_for_ready=wait_for_ready)
    # Field 1, wire type 0: b"\x08" then a one-byte varint for any real status.
    if len(reply) >= 2 and reply[0] == 0x08:
        return reply[1]
    return 0  # UNKNOWN: proto3 leaves a zero field out


class Daemon:
    """kerntuned --socket=<tmp>/run/kerntune.sock --db=<tmp>/missing.db [--cpu] args...

    socket: another path, e.g. a daemon's that was killed, to restart it there.
    """

    def __init__(self, binary, args=(), cpu=True, socket=None):
        self.dir = tempfile.mkdtemp(prefix="kt_py_")
        self.socket = socket or os.path.join(self.dir, "run", "kerntune.sock")
        self.target = "unix:" + self.socket
        self.log_path = os.path.join(self.dir, "kerntuned.log")
        argv = [binary, "--socket=" + self.socket, "--db=" + os.path.join(self.dir, "missing.db")]
        if cpu:
            argv.append("--cpu")
        argv.extend(args)
        self._log_file = open(self.log_path, "wb")
        self.process = subprocess.Popen(argv, stdout=self._log_file, stderr=subprocess.STDOUT)

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_serving(self, timeout=15.0):
        """Returns once it serves; RuntimeError quoting its log if it exits or stalls."""
        end = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError("kerntuned exited with %s; its log:\n%s"
                                   % (self.process.returncode, self.log()))
            try:
                mode = os.stat(self.socket).st_mode
                if stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660:
                    break
            except FileNotFoundError:
                pass
            if time.monotonic() > end:
                raise RuntimeError("kerntuned did not create its socket within %s s; its log:\n%s"
                                   % (timeout, self.log()))
            time.sleep(0.01)
        with grpc.insecure_channel(self.target) as channel:
            status = health(channel, timeout=max(1.0, end - time.monotonic()),
                            wait_for_ready=True)
        if status != SERVING:
            raise RuntimeError("kerntuned health is %d, not SERVING; its log:\n%s"
                               % (status, self.log()))

    def stop(self, timeout=5.0):
        """SIGTERM, then SIGKILL after `timeout`; reaps; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()
        return self.process.returncode

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
