"""SIGTERM to a busy worker: what Kubernetes does to a pod, against real Wool 0.15.7 workers
and a real Wool client (`WorkerProxy`) dispatching `sleepy_app.nap`.

Each case dispatches a 4 s task, waits until the worker has it (its idle time reads 0), lets
1 s of it pass, then signals.
"""

from __future__ import annotations

import asyncio
import os
import signal

import grpc
import pytest
import sleepy_app
from conftest import CHANGE_LIMIT, timed, wait_busy, wait_until, worker_metadata
from wool.runtime.loadbalancer.base import NoWorkersAvailable
from wool.runtime.worker.connection import TransientRpcError
from wool.runtime.worker.process import WorkerProcess
from wool.runtime.worker.proxy import WorkerProxy

pytestmark = pytest.mark.usefixtures("installed_package")

TASK = 4.0
INTO_THE_TASK = 1.0


async def until_probe(worker, path: str, status: int) -> None:
    await asyncio.to_thread(
        wait_until, lambda: worker.probe(path) == status, CHANGE_LIMIT, f"GET {path} answers {status}"
    )


def test_wool_default_worker_cancels_the_task_on_sigterm():
    """Given Wool's own worker process, started as Wool's pool starts it (`WorkerProcess` with
    its defaults), when it gets SIGTERM 1 s into a 4 s task, then the caller sees the task
    cancelled, well before its 4 s."""
    worker = WorkerProcess()
    worker.start(timeout=60)
    try:

        async def scenario():
            async with WorkerProxy(workers=[worker_metadata(worker.address, worker.pid)]):
                task = asyncio.create_task(timed(sleepy_app.nap(TASK)))
                await wait_busy(worker.address)
                await asyncio.sleep(INTO_THE_TASK)
                os.kill(worker.pid, signal.SIGTERM)
                return await task

        outcome = asyncio.run(scenario())
        assert outcome.how == "cancelled", outcome
        assert outcome.seconds < TASK, outcome
    finally:
        worker.reap(timeout=30)


def test_entrypoint_drains_on_sigterm(entrypoint):
    """Given the entrypoint with a 30 s grace, when it gets SIGTERM 1 s into a 4 s task, then
    readiness turns false, a dispatch sent after the SIGTERM is refused (UNAVAILABLE, the
    worker shutting down) while the first task still runs, the first task completes, and the
    process exits 0 having logged each step."""
    worker = entrypoint("--grace", "30")
    assert worker.probe("/readyz") == 200
    assert worker.probe("/livez") == 200

    async def scenario():
        async with WorkerProxy(workers=[worker_metadata(worker.address, worker.process.pid)]):
            first = asyncio.create_task(timed(sleepy_app.nap(TASK)))
            await wait_busy(worker.address)
            await asyncio.sleep(INTO_THE_TASK)
            worker.signal(signal.SIGTERM)
            await until_probe(worker, "/readyz", 503)
            with pytest.raises(NoWorkersAvailable) as refused:
                await sleepy_app.nap(0.1)
            if first.done():
                pytest.fail("precondition not met: the first task ended before the late dispatch was refused")
            return refused.value.__cause__, await first

    refusal, outcome = asyncio.run(scenario())
    assert isinstance(refusal, TransientRpcError), refusal
    assert refusal.code == grpc.StatusCode.UNAVAILABLE and "shutting down" in refusal.details, refusal
    assert outcome.how == "completed" and outcome.value == TASK, outcome
    assert worker.wait() == 0, worker.log()
    log = worker.log()
    for step in ("started: Wool 0.15.7", "stop begun by SIGTERM: grace 30 s, 1 in flight", "drained in", "exited"):
        assert step in log, f"missing {step!r} in:\n{log}"


def test_entrypoint_second_signal_cancels(entrypoint):
    """Given the entrypoint draining after a SIGTERM (30 s grace), when a second SIGTERM
    comes, then the in-flight task is cancelled at once (its caller sees the cancellation well
    before 4 s) and the process exits 0."""
    worker = entrypoint("--grace", "30")

    async def scenario():
        async with WorkerProxy(workers=[worker_metadata(worker.address, worker.process.pid)]):
            task = asyncio.create_task(timed(sleepy_app.nap(TASK)))
            await wait_busy(worker.address)
            await asyncio.sleep(INTO_THE_TASK)
            worker.signal(signal.SIGTERM)
            await until_probe(worker, "/readyz", 503)
            worker.signal(signal.SIGTERM)
            return await task

    outcome = asyncio.run(scenario())
    assert outcome.how == "cancelled" and outcome.seconds < TASK, outcome
    assert worker.wait() == 0, worker.log()
    log = worker.log()
    for step in ("SIGTERM during the stop: cancelling 1 in-flight tasks now", "in-flight tasks cancelled", "exited"):
        assert step in log, f"missing {step!r} in:\n{log}"


def test_entrypoint_grace_end_cancels(entrypoint):
    """Given the entrypoint with a 1 s grace, when it gets SIGTERM 1 s into a 4 s task, then
    the task is cancelled when the grace ends (about 2 s in, before its 4 s) and the process
    exits 0."""
    worker = entrypoint("--grace", "1")

    async def scenario():
        async with WorkerProxy(workers=[worker_metadata(worker.address, worker.process.pid)]):
            task = asyncio.create_task(timed(sleepy_app.nap(TASK)))
            await wait_busy(worker.address)
            await asyncio.sleep(INTO_THE_TASK)
            worker.signal(signal.SIGTERM)
            return await task

    outcome = asyncio.run(scenario())
    assert outcome.how == "cancelled" and outcome.seconds < TASK, outcome
    assert worker.wait() == 0, worker.log()
    log = worker.log()
    for step in ("grace of 1 s over: cancelling 1 in-flight tasks", "the grace of 1 s ended", "exited"):
        assert step in log, f"missing {step!r} in:\n{log}"


def test_entrypoint_idle_sigterm_exits_at_once(entrypoint):
    """Given an idle entrypoint, when it gets SIGTERM, then it drains nothing and exits 0."""
    worker = entrypoint()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()
    assert "stop begun by SIGTERM: grace 110 s, 0 in flight" in worker.log()
