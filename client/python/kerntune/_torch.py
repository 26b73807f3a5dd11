"""PyTorch CUDA tensors as CUDA IPC references. Never imports torch itself.

A tensor is located through the CUDA driver (libcuda, which every process
that runs torch on a GPU has loaded): cuPointerGetAttributes gives the base
of the cudaMalloc'd segment that holds the tensor's data (the caching
allocator's segment), a process-wide unique id of that allocation and its
device, and cuIpcGetMemHandle the segment's cudaIpcMemHandle_t, so the
tensor starts at

    tensor.data_ptr() - segment base

from the handle's base. Why not torch's own storage._share_cuda_():
- Cost. It records an interprocess event and sets up a producer-side
  reference counter on every call: about 15 us for a new tensor on an H100
  host (2026-11-26), against about 2 us for the attribute query here. A
  call that returns a new tensor shares one each time.
- Side effects. A shared storage's block waits in torch's "limbo" while
  its counter is above 0, and tensor.record_stream() becomes a no-op for
  it. The daemon is not a torch process: its use of the memory is bounded
  by each call (synchronous mode) or by the done event, before which the
  client keeps the tensors alive (stream mode).
The handle is the same bytes that torch would share (the same allocation
gives the same handle), and is cached by the allocation's unique id, which
a freed and reallocated segment never reuses. Expandable segments
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) are not cudaMalloc'd and
cannot be shared this way; they are refused.
"""

import ctypes
import sys
import threading

from kerntune import _errors, _types

_IPC_HANDLE_BYTES = 64


def torch_module():
    """torch if the program imported it, else None (we never import it ourselves)."""
    return sys.modules.get("torch")


def is_tensor(obj):
    torch = torch_module()
    return torch is not None and isinstance(obj, torch.Tensor)


def is_dtype(obj):
    torch = torch_module()
    return torch is not None and isinstance(obj, torch.dtype)


def dtype_name(dtype):
    """"float32", "float16", "bfloat16" for those torch dtypes, else None."""
    torch = torch_module()
    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    return names.get(dtype)


def device_uuid(index):
    """nvidia-smi's UUID ("GPU-...") of torch CUDA device `index`, or "" when
    this torch's device properties have no uuid (older versions)."""
    torch = torch_module()
    if torch is None:
        return ""
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return ""
    raw = getattr(uuid, "bytes", None)
    if raw is not None and len(raw) == 16:
        return _types.format_gpu_uuid(raw)
    text = str(uuid).lower()  # "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    return text if text.startswith("gpu-") and len(text) == 40 else "GPU-" + text


# CUpointer_attribute values (cuda.h).
_ATTR_CONTEXT = 1
_ATTR_BUFFER_ID = 7
_ATTR_DEVICE_ORDINAL = 9
_ATTR_IS_LEGACY_CUDA_IPC_CAPABLE = 10
_ATTR_RANGE_START_ADDR = 11


