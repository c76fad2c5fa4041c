"""libwool.aio (asyncio over libwool's completion queue) against real workers.

Plain ``asyncio.run`` (no pytest plugin). "Frozen" workers are reference workers stopped with
SIGSTOP: their sockets stay open and silent, so a call with no deadline would wait for the
keepalive (a minute); the tests show that cancelling the awaiting task ends it at once and
that libwool reset the call (a WOOL_STATUS_CANCELLED completion was collected for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import math
import os
import signal
import threading
import time

import pytest

import libwool
from libwool import _ffi, aio

from conftest import LIBRARY, PY13


def run(coroutine, timeout: float = 60.0):
    """asyncio.run with a safety net, so that a hang fails the test instead of the run."""
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


def loop_queue() -> aio._LoopQueue:
    """The running loop's completion queue (made on first use)."""
    return aio._queue_for(asyncio.get_running_loop(), LIBRARY)


def uncollected(queue: aio._LoopQueue) -> int:
    """Completions waiting in the library's queue (collects them: call at the very end)."""
    buffer = (_ffi.wool_completion * 64)()
    count = ctypes.c_size_t()
    status = LIBRARY.wool_queue_next(queue.handle, buffer, 64, 0.0, ctypes.byref(count))
    assert status == _ffi.OK
    return count.value


