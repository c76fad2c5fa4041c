"""`WorkerConnection`: a blocking handle to one worker (``wool_connection``): idle, stop, close."""

from __future__ import annotations

import ctypes
import math
import types
import warnings
from collections.abc import Mapping

from . import _ffi
from ._convert import _c_seconds, _c_text, _channel_options
from ._credentials import WorkerCredentials
from ._errors import _check
from ._ffi import Library


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
        self._closed = False
        self.target = target
        self.secure = secure
        #: The channel options given (as passed to libwool); the others are Wool's defaults.
        self.channel_options: Mapping[str, object] = types.MappingProxyType(options)
        # An opaque value naming libwool's handle (never dereferenced here). libwool owns its
        # lifetime: `close` may free it while other threads are in calls on it, which finish;
        # a call that comes after is refused by libwool (WOOL_STATUS_INVALID_ARGUMENT), never
        # a crash. So no lock and no count: only whether this object has closed it.
        self._handle = handle

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
        self._call(self._library.wool_idle, deadline, ctypes.byref(seconds))
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
        self._call(self._library.wool_stop, grace_seconds, deadline)

    def close(self) -> None:
        """Release this handle (its share of the pooled channel; the worker keeps running).

        Idempotent and non-blocking, from any thread. Calls already in flight on other threads
        finish normally (libwool keeps what they need). Later calls raise `ValueError`.
        """
        if not self._closed:
            self._closed = True
            self._library.wool_free(self._handle)  # a second free, from a race, does nothing

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    def __enter__(self) -> WorkerConnection:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:
        if self._handle is not None and not self._closed:
            self._closed = True
            warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self, stacklevel=2)
            self._library.wool_free(self._handle)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        tls = "TLS" if self.secure else "plaintext"
        return f"<WorkerConnection target={self.target!r} {tls} {state}>"

    def _call(self, function, *args) -> None:
        """Run the library's `function` on the handle with `args`, raising its failure; a
        connection closed before (or, on another thread, during) the call's lookup of the
        handle raises `ValueError` saying so."""
        if self._closed:
            raise ValueError(f"operation on a closed {self!r}")
        status = function(self._handle, *args)
        if status != _ffi.OK:
            if status == _ffi.INVALID_ARGUMENT and self._closed:
                raise ValueError(f"operation on a closed {self!r}")
            _check(self._library, status)
