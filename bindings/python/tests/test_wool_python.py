"""WorkerConnection against real Wool workers (tests/interop/wool_worker.py: a LocalWorker),
wool 0.15.7 (answers idle) and 0.13.1 (predates it)."""

from __future__ import annotations

import time

import pytest

import libwool
from libwool import WorkerConnection, WorkerCredentials

from conftest import PY13, PY15


def test_wool_0_15_7_idle_accrues_then_stop_retires_it(spawn_wool):
    # Given a Wool 0.15.7 worker with nothing to do, When idle is polled twice,
    # Then it grows; When stop(grace=0), Then the worker process ends by itself, status 0.
    worker = spawn_wool(PY15)
    with WorkerConnection(worker.address) as conn:
        first = conn.idle(timeout=10.0)
        time.sleep(0.2)
        second = conn.idle(timeout=10.0)
        assert first >= 0.0
        assert second - first >= 0.15
        conn.stop(grace=0.0, timeout=30.0)
    worker.expect(lambda line: line == "stopped remote", 30)
    assert worker.wait(30) == 0


def test_wool_0_15_7_idle_is_exactly_zero_while_a_wool_task_runs(spawn_wool):
    # Given a Wool worker running a 2 s task dispatched through Wool's own API (--busy),
    # When idle is polled after the worker acknowledged it, Then it reads exactly 0.0;
    # And after the task returned, idle is positive again.
    worker = spawn_wool(PY15, "--busy", "2.0")
    worker.expect(lambda line: line == "busy-start", 30)
    with WorkerConnection(worker.address) as conn:
        readings = []
        for _ in range(3):
            readings.append(conn.idle(timeout=10.0))
            time.sleep(0.1)
        worker.expect(lambda line: line == "busy-done", 30)
        after = conn.idle(timeout=10.0)
    assert readings == [0.0, 0.0, 0.0]
    assert after > 0.0


def test_wool_0_15_7_mutual_tls(spawn_wool, certs):
    # Given a Wool worker serving mutual TLS with worker.pem, When this client presents
    # client.pem (same CA), Then idle answers; When it trusts only the rogue CA,
    # Then HandshakeError.
    worker = spawn_wool(
        PY15,
        "--tls-ca", certs / "ca.pem",
        "--tls-cert", certs / "worker.pem",
        "--tls-key", certs / "worker.key",
    )  # fmt: skip
    good = WorkerCredentials.from_files(
        certs / "ca.pem", certs / "client.key", certs / "client.pem"
    )
    with WorkerConnection(worker.address, good) as conn:
        assert conn.idle(timeout=10.0) >= 0.0
    rogue = WorkerCredentials.from_files(
        certs / "rogue-ca.pem", certs / "client.key", certs / "client.pem"
    )
    with WorkerConnection(worker.address, rogue) as conn:
        with pytest.raises(libwool.HandshakeError):
            conn.idle(timeout=10.0)


def test_wool_0_13_1_idle_is_unavailable_and_stop_still_retires_it(spawn_wool):
    # Given a Wool 0.13.1 worker (no idle RPC), When idle is polled,
    # Then IdleUnavailable with gRPC code 12, which `except RpcError` would not catch;
    # When stop, Then the worker ends by itself, status 0.
    worker = spawn_wool(PY13)
    with WorkerConnection(worker.address) as conn:
        with pytest.raises(libwool.IdleUnavailable) as caught:
            conn.idle(timeout=10.0)
        assert not isinstance(caught.value, libwool.RpcError)
        assert (caught.value.code, caught.value.code_name) == (12, "UNIMPLEMENTED")
        conn.stop(grace=0.0, timeout=30.0)
    worker.expect(lambda line: line == "stopped remote", 30)
    assert worker.wait(30) == 0
