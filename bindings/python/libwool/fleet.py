"""Fleet calls of libwool: find a pool's workers, follow them, poll and retire many at once.

    from libwool import fleet

    workers = fleet.discover("batch")                    # Wool's LocalDiscovery("batch")
    connections = [fleet.connect_worker(w) for w in workers]
    readings = fleet.sweep(connections, timeout=5.0)     # floats or exceptions, in order
    policy = fleet.RetirePolicy(idle_threshold=300.0)    # grace 30 s, stop timeout 60 s
    for worker, decision in zip(workers, fleet.retire_idle(connections, policy)):
        print(worker.address, decision.reason, decision.stopped)

    with fleet.watch("batch") as events:                 # joins, changes and leaves
        for event in events:
            print(event.type, event.worker.address)

Thin wrappers of the C API's fleet calls (``wool_discover``, ``wool_discover_dns``, ``wool_watch_*``,
``wool_connect_worker``, ``wool_idle_many_start``, ``wool_retire_idle``): every decision is
libwool's, this module only converts arguments and results. Failures are the classes of
`libwool` (a bad argument is `ValueError`, a worker's failure `TransientRpcError` and the
others). The calls block their thread (not others: ctypes releases the GIL).

The LAN backend (``lan=True``, Wool's ``LanDiscovery``: DNS-SD over multicast DNS) is the
same calls; the local one (the default, Wool's ``LocalDiscovery``) reads the shared-memory
registry a Wool pool publishes on this host.
"""

from __future__ import annotations

import ctypes
import json
import math
import numbers
import threading
import time
import types
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Union

from . import _ffi
from ._connection import WorkerConnection, _make_handle
from ._convert import _CHANNEL_OPTIONS, _c_seconds, _c_text, _c_unsigned, _channel_options
from ._credentials import WorkerCredentials
from ._errors import _check, _error
from ._ffi import Library

__all__ = [
    "DiscoveredWorker",
    "DiscoveryEvent",
    "RetireDecision",
    "RetirePolicy",
    "Watch",
    "connect_dns",
    "connect_worker",
    "discover",
    "discover_dns",
    "retire_idle",
    "sweep",
    "watch",
]


# ---------------------------------------------------------------- discovery


@dataclass(frozen=True)
class DiscoveredWorker:
    """One worker of a pool as its discovery record publishes it (Wool's ``WorkerMetadata``,
    libwool's ``wool_worker_info``). Pass it to `connect_worker` to reach it."""

    #: The worker's UUID, hyphenated.
    uid: str
    #: Where it listens, ``"host:port"``: a target for `libwool.WorkerConnection`.
    address: str
    #: Its process id on its host.
    pid: int = 0
    #: The Wool version it runs.
    version: str = ""
    #: Its tags, sorted.
    tags: tuple[str, ...] = ()
    #: Its extra metadata (read-only).
    extra: Mapping[str, str] = field(default_factory=lambda: types.MappingProxyType({}),
                                     hash=False)
    #: Whether it serves TLS (`connect_worker` then needs credentials).
    secure: bool = False
    #: The name its certificate is issued for; None when it advertises none.
    identity: str | None = None
    #: The admission gate's verdict (as Wool's ``WorkerProxy``'s ``_incompatibility_reason``)
    #: for the credentials `discover` was given: None when admitted, else ``"security"``,
    #: ``"version"`` or ``"identity"``. `connect_worker` refuses a refused worker.
    refusal: str | None = None
    #: Why, e.g. ``identity "w2" (accepted peers: w1)``; "" when admitted.
    refusal_reason: str = ""

    @classmethod
    def _from_c(cls, info: _ffi.wool_worker_info) -> DiscoveredWorker:
        def text(value: bytes | None) -> str:
            return (value or b"").decode("utf-8")

        return cls(
            uid=text(info.uid),
            address=text(info.address),
            pid=int(info.pid),
            version=text(info.version),
            tags=tuple(json.loads(text(info.tags_json) or "[]")),
            extra=types.MappingProxyType(dict(json.loads(text(info.extra_json) or "{}"))),
            secure=bool(info.secure),
            identity=text(info.identity) or None,
            refusal=_ffi.DISCOVERY_REFUSALS.get(int(info.refusal), f"refusal {info.refusal}"),
            refusal_reason=text(info.refusal_reason),
        )


