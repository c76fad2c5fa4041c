"""Poll a Wool worker's idle time and retire it, through libwool's C API (ctypes).

    import libwool

    with libwool.WorkerConnection("127.0.0.1:50051") as worker:
        if worker.idle(timeout=5.0) >= 300.0:   # seconds continuously idle
            worker.stop(grace=30.0)             # retire it, letting in-flight work finish

The names follow Wool's own client (``wool.WorkerConnection``, ``wool.WorkerCredentials``,
``wool.RpcError`` ...), but calls are synchronous: each blocks its thread, not the others
(ctypes releases the GIL during the call). The logic lives in libwool; this module only
converts arguments and results and turns status codes into exceptions:

==============================  ===========================================================
C status                        Python exception
==============================  ===========================================================
WOOL_STATUS_INVALID_ARGUMENT    `ValueError` (the library's message)
WOOL_STATUS_IDLE_UNAVAILABLE    `IdleUnavailable` (a `WoolError`, not an `RpcError`)
WOOL_STATUS_TRANSIENT           `TransientRpcError` (an `RpcError`)
WOOL_STATUS_HANDSHAKE           `HandshakeError` (a `TransientRpcError`)
WOOL_STATUS_RPC_ERROR           `RpcError`
WOOL_STATUS_PANIC               `LibraryPanic` (a `RuntimeError`: a bug in libwool)
WOOL_STATUS_CANCELLED           `Cancelled` (a `WoolError`; no blocking call gives it today)
==============================  ===========================================================

For a fleet, `libwool.fleet` (its names also here) finds a Wool pool's workers (`discover`,
`watch`: Wool's LocalDiscovery / LanDiscovery), reaches them (`connect_worker`), polls many
at once (`sweep`) and retires the idle ones by a policy (`retire_idle`, `RetirePolicy`).

For asyncio, `libwool.aio` has the same calls as coroutines (``await conn.idle()``), built on
libwool's completion queue: many polls in flight from one thread, and cancelling the awaiting
task resets the call's HTTP/2 stream. There a cancelled call is `asyncio.CancelledError`.

Channel settings (message size limits, HTTP/2 keepalive, concurrent streams, the connect
timeout) are keyword arguments of `WorkerConnection`, as Wool's ``ChannelOptions``. With the
default keepalive (a PING every 30 s, 30 s to answer) a call with no timeout to a worker that
froze without closing its connection ends with `TransientRpcError` instead of hanging.

After ``os.fork()`` (or ``multiprocessing`` with the ``"fork"`` start method) the child may use
the connections it inherited and make new ones: libwool builds the child a runtime and pool of
its own and redials, leaving the parent's untouched.

The library is found by `load`: an explicit path, else ``$LIBWOOL_PATH``, else the copy
bundled in this package by ``pip install bindings/python`` (from a checkout; needs Rust),
else, for the package used in place in a checkout, that repository's ``target/release`` then
``target/debug`` build (``cargo build -p libwool-capi``).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import numbers
import os
import threading
import types
import warnings
import weakref
from collections.abc import Iterator, Mapping

from . import _ffi
from ._ffi import Library, LibraryNotFound, load

if os.environ.get(_ffi.ENV_VAR) and not os.path.exists(os.environ[_ffi.ENV_VAR]):
    # An explicit choice that names nothing fails the import, naming the path: the library
    # itself loads on first use, and a later LibraryNotFound would point away from the cause.
    raise ImportError(
        f"libwool: ${_ffi.ENV_VAR}={os.environ[_ffi.ENV_VAR]!r}: no such file (it names the "
        f"libwool.so to load; unset it to use the library bundled in the package)",
        name="libwool",
        path=os.environ[_ffi.ENV_VAR],
    )

__all__ = [
    "Cancelled",
    "DiscoveredWorker",
    "DiscoveryEvent",
    "HandshakeError",
    "IdleUnavailable",
    "Library",
    "LibraryNotFound",
    "LibraryPanic",
    "RetireDecision",
    "RetirePolicy",
    "RpcError",
    "TransientRpcError",
    "Watch",
    "WoolError",
    "WorkerConnection",
    "WorkerCredentials",
    "connect_dns",
    "connect_worker",
    "discover",
    "discover_dns",
    "load",
    "retire_idle",
    "sweep",
    "version",
    "watch",
]

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


# ---------------------------------------------------------------- argument conversion


def _c_text(value: str | bytes | None, name: str) -> bytes | None:
    """Text for a `const char *`: str as UTF-8, bytes as given, None as NULL.

    Lone surrogates are passed through (surrogatepass) so that libwool itself rejects the
    non-UTF-8 result with its own message. A NUL cannot be passed (C would cut the text
    there), hence the one check made here.
    """
    if value is None:
        return None
    if isinstance(value, str):
        data = value.encode("utf-8", errors="surrogatepass")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    else:
        raise TypeError(f"{name} must be str or bytes, not {type(value).__name__}")
    if b"\0" in data:
        raise ValueError(f"{name} contains a NUL character")
    return data


def _c_path(value: str | bytes | os.PathLike | None, name: str) -> bytes | None:
    """A file system path for a `const char *` (os.fsencode: bytes as the OS sees them)."""
    if value is None:
        return None
    try:
        data = os.fsencode(value)
    except TypeError:
        raise TypeError(
            f"{name} must be a path (str, bytes or os.PathLike), not {type(value).__name__}"
        ) from None
    if b"\0" in data:
        raise ValueError(f"{name} contains a NUL character")
    return data


def _c_seconds(value: float | None, name: str, *, none_means: float | None) -> float:
    """Seconds as a C double. Range checks are libwool's (0, negative, NaN...), not ours."""
    if value is None and none_means is not None:
        return none_means
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    return float(value)


