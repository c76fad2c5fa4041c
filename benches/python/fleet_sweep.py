#!/usr/bin/env python3
"""Fleet sweeps from Python through the libwool binding (bindings/python), for the fleet
section of benches/run.py (BENCHMARKS.md):

    python fleet_sweep.py aio  ADDRFILE MAX SWEEPS [TIMEOUT]   libwool.aio.idle_many
    python fleet_sweep.py sync ADDRFILE MAX SWEEPS [TIMEOUT]   libwool.fleet.sweep (blocking)

One connection per address in ADDRFILE (aio.WorkerConnection / libwool.WorkerConnection), MAX
polls in flight, one deadline of TIMEOUT seconds (default 30) per sweep; one cold sweep
(connections made during it) then SWEEPS warm ones, all in this process. One line of JSON on
stdout in the shape of the Rust driver's ``sweep`` ({"endpoints", "concurrency", "sweep_ns":
[cold, warm...] in integer nanoseconds, "failures": [per sweep], "first_error"}; benches/run.py
computes the statistics). The library is ``$LIBWOOL_PATH`` when set (the harness
sets it). Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))
sys.path.insert(0, HERE)

import libwool  # noqa: E402
from libwool import aio  # noqa: E402
from common import emit  # noqa: E402


def summary(addrs, most, times, failures, first_error, mode) -> dict:
    return {"endpoints": len(addrs), "concurrency": most, "sweep_ns": times,
            "failures": failures, "first_error": first_error, "mode": mode,
            "library": libwool.version()}


def count(results, first_error: str) -> tuple[int, str]:
    failed = 0
    for r in results:
        if isinstance(r, BaseException):
            failed += 1
            if not first_error:
                first_error = f"{type(r).__name__}: {' '.join(str(r).split())[:200]}"
    return failed, first_error


async def run_aio(addrs: list[str], most: int, sweeps: int, timeout: float) -> dict:
    conns = [aio.WorkerConnection(a) for a in addrs]
    times, failures, first_error = [], [], ""
    try:
        for _ in range(sweeps + 1):
            t = time.perf_counter_ns()
            results = await aio.idle_many(conns, timeout=timeout, max_in_flight=most)
            times.append(time.perf_counter_ns() - t)
            failed, first_error = count(results, first_error)
            failures.append(failed)
    finally:
        for conn in conns:
            await conn.close()
    return summary(addrs, most, times, failures, first_error, "aio.idle_many")


def run_sync(addrs: list[str], most: int, sweeps: int, timeout: float) -> dict:
    from libwool import fleet

    conns = [libwool.WorkerConnection(a) for a in addrs]
    times, failures, first_error = [], [], ""
    try:
        for _ in range(sweeps + 1):
            t = time.perf_counter_ns()
            results = fleet.sweep(conns, timeout=timeout, max_in_flight=most)
            times.append(time.perf_counter_ns() - t)
            failed, first_error = count(results, first_error)
            failures.append(failed)
    finally:
        for conn in conns:
            conn.close()
    return summary(addrs, most, times, failures, first_error, "fleet.sweep")


def main() -> int:
    if len(sys.argv) not in (5, 6) or sys.argv[1] not in ("aio", "sync"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, path, most, sweeps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    timeout = float(sys.argv[5]) if len(sys.argv) == 6 else 30.0
    with open(path) as f:
        addrs = [line.strip() for line in f if line.strip()]
    if mode == "aio":
        emit(asyncio.run(run_aio(addrs, most, sweeps, timeout)))
    else:
        emit(run_sync(addrs, most, sweeps, timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
