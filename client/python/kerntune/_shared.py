"""NumPy arrays in POSIX shared memory, which kerntuned reads and writes in place.

A SharedArray is an ndarray whose memory is a multiprocessing.shared_memory
object. The client registers that object with the daemon (RegisterBuffer,
host_shm) the first time an array of it is used and then refers to arrays by
buffer id + byte offset: no tensor bytes cross the socket.

Views keep the memory: slicing rows of a SharedArray gives a SharedArray at
an offset inside the same object. An array computed from one (a + 1) is
ordinary memory and is sent inline. The shared-memory name is unlinked when
the last array of the object is garbage-collected (or by unlink()); the
mapping itself lives as long as any array does.
"""

import os

import numpy as np
from multiprocessing import shared_memory


def _close_quietly(shm):
    """SharedMemory.close(), tolerating arrays that still view the mapping.

    close() raises BufferError while a NumPy view exports the mmap; the
    mapping is then released with the last view, and only the descriptor is
    closed here (so SharedMemory.__del__ has nothing left to fail on).
    """
    try:
        shm.close()
    except BufferError:
        shm._mmap = None
        fd = getattr(shm, "_fd", -1)
        if fd >= 0:
            os.close(fd)
            shm._fd = -1


class _Segment:
    """One shared-memory object: name, size, base address; unlinked when unused."""

    def __init__(self, nbytes):
        self.shm = shared_memory.SharedMemory(create=True, size=max(int(nbytes), 1))
        self.name = self.shm.name
        self.size = int(nbytes)
        probe = np.frombuffer(self.shm.buf, dtype=np.uint8, count=1)
        self.base = probe.__array_interface__["data"][0]
        del probe
        self._unlinked = False

    def offset_of(self, array):
        """Byte offset of `array` in this object, or None when it lies outside."""
        address = array.__array_interface__["data"][0]
        offset = address - self.base
        if offset < 0 or offset + array.nbytes > self.size:
            return None
        return offset

    def unlink(self):
        if self._unlinked:
            return
        self._unlinked = True
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass

    def __del__(self):
        _close_quietly(self.shm)
        self.unlink()


class SharedArray(np.ndarray):
    """An ndarray in POSIX shared memory; see shared_empty().

    Attributes: shm_name (the shm_open name, None for an array that is not in
    shared memory), shm_offset (bytes from the start of the object).
    """

    def __new__(cls, shape, dtype=np.float32):
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        segment = _Segment(count * dtype.itemsize)
        array = super().__new__(cls, shape, dtype=dtype, buffer=segment.shm.buf)
        array._kt_segment = segment
        return array

    def __array_finalize__(self, obj):
        segment = getattr(obj, "_kt_segment", None)
        if segment is not None and segment.offset_of(self) is None:
            segment = None
        self._kt_segment = segment

    @property
    def shm_name(self):
        segment = getattr(self, "_kt_segment", None)
        return segment.name if segment is not None else None

    @property
    def shm_offset(self):
        segment = getattr(self, "_kt_segment", None)
        return segment.offset_of(self) if segment is not None else None

    def unlink(self):
        """Removes the shared-memory name now (the memory stays while mapped)."""
        segment = getattr(self, "_kt_segment", None)
        if segment is not None:
            segment.unlink()


def place_of(array):
    """(the _Segment holding `array`, its byte offset there) when the daemon
    can address it in place: a SharedArray inside its object, C-contiguous
    (rows back to back); else None."""
    segment = getattr(array, "_kt_segment", None)
    if segment is None or not array.flags.c_contiguous:
        return None
    offset = segment.offset_of(array)
    return None if offset is None else (segment, offset)


def strided_place_of(array, extent_bytes):
    """(the _Segment holding `array`, its byte offset there) for a SharedArray
    whose elements span `extent_bytes` from its first (a view with gaps
    between its rows), else None."""
    segment = getattr(array, "_kt_segment", None)
    if segment is None:
        return None
    offset = array.__array_interface__["data"][0] - segment.base
    if offset < 0 or offset + extent_bytes > segment.size:
        return None
    return segment, offset


def shared_empty(shape, dtype=np.float32):
    """A new uninitialised SharedArray of `shape` and `dtype`."""
    return SharedArray(shape, dtype)


def shared_array(data, dtype=None):
    """A new SharedArray holding a copy of `data` (any array-like)."""
    source = np.asarray(data, dtype=dtype)
    array = SharedArray(source.shape, source.dtype)
    array[...] = source
    return array
