#!/usr/bin/env python3
"""Run a real Wool ``WorkerPool`` published under a discovery namespace, or list a namespace
with Wool's own subscriber, for the fleet tests (discovery, sweep, retire, woolctl).

Usage (from the wool 0.15.7 venv made by scripts/setup-venvs.sh):

    python wool_pool.py pool NAMESPACE [--spawn N] [--lan] [--advertise-host HOST]
                             [--busy SECONDS] [--busy-count K]
                             [--tls-ca CA --tls-cert CERT --tls-key KEY [--identity NAME]]
    python wool_pool.py subscribe NAMESPACE [--lan] [--seconds S]

pool: starts ``WorkerPool(spawn=N, discovery=LocalDiscovery(NAMESPACE))`` (or
``LanDiscovery(NAMESPACE, advertise_host=HOST)`` with --lan) and prints, one line each,
flushed:

    ready                   the pool is up: its workers are published
    busy-dispatched         (--busy) K tasks sleeping SECONDS were dispatched through the pool
    busy-done               (--busy) every task returned its result
    busy-error: CLASS: MSG  (--busy) a task failed (e.g. cancelled by a stop with no grace)

With --tls-*, the pool's workers serve mutual TLS with those files
(``WorkerCredentials.from_files``) and advertise ``secure``; --identity makes them advertise
that name (the pool's ``identity``) for peers to verify their certificate against. The pool
runs until SIGTERM/SIGINT or until its stdin (when a pipe) reaches end-of-file.

subscribe: iterates Wool's own subscriber for the namespace for S seconds (default 2) and
prints one JSON object per worker it then holds (uid, address, pid, version, tags, extra,
secure, identity), sorted by address, then ``done``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import stat
import sys

import wool
from wool.runtime.discovery.lan import LanDiscovery
from wool.runtime.discovery.local import LocalDiscovery


def emit(line: str) -> None:
    print(line, flush=True)


@wool.routine
async def busy_sleep(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


def discovery(args):
    if args.lan:
        return LanDiscovery(args.namespace, advertise_host=args.advertise_host)
    return LocalDiscovery(args.namespace)


async def run_pool(args) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    mode = os.fstat(0).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        loop.add_reader(0, lambda: (os.read(0, 4096) or stop.set()))
    tls = {}
    if args.tls_ca:
        from wool.runtime.worker.auth import WorkerCredentials

        tls["credentials"] = WorkerCredentials.from_files(
            ca_path=args.tls_ca, key_path=args.tls_key, cert_path=args.tls_cert, mutual=True
        )
        if args.identity:
            tls["identity"] = args.identity
    async with wool.WorkerPool(spawn=args.spawn, discovery=discovery(args), **tls):
        emit("ready")
        busy = None
        if args.busy is not None:

            async def run_busy():
                try:
                    await asyncio.gather(
                        *(busy_sleep(args.busy) for _ in range(args.busy_count))
                    )
                    emit("busy-done")
                except BaseException as error:  # noqa: BLE001 - reported to the test
                    emit(f"busy-error: {type(error).__name__}: {error}")

            busy = asyncio.create_task(run_busy())
            emit("busy-dispatched")
        await stop.wait()
        if busy is not None and not busy.done():
            busy.cancel()


async def run_subscribe(args) -> None:
    workers = {}

    async def follow():
        async for event in discovery(args).subscriber:
            if event.type == "worker-dropped":
                workers.pop(str(event.metadata.uid), None)
            else:
                workers[str(event.metadata.uid)] = event.metadata

    task = asyncio.create_task(follow())
    await asyncio.sleep(args.seconds)
    task.cancel()
    for metadata in sorted(workers.values(), key=lambda m: (m.address, str(m.uid))):
        emit(
            json.dumps(
                {
                    "uid": str(metadata.uid),
                    "address": metadata.address,
                    "pid": metadata.pid,
                    "version": metadata.version,
                    "tags": sorted(metadata.tags),
                    "extra": dict(metadata.extra),
                    "secure": metadata.secure,
                    "identity": metadata.identity or None,
                }
            )
        )
    emit("done")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["pool", "subscribe"])
    parser.add_argument("namespace")
    parser.add_argument("--spawn", type=int, default=2)
    parser.add_argument("--lan", action="store_true")
    parser.add_argument("--advertise-host")
    parser.add_argument("--busy", type=float)
    parser.add_argument("--busy-count", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--tls-ca")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--identity")
    args = parser.parse_args()
    try:
        asyncio.run(run_pool(args) if args.mode == "pool" else run_subscribe(args))
    except Exception as error:  # noqa: BLE001 - reported to the test
        emit(f"error: {type(error).__name__}: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
