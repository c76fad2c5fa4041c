"""Shared helpers of the Python benchmark drivers (scripts/bench.sh, BENCHMARKS.md).

The drivers print raw measurements as one line of JSON (``emit``), in the shapes of the Rust
driver's (benches/wool_bench.rs); benches/run.py computes every statistic from them. Durations
of single operations are integer nanoseconds (``time.perf_counter_ns``), totals are seconds.
"""

from __future__ import annotations

import json
import sys


def latency_samples(samples_ns: list[int], elapsed_s: float, cpu_s: float, **extra) -> dict:
    """A sequential run's output: one sample per call, the wall and CPU time of the loop."""
    return {"samples_ns": samples_ns, "elapsed_s": elapsed_s, "cpu_s": cpu_s, **extra}


async def gather_bursts(conn, levels: list[int], seconds: float) -> list[dict]:
    """Bursts of `level` concurrent ``conn.idle(timeout=60.0)`` (``asyncio.gather``) per level,
    repeated for `seconds` (at least one burst): one row per level ({"concurrency", "bursts",
    "ok", "failed", "elapsed_s", "first_error"}), as the burst drivers of every language
    report them. `conn` is any asyncio connection with an ``idle`` coroutine
    (Wool's own client, libwool.aio)."""
    import asyncio
    import time

    rows = []
    for level in levels:
        ok = failed = bursts = 0
        first_error = ""
        start = time.perf_counter()
        while bursts == 0 or time.perf_counter() - start < seconds:
            results = await asyncio.gather(
                *(conn.idle(timeout=60.0) for _ in range(level)), return_exceptions=True
            )
            for r in results:
                if isinstance(r, BaseException):
                    failed += 1
                    if not first_error:
                        first_error = f"{type(r).__name__}: {' '.join(str(r).split())[:200]}"
                else:
                    ok += 1
            bursts += 1
        rows.append({
            "concurrency": level, "bursts": bursts, "ok": ok, "failed": failed,
            "elapsed_s": time.perf_counter() - start, "first_error": first_error,
        })
    return rows


def emit(obj) -> None:
    print(json.dumps(obj), flush=True)


def wait_for_line() -> None:
    """Block until the harness writes a line (or closes stdin)."""
    sys.stdin.readline()