def _backend(lan: bool) -> int:
    if not isinstance(lan, bool):
        raise TypeError(f"lan must be True or False, not {type(lan).__name__}")
    return _ffi.DISCOVERY_LAN if lan else _ffi.DISCOVERY_LOCAL


def discover(namespace: str, *, lan: bool = False, listen: float | None = None,
             credentials: WorkerCredentials | None = None) -> list[DiscoveredWorker]:
    """The workers of the pool published under `namespace`, sorted by address, as
    ``wool_discover_admitted``: the shared-memory registry on this host (a namespace no pool
    uses lists as empty), or with ``lan=True`` DNS-SD answers gathered for `listen` seconds.
    Records that cannot be read (half-written, foreign) are skipped. Blocks the thread.
    Each worker's ``refusal`` is the admission gate's verdict for a caller holding
    `credentials` (None = none): with credentials only ``secure`` workers are admitted,
    without only plaintext ones; then a compatible version; then, under a peers policy
    (`libwool.WorkerCredentials.with_peers`), an accepted advertised name.

    :param namespace: the pool's namespace, as given to Wool's ``LocalDiscovery`` /
        ``LanDiscovery``.
    :param lan: False = the local registry (`listen` ignored); True = multicast DNS.
    :param listen: seconds to gather LAN answers; None = libwool's default (1.5 s).
    :raises ValueError: an empty namespace, one with a NUL (or, locally, a ``/``), a
        negative, NaN or infinite `listen` (libwool's message).
    :raises TransientRpcError: the registry cannot be read, or multicast DNS cannot start.
    :raises TypeError: a namespace that is not str, `lan` not a bool, `listen` not a number.
    """
    backend = _backend(lan)
    c_namespace = _c_text(_check_type(namespace, str, "namespace"), "namespace")
    seconds = _c_seconds(listen, "listen", none_means=0.0)
    if credentials is not None:
        _check_type(credentials, WorkerCredentials, "credentials")
    library = _ffi.default()
    listing = _ffi.WorkerListPtr()
    c_credentials = credentials._handle if credentials is not None else None
    _check(library, library.wool_discover_admitted(c_namespace, backend, seconds, c_credentials,
                                                   ctypes.byref(listing)))
    return _take_workers(library, listing)


def _workers_of(library, listing) -> list[DiscoveredWorker]:
    """Every record of a ``wool_worker_list``, copied."""
    return [
        DiscoveredWorker._from_c(library.wool_worker_list_get(listing, i).contents)
        for i in range(library.wool_worker_list_count(listing))
    ]


def _take_workers(library, listing) -> list[DiscoveredWorker]:
    """Every record of a ``wool_worker_list``, copied; the list is freed."""
    try:
        return _workers_of(library, listing)
    finally:
        library.wool_worker_list_free(listing)


def _list_dns(name: str, port: int, timeout: float | None, credentials):
    """Runs ``wool_discover_dns`` and returns the library and the list handle (the caller frees
    it with ``wool_worker_list_free``)."""
    c_name = _c_text(_check_type(name, str, "name"), "name")
    port = _c_unsigned(port, "port", ctypes.c_uint16, what="the")  # libwool refuses 0
    seconds = _c_seconds(timeout, "timeout", none_means=0.0)
    if credentials is not None:
        _check_type(credentials, WorkerCredentials, "credentials")
    library = credentials._library if credentials is not None else _ffi.default()
    c_credentials = credentials._handle if credentials is not None else None
    listing = _ffi.WorkerListPtr()
    _check(library, library.wool_discover_dns(c_name, port, seconds, c_credentials,
                                              ctypes.byref(listing)))
    return library, listing


