#!/usr/bin/env python3
"""libwool's asyncio API (bindings/python, ``libwool.aio``) against any worker: the
counterpart of wool_client_bench.py (Wool's own asyncio client) on libwool's completion queue.

    python asyncio_idle.py burst ADDR LEVELS SECONDS   bursts: asyncio.gather of N idle() on
                                                       ONE aio.WorkerConnection, repeated for
                                                       SECONDS (at least one burst); failures
                                                       are counted, not raised
    python asyncio_idle.py seq   ADDR N WARMUP         sequential awaited idle() latency

The library is ``$LIBWOOL_PATH`` when set (the harness sets it), else this checkout's
target/release then target/debug build. One line of JSON on stdout, raw measurements in the
shape of the other drivers' (burst: {"levels": [{"concurrency", "bursts", "ok", "failed",
"elapsed_s", "first_error"}], ...}; seq: {"samples_ns", "elapsed_s", "cpu_s"}): benches/run.py
computes the statistics. Not a test: nothing here asserts on time.
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
from common import emit, gather_bursts, latency_samples  # noqa: E402


async def burst(addr: str, levels: list[int], seconds: float) -> dict:
    conn = aio.WorkerConnection(addr)
    try:
        await conn.idle(timeout=10.0)
        rows = await gather_bursts(conn, levels, seconds)
    finally:
        await conn.close()
    return {"levels": rows, "library": libwool.version(), "library_path": libwool.load().path}


async def seq(addr: str, n: int, warmup: int) -> dict:
    async with aio.WorkerConnection(addr) as conn:
        for _ in range(warmup):
            await conn.idle(timeout=10.0)
        perf = time.perf_counter_ns
        samples = [0] * n
        cpu = time.process_time()
        start = perf()
        for i in range(n):
            t = perf()
            await conn.idle(timeout=10.0)
            samples[i] = perf() - t
        elapsed = (perf() - start) / 1e9
        cpu = time.process_time() - cpu
    return latency_samples(samples, elapsed, cpu, library=libwool.version())


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, addr = sys.argv[1], sys.argv[2]
    if cmd == "burst" and len(sys.argv) == 5:
        levels = [int(x) for x in sys.argv[3].split(",")]
        emit(asyncio.run(burst(addr, levels, float(sys.argv[4]))))
    elif cmd == "seq" and len(sys.argv) == 5:
        emit(asyncio.run(seq(addr, int(sys.argv[3]), int(sys.argv[4]))))
    else:
        print(f"unknown command or arguments: {sys.argv[1:]}\n{__doc__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
