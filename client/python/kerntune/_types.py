"""Plain Python values for the daemon's replies (the protobuf messages stay inside).

Enum values become short lowercase names: Op OP_LOG_SOFTMAX -> "log_softmax",
DType DTYPE_BFLOAT16 -> "bfloat16", ConfigSource CONFIG_SOURCE_TUNED ->
"tuned", BufferKind BUFFER_KIND_HOST_SHM -> "host_shm". A value this client
does not know (a newer daemon) comes back as its number, as a string.
"""

import dataclasses
from typing import List, Optional, Tuple

from kerntune import _errors
from kerntune.v1 import kerntune_pb2 as pb


def enum_name(enum_type, value, prefix):
    try:
        name = enum_type.Name(value)
    except ValueError:
        return str(value)
    return name[len(prefix):].lower() if name.startswith(prefix) else name.lower()


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """kernels::LaunchConfig: the knobs of one launch; `key` as "warp/b128/p8/g32/r1/w0".

    split: blocks sharing one row (split_row's cluster size, split_grid's
        and split_two_pass's blocks per row), 1 otherwise.
    """

    impl: str
    block_size: int
    pack_size: int
    thread_group_width: int
    rows_per_access: int
    grid_waves: int
    key: str
    split: int = 1

    @classmethod
    def from_proto(cls, m):
        return cls(m.impl, m.block_size, m.pack_size, m.thread_group_width,
                   m.rows_per_access, m.grid_waves, m.key, m.split or 1)


@dataclasses.dataclass(frozen=True)
class ConfigChoice:
    """The config a run used (or would use) and where it came from.

    source: "tuned" (the daemon's local store), "shipped" (a config file
    shipped for the GPU), "nearest_tuned", "heuristic" or "cpu_reference"
    (then config is None). tuned_shape (rows, cols) and tuned_median_us
    describe the tuned point for "tuned", "shipped" and "nearest_tuned";
    tuned_inner its inner (1: the last axis); tuned_origin where that entry
    was loaded from ("tuned": the local store, "shipped": a shipped file).
    """

    source: str
    config: Optional[LaunchConfig]
    tuned_shape: Optional[Tuple[int, int]]
    tuned_median_us: float
    tuned_inner: int = 1
    tuned_origin: Optional[str] = None

    @classmethod
    def from_proto(cls, m):
        tuned = m.HasField("tuned_shape")
        return cls(
            source=enum_name(pb.ConfigSource, m.source, "CONFIG_SOURCE_"),
            config=LaunchConfig.from_proto(m.config) if m.HasField("config") else None,
            tuned_shape=(m.tuned_shape.rows, m.tuned_shape.cols) if tuned else None,
            tuned_median_us=m.tuned_median_us,
            tuned_inner=max(m.tuned_shape.inner, 1) if tuned else 1,
            tuned_origin=(enum_name(pb.ConfigSource, m.tuned_origin, "CONFIG_SOURCE_")
                          if tuned else None),
        )


@dataclasses.dataclass(frozen=True)
class GpuSku:
    """What makes two GPUs interchangeable for tuning."""

    name: str
    cc_major: int
    cc_minor: int
    sm_count: int
    total_memory_bytes: int

    @classmethod
    def from_proto(cls, m):
        return cls(m.name, m.cc_major, m.cc_minor, m.sm_count, m.total_memory_bytes)


