#!/usr/bin/env python3
"""A Wool 0.15.7 shared-memory registry of N workers, written by Wool's own publisher, for the
discovery benchmark (benches/run.py section_discovery, BENCHMARKS.md). Run with the Wool venv's
python (target/venvs/wool-0.15.7/bin/python, made by scripts/setup-venvs.sh):

    python wool_registry.py NAMESPACE N

Enters ``LocalDiscovery(NAMESPACE, capacity=N)`` (as the owner: the namespace must not exist
yet), publishes N ``worker-added`` events with ``WorkerMetadata`` records (fake loopback
addresses: only the listing is measured, nothing connects to them), prints one line of JSON
starting with ``ready`` ({"namespace", "workers", "publish_s"}), then keeps the registry alive
until stdin closes; leaving the context as the owner unlinks the registry and every record.
Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid

from wool.runtime.discovery.local import LocalDiscovery
from wool.runtime.worker.metadata import WorkerMetadata


async def publish(discovery: LocalDiscovery, namespace: str, n: int) -> None:
    t = time.perf_counter()
    async with discovery.publisher as publisher:
        for i in range(n):
            metadata = WorkerMetadata(
                uid=uuid.uuid4(),
                address=f"127.0.0.1:{20000 + i}",
                pid=os.getpid(),
                version="0.15.7",
                tags=frozenset({"bench"}),
            )
            await publisher.publish("worker-added", metadata)
        print("ready" + json.dumps({"namespace": namespace, "workers": n,
                                    "publish_s": round(time.perf_counter() - t, 3)}),
              flush=True)
        # Wait for stdin EOF inside the publisher's context: leaving it releases (unlinks) the
        # record segments it created.
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    namespace, n = sys.argv[1], int(sys.argv[2])
    with LocalDiscovery(namespace, capacity=n) as discovery:
        if not getattr(discovery, "_owner", True):
            print(f"error: namespace {namespace!r} already has a registry", flush=True)
            return 1

        asyncio.run(publish(discovery, namespace, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
