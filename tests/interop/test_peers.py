"""Self-tests of the interop peer scripts: Wool's client against Wool's worker.

Run with the 0.15.7 venv (scripts/setup-venvs.sh makes both venvs):

    target/venvs/wool-0.15.7/bin/python -m pytest tests/interop -q

Proves the scripts themselves are right before they are pointed at libwool: every
command of wool_client.py and raw_wire.py (--wool-pickle) runs against a real Wool
worker started by wool_worker.py, under wool 0.15.7 and 0.13.1, plaintext and TLS.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENVS = ROOT / "target" / "venvs"
PY15 = VENVS / "wool-0.15.7" / "bin" / "python"
PY13 = VENVS / "wool-0.13.1" / "bin" / "python"

pytestmark = pytest.mark.skipif(
    not (PY15.exists() and PY13.exists()),
    reason="run scripts/setup-venvs.sh first",
)


class Worker:
    """wool_worker.py as a subprocess, its stdout read line by line."""

    def __init__(self, python: Path, *args: str):
        self.proc = subprocess.Popen(
            [str(python), str(HERE / "wool_worker.py"), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.address = self.expect(lambda l: True, 60)

    def _pump(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, pred, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for a worker line")
            line = self.lines.get(timeout=left)
            if line is None:
                raise AssertionError("worker stdout ended")
            assert not line.startswith("error:"), line
            if pred(line):
                return line

    def wait(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def workers():
    started: list[Worker] = []

    def start(python: Path, *args: str) -> Worker:
        w = Worker(python, *args)
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Path:
    if not shutil.which("openssl"):
        pytest.skip("openssl not found")
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(["bash", str(HERE / "make-test-certs.sh"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def tls(certs: Path, name: str = "worker", ca: str = "ca") -> list[str]:
    return ["--tls-ca", str(certs / f"{ca}.pem"), "--tls-cert", str(certs / f"{name}.pem"),
            "--tls-key", str(certs / f"{name}.key")]


def client(*args: str, python: Path = PY15) -> tuple[int, list[str]]:
    r = subprocess.run([str(python), str(HERE / "wool_client.py"), *args],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout.splitlines()


def raw(*args: str) -> tuple[int, list[str]]:
    r = subprocess.run([str(PY15), str(HERE / "raw_wire.py"), *args],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout.splitlines()


def test_plaintext_idle_poll_stop(workers):
    w = workers(PY15)
    rc, out = client(w.address, "idle")
    assert rc == 0 and float(out[0]) >= 0, out
    rc, out = client(w.address, "poll-accrues")
    assert rc == 0 and len(out) == 2 and float(out[1]) > float(out[0]), out
    rc, out = client(w.address, "--timeout", "0.5", "expect-transient")
    assert rc == 1 and out[0].startswith("fail:"), out
    rc, out = client(w.address, "stop")
    assert (rc, out) == (0, ["stopped"])
    assert w.expect(lambda l: l.startswith("stopped")) == "stopped remote"
    assert w.wait() == 0
    rc, out = client(w.address, "expect-transient")
    assert rc == 0 and out[0] == "TransientRpcError" and "UNAVAILABLE" in out[1], out
    rc, out = client(w.address, "idle")
    assert rc == 3 and out[0].startswith("error: TransientRpcError: UNAVAILABLE"), out


@pytest.mark.parametrize("python", [PY15, PY13], ids=["0.15.7", "0.13.1"])
def test_mutual_tls(workers, certs, python):
    w = workers(python, *tls(certs))
    want = ["expect-idle-unavailable"] if python == PY13 else ["idle"]
    rc, out = client(w.address, *tls(certs), *want)
    assert rc == 0, out
    # The cert is for 127.0.0.1 and localhost; a client-only cert is accepted too.
    rc, out = client("localhost:" + w.address.rsplit(":", 1)[1], *tls(certs), *want)
    assert rc == 0, out
    rc, out = client(w.address, *tls(certs, "client"), *want)
    assert rc == 0, out
    for bad in ([], ["--tls-ca", str(certs / "ca.pem"), "--one-way"], tls(certs, "rogue"),
                tls(certs, ca="rogue-ca")):
        rc, out = client(w.address, *bad, "idle")
        assert rc == 3 and out[0].startswith("error: TransientRpcError: UNAVAILABLE"), (bad, out)
    rc, out = client(w.address, *tls(certs), "stop")
    assert (rc, out) == (0, ["stopped"])
    assert w.wait() == 0


def test_one_way_tls(workers, certs):
    w = workers(PY15, *tls(certs), "--one-way")
    rc, out = client(w.address, "--tls-ca", str(certs / "ca.pem"), "--one-way", "idle")
    assert rc == 0, out
    rc, out = client(w.address, *tls(certs), "idle")  # a client cert is simply not asked for
    assert rc == 0, out
    rc, out = client(w.address, "idle")
    assert rc == 3, out
    rc, out = client(w.address, "--tls-ca", str(certs / "ca.pem"), "--one-way", "stop")
    assert rc == 0, out
    assert w.wait() == 0


def test_old_worker_answers_unimplemented(workers):
    w = workers(PY13)
    rc, out = client(w.address, "expect-idle-unavailable")
    assert (rc, out) == (0, ["IdleUnavailable"])
    rc, out = client(w.address, "idle")
    assert rc == 3 and out[0].startswith("error: IdleUnavailable"), out
    rc, out = raw(w.address, "idle")
    assert rc == 1 and "UNIMPLEMENTED" in out[0], out
    rc, out = client(w.address, "stop")
    assert (rc, out) == (0, ["stopped"])
    assert w.wait() == 0


@pytest.mark.parametrize("python", [PY15, PY13], ids=["0.15.7", "0.13.1"])
def test_busy(workers, python):
    w = workers(python, "--busy", "1.5")
    w.expect(lambda l: l == "busy-start")
    if python == PY15:
        for _ in range(3):
            rc, out = client(w.address, "idle")
            assert (rc, out) == (0, ["0.0"])
    w.expect(lambda l: l == "busy-done", 10)
    if python == PY15:
        rc, out = client(w.address, "idle")
        assert rc == 0 and 0 < float(out[0]) < 1.0, out
    rc, out = client(w.address, "stop")
    assert rc == 0
    assert w.wait() == 0


@pytest.mark.parametrize("python", [PY15, PY13], ids=["0.15.7", "0.13.1"])
@pytest.mark.parametrize("how", ["sigterm", "stdin"])
def test_local_stop(workers, python, how):
    w = workers(python, "--busy", "30")
    w.expect(lambda l: l == "busy-start")
    if how == "sigterm":
        w.proc.send_signal(signal.SIGTERM)
    else:
        assert w.proc.stdin
        w.proc.stdin.close()
    assert w.expect(lambda l: l.startswith("stopped")) == "stopped local"
    assert w.wait() == 0


@pytest.mark.parametrize("python", [PY15, PY13], ids=["0.15.7", "0.13.1"])
def test_unix_target(workers, python):
    w = workers(python, "--print-uds")
    line = w.expect(lambda l: l.startswith("uds "))
    uds = line.split(" ", 1)[1]
    assert uds.startswith("unix:/"), line
    want = ["expect-idle-unavailable"] if python == PY13 else ["idle"]
    for target in (uds, uds.replace("unix:", "unix://", 1)):
        rc, out = client(target, *want)
        assert rc == 0, (target, out)
    rc, out = client(uds, "stop")
    assert rc == 0, out
    assert w.wait() == 0


def test_raw_wire_against_wool(workers, certs):
    w = workers(PY15, *tls(certs))
    rc, out = raw(w.address, *tls(certs), "--wool-pickle", "echo", "sleep",
                  "unknown-routine", "idle-zero-under-load", "stop-drains")
    assert rc == 0, "\n".join(out)
    assert out[-1] == "done: 13 ok, 0 failed", out
    assert w.wait() == 0


def test_raw_wire_unix_target(workers):
    w = workers(PY15, "--print-uds")
    uds = w.expect(lambda l: l.startswith("uds ")).split(" ", 1)[1]
    rc, out = raw(uds, "--wool-pickle", "echo", "idle", "stop")
    assert rc == 0, out
    assert w.wait() == 0