def discover_dns(name: str, port: int, *, timeout: float | None = None,
                 credentials: WorkerCredentials | None = None) -> list[DiscoveredWorker]:
    """The workers at every address the DNS name `name` resolves to (A and AAAA records, e.g.
    a Kubernetes headless Service), each at `port`, sorted by address, as
    ``wool_discover_dns``. A name that exists with no A/AAAA records lists as empty; one that
    does not exist (NXDOMAIN) raises. Blocks the thread.
    A DNS record tells only the address: ``identity`` is `name`, ``secure`` False, ``version``
    empty; ``refusal`` is the admission gate's verdict for `credentials` (a peers policy is
    applied to `name`; the credentials decide TLS). Reach the admitted ones with
    `connect_dns` (`connect_worker` refuses DNS records, as ``wool_connect_worker`` does).

    :param timeout: seconds to wait for the resolver; None = libwool's default (5 s).
    :raises ValueError: a `name` that is not a DNS name (e.g. with a ``:port``), a port
        outside 1-65535, a negative, NaN or infinite `timeout` (libwool's message).
    :raises TransientRpcError: the name does not exist (the message says "NAME does not
        resolve"), the resolver configuration cannot be read, the lookup fails otherwise or
        times out, more than 10,000 addresses.
    :raises TypeError: `name` not str, `port` not int, `credentials` not `WorkerCredentials`.
    """
    return _take_workers(*_list_dns(name, port, timeout, credentials))


def connect_dns(name: str, port: int, *, timeout: float | None = None,
                credentials: WorkerCredentials | None = None,
                **options) -> list[WorkerConnection]:
    """Connections to the workers `discover_dns` lists that the admission gate admits, in
    address order, as ``wool_discover_dns`` then ``wool_worker_list_connect`` for each: with
    credentials each is reached over TLS and its certificate verified against `name` unless
    the credentials name another. Refused workers are left out (`discover_dns` says why).
    No I/O beyond the lookup; pass the result to `sweep` or `retire_idle`.

    :param options: the channel options of `libwool.WorkerConnection` (keyword arguments).
    :raises: as `discover_dns`; ValueError or TypeError for a refused or unknown channel
        option.
    """
    unknown = set(options) - set(_channel_option_names())
    if unknown:
        raise TypeError(f"connect_dns() got unexpected keyword arguments: {sorted(unknown)}")
    converted = _channel_options(options)
    library, listing = _list_dns(name, port, timeout, credentials)
    connections = []
    try:
        for i, worker in enumerate(_workers_of(library, listing)):
            if worker.refusal is not None:
                continue

            def connect(lib, c_credentials, c_options, out, index=i):
                return lib.wool_worker_list_connect(listing, index, c_credentials, c_options, out)

            _, handle = _make_handle(credentials, converted, connect)
            conn = WorkerConnection.__new__(WorkerConnection)
            conn._adopt(library, handle, worker.address, credentials is not None, converted)
            connections.append(conn)
    finally:
        library.wool_worker_list_free(listing)
    return connections


