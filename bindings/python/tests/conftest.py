"""Fixtures: the library under test, real workers as subprocesses, throwaway TLS material.

Run with the wool 0.15.7 venv (scripts/setup-venvs.sh), from the repository root:

    target/venvs/wool-0.15.7/bin/python -m pytest bindings/python/tests

or everything at once: scripts/python-test.sh. The library tested is ``$LIBWOOL_PATH`` when
set, else target/debug/libwool.so (what ``cargo build -p libwool-capi`` made); the
reference worker is ``$WOOL_WORKER`` when set, else target/debug/wool-worker. test_install.py
(marker ``install``) builds and installs the package itself into a fresh virtual environment.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import libwool

ROOT = Path(__file__).resolve().parents[3]
DEBUG_LIBRARY = ROOT / "target" / "debug" / "libwool.so"
WOOL_WORKER = Path(os.environ.get("WOOL_WORKER") or ROOT / "target" / "debug" / "wool-worker")
INTEROP = ROOT / "tests" / "interop"
VENVS = ROOT / "target" / "venvs"
PY15 = VENVS / "wool-0.15.7" / "bin" / "python"
PY13 = VENVS / "wool-0.13.1" / "bin" / "python"

# The library under test, loaded explicitly (not by search): a stale target/release build
# must not shadow the debug build that `cargo build` just made.
LIBRARY = libwool.load(os.environ.get("LIBWOOL_PATH") or DEBUG_LIBRARY)


class Process:
    """A worker subprocess whose stdout is read line by line (first line: its address)."""

    def __init__(self, argv: list[str], *, stdin=subprocess.DEVNULL, start_timeout=60.0):
        self.argv = argv
        self.proc = subprocess.Popen(
            argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()
        self.address = self.expect(lambda line: True, start_timeout)

    def _pump_stdout(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _pump_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def expect(self, predicate: Callable[[str], bool], timeout: float = 10.0) -> str:
        """The next stdout line matching `predicate`; fails on an ``error:`` line or EOF."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.001))
            except queue.Empty:
                raise AssertionError(f"{self}: no matching line within {timeout} s") from None
            if line is None:
                raise AssertionError(f"{self}: stdout ended; stderr: {self.stderr[-10:]}")
            assert not line.startswith("error:"), f"{self}: {line}"
            if predicate(line):
                return line

    def wait(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        """Kill the process if still running, reap it and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for pump in self._pumps:
            pump.join(5)  # EOF follows the exit (unless a grandchild holds the pipe)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def __str__(self) -> str:
        return f"[{' '.join(Path(a).name for a in self.argv[:2])} pid {self.proc.pid}]"


@pytest.fixture
def spawn() -> Iterator[Callable[..., Process]]:
    """Start processes that are killed (if still running) when the test ends."""
    started: list[Process] = []

    def start(argv: list[str], **kwargs) -> Process:
        process = Process([str(a) for a in argv], **kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()


@pytest.fixture
def spawn_worker(spawn) -> Callable[..., Process]:
    """Start libwool's reference worker (target/debug/wool-worker) with extra arguments."""
    if not WOOL_WORKER.exists():
        pytest.fail(f"{WOOL_WORKER} is missing: run `cargo build --bin wool-worker`")
    return lambda *args: spawn([WOOL_WORKER, *args], start_timeout=15.0)


@pytest.fixture
def worker(spawn_worker) -> Process:
    """A plaintext reference worker on 127.0.0.1."""
    return spawn_worker()


@pytest.fixture
def spawn_wool(spawn) -> Callable[..., Process]:
    """Start a real Wool LocalWorker (tests/interop/wool_worker.py) in a venv's Python.

    Its stdin is a pipe that only the test holds: if the test process dies, the worker
    goes with it.
    """

    def start(python: Path, *args) -> Process:
        if not python.exists():
            pytest.fail(f"{python} is missing: run scripts/setup-venvs.sh")
        return spawn([python, INTEROP / "wool_worker.py", *args], stdin=subprocess.PIPE)

    return start


def _make_certs(tmp_path_factory, name: str) -> Path:
    """Run tests/interop/make-test-certs.sh into a new temporary directory named after `name`."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    out = tmp_path_factory.mktemp(name)
    subprocess.run(
        [INTEROP / "make-test-certs.sh", out], check=True, capture_output=True, timeout=60
    )
    return out


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Path:
    """Throwaway PKI made by tests/interop/make-test-certs.sh in a temporary directory
    (never in the repository): ca, worker (SANs 127.0.0.1, ::1, localhost), client, and a
    rogue-ca with a rogue leaf nobody trusts."""
    return _make_certs(tmp_path_factory, "certs")


@pytest.fixture(scope="session")
def next_certs(tmp_path_factory) -> Path:
    """A second PKI of the same shape as `certs` and unrelated to it (its own CA key; the
    script gives both CAs the same subject name): what a CA rotation moves to."""
    return _make_certs(tmp_path_factory, "next-certs")


@pytest.fixture
def unused_address() -> str:
    """A 127.0.0.1 address where nothing listens (a port just released by the kernel)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """An address that accepts TCP connections and never says a word (no HTTP/2 at all):
    any call to it blocks until its deadline."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except (socket.timeout, OSError):
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for s in held:
        s.close()
    server.close()


@contextlib.contextmanager
def task_in_flight(address: str, seconds: float) -> Iterator[Callable[[], bytes]]:
    """Dispatch the reference worker's ``sleep`` routine with Wool's generated stubs and hold
    it in flight: returns once the worker acknowledged it; yields a function that waits for
    the result (the routine's output) after the body has looked at the worker."""
    import grpc
    from importlib.metadata import version
    from wool.protocol import wire_pb2 as pb
    from wool.protocol import wire_pb2_grpc as pb_grpc

    finished = threading.Event()

    def requests():
        yield pb.Request(
            task=pb.Task(
                version=version("wool"),
                id=str(uuid.uuid4()),
                tag="libwool-python-tests:sleep",
                callable=b"sleep",
                args=repr(float(seconds)).encode(),
            )
        )
        yield pb.Request(next=pb.Void())  # a routine runs once asked for its result
        finished.wait(seconds + 30)  # keep our half of the stream open until the end

    with grpc.insecure_channel(address) as channel:
        responses = pb_grpc.WorkerStub(channel).dispatch(requests(), timeout=seconds + 30)
        try:
            first = next(responses)
            assert first.WhichOneof("payload") == "ack", first

            def result() -> bytes:
                response = next(responses)
                assert response.WhichOneof("payload") == "result", response
                return response.result.dump

            yield result
        finally:
            finished.set()
            responses.cancel()
