"""asyncio API of libwool: ``await worker.idle()``, ``await worker.stop()``, `idle_many`.

    import asyncio
    from libwool import aio

    async def main():
        async with aio.WorkerConnection("127.0.0.1:50051") as worker:
            if await worker.idle(timeout=5.0) >= 300.0:   # seconds continuously idle
                await worker.stop(grace=30.0)             # retire it

        # a fleet: one sweep, one deadline, at most 100 polls in flight, a result or exception each
        workers = [aio.WorkerConnection(a) for a in addresses]
        for address, result in zip(addresses, await aio.idle_many(workers, timeout=5.0)):
            ...

    asyncio.run(main())

The shape is that of Wool's own asyncio client (``wool.WorkerConnection``: ``await
conn.idle(timeout=...)``, ``await conn.stop(...)``, ``await conn.close()``), and the failures are
the blocking API's classes (`libwool.TransientRpcError`, `libwool.IdleUnavailable`, ...; a bad
argument or a closed connection is `ValueError`, raised by the ``await`` before any I/O).

How it works
    Each event loop gets one libwool completion queue (``wool_queue``), made on the loop's
    first call and watched with ``loop.add_reader`` on its file descriptor (an eventfd,
    readable while completions wait). A call starts with ``wool_idle_start`` /
    ``wool_stop_start``, which do no I/O and return at once; a thread of the library drives the
    call, and nothing in the library ever calls into Python. When the descriptor turns
    readable the loop collects every waiting completion (``wool_queue_next``, no wait) and
    resolves the callers' futures by tag. `WorkerConnection.idle` called in a running loop
    starts its call at once and returns that call's future (a coroutine too, for
    ``asyncio.create_task``), so ``asyncio.gather`` of many idle polls makes no task per
    call: a poll costs one future, set straight from its completion. No Python thread is
    used per call: thousands of calls may be in flight from one loop, sharing the
    connection's pooled HTTP/2 channel (at most ``max_concurrent_streams`` streams open at
    once; the others wait their turn).
    `idle_many` is one call of the library, ``wool_idle_many_start``: the whole sweep runs in
    libwool and completes once into the loop's queue, its results in an array the queue keeps
    until that completion is collected (or the sweep cancelled, or the queue freed).

Cancellation
    Cancelling the future `WorkerConnection.idle` returns, or a task awaiting it or
    `WorkerConnection.stop` (``task.cancel()``, ``asyncio.gather`` cancelled,
    ``asyncio.wait_for`` or ``asyncio.timeout`` expiring, ``asyncio.run`` ending with the task
    unfinished) calls ``wool_cancel`` for that call alone: the call's HTTP/2 stream is reset,
    so the worker sees the cancellation, and the task gets `asyncio.CancelledError` at once,
    even from a worker that has stopped answering. A stop the worker already received may
    still take effect. A call cancelled by libwool itself (``WOOL_STATUS_CANCELLED`` in a
    completion) is likewise `asyncio.CancelledError` here; the blocking API names that status
    `libwool.Cancelled`, which asyncio code never sees.

Cleanup
    A loop's queue is released (its reader removed, its descriptor closed) once the loop is
    closed: when the loop is garbage-collected, or when any loop next makes its queue,
    whichever comes first (``asyncio.run`` cancels its leftover tasks first, which cancels
    their calls). Nothing needs closing by hand but the connections (``await
    conn.close()`` or ``async with``).

Requirements
    An event loop with ``add_reader``: asyncio's selector loop (the default on Linux) or
    uvloop; not the Windows proactor loop. The library's queue is Linux-only (eventfd).
    Use a loop only in the process that made it: after ``os.fork()`` the child forgets the
    parent's queues (without freeing them; they belong to the parent) and makes its own on a
    new loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import itertools
import math
import os
import struct
import threading
import weakref
from collections.abc import Awaitable, Iterable
from typing import Union

from . import _ffi
from . import fleet as _fleet
from ._connection import WorkerConnection as _BlockingConnection
from ._convert import _c_seconds
from ._credentials import WorkerCredentials
from ._errors import _check, _error
from ._ffi import Library

__all__ = ["WorkerConnection", "idle_many"]

#: Completions collected per ``wool_queue_next`` call.
_BATCH = 256

_OK = _ffi.OK
_CANCELLED = _ffi.CANCELLED

# A completion's leading fields (tag, call, status, rpc_code, seconds), read straight from the
# collected buffer: cheaper than a ctypes structure object per completion.
_COMPLETION_HEAD = struct.Struct("=QQiid")
_COMPLETION_SIZE = ctypes.sizeof(_ffi.wool_completion)
_MESSAGE_OFFSET = _ffi.wool_completion.message.offset
if _COMPLETION_HEAD.size != _MESSAGE_OFFSET:  # pragma: no cover (the layout is fixed)
    raise ImportError("libwool.aio: unexpected wool_completion layout")


# ---------------------------------------------------------------- one call's future


class _Call(asyncio.Future):
    """The future of one call started on a loop's queue (what `WorkerConnection.idle`
    returns, and what `WorkerConnection.stop` awaits): the reader resolves it straight from
    the call's completion. Works on every Python the package supports (3.9 and later).

    Awaiting it, gathering it or passing it to ``asyncio.wait_for`` wraps nothing (no task
    per call: a future given to ``asyncio.gather`` is used as it is). It is also accepted
    where asyncio wants a coroutine (``asyncio.create_task``, ``TaskGroup.create_task``):
    `send`, `throw` and `close` make it one (``collections.abc.Coroutine``), driving the
    future's own ``__await__``, so a task over it waits on the future itself.

    Cancelling it (``cancel()``: by ``asyncio.gather``, ``asyncio.wait_for``, a task
    awaiting it being cancelled) cancels the call in the library (``wool_cancel``) unless
    its completion was already collected; it cancels no other call."""

    __slots__ = ("_queue", "_tag", "_id")

    def cancel(self, msg=None) -> bool:
        if not super().cancel(msg):
            return False
        queue = getattr(self, "_queue", None)  # None: refused before it started
        if queue is not None:
            queue.cancel(self._tag, self._id)
        return True

    # The coroutine protocol, for asyncio.create_task(conn.idle()) and the like.
    def send(self, value):
        return self.__await__().send(value)

    def throw(self, *exc_info):
        return self.__await__().throw(*exc_info)

    def close(self) -> None:
        """A coroutine's close: nothing to release (cancel the call with `cancel`)."""