@dataclasses.dataclass(frozen=True)
class Device:
    """A daemon's device. uuid ("GPU-...", as nvidia-smi prints it) and
    pci_bus_id name the physical GPU whatever CUDA_VISIBLE_DEVICES is; empty
    when the daemon does not report them.

    available: False once a sticky CUDA error made the device unusable
    (unavailable_reason says which); its runs then fail with
    UnavailableError while the daemon's other devices keep serving.
    tuned_entries, shipped_entries, stale_entries_skipped: its config cache
    (the device's GPU model). registered_buffers, registered_bytes: the
    registrations whose memory is on it. runs: runs answered on it;
    runs_in_flight: runs executing on it now.
    """

    ordinal: int
    sku: GpuSku
    uuid: str = ""
    pci_bus_id: str = ""
    available: bool = True
    unavailable_reason: str = ""
    tuned_entries: int = 0
    shipped_entries: int = 0
    stale_entries_skipped: int = 0
    registered_buffers: int = 0
    registered_bytes: int = 0
    runs: int = 0
    runs_in_flight: int = 0

    @classmethod
    def from_proto(cls, m):
        return cls(
            ordinal=m.ordinal,
            sku=GpuSku.from_proto(m.sku),
            uuid=m.uuid,
            pci_bus_id=m.pci_bus_id,
            available=m.available,
            unavailable_reason=m.unavailable_reason,
            tuned_entries=m.tuned_entries,
            shipped_entries=m.shipped_entries,
            stale_entries_skipped=m.stale_entries_skipped,
            registered_buffers=m.registered_buffers,
            registered_bytes=m.registered_bytes,
            runs=m.runs,
            runs_in_flight=m.runs_in_flight,
        )