def connect_worker(worker: DiscoveredWorker, credentials: WorkerCredentials | None = None,
                   **options) -> WorkerConnection:
    """A `libwool.WorkerConnection` to a discovered worker, as ``wool_connect_worker`` and
    Wool's ``WorkerProxy`` reach a worker they admitted: the worker must pass the admission
    gate for `credentials` (see `discover`); with credentials it is reached over TLS with
    them (never in plaintext because the record says so), verified against the credentials'
    identity when set, else, under a peers policy, ``worker.identity``, else the address
    (with no policy ``worker.identity`` is ignored). Only ``address``, ``version``,
    ``secure`` and ``identity`` are read, so a hand-made `DiscoveredWorker` works too. No I/O.

    :param options: the channel options of `libwool.WorkerConnection` (keyword arguments:
        ``keepalive_interval``, ``connect_timeout``, ...).
    :raises ValueError: the admission gate refuses the worker (the message gives the
        refusal), an address that is not a target, a name to verify that is neither a DNS
        name nor an IP address, a refused channel option (libwool's message), or a NUL in a
        text.
    :raises TypeError: `worker` not a `DiscoveredWorker`, `credentials` not
        `WorkerCredentials`, an unknown or mistyped channel option.
    """
    _check_type(worker, DiscoveredWorker, "worker")
    unknown = set(options) - set(_channel_option_names())
    if unknown:
        raise TypeError(f"connect_worker() got unexpected keyword arguments: {sorted(unknown)}")
    converted = _channel_options(options)
    address = _c_text(_check_type(worker.address, str, "worker.address"), "worker.address")
    identity = _c_text(worker.identity or "", "worker.identity")
    version = _c_text(_check_type(worker.version, str, "worker.version"), "worker.version")
    info = _ffi.wool_worker_info(address=address, identity=identity, version=version,
                                 secure=bool(worker.secure))

    def connect(library, c_credentials, c_options, out):
        return library.wool_connect_worker(ctypes.byref(info), c_credentials, c_options, out)

    library, handle = _make_handle(credentials, converted, connect)
    conn = WorkerConnection.__new__(WorkerConnection)
    conn._adopt(library, handle, worker.address, bool(worker.secure), converted)
    return conn


def _channel_option_names() -> Iterable[str]:
    return _CHANNEL_OPTIONS.keys()


# ---------------------------------------------------------------- watches

_EVENT_TYPES = {
    _ffi.DISCOVERY_EVENT_ADDED: "worker-added",
    _ffi.DISCOVERY_EVENT_UPDATED: "worker-updated",
    _ffi.DISCOVERY_EVENT_DROPPED: "worker-dropped",
}

#: The longest one ``wool_watch_next`` waits, so that Ctrl-C and `Watch.close` are noticed.
_WATCH_SLICE = 0.1


@dataclass(frozen=True)
class DiscoveryEvent:
    """One change in a watched pool, named as Wool's ``DiscoveryEvent.type``."""

    #: ``"worker-added"`` (also for each worker present when the watch started),
    #: ``"worker-updated"`` (its metadata changed) or ``"worker-dropped"`` (it left; `worker`
    #: is its last known metadata).
    type: str
    #: The worker.
    worker: DiscoveredWorker


