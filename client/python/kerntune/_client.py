"""The kerntune client: a gRPC channel to kerntuned and the row-wise ops.

Tensors reach the daemon three ways (see README.md):
  - NumPy arrays inline (copied into the request and back);
  - SharedArray (POSIX shared memory) by registered buffer id + offset;
  - PyTorch CUDA tensors by CUDA IPC handle + offset (or a registered
    buffer when the caller registered the allocation).
"""

import collections
import contextlib
import math
import os
import socket
import threading
import time
import weakref

import grpc
import numpy as np

from kerntune import _credentials
from kerntune import _errors
from kerntune import _quant
from kerntune import _queue
from kerntune import _rows
from kerntune import _shared
from kerntune import _torch
from kerntune import _types
from kerntune.v1 import kerntune_pb2 as pb
from kerntune.v1 import kerntune_pb2_grpc as pb_grpc

# Seconds every RPC may take; None = no deadline.
DEFAULT_TIMEOUT_S = 60.0
# After a daemon that could not open a queue for now (down, busy, at its
# queue limit), Runs go over gRPC this long before the next OpenQueue.
_QUEUE_RETRY_S = 1.0
_QUEUE_RETRY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                      grpc.StatusCode.RESOURCE_EXHAUSTED)
# gRPC's reconnect backoff once the daemon went away: the first retry after
# _RECONNECT_INITIAL_MS, each later one 1.6 times later, never more than
# _RECONNECT_MAX_MS apart (gRPC's defaults, 1 s and 120 s, left a client of
# a daemon restarted after a 30 s outage failing for 20 s more). A retry is
# one connect() on the socket (or a TCP handshake): once a second is
# nothing to a daemon.
_RECONNECT_INITIAL_MS = 100
_RECONNECT_MAX_MS = 1000
# Inline tensors above this size are checked against the daemon's limit
# before they are copied into a request (GetStatus once per client); smaller
# ones are sent as they are.
_INLINE_CHECK_BYTES = 1 << 20

OPS = {
    "softmax": pb.OP_SOFTMAX,
    "log_softmax": pb.OP_LOG_SOFTMAX,
    "layer_norm": pb.OP_LAYER_NORM,
    "rms_norm": pb.OP_RMS_NORM,
    "reduce_scale": pb.OP_REDUCE_SCALE,
    "scaled_masked_softmax": pb.OP_SCALED_MASKED_SOFTMAX,
    "add_rms_norm": pb.OP_ADD_RMS_NORM,
    "add_layer_norm": pb.OP_ADD_LAYER_NORM,
    "rms_norm_quant": pb.OP_RMS_NORM_QUANT,
    "layer_norm_quant": pb.OP_LAYER_NORM_QUANT,
    "add_rms_norm_quant": pb.OP_ADD_RMS_NORM_QUANT,
    "add_layer_norm_quant": pb.OP_ADD_LAYER_NORM_QUANT,
}
_OP_NAMES = {number: name for name, number in OPS.items()}
# The norm families (kernels/types.h IsRmsNormFamily, IsLayerNormFamily,
# AddsResidual, QuantizesOutput).
_RMS_NORM_OPS = {pb.OP_RMS_NORM, pb.OP_ADD_RMS_NORM, pb.OP_RMS_NORM_QUANT,
                 pb.OP_ADD_RMS_NORM_QUANT}
_LAYER_NORM_OPS = {pb.OP_LAYER_NORM, pb.OP_ADD_LAYER_NORM, pb.OP_LAYER_NORM_QUANT,
                   pb.OP_ADD_LAYER_NORM_QUANT}
_ADD_OPS = {pb.OP_ADD_RMS_NORM, pb.OP_ADD_LAYER_NORM, pb.OP_ADD_RMS_NORM_QUANT,
            pb.OP_ADD_LAYER_NORM_QUANT}
_QUANT_OPS = {pb.OP_RMS_NORM_QUANT, pb.OP_LAYER_NORM_QUANT, pb.OP_ADD_RMS_NORM_QUANT,
              pb.OP_ADD_LAYER_NORM_QUANT}
# The op a norm method calls: (adds a residual, quantizes) -> op.
_RMS_NORM_OP = {(False, False): "rms_norm", (True, False): "add_rms_norm",
                (False, True): "rms_norm_quant", (True, True): "add_rms_norm_quant"}
_LAYER_NORM_OP = {(False, False): "layer_norm", (True, False): "add_layer_norm",
                  (False, True): "layer_norm_quant", (True, True): "add_layer_norm_quant"}


def _op_arguments(op):
    """The keyword arguments of Client.run `op` takes."""
    if op in (pb.OP_SOFTMAX, pb.OP_LOG_SOFTMAX):
        return {"dim"}
    if op == pb.OP_SCALED_MASKED_SOFTMAX:
        return {"mask", "scale", "causal"}
    takes = set()
    if op in _RMS_NORM_OPS:
        takes |= {"weight", "eps", "return_stats", "weight_offset"}
    if op in _LAYER_NORM_OPS:
        takes |= {"weight", "bias", "eps", "return_stats"}
    if op in _ADD_OPS:
        takes.add("residual")
    if op in _QUANT_OPS:
        takes |= {"quant", "scales"}
    return takes


_OP_ARGUMENTS = {op: _op_arguments(op) for op in OPS.values()}
_DEFAULT_EPS = dict([(op, 1e-5) for op in _LAYER_NORM_OPS] + [(op, 1e-6) for op in _RMS_NORM_OPS])

# One call's validated options (Client.run's keyword arguments).
_Options = collections.namedtuple(
    "_Options", "op dim weight bias eps return_stats mask scale causal time_kernel device "
    "residual weight_offset quant quant_scale scales")
DTYPES = {
    "float32": pb.DTYPE_FLOAT32,
    "float16": pb.DTYPE_FLOAT16,
    "bfloat16": pb.DTYPE_BFLOAT16,
}