# ---------------------------------------------------------------- one queue per event loop


class _LoopQueue:
    """One ``wool_queue`` serving one event loop: its descriptor is a reader of the loop, and
    the futures of the calls started on it wait in `_pending` by tag until their completion is
    collected. Everything but `free` (and the fork reset) runs on the loop's thread."""

    def __init__(self, library: Library, loop: asyncio.AbstractEventLoop):
        handle = _ffi.QueuePtr()
        _check(library, library.wool_queue_new(ctypes.byref(handle)))
        self.library = library
        self.handle: _ffi.QueuePtr | None = handle
        self.fd = int(library.wool_queue_fd(handle))
        self._loop = weakref.ref(loop)  # the loop's registry entry must not keep it alive
        self._pending: dict[int, asyncio.Future] = {}
        self._tags = itertools.count(1)
        self._buffer = (_ffi.wool_completion * _BATCH)()
        self._bytes = memoryview(self._buffer).cast("B")
        self._count = ctypes.c_size_t()
        self._count_ref = ctypes.byref(self._count)
        self._call = ctypes.c_uint64()  # the loop's thread starts one call at a time
        self._call_ref = ctypes.byref(self._call)
        self._finalizer: weakref.finalize | None = None
        #: Completions collected with WOOL_STATUS_CANCELLED (diagnostics, tests): each is a
        #: call that ``wool_cancel`` reset while it was in flight.
        self.cancelled = 0
        try:
            loop.add_reader(self.fd, self._drain)
        except NotImplementedError:
            library.wool_queue_free(handle)
            self.handle = None
            raise RuntimeError(
                f"libwool.aio needs an event loop with add_reader (a selector loop or uvloop), "
                f"not {type(loop).__name__}"
            ) from None
        except BaseException:
            library.wool_queue_free(handle)
            self.handle = None
            raise

    @property
    def in_flight(self) -> int:
        """Calls started on this queue whose completion has not been collected yet."""
        return len(self._pending)

    def start(self, loop, conn: _BlockingConnection, function, args: tuple) -> _Call:
        """Start a call (`function` is wool_idle_start or wool_stop_start) of `conn` on this
        queue and return its future; raises as the blocking call would for a bad argument or
        a closed connection."""
        tag = next(self._tags)
        # A `close` on another thread meanwhile is libwool's to settle: the call starts (and
        # holds what it needs) or is refused as closed.
        conn._call(function, self.handle, *args, tag, self._call_ref)
        future = _Call(loop=loop)
        future._queue = self
        future._tag = tag
        future._id = self._call.value
        self._pending[tag] = future
        return future

    def start_sweep(self, loop, conns: list[_BlockingConnection], seconds: float, most: int):
        """Start one sweep of `conns` (``wool_idle_many_start``, all of this queue's library)
        on this queue: returns (future, tag, call id, results array); raises as libwool
        refuses the arguments. The caller keeps the results array until the sweep's completion
        is collected, or ``wool_cancel`` / ``wool_queue_free`` has returned: libwool never
        writes it after either."""
        tag = next(self._tags)
        _, results = _fleet._start_sweep(conns, seconds, most, self.handle, tag, self._call)
        future = loop.create_future()
        self._pending[tag] = future
        return future, tag, self._call.value, results

    def cancel(self, tag: int, call: int) -> None:
        """Cancel a call whose future was cancelled (or whose awaiting coroutine is gone),
        unless its completion was already collected: the library
        resets its stream and queues a WOOL_STATUS_CANCELLED completion before
        ``wool_cancel`` returns (a call that already completed is left alone, its completion
        waiting); on the loop's thread both are collected at once."""
        if tag not in self._pending:  # completed (its completion collected) or released
            return
        handle = self.handle
        if handle is None:  # freed with its loop, or forgotten after a fork
            self._pending.pop(tag, None)
            return
        # A `free` on another thread meanwhile is libwool's to settle (it refuses a freed
        # queue); either way the call writes nothing more once this returns.
        self.library.wool_cancel(handle, call)
        loop = self._loop()
        if loop is not None and _running_loop() is loop:
            self._drain()
        else:  # e.g. a coroutine closed by the garbage collector on another thread
            self._pending.pop(tag, None)

    def _drain(self) -> None:
        """The reader: collect every waiting completion and resolve its future."""
        handle = self.handle
        if handle is None:  # forgotten after a fork: stop watching the parent's descriptor
            loop = self._loop()
            if loop is not None and not loop.is_closed():
                loop.remove_reader(self.fd)
            return
        library = self.library
        buffer = self._buffer
        data = self._bytes
        count = self._count
        pending = self._pending
        unpack = _COMPLETION_HEAD.unpack_from
        while True:
            status = library.wool_queue_next(handle, buffer, _BATCH, 0.0, self._count_ref)
            if status != _OK:  # cannot happen with these arguments; never spin on it
                message, _ = library.last_error()
                error = RuntimeError(f"libwool.aio: collecting completions failed: {message}")
                for future in pending.values():
                    if not future.done():
                        future.set_exception(error)
                self.free()  # the loop's next call makes a new queue
                raise error
            n = count.value
            for offset in range(0, n * _COMPLETION_SIZE, _COMPLETION_SIZE):
                tag, _, status, code, seconds = unpack(data, offset)
                future = pending.pop(tag, None)
                if status == _CANCELLED:
                    self.cancelled += 1
                if future is None or future.done():  # its awaiter was cancelled
                    continue
                if status == _OK:
                    future.set_result(seconds)
                    continue
                completion = buffer[offset // _COMPLETION_SIZE]  # a failure: the slow path
                message = completion.message.decode("utf-8", errors="replace")
                if status == _CANCELLED:
                    future.cancel(message)
                else:
                    future.set_exception(_error(library, status, message, code))
            if n < _BATCH:
                return

    def free(self) -> None:
        """Release the queue (idempotent; any thread): remove the reader if the loop is still
        open, drop the futures without resolving them, free the ``wool_queue`` (which cancels
        its calls in flight and closes the descriptor)."""
        handle, self.handle = self.handle, None
        if handle is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        loop = self._loop()
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self.fd)
        self._pending.clear()
        self.library.wool_queue_free(handle)  # a second free, from a race, does nothing

    def forget(self) -> None:
        """In a forked child: drop the parent's queue without touching it (a queue belongs to
        the process that made it: docs/C-API.md)."""
        self.handle = None
        self._pending.clear()
        if self._finalizer is not None:
            self._finalizer.detach()