class Watch:
    """A running watch over a pool (``wool_watch``): a library thread follows the pool and
    queues its events until `next` takes them. Iterate over it for events until it is
    closed; use it as a context manager, or call `close`. Thread-safe: each event goes to one
    caller."""

    _handle = None  # so that __del__ is safe when __init__ failed early

    def __init__(self, namespace: str, *, lan: bool = False,
                 credentials: WorkerCredentials | None = None):
        """As `watch`."""
        backend = _backend(lan)
        c_namespace = _c_text(_check_type(namespace, str, "namespace"), "namespace")
        if credentials is not None:
            _check_type(credentials, WorkerCredentials, "credentials")
        library = _ffi.default()
        handle = _ffi.WatchPtr()
        c_credentials = credentials._handle if credentials is not None else None
        _check(library, library.wool_watch_new_admitted(c_namespace, backend, c_credentials,
                                                        ctypes.byref(handle)))
        self._library = library
        self._lock = threading.Lock()  # held around wool_watch_next; close frees under it
        self._closed = False
        #: The namespace watched.
        self.namespace = namespace
        #: Whether it browses the LAN (multicast DNS) rather than this host's registry.
        self.lan = lan
        self._handle = handle

    def next(self, timeout: float | None = None) -> DiscoveryEvent | None:
        """The next event, waiting up to `timeout` seconds (None = until one comes); None
        when nothing happened in time. Waits in libwool (``wool_watch_next``) in slices of at
        most 0.1 s, so Ctrl-C and `close` from another thread are noticed between them.

        :raises ValueError: a negative or NaN timeout (libwool's message), or the watch is
            closed.
        :raises TransientRpcError: the watch has ended (its discovery backend stopped).
        """
        seconds = _c_seconds(timeout, "timeout", none_means=math.inf)
        if not seconds >= 0:  # negative or NaN: libwool refuses it with its message
            return self._next_within(seconds)
        end = time.monotonic() + seconds
        while True:
            # A watch that has ended raises TransientRpcError (its backend stopped).
            left = end - time.monotonic()
            event = self._next_within(max(0.0, min(_WATCH_SLICE, left)))
            if event is not None or left <= _WATCH_SLICE:
                return event

    def _next_within(self, seconds: float) -> DiscoveryEvent | None:
        with self._lock:
            if self._closed or not self._handle:
                raise ValueError(f"operation on a closed {self!r}")
            kind = ctypes.c_int()
            info = _ffi.WorkerInfoPtr()
            _check(self._library, self._library.wool_watch_next(
                self._handle, seconds, ctypes.byref(kind), ctypes.byref(info)))
            if kind.value == _ffi.DISCOVERY_EVENT_NONE or not info:
                return None
            # The worker lives until the next wool_watch_next: copy it under the lock.
            return DiscoveryEvent(_EVENT_TYPES[kind.value],
                                  DiscoveredWorker._from_c(info.contents))

    def __iter__(self) -> Iterator[DiscoveryEvent]:
        """Events as they come, until the watch is closed."""
        while True:
            try:
                event = self.next(timeout=_WATCH_SLICE)
            except ValueError:
                if self._closed:
                    return
                raise
            if event is not None:
                yield event

    def close(self) -> None:
        """Stop the watch and release it (``wool_watch_free``). A `next` waiting in another
        thread raises `ValueError` (iteration ends) within about 0.1 s. Idempotent."""
        self._closed = True
        with self._lock:
            handle, self._handle = self._handle, None
        if handle:
            self._library.wool_watch_free(handle)

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:
        handle = self._handle
        if handle:
            self._handle = None
            warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self, stacklevel=2)
            self._library.wool_watch_free(handle)

    def __repr__(self) -> str:
        where = "LAN" if getattr(self, "lan", False) else "local"
        state = "closed" if self._closed else "open"
        return f"<Watch namespace={getattr(self, 'namespace', None)!r} {where} {state}>"


def watch(namespace: str, *, lan: bool = False,
          credentials: WorkerCredentials | None = None) -> Watch:
    """Start watching the pool published under `namespace` (backends as `discover`), as
    ``wool_watch_new_admitted``: the watch first reports every worker present
    (``"worker-added"``), then each join, change and leave; each event's worker carries the
    admission gate's verdict for a caller holding `credentials` (``refusal``,
    ``refusal_reason``), as `discover`.

    :raises ValueError: as `discover`.
    :raises TransientRpcError: the watch cannot start.
    """
    return Watch(namespace, lan=lan, credentials=credentials)


# ---------------------------------------------------------------- sweeps and retire rounds


def _connections(connections: Iterable) -> list[WorkerConnection]:
    """The blocking connections of `connections` (`_blocking_of` each)."""
    return [connection if type(connection) is WorkerConnection else _blocking_of(connection)
            for connection in connections]


def _blocking_of(connection) -> WorkerConnection:
    """The blocking `WorkerConnection` of `connection`: itself, or the one a
    `libwool.aio.WorkerConnection` wraps (its ``blocking``; read without importing
    `libwool.aio`, which imports this module)."""
    if isinstance(connection, WorkerConnection):
        return connection
    blocking = getattr(connection, "blocking", None)
    if isinstance(blocking, WorkerConnection):
        return blocking
    raise TypeError(
        "connections must be libwool.aio.WorkerConnection or libwool.WorkerConnection, "
        f"not {type(connection).__name__}"
    )