def default_socket_path():
    """The daemon's default socket: $XDG_RUNTIME_DIR/kerntune.sock, else /run/kerntune/kerntune.sock."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime_dir:
        return runtime_dir + "/kerntune.sock"
    return "/run/kerntune/kerntune.sock"


def default_target():
    return "unix:" + default_socket_path()


def _normalize_target(target):
    """A gRPC target as kerntune's CLI reads --server: unix:PATH, a socket path
    (starting with /, ./ or ../; relative to the working directory), or host:port."""
    if target is None:
        return default_target()
    target = os.fspath(target) if isinstance(target, os.PathLike) else str(target)
    if target.startswith(("/", "./", "../")):
        return "unix:" + os.path.abspath(target)
    if target.startswith("unix:") and len(target) > len("unix:"):
        return target
    if ":" in target and not target.startswith("unix:"):
        return target  # host:port, or a gRPC URI such as dns:///host:port
    raise _invalid("target=%r: expected 'unix:PATH', a socket path starting with / or ./, "
                   "or 'host:port'" % (target,))


def _socket_path(target):
    """The socket path of a unix: target, else None."""
    if not target.startswith("unix:"):
        return None
    path = target[len("unix:"):]
    return path[2:] if path.startswith("//") else path


# How long _socket_state waits for a server's first bytes.
_SOCKET_ANSWER_S = 0.25


def _socket_state(path):
    """Whether a server answers on the Unix socket `path`: "missing" (no
    file), "refused" (a file nobody answers on: a daemon that exited without
    removing it, or one still starting) or "listening"."""
    if not os.path.exists(path):
        return "missing"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        # A gRPC server speaks first (its HTTP/2 SETTINGS). A connection
        # into the backlog of a daemon that is dying is accepted too, and
        # then closed unanswered.
        probe.settimeout(_SOCKET_ANSWER_S)
        try:
            probe.connect(path)
            if probe.recv(1):
                return "listening"
        except OSError:
            pass
    return "refused"


def _unavailable_hint(target, name_another, state=None):
    """What to do when the channel to `target` is down; name_another: how
    the caller points at another daemon (Client.NAME_ANOTHER_DAEMON);
    state: _socket_state of its socket, when known."""
    path = _socket_path(target)
    if path is None:
        return ("is kerntuned running there with --tcp=%s? (over TCP only inline tensors "
                "travel)" % target.split(":", 1)[-1].lstrip("/"))
    state = state or _socket_state(path)
    if state == "missing":
        where = "" if target == default_target() else " --socket=%s" % path
        return ("no socket at %s: start the daemon (kerntuned%s; add --cpu on a machine "
                "without a GPU), or %s" % (path, where, name_another))
    if state == "refused":
        return ("the socket %s exists but refuses connections: kerntuned exited without "
                "removing it (start it again) or is still starting" % path)
    # The call failed while the daemon was away (or this one just came up):
    # the channel reconnects within _RECONNECT_MAX_MS of its return.
    return ("kerntuned accepts connections at %s again: the call failed while it was away; "
            "calls succeed again within a second" % path)


def _device_selector(device):
    """RunRequest.device from device=: None -> "" (the daemon picks), an int
    ordinal -> "1", a "GPU-..." UUID or unique prefix as given."""
    if device is None:
        return ""
    if isinstance(device, bool) or not isinstance(device, (int, str)):
        raise _invalid("device must be the daemon's device ordinal (int) or a GPU UUID "
                       "(str), not %r" % (device,))
    if isinstance(device, int) and device < 0:
        raise _invalid("device=%d must be >= 0 (an ordinal as Status.devices lists)" % device)
    return str(device)


def _invalid(message):
    return _errors.InvalidArgumentError(message)


def _op_enum(op):
    if isinstance(op, str) and op in OPS:
        return OPS[op]
    raise _invalid("op=%r must be one of %s" % (op, ", ".join(OPS)))


def _check_group_columns(quant, layout):
    """Per-group scales need whole groups in every row."""
    if layout.cols % (quant.group_size or 1):
        raise _invalid("x has %d columns, not a multiple of group_size=%d"
                       % (layout.cols, quant.group_size))


def _dtype_name(dtype):
    """"float32" / "float16" / "bfloat16" from a string, NumPy or torch dtype."""
    torch = _torch.torch_module()
    if isinstance(dtype, str):
        name = dtype[len("torch."):] if dtype.startswith("torch.") else dtype
    elif torch is not None and isinstance(dtype, torch.dtype):
        name = str(dtype)[len("torch."):]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)
    if name not in DTYPES:
        raise _invalid("dtype=%s must be float32, float16 or bfloat16" % (dtype,))
    return name


def _product(sizes):
    result = 1
    for size in sizes:
        result *= int(size)
    return result


class _Layout:
    """How the daemon sees a contiguous tensor: (rows, cols, inner), reduced along cols.

    The reduced axis is `dim` for softmax / log-softmax and the last axis
    for every other op: rows is the product of the sizes before it, cols
    its size, inner the product of the sizes after it. mask_rows is the
    query length of a scaled-masked softmax with a mask or causal (else 0).
    """

    def __init__(self, shape, rows, cols, inner, mask_rows):
        self.shape = tuple(int(n) for n in shape)
        self.rows = rows
        self.cols = cols
        self.inner = inner
        self.mask_rows = mask_rows
        self.elements = rows * cols * inner

    def proto(self):
        shape = pb.Shape(rows=self.rows, cols=self.cols)
        if self.inner != 1:
            shape.inner = self.inner
        return shape

    def row_values(self, values, what, keepdim=False):
        """A per-row output (one float per row) shaped like x without its last axis."""
        if values.size != self.rows:
            raise _errors.InternalError(
                "the daemon returned %d values of %s, want %d (one per row)"
                % (values.size, what, self.rows))
        return values.reshape(self.shape[:-1] + ((1,) if keepdim else ()))


def _layout(shape, options):
    shape = tuple(int(n) for n in shape)
    ndim = len(shape)
    if ndim == 0:
        raise _invalid("x has shape (): kerntune takes tensors of at least one dimension, "
                       "reduced along the last (or, for softmax and log_softmax, `dim`)")
    axis = ndim - 1
    if options.dim is not None:
        dim = int(options.dim)
        if dim < -ndim or dim >= ndim:
            raise _invalid("dim=%d is out of range for x of %d dimensions (shape %s)"
                           % (dim, ndim, shape))
        axis = dim % ndim
    if options.op == pb.OP_SCALED_MASKED_SOFTMAX and ndim < 2:
        raise _invalid("scaled_masked_softmax takes (..., q, k) scores; x has shape %s"
                       % (shape,))
    inner = _product(shape[axis + 1:])
    if inner == 0:
        raise _invalid("x has shape %s: the sizes after dim %d multiply to 0 (no elements)"
                       % (shape, axis))
    mask_rows = 0
    if options.op == pb.OP_SCALED_MASKED_SOFTMAX and (options.mask is not None
                                                      or options.causal):
        mask_rows = shape[-2]
    return _Layout(shape, _product(shape[:axis]), shape[axis], inner, mask_rows)


def _mask_shape(shape, layout):
    """The mask's shape if it is (q, k) with leading sizes of 1, else None."""
    shape = tuple(int(n) for n in shape)
    if (len(shape) >= 2 and shape[-2:] == (layout.mask_rows, layout.cols)
            and _product(shape[:-2]) == 1):
        return shape
    return None


def _host_array(value, what):
    if isinstance(value, np.ndarray):
        return value
    if _torch.is_tensor(value):
        raise _invalid(
            "%s is a torch tensor on %s: kerntune takes torch CUDA tensors (shared by "
            "CUDA IPC) or NumPy arrays; pass a CPU tensor as %s.numpy()"
            % (what, value.device, what))
    return np.asarray(value)


# NumPy's dtypes the daemon takes, by dtype (dtype.name is slow); a
# bfloat16 (ml_dtypes) is found by its name.
_HOST_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}


def _host_dtype(array, what):
    name = _HOST_DTYPES.get(array.dtype) or array.dtype.name
    if name not in DTYPES:
        raise _invalid(
            "%s has dtype %s: kerntune takes float32, float16 or bfloat16 "
            "(bfloat16 needs a NumPy bfloat16 dtype such as ml_dtypes.bfloat16)"
            % (what, array.dtype))
    if array.dtype.byteorder == ">":
        raise _invalid("%s is big-endian; the daemon reads little-endian data" % what)
    return name


def _host_mask(mask, dtype, layout):
    """A scaled-masked softmax's additive mask as a (q, k) array of x's dtype."""
    if mask is None:
        return None
    array = _host_array(mask, "mask")
    if array.dtype != dtype:
        raise _invalid("mask has dtype %s, want %s like x (an additive mask: 0 keeps, "
                       "-inf masks out)" % (array.dtype, dtype))
    if _mask_shape(array.shape, layout) is None:
        raise _invalid("mask has shape %s, want (q, k) = %s for x of shape %s"
                       % (tuple(array.shape), (layout.mask_rows, layout.cols), layout.shape))
    return array.reshape(layout.mask_rows, layout.cols)


def _host_param(value, what, dtype, cols):
    if value is None:
        return None
    array = _host_array(value, what)
    if array.dtype != dtype:
        raise _invalid("%s has dtype %s, want %s like x" % (what, array.dtype, dtype))
    if array.shape != (cols,):
        raise _invalid("%s has shape %s, want (%d,): one value per column"
                       % (what, tuple(array.shape), cols))
    return array


# At most this many prepared calls per client (Client._prepared); then the
# memo starts afresh.
_MAX_PREPARED = 256
_KEY_SCALARS = (bool, int, float, str, type(None))


def _memory_key(t):
    """What pins down an array's or a CUDA tensor's memory and layout: (id,
    address, shape, strides, dtype); () for None; None when `t` is neither
    (its request is built anew each call)."""
    if t is None:
        return ()
    if isinstance(t, np.ndarray):
        return (id(t), t.__array_interface__["data"][0], t.shape, t.strides, t.dtype,
                t.flags.writeable)
    if _torch.is_tensor(t) and t.is_cuda:
        return (id(t), t.data_ptr(), t.shape, t.stride(), t.dtype)
    return None


def _prepared_key(op, arrays, scalars):
    """The memo key of a call: its op, its arrays' _memory_key and its other
    arguments, or None when one of them is not a plain value (a tensor
    passed as a scale could change between calls)."""
    keys = tuple(_memory_key(t) for t in arrays)
    if None in keys or not all(isinstance(v, _KEY_SCALARS) for v in scalars):
        return None
    return (op, keys, scalars)


class _Prepared:
    """A call's request, built and checked once, for the same call again:
    the same op and arguments on the same objects, whose memory and layout
    have not changed (_prepared_key), while no registration changed
    (generation) and the objects live (refs; an id alone could be reused)."""

    __slots__ = ("generation", "refs", "request", "data", "device")

    def __init__(self, generation, arrays, request, device):
        self.generation = generation
        self.refs = tuple(None if t is None else weakref.ref(t) for t in arrays)
        self.request = request
        self.data = request.SerializeToString() if request is not None else None
        self.device = device  # a CUDA tensor's torch.device, None for NumPy

    def holds(self, arrays):
        return all((ref is None and t is None) or (ref is not None and ref() is t)
                   for ref, t in zip(self.refs, arrays))


