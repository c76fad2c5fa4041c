#!/usr/bin/env python3
"""(e) Sequential idle polls through the ctypes binding (bindings/python, package libwool).

    LIBWOOL_PATH=target/release/libwool.so python ctypes_idle.py ADDR N WARMUP

Prints one line of JSON: the raw samples (ns) and totals (common.latency_samples), from which
benches/run.py computes the statistics. Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))
sys.path.insert(0, HERE)

import libwool  # noqa: E402
from common import emit, latency_samples  # noqa: E402


def main() -> int:
    addr, n, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    perf = time.perf_counter_ns
    with libwool.WorkerConnection(addr) as worker:
        idle = worker.idle
        for _ in range(warmup):
            idle(timeout=10.0)
        samples = [0] * n
        cpu = time.process_time()
        start = perf()
        for i in range(n):
            t = perf()
            idle(timeout=10.0)
            samples[i] = perf() - t
        elapsed = (perf() - start) / 1e9
        cpu = time.process_time() - cpu
    emit(latency_samples(samples, elapsed, cpu, library=libwool.version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
