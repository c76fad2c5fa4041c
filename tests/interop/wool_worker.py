#!/usr/bin/env python3
"""Run a real Wool worker (``wool.LocalWorker``) for interop tests.

Usage (from a venv made by scripts/setup-venvs.sh; works with wool 0.15.7 and 0.13.1):

    python wool_worker.py [--tls-ca CA --tls-cert CERT --tls-key KEY [--one-way]
                          [--reloadable [--fresh-for S]]]
                          [--host HOST] [--busy SECONDS] [--print-uds] [--ignore-stdin]
                          [--ping-floor-ms MS]

stdout protocol (one item per line, flushed at once):

    127.0.0.1:PORT          first line: the address a client dials
    uds unix:PATH           (--print-uds) second line: the worker's own insecure Unix
                            socket (Wool binds one for self-dispatch), or ``uds none``
    busy-start              (--busy) the sleep task was acknowledged by the worker
    busy-done               (--busy) the sleep task returned its result
    busy-error: CLASS: MSG  (--busy) the sleep task failed (e.g. cancelled by a stop)
    stopped remote          the worker process ended by itself (a remote `stop` RPC)
    stopped local           this script stopped the worker (SIGTERM/SIGINT, stdin closed)
    error: MSG              a failure; the exit status is then non-zero

Lifetime: the script exits 0 once the worker process has ended after a remote ``stop``
RPC, or after it stopped the worker itself because it got SIGTERM/SIGINT or its stdin
reached end-of-file. Stdin is watched only when it is a pipe, a socket or a terminal (so
a test that spawns this with a piped stdin and drops the pipe takes the worker down with
it); --ignore-stdin turns that off. Logs (Wool's own included) go to stderr.

--reloadable (wool >= 0.15) serves the TLS files through Wool's own
``WorkerCredentialsProvider(factory, reloadable=True, fresh_for=S)``, the factory being
``WorkerCredentials.from_files`` over the same paths: new connections get the files'
material as it was at most --fresh-for seconds before their handshake; established
connections keep theirs.

--busy SECONDS dispatches, through Wool's own client API (a ``wool.WorkerProxy`` built on
this worker's ``WorkerMetadata``, a ``wool.Task`` wrapping the ``@wool.routine``
``busy_sleep`` below, ``WorkerProxy.dispatch``), one task that sleeps SECONDS on this
very worker. ``busy-start`` is printed when ``dispatch`` returns, i.e. after the worker
acknowledged the task (so it is in the worker's in-flight set), ``busy-done`` once the
result came back.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import signal
import stat
import sys
import threading
import uuid

import wool


def emit(line: str) -> None:
    """Write one protocol line to stdout and flush it."""
    print(line, flush=True)


def log(msg: str) -> None:
    print(f"wool_worker: {msg}", file=sys.stderr, flush=True)


@wool.routine
async def busy_sleep(seconds: float) -> float:
    """Sleep on the worker; a coroutine routine (pickled by value from __main__)."""
    import asyncio as _asyncio

    await _asyncio.sleep(seconds)
    return seconds


def load_credentials(args: argparse.Namespace):
    given = [args.tls_ca, args.tls_cert, args.tls_key]
    if not any(given):
        if args.one_way or args.reloadable:
            raise SystemExit("error: --one-way and --reloadable need --tls-ca, --tls-cert "
                             "and --tls-key")
        return None
    if not all(given):
        raise SystemExit("error: --tls-ca, --tls-cert and --tls-key go together")
    from wool.runtime.worker.auth import WorkerCredentials

    if args.reloadable:
        # Wool >= 0.15: the provider its docstring shows for material that rotates out of
        # band, a factory reading the files again once `fresh_for` has passed. The worker
        # serves it through grpc.dynamic_ssl_server_credentials, whose fetcher asks the
        # provider on every handshake.
        import datetime
        import functools

        from wool.runtime.worker.auth import WorkerCredentialsProvider

        factory = functools.partial(
            WorkerCredentials.from_files,
            args.tls_ca,
            args.tls_key,
            args.tls_cert,
            not args.one_way,
        )
        return WorkerCredentialsProvider(
            factory,
            reloadable=True,
            fresh_for=datetime.timedelta(seconds=args.fresh_for),
        )
    # Note the order: from_files(ca_path, key_path, cert_path, mutual=True).
    return WorkerCredentials.from_files(
        ca_path=args.tls_ca,
        key_path=args.tls_key,
        cert_path=args.tls_cert,
        mutual=not args.one_way,
    )


def stdin_is_watchable() -> bool:
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(0)


def watch_stdin(loop: asyncio.AbstractEventLoop, on_eof) -> None:
    """Read stdin until end-of-file in a daemon thread, then call on_eof on the loop."""

    def run() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        try:
            loop.call_soon_threadsafe(on_eof)
        except RuntimeError:  # loop already closed
            pass

    threading.Thread(target=run, name="stdin-watch", daemon=True).start()


async def run_busy(worker, credentials, seconds: float) -> None:
    """Dispatch busy_sleep(seconds) to `worker` through Wool's own client API."""
    from wool.runtime.routine.task import Task

    proxy_kwargs = {"workers": [worker.metadata]}
    if credentials is not None:
        proxy_kwargs["credentials"] = credentials
    try:
        async with wool.WorkerProxy(**proxy_kwargs) as proxy:
            # What the @wool.routine wrapper does (wool.runtime.routine.wrapper._dispatch),
            # spelled out so that we can tell the acknowledgement apart from the result.
            task = Task(
                id=uuid.uuid4(),
                callable=busy_sleep,
                args=(seconds,),
                kwargs={},
                tag=f"{__name__}.busy_sleep",
                proxy=proxy,
            )
            stream = await proxy.dispatch(task)  # returns once the worker acked
            emit("busy-start")
            try:
                result = await stream.__anext__()
            finally:
                await stream.aclose()
            if result != seconds:
                emit(f"busy-error: UnexpectedResult: {result!r}")
                return
            emit("busy-done")
    except asyncio.CancelledError:
        emit("busy-error: CancelledError: dispatch cancelled")
        raise
    except BaseException as e:  # report, never kill the script
        emit(f"busy-error: {type(e).__name__}: {e}")