def _count(value: int, name: str) -> int:
    """An int for a size_t: negative and too large ones are refused here (ctypes would wrap
    them); every other value goes to libwool, which decides (0 included)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    value = int(value)
    if not 0 <= value <= _ffi.SIZE_MAX:
        raise ValueError(f"{name} must be from 0 to {_ffi.SIZE_MAX}, got {value}")
    return value


def _library_of(conns: list[WorkerConnection]) -> Library:
    """The one library of `conns` (the default one for none)."""
    libraries = {c._library for c in conns}  # a Library hashes by identity
    if len(libraries) > 1:
        raise ValueError("connections made with different libwool libraries cannot be mixed")
    return next(iter(libraries), None) or _ffi.default()


def _handles(conns: list[WorkerConnection]):
    """The handles of `conns` for one call, and their library. A connection closed before the
    call (or during it, on another thread) is refused in its slot by libwool; one closed after
    the call has started is polled all the same (libwool keeps what the call needs)."""
    library = _library_of(conns)
    array = (_ffi.ConnectionPtr * max(len(conns), 1))()
    array[:len(conns)] = [conn._handle for conn in conns]  # one slice: half a loop's time
    return library, array


def _closed_error(conn: WorkerConnection, status: int) -> Exception | None:
    """The ValueError of a slot libwool refused because its connection was closed."""
    if status == _ffi.INVALID_ARGUMENT and conn.closed:
        return ValueError(f"operation on a closed {conn!r}")
    return None


def _slot_error(library: Library, status: int, code: int, call: str,
                message: bytes = b"") -> Exception | None:
    if status == _ffi.OK:
        return None
    text = message.decode("utf-8", "replace") or f"{call}: the worker's call failed"
    return _error(library, status, text, code)


def _start_sweep(conns: list[WorkerConnection], seconds: float, most: int, queue, tag: int,
                 call) -> tuple[Library, ctypes.Array]:
    """Starts one sweep of `conns` (``wool_idle_many_start``) on `queue` (a ``wool_queue`` of
    their library), tagged `tag`, its id written to `call` (a ``c_uint64``). Returns the
    library and the results array (the library writes it when the sweep completes: keep it
    alive until the completion is collected, or ``wool_cancel`` / ``wool_queue_free`` has
    returned). Raises as the library refuses the arguments."""
    count = len(conns)
    results = (_ffi.wool_poll_result * max(count, 1))()
    library, array = _handles(conns)
    _check(library, library.wool_idle_many_start(array, count, seconds, most, queue, tag,
                                                 results, ctypes.byref(call)))
    return library, results


# A sweep's results array read by column (every slot's status, every slot's seconds: one
# list each, made by memoryview in C) rather than as a ctypes structure object a worker.
_RESULT_SIZE = ctypes.sizeof(_ffi.wool_poll_result)
_STATUS_OFFSET = _ffi.wool_poll_result.status.offset
_SECONDS_OFFSET = _ffi.wool_poll_result.seconds.offset
if (_RESULT_SIZE % 8, _SECONDS_OFFSET % 8, _STATUS_OFFSET % 4) != (0, 0, 0):  # pragma: no cover
    raise ImportError("libwool.fleet: unexpected wool_poll_result layout")


def _result_column(results, code: str, offset: int, count: int) -> list:
    """Field `offset` (struct format `code`: ``"i"`` or ``"d"``) of the first `count` slots
    of `results` (a ``wool_poll_result`` array), as a list."""
    view = memoryview(results).cast("B").cast(code)
    step = _RESULT_SIZE // view.itemsize
    first = offset // view.itemsize
    return view[first:first + step * count:step].tolist()


def _sweep_results(library: Library, results,
                   conns: list[WorkerConnection]) -> list[Union[float, Exception]]:
    """A completed sweep's results: the idle seconds, or the exception `WorkerConnection.idle`
    would have raised, with the library's message for that worker. Read from the array by
    column; only a failed slot is read as a structure (for its message)."""
    count = len(conns)
    out: list = _result_column(results, "d", _SECONDS_OFFSET, count)
    statuses = _result_column(results, "i", _STATUS_OFFSET, count)
    if statuses.count(_ffi.OK) == count:
        return out
    for i, status in enumerate(statuses):
        if status != _ffi.OK:
            result = results[i]
            out[i] = (_closed_error(conns[i], status)
                      or _slot_error(library, status, result.rpc_code, "wool_idle",
                                     result.message))
    return out


#: How long `sweep` waits in the library at a time for its completion: between two waits the
#: interpreter handles signals (a KeyboardInterrupt ends the sweep: its queue is freed).
_SWEEP_WAIT = 0.5


def sweep(connections: Iterable[WorkerConnection], timeout: float | None = 5.0,
          max_in_flight: int = 100) -> list[Union[float, Exception]]:
    """Poll many workers' idle time at once, as ``wool_idle_many``: at most `max_in_flight`
    polls in flight, all within one deadline of `timeout` seconds. Blocks the thread until
    every poll has finished. Never raises for a worker: returns, in `connections` order, each
    worker's idle seconds (a float) or the exception its `WorkerConnection.idle` would have
    raised (`TransientRpcError`, `IdleUnavailable`, ...; status, gRPC code and message are
    libwool's for that worker; `ValueError` for a closed connection). A poll not started
    before the deadline is a `TransientRpcError` with code 4 DEADLINE_EXCEEDED. The same
    connection may appear several times; `libwool.aio` connections are accepted too
    (`libwool.aio.idle_many` is the asyncio version).

    The sweep is libwool's ``wool_idle_many_start`` on a queue of its own, waited for with
    ``wool_queue_next``; an exception while waiting (KeyboardInterrupt) frees the queue, which
    cancels the polls in flight.

    :param timeout: the whole sweep's deadline in seconds, positive; None = none.
    :param max_in_flight: the most polls in flight at once, at least 1.
    :raises ValueError: a bad timeout or `max_in_flight` 0 (libwool's message), connections
        of different loaded libraries.
    :raises TypeError: an element that is not a connection, or a wrong argument type.
    """
    conns = _connections(connections)
    seconds = _c_seconds(timeout, "timeout", none_means=math.inf)
    most = _count(max_in_flight, "max_in_flight")
    library = _library_of(conns)
    queue = _ffi.QueuePtr()
    _check(library, library.wool_queue_new(ctypes.byref(queue)))
    try:
        call = ctypes.c_uint64()
        library, results = _start_sweep(conns, seconds, most, queue, 1, call)
        completion = _ffi.wool_completion()
        count = ctypes.c_size_t()
        while not count.value:
            _check(library, library.wool_queue_next(queue, ctypes.byref(completion), 1,
                                                    _SWEEP_WAIT, ctypes.byref(count)))
        if completion.status != _ffi.OK:  # the sweep as a whole failed: not expected
            raise _error(library, completion.status,
                         completion.message.decode("utf-8", "replace"), completion.rpc_code)
        return _sweep_results(library, results, conns)
    finally:
        library.wool_queue_free(queue)


@dataclass(frozen=True)
class RetirePolicy:
    """When `retire_idle` retires a worker, and how (libwool's ``wool_retire_policy``, the
    Rust ``RetirePolicy``; the defaults are its defaults). libwool checks every field: a
    refused one makes `retire_idle` raise `ValueError` naming it."""

    #: Retire a worker idle at least this many seconds (finite, >= 0).
    idle_threshold: float
    #: Each stop's grace in seconds, as `WorkerConnection.stop`: 0 = cancel in-flight work,
    #: positive = let it run that long, ``math.inf`` or negative = however long. Positive, a
    #: task that reached the worker between the poll and the stop finishes.
    grace: float = 30.0
    #: Each stop's deadline in seconds; it must exceed a bounded grace. None = no deadline
    #: (what an unbounded grace needs).
    stop_timeout: float | None = 60.0
    #: Never leave fewer than this many of the workers that answered the poll running.
    keep_min: int = 0
    #: The most stops in one round; None = no limit.
    max_stops: int | None = None
    #: Decide, but stop nothing.
    dry_run: bool = False

    def _to_c(self) -> _ffi.wool_retire_policy:
        if not isinstance(self.dry_run, bool):
            raise TypeError(f"dry_run must be True or False, not {type(self.dry_run).__name__}")
        return _ffi.wool_retire_policy(
            idle_threshold=_c_seconds(self.idle_threshold, "idle_threshold", none_means=None),
            grace=_c_seconds(self.grace, "grace", none_means=None),
            stop_timeout=_c_seconds(self.stop_timeout, "stop_timeout", none_means=math.inf),
            keep_min=_count(self.keep_min, "keep_min"),
            max_stops=(_ffi.SIZE_MAX if self.max_stops is None
                       else _count(self.max_stops, "max_stops")),
            dry_run=self.dry_run,
        )


@dataclass(frozen=True)
class RetireDecision:
    """What `retire_idle` decided for one worker and how its stop went (libwool's
    ``wool_retire_decision``)."""

    #: Why it was retired or kept, libwool's name (``wool_retire_reason_name``): ``"idle"``
    #: (retired), ``"busy"``, ``"below-threshold"``, ``"minimum"``, ``"round-limit"``,
    #: ``"idle-unavailable"``, ``"unreachable"``, ``"poll-failed"``.
    reason: str
    #: Whether the policy retires it (reason ``"idle"``).
    retire: bool
    #: The poll's reading in seconds; None when it failed.
    idle: float | None
    #: The exception the poll's `WorkerConnection.idle` would have raised; None on success.
    idle_error: Exception | None
    #: Whether a stop was made (False when kept, or in a dry run).
    stopped: bool
    #: The exception the stop would have raised; None when it succeeded or none was made.
    stop_error: Exception | None


def retire_idle(connections: Iterable[WorkerConnection], policy: RetirePolicy,
                poll_timeout: float | None = 5.0, max_in_flight: int = 100,
                ) -> list[RetireDecision]:
    """One retire round, as ``wool_retire_idle``: polls every worker (as `sweep`, within
    `poll_timeout` seconds, at most `max_in_flight` at once), decides by `policy` (the most
    idle retired first, never leaving fewer than ``policy.keep_min`` of the workers that
    answered, at most ``policy.max_stops``), stops the retired ones (as
    `WorkerConnection.stop` with the policy's grace and stop timeout, at most
    `max_in_flight` at once) unless ``policy.dry_run``, and returns one decision per
    connection, in order. Blocks the thread until every stop has answered (after its
    worker's drain). A closed connection is kept with reason ``"poll-failed"`` and a
    `ValueError`.

    :param poll_timeout: the poll's deadline in seconds, positive; None = none.
    :param max_in_flight: the most calls in flight at once, at least 1.
    :raises ValueError: a refused policy field (libwool's message names it), a bad
        `poll_timeout`, `max_in_flight` 0, connections of different loaded libraries;
        nothing is polled or stopped then.
    :raises TypeError: `policy` not a `RetirePolicy`, a wrong argument type.
    """
    _check_type(policy, RetirePolicy, "policy")
    conns = _connections(connections)
    c_policy = policy._to_c()
    seconds = _c_seconds(poll_timeout, "poll_timeout", none_means=math.inf)
    most = _count(max_in_flight, "max_in_flight")
    count = len(conns)
    out = (_ffi.wool_retire_decision * max(count, 1))()
    library, array = _handles(conns)
    _check(library, library.wool_retire_idle(array, count, ctypes.byref(c_policy),
                                             seconds, most, out))
    decisions = []
    for i, conn in enumerate(conns):
        d = out[i]
        idle_error = (_closed_error(conn, d.poll_status)
                      or _slot_error(library, d.poll_status, d.poll_rpc_code, "wool_idle",
                                     d.message))
        decisions.append(RetireDecision(
            reason=library.wool_retire_reason_name(d.reason).decode("utf-8"),
            retire=bool(d.retire),
            idle=None if idle_error is not None else float(d.idle_seconds),
            idle_error=idle_error,
            stopped=bool(d.stopped),
            stop_error=_slot_error(library, d.stop_status, d.stop_rpc_code, "wool_stop",
                                   d.message)
            if d.stopped else None,
        ))
    return decisions


def _check_type(value, expected: type, name: str):
    if not isinstance(value, expected):
        raise TypeError(f"{name} must be {expected.__name__}, not {type(value).__name__}")
    return value