_C_TYPE_NAMES = {ctypes.c_size_t: "size_t", ctypes.c_uint32: "uint32_t", ctypes.c_uint16: "uint16_t"}


def _c_unsigned(value: int, name: str, c_type: type[ctypes._SimpleCData], *,
                what: str = "channel option") -> int:
    """An int for an unsigned C parameter (size_t, uint32_t, uint16_t); `what` names the kind
    of parameter in the messages.

    ctypes would silently wrap a value the C type cannot hold (-1 becoming SIZE_MAX, 2**32 a
    uint32_t 0), so such a value is refused here, naming the option as libwool would. Every
    value the type can hold goes to libwool, which alone decides the option's range (0 and
    too large ones included).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    value = int(value)
    maximum = 2 ** (8 * ctypes.sizeof(c_type)) - 1
    if value < 0:
        raise ValueError(f"{what} {name} must not be negative, got {value}")
    if value > maximum:
        raise ValueError(
            f"{what} {name} must be at most {maximum} "
            f"(a C {_C_TYPE_NAMES[c_type]}), got {value}"
        )
    return value


def _c_flag(value: bool, name: str) -> bool:
    """A C bool: True or False only (not 0/1 or other truthy values)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {type(value).__name__}")
    return value


# The channel options, in the order they are applied: keyword (which is also the option's
# name in libwool, the suffix of its wool_channel_options_set_* setter) -> conversion to C.
_CHANNEL_OPTIONS = {
    "max_receive_message_bytes": lambda v, n: _c_unsigned(v, n, ctypes.c_size_t),
    "max_send_message_bytes": lambda v, n: _c_unsigned(v, n, ctypes.c_size_t),
    "keepalive_interval": lambda v, n: _c_seconds(v, n, none_means=None),
    "keepalive_timeout": lambda v, n: _c_seconds(v, n, none_means=None),
    "keepalive_without_calls": _c_flag,
    "max_pings_without_data": lambda v, n: _c_unsigned(v, n, ctypes.c_uint32),
    "max_concurrent_streams": lambda v, n: _c_unsigned(v, n, ctypes.c_size_t),
    "connect_timeout": lambda v, n: _c_seconds(v, n, none_means=None),
}


