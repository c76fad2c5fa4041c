"""libwool after fork(): a forked child (multiprocessing's "fork" start method) polls through
connections it inherited and ones it makes, retires a worker, and the parent keeps working,
including when the fork lands while another parent thread is in the middle of a call."""

from __future__ import annotations

import multiprocessing
import threading
import time
import traceback
from collections.abc import Callable

import pytest

from libwool import WorkerConnection

HAVE_FORK = "fork" in multiprocessing.get_all_start_methods()
pytestmark = pytest.mark.skipif(not HAVE_FORK, reason="needs fork()")
FORK = multiprocessing.get_context("fork") if HAVE_FORK else None

#: How long the parent waits for a child at each step: a hang fails the test instead.
CHILD_TIMEOUT = 30.0


def run_in_child(body: Callable[[], object], timeout: float = CHILD_TIMEOUT) -> object:
    """Run `body` in a forked child and return what it returned (a picklable value).

    An exception in the child is re-raised here as an AssertionError carrying the child's
    traceback; a child that neither reports nor exits within `timeout` fails the test (and is
    killed), as does a child exiting non-zero.
    """
    reader, writer = FORK.Pipe(duplex=False)

    def child() -> None:
        try:
            report = ("ok", body())
        except BaseException:  # noqa: everything goes back to the parent
            report = ("error", traceback.format_exc())
        writer.send(report)
        writer.close()

    process = FORK.Process(target=child, name="libwool-fork-test", daemon=True)
    process.start()
    writer.close()  # the parent's copy: EOF once the child's is closed too
    try:
        if not reader.poll(timeout):
            raise AssertionError(f"the forked child reported nothing within {timeout} s (hung)")
        try:
            kind, value = reader.recv()
        except EOFError:
            process.join(timeout)
            raise AssertionError(
                f"the forked child died without reporting (exit code {process.exitcode})"
            ) from None
        process.join(timeout)
        assert not process.is_alive(), f"the forked child did not exit within {timeout} s"
        assert process.exitcode == 0, f"the forked child exited with {process.exitcode}"
    finally:
        if process.is_alive():
            process.kill()
            process.join(5)
        reader.close()
    if kind == "error":
        raise AssertionError(f"in the forked child:\n{value}")
    return value


def test_a_forked_child_polls_inherited_and_new_connections_and_retires_a_worker(spawn_worker):
    # Given a parent whose connection has polled a worker (so libwool's runtime and pool
    # exist in the parent), When a forked child polls through the inherited connection and
    # through a new one, then stops a second worker through a new connection,
    # Then every call in the child succeeds, the second worker exits 0, and the parent's
    # connection (and a new one) still poll afterwards.
    polled = spawn_worker()
    retired = spawn_worker()
    with WorkerConnection(polled.address) as conn:
        assert conn.idle(timeout=5.0) >= 0.0

        def in_child() -> dict[str, float]:
            inherited = conn.idle(timeout=5.0)
            with WorkerConnection(polled.address) as fresh:
                new = fresh.idle(timeout=5.0)
            inherited_again = conn.idle(timeout=5.0)
            with WorkerConnection(retired.address) as other:
                other.stop(grace=0.0, timeout=10.0)
            conn.close()  # the child's copy of the handle; the parent keeps its own
            return {"inherited": inherited, "new": new, "inherited_again": inherited_again}

        readings = run_in_child(in_child)
        assert all(seconds >= 0.0 for seconds in readings.values()), readings
        assert retired.wait(10) == 0
        assert conn.idle(timeout=5.0) >= 0.0
    with WorkerConnection(polled.address) as again:
        assert again.idle(timeout=5.0) >= 0.0


