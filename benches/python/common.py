"""Shared helpers of the Python benchmark drivers (scripts/bench.sh, BENCHMARKS.md)."""

from __future__ import annotations

import json
import math
import sys


def latency(samples_ns: list[int], elapsed_s: float, cpu_s: float = 0.0, **extra) -> dict:
    """The same summary the Rust, C and Go drivers print (microseconds)."""
    s = sorted(samples_ns)
    n = len(s)

    def pick(q: float) -> float:
        i = min(max(math.ceil(q * n), 1), n)
        return s[i - 1] / 1e3

    out = {
        "n": n,
        "median_us": round(pick(0.5), 2),
        "p99_us": round(pick(0.99), 2),
        "mean_us": round(sum(s) / n / 1e3, 2),
        "min_us": round(s[0] / 1e3, 2),
        "polls_per_s": round(n / elapsed_s, 1),
        "cpu_us_per_poll": round(cpu_s * 1e6 / n, 2),
    }
    out.update(extra)
    return out


async def gather_bursts(conn, levels: list[int], seconds: float) -> list[dict]:
    """Bursts of `level` concurrent ``conn.idle(timeout=60.0)`` (``asyncio.gather``) per level,
    repeated for `seconds` (at least one burst): one row per level, as the burst drivers of
    every language report them. `conn` is any asyncio connection with an ``idle`` coroutine
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
        elapsed = time.perf_counter() - start
        rows.append({
            "concurrency": level, "bursts": bursts, "ok": ok, "failed": failed,
            "polls_per_s": round((ok + failed) / elapsed, 1), "first_error": first_error,
        })
    return rows


def emit(obj) -> None:
    print(json.dumps(obj), flush=True)


def wait_for_line() -> None:
    """Block until the harness writes a line (or closes stdin)."""
    sys.stdin.readline()