def _channel_options(given: Mapping[str, object]) -> dict[str, object]:
    """The channel options given (not None), converted for C, in the order they are applied."""
    return {
        name: convert(given[name], name)
        for name, convert in _CHANNEL_OPTIONS.items()
        if given.get(name) is not None
    }


def _make_handle(credentials, options: dict, connect) -> tuple[Library, _ffi.ConnectionPtr]:
    """Make a connection handle: `connect(library, c_credentials, c_options, out)` runs the
    library's connect call with the credentials' handle (None for plaintext) and the channel
    options (None when none were given: Wool's defaults). Returns the library and the handle;
    raises as `_check`."""
    if credentials is not None and not isinstance(credentials, WorkerCredentials):
        raise TypeError(
            f"credentials must be WorkerCredentials or None, not {type(credentials).__name__}"
        )
    # Handles must be used with the library that made them.
    library = credentials._library if credentials is not None else _ffi.default()
    c_credentials = credentials._handle if credentials is not None else None
    handle = _ffi.ConnectionPtr()
    if not options:
        _check(library, connect(library, c_credentials, None, ctypes.byref(handle)))
        return library, handle
    c_options = _ffi.ChannelOptionsPtr()
    _check(library, library.wool_channel_options_new(ctypes.byref(c_options)))
    try:
        for name, value in options.items():
            setter = getattr(library, f"wool_channel_options_set_{name}")
            _check(library, setter(c_options, value))
        _check(library, connect(library, c_credentials, c_options, ctypes.byref(handle)))
    finally:
        library.wool_channel_options_free(c_options)  # the connection has a copy
    return library, handle


# ---------------------------------------------------------------- credentials