def format_gpu_uuid(raw):
    """nvidia-smi's form of a 16-byte CUDA device UUID: "GPU-" + 8-4-4-4-12
    lower-case hex digits."""
    digits = bytes(raw).hex()
    if len(digits) != 32:
        raise ValueError("a CUDA device UUID has 16 bytes, got %d" % (len(digits) // 2))
    return "GPU-%s-%s-%s-%s-%s" % (digits[0:8], digits[8:12], digits[12:16], digits[16:20],
                                   digits[20:32])


def daemon_ordinal_for_uuid(devices, uuid, fallback):
    """The daemon's ordinal of the GPU whose UUID is `uuid`.

    devices: Status.devices. `fallback` (the caller's own ordinal) when uuid
    is empty or the daemon reports no UUIDs (an older daemon, the CPU
    backend). FailedPreconditionError when it reports UUIDs and none matches.
    """
    if not uuid:
        return fallback
    seen = ["%d=%s" % (d.ordinal, d.uuid) for d in devices if d.uuid]
    for device in devices:
        if device.uuid and device.uuid.lower() == uuid.lower():
            return device.ordinal
    if not seen:
        return fallback
    raise _errors.FailedPreconditionError(
        "the daemon does not see this process's GPU %s (it sees %s); start it with a "
        "CUDA_VISIBLE_DEVICES that includes this GPU" % (uuid, ", ".join(seen)))


@dataclasses.dataclass(frozen=True)
class Status:
    """GetStatus: the daemon's version, backend, devices, store and buffers.

    backend_note: what the backend means for the configs (the CPU backend
    uses no GPU tuned configs). devices: every device served, each with its
    health and counts (a kerntune.Device). tuned_entries: the local store's
    entries served (the first device's; see Device for each); shipped_entries and
    shipped_config_files: those of the shipped config files for the GPU;
    stale_entries_skipped: entries left out for their kernel library version.
    max_request_bytes: the largest tensor a request may carry inline.
    open_queues: submission queues open, of every client.
    database_problem: set while the store is gone or cannot be read (why, and
    what is served meanwhile); empty otherwise.
    """

    version: str
    kernel_library_version: str
    backend: str
    backend_reason: str
    devices: List[Device]
    tuned_entries: int
    database_path: str
    database_data_version: int
    uptime_seconds: int
    registered_buffers: int
    registered_bytes: int
    buffer_owners: int
    open_ipc_mappings: int
    default_buffer_ttl_seconds: int
    cuda_ipc_supported: bool
    backend_note: str = ""
    shipped_entries: int = 0
    shipped_config_files: List[str] = dataclasses.field(default_factory=list)
    stale_entries_skipped: int = 0
    max_request_bytes: int = 0
    open_queues: int = 0
    database_problem: str = ""

    @classmethod
    def from_proto(cls, m):
        return cls(
            version=m.version,
            kernel_library_version=m.kernel_library_version,
            backend=m.backend,
            backend_reason=m.backend_reason,
            devices=[Device.from_proto(d) for d in m.devices],
            tuned_entries=m.tuned_entries,
            database_path=m.database_path,
            database_data_version=m.database_data_version,
            uptime_seconds=m.uptime_seconds,
            registered_buffers=m.registered_buffers,
            registered_bytes=m.registered_bytes,
            buffer_owners=m.buffer_owners,
            open_ipc_mappings=m.open_ipc_mappings,
            default_buffer_ttl_seconds=m.default_buffer_ttl_seconds,
            cuda_ipc_supported=m.cuda_ipc_supported,
            backend_note=m.backend_note,
            shipped_entries=m.shipped_entries,
            shipped_config_files=list(m.shipped_config_files),
            stale_entries_skipped=m.stale_entries_skipped,
            max_request_bytes=m.max_request_bytes,
            open_queues=m.open_queues,
            database_problem=m.database_problem,
        )


@dataclasses.dataclass(frozen=True)
class TunedEntry:
    """One tuned (op, dtype, rows, cols, inner) point the daemon serves.

    source: "tuned" (the local store) or "shipped" (a shipped config file).
    """

    op: str
    dtype: str
    rows: int
    cols: int
    config: LaunchConfig
    median_us: float
    kernel_version: str
    inner: int = 1
    source: str = "tuned"

    @classmethod
    def from_proto(cls, m):
        return cls(
            op=enum_name(pb.Op, m.op, "OP_"),
            dtype=enum_name(pb.DType, m.dtype, "DTYPE_"),
            rows=m.shape.rows,
            cols=m.shape.cols,
            config=LaunchConfig.from_proto(m.config),
            median_us=m.median_us,
            kernel_version=m.kernel_version,
            inner=max(m.shape.inner, 1),
            source=enum_name(pb.ConfigSource, m.source, "CONFIG_SOURCE_"),
        )


@dataclasses.dataclass(frozen=True)
class ConfigList:
    """ListConfigs: the daemon's GPU SKU and its tuned entries."""

    sku: GpuSku
    entries: List[TunedEntry]


@dataclasses.dataclass(frozen=True)
class BufferInfo:
    """A registration as the daemon sees it. kind: "cuda_ipc" or "host_shm"."""

    buffer_id: str
    kind: str
    device_ordinal: int
    size_bytes: int
    label: str
    ttl_seconds: int
    registered_unix_ms: int
    expires_unix_ms: int
    runs: int

    @classmethod
    def from_proto(cls, m):
        return cls(
            buffer_id=m.buffer_id,
            kind=enum_name(pb.BufferKind, m.kind, "BUFFER_KIND_"),
            device_ordinal=m.device_ordinal,
            size_bytes=m.size_bytes,
            label=m.label,
            ttl_seconds=m.ttl_seconds,
            registered_unix_ms=m.registered_unix_ms,
            expires_unix_ms=m.expires_unix_ms,
            runs=m.runs,
        )


@dataclasses.dataclass
class RunResult:
    """What Client.run returns.

    output: the result (a NumPy array, or the `out` given, or a new torch
    tensor), x's shape. mean / inv_std: LayerNorm's per-row float32
    statistics (inv_std: RMSNorm's 1/rms) when asked for, else None, of shape
    x.shape[:-1]. row_scale: ReduceScale's per-row scales, float32 of shape
    x.shape[:-1] + (1,) (x == output * row_scale); a dynamic quantization's
    scales (x.shape[:-1] + (1,) per row, + (cols / group_size,) per group;
    output ~= codes * scale); else None.
    kernel_time_us: on a GPU daemon, the kernel's time when run() was given
    time_kernel=True, and 0 otherwise and in stream (asynchronous) mode; on
    the CPU backend the reference's time, always.
    device_ordinal, device_uuid: the daemon's device that ran it (its
    ordinal as Status.devices lists it, and its "GPU-..." UUID); -1 and ""
    on the CPU backend.
    """

    output: object
    mean: object
    inv_std: object
    config: Optional[ConfigChoice] = None
    kernel_time_us: float = 0.0
    backend: str = ""
    row_scale: object = None
    device_ordinal: int = -1
    device_uuid: str = ""
