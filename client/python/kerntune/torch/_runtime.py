"""libkerntune_runtime.so through ctypes: the in-process runtime's C interface
(client/runtime_c.h). One runtime per process, made at the first op.

The library is looked for, in order: $KERNTUNE_RUNTIME_LIBRARY; beside the
package in a bundle or an install prefix (<prefix>/python/kerntune ->
<prefix>/lib); in the build tree (build/client/python/kerntune ->
build/client); beside the kerntuned on PATH (<prefix>/bin -> <prefix>/lib);
then the dynamic linker's own search.
"""

import ctypes
import os
import shutil
import threading

import grpc

from kerntune import _errors

_LIBRARY_NAME = "libkerntune_runtime.so"
_TEXT_BYTES = 1024
# The C interface's own code: the config needs a workspace, none was given.
NEEDS_WORKSPACE = 8


class Run(ctypes.Structure):
    """kt_run, field for field (client/runtime_c.h)."""

    _fields_ = [
        ("op", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        ("inner", ctypes.c_int64),
        ("device", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
        ("x", ctypes.c_void_p),
        ("y", ctypes.c_void_p),
        ("gamma", ctypes.c_void_p),
        ("beta", ctypes.c_void_p),
        ("mask", ctypes.c_void_p),
        ("mean", ctypes.c_void_p),
        ("inv_std", ctypes.c_void_p),
        ("row_scale", ctypes.c_void_p),
        ("residual", ctypes.c_void_p),
        ("quant_scale", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64),
        ("epsilon", ctypes.c_double),
        ("scale", ctypes.c_double),
        ("mask_rows", ctypes.c_int64),
        ("causal", ctypes.c_int32),
        ("quant_dtype", ctypes.c_int32),
        ("weight_offset", ctypes.c_double),
        ("scale_mode", ctypes.c_int32),
        ("batch_invariant", ctypes.c_int32),
        ("group_size", ctypes.c_int64),
        ("scale_ub", ctypes.c_double),
        ("x_row_stride", ctypes.c_int64),
        ("y_row_stride", ctypes.c_int64),
        ("residual_row_stride", ctypes.c_int64),
        ("group_rows", ctypes.c_int64),
        ("x_group_stride", ctypes.c_int64),
        ("y_group_stride", ctypes.c_int64),
    ]


def _candidates():
    explicit = os.environ.get("KERNTUNE_RUNTIME_LIBRARY")
    if explicit:
        yield explicit
        return
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../kerntune
    yield os.path.join(package, "..", "..", "lib", _LIBRARY_NAME)
    yield os.path.join(package, "..", "..", _LIBRARY_NAME)
    daemon = shutil.which("kerntuned")
    if daemon:
        yield os.path.join(os.path.dirname(os.path.realpath(daemon)), "..", "lib", _LIBRARY_NAME)
    yield _LIBRARY_NAME


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(os.path.normpath(path) if os.sep in path else path)
        except OSError as error:
            tried.append("%s (%s)" % (path, error))
    raise _errors.FailedPreconditionError(
        "cannot load %s, the in-process runtime; tried %s. Set KERNTUNE_RUNTIME_LIBRARY to its "
        "path (it is in <kerntune prefix>/lib)" % (_LIBRARY_NAME, ", ".join(tried)))


def _declare(lib):
    c = ctypes
    text = c.c_char_p
    lib.kt_runtime_run_size.restype = c.c_size_t
    lib.kt_runtime_enum.argtypes = [text, text]
    lib.kt_runtime_enum.restype = c.c_int32
    lib.kt_runtime_create.argtypes = [text, text, text, c.c_double,
                                      c.POINTER(c.c_void_p), c.c_char_p, c.c_size_t]
    lib.kt_runtime_destroy.argtypes = [c.c_void_p]
    lib.kt_runtime_run.argtypes = [c.c_void_p, c.POINTER(Run), c.POINTER(c.c_int64),
                                   c.c_char_p, c.c_size_t, c.c_char_p, c.c_size_t]
    lib.kt_runtime_choose.argtypes = [c.c_void_p, c.c_int32, c.c_int32, c.c_int64, c.c_int64,
                                      c.c_int64, c.c_int32, c.c_int32, c.c_char_p, c.c_size_t,
                                      c.c_char_p, c.c_size_t, c.c_char_p, c.c_size_t]
    lib.kt_runtime_describe.argtypes = [c.c_void_p, c.c_int32, c.c_char_p, c.c_size_t,
                                        c.c_char_p, c.c_size_t]
    lib.kt_runtime_refresh.argtypes = [c.c_void_p]
    for name in ("kt_runtime_create", "kt_runtime_run", "kt_runtime_choose",
                 "kt_runtime_describe"):
        getattr(lib, name).restype = c.c_int
    if lib.kt_runtime_run_size() != ctypes.sizeof(Run):
        raise _errors.FailedPreconditionError(
            "%s lays out kt_run in %d bytes, this package in %d: the library and the Python "
            "package come from different kerntune versions" %
            (_LIBRARY_NAME, lib.kt_runtime_run_size(), ctypes.sizeof(Run)))
    return lib


def _error(code, message):
    status = next((s for s in grpc.StatusCode if s.value[0] == code), grpc.StatusCode.UNKNOWN)
    return _errors.error_for(status, message)


class Runtime:
    """One in-process runtime (kt_runtime): config choice and launches."""

    def __init__(self, lib, server, db, configs, refresh_s):
        self._lib = lib
        handle = ctypes.c_void_p()
        error = ctypes.create_string_buffer(_TEXT_BYTES)
        code = lib.kt_runtime_create(_bytes(server), _bytes(db), _bytes(configs),
                                     float(refresh_s), ctypes.byref(handle), error, _TEXT_BYTES)
        if code != 0:
            raise _error(code, error.value.decode())
        self._handle = handle
        self._local = threading.local()
        self._enums = {}

    def close(self):
        if self._handle:
            self._lib.kt_runtime_destroy(self._handle)
            self._handle = None

    def enum(self, kind, name):
        """The C interface's value of an enum name (asked once per name)."""
        value = self._enums.get((kind, name))
        if value is None:
            value = self._lib.kt_runtime_enum(kind.encode(), name.encode())
            if value < 0:
                raise _errors.InvalidArgumentError("unknown %s %r" % (kind, name))
            self._enums[(kind, name)] = value
        return value

    def _buffers(self):
        # One error and key buffer per thread: run() is called concurrently.
        buffers = getattr(self._local, "buffers", None)
        if buffers is None:
            buffers = (ctypes.create_string_buffer(_TEXT_BYTES),
                       ctypes.create_string_buffer(_TEXT_BYTES), ctypes.c_int64(0))
            self._local.buffers = buffers
        return buffers

    def run(self, run, workspace=None):
        """Runs `run` (a Run). Returns None, or the workspace bytes the chosen
        config needs when `run` has none (nothing was launched then)."""
        error, _, needed = self._buffers()
        code = self._lib.kt_runtime_run(self._handle, ctypes.byref(run), ctypes.byref(needed),
                                        None, 0, error, _TEXT_BYTES)
        if code == 0:
            return None
        if code == NEEDS_WORKSPACE and not run.workspace:
            return needed.value
        raise _error(code, error.value.decode())

    def choose(self, op, dtype, rows, cols, inner, device, batch_invariant=False):
        """(config key, source) of a problem on CUDA device `device`."""
        error, key, _ = self._buffers()
        source = ctypes.create_string_buffer(64)
        code = self._lib.kt_runtime_choose(self._handle, self.enum("op", op),
                                           self.enum("dtype", dtype), rows, cols, inner,
                                           int(batch_invariant), device, key, _TEXT_BYTES,
                                           source, 64, error, _TEXT_BYTES)
        if code != 0:
            raise _error(code, error.value.decode())
        return key.value.decode(), source.value.decode()

    def describe(self, device):
        error, _, _ = self._buffers()
        text = ctypes.create_string_buffer(4096)
        code = self._lib.kt_runtime_describe(self._handle, device, text, 4096, error, _TEXT_BYTES)
        if code != 0:
            raise _error(code, error.value.decode())
        return text.value.decode()

    def refresh(self):
        self._lib.kt_runtime_refresh(self._handle)


class _Invariance(threading.local):
    override = None  # None: the process's setting


_invariance = _Invariance()
_batch_invariant_default = False


def set_batch_invariant(enabled):
    """Batch-invariant mode for the whole process (off by default)."""
    global _batch_invariant_default
    _batch_invariant_default = bool(enabled)


def batch_invariant_enabled():
    override = _invariance.override
    return _batch_invariant_default if override is None else override


class batch_invariant:  # noqa: N801 - used as a context manager, like torch.no_grad
    """Batch-invariant mode for the ops this thread runs inside the block:

        with kerntune.torch.batch_invariant():
            y = kt.rms_norm(x, w)

    Each op then launches the one config its row length gets at any number
    of rows, of a kernel family that reduces each row inside one thread
    group or block, so a row gives the same bits in a batch of 1 or 8192
    (for tensors 16-byte aligned, as torch allocates them). Off again after
    the block (batch_invariant(False) turns it off inside one)."""

    def __init__(self, enabled=True):
        self._enabled = bool(enabled)
        self._saved = []

    def __enter__(self):
        self._saved.append(_invariance.override)
        _invariance.override = self._enabled
        return self

    def __exit__(self, *exc):
        _invariance.override = self._saved.pop()
        return False


def _bytes(text):
    return None if text is None else os.fspath(text).encode()


_lock = threading.Lock()
_runtime = None
_settings = {"server": None, "db": None, "configs": None, "refresh_s": 5.0}


def configure(server=None, db=None, configs=None, refresh_s=5.0):
    """Where the runtime takes its configs from; call before the first op.
    server: the daemon (as kerntune.Client's target; "none": ask none);
    db: the tuning store; configs: the shipped config directory; None means
    kerntune's defaults. refresh_s: how often they are fetched again."""
    global _runtime
    with _lock:
        if _runtime is not None:
            raise _errors.FailedPreconditionError(
                "kerntune.torch is already running with its configs; configure() it before "
                "the first op")
        _settings.update(server=server, db=db, configs=configs, refresh_s=refresh_s)


def runtime():
    """The process's runtime, made at the first call."""
    global _runtime
    current = _runtime
    if current is not None:
        return current
    with _lock:
        if _runtime is None:
            _runtime = Runtime(_declare(_load()), **_settings)
        return _runtime
