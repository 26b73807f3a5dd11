"""kerntune's exceptions: one class per gRPC status code the daemon answers.

Every error the client raises, whether the daemon refused a call or the
client refused it before sending (a float64 array, a 3-d array), is a
KernTuneError carrying the gRPC code and the message.
"""

import grpc


class KernTuneError(Exception):
    """A call failed. `code` is a grpc.StatusCode, `message` the daemon's text."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self):
        return "%s: %s" % (self.code.name, self.message)


class InvalidArgumentError(KernTuneError, ValueError):
    """A request field is wrong (dtype, shape, epsilon ...)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(KernTuneError, LookupError):
    """An unknown buffer id, or one that belongs to another process."""

    code = grpc.StatusCode.NOT_FOUND


class FailedPreconditionError(KernTuneError):
    """The call needs another state: e.g. CUDA IPC on the CPU backend or over TCP."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfRangeError(KernTuneError):
    """A tensor does not fit inside its registered buffer."""

    code = grpc.StatusCode.OUT_OF_RANGE


class ResourceExhaustedError(KernTuneError):
    """A limit of the daemon, e.g. --max_request_bytes."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(KernTuneError, ConnectionError):
    """The daemon cannot be reached, or is shutting down."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(KernTuneError, TimeoutError):
    """The call took longer than the client's timeout."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class UnimplementedError(KernTuneError):
    """The daemon does not serve this RPC (an older kerntuned)."""

    code = grpc.StatusCode.UNIMPLEMENTED


class PermissionDeniedError(KernTuneError, PermissionError):
    code = grpc.StatusCode.PERMISSION_DENIED


class InternalError(KernTuneError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        FailedPreconditionError,
        OutOfRangeError,
        ResourceExhaustedError,
        UnavailableError,
        DeadlineExceededError,
        UnimplementedError,
        PermissionDeniedError,
        InternalError,
    )
}


def error_for(code, message):
    """The KernTuneError subclass instance for a grpc.StatusCode."""
    cls = _BY_CODE.get(code, KernTuneError)
    return cls(message, code=code)


def from_rpc_error(error):
    """Converts a grpc.RpcError raised by a unary call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return error_for(code, details or "")