class _Allocations:
    """Where a device pointer's allocation lies, and its IPC handle, through
    libcuda (see the module's docstring)."""

    _MAX_HANDLES = 4096

    def __init__(self):
        self._lock = threading.Lock()
        self._cuda = None
        self._handles = {}  # allocation's buffer id -> 64 handle bytes
        self._local = threading.local()  # each thread's ctypes out-parameters

    def _driver(self):
        if self._cuda is None:
            cuda = ctypes.CDLL("libcuda.so.1")
            cuda.cuPointerGetAttributes.argtypes = [ctypes.c_uint, ctypes.c_void_p,
                                                    ctypes.c_void_p, ctypes.c_uint64]
            cuda.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                                   ctypes.c_uint64]
            cuda.cuIpcGetMemHandle.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
            cuda.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
            cuda.cuCtxPopCurrent_v2.argtypes = [ctypes.c_void_p]
            self._cuda = cuda
        return self._cuda

    def _query(self):
        q = getattr(self._local, "query", None)
        if q is None:
            start, buffer_id = ctypes.c_uint64(), ctypes.c_uint64()
            ordinal, legacy_ipc = ctypes.c_int(), ctypes.c_int()
            outputs = (start, buffer_id, ordinal, legacy_ipc)
            attributes = (ctypes.c_int * 4)(_ATTR_RANGE_START_ADDR, _ATTR_BUFFER_ID,
                                            _ATTR_DEVICE_ORDINAL,
                                            _ATTR_IS_LEGACY_CUDA_IPC_CAPABLE)
            data = (ctypes.c_void_p * 4)(*(ctypes.addressof(o) for o in outputs))
            q = self._local.query = (attributes, data) + outputs
        return q

    def locate(self, ptr):
        """(device ordinal, 64-byte handle, ptr's byte offset from the handle's base)."""
        cuda = self._driver()
        attributes, data, start, buffer_id, ordinal, legacy_ipc = self._query()
        rc = cuda.cuPointerGetAttributes(4, attributes, data, ptr)
        if rc != 0:
            raise _errors.InvalidArgumentError(
                "the CUDA driver does not know the tensor's memory (CUresult %d)" % rc)
        if not legacy_ipc.value:
            raise _errors.InvalidArgumentError(
                "the tensor's memory cannot be shared by CUDA IPC handle: it is not "
                "cudaMalloc'd (an expandable segment, PYTORCH_CUDA_ALLOC_CONF="
                "expandable_segments:True, or another allocator); allocate it with "
                "expandable_segments:False")
        base, key = start.value, buffer_id.value
        handle = self._handles.get(key)
        if handle is None:
            handle = self._export(cuda, base)
            with self._lock:
                if len(self._handles) >= self._MAX_HANDLES:
                    self._handles.clear()
                self._handles[key] = handle
        return ordinal.value, handle, ptr - base

    @staticmethod
    def _export(cuda, base):
        # In the allocation's own context: this thread may have none current.
        context = ctypes.c_void_p()
        rc = cuda.cuPointerGetAttribute(ctypes.byref(context), _ATTR_CONTEXT, base)
        if rc == 0:
            rc = cuda.cuCtxPushCurrent_v2(context)
        if rc != 0:
            raise _errors.InvalidArgumentError(
                "the CUDA driver has no context for the tensor's memory (CUresult %d)" % rc)
        handle = ctypes.create_string_buffer(_IPC_HANDLE_BYTES)
        try:
            rc = cuda.cuIpcGetMemHandle(handle, base)
        finally:
            cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        if rc != 0:
            raise _errors.InvalidArgumentError(
                "cuIpcGetMemHandle refused the tensor's memory (CUresult %d)" % rc)
        return handle.raw


_ALLOCATIONS = _Allocations()


def tensor_location(tensor):
    """(device index, 64-byte handle, byte offset of the tensor from the handle's base)."""
    return _ALLOCATIONS.locate(tensor.data_ptr())


class _CurrentStreams:
    """torch.cuda.current_stream(device).synchronize() for a fifth of its
    cost (7.6 us against 1.5 on an H100 host, 2026-11-26): current_stream()
    builds a new Stream object each call; here the raw stream is read and
    its wrapper kept."""

    _MAX_STREAMS = 64

    def __init__(self):
        self._streams = {}  # (device index, raw stream) -> torch stream

    def synchronize(self, device):
        torch = torch_module()
        index = device.index
        raw_of = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw_of is None:  # an older torch
            torch.cuda.current_stream(device).synchronize()
            return
        raw = raw_of(index)
        stream = self._streams.get((index, raw))
        if stream is None:
            stream = (torch.cuda.default_stream(index) if raw == 0
                      else torch.cuda.ExternalStream(raw, device=index))
            if len(self._streams) >= self._MAX_STREAMS:
                self._streams.clear()
            self._streams[(index, raw)] = stream
        stream.synchronize()


_CURRENT_STREAMS = _CurrentStreams()


def synchronize_current_stream(device):
    """Waits for the work queued so far on `device`'s current stream."""
    _CURRENT_STREAMS.synchronize(device)
