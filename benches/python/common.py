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


def emit(obj) -> None:
    print(json.dumps(obj), flush=True)


def wait_for_line() -> None:
    """Block until the harness writes a line (or closes stdin)."""
    sys.stdin.readline()
