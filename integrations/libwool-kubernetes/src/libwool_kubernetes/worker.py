"""Wool's own worker as a container's process: ``python -m libwool_kubernetes.worker``.

Runs Wool's `WorkerProcess` (its gRPC server, `WorkerService`, version interceptor, TLS and
self-dispatch socket, unchanged) in this process instead of a daemonic child, on a fixed
port, with what a pod needs around it:

- **SIGTERM drains.** The first SIGTERM (or SIGINT) begins Wool's own stop with a grace of
  ``--grace`` seconds: new dispatches are refused (UNAVAILABLE, Wool's answer while
  stopping), in-flight tasks run on, and those still running when the grace ends are
  cancelled (their callers see ``CancelledError``). A second signal cancels them at once.
  Wool's default worker instead cancels on SIGTERM; and the parent-death watchdog of its
  daemonic child does not apply here (this process has no parent to outlive).
- **Probes.** ``GET /readyz`` on ``--health-port`` answers 200 once the worker serves and
  503 from the moment a stop begins (a signal, or a ``stop`` request from a client such as
  libwool's scaler), so Kubernetes takes the pod out of its Service; ``GET /livez`` answers 200
  while the process runs (see `libwool_kubernetes.health`).
- **A log line per step** on stderr: started (address, Wool version), stop begun (grace,
  in-flight count), grace over or second signal (cancelling), drained or stopped, exited.

Exit status: 0 after a stop (drained or cancelled), 1 when the worker cannot start (a module
that does not import, a port taken, unreadable TLS files), 2 for a usage error.

Wool 0.15's worker has no public hook for its signal handling nor for "started", so two of
`WorkerProcess`'s private seams are used: the module function ``_signal_handlers`` (replaced,
while the worker runs, by this worker's drain) and the ``_set_metadata`` pipe end (through
which the worker reports its metadata once it serves). Cancelling the in-flight tasks (a
second signal, the grace's end) uses `WorkerService._preempt`, the same call Wool's stop makes
with a grace of 0, and the in-flight count reads its ``_docket``. The pinned
``wool<0.16`` and this package's tests hold them to the version they were read from.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib
import logging
import os
import signal
import socket
import sys
from typing import Final, Iterator, Sequence

from wool import protocol
from wool.runtime.worker import process as wool_process
from wool.runtime.worker.auth import WorkerCredentials, WorkerCredentialsProvider
from wool.runtime.worker.metadata import WorkerMetadata
from wool.runtime.worker.service import WorkerService

from .health import HealthServer, bind

logger = logging.getLogger("libwool_kubernetes.worker")

DEFAULT_PORT: Final = 50051
DEFAULT_HEALTH_PORT: Final = 8081
#: The environment variable that sets ``--grace``'s default, in seconds.
GRACE_ENV: Final = "WOOL_GRACE_SECONDS"
#: ``--grace``'s default, in seconds: a little under a ``terminationGracePeriodSeconds`` of 120.
DEFAULT_GRACE: Final = 110.0
#: Seconds the gRPC server gives its calls to close once the service has stopped (the tasks are
#: done or cancelled by then). The whole stop takes at most grace + this + Wool's loop
#: teardown (5 s): ``terminationGracePeriodSeconds`` should be at least grace + 10.
RPC_CLOSE_SECONDS: Final = 5.0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the worker until a stop; the exit status (see the module docs)."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        for module in args.imports:
            importlib.import_module(module)
        credentials = _credentials(args)
        health = bind(args.host, args.health_port)
        worker = PodWorker(
            host=args.host,
            port=args.port,
            grace=args.grace,
            health=health,
            credentials=credentials,
            identity=args.identity,
            tags=frozenset(args.tags),
        )
    except Exception as error:
        logger.error("cannot start: %s: %s", type(error).__name__, error)
        return 1
    return worker.run()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; exits with status 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog="wool-pod-worker",
        description="Run Wool's worker in this process, for a Kubernetes pod: SIGTERM drains.",
    )
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import the application's module first (repeatable), so a broken one fails the start")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on, gRPC and probes (default 0.0.0.0)")
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT,
                        help=f"the worker's gRPC port (default {DEFAULT_PORT}; 0: any free port)")
    parser.add_argument("--health-port", type=_port, default=DEFAULT_HEALTH_PORT,
                        help=f"HTTP port of /readyz and /livez (default {DEFAULT_HEALTH_PORT}; 0: any free port)")
    parser.add_argument("--grace", type=_seconds, default=None,
                        help=f"seconds in-flight tasks may run once a stop begins (default ${GRACE_ENV}, "
                        f"else {DEFAULT_GRACE:g})")
    parser.add_argument("--tls-ca", metavar="FILE", help="PEM CA certificate (with --tls-cert and --tls-key: serve TLS)")
    parser.add_argument("--tls-cert", metavar="FILE", help="PEM certificate of this worker")
    parser.add_argument("--tls-key", metavar="FILE", help="PEM private key of this worker")
    parser.add_argument("--tls-one-way", action="store_true",
                        help="do not ask callers for a certificate (default: mutual TLS)")
    parser.add_argument("--identity", help="workload identity the certificate carries (needs TLS)")
    parser.add_argument("--tag", dest="tags", action="append", default=[], help="capability tag (repeatable)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    if args.grace is None:
        try:
            args.grace = _seconds(os.environ.get(GRACE_ENV, str(DEFAULT_GRACE)))
        except argparse.ArgumentTypeError as error:
            parser.error(f"${GRACE_ENV}: {error}")
    tls = [args.tls_ca, args.tls_cert, args.tls_key]
    if any(tls) and not all(tls):
        parser.error("--tls-ca, --tls-cert and --tls-key go together")
    if args.identity and not all(tls):
        parser.error("--identity needs TLS (--tls-ca, --tls-cert, --tls-key)")
    return args


class PodWorker:
    """Wool's worker in this process, stopped by a signal with a grace (see the module docs).

    :param host: address to listen on.
    :param port: gRPC port (0: any free port; the "started" log line says which).
    :param grace: seconds in-flight tasks may run once a stop begins (positive).
    :param health: the bound probe socket (`libwool_kubernetes.health.bind`).
    :param credentials: TLS material to serve with, or ``None`` for plaintext.
    :param identity: workload identity to advertise (needs ``credentials``).
    :param tags: capability tags to advertise.
    :raises ValueError: as `WorkerProcess` does for its arguments.
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        grace: float,
        health: socket.socket,
        credentials: WorkerCredentialsProvider | None = None,
        identity: str | None = None,
        tags: frozenset[str] = frozenset(),
    ) -> None:
        self._grace = grace
        self._process = wool_process.WorkerProcess(
            host=host,
            port=port,
            shutdown_grace_period=RPC_CLOSE_SECONDS,
            credentials=credentials,
            identity=identity,
            tags=tags,
        )
        # Run in this process: the pipe to a parent is replaced by the "started" report.
        self._process._get_metadata.close()
        self._process._set_metadata.close()
        self._process._set_metadata = _StartReport(self._started)
        self._health = HealthServer(health, self._ready)
        self._health_address = health.getsockname()[:2]
        self._service: WorkerService | None = None
        self._serving = False
        self._signalled = False
        self._early_signal: int | None = None
        self._cancelled: str | None = None  # why in-flight tasks were cancelled, if they were
        self._tasks: set[asyncio.Task] = set()

    def run(self) -> int:
        """Serve until a stop completes; 0 then, 1 if the worker failed."""
        wool_signals = wool_process._signal_handlers
        wool_process._signal_handlers = self._signals
        # A signal before the worker serves is kept, and begins the stop as soon as it can
        # (see `_signals`); one after its stop is ignored.
        early = {signum: signal.signal(signum, self._before_serving) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._process.run()
        except Exception:
            logger.exception("worker failed")
            return 1
        finally:
            wool_process._signal_handlers = wool_signals
            for signum, handler in early.items():
                signal.signal(signum, handler)
        logger.info("exited")
        return 0

    @contextlib.contextmanager
    def _signals(self, service: WorkerService) -> Iterator[None]:
        """Replaces Wool's ``_signal_handlers`` around its serving: this worker's drain."""
        loop = asyncio.get_running_loop()
        self._service = service
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        self._spawn(self._health.start())
        self._spawn(self._follow_stop(service))
        if self._early_signal is not None:
            loop.call_soon(self._on_signal, self._early_signal)
        try:
            yield
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
                signal.signal(signum, self._before_serving)  # the stop is done: ignore the rest
            self._health.close()

    def _before_serving(self, signum: int, frame) -> None:
        self._early_signal = signum

    def _started(self, metadata: WorkerMetadata) -> None:
        self._serving = True
        host, port = self._health_address
        logger.info(
            "started: Wool %s worker %s serving on %s; probes on http://%s:%d; grace %g s",
            metadata.version, metadata.uid, metadata.address, host, port, self._grace,
        )

    def _ready(self) -> bool:
        return self._serving and self._service is not None and not self._service.stopping.is_set()

    def _on_signal(self, signum: int) -> None:
        service = self._service
        assert service is not None
        name = signal.Signals(signum).name
        if service.stopped.is_set():
            return
        if self._signalled:
            self._cancel(f"{name} during the stop")
            return
        self._signalled = True
        if service.stopping.is_set():
            logger.info(
                "%s during a stop begun by a stop request: grace %g s from now, %d in flight",
                name, self._grace, _in_flight(service),
            )
        else:
            logger.info(
                "stop begun by %s: grace %g s, %d in flight; new dispatches are refused",
                name, self._grace, _in_flight(service),
            )
            self._spawn(service.stop(protocol.StopRequest(timeout=self._grace), None))
        asyncio.get_running_loop().call_later(self._grace, self._grace_over)

    def _grace_over(self) -> None:
        service = self._service
        if service is None or service.stopped.is_set() or not _in_flight(service):
            return
        logger.warning("grace of %g s over: cancelling %d in-flight tasks", self._grace, _in_flight(service))
        self._cancel(f"the grace of {self._grace:g} s ended", log=False)

    def _cancel(self, reason: str, *, log: bool = True) -> None:
        """Cancel the in-flight tasks now (Wool's stop with grace 0 does the same)."""
        service = self._service
        assert service is not None
        if service.stopped.is_set():
            return
        self._cancelled = self._cancelled or reason
        if log:
            logger.warning("%s: cancelling %d in-flight tasks now", reason, _in_flight(service))
        self._spawn(service._preempt(timeout=0))

    async def _follow_stop(self, service: WorkerService) -> None:
        await service.stopping.wait()
        if not self._signalled:
            logger.info("stop begun by a stop request: %d in flight; new dispatches are refused", _in_flight(service))
        began = asyncio.get_running_loop().time()
        await service.stopped.wait()
        took = asyncio.get_running_loop().time() - began
        if self._cancelled:
            logger.info("stopped in %.1f s: in-flight tasks cancelled (%s)", took, self._cancelled)
        else:
            logger.info("drained in %.1f s", took)

    def _spawn(self, awaitable) -> None:
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _StartReport:
    """Stands in for `WorkerProcess`'s pipe to its parent: the worker sends its serialized
    metadata through it once its server serves."""

    def __init__(self, started) -> None:
        self._started = started

    def send(self, payload: bytes) -> None:
        self._started(WorkerMetadata.from_protobuf(protocol.WorkerMetadata.FromString(payload)))

    def close(self) -> None:
        pass


def _in_flight(service: WorkerService) -> int:
    return len(service._docket)


def _credentials(args: argparse.Namespace) -> WorkerCredentialsProvider | None:
    """TLS from the three files, re-read when they change (a Secret volume is rotated in
    place), or ``None``.

    :raises OSError: if a file cannot be read.
    """
    if not args.tls_ca:
        return None
    load = functools.partial(
        WorkerCredentials.from_files, args.tls_ca, args.tls_key, args.tls_cert, not args.tls_one_way
    )
    load()  # a missing or unreadable file fails the start
    return WorkerCredentialsProvider(load, reloadable=True)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"{text!r}: the grace must be more than 0 and under a day")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return int(text)


if __name__ == "__main__":
    sys.exit(main())
