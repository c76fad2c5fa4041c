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

from . import _ffi
from ._connection import WorkerConnection
from ._credentials import WorkerCredentials
from ._errors import (
    Cancelled,
    HandshakeError,
    IdleUnavailable,
    LibraryPanic,
    RpcError,
    TransientRpcError,
    WoolError,
)
from ._ffi import Library, LibraryNotFound, load
from .fleet import (
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


def version() -> str:
    """The loaded libwool's version, e.g. ``"0.1.0"`` (loading it the default way if needed)."""
    return _ffi.default().version