def test_a_fork_while_another_thread_is_in_a_poll_loop(worker):
    # Given a parent thread polling one connection in a tight loop (so most forks land while
    # it is inside libwool), When the main thread forks children one after another,
    # Then each child polls through the inherited connection and a new one, the loop in the
    # parent never fails and keeps going, and the parent's connection polls at the end.
    with WorkerConnection(worker.address) as conn:
        stop = threading.Event()
        polls = [0]
        failures: list[BaseException] = []

        def poll_loop() -> None:
            while not stop.is_set():
                try:
                    conn.idle(timeout=5.0)
                except BaseException as e:  # noqa: reported below
                    failures.append(e)
                    return
                polls[0] += 1

        poller = threading.Thread(target=poll_loop, daemon=True)
        poller.start()
        try:
            deadline = time.monotonic() + 10.0
            while polls[0] < 20 and not failures and time.monotonic() < deadline:
                time.sleep(0.01)
            assert polls[0] >= 20, f"the poll loop made only {polls[0]} polls: {failures}"

            def in_child() -> tuple[float, float]:
                inherited = conn.idle(timeout=5.0)
                with WorkerConnection(worker.address) as fresh:
                    return inherited, fresh.idle(timeout=5.0)

            for _ in range(5):
                before = polls[0]
                inherited, new = run_in_child(in_child)
                assert inherited >= 0.0 and new >= 0.0
                deadline = time.monotonic() + 10.0
                while polls[0] <= before + 5 and not failures and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert polls[0] > before + 5, "the parent's poll loop stalled after the fork"
        finally:
            stop.set()
            poller.join(10)
        assert not poller.is_alive(), "the parent's poll loop did not stop"
        assert failures == []
        assert conn.idle(timeout=5.0) >= 0.0


def test_a_fork_while_a_call_in_the_parent_is_blocked(worker, silent_listener):
    # Given a parent thread blocked in a call to a listener that never answers,
    # When the main thread forks, Then the child polls the worker (through a connection
    # inherited and a new one), and the parent's blocked call ends by its own deadline.
    with WorkerConnection(worker.address) as conn, WorkerConnection(silent_listener) as silent:
        assert conn.idle(timeout=5.0) >= 0.0
        outcome: list[BaseException] = []

        def blocked() -> None:
            try:
                silent.idle(timeout=3.0)
            except BaseException as e:  # noqa: checked below
                outcome.append(e)

        thread = threading.Thread(target=blocked, daemon=True)
        thread.start()
        time.sleep(0.3)  # let it enter libwool

        def in_child() -> tuple[float, float]:
            inherited = conn.idle(timeout=5.0)
            with WorkerConnection(worker.address) as fresh:
                return inherited, fresh.idle(timeout=5.0)

        inherited, new = run_in_child(in_child)
        assert inherited >= 0.0 and new >= 0.0
        thread.join(15)
        assert not thread.is_alive()
        assert [e.code_name for e in outcome] == ["DEADLINE_EXCEEDED"], outcome
        assert conn.idle(timeout=5.0) >= 0.0


def test_a_fork_while_another_thread_closes_a_connection_leaves_the_child_working(worker):
    # The binding holds no lock of its own around a connection (libwool owns the handle's
    # lifetime), so a fork can catch no such lock held. A parent thread closing connections
    # in a loop while the parent forks: the child still polls through a connection it
    # inherited open, and one the parent had closed is refused there as closed.
    with WorkerConnection(worker.address) as conn:
        assert conn.idle(timeout=5.0) >= 0.0
        closed = WorkerConnection(worker.address)
        closed.close()
        stop = threading.Event()

        def churn() -> None:
            while not stop.is_set():
                WorkerConnection(worker.address).close()

        thread = threading.Thread(target=churn)
        thread.start()
        try:
            def in_child() -> tuple[float, str]:
                seconds = conn.idle(timeout=5.0)
                try:
                    closed.idle(timeout=5.0)
                except ValueError as e:
                    return seconds, str(e)
                return seconds, "not refused"

            seconds, refusal = run_in_child(in_child)
        finally:
            stop.set()
            thread.join(15)
        assert seconds >= 0.0
        assert "closed" in refusal, refusal
        assert conn.idle(timeout=5.0) >= 0.0
