"""The Wool application of the Kubernetes suite's Wool cases (tests/kubernetes/wool_app.rs).

Routines travel by module and name, so the pods' workers (``wool-pod-worker --import
e2e_app``) and the client (client.py) import this module from the same path (``PYTHONPATH``).
"""

import asyncio
import os
import sys

import wool


@wool.routine
async def nap(seconds: float) -> dict:
    """Sleeps ``seconds`` on the worker; which pod ran it (``WOOL_E2E_POD``, set by the suite's
    kubelet) and the seconds. Its start and end go to the worker's log, where the suite reads
    them."""
    pod = os.environ.get("WOOL_E2E_POD", "?")
    print(f"nap started: {seconds} s on {pod}", file=sys.stderr, flush=True)
    await asyncio.sleep(seconds)
    print(f"nap ended: {seconds} s on {pod}", file=sys.stderr, flush=True)
    return {"pod": pod, "seconds": seconds}
