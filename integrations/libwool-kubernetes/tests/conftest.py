"""What the tests share: the installed package (never the checkout's source), real Wool
workers (the entrypoint as a process of its own, Wool's `WorkerProcess`), a real Wool client.

Run through ``scripts/kubernetes-python-test.sh``: it makes a fresh virtual environment,
``pip install``s this folder with ``wool==0.15.7`` into it and runs pytest from outside the
checkout, as a user would have it installed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE_DIR = HERE.parent
APP_DIR = HERE / "app"
DATA_DIR = HERE / "data"

#: Generous limits for what a busy 2-core machine may take: a worker's start (interpreter,
#: grpc, the app's imports), a stop, a readiness change.
START_LIMIT = 60.0
EXIT_LIMIT = 60.0
CHANGE_LIMIT = 30.0

sys.path.insert(0, str(APP_DIR))

import libwool_kubernetes  # noqa: E402
import wool  # noqa: E402



@pytest.fixture(scope="session")
def installed_package():
    """Fails a test run against the checkout's source: these tests are of the installed copy."""
    if Path(libwool_kubernetes.__file__).resolve().is_relative_to(PACKAGE_DIR):
        pytest.fail(
            f"libwool_kubernetes was imported from the checkout ({libwool_kubernetes.__file__}), "
            "not from an installed copy: run scripts/kubernetes-python-test.sh"
        )


def app_environment() -> dict[str, str]:
    """The environment of a worker process: the app's folder on the path, nothing of the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(APP_DIR)
    env.pop("WOOL_GRACE_SECONDS", None)
    return env


def wait_until(condition: Callable[[], bool], limit: float, what: str) -> None:
    """Poll ``condition`` every 50 ms until true; fail with "precondition not met" after ``limit`` s."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"precondition not met within {limit:g} s: {what}")
        time.sleep(0.05)


class Entrypoint:
    """``python -m libwool_kubernetes.worker`` as a process of its own, on loopback, free ports."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log_path = tmp / "worker.log"
        self._log = open(self.log_path, "wb")
        command = [sys.executable, "-m", "libwool_kubernetes.worker", "--import", "sleepy_app",
                   "--host", "127.0.0.1", "--port", "0", "--health-port", "0", *args]
        self.process = subprocess.Popen(
            command, cwd=tmp, env=env or app_environment(), stdout=self._log, stderr=subprocess.STDOUT
        )
        self.address = ""
        self.health: tuple[str, int] = ("", 0)

    def wait_started(self) -> Entrypoint:
        """Wait for the "started" line; read the worker's and the probes' addresses from it."""
        pattern = re.compile(r"serving on (\S+); probes on http://([\d.]+):(\d+)")
        wait_until(lambda: pattern.search(self.log()) is not None or self.process.poll() is not None,
                   START_LIMIT, "the worker logs that it started")
        found = pattern.search(self.log())
        assert found, f"the worker did not start:\n{self.log()}"
        self.address, self.health = found[1], (found[2], int(found[3]))
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def probe(self, path: str) -> int:
        """The HTTP status of ``GET path`` on the probe port (0 when nothing answers)."""
        connection = http.client.HTTPConnection(*self.health, timeout=CHANGE_LIMIT)
        try:
            connection.request("GET", path)
            return connection.getresponse().status
        except OSError:
            return 0
        finally:
            connection.close()

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait(self) -> int:
        """The exit status, waited for up to `EXIT_LIMIT`."""
        try:
            return self.process.wait(EXIT_LIMIT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not exit within {EXIT_LIMIT:g} s:\n{self.log()}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()


@pytest.fixture
def entrypoint(tmp_path):
    """Starts entrypoint workers with the given extra arguments; kills what is left at the end."""
    started: list[Entrypoint] = []

    def start(*args: str, env: dict[str, str] | None = None, wait: bool = True) -> Entrypoint:
        worker = Entrypoint(tmp_path, *args, env=env)
        started.append(worker)
        return worker.wait_started() if wait else worker

    yield start
    for worker in started:
        worker.close()


@dataclasses.dataclass
class Outcome:
    """How a dispatched routine ended for its caller: ``completed`` or ``cancelled``, and when."""

    how: str
    seconds: float
    value: object = None


def worker_metadata(address: str, pid: int) -> wool.WorkerMetadata:
    """What a discovery would say of the worker at ``address``."""
    return wool.WorkerMetadata(uid=uuid.uuid4(), address=address, pid=pid, version=wool.protocol.__version__)


async def timed(call) -> Outcome:
    """Await a routine call; a ``CancelledError`` from the worker becomes ``cancelled``."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        value = await call
    except asyncio.CancelledError:
        if asyncio.current_task().cancelling():
            raise  # this test's own cancellation, not the worker's
        return Outcome("cancelled", loop.time() - began)
    return Outcome("completed", loop.time() - began, value)


async def wait_busy(address: str) -> None:
    """Wait until the worker at ``address`` reports work in flight (its idle time is 0)."""
    from wool.runtime.worker.connection import WorkerConnection

    connection = WorkerConnection(address)
    deadline = asyncio.get_running_loop().time() + CHANGE_LIMIT
    try:
        while await connection.idle(timeout=CHANGE_LIMIT) > 0:
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail(f"precondition not met within {CHANGE_LIMIT:g} s: the worker has the task")
            await asyncio.sleep(0.05)
    finally:
        await connection.close()