@contextlib.contextmanager
def frozen(process):
    """SIGSTOP the worker process for the body; SIGCONT it afterwards, whatever happened."""
    os.kill(process.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(process.proc.pid, signal.SIGCONT)


# ---------------------------------------------------------------- the structure


def test_completion_struct_matches_the_header():
    # wool_completion: u64 tag, u64 call, enum status, i32 rpc_code, double seconds,
    # char message[256]: 8 + 8 + 4 + 4 + 8 + 256 bytes, no padding.
    c = _ffi.wool_completion
    offsets = [(name, getattr(c, name).offset) for name, _ in c._fields_]
    assert offsets == [
        ("tag", 0), ("call", 8), ("status", 16), ("rpc_code", 20), ("seconds", 24),
        ("message", 32),
    ]
    assert ctypes.sizeof(c) == 288
    assert ctypes.sizeof(ctypes.c_int) == 4  # the C enum wool_status


# ---------------------------------------------------------------- idle and stop


def test_aio_idle_accrues_like_the_blocking_call(worker):
    # Given a fresh worker, When idle is awaited twice 0.2 s apart,
    # Then both are floats and the second exceeds the first by ~0.2 s; a blocking poll of
    # the same connection agrees.
    async def main():
        async with aio.WorkerConnection(worker.address) as conn:
            first = await conn.idle(timeout=5.0)
            await asyncio.sleep(0.2)
            second = await conn.idle()
            blocking = conn.blocking.idle(timeout=5.0)
            return first, second, blocking, conn.closed

    first, second, blocking, closed = run(main())
    assert isinstance(first, float) and first >= 0.0
    assert second - first >= 0.15
    assert blocking >= second
    assert closed is False


def test_aio_a_thousand_gathered_polls_on_one_connection_all_succeed(worker):
    # Given one connection, When 1,000 idle polls are gathered at once (10 times the
    # channel's concurrent streams), Then every one answers with a float, the loop stays
    # responsive meanwhile, and nothing is left in flight or uncollected afterwards.
    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        async with aio.WorkerConnection(worker.address) as conn:
            tick_task = asyncio.create_task(ticker())
            results = await asyncio.gather(*(conn.idle(timeout=30.0) for _ in range(1000)))
            tick_task.cancel()
            queue = loop_queue()
            return results, ticks, queue.in_flight, uncollected(queue), queue.cancelled

    results, ticks, in_flight, left, cancelled = run(main())
    assert len(results) == 1000
    assert all(isinstance(r, float) and r >= 0.0 for r in results)
    assert ticks > 1
    assert (in_flight, left, cancelled) == (0, 0, 0)


def test_aio_idle_is_its_calls_future_and_is_accepted_as_a_coroutine(worker, unused_address):
    # Given a connection, When idle() is called in a running loop, Then it returns the call's
    # future (gathered as it is, no task around it), which asyncio.create_task and a
    # TaskGroup accept as a coroutine; a refused call (closed connection, bad timeout) raises
    # only when awaited. Outside a loop it is a coroutine that asyncio.run runs.
    async def main():
        conn = aio.WorkerConnection(worker.address)
        call = conn.idle(timeout=5.0)
        assert isinstance(call, asyncio.Future) and asyncio.iscoroutine(call)
        gathered = await asyncio.gather(call, conn.idle(timeout=5.0))
        task = asyncio.create_task(conn.idle(timeout=5.0))
        if hasattr(asyncio, "TaskGroup"):  # Python 3.11 and later
            async with asyncio.TaskGroup() as group:
                grouped = group.create_task(conn.idle(timeout=5.0))
            grouped = grouped.result()
        else:
            grouped = await asyncio.ensure_future(conn.idle(timeout=5.0))
        tasked = await task
        bad = conn.idle(timeout=-1.0)  # nothing raised here
        queue = loop_queue()
        await conn.close()
        closed = conn.idle(timeout=5.0)
        errors = []
        for refused in (bad, closed):
            with pytest.raises(ValueError) as raised:
                await refused
            errors.append(str(raised.value))
        return gathered + [tasked, grouped], errors, queue.in_flight

    readings, errors, in_flight = run(main())
    assert all(isinstance(r, float) and r >= 0.0 for r in readings) and len(readings) == 4
    assert "timeout" in errors[0] and "closed" in errors[1]
    assert in_flight == 0
    conn = aio.WorkerConnection(worker.address)
    try:
        assert isinstance(asyncio.run(conn.idle(timeout=5.0)), float)
    finally:
        conn.blocking.close()


def test_aio_cancelling_one_call_of_a_batch_cancels_only_it(worker):
    # Given eight idle() calls started at once on a frozen worker (no deadline), When one
    # call's future is cancelled and a task awaiting another is cancelled, Then the library
    # resets just those two calls (two WOOL_STATUS_CANCELLED completions); once the worker
    # runs again the six others answer with readings.
    async def main():
        async with aio.WorkerConnection(worker.address) as conn:
            await conn.idle(timeout=5.0)
            queue = loop_queue()
            with frozen(worker):
                calls = [conn.idle() for _ in range(8)]
                waiting = asyncio.create_task(calls[5])
                await asyncio.sleep(0.3)
                assert queue.in_flight == 8 and not any(c.done() for c in calls)
                assert calls[2].cancel()
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                during = (queue.cancelled, queue.in_flight)
            others = [c for i, c in enumerate(calls) if i not in (2, 5)]
            readings = await asyncio.gather(*others)
            return (during, [c.cancelled() for c in calls], readings, queue.in_flight,
                    uncollected(queue))

    during, cancelled, readings, in_flight, left = run(main())
    assert during == (2, 6)
    assert cancelled == [i in (2, 5) for i in range(8)]
    assert len(readings) == 6 and all(isinstance(r, float) for r in readings)
    assert (in_flight, left) == (0, 0)


def test_aio_stop_retires_the_worker(worker):
    # When stop(grace=0) is awaited, Then it returns None, the worker exits 0, and a later
    # idle is TransientRpcError UNAVAILABLE.
    async def main():
        async with aio.WorkerConnection(worker.address) as conn:
            assert await conn.stop(grace=0.0, timeout=10.0) is None
            await asyncio.get_running_loop().run_in_executor(None, worker.wait, 10)
            with pytest.raises(libwool.TransientRpcError) as caught:
                await conn.idle(timeout=2.0)
            return caught.value

    error = run(main())
    assert worker.proc.returncode == 0
    assert error.code == 14


def test_aio_failures_raise_the_blocking_api_classes(unused_address):
    # An unreachable worker: TransientRpcError UNAVAILABLE, as the blocking call; bad
    # arguments and a closed connection: ValueError before anything starts.
    async def main():
        conn = aio.WorkerConnection(unused_address)
        with pytest.raises(libwool.TransientRpcError) as unreachable:
            await conn.idle(timeout=5.0)
        with pytest.raises(libwool.TransientRpcError):
            await conn.stop(timeout=5.0)
        with pytest.raises(ValueError, match="timeout"):
            await conn.idle(timeout=0)
        with pytest.raises(ValueError, match="grace"):
            await conn.stop(grace=math.nan)
        with pytest.raises(TypeError):
            await conn.idle(timeout="1")
        await conn.close()
        await conn.close()  # idempotent
        with pytest.raises(ValueError, match="closed"):
            await conn.idle(timeout=1.0)
        return unreachable.value, loop_queue().in_flight, conn.closed, repr(conn)

    error, in_flight, closed, text = run(main())
    with libwool.WorkerConnection(unused_address) as blocking:
        with pytest.raises(libwool.TransientRpcError) as blocking_error:
            blocking.idle(timeout=5.0)
    assert type(error) is type(blocking_error.value)
    assert error.code == blocking_error.value.code == 14
    assert error.details.startswith("wool_idle_start: ")
    assert in_flight == 0 and closed
    assert "closed" in text and "aio" in text


def test_aio_idle_on_a_worker_that_predates_idle_is_idle_unavailable(spawn_wool):
    # A Wool 0.13.1 worker (no idle RPC): IdleUnavailable (code 12), not an RpcError;
    # stop still retires it.
    worker = spawn_wool(PY13)

    async def main():
        async with aio.WorkerConnection(worker.address) as conn:
            with pytest.raises(libwool.IdleUnavailable) as caught:
                await conn.idle(timeout=10.0)
            await conn.stop(grace=0.0, timeout=30.0)
            return caught.value

    error = run(main())
    assert not isinstance(error, libwool.RpcError)
    assert (error.code, error.code_name) == (12, "UNIMPLEMENTED")
    worker.expect(lambda line: line == "stopped remote", 30)
    assert worker.wait(30) == 0


# ---------------------------------------------------------------- cancellation


def test_aio_cancelling_a_task_awaiting_a_frozen_worker_resets_the_call(worker):
    # Given a connected worker, then frozen (SIGSTOP), and a task awaiting idle() with no
    # timeout, When the task is cancelled, Then it ends with CancelledError at once; the
    # library reset the call (one WOOL_STATUS_CANCELLED completion collected) and nothing is
    # left in flight or in the queue. After SIGCONT the same connection polls fine.
    async def main():
        async with aio.WorkerConnection(worker.address) as conn:
            await conn.idle(timeout=5.0)  # the HTTP/2 connection is up
            queue = loop_queue()
            with frozen(worker):
                task = asyncio.create_task(conn.idle())
                await asyncio.sleep(0.3)
                assert not task.done() and queue.in_flight == 1
                started = time.monotonic()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                took = time.monotonic() - started
                assert task.cancelled()
                state = (queue.cancelled, queue.in_flight, uncollected(queue))
            after = await conn.idle(timeout=10.0)
            return took, state, after

    took, (cancelled, in_flight, left), after = run(main())
    assert took < 0.5
    assert (cancelled, in_flight, left) == (1, 0, 0)
    assert after >= 0.0


def test_aio_wait_for_timeout_cancels_the_call(worker):
    # Given a frozen worker, When idle() and stop() are awaited under asyncio.wait_for(0.3),
    # Then each raises TimeoutError after ~0.3 s and the library reset both calls.
    async def main():
        async with aio.WorkerConnection(worker.address) as conn:
            await conn.idle(timeout=5.0)
            queue = loop_queue()
            with frozen(worker):
                started = time.monotonic()
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(conn.idle(), 0.3)
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(conn.stop(grace=0.0), 0.3)
                took = time.monotonic() - started
                state = (queue.cancelled, queue.in_flight, uncollected(queue))
            return took, state

    took, state = run(main())
    assert 0.55 <= took < 1.5
    assert state == (2, 0, 0)
    # (The stop's request was already in the frozen worker's socket: whether the worker acts
    # on it before reading the reset once it runs again is the worker's affair.)


def test_aio_cancel_while_connecting_to_a_silent_listener(silent_listener):
    # A call stuck before HTTP/2 is even up (the peer accepts TCP and says nothing) is
    # cancelled as promptly.
    async def main():
        async with aio.WorkerConnection(silent_listener) as conn:
            task = asyncio.create_task(conn.idle())
            await asyncio.sleep(0.2)
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            queue = loop_queue()
            return time.monotonic() - started, queue.cancelled, queue.in_flight

    took, cancelled, in_flight = run(main())
    assert took < 0.5
    assert (cancelled, in_flight) == (1, 0)


def test_aio_a_call_cancelled_by_the_library_is_cancelled_error(silent_listener):
    # A WOOL_STATUS_CANCELLED completion for a call whose task was not cancelled (here the
    # test calls wool_cancel itself) ends the awaiting task with asyncio.CancelledError.
    async def main():
        queue = loop_queue()
        calls = []
        start = queue.start

        def spy(*args):
            started = start(*args)
            calls.append(started._id)
            return started

        queue.start = spy
        try:
            async with aio.WorkerConnection(silent_listener) as conn:
                task = asyncio.create_task(conn.idle())
                await asyncio.sleep(0.2)
                assert LIBRARY.wool_cancel(queue.handle, calls[0]) == _ffi.OK
                with pytest.raises(asyncio.CancelledError):
                    await task
                return task.cancelled(), queue.cancelled, queue.in_flight
        finally:
            del queue.start

    assert run(main()) == (True, 1, 0)


def test_cancelled_status_is_libwool_cancelled_in_the_blocking_api():
    error = libwool._errors._error(LIBRARY, _ffi.CANCELLED, "wool_cancel: the call was cancelled", 1)
    assert type(error) is libwool.Cancelled
    assert isinstance(error, libwool.WoolError) and not isinstance(error, libwool.RpcError)
    assert not isinstance(error, asyncio.CancelledError)
    assert (error.code_name, str(error)) == ("CANCELLED",
                                             "CANCELLED: wool_cancel: the call was cancelled")
    assert LIBRARY.status_name(_ffi.CANCELLED) == libwool.Cancelled.status


# ---------------------------------------------------------------- many workers


def test_aio_idle_many_over_workers_and_an_unreachable_address(spawn_worker, unused_address):
    # Given three workers, an unreachable address, a closed connection, a blocking
    # connection and a repeated one, When idle_many sweeps them, Then each slot holds its
    # own result in order: floats for the workers, TransientRpcError UNAVAILABLE for the
    # unreachable one, ValueError for the closed one.
    workers = [spawn_worker() for _ in range(3)]

    async def main():
        conns = [aio.WorkerConnection(w.address) for w in workers]
        unreachable = aio.WorkerConnection(unused_address)
        closed = aio.WorkerConnection(workers[0].address)
        await closed.close()
        blocking = libwool.WorkerConnection(workers[1].address)
        try:
            results = await aio.idle_many(
                [*conns, unreachable, closed, blocking, conns[0]], timeout=10.0,
                max_in_flight=2,
            )
        finally:
            for conn in [*conns, unreachable]:
                await conn.close()
            blocking.close()
        return results, loop_queue().in_flight

    results, in_flight = run(main())
    assert len(results) == 7
    for i in (0, 1, 2, 5, 6):
        assert isinstance(results[i], float) and results[i] >= 0.0, results[i]
    assert type(results[3]) is libwool.TransientRpcError and results[3].code == 14
    assert results[3].details.startswith("wool_idle: ") and unused_address in results[3].details
    assert type(results[4]) is ValueError and "closed" in str(results[4])
    assert in_flight == 0


def test_aio_idle_many_keeps_one_deadline(silent_listener, worker):
    # Given a silent peer first and max_in_flight=1, When the sweep has 0.5 s, Then the
    # silent poll takes the whole deadline and the polls after it fail DEADLINE_EXCEEDED
    # without running; the sweep ends after ~0.5 s.
    async def main():
        conns = [aio.WorkerConnection(a) for a in (silent_listener, worker.address,
                                                   worker.address)]
        started = time.monotonic()
        results = await aio.idle_many(conns, timeout=0.5, max_in_flight=1)
        took = time.monotonic() - started
        for conn in conns:
            await conn.close()
        return results, took

    results, took = run(main())
    assert 0.45 <= took < 2.0
    for result in results:
        assert type(result) is libwool.TransientRpcError, result
        assert result.code == 4
    assert "before this poll was sent" in results[2].details


def test_aio_idle_many_cancelled_resets_every_poll_in_flight(silent_listener):
    # Given a sweep of five silent peers with no deadline and max_in_flight=3 (one call of
    # libwool in flight on the loop's queue), When its task is cancelled, Then it ends at once
    # with CancelledError, the sweep was cancelled in libwool (one CANCELLED completion,
    # collected), and nothing is left in flight.
    async def main():
        conns = [aio.WorkerConnection(silent_listener) for _ in range(5)]
        queue = loop_queue()
        task = asyncio.create_task(aio.idle_many(conns, max_in_flight=3))
        await asyncio.sleep(0.3)
        assert queue.in_flight == 1
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        took = time.monotonic() - started
        await asyncio.sleep(0.1)
        for conn in conns:
            await conn.close()
        return took, queue.cancelled, queue.in_flight, uncollected(queue)

    took, cancelled, in_flight, left = run(main())
    assert took < 0.5
    assert (cancelled, in_flight, left) == (1, 0, 0)


def test_aio_idle_many_arguments():
    async def main():
        assert await aio.idle_many([]) == []
        with pytest.raises(ValueError, match="timeout"):
            await aio.idle_many([], timeout=0)
        with pytest.raises(ValueError, match="timeout"):
            await aio.idle_many([], timeout=-1.0)
        with pytest.raises(ValueError, match="max_in_flight"):
            await aio.idle_many([], max_in_flight=0)
        with pytest.raises(TypeError, match="max_in_flight"):
            await aio.idle_many([], max_in_flight=True)
        with pytest.raises(TypeError, match="connections"):
            await aio.idle_many(["127.0.0.1:1"])

    run(main())


# ---------------------------------------------------------------- loops and cleanup


def test_aio_queue_is_released_when_its_loop_closes(worker):
    # Each loop gets its own queue. A loop closed by asyncio.run and collected releases its
    # queue; a loop closed but still referenced has its queue released when another loop
    # makes its own.
    async def use():
        async with aio.WorkerConnection(worker.address) as conn:
            await asyncio.gather(*(conn.idle(timeout=10.0) for _ in range(10)))
        return loop_queue()

    first = asyncio.run(use())
    gc.collect()
    assert first.handle is None

    kept = asyncio.new_event_loop()
    try:
        second = kept.run_until_complete(use())
    finally:
        kept.close()
    assert second is not first and second.handle is not None  # closed, but not collected
    third = asyncio.run(use())  # its queue is made: the sweep frees the closed loop's
    assert second.handle is None
    assert third is not second
    del kept
    gc.collect()
    assert third.handle is None


def test_aio_loops_in_several_threads_poll_at_once(worker):
    # Four threads, each with its own loop (and queue), gather 200 polls on one shared
    # connection: all succeed.
    conn = aio.WorkerConnection(worker.address)
    results: dict[int, list] = {}
    queues: dict[int, aio._LoopQueue] = {}

    async def sweep(n: int):
        polls = await asyncio.gather(*(conn.idle(timeout=30.0) for _ in range(200)))
        queues[n] = loop_queue()
        return polls

    def thread_main(n: int):
        results[n] = asyncio.run(sweep(n))

    threads = [threading.Thread(target=thread_main, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    run(conn.close())
    assert sorted(results) == [0, 1, 2, 3]
    assert all(len(r) == 200 and all(x >= 0.0 for x in r) for r in results.values())
    assert len({id(q) for q in queues.values()}) == 4
