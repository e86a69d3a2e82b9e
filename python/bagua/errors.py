"""Exceptions: one class per bagua_status_t, each carrying the status and the library's message."""

# bagua_status_t values (include/bagua/bagua.h)
SUCCESS = 0
IN_PROGRESS = 1
ERR_INVALID_ARGUMENT = -1
ERR_INVALID_USAGE = -2
ERR_SYSTEM = -3
ERR_INTERNAL = -4
ERR_REMOTE = -5
ERR_TIMEOUT = -6
ERR_NOT_SUPPORTED = -7
ERR_CUDA = -8
ERR_ABORTED = -9


class BaguaError(Exception):
    """A call failed. `status` is the bagua_status_t value, `message` what bagua_get_last_error said."""

    status = ERR_INTERNAL
    status_name = "BAGUA_ERR_INTERNAL"

    def __init__(self, message, status=None, status_name=None):
        if status is not None:
            self.status = status
        if status_name is not None:
            self.status_name = status_name
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


class InvalidArgumentError(BaguaError, ValueError):
    """A bad argument: NULL, wrong dtype, size mismatch, non-contiguous buffer, bad enum."""

    status, status_name = ERR_INVALID_ARGUMENT, "BAGUA_ERR_INVALID_ARGUMENT"


class InvalidUsageError(BaguaError):
    """A call that is wrong in its context, e.g. ranks disagreeing about a collective."""

    status, status_name = ERR_INVALID_USAGE, "BAGUA_ERR_INVALID_USAGE"


class BaguaSystemError(BaguaError):
    status, status_name = ERR_SYSTEM, "BAGUA_ERR_SYSTEM"


class InternalError(BaguaError):
    status, status_name = ERR_INTERNAL, "BAGUA_ERR_INTERNAL"


class RemoteError(BaguaError):
    """A peer died or the network broke; the communicator is poisoned."""

    status, status_name = ERR_REMOTE, "BAGUA_ERR_REMOTE"


class BaguaTimeoutError(BaguaError, TimeoutError):
    """A wait ran past the communicator's timeout (BAGUA_TIMEOUT)."""

    status, status_name = ERR_TIMEOUT, "BAGUA_ERR_TIMEOUT"


class NotSupportedError(BaguaError):
    status, status_name = ERR_NOT_SUPPORTED, "BAGUA_ERR_NOT_SUPPORTED"


class CudaError(BaguaError):
    status, status_name = ERR_CUDA, "BAGUA_ERR_CUDA"


class AbortedError(BaguaError):
    """The communicator was aborted (bagua_comm_abort)."""

    status, status_name = ERR_ABORTED, "BAGUA_ERR_ABORTED"


_BY_STATUS = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        InvalidUsageError,
        BaguaSystemError,
        InternalError,
        RemoteError,
        BaguaTimeoutError,
        NotSupportedError,
        CudaError,
        AbortedError,
    )
}


def error_for(status, message):
    """The exception for a failed status; unknown values give a BaguaError with the number."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return BaguaError(message, status, f"status {status}")
    return cls(message)