async def stop_worker(worker, grace: float | None) -> None:
    params = inspect.signature(worker.stop).parameters
    if "grace" in params:  # wool >= 0.14
        await worker.stop(grace=grace)
    else:  # wool 0.13.x: stop(timeout=...), where None means "drain forever"
        await worker.stop(timeout=grace if grace is not None else 0.5)


async def main_async(args: argparse.Namespace) -> int:
    credentials = load_credentials(args)
    from wool.runtime.worker.local import LocalWorker

    loop = asyncio.get_running_loop()
    local_stop = asyncio.Event()
    reasons: list[str] = []

    def request_stop(reason: str) -> None:
        if not reasons:
            reasons.append(reason)
            log(f"stopping the worker: {reason}")
        local_stop.set()

    # Before the worker starts, so that a signal sent as soon as the address line is
    # read is never lost (nor kills this script with the default action).
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, request_stop, signal.Signals(signum).name)
    if not args.ignore_stdin and stdin_is_watchable():
        watch_stdin(loop, lambda: request_stop("stdin closed"))

    options = None
    if args.ping_floor_ms is not None:
        # Wool >= 0.14: the server's ping policy (grpc.http2.min_recv_ping_interval_without_data_ms,
        # 2 strikes, then GOAWAY ENHANCE_YOUR_CALM), and the keepalive it advertises to match.
        from wool.runtime.worker.base import ChannelOptions, WorkerOptions

        options = WorkerOptions(
            channel=ChannelOptions(keepalive_time_ms=args.ping_floor_ms),
            http2_min_recv_ping_interval_without_data_ms=args.ping_floor_ms,
        )
    if options is None:
        worker = LocalWorker(host=args.host, credentials=credentials)
    else:
        worker = LocalWorker(host=args.host, credentials=credentials, options=options)
    try:
        await worker.start(timeout=args.start_timeout)
    except BaseException as e:
        emit(f"error: worker failed to start: {type(e).__name__}: {e}")
        return 1
    address = worker.address
    if not address:
        emit("error: worker started without an address")
        return 1
    emit(address)
    if args.print_uds:
        # Wool also serves, insecure, on a per-worker Unix socket meant for
        # self-dispatch: $XDG_RUNTIME_DIR or /tmp, then wool-<uid>/dispatch.sock.
        base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
        if not os.path.isdir(base):
            base = "/tmp"
        uds = os.path.join(base, f"wool-{worker.uid}", "dispatch.sock")
        emit(f"uds unix:{uds}" if os.path.exists(uds) else "uds none")
    log(f"wool {getattr(wool, '__version__', '?')} worker at {address}, pid "
        f"{worker.metadata.pid if worker.metadata else '?'}")

    busy = None
    if args.busy is not None:
        busy = asyncio.create_task(run_busy(worker, credentials, args.busy))

    process = worker._worker_process  # multiprocessing.Process (same in 0.13 and 0.15)
    while process.is_alive() and not local_stop.is_set():
        try:
            await asyncio.wait_for(local_stop.wait(), timeout=0.05)
        except asyncio.TimeoutError:
            pass

    status = 0
    if local_stop.is_set() and process.is_alive():
        try:
            await stop_worker(worker, args.stop_grace)
        except BaseException as e:
            # The stop RPC can fail because the worker is already going down by itself
            # (e.g. a Ctrl-C reached the whole process group); LocalWorker reaps it anyway.
            process.join(10)
            if process.is_alive() or process.exitcode not in (0, -signal.SIGTERM):
                msg = " ".join(str(e).split())
                emit(f"error: stopping the worker failed: {type(e).__name__}: {msg}")
                status = 1
            else:
                log(f"stop RPC failed ({type(e).__name__}) but the worker process ended "
                    f"with {process.exitcode}")
        how = "local"
    else:
        # The worker process ended by itself: a remote `stop` RPC. Reap it.
        process.join(10)
        code = process.exitcode
        log(f"worker process exited with {code}")
        try:
            await stop_worker(worker, args.stop_grace)  # process dead: only reaps
        except BaseException as e:
            log(f"reaping after remote stop: {type(e).__name__}: {e}")
        if code != 0:
            emit(f"error: worker process exited with status {code}")
            status = 1
        how = "remote"

    if busy is not None:
        try:
            await asyncio.wait_for(busy, timeout=10)
        except BaseException:
            busy.cancel()
    if status == 0:
        emit(f"stopped {how}")
    return status


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Run a real Wool LocalWorker; print its address first on stdout.",
        epilog="Exit 0 after a remote stop RPC, SIGTERM/SIGINT, or end of stdin.",
    )
    parser.add_argument("--tls-ca", metavar="CA", help="PEM CA certificate")
    parser.add_argument("--tls-cert", metavar="CERT", help="PEM worker certificate")
    parser.add_argument("--tls-key", metavar="KEY", help="PEM worker private key")
    parser.add_argument("--one-way", action="store_true",
                        help="server-only TLS (clients present no certificate)")
    parser.add_argument("--host", default="127.0.0.1", help="host to bind (default 127.0.0.1)")
    parser.add_argument("--busy", type=float, metavar="SECONDS",
                        help="dispatch one task sleeping SECONDS to the worker via Wool's API")
    parser.add_argument("--stop-grace", type=float, default=None, metavar="S",
                        help="grace for a local stop (default: cancel in-flight work)")
    parser.add_argument("--start-timeout", type=float, default=60.0, metavar="S")
    parser.add_argument("--print-uds", action="store_true",
                        help="second line: 'uds unix:PATH', Wool's own insecure Unix socket")
    parser.add_argument("--ping-floor-ms", type=int, default=None, metavar="MS",
                        help="the worker's minimum interval between client pings without data "
                             "(wool >= 0.14; Wool's default is 30000)")
    parser.add_argument("--ignore-stdin", action="store_true",
                        help="do not stop the worker when stdin closes")
    parser.add_argument("--reloadable", action="store_true",
                        help="serve a reloadable WorkerCredentialsProvider over the TLS files "
                             "(wool >= 0.15): rotated files are adopted by new connections")
    parser.add_argument("--fresh-for", type=float, default=1.0, metavar="S",
                        help="with --reloadable, the provider's fresh_for: how long material "
                             "read from the files is served before they are read again "
                             "(Wool's default is 1 s)")
    args = parser.parse_args()
    if args.fresh_for < 0:
        parser.error("--fresh-for must be >= 0")
    if args.busy is not None and args.busy < 0:
        parser.error("--busy must be >= 0")
    try:
        return asyncio.run(main_async(args))
    except SystemExit as e:
        if isinstance(e.code, str):
            emit(e.code)
            return 2
        raise
    except KeyboardInterrupt:
        return 0
    except BaseException as e:
        emit(f"error: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
