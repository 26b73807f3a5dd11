"""kerntune: the Python client of the kerntune daemon (kerntuned).

    import numpy as np, kerntune
    with kerntune.Client() as client:
        y = client.softmax(np.random.rand(8, 1000).astype(np.float32))

NumPy arrays go inline; kerntune.SharedArray (POSIX shared memory) and
PyTorch CUDA tensors (CUDA IPC) are read and written in place. See
README.md beside this package for the whole API. torch is never imported
by kerntune itself: CUDA tensors work when the caller has imported it.
"""

from kerntune._version import __version__
from kerntune._errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    KernTuneError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
)
from kerntune._quant import Quant, dequantize
from kerntune._shared import SharedArray, shared_array, shared_empty
from kerntune._types import (
    BufferInfo,
    ConfigChoice,
    ConfigList,
    Device,
    GpuSku,
    LaunchConfig,
    RunResult,
    Status,
    TunedEntry,
)
from kerntune._client import (
    DEFAULT_TIMEOUT_S,
    DTYPES,
    OPS,
    Buffer,
    Client,
    default_socket_path,
    default_target,
)

__all__ = [
    "Buffer",
    "BufferInfo",
    "Client",
    "ConfigChoice",
    "ConfigList",
    "DEFAULT_TIMEOUT_S",
    "DTYPES",
    "DeadlineExceededError",
    "Device",
    "FailedPreconditionError",
    "GpuSku",
    "InternalError",
    "InvalidArgumentError",
    "KernTuneError",
    "LaunchConfig",
    "NotFoundError",
    "OPS",
    "OutOfRangeError",
    "PermissionDeniedError",
    "Quant",
    "ResourceExhaustedError",
    "RunResult",
    "SharedArray",
    "Status",
    "TunedEntry",
    "UnavailableError",
    "UnimplementedError",
    "__version__",
    "default_socket_path",
    "default_target",
    "dequantize",
    "shared_array",
    "shared_empty",
]