def _running_loop():
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# loop -> {library: queue}. Weak on the loop (a loop that cannot be weakly referenced is held
# until it is closed and the next sweep drops it).
_queues: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_strong_queues: dict = {}
_registry_lock = threading.Lock()


#: The queue `_queue_for` found last, with its library (a loop starting many calls finds it
#: again without the registry's weak dictionary; the queue refers to its loop weakly).
_recent: tuple = (None, None)


def _queue_for(loop: asyncio.AbstractEventLoop, library: Library) -> _LoopQueue:
    """The queue of `loop` for `library`, made (and registered as the loop's reader) on first
    use. Call on the loop's thread, while it runs."""
    global _recent
    recent_library, queue = _recent
    if recent_library is library and queue.handle is not None and queue._loop() is loop:
        return queue
    queue = _lookup_queue(loop, library)
    _recent = (library, queue)
    return queue


def _lookup_queue(loop: asyncio.AbstractEventLoop, library: Library) -> _LoopQueue:
    """`_queue_for` without the cache."""
    try:
        per_loop = _queues.get(loop)
    except TypeError:
        per_loop = _strong_queues.get(loop)
    if per_loop is not None:
        queue = per_loop.get(library)
        if queue is not None and queue.handle is not None:
            return queue
    with _registry_lock:
        _sweep_closed_loops()
        try:
            per_loop = _queues.setdefault(loop, {})
        except TypeError:
            per_loop = _strong_queues.setdefault(loop, {})
        queue = per_loop.get(library)
        if queue is None or queue.handle is None:
            queue = per_loop[library] = _LoopQueue(library, loop)
            try:
                # Freed when the loop is garbage-collected; not at interpreter exit, when a
                # daemon thread's loop might still be using it (the process ends anyway).
                queue._finalizer = weakref.finalize(loop, queue.free)
                queue._finalizer.atexit = False
            except TypeError:
                pass  # not weakly referenceable: the sweep frees it once the loop is closed
        return queue