class WorkerCredentials:
    """TLS credentials for reaching TLS workers, like ``wool.WorkerCredentials``: the CA the
    worker's certificate must chain to and, for mutual TLS, this client's key and certificate.

    Make them with `from_pem` or `from_files` (``reloadable=True`` for files that are
    rotated: read again when they change); the PEM is checked there, so bad PEM fails at
    once with `ValueError`. A `WorkerConnection` keeps its own copy (of reloadable
    credentials: one that reads the same files); the native credentials are released when
    this object is garbage-collected.
    """

    def __init__(self, library: Library, handle: _ffi.CredentialsPtr, mutual: bool,
                 identity: str | None, reloadable: bool = False):
        """Internal: use `from_pem` or `from_files`."""
        self._library = library
        self._handle = handle
        #: True for mutual TLS (this client presents a certificate), False for one-way TLS.
        self.mutual = mutual
        #: The name the worker's certificate is verified against instead of the dialed host.
        self.identity = identity
        #: True when the files are read again when they change (``from_files(reloadable=True)``).
        self.reloadable = reloadable

    @classmethod
    def from_pem(
        cls,
        ca_pem: str | bytes,
        key_pem: str | bytes | None = None,
        cert_pem: str | bytes | None = None,
        mutual: bool = True,
        identity: str | None = None,
    ) -> WorkerCredentials:
        """Credentials from PEM text (str or bytes).

        :param ca_pem: one or more CA certificates the worker's certificate must chain to.
        :param key_pem: this client's private key, for mutual TLS (note: key before cert,
            as in Wool).
        :param cert_pem: this client's certificate chain, for mutual TLS.
        :param mutual: True = mutual TLS (key and certificate required); False = one-way
            TLS (the client only verifies the worker; key and certificate are ignored).
        :param identity: the subject-alternative name (DNS name or IP address) to verify the
            worker against instead of the dialed host; None or "" = the dialed host.
        :raises ValueError: libwool's message: no certificate or key in a PEM, mutual TLS
            without key or certificate, text not UTF-8, a bad identity, or a NUL in a text.
        :raises TypeError: a text that is neither str nor bytes.
        """
        library = _ffi.default()
        return cls._make(
            library,
            library.wool_credentials_from_pem,
            _c_text(ca_pem, "ca_pem"),
            _c_text(key_pem, "key_pem"),
            _c_text(cert_pem, "cert_pem"),
            mutual,
            identity,
        )

    @classmethod
    def from_files(
        cls,
        ca_path: str | os.PathLike[str],
        key_path: str | os.PathLike[str] | None = None,
        cert_path: str | os.PathLike[str] | None = None,
        mutual: bool = True,
        identity: str | None = None,
        *,
        reloadable: bool = False,
    ) -> WorkerCredentials:
        """As `from_pem`, reading the PEM from files (``ca_path``, and for mutual TLS
        ``key_path`` and ``cert_path``: key before cert, as in Wool).

        :param reloadable: False = the files are read once, now. True = they are read again
            when they change, as with Wool's ``WorkerCredentialsProvider(reloadable=True)``:
            for certificates rotated on disk (replace each file whole, by renaming a new file
            over it). At most once a second a call on a connection made with them looks at
            the files (``stat``), and when one changed reads them all again; the connection's
            next calls dial with the new material, and the pooled channel made with the old
            material is retired once the calls still running on it end. New material that
            fails the checks (a half-written file, a key that does not match its certificate)
            is refused and the previous material kept; it is tried again a second later.
            Mutual or one-way TLS stays as made.
        :raises ValueError: as `from_pem`, and when a file cannot be read (libwool's message
            names it); the files are read and checked now, reloadable or not.
        :raises TypeError: a path that is not str, bytes or os.PathLike.
        """
        library = _ffi.default()
        reloadable = bool(reloadable)
        return cls._make(
            library,
            library.wool_credentials_from_files_reloadable if reloadable
            else library.wool_credentials_from_files,
            _c_path(ca_path, "ca_path"),
            _c_path(key_path, "key_path"),
            _c_path(cert_path, "cert_path"),
            mutual,
            identity,
            reloadable,
        )

    @classmethod
    def _make(cls, library, make, ca, key, cert, mutual, identity,
              reloadable=False) -> WorkerCredentials:
        mutual = bool(mutual)
        if identity is not None and not isinstance(identity, str):
            raise TypeError(f"identity must be str or None, not {type(identity).__name__}")
        handle = _ffi.CredentialsPtr()
        status = make(ca, key, cert, mutual, _c_text(identity, "identity"), ctypes.byref(handle))
        _check(library, status)
        return cls(library, handle, mutual, identity, reloadable)

    def with_peers(self, *names: str) -> WorkerCredentials:
        """A copy of these credentials carrying a peers policy, as Wool's
        ``WorkerCredentialsProvider(peers=...)`` (``wool_credentials_with_peers``): discovery
        (`libwool.fleet.discover`, `libwool.fleet.connect_worker`) then admits a discovered
        worker only if it advertises one of `names` (each trimmed of surrounding whitespace),
        and verifies its certificate against that name unless these credentials carry an
        `identity`, which always wins. A worker advertising no name is refused. Unlike Wool,
        a blank name or no name at all is refused rather than leaving the policy unset.

        :raises ValueError: no name, more than 4096, or a name that is blank, longer than 253
            bytes or holds a NUL (libwool's message).
        :raises TypeError: a name that is not str.
        """
        if not names:
            raise ValueError("with_peers() needs at least one name")
        texts = [_c_text(_check_peer(name), "peer name") for name in names]
        array = (ctypes.c_char_p * len(texts))(*texts)
        handle = _ffi.CredentialsPtr()
        _check(self._library, self._library.wool_credentials_with_peers(
            self._handle, array, len(texts), ctypes.byref(handle)))
        made = type(self)(self._library, handle, self.mutual, self.identity, self.reloadable)
        made.peers = tuple(sorted({name.strip() for name in names}))
        return made

    #: The names of the peers policy (`with_peers`), or None.
    peers: tuple[str, ...] | None = None

    def __del__(self) -> None:
        # No call can be using the handle now: wool_connect runs while a WorkerConnection
        # under construction holds a reference to this object.
        handle = getattr(self, "_handle", None)
        if handle:
            self._handle = None
            self._library.wool_credentials_free(handle)

    def __repr__(self) -> str:
        kind = "mutual TLS" if self.mutual else "one-way TLS"
        extra = f", identity={self.identity!r}" if self.identity else ""
        extra += ", reloadable" if self.reloadable else ""
        return f"<WorkerCredentials {kind}{extra}>"


