#!/usr/bin/env python3
"""Dispatch helpers for the echo benchmark (scripts/bench.sh, BENCHMARKS.md).

    python wool_dispatch.py template-wool OUT BYTES
        Writes a wire ``Task`` (protobuf bytes) for ``echo(b"x" * BYTES)`` encoded exactly as
        Wool's own client encodes it: ``wool.runtime.routine.task.Task(...).to_protobuf()``
        (cloudpickled ``@wool.routine`` coroutine, args tuple, kwargs dict, pickled proxy).
        The Rust driver (``wool_bench dispatch-raw``) replays it with a fresh UUID per task.
    python wool_dispatch.py template-rust OUT BYTES
        The same for a libwool worker: ``callable = b"echo"``, ``args = b"x" * BYTES``.
    python wool_dispatch.py e2e ADDR CONCURRENCY SECONDS BYTES
        Wool end to end: CONCURRENCY asyncio tasks each awaiting ``echo(payload)`` back to
        back for SECONDS through ``wool.WorkerProxy(workers=[WorkerMetadata(address=ADDR)])``
        (Wool's own client API, as tests/interop/wool_worker.py uses it). One JSON line: the
        counts and the elapsed time ({"concurrency", "elapsed_s", "ok", "failed",
        "first_error"}, as ``wool_bench dispatch``); benches/run.py computes the rate.

Run with target/venvs/wool-0.15.7/bin/python. Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wool  # noqa: E402
from common import emit  # noqa: E402


@wool.routine
async def echo(data: bytes) -> bytes:
    """The Python twin of wool-worker's ``echo`` routine: returns its input."""
    return data


def template_wool(out: str, nbytes: int) -> None:
    from wool.runtime.routine.task import Task

    proxy = wool.WorkerProxy("bench-template")  # lazy: never connects
    msg = Task(
        id=uuid.uuid4(), callable=echo, args=(b"x" * nbytes,), kwargs={}, proxy=proxy,
        tag=f"{__name__}.echo",
    ).to_protobuf()
    with open(out, "wb") as f:
        f.write(msg.SerializeToString())


def template_rust(out: str, nbytes: int) -> None:
    from wool.protocol import wire_pb2 as pb

    msg = pb.Task(version="0.15.7", id=str(uuid.uuid4()), tag="bench:echo", callable=b"echo",
                  args=b"x" * nbytes)
    with open(out, "wb") as f:
        f.write(msg.SerializeToString())


async def e2e(addr: str, concurrency: int, seconds: float, nbytes: int) -> dict:
    from wool.runtime.worker.metadata import WorkerMetadata

    payload = b"x" * nbytes
    metadata = WorkerMetadata(uid=uuid.uuid4(), address=addr, pid=0, version=wool.__version__)
    ok = failed = 0
    first_error = ""
    async with wool.WorkerProxy(workers=[metadata]):
        for _ in range(10):  # warm-up: connection, worker loop, pickling caches
            assert await echo(payload) == payload
        deadline = time.perf_counter() + seconds

        async def loop() -> None:
            nonlocal ok, failed, first_error
            while time.perf_counter() < deadline:
                try:
                    if await echo(payload) == payload:
                        ok += 1
                    else:
                        failed += 1
                except Exception as e:  # counted, not raised
                    failed += 1
                    if not first_error:
                        first_error = f"{type(e).__name__}: {e}"[:200]

        start = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {"concurrency": concurrency, "elapsed_s": elapsed, "ok": ok, "failed": failed,
            "first_error": first_error}


def main() -> int:
    cmd = sys.argv[1]
    if cmd == "template-wool":
        template_wool(sys.argv[2], int(sys.argv[3]))
    elif cmd == "template-rust":
        template_rust(sys.argv[2], int(sys.argv[3]))
    elif cmd == "e2e":
        emit(asyncio.run(e2e(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
                             int(sys.argv[5]))))
    else:
        print(f"unknown command {cmd}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
