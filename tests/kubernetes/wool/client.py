"""The Wool client of the Kubernetes suite's Wool cases: a ``WorkerPool`` whose workers are the
pods ``KubernetesDiscovery`` finds and whose balancer is ``DemandLoadBalancer`` (``quorum=0``),
dispatching ``e2e_app.nap`` as the case's plan says. One JSON line per event on stdout, each
with ``t`` (seconds since the epoch):

    {"event": "discovered" | "dropped", "uid": ..., "address": ...}   (a watch of its own)
    {"event": "dispatch", "task": i, "seconds": s}
    {"event": "result", "task": i, "pod": ...}
    {"event": "error", "task": i, "error": "..."}
    {"event": "done", "results": n, "errors": m}

Plan: one task of ``--first`` seconds (dispatched with the fleet as the case left it: at zero
in the cycle), awaited; then up to ``--burst`` tasks of ``--task`` seconds, one every
``--every`` seconds (fewer when ``--until`` names a file that appears meanwhile: the case says
when the fleet has grown), all awaited. Exit status 0 when every task returned its result, 1 otherwise. The API
server is found through ``$KUBECONFIG`` (a ServiceAccount's token the chart's client Role
binds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

import wool
from libwool_kubernetes import DemandLoadBalancer, KubernetesDiscovery

import e2e_app


def emit(event: str, **fields) -> None:
    print(json.dumps({"t": time.time(), "event": event, **fields}), flush=True)


async def watch(discovery: KubernetesDiscovery) -> None:
    async for event in discovery.subscriber:
        kind = "discovered" if event.type == "worker-added" else "dropped"
        if event.type in ("worker-added", "worker-dropped"):
            emit(kind, uid=str(event.metadata.uid), address=event.metadata.address)


async def one(i: int, seconds: float) -> bool:
    emit("dispatch", task=i, seconds=seconds)
    try:
        answer = await e2e_app.nap(seconds)
    except BaseException as e:  # noqa: BLE001 - every failure is an outcome to report
        emit("error", task=i, error=f"{type(e).__name__}: {e}")
        return False
    emit("result", task=i, pod=answer["pod"])
    return True


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scaler", required=True, help="wool-scaler's host:port")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True, help="the ScaledObject's name")
    parser.add_argument("--selector", required=True, help="the worker pods' label selector")
    parser.add_argument("--first", type=float, default=2.0)
    parser.add_argument("--burst", type=int, default=0)
    parser.add_argument("--task", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=1.0)
    parser.add_argument("--until", help="stop dispatching the burst once this file exists")
    parser.add_argument("--wait-timeout", type=float, default=300.0)
    args = parser.parse_args()
    discovery = KubernetesDiscovery(args.selector, namespace=args.namespace)
    watcher = asyncio.create_task(watch(discovery))
    balancer = DemandLoadBalancer(
        args.scaler, namespace=args.namespace, name=args.name, wait_timeout=args.wait_timeout
    )
    outcomes = []
    async with wool.WorkerPool(discovery=discovery, loadbalancer=balancer, quorum=0):
        outcomes.append(await one(0, args.first))
        tasks = []
        for i in range(1, args.burst + 1):
            tasks.append(asyncio.create_task(one(i, args.task)))
            if i == args.burst or (args.until and os.path.exists(args.until)):
                break
            await asyncio.sleep(args.every)
        outcomes.extend(await asyncio.gather(*tasks))
    watcher.cancel()
    results = sum(outcomes)
    emit("done", results=results, errors=len(outcomes) - results)
    return 0 if all(outcomes) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