def _check_peer(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a peer name must be str, not {type(name).__name__}")
    return name


# ---------------------------------------------------------------- connection


class WorkerConnection:
    """A handle to one worker, like ``wool.WorkerConnection`` (idle and stop, synchronous).

    Lazy: making one does no I/O, so a worker that cannot be reached shows up on the first
    `idle` or `stop` as `TransientRpcError`. Handles to the same target with equal
    credentials and equal channel options share one pooled HTTP/2 channel inside libwool.

    Thread-safe: many threads may call `idle` (and `stop`) on one connection at once; each
    call blocks only its own thread. A blocked call cannot be interrupted (Ctrl-C is handled
    once it returns), so give a `timeout` where waiting forever is not wanted (or use
    `libwool.aio`, whose calls can be cancelled). Use it as a context manager, or call
    `close`; relying on garbage collection works but releases the channel at an
    unpredictable time (and emits a `ResourceWarning`, like an unclosed file).

    :param target: ``host:port``, ``dns:host:port``, ``dns:///host:port``,
        ``ipv4:address:port``, ``ipv6:[address]:port``, ``[v6address]:port`` or
        ``unix:path``.
    :param credentials: `WorkerCredentials` for a TLS worker; None = plaintext.

    Channel options, keyword-only, as Wool's ``ChannelOptions`` (libwool's
    ``wool_channel_options``). Each one left at None keeps Wool's default; the values are
    passed to libwool as they are, and libwool alone decides which are valid:

    :param max_receive_message_bytes: the largest message received, in bytes (Wool's
        ``max_receive_message_length``; default 100 MiB; 1 to 4294967295). A larger answer
        fails its call: `TransientRpcError` RESOURCE_EXHAUSTED by wool.h's contract (the
        library currently raises `RpcError` OUT_OF_RANGE instead).
    :param max_send_message_bytes: the largest message sent, in bytes (Wool's
        ``max_send_message_length``; default 100 MiB; 1 to 4294967295).
    :param keepalive_interval: seconds (a float) from one answered HTTP/2 keepalive PING to
        the next (Wool's ``keepalive_time_ms``, in seconds here; default 30.0; at least
        0.001). ``math.inf`` turns keepalive off: a call with no `timeout` to a worker that
        froze without closing its connection then blocks for ever.
    :param keepalive_timeout: seconds a keepalive PING may go unanswered before the
        connection is declared dead (Wool's ``keepalive_timeout_ms``, in seconds here;
        default 30.0; at least 0.001, finite). Its calls, even ones with no `timeout`, then
        raise `TransientRpcError` (UNAVAILABLE, saying the worker stopped answering keepalive
        pings), about `keepalive_interval` + `keepalive_timeout` after the worker froze; the
        next call dials anew.
    :param keepalive_without_calls: True or False: whether keepalive PINGs also go out while
        no call is open, so that a pooled connection to a frozen worker is noticed and
        dropped between polls (Wool's ``keepalive_permit_without_calls``; default True).
    :param max_pings_without_data: the most keepalive PINGs sent with no call started in
        between (Wool's ``max_pings_without_data``; default 2); 0 = no limit.
    :param max_concurrent_streams: the most calls open on the channel at once (Wool's
        ``max_concurrent_streams``; default 100; 1 to 2147483647); more wait their turn.
    :param connect_timeout: seconds (a float) allowed for establishing a connection: TCP,
        TLS and HTTP/2 handshakes, up to the worker's first HTTP/2 SETTINGS (libwool's own;
        Wool has no such option; default 20.0; at least 0.001); a worker that accepts the
        connection and never speaks HTTP/2 fails the call then (TransientRpcError,
        UNAVAILABLE). ``math.inf`` = none: only the call's `timeout` bounds it.

    :raises ValueError: libwool's message for a bad target (empty, no port, port out of
        range, unknown scheme, not UTF-8), or a NUL in it; for a refused channel option
        (0, negative, NaN, out of range), a message naming the option, e.g.
        ``"wool_channel_options_set_keepalive_timeout: channel option keepalive_timeout
        must be ..."``.
    :raises TypeError: `target` is not a str, `credentials` not `WorkerCredentials`, or a
        channel option of the wrong type (seconds must be int or float, counts and sizes
        int, `keepalive_without_calls` a bool); the message names the option.
    """

    _handle = None  # so that __del__ is safe when __init__ failed early

    def __init__(
        self,
        target: str,
        credentials: WorkerCredentials | None = None,
        *,
        max_receive_message_bytes: int | None = None,
        max_send_message_bytes: int | None = None,
        keepalive_interval: float | None = None,
        keepalive_timeout: float | None = None,
        keepalive_without_calls: bool | None = None,
        max_pings_without_data: int | None = None,
        max_concurrent_streams: int | None = None,
        connect_timeout: float | None = None,
    ):
        if not isinstance(target, str):
            raise TypeError(f"target must be str, not {type(target).__name__}")
        if credentials is not None and not isinstance(credentials, WorkerCredentials):
            raise TypeError(
                "credentials must be WorkerCredentials or None, "
                f"not {type(credentials).__name__}"
            )
        given = {
            "max_receive_message_bytes": max_receive_message_bytes,
            "max_send_message_bytes": max_send_message_bytes,
            "keepalive_interval": keepalive_interval,
            "keepalive_timeout": keepalive_timeout,
            "keepalive_without_calls": keepalive_without_calls,
            "max_pings_without_data": max_pings_without_data,
            "max_concurrent_streams": max_concurrent_streams,
            "connect_timeout": connect_timeout,
        }
        # Every conversion before anything is allocated: a TypeError leaks nothing.
        options = _channel_options(given)
        c_target = _c_text(target, "target")

        def connect(library, c_credentials, c_options, out):
            if c_options is None:
                return library.wool_connect(c_target, c_credentials, out)
            return library.wool_connect_with_options(c_target, c_credentials, c_options, out)

        library, handle = _make_handle(credentials, options, connect)
        self._adopt(library, handle, target, credentials is not None, options)

    def _adopt(self, library: Library, handle, target: str, secure: bool,
               options: dict) -> None:
        """Internal: become the connection owning `handle`, made by `library`."""
        self._library = library
        self._lock = threading.Lock()
        self._calls = 0  # calls in flight: the handle is freed only when none is
        self._closed = False
        self.target = target
        self.secure = secure
        #: The channel options given (as passed to libwool); the others are Wool's defaults.
        self.channel_options: Mapping[str, object] = types.MappingProxyType(options)
        self._handle = handle
        _live_connections.add(self)

    def idle(self, timeout: float | None = None) -> float:
        """Seconds the worker has been continuously idle; exactly 0.0 while any task is in
        flight on it. Blocks the calling thread (not others) until the worker answers.

        :param timeout: the call's deadline in seconds, positive; None = no deadline.
        :raises IdleUnavailable: the worker predates the idle RPC.
        :raises TransientRpcError: unreachable, shutting down, or the timeout passed
            (``code`` 14 UNAVAILABLE, 4 DEADLINE_EXCEEDED, 8 RESOURCE_EXHAUSTED).
        :raises HandshakeError: TLS failure (a `TransientRpcError`).
        :raises RpcError: any other gRPC failure.
        :raises ValueError: a timeout of 0, negative or NaN (libwool's message), or the
            connection is closed.
        """
        deadline = _c_seconds(timeout, "timeout", none_means=math.inf)
        seconds = ctypes.c_double()
        with self._in_flight() as handle:
            _check(self._library,
                   self._library.wool_idle(handle, deadline, ctypes.byref(seconds)))
        return seconds.value

    def stop(self, grace: float = 0.0, timeout: float | None = None) -> None:
        """Stop (retire) the worker: it refuses new tasks, lets in-flight ones run for
        `grace`, cancels the rest, and answers once drained. Returns after that answer.

        :param grace: seconds in-flight work may keep running: 0 = cancel it at once;
            positive = that long; ``math.inf`` or any negative value = wait for it however
            long it takes.
        :param timeout: the call's deadline in seconds, positive; None = no deadline. To see
            the answer it must exceed the grace.
        :raises TransientRpcError, HandshakeError, RpcError: as `idle` (a worker without the
            stop RPC gives `RpcError`).
        :raises ValueError: a NaN grace, a timeout of 0, negative or NaN (libwool's
            message), or the connection is closed.
        """
        grace_seconds = _c_seconds(grace, "grace", none_means=None)
        deadline = _c_seconds(timeout, "timeout", none_means=math.inf)
        with self._in_flight() as handle:
            _check(self._library, self._library.wool_stop(handle, grace_seconds, deadline))

    def close(self) -> None:
        """Release this handle (its share of the pooled channel; the worker keeps running).

        Idempotent and non-blocking. Calls already in flight on other threads finish
        normally; the handle is released when the last of them returns. Later calls raise
        `ValueError`.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            handle = self._take_handle_if_unused()
        if handle:
            self._library.wool_free(handle)

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    def __enter__(self) -> WorkerConnection:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:
        # Every call holds a reference to self while it runs, so none is in flight here.
        handle = self._handle
        if handle:
            self._handle = None
            warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self, stacklevel=2)
            self._library.wool_free(handle)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        tls = "TLS" if self.secure else "plaintext"
        return f"<WorkerConnection target={self.target!r} {tls} {state}>"

    @contextlib.contextmanager
    def _in_flight(self) -> Iterator[_ffi.ConnectionPtr]:
        """The live handle for one call; `close` meanwhile defers the free until it ends."""
        handle = self._begin_call()
        try:
            yield handle
        finally:
            self._end_call()

    def _begin_call(self) -> _ffi.ConnectionPtr:
        """Counts one call in flight and returns the live handle (`close` meanwhile defers the
        free); every call begun is ended by `_end_call`. Raises ValueError when closed."""
        with self._lock:
            if self._closed:
                raise ValueError(f"operation on a closed {self!r}")
            self._calls += 1
            return self._handle

    def _end_call(self) -> None:
        """Ends a call begun by `_begin_call`: frees the handle if `close` came meanwhile and
        this was the last call."""
        with self._lock:
            self._calls -= 1
            handle = self._take_handle_if_unused() if self._closed else None
        if handle:
            self._library.wool_free(handle)

    def _take_handle_if_unused(self):
        """With the lock held: detach and return the handle when no call is in flight."""
        if self._calls:
            return None
        handle, self._handle = self._handle, None
        return handle


# Every open WorkerConnection, for the fork handler below.
_live_connections: weakref.WeakSet[WorkerConnection] = weakref.WeakSet()


def _reset_connections_after_fork() -> None:
    """In a forked child: only the forking thread exists, so no call is in flight, whatever
    the parent's threads were doing. A connection's lock may have been held by one of them at
    the fork, and would then never be released: give each connection a fresh one. (libwool
    itself makes the child a runtime and pool of its own.)"""
    for conn in list(_live_connections):
        conn._lock = threading.Lock()
        conn._calls = 0
        if conn._closed:
            # Closed by the parent while a call was in flight: that call is not in this
            # process, so nobody would release the child's copy; drop it silently (it is
            # only memory, reclaimed when the child exits).
            conn._handle = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_connections_after_fork)


def version() -> str:
    """The loaded libwool's version, e.g. ``"0.1.0"`` (loading it the default way if needed)."""
    return _ffi.default().version


# The fleet calls (libwool.fleet), importable from here too. Last: fleet imports from above.
from .fleet import (  # noqa: E402
    DiscoveredWorker,
    DiscoveryEvent,
    RetireDecision,
    RetirePolicy,
    Watch,
    connect_dns,
    connect_worker,
    discover,
    discover_dns,
    retire_idle,
    sweep,
    watch,
)