def _cuda_outputs(torch, options, layout, x, out, cuda_stream):
    """(out, mean, inv_std, row_scale): `out`, else a new tensor like x (of
    the codes' dtype for a quantizing op), and the per-row float32 outputs
    the call returns (else None); row_scale: ReduceScale's scales, or a
    dynamic quantization's (`options.scales` when given)."""
    stats = options.return_stats
    quant = options.quant
    dynamic = quant is not None and quant.dynamic
    new_scales = options.op == pb.OP_REDUCE_SCALE or (dynamic and options.scales is None)
    if out is not None and not stats and not new_scales:
        # nothing new: the contexts cost microseconds
        return out, None, None, options.scales if dynamic else None
    mean = inv_std = row_scale = None
    # New tensors belong to x's device and the call's stream (the caching
    # allocator's stream): device= places them, and the stream context is
    # entered only for a stream other than the current one (None), as it
    # costs microseconds.
    with contextlib.nullcontext() if cuda_stream is None else torch.cuda.stream(cuda_stream):
        if out is None:
            out = torch.empty(x.shape, device=x.device,
                              dtype=x.dtype if quant is None else quant.torch_dtype(torch))
        rows = (layout.rows,)
        if stats:
            inv_std = torch.empty(rows, dtype=torch.float32, device=x.device)
            if options.op in _LAYER_NORM_OPS:
                mean = torch.empty(rows, dtype=torch.float32, device=x.device)
        if options.op == pb.OP_REDUCE_SCALE:
            row_scale = torch.empty(rows, dtype=torch.float32, device=x.device)
        elif dynamic:
            row_scale = options.scales
            if row_scale is None:
                row_scale = torch.empty(tuple(x.shape[:-1]) + (quant.scales_per_row(layout.cols),),
                                        dtype=torch.float32, device=x.device)
    return out, mean, inv_std, row_scale


class Buffer:
    """A registration of client memory with the daemon (Client.register).

    Attributes: id (the daemon's buffer id), kind ("host_shm" or "cuda_ipc"),
    size_bytes, label, info (BufferInfo at registration), closed. The memory
    stays registered until close() (or the end of a `with` block), the
    idle lease ends, or this process exits. While registered, runs on arrays
    or tensors inside this memory refer to it by id + offset.
    """

    def __init__(self, client, info, key, keep, auto):
        self._client = client
        self.info = info
        self.id = info.buffer_id
        self.kind = info.kind
        self.size_bytes = info.size_bytes
        self.label = info.label
        self.auto = auto
        self.closed = False
        self._key = key
        self._keep = keep

    def close(self):
        """Unregisters (idempotent; a lease that already ended is not an error)."""
        if self.closed:
            return
        self.closed = True
        self._client._forget(self)
        self._keep = None
        if self._client.closed:
            return
        try:
            self._client.unregister(self.id)
        except _errors.NotFoundError:
            pass

    unregister = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<kerntune.Buffer %s %s %d bytes%s%s>" % (
            self.id, self.kind, self.size_bytes,
            " label=%r" % self.label if self.label else "",
            " closed" if self.closed else "")


