"""PyTorch CUDA tensors as CUDA IPC references. Never imports torch itself.

A tensor is shared the way torch.multiprocessing shares it:
storage._share_cuda_() gives the cudaIpcMemHandle_t of the caching
allocator's block base (the cudaMalloc'd segment) and the storage's byte
offset in it, so a tensor starts at

    storage offset bytes + tensor.storage_offset() * element_size

from the handle's base. Three details of torch's protocol matter here:

- Handle format. Older torch returns the 64 handle bytes; newer versions
  (c10's ShareableHandle) return 66: a version byte, a type byte ('c' =
  cudaMalloc block, 'e' = expandable segment), then the 64 bytes. Expandable segments cannot be
  opened with cudaIpcOpenMemHandle and are refused.
- Reference counter. _share_cuda_() sets a producer-side counter to 1 that
  a torch consumer decrements when it drops the tensor; while it is above 0
  the freed block waits in torch's "limbo" forever. The daemon is not a
  torch process, so the counter is returned at once: the daemon's use is
  bounded by each call (synchronous mode) or by the done event, before
  which the client keeps the tensors alive (stream mode).
- Cost. Each _share_cuda_() call re-wraps the storage's data pointer and
  records an interprocess event, so it is called once per storage and the
  result is cached (keyed by a weak reference to the storage).
  Like any torch CUDA IPC sharing, it makes tensor.record_stream() a no-op
  for that storage from then on.
"""

import sys
import threading

from kerntune import _errors, _types

_IPC_HANDLE_BYTES = 64
_TYPE_CUDA_MALLOC = ord("c")
_TYPE_EXPANDABLE_SEGMENT = ord("e")


def torch_module():
    """torch if the program imported it, else None (we never import it ourselves)."""
    return sys.modules.get("torch")


def is_tensor(obj):
    torch = torch_module()
    return torch is not None and isinstance(obj, torch.Tensor)


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


def mem_handle(raw):
    """The 64 cudaIpcMemHandle_t bytes inside a handle from _share_cuda_()."""
    raw = bytes(raw)
    if len(raw) == _IPC_HANDLE_BYTES:
        return raw
    if len(raw) == _IPC_HANDLE_BYTES + 2 and raw[1] == _TYPE_CUDA_MALLOC:
        return raw[2:]
    if len(raw) >= 2 and raw[1] == _TYPE_EXPANDABLE_SEGMENT:
        raise _errors.InvalidArgumentError(
            "the tensor lives in an expandable segment "
            "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), which CUDA IPC "
            "handles cannot share; allocate it with expandable_segments:False")
    raise _errors.InvalidArgumentError(
        "storage._share_cuda_() returned a %d-byte handle this client does not "
        "know (expected 64, or 66 with a 'c' type byte)" % len(raw))


class Share:
    """A storage's allocation handle and the storage's offset in it."""

    __slots__ = ("ref", "device", "handle", "storage_offset_bytes")

    def __init__(self, ref, device, handle, storage_offset_bytes):
        self.ref = ref
        self.device = device
        self.handle = handle
        self.storage_offset_bytes = storage_offset_bytes


class StorageShares:
    """_share_cuda_() once per live storage, process-wide."""

    _SWEEP_EVERY = 256

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = {}
        self._lookups = 0

    def get(self, storage):
        key = storage._cdata
        with self._lock:
            self._lookups += 1
            if self._lookups % self._SWEEP_EVERY == 0:
                self._sweep()
            entry = self._entries.get(key)
            if entry is not None and not entry.ref.expired():
                return entry
            try:
                info = storage._share_cuda_()
            except RuntimeError as e:
                raise _errors.InvalidArgumentError(
                    "torch could not share the tensor's storage by CUDA IPC "
                    "(a tensor received from another process must be cloned "
                    "first): %s" % e) from None
            device, handle, _size_bytes, offset_bytes, ref_counter, ref_counter_offset = info[:6]
            if ref_counter:
                torch_module().UntypedStorage._release_ipc_counter_cuda(
                    ref_counter, ref_counter_offset)
            from torch.multiprocessing.reductions import StorageWeakRef

            entry = Share(StorageWeakRef(storage), int(device), mem_handle(handle),
                          int(offset_bytes))
            self._entries[key] = entry
            return entry

    def _sweep(self):
        dead = [key for key, entry in self._entries.items() if entry.ref.expired()]
        for key in dead:
            del self._entries[key]


SHARES = StorageShares()


def tensor_location(tensor):
    """(device index, 64-byte handle, byte offset of the tensor from the handle's base)."""
    share = SHARES.get(tensor.untyped_storage())
    offset = share.storage_offset_bytes + tensor.storage_offset() * tensor.element_size()
    return share.device, share.handle, offset
