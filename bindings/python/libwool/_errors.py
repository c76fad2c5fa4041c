"""The exceptions of libwool's Python binding and the one mapping of a C status to them
(`_error`, `_check`): shared by the blocking calls, `libwool.fleet` and `libwool.aio`."""

from __future__ import annotations

from . import _ffi
from ._ffi import Library

# gRPC status code names, by number (the gRPC specification's fixed table).
_GRPC_CODE_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)  # fmt: skip


# ---------------------------------------------------------------- exceptions


class _CallFailure:
    """What a failed call to a worker carries: the gRPC code and the library's message."""

    #: The C status this class stands for.
    status = ""

    def __init__(self, code: int = -1, details: str = ""):
        #: The gRPC status code (0..16), or -1 when the failure involved no RPC status.
        self.code = code
        #: The library's message, e.g. ``"wool_idle: tcp connect error: ..."``.
        self.details = details
        super().__init__(code, details)  # args kept simple, so that pickling round-trips

    @property
    def code_name(self) -> str | None:
        """The gRPC code's name, e.g. ``"UNAVAILABLE"``; None without a code."""
        if 0 <= self.code < len(_GRPC_CODE_NAMES):
            return _GRPC_CODE_NAMES[self.code]
        return None

    def __str__(self) -> str:
        name = self.code_name
        return f"{name}: {self.details}" if name else self.details


class WoolError(Exception):
    """Base of the failures that say nothing about a worker's health (as ``wool.WoolError``)."""


class IdleUnavailable(_CallFailure, WoolError):
    """The worker predates the idle RPC (it answered gRPC UNIMPLEMENTED, code 12).

    An absent capability, not an RPC-health fault: like Wool's, it is not an `RpcError`, so
    ``except RpcError`` does not catch it. Treat idle reporting as unavailable for that worker.
    """

    status = "WOOL_STATUS_IDLE_UNAVAILABLE"


class RpcError(_CallFailure, Exception):
    """A call to a worker failed non-transiently (any gRPC failure not classified below).

    As in Wool, the worker is unhealthy: evict it. Attributes: `code` (int gRPC code or -1),
    `code_name`, `details` (the library's message). ``str(e)`` is ``"CODE_NAME: details"``.
    """

    status = "WOOL_STATUS_RPC_ERROR"


class TransientRpcError(RpcError):
    """The worker could not be reached in time or is shutting down (UNAVAILABLE,
    DEADLINE_EXCEEDED, including this call's own timeout, or RESOURCE_EXHAUSTED).

    Skip the worker for now; keep it.
    """

    status = "WOOL_STATUS_TRANSIENT"


class HandshakeError(TransientRpcError):
    """TLS, mutual-TLS or identity failure seen by this client: a wrong certificate authority,
    a worker certificate not valid for the name dialed (or `identity`), plaintext against TLS.

    Transient, as in Wool: credentials may rotate out of band. A worker rejecting *this
    client's* certificate may instead look like a plain `TransientRpcError` (TLS 1.3 reports
    that rejection after the handshake completed locally).
    """

    status = "WOOL_STATUS_HANDSHAKE"


class LibraryPanic(RuntimeError):
    """A bug inside libwool, caught at its C boundary (WOOL_STATUS_PANIC); please report it.
    The message is the panic's."""

    status = "WOOL_STATUS_PANIC"


class Cancelled(_CallFailure, WoolError):
    """The call was cancelled by its caller before it completed (WOOL_STATUS_CANCELLED, gRPC
    code 1 CANCELLED): its HTTP/2 stream was reset. Says nothing about the worker's health.

    Only calls started on a completion queue can be cancelled (``wool_cancel``), so the
    blocking `WorkerConnection.idle` and `stop` never raise it today; it exists so that the
    status has a name. `libwool.aio` turns a cancelled call into `asyncio.CancelledError`
    instead, which is what cancelling an awaiting task gives in asyncio.
    """

    status = "WOOL_STATUS_CANCELLED"


_ERRORS: dict[int, type[_CallFailure]] = {
    _ffi.IDLE_UNAVAILABLE: IdleUnavailable,
    _ffi.TRANSIENT: TransientRpcError,
    _ffi.HANDSHAKE: HandshakeError,
    _ffi.RPC_ERROR: RpcError,
    _ffi.CANCELLED: Cancelled,
}


def _error(library: Library, status: int, message: str, code: int) -> Exception:
    """The exception for a failed `status` with its message and gRPC code (or -1).

    Shared by the blocking calls (which read the thread's last error) and `libwool.aio`
    (which reads them from a queue's completion), so both raise the same classes.
    """
    if status == _ffi.INVALID_ARGUMENT:
        return ValueError(message)
    if status == _ffi.PANIC:
        return LibraryPanic(message)
    error = _ERRORS.get(status)
    if error is None:
        return RuntimeError(
            f"libwool returned an unknown status {status} ({library.status_name(status)}): "
            f"{message}"
        )
    return error(code, message)


def _check(library: Library, status: int) -> None:
    """Raise the exception for a failed `status`, reading the calling thread's last error."""
    if status == _ffi.OK:
        return
    message, code = library.last_error()  # thread-local: same thread, right after the call
    raise _error(library, status, message, code)