class Client:
    """A connection to kerntuned.

    target: "unix:/path/to.sock", an absolute socket path, or "host:port"
    (TCP: inline tensors only). None: the daemon's default socket
    ($XDG_RUNTIME_DIR/kerntune.sock, else /run/kerntune/kerntune.sock).
    timeout: seconds per call (None: no deadline).
    device_map: {torch device index: daemon device ordinal}, to override the
    default: the daemon's device with the same UUID (GetStatus), so processes
    with different CUDA_VISIBLE_DEVICES agree; the same index when the daemon
    or torch does not report UUIDs.
    root_certificates, certificate_chain, private_key: PEM (bytes or str) of
    the CAs that sign a TCP daemon's certificate (TLS; the certificate must
    name the target's host), and this client's certificate and key for a
    daemon with --tls_client_ca. token: the bearer token of a daemon with
    --token_file, sent with every call (TLS only).

    use_queue: runs whose tensors are all in client memory (registered
    shared arrays, CUDA tensors) and that return nothing inline go through
    the daemon's shared-memory submission queue when it offers one (a Unix
    socket target; like the C++ DaemonClientOptions.use_queue), else over
    gRPC; False: always gRPC. Results and errors are the same either way.

    Thread-safe. Create it after any fork(): gRPC channels do not survive one.
    """

    # How an UnavailableError tells the caller to reach another daemon;
    # `python3 -m kerntune` says --server instead.
    NAME_ANOTHER_DAEMON = "pass Client(target=...) with the --socket it listens on"

    def __init__(self, target=None, timeout=DEFAULT_TIMEOUT_S, *, device_map=None,
                 options=None, root_certificates=None, certificate_chain=None,
                 private_key=None, token=None, use_queue=True):
        self.target = _normalize_target(target)
        self.timeout = timeout
        self.use_queue = (bool(use_queue) and _queue.QUEUE_SUPPORTED
                          and _socket_path(self.target) is not None)
        # The submission queue, opened on the first run it can carry and
        # reopened after the daemon closed it, not before _queue_retry_at
        # (monotonic; inf once a daemon without queues refused one).
        self._queue_lock = threading.Lock()
        self._queue = None
        self._queue_retry_at = 0.0
        self._device_map = dict(device_map or {})
        # torch device index -> daemon ordinal found by UUID, once per index.
        self._found_ordinals = {}
        channel_options = [
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
            ("grpc.initial_reconnect_backoff_ms", _RECONNECT_INITIAL_MS),
            ("grpc.max_reconnect_backoff_ms", _RECONNECT_MAX_MS),
        ]
        channel_options.extend(options or [])
        self._channel = _credentials.channel(self.target, channel_options, root_certificates,
                                             certificate_chain, private_key, token)
        self._stub = pb_grpc.KernTuneStub(self._channel)
        # How a queue's waiting Run asks whether a silent daemon is still there.
        self._health_check = self._channel.unary_unary(_queue.HEALTH_CHECK_METHOD)
        self._lock = threading.RLock()
        # Buffers runs may use, by memory: ("shm", name) or ("cuda", ordinal, handle).
        self._registry = {}
        # Counts changes of _registry: a prepared request from before one
        # may name a buffer that is gone, or miss one that is new.
        self._registry_generation = 0
        # _prepared_key -> _Prepared: calls whose request is reused as it is.
        self._prepared = {}
        # Every open Buffer, so close() can unregister them all.
        self._open = set()
        # Ids of automatic registrations whose shared memory is gone.
        self._dead = collections.deque()
        # Stream-mode runs: (done event, objects kept alive until it fires).
        self._pending = collections.deque()
        # GetStatus.max_request_bytes, asked for at the first large inline tensor.
        self._max_request_bytes = None
        self.closed = False

    # -- connection ---------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Waits for stream-mode runs, unregisters this client's buffers, closes the channel."""
        if self.closed:
            return
        self._reap_pending(wait=True)
        self._drain_dead()
        with self._lock:
            buffers = list(self._open)
        for buffer in buffers:
            try:
                buffer.close()
            except _errors.KernTuneError:
                pass
        with self._queue_lock:
            queue, self._queue = self._queue, None
            self._queue_retry_at = math.inf
        if queue is not None:
            queue.close()
        self.closed = True
        self._channel.close()

    def wait_ready(self, timeout=10.0):
        """Blocks until the channel connects; UnavailableError after `timeout` seconds."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise _errors.UnavailableError(
                "kerntuned at %s did not answer within %s s" % (self.target, timeout)) from None

    def _call(self, method, request):
        if self.closed:
            raise _errors.FailedPreconditionError("the kerntune client is closed")
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as error:
            converted = _errors.from_rpc_error(error)
        state = self._socket_state_after(converted)
        if state == "listening" and self._reconnected():
            try:
                return method(request, timeout=self.timeout)
            except grpc.RpcError as error:
                converted = _errors.from_rpc_error(error)
        # Raised outside the handler, so no "during handling" chain.
        self._raise(converted, state)

    def _socket_state_after(self, converted):
        """_socket_state of this client's socket after a connection failure
        (not the daemon's own UNAVAILABLE); None otherwise."""
        path = _socket_path(self.target)
        if (path is None or not isinstance(converted, _errors.UnavailableError)
                or converted.message.startswith(_queue.EXPLAINED_UNAVAILABLE)):
            return None
        return _socket_state(path)

    def _reconnected(self):
        """Whether the channel connects within twice _RECONNECT_MAX_MS: the
        socket accepts connections again (a daemon came back), gRPC retries
        within _RECONNECT_MAX_MS, and a call that failed at once is worth
        one more try then rather than an error."""
        wait = 2 * _RECONNECT_MAX_MS / 1000
        try:
            grpc.channel_ready_future(self._channel).result(
                timeout=wait if self.timeout is None else min(self.timeout, wait))
            return True
        except grpc.FutureTimeoutError:
            return False

    def _raise(self, converted, state=None):
        """Raises a call's KernTuneError; a connection failure says what to
        do next. state: _socket_state, when the caller looked."""
        if (isinstance(converted, _errors.UnavailableError)
                and not converted.message.startswith(_queue.EXPLAINED_UNAVAILABLE)):
            hint = _unavailable_hint(self.target, self.NAME_ANOTHER_DAEMON, state)
            converted = _errors.UnavailableError(
                "%s: %s (%s)" % (self.target, hint, converted.message))
        raise converted

    def _queue_for(self, request, carried=False):
        """The submission queue to send `request` through, or None: gRPC then.
        carried: queue_carries(request) is known to hold."""
        if not self.use_queue or not (carried or _queue.queue_carries(request)):
            return None
        queue = self._queue
        if (queue is not None and queue.pid == os.getpid() and not queue.closed
                and not queue.gone_quiet()):
            return queue  # the common case, without the lock
        with self._queue_lock:
            if self._queue is not None and self._queue.pid != os.getpid():
                return None  # a forked child: the queue is its parent's
            if self._queue is not None and self._queue.closed:
                self._queue = None  # closed by the daemon, or the daemon died
            if (self._queue is None and not self.closed
                    and time.monotonic() >= self._queue_retry_at):
                timeout = 10.0 if self.timeout is None else min(self.timeout, 10.0)
                try:
                    self._queue = _queue.RunQueue.open(self._stub, timeout,
                                                       self._health_check,
                                                       _socket_path(self.target))
                except _errors.KernTuneError as error:
                    # gRPC for now, or for good from a daemon without queues
                    # (or that refuses one, as over TCP).
                    self._queue_retry_at = (time.monotonic() + _QUEUE_RETRY_S
                                            if error.code in _QUEUE_RETRY_CODES else math.inf)
            return self._queue

    def _run_request(self, request, data=None):
        """Run: through the submission queue when it carries `request`, else
        gRPC. data: the request serialized, from a call that the queue
        carries (a _Prepared's)."""
        if self.closed:
            raise _errors.FailedPreconditionError("the kerntune client is closed")
        queue = self._queue_for(request, carried=data is not None)
        if queue is not None:
            outcome = queue.run(request, self.timeout, data)
            if outcome.submitted or (outcome.error is not None and
                                     not isinstance(outcome.error, _errors.UnavailableError)):
                if outcome.error is not None:
                    self._raise(outcome.error)
                return outcome.response
            # Never reached the daemon (too large for a descriptor, or the
            # queue closed): gRPC is as good.
        return self._call(self._stub.Run, request)

    def _queue_id(self):
        """The open submission queue's id, or None (for tests)."""
        with self._queue_lock:
            return None if self._queue is None else self._queue.id

    def _inline_limit(self):
        """The daemon's largest inline tensor in bytes (GetStatus, once); 0 when unknown."""
        if self._max_request_bytes is None:
            try:
                self._max_request_bytes = self.status().max_request_bytes
            except _errors.UnimplementedError:
                self._max_request_bytes = 0  # an older daemon: it will say
        return self._max_request_bytes

    def _check_inline(self, what, layout, dtype):
        """Refuses, before any copy, a tensor over the daemon's inline limit."""
        nbytes = layout.elements * dtype.itemsize
        if nbytes <= _INLINE_CHECK_BYTES:
            return
        limit = self._inline_limit()
        if limit and nbytes > limit:
            raise _errors.ResourceExhaustedError(
                "%s of shape %s %s is %d bytes, over the daemon's limit of %d bytes for inline "
                "tensors (kerntuned --max_request_bytes): put it in shared memory "
                "(kerntune.shared_array(x), or kerntune.shared_empty(shape, dtype) to fill in "
                "place), which has no such limit" % (what, layout.shape, dtype, nbytes, limit))

    # -- queries ------------------------------------------------------------

    def status(self):
        """GetStatus as a kerntune.Status."""
        return _types.Status.from_proto(self._call(self._stub.GetStatus, pb.GetStatusRequest()))

    def get_config(self, op, dtype, rows, cols, inner=1, *, device=None):
        """The config the daemon would launch for a problem (a kerntune.ConfigChoice).

        inner > 1: softmax / log_softmax along the middle axis of (rows, cols, inner).
        device: whose configs (a node may mix GPU models), as for run();
        None: the daemon's first device.
        """
        shape = pb.Shape(rows=int(rows), cols=int(cols))
        if int(inner) != 1:
            shape.inner = int(inner)
        request = pb.GetConfigRequest(op=_op_enum(op), dtype=DTYPES[_dtype_name(dtype)],
                                      shape=shape, device=_device_selector(device))
        return _types.ConfigChoice.from_proto(self._call(self._stub.GetConfig, request).config)

    def list_configs(self, *, device=None):
        """The tuned entries the daemon has loaded (a kerntune.ConfigList) for a
        device's GPU model (as get_config's device)."""
        response = self._call(self._stub.ListConfigs,
                              pb.ListConfigsRequest(device=_device_selector(device)))
        return _types.ConfigList(
            sku=_types.GpuSku.from_proto(response.sku),
            entries=[_types.TunedEntry.from_proto(e) for e in response.entries])

    def list_buffers(self):
        """This process's registrations (a list of kerntune.BufferInfo)."""
        response = self._call(self._stub.ListBuffers, pb.ListBuffersRequest())
        return [_types.BufferInfo.from_proto(b) for b in response.buffers]

    # -- buffers ------------------------------------------------------------

    def register(self, obj, ttl=0, label=""):
        """Registers the memory of a SharedArray or a torch CUDA tensor; returns a Buffer.

        A SharedArray registers its whole shared-memory object; a CUDA tensor
        the whole allocation (caching-allocator segment) it lives in, and the
        Buffer keeps the tensor alive. ttl: idle lease in seconds (0 = the
        daemon's default). Runs on arrays or tensors inside registered memory
        then refer to it by id + offset.
        """
        if isinstance(obj, np.ndarray):
            segment = getattr(obj, "_kt_segment", None)
            if segment is None:
                raise _invalid(
                    "only a kerntune.SharedArray (shared_empty, shared_array) can be "
                    "registered; other NumPy arrays are sent inline")
            request = pb.RegisterBufferRequest(
                host_shm=pb.HostSharedMemory(name=segment.name),
                ttl_seconds=int(ttl), label=label)
            key = ("shm", segment.name)
        elif _torch.is_tensor(obj) and obj.is_cuda:
            if obj.numel() == 0:
                raise _invalid("the tensor has no elements (no memory to register)")
            device, handle, _ = _torch.tensor_location(obj)
            ordinal = self._ordinal(device)
            request = pb.RegisterBufferRequest(
                cuda_ipc=pb.CudaIpcMemory(handle=handle, device_ordinal=ordinal),
                ttl_seconds=int(ttl), label=label)
            key = ("cuda", ordinal, handle)
        else:
            raise _invalid("register() takes a kerntune.SharedArray or a torch CUDA "
                           "tensor, not %s" % type(obj).__name__)
        response = self._call(self._stub.RegisterBuffer, request)
        buffer = Buffer(self, _types.BufferInfo.from_proto(response.buffer), key, obj,
                        auto=False)
        with self._lock:
            previous = self._registry.get(key)
            self._registry[key] = buffer
            self._registry_generation += 1
            self._open.add(buffer)
        if previous is not None and previous.auto:
            previous.close()
        return buffer

    def unregister(self, buffer):
        """Ends a registration, given a Buffer or a buffer id."""
        if isinstance(buffer, Buffer):
            buffer.close()
            return
        self._call(self._stub.UnregisterBuffer, pb.UnregisterBufferRequest(buffer_id=buffer))

    def _forget(self, buffer):
        with self._lock:
            if self._registry.get(buffer._key) is buffer:
                del self._registry[buffer._key]
                self._registry_generation += 1
            self._open.discard(buffer)

    def _segment_buffer(self, segment):
        """The registration of a SharedArray's memory, made on first use."""
        key = ("shm", segment.name)
        with self._lock:
            buffer = self._registry.get(key)
        if buffer is not None and not buffer.closed:
            return buffer
        request = pb.RegisterBufferRequest(host_shm=pb.HostSharedMemory(name=segment.name),
                                           label="kerntune-python")
        response = self._call(self._stub.RegisterBuffer, request)
        info = _types.BufferInfo.from_proto(response.buffer)
        dead = self._dead
        # The registration must not keep the memory alive: when the last
        # array of it goes, the id is queued and unregistered by a later call.
        keep = weakref.ref(segment, lambda _ref, buffer_id=info.buffer_id: dead.append(buffer_id))
        buffer = Buffer(self, info, key, keep, auto=True)
        with self._lock:
            self._registry[key] = buffer
            self._registry_generation += 1
            self._open.add(buffer)
        return buffer

    def _drain_dead(self):
        while self._dead:
            buffer_id = self._dead.popleft()
            with self._lock:
                gone = [b for b in self._open if b.id == buffer_id]
            for buffer in gone:
                buffer.closed = True
                self._forget(buffer)
            try:
                self._stub.UnregisterBuffer(pb.UnregisterBufferRequest(buffer_id=buffer_id),
                                            timeout=self.timeout)
            except grpc.RpcError:
                pass

    def _ordinal(self, device_index):
        if device_index in self._device_map:
            return int(self._device_map[device_index])
        with self._lock:
            found = self._found_ordinals.get(device_index)
        if found is not None:
            return found
        uuid = _torch.device_uuid(device_index)
        found = device_index
        if uuid:
            found = _types.daemon_ordinal_for_uuid(self.status().devices, uuid, device_index)
        with self._lock:
            self._found_ordinals[device_index] = found
        return found

    # -- ops ----------------------------------------------------------------

    def softmax(self, x, out=None, *, dim=-1, stream=None, device=None):
        """Softmax of x along `dim` (default the last); returns the result (`out` when given)."""
        return self._run("softmax", x, out, dim=dim, stream=stream, device=device).output

    def log_softmax(self, x, out=None, *, dim=-1, stream=None, device=None):
        """Log-softmax of x along `dim` (default the last); returns the result."""
        return self._run("log_softmax", x, out, dim=dim, stream=stream, device=device).output

    def layer_norm(self, x, weight=None, bias=None, eps=1e-5, return_stats=False, out=None,
                   *, quant=None, scales=None, stream=None, device=None):
        """LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias.

        weight and bias: optional, x.shape[-1] values each, x's dtype.
        quant: a kerntune.Quant: the output is quantized (layer_norm_quant)
        and (codes, scales) returned, scales as for rms_norm. With
        return_stats, (y, mean, inv_std) (or (codes, scales, mean, inv_std)),
        the statistics float32 of shape x.shape[:-1]; else y.
        """
        result = self._run(_LAYER_NORM_OP[False, quant is not None], x, out, weight=weight,
                           bias=bias, eps=eps, return_stats=return_stats, quant=quant,
                           scales=scales, stream=stream, device=device)
        return self._norm_result(result, quant, return_stats, (result.mean, result.inv_std))

    def add_layer_norm(self, x, residual, weight=None, bias=None, eps=1e-5, return_stats=False,
                       out=None, *, quant=None, scales=None, stream=None, device=None):
        """The residual add before a LayerNorm: r = x + residual, rounded to
        x's dtype, is written back to `residual`, then layer_norm(r) returned
        as layer_norm returns it. residual: x's shape and dtype, in client
        memory (a shared array, or a CUDA tensor), written in place."""
        result = self._run(_LAYER_NORM_OP[True, quant is not None], x, out, weight=weight,
                           bias=bias, eps=eps, return_stats=return_stats, residual=residual,
                           quant=quant, scales=scales, stream=stream, device=device)
        return self._norm_result(result, quant, return_stats, (result.mean, result.inv_std))

    def rms_norm(self, x, weight=None, eps=1e-6, return_stats=False, out=None, *,
                 weight_offset=0.0, quant=None, scales=None, stream=None, device=None):
        """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * (weight_offset + weight).

        weight: optional, x.shape[-1] values of x's dtype. weight_offset:
        Gemma's RMSNorm uses 1 (needs a weight). quant: a kerntune.Quant:
        the output is quantized (rms_norm_quant) and (codes, scales)
        returned: codes of x's shape (torch.float8_e4m3fn / float8_e5m2 /
        int8 for CUDA tensors; uint8 fp8 bits or int8 for NumPy), scales
        float32 of shape x.shape[:-1] + (1,) per row or + (cols /
        group_size,) per group (`scales` when given), or the static scale.
        With return_stats, (y, inv_rms) (or (codes, scales, inv_rms)),
        inv_rms = 1/sqrt(mean(x^2) + eps) float32 of shape x.shape[:-1];
        else y.
        """
        result = self._run(_RMS_NORM_OP[False, quant is not None], x, out, weight=weight,
                           eps=eps, return_stats=return_stats, weight_offset=weight_offset,
                           quant=quant, scales=scales, stream=stream, device=device)
        return self._norm_result(result, quant, return_stats, (result.inv_std,))

    def add_rms_norm(self, x, residual, weight=None, eps=1e-6, return_stats=False, out=None, *,
                     weight_offset=0.0, quant=None, scales=None, stream=None, device=None):
        """The residual add before an RMSNorm (vLLM's fused_add_rms_norm): r =
        x + residual, rounded to x's dtype, is written back to `residual`,
        then rms_norm(r) returned as rms_norm returns it. residual: x's shape
        and dtype, in client memory (a shared array, or a CUDA tensor),
        written in place; out=x writes y over x."""
        result = self._run(_RMS_NORM_OP[True, quant is not None], x, out, weight=weight, eps=eps,
                           return_stats=return_stats, residual=residual,
                           weight_offset=weight_offset, quant=quant, scales=scales,
                           stream=stream, device=device)
        return self._norm_result(result, quant, return_stats, (result.inv_std,))

    @staticmethod
    def _norm_result(result, quant, return_stats, stats):
        """What a norm method returns: y, or (codes, scales), then the stats."""
        head = (result.output,)
        if quant is not None:
            head += (result.row_scale if quant.dynamic else quant.scale,)
        if return_stats:
            return head + stats
        return head if len(head) > 1 else head[0]
    def reduce_scale(self, x, out=None, *, stream=None, device=None):
        """Per-row quantization scale: returns (y, scale), y = x / max|x| over the last axis.

        scale is float32 of shape x.shape[:-1] + (1,), each row's max|x|, so
        that x == y * scale; an all-zero row gives zeros and scale 0.
        """
        result = self._run("reduce_scale", x, out, stream=stream, device=device)
        return result.output, result.row_scale

    def scaled_masked_softmax(self, x, mask=None, scale=None, causal=False, out=None, *,
                              stream=None, device=None):
        """Attention's softmax(x * scale + mask) over the last axis of x (..., q, k).

        x: (batch, heads, q, k) scores, or any (..., q, k). mask: optional
        additive mask of (q, k) values in x's dtype (leading dimensions of
        size 1 allowed), shared by every batch and head; -inf masks out.
        scale: multiplies x first (None: 1). causal: column c of query q is
        masked when c > q, as PyTorch's is_causal=True. Returns the result.
        """
        return self._run("scaled_masked_softmax", x, out, mask=mask, scale=scale, causal=causal,
                         stream=stream, device=device).output

    def run(self, op, x, out=None, *, dim=None, weight=None, bias=None, eps=None,
            return_stats=False, mask=None, scale=None, causal=False, residual=None,
            weight_offset=None, quant=None, scales=None, stream=None, time_kernel=False,
            device=None):
        """One op on one tensor; returns a kerntune.RunResult (output, per-row outputs,
        config, time).

        op: any name of kerntune.OPS. dim: softmax and log_softmax (default
        the last axis). weight: the norms; bias: the layer_norm family.
        eps defaults to 1e-5 (layer_norm family) or 1e-6 (rms_norm family).
        return_stats: the layer_norm family's mean and inv_std, the rms_norm
        family's inv_rms (in inv_std). mask, scale, causal:
        scaled_masked_softmax. residual: the add_* ops (read and written
        back). weight_offset: the rms_norm family. quant, scales: the *_quant
        ops (a kerntune.Quant; where the dynamic scales go, else new ones in
        RunResult.row_scale). stream: torch CUDA tensors only; see
        README.md. time_kernel: have a GPU daemon time the kernel with CUDA
        events (RunResult.kernel_time_us; a few microseconds more per call).
        device: the daemon's GPU for NumPy arrays (inline or shared memory):
        its ordinal in Status.devices (int), its "GPU-..." UUID or a unique
        prefix; None: the least-loaded one. CUDA tensors run on their own GPU
        (a device naming another is refused). RunResult.device_ordinal /
        device_uuid say which device ran it.
        """
        return self._run(op, x, out, dim=dim, weight=weight, bias=bias, eps=eps,
                         return_stats=return_stats, mask=mask, scale=scale, causal=causal,
                         residual=residual, weight_offset=weight_offset, quant=quant,
                         scales=scales, stream=stream, time_kernel=time_kernel, device=device,
                         with_config=True)

    def _run(self, op, x, out=None, *, dim=None, weight=None, bias=None, eps=None,
             return_stats=False, mask=None, scale=None, causal=False, residual=None,
             weight_offset=None, quant=None, scales=None, stream=None, time_kernel=False,
             device=None, with_config=False):
        """run(); with_config=False (the ops' methods, which return only
        tensors) leaves RunResult.config None instead of converting it.

        A call into `out` that returns nothing else (no stream, stats or
        new scales) keeps its request when every tensor is in client memory
        (_Prepared): the same call again skips the checks and the building,
        the client's largest cost per small call."""
        self._drain_dead()
        if self._pending:
            self._reap_pending(wait=False)
        if quant is not None and not isinstance(quant, _quant.Quant):
            raise _invalid("quant must be a kerntune.Quant (e.g. kerntune.Quant(\"fp8_e4m3\", "
                           "\"per_row\")), not %s" % type(quant).__name__)
        quant_scale = quant.scale_tensor if quant is not None else None
        arrays = (x, out, weight, bias, mask, residual, scales, quant_scale)
        key = None
        dynamic = quant is not None and quant.dynamic
        if (out is not None and stream is None and not return_stats and op != "reduce_scale"
                and (not dynamic or scales is not None)):
            key = _prepared_key(op, arrays, (dim, eps, scale, causal, weight_offset, time_kernel,
                                             device) + (quant.key() if quant else (None,)))
        if key is not None:
            prepared = self._prepared.get(key)
            if (prepared is not None and prepared.generation == self._registry_generation
                    and prepared.holds(arrays)):
                response = self._run_prepared(prepared, key)
                if response is not None:
                    return self._result(
                        _types.RunResult(out, None, None, row_scale=scales if dynamic else None),
                        response, with_config)
        op_enum = _op_enum(op)
        name = _OP_NAMES[op_enum]
        takes = _OP_ARGUMENTS[op_enum]
        given = {"dim": dim is not None, "weight": weight is not None,
                 "bias": bias is not None, "eps": eps is not None,
                 "return_stats": bool(return_stats), "mask": mask is not None,
                 "scale": scale is not None, "causal": bool(causal),
                 "residual": residual is not None, "weight_offset": weight_offset is not None,
                 "quant": quant is not None, "scales": scales is not None}
        wrong = [arg for arg, is_given in given.items() if is_given and arg not in takes]
        if wrong:
            raise _invalid("%s does not take %s (%s takes %s)" % (
                name, ", ".join(wrong), name, ", ".join(sorted(takes)) or "no options"))
        if op_enum in _ADD_OPS and residual is None:
            raise _invalid("%s needs residual= (x's shape and dtype, in client memory: it is "
                           "read and r = x + residual written back)" % name)
        if op_enum in _QUANT_OPS:
            if quant is None:
                raise _invalid("%s needs quant= (a kerntune.Quant, e.g. "
                               "kerntune.Quant(\"fp8_e4m3\", \"per_row\"))" % name)
            if scales is not None and not quant.dynamic:
                raise _invalid("scales= is where dynamic scales go; scale_mode=static has none "
                               "(its scale is Quant.scale)")
        if weight_offset is not None:
            weight_offset = float(weight_offset)
            if not math.isfinite(weight_offset):
                raise _invalid("weight_offset=%r must be finite" % weight_offset)
            if weight_offset != 0 and weight is None:
                raise _invalid("weight_offset=%r needs a weight: y = x_hat * (weight_offset + "
                               "weight)" % weight_offset)
        if eps is None and op_enum in _DEFAULT_EPS:
            eps = _DEFAULT_EPS[op_enum]
        if scale is not None:
            scale = float(scale)
        options = _Options(op_enum, dim, weight, bias, eps, bool(return_stats), mask, scale,
                           bool(causal), bool(time_kernel), _device_selector(device), residual,
                           weight_offset, quant, quant_scale, scales)
        if _torch.is_tensor(x) and x.is_cuda:
            response, result, reusable = self._run_cuda(options, x, out, stream)
            device_of_x = x.device
        elif stream is not None:
            raise _invalid("stream= orders a call on a CUDA stream: it takes torch CUDA tensors")
        else:
            response, result, reusable = self._run_host(options, x, out)
            device_of_x = None
        if key is not None and reusable is not None:
            if len(self._prepared) >= _MAX_PREPARED:
                self._prepared.clear()
            # The generation after the build, which may have registered the
            # memory itself. (A registration another thread changed meanwhile
            # costs at most a refused send: _run_prepared builds anew.)
            self._prepared[key] = _Prepared(self._registry_generation, arrays, reusable,
                                            device_of_x)
        return self._result(result, response, with_config)

    def _run_prepared(self, prepared, key):
        """Sends a prepared call's request; None when the daemon no longer
        knows a buffer it names (a lease ended): then the call is built anew."""
        if prepared.device is not None:
            # Inputs written by queued work must be in memory before the daemon reads.
            _torch.synchronize_current_stream(prepared.device)
        try:
            return self._run_request(prepared.request, prepared.data)
        except _errors.NotFoundError:
            self._prepared.pop(key, None)
            return None

    @staticmethod
    def _result(result, response, with_config):
        """`result` with the rest of what run() returns: the config and where it ran."""
        if with_config:
            result.config = _types.ConfigChoice.from_proto(response.config)
        result.kernel_time_us = response.kernel_time_us
        result.backend = response.backend
        result.device_ordinal = response.device_ordinal
        result.device_uuid = response.device_uuid
        return result

    def _params(self, request, options, layout, ref):
        """Fills the op's parameter message; `ref(field, tensor)` points a
        TensorRef (the static scale's too). The residual (row strides) and
        the outputs (dynamic scales, statistics) are each path's."""
        op_enum = options.op
        params = None
        if op_enum in _LAYER_NORM_OPS:
            params = request.layer_norm
            params.epsilon = float(options.eps)
            if options.weight is not None:
                ref(params.gamma, options.weight)
            if options.bias is not None:
                ref(params.beta, options.bias)
        elif op_enum in _RMS_NORM_OPS:
            params = request.rms_norm
            params.epsilon = float(options.eps)
            if options.weight is not None:
                ref(params.weight, options.weight)
            if options.weight_offset:
                params.weight_offset = options.weight_offset
        if params is not None:
            if options.quant is not None:
                options.quant.fill(params.quant)
                if not options.quant.dynamic:
                    ref(params.quant.scale, options.quant_scale)
        elif op_enum == pb.OP_REDUCE_SCALE:
            request.reduce_scale.row_scale.return_inline = True
        elif op_enum == pb.OP_SCALED_MASKED_SOFTMAX:
            params = request.scaled_masked_softmax
            if options.scale is not None:
                params.scale = options.scale
            if options.mask is not None:
                ref(params.mask, options.mask)
            if layout.mask_rows:
                params.mask_rows = layout.mask_rows
            if options.causal:
                params.causal = True

    # -- NumPy ----------------------------------------------------------------

    def _host_ref(self, ref, array, used, place=False):
        """Points a TensorRef at `array`: its shared memory (place: its
        _shared.place_of when known), else inline bytes."""
        if place is False:
            place = _shared.place_of(array)
        if place is None:
            ref.inline_data = np.ascontiguousarray(array).tobytes()
            return
        segment, offset = place
        buffer = self._segment_buffer(segment)
        used.append(buffer)
        ref.buffer.buffer_id = buffer.id
        ref.buffer.offset_bytes = offset

    def _host_place(self, array, layout):
        """(place, RowLayout) of a NumPy array: place (its _shared segment and
        offset) when the daemon can address it in place, a shared array
        whose rows follow a RowLayout (last-axis ops: strided rows too);
        else (None, contiguous rows): it travels inline."""
        cols = layout.cols
        if array.flags.c_contiguous:
            return _shared.place_of(array), _rows.contiguous(cols)
        if layout.inner != 1 or getattr(array, "_kt_segment", None) is None:
            return None, _rows.contiguous(cols)
        itemsize = array.dtype.itemsize
        if any(stride % itemsize for stride in array.strides):
            return None, _rows.contiguous(cols)
        rows = _rows.of(array.shape, [stride // itemsize for stride in array.strides])
        if rows is None:
            return None, _rows.contiguous(cols)
        extent = _rows.extent(rows, layout.rows, cols) * itemsize
        place = _shared.strided_place_of(array, extent)
        return (place, rows) if place is not None else (None, _rows.contiguous(cols))

    def _host_quant_arrays(self, options, x, layout):
        """The static scale as an array (a float becomes one inline float32)
        and the dynamic scales' array when given, both checked."""
        quant = options.quant
        if quant is None:
            return None, None
        _check_group_columns(quant, layout)
        quant_scale = options.quant_scale
        if not quant.dynamic:
            if quant_scale is None:
                quant_scale = np.array([quant.scale], dtype=np.float32)
            else:
                quant_scale = _host_array(quant_scale, "quant.scale")
                if quant_scale.dtype != np.float32 or quant_scale.size != 1:
                    raise _invalid("quant.scale has dtype %s and %d elements, want one float32"
                                   % (quant_scale.dtype, quant_scale.size))
        scales = options.scales
        if scales is not None:
            want = tuple(x.shape[:-1]) + (quant.scales_per_row(layout.cols),)
            if not isinstance(scales, np.ndarray):
                raise _invalid("scales must be a NumPy array like x, not %s"
                               % type(scales).__name__)
            if scales.dtype != np.float32 or tuple(scales.shape) != want:
                raise _invalid("scales has dtype %s and shape %s, want float32 and %s"
                               % (scales.dtype, tuple(scales.shape), want))
            if not scales.flags.writeable:
                raise _invalid("scales is read-only")
        return quant_scale, scales

    def _run_host(self, options, x, out):
        x = _host_array(x, "x")
        dtype = _host_dtype(x, "x")
        layout = _layout(x.shape, options)
        quant = options.quant
        out_dtype = x.dtype if quant is None else quant.numpy_dtype()
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise _invalid("out must be a NumPy array like x, not %s" % type(out).__name__)
            if quant is None and (out.dtype != x.dtype or out.shape != x.shape):
                raise _invalid("out has dtype %s and shape %s, want %s and %s like x"
                               % (out.dtype, tuple(out.shape), x.dtype, tuple(x.shape)))
            if quant is not None and (not quant.numpy_accepts(out.dtype)
                                      or out.shape != x.shape):
                raise _invalid("out has dtype %s and shape %s, want %s codes (%s) and %s like x"
                               % (out.dtype, tuple(out.shape), quant.dtype, out_dtype,
                                  tuple(x.shape)))
            if not out.flags.writeable:
                raise _invalid("out is read-only")
            out_dtype = out.dtype
        quant_scale, scales = self._host_quant_arrays(options, x, layout)
        options = options._replace(
            weight=_host_param(options.weight, "weight", x.dtype, layout.cols),
            bias=_host_param(options.bias, "bias", x.dtype, layout.cols),
            mask=_host_mask(options.mask, x.dtype, layout), quant_scale=quant_scale)
        x_place, x_rows = self._host_place(x, layout)
        out_place, y_rows = (self._host_place(out, layout) if out is not None
                             else (None, _rows.contiguous(layout.cols)))
        residual_place = residual_rows = None
        if options.residual is not None:
            residual = _host_array(options.residual, "residual")
            if residual.dtype != x.dtype or residual.shape != x.shape:
                raise _invalid("residual has dtype %s and shape %s, want %s and %s like x"
                               % (residual.dtype, tuple(residual.shape), x.dtype,
                                  tuple(x.shape)))
            if not residual.flags.writeable:
                raise _invalid("residual is read-only: x + residual is written back to it")
            residual_place, residual_rows = self._host_place(residual, layout)
            if residual_place is None:
                raise _invalid(
                    "residual must be a shared array (kerntune.shared_array(residual)) whose "
                    "rows are evenly spaced: the daemon writes x + residual back into it in "
                    "place, and a plain NumPy array could only travel as a copy")
            if residual_rows.group_rows:
                raise _invalid("residual's rows are in groups (strides %s): the residual takes "
                               "one row stride" % (residual.strides,))
            options = options._replace(residual=residual)
        if options.op != pb.OP_RMS_NORM:
            # The kernels take grouped rows (per-head views) for rms_norm
            # only: grouped ones travel inline instead.
            if x_rows.group_rows:
                x_place, x_rows = None, _rows.contiguous(layout.cols)
            if y_rows.group_rows:
                out_place, y_rows = None, _rows.contiguous(layout.cols)
        groups = _rows.common_groups(x_rows, y_rows)
        if groups is None:
            # x and out group their rows differently: x travels as a copy.
            x_place, x_rows = None, _rows.contiguous(layout.cols)
            groups = y_rows.group_rows
        x_rows, y_rows = _rows.with_groups(x_rows, groups), _rows.with_groups(y_rows, groups)
        row_strides = _rows.proto(x_rows, y_rows, residual_rows, layout.cols)
        scales_place = _shared.place_of(scales) if scales is not None else None
        if x_place is None:
            self._check_inline("x", layout, x.dtype)
        elif out_place is None:
            self._check_inline("the output", layout, out_dtype)

        def build():
            used = []
            request = pb.RunRequest(op=options.op, dtype=DTYPES[dtype], shape=layout.proto(),
                                    time_kernel=options.time_kernel, device=options.device)
            if row_strides is not None:
                request.row_strides.CopyFrom(row_strides)
            self._host_ref(request.input, x, used, x_place)
            if out_place is not None:
                self._host_ref(request.output, out, used, out_place)
            else:
                request.output.return_inline = True
            self._params(request, options, layout,
                         lambda field, array: self._host_ref(field, array, used))
            if options.residual is not None:
                params = (request.layer_norm if options.op in _LAYER_NORM_OPS
                          else request.rms_norm)
                self._host_ref(params.residual, options.residual, used, residual_place)
            if scales_place is not None:
                params = (request.layer_norm if options.op in _LAYER_NORM_OPS
                          else request.rms_norm)
                self._host_ref(params.quant.scales, scales, used, scales_place)
            if options.return_stats:
                if options.op in _LAYER_NORM_OPS:
                    request.layer_norm.want_mean_inv_std = True
                else:
                    request.rms_norm.want_inv_rms = True
            return request, used

        request, used = build()
        try:
            response = self._run_request(request)
        except _errors.NotFoundError:
            # An automatic registration whose lease ended: register again, once.
            stale = [b for b in used if b.auto]
            if not stale:
                raise
            for buffer in stale:
                buffer.closed = True
                self._forget(buffer)
            request, used = build()
            response = self._run_request(request)

        if out_place is not None:
            y = out
        else:
            flat = np.frombuffer(response.output_data, dtype=out_dtype)
            if flat.size != layout.elements:
                raise _errors.InternalError(
                    "the daemon returned %d bytes of output, want %d"
                    % (len(response.output_data), layout.elements * out_dtype.itemsize))
            if out is None:
                y = flat.reshape(x.shape).copy()
            else:
                out[...] = flat.reshape(x.shape)
                y = out
        mean = inv_std = row_scale = None
        if options.return_stats:
            inv_std = layout.row_values(np.array(response.inv_std, dtype=np.float32), "inv_std")
            if options.op in _LAYER_NORM_OPS:
                mean = layout.row_values(np.array(response.mean, dtype=np.float32), "mean")
        if options.op == pb.OP_REDUCE_SCALE:
            row_scale = layout.row_values(np.array(response.row_scale, dtype=np.float32),
                                          "row_scale", keepdim=True)
        elif quant is not None and quant.dynamic:
            row_scale = scales
            if scales_place is None:
                per_row = quant.scales_per_row(layout.cols)
                values = np.array(response.row_scale, dtype=np.float32)
                if values.size != layout.rows * per_row:
                    raise _errors.InternalError(
                        "the daemon returned %d scales, want %d (%d per row)"
                        % (values.size, layout.rows * per_row, per_row))
                values = values.reshape(tuple(x.shape[:-1]) + (per_row,))
                if scales is None:
                    row_scale = values
                else:
                    scales[...] = values
        # Reusable as it is when it returns nothing inline (every tensor in
        # shared memory): then it depends only on the arrays' places.
        reusable = request if _queue.queue_carries(request) else None
        return response, _types.RunResult(y, mean, inv_std, row_scale=row_scale), reusable

    # -- PyTorch CUDA ---------------------------------------------------------

    def _cuda_ref(self, ref, tensor):
        """Points a TensorRef/OutputRef at a CUDA tensor: a registered buffer, else IPC."""
        device, handle, offset = _torch.tensor_location(tensor)
        ordinal = self._ordinal(device)
        # One past its last element: a strided view's gaps count.
        span = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
        end = offset + span * tensor.element_size()
        with self._lock:
            buffer = self._registry.get(("cuda", ordinal, handle))
        if buffer is not None and not buffer.closed and (
                buffer.size_bytes == 0 or end <= buffer.size_bytes):
            ref.buffer.buffer_id = buffer.id
            ref.buffer.offset_bytes = offset
            return
        ref.cuda_ipc.handle = handle
        ref.cuda_ipc.device_ordinal = ordinal
        ref.cuda_ipc.offset_bytes = offset

    @staticmethod
    def _cuda_rows(t, layout):
        """The RowLayout of a CUDA tensor the daemon can address as it is, or
        None (middle-axis ops take contiguous tensors only)."""
        if t.is_contiguous():
            return _rows.contiguous(layout.cols)
        if layout.inner != 1:
            return None
        return _rows.of(tuple(t.shape), t.stride())

    def _cuda_quant(self, torch, options, x, layout, check):
        """(static scale tensor, dynamic scales tensor or None), checked; a
        float static scale becomes a new one-element tensor on x's device."""
        quant = options.quant
        if quant is None:
            return None, None
        _check_group_columns(quant, layout)
        quant_scale = options.quant_scale
        if not quant.dynamic:
            if quant_scale is None:
                quant_scale = torch.tensor([quant.scale], dtype=torch.float32, device=x.device)
            elif not (_torch.is_tensor(quant_scale) and quant_scale.is_cuda
                      and quant_scale.device == x.device and quant_scale.dtype == torch.float32
                      and quant_scale.numel() == 1):
                raise _invalid("quant.scale must be a float or one float32 in a CUDA tensor on "
                               "%s like x" % (x.device,))
        scales = options.scales
        if scales is not None:
            check(scales, "scales",
                  tuple(x.shape[:-1]) + (quant.scales_per_row(layout.cols),), torch.float32)
            if not scales.is_contiguous():
                raise _invalid("scales must be contiguous: the daemon writes them row-major")
        return quant_scale, scales

    def _run_cuda(self, options, x, out, stream):
        torch = _torch.torch_module()
        dtype = _torch.dtype_name(x.dtype)
        if dtype is None:
            raise _invalid("x has dtype %s: kerntune takes torch.float32, torch.float16 or "
                           "torch.bfloat16" % (x.dtype,))
        layout = _layout(tuple(x.shape), options)
        if x.numel() == 0:
            raise _invalid("x has shape %s: every dimension must be >= 1" % (tuple(x.shape),))
        device = x.device
        quant = options.quant
        given = (x, options.weight, options.bias, options.mask, options.quant_scale)

        def check(t, what, shape, want_dtype=x.dtype):
            if not (_torch.is_tensor(t) and t.is_cuda and t.device == device):
                raise _invalid("%s must be a CUDA tensor on %s like x" % (what, device))
            if want_dtype is not None and t.dtype != want_dtype:
                raise _invalid("%s has dtype %s, want %s" % (what, t.dtype, want_dtype))
            if tuple(t.shape) != tuple(shape):
                raise _invalid("%s has shape %s, want %s" % (what, tuple(t.shape), tuple(shape)))

        # Rows the daemon can reach as they are (a per-head view of a fused
        # qkv tensor) are normalized in place; any other strided x is copied.
        x_rows = self._cuda_rows(x, layout)
        if x_rows is None or (x_rows.group_rows and options.op != pb.OP_RMS_NORM):
            # Grouped rows (per-head views) are rms_norm's only, in the kernels.
            x = x.contiguous()
            x_rows = _rows.contiguous(layout.cols)
        y_rows = _rows.contiguous(layout.cols)
        if out is not None:
            if quant is None:
                check(out, "out", tuple(x.shape))
            else:
                check(out, "out", tuple(x.shape), None)
                if not quant.torch_accepts(torch, out.dtype):
                    raise _invalid("out has dtype %s, want %s for %s codes"
                                   % (out.dtype, quant.torch_dtype(torch), quant.dtype))
            y_rows = self._cuda_rows(out, layout)
            if y_rows is None:
                raise _invalid("out (strides %s) must be contiguous or have evenly spaced rows "
                               "that do not overlap: the daemon writes it in place"
                               % (tuple(out.stride()),))
            if y_rows.group_rows and options.op != pb.OP_RMS_NORM:
                raise _invalid("out (strides %s) has its rows in groups (a per-head view): the "
                               "kernels write grouped rows for rms_norm only"
                               % (tuple(out.stride()),))
        residual = options.residual
        residual_rows = None
        if residual is not None:
            check(residual, "residual", tuple(x.shape))
            residual_rows = self._cuda_rows(residual, layout)
            if residual_rows is None or residual_rows.group_rows:
                raise _invalid("residual (strides %s) must be contiguous or have one row "
                               "stride: x + residual is written back into it in place"
                               % (tuple(residual.stride()),))
        groups = _rows.common_groups(x_rows, y_rows)
        if groups is None:
            # x and out group their rows differently: x is copied.
            x = x.contiguous()
            x_rows = _rows.contiguous(layout.cols)
            groups = y_rows.group_rows
        x_rows, y_rows = _rows.with_groups(x_rows, groups), _rows.with_groups(y_rows, groups)
        row_strides = _rows.proto(x_rows, y_rows, residual_rows, layout.cols)
        quant_scale, scales = self._cuda_quant(torch, options, x, layout, check)
        weight, bias, mask = options.weight, options.bias, options.mask
        if weight is not None:
            check(weight, "weight", (layout.cols,))
            weight = weight.contiguous()
        if bias is not None:
            check(bias, "bias", (layout.cols,))
            bias = bias.contiguous()
        if mask is not None:
            shape = _mask_shape(tuple(mask.shape), layout) if _torch.is_tensor(mask) else None
            check(mask, "mask", shape or (layout.mask_rows, layout.cols))
            mask = mask.contiguous()
        options = options._replace(weight=weight, bias=bias, mask=mask, quant_scale=quant_scale,
                                   scales=scales)

        stream_mode = stream is not None and stream is not False
        cuda_stream = None  # synchronous mode: x.device's current stream
        if stream_mode and stream is not True:
            if not isinstance(stream, torch.cuda.Stream):
                raise _invalid("stream must be a torch.cuda.Stream or True (the current "
                               "stream), not %s" % type(stream).__name__)
            if stream.device != device:
                raise _invalid("stream is on %s but x on %s" % (stream.device, device))
            cuda_stream = stream
        elif stream_mode:
            cuda_stream = torch.cuda.current_stream(device)

        out, mean, inv_std, row_scale = _cuda_outputs(torch, options, layout, x, out,
                                                      cuda_stream)

        request = pb.RunRequest(op=options.op, dtype=DTYPES[dtype], shape=layout.proto(),
                                time_kernel=options.time_kernel, device=options.device)
        if row_strides is not None:
            request.row_strides.CopyFrom(row_strides)
        self._cuda_ref(request.input, x)
        self._cuda_ref(request.output, out)
        self._params(request, options, layout, self._cuda_ref)
        params = request.layer_norm if options.op in _LAYER_NORM_OPS else request.rms_norm
        if residual is not None:
            self._cuda_ref(params.residual, residual)
        if quant is not None and quant.dynamic:
            self._cuda_ref(params.quant.scales, row_scale)
        if options.op in _LAYER_NORM_OPS and options.return_stats:
            self._cuda_ref(request.layer_norm.mean, mean)
            self._cuda_ref(request.layer_norm.inv_std, inv_std)
        if options.op in _RMS_NORM_OPS and options.return_stats:
            self._cuda_ref(request.rms_norm.inv_rms, inv_std)
        if options.op == pb.OP_REDUCE_SCALE:
            self._cuda_ref(request.reduce_scale.row_scale, row_scale)

        done = wait = None
        if stream_mode:
            # The daemon's stream waits for ours; ours waits for the daemon's
            # done event: nothing blocks on the host.
            with torch.cuda.device(device):
                wait = torch.cuda.Event(interprocess=True)
                wait.record(cuda_stream)
                done = torch.cuda.Event(interprocess=True)
                request.wait_event = bytes(wait.ipc_handle())
                request.done_event = bytes(done.ipc_handle())
        else:
            # Inputs written by queued work must be in memory before the daemon reads.
            _torch.synchronize_current_stream(device)

        response = self._run_request(request)

        # Reusable as it is unless it names a copy made for this call or
        # outputs allocated for it.
        unchanged = all(a is b for a, b in zip(given, (x, weight, bias, mask, quant_scale)))
        reusable = (request if unchanged and not stream_mode and mean is None
                    and inv_std is None and (row_scale is None or row_scale is scales)
                    else None)
        if stream_mode:
            cuda_stream.wait_event(done)
            # The daemon may still be reading and writing: keep every tensor
            # alive until the done event fires.
            with self._lock:
                self._pending.append((done, (x, out, weight, bias, mask, mean, inv_std,
                                             row_scale, residual, quant_scale, wait)))
        row_shape = tuple(x.shape[:-1])
        if mean is not None:
            mean = mean.view(row_shape)
        if inv_std is not None:
            inv_std = inv_std.view(row_shape)
        if row_scale is not None and options.op == pb.OP_REDUCE_SCALE:
            row_scale = row_scale.view(row_shape + (1,))
        return response, _types.RunResult(out, mean, inv_std, row_scale=row_scale), reusable

    def _reap_pending(self, wait):
        while True:
            with self._lock:
                if not self._pending:
                    return
                done, _ = self._pending[0]
            if wait:
                done.synchronize()
            elif not done.query():
                return
            with self._lock:
                if self._pending and self._pending[0][0] is done:
                    self._pending.popleft()

    def synchronize(self):
        """Waits until every stream-mode run of this client has finished on the GPU."""
        self._reap_pending(wait=True)