def _sweep_closed_loops() -> None:
    """With the registry lock: free the queues of loops that have been closed."""
    for registry in (_queues, _strong_queues):
        for loop in list(registry.keys()):
            if loop.is_closed():
                for queue in registry.pop(loop).values():
                    queue.free()


def _forget_queues_after_fork() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for registry in (_queues, _strong_queues):
        for per_loop in list(registry.values()):
            for queue in per_loop.values():
                queue.forget()
        registry.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_queues_after_fork)


# ---------------------------------------------------------------- connection


class WorkerConnection:
    """A handle to one worker for asyncio code, like Wool's ``wool.WorkerConnection``:
    ``await idle()``, ``await stop()``, ``await close()`` (or ``async with``).

    Takes the arguments of the blocking `libwool.WorkerConnection` (target, credentials and
    the channel options as keywords, with the same defaults and errors) and shares its pooled
    channel with blocking connections of equal settings. Lazy: no I/O until the first call.
    Any number of calls may be in flight on one connection at once, from any number of tasks
    (and of event loops, each loop having its own completion queue).

    :param target: as `libwool.WorkerConnection`.
    :param credentials: `libwool.WorkerCredentials` for a TLS worker; None = plaintext.
    :param channel_options: keyword-only, as `libwool.WorkerConnection` (``keepalive_interval``,
        ``max_concurrent_streams``, ``connect_timeout``, ...).
    """

    def __init__(
        self,
        target: str,
        credentials: WorkerCredentials | None = None,
        **channel_options,
    ):
        self._blocking = _BlockingConnection(target, credentials, **channel_options)
        self._library = self._blocking._library

    @property
    def blocking(self) -> _BlockingConnection:
        """The blocking `libwool.WorkerConnection` behind this one (the same handle): its
        `idle` and `stop` block the calling thread; closing either closes both."""
        return self._blocking

    @property
    def target(self) -> str:
        return self._blocking.target

    @property
    def secure(self) -> bool:
        """True for TLS (credentials were given)."""
        return self._blocking.secure

    @property
    def channel_options(self):
        """The channel options given; the others are Wool's defaults."""
        return self._blocking.channel_options

    @property
    def closed(self) -> bool:
        return self._blocking.closed

    def idle(self, timeout: float | None = None) -> Awaitable[float]:
        """Seconds the worker has been continuously idle; exactly 0.0 while any task is in
        flight on it. Await the result (or gather it, or wrap it in a task).

        Called in a running event loop, the call starts at once and the result is its future
        (an `asyncio.Future`, also accepted where a coroutine is wanted, as by
        ``asyncio.create_task``): ``asyncio.gather`` of many wraps no task around each.
        Called elsewhere (say ``asyncio.run(conn.idle())``), it returns a coroutine that
        starts the call when awaited.

        :param timeout: the call's deadline in seconds, positive; None = no deadline (the
            channel's keepalive still ends a call to a worker that froze). Cancelling the
            future or the task awaiting it (e.g. by ``asyncio.wait_for``) ends the call at
            once and resets its stream; no other call is touched.
        :raises IdleUnavailable, TransientRpcError, HandshakeError, RpcError: as the
            blocking `libwool.WorkerConnection.idle`.
        :raises ValueError: a timeout of 0, negative or NaN, or the connection is closed
            (raised by the ``await``; nothing started).
        :raises asyncio.CancelledError: the call or the awaiting task was cancelled.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._idle_when_awaited(timeout)
        try:
            if timeout is None:
                deadline = math.inf
            elif type(timeout) is float:  # the common case, checked no further here: libwool
                deadline = timeout         # alone decides which values are valid
            else:
                deadline = _c_seconds(timeout, "timeout", none_means=math.inf)
            library = self._library
            return _queue_for(loop, library).start(
                loop, self._blocking, library.wool_idle_start, (deadline,)
            )
        except Exception as error:  # refused before anything started: raised by the await
            future = _Call(loop=loop)
            future.set_exception(error)
            return future

    async def _idle_when_awaited(self, timeout: float | None) -> float:
        return await self.idle(timeout)

    async def stop(self, grace: float = 0.0, timeout: float | None = None) -> None:
        """Stop (retire) the worker: it refuses new tasks, lets in-flight ones run for
        `grace`, cancels the rest, and answers once drained. Returns after that answer.

        :param grace: as the blocking `libwool.WorkerConnection.stop`: 0 = cancel in-flight
            work at once; positive = that long; ``math.inf`` or negative = however long.
        :param timeout: the call's deadline in seconds, positive; None = no deadline. To see
            the answer it must exceed the grace.
        :raises TransientRpcError, HandshakeError, RpcError: as the blocking `stop`.
        :raises ValueError: a NaN grace, a bad timeout, or the connection is closed.
        :raises asyncio.CancelledError: the awaiting task was cancelled (the stream is reset;
            a worker that already received the stop may still retire).
        """
        grace_seconds = _c_seconds(grace, "grace", none_means=None)
        deadline = _c_seconds(timeout, "timeout", none_means=math.inf)
        loop = asyncio.get_running_loop()
        future = _queue_for(loop, self._library).start(
            loop, self._blocking, self._library.wool_stop_start, (grace_seconds, deadline)
        )
        try:
            await future
        finally:
            if not future.done():  # the coroutine was closed unfinished
                future.cancel()

    async def close(self) -> None:
        """Release this handle (its share of the pooled channel; the worker keeps running).
        Idempotent and immediate. Calls already started finish normally (they hold what they
        need); later calls raise `ValueError`."""
        self._blocking.close()

    async def __aenter__(self) -> WorkerConnection:
        return self

    async def __aexit__(self, *exc_info) -> None:
        self._blocking.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        tls = "TLS" if self.secure else "plaintext"
        return f"<libwool.aio.WorkerConnection target={self.target!r} {tls} {state}>"


# ---------------------------------------------------------------- many workers


async def idle_many(
    connections: Iterable[WorkerConnection | _BlockingConnection],
    timeout: float | None = None,
    max_in_flight: int = 100,
) -> list[Union[float, Exception]]:
    """Poll many workers' idle time at once: at most `max_in_flight` polls in flight, all
    within one deadline of `timeout` seconds, as ``wool_idle_many`` but without blocking the
    loop: one sweep of libwool (``wool_idle_many_start``) whose one completion the loop's queue
    delivers. Never raises for a worker: returns, in `connections` order, each worker's idle
    seconds (a float) or the exception its `WorkerConnection.idle` would have raised
    (`TransientRpcError` for an unreachable worker, `IdleUnavailable`, ..., with libwool's
    message for that worker; `ValueError` for a closed connection). A poll not started before
    the deadline is a `TransientRpcError` with code 4 DEADLINE_EXCEEDED. The same connection
    may appear several times; blocking `libwool.WorkerConnection` objects are accepted too.

    Cancelling the awaiting task cancels the sweep (``wool_cancel``): every poll in flight is
    cancelled (their streams are reset) and no more start.

    :param timeout: the whole sweep's deadline in seconds, positive; None = none.
    :param max_in_flight: the most polls in flight at once, at least 1.
    :raises ValueError: a bad timeout or `max_in_flight` 0 (libwool's message), or
        connections of different loaded libraries.
    :raises TypeError: an element that is not a connection, or a wrong argument type.
    """
    conns = _fleet._connections(connections)
    most = _fleet._count(max_in_flight, "max_in_flight")
    seconds = _c_seconds(timeout, "timeout", none_means=math.inf)
    library = _fleet._library_of(conns)
    if not conns:
        # The library's own checks of the arguments (an empty sweep runs nothing).
        _check(library, library.wool_idle_many(None, 0, seconds, most, None, None, None))
        return []
    loop = asyncio.get_running_loop()
    queue = _queue_for(loop, library)
    # `results` is kept by this frame until the sweep has completed or been cancelled (the
    # finally below runs also when the coroutine is closed unfinished).
    future, tag, call, results = queue.start_sweep(loop, conns, seconds, most)
    try:
        await future
    finally:
        if tag in queue._pending:  # not completed: cancelled, or the coroutine closed
            queue.cancel(tag, call)
    return _fleet._sweep_results(library, results, conns)
