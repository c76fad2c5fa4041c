#!/usr/bin/env python3
"""Wool 0.15.7's own Python client, ``wool.WorkerConnection``, against any worker.

    python wool_client_bench.py seq     ADDR N WARMUP        (f) sequential idle() latency
    python wool_client_bench.py burst   ADDR LEVELS SECONDS  bursts: asyncio.gather of N idle()
                                                             on ONE WorkerConnection, repeated for
                                                             SECONDS (at least one burst);
                                                             failures are counted, not raised
    python wool_client_bench.py handles ADDR N               N WorkerConnections, each polled
                                                             once; prints "ready {...}", then
                                                             waits for a line on stdin

Run with target/venvs/wool-0.15.7/bin/python. One line of JSON on stdout: raw samples and
totals (common.py), from which benches/run.py computes the statistics. Not a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit, gather_bursts, latency_samples, wait_for_line  # noqa: E402


async def seq(addr: str, n: int, warmup: int) -> dict:
    from wool import WorkerConnection

    conn = WorkerConnection(addr)
    try:
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
    finally:
        await conn.close()
    return latency_samples(samples, elapsed, cpu)


async def burst(addr: str, levels: list[int], seconds: float) -> dict:
    from wool import WorkerConnection

    conn = WorkerConnection(addr)
    try:
        await conn.idle(timeout=10.0)
        rows = await gather_bursts(conn, levels, seconds)
    finally:
        await conn.close()
    return {"levels": rows}


async def handles(addr: str, n: int) -> None:
    from wool import WorkerConnection

    conns = []
    failed = 0
    for _ in range(n):
        conn = WorkerConnection(addr)
        try:
            await conn.idle(timeout=10.0)
        except Exception:
            failed += 1
        conns.append(conn)
    print("ready " + json.dumps({"handles": n, "failed": failed}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, wait_for_line)
    for conn in conns:
        await conn.close()


def main() -> int:
    cmd, addr = sys.argv[1], sys.argv[2]
    if cmd == "seq":
        emit(asyncio.run(seq(addr, int(sys.argv[3]), int(sys.argv[4]))))
    elif cmd == "burst":
        levels = [int(x) for x in sys.argv[3].split(",")]
        emit(asyncio.run(burst(addr, levels, float(sys.argv[4]))))
    elif cmd == "handles":
        asyncio.run(handles(addr, int(sys.argv[3])))
    else:
        print(f"unknown command {cmd}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
