"""Handle lifetimes through the Python API: libwool owns them (docs/C-API.md, "Handles"), so the
binding keeps no lock or count of its own. A connection closed twice, used after its close,
closed while threads are in calls on it or while a sweep runs; the asyncio API the same; a
watch closed while another thread waits on it. Each call ends with its answer or ValueError
("closed"), never a crash or a hang."""

from __future__ import annotations

import asyncio
import ctypes
import threading
import uuid

import pytest

import libwool
from libwool import _ffi, aio, fleet


def test_a_connection_closed_twice_and_used_after_is_refused_as_closed(worker):
    conn = libwool.WorkerConnection(worker.address)
    assert conn.idle(timeout=5.0) >= 0.0
    conn.close()
    conn.close()  # nothing: libwool's second free is a no-op too
    assert conn.closed
    with pytest.raises(ValueError, match="closed"):
        conn.idle(timeout=5.0)
    with pytest.raises(ValueError, match="closed"):
        conn.stop(grace=0.0, timeout=5.0)
    # The library itself refuses the freed handle, with its own message: never a crash.
    seconds = ctypes.c_double()
    status = conn._library.wool_idle(conn._handle, 5.0, ctypes.byref(seconds))
    assert status == _ffi.INVALID_ARGUMENT
    message, code = conn._library.last_error()
    assert "connection handle already freed" in message and code == -1


def test_closing_while_16_threads_poll_ends_each_with_its_answer_or_closed(worker):
    conn = libwool.WorkerConnection(worker.address)
    started = threading.Barrier(17)
    outcomes: list[object] = []
    lock = threading.Lock()

    def poll() -> None:
        started.wait()
        answered = 0
        while True:
            try:
                conn.idle(timeout=10.0)
                answered += 1
            except ValueError as e:
                with lock:
                    outcomes.append(("closed", answered, str(e)))
                return
            except Exception as e:  # noqa: anything else fails the test below
                with lock:
                    outcomes.append(("failed", answered, repr(e)))
                return

    threads = [threading.Thread(target=poll) for _ in range(16)]
    for thread in threads:
        thread.start()
    started.wait()
    conn.close()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive(), "a poll of the closed connection never returned"
    assert [o[0] for o in outcomes] == ["closed"] * 16, outcomes
    assert all("closed" in o[2] for o in outcomes)


def test_a_sweep_reports_a_closed_connection_in_its_slot(worker):
    open_one = libwool.WorkerConnection(worker.address)
    closed = libwool.WorkerConnection(worker.address)
    closed.close()
    try:
        results = fleet.sweep([open_one, closed, open_one], timeout=10.0)
        assert isinstance(results[0], float) and isinstance(results[2], float)
        assert type(results[1]) is ValueError and "closed" in str(results[1])
        decisions = fleet.retire_idle([closed], fleet.RetirePolicy(idle_threshold=1e9))
        assert decisions[0].reason == "poll-failed"
        assert type(decisions[0].idle_error) is ValueError
        with pytest.raises(ValueError, match="max_in_flight must be at least 1"):
            fleet.sweep([open_one], timeout=1.0, max_in_flight=0)
    finally:
        open_one.close()


def test_a_connection_closed_while_a_sweep_runs_is_still_polled(silent_listener, worker):
    # A sweep to a silent peer runs to its deadline; the connections are closed meanwhile:
    # libwool keeps what the sweep needs, and the live worker's reading comes back.
    silent = libwool.WorkerConnection(silent_listener)
    live = libwool.WorkerConnection(worker.address)
    results: list = []
    sweeping = threading.Thread(
        target=lambda: results.extend(fleet.sweep([silent, live], timeout=1.0)))
    sweeping.start()
    silent.close()
    live.close()
    sweeping.join(30)
    assert not sweeping.is_alive()
    assert len(results) == 2
    # Each slot: its outcome, or the refusal of a handle closed before the sweep took it.
    assert isinstance(results[0], (libwool.TransientRpcError, ValueError)), results
    assert isinstance(results[1], (float, ValueError)), results


def test_asyncio_calls_on_a_connection_closed_under_them(worker, silent_listener):
    async def main():
        conn = aio.WorkerConnection(worker.address)
        silent = aio.WorkerConnection(silent_listener)
        # Calls in flight when the connections are closed finish as they would have.
        polls = [asyncio.ensure_future(conn.idle(timeout=10.0)) for _ in range(50)]
        stuck = asyncio.ensure_future(silent.idle(timeout=0.5))
        await asyncio.sleep(0)
        await conn.close()
        await silent.close()
        await silent.close()
        answers = await asyncio.gather(*polls, return_exceptions=True)
        deadline = await asyncio.gather(stuck, return_exceptions=True)
        with pytest.raises(ValueError, match="closed"):
            await conn.idle(timeout=1.0)
        swept = await aio.idle_many([conn], timeout=1.0)
        with pytest.raises(ValueError, match="max_in_flight must be at least 1"):
            await aio.idle_many([conn], timeout=1.0, max_in_flight=0)
        return answers, deadline[0], swept[0]

    answers, deadline, swept = asyncio.run(asyncio.wait_for(main(), 60))
    assert all(isinstance(a, (float, ValueError)) for a in answers), answers
    assert isinstance(deadline, (libwool.TransientRpcError, ValueError)), deadline
    assert type(swept) is ValueError and "closed" in str(swept)


def test_a_watch_closed_while_another_thread_waits_on_it():
    watch = fleet.watch(f"libwool-handles-{uuid.uuid4().hex[:12]}")
    outcome: list = []

    def wait() -> None:
        try:
            outcome.append(watch.next(timeout=None))
        except ValueError as e:
            outcome.append(e)

    thread = threading.Thread(target=wait)
    thread.start()
    thread.join(0.3)
    watch.close()
    watch.close()
    thread.join(10)
    assert not thread.is_alive(), "next() on a closed watch never returned"
    assert len(outcome) == 1 and type(outcome[0]) is ValueError, outcome
