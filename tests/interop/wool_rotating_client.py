#!/usr/bin/env python3
"""Poll a worker without pause with Wool's own client over reloadable credentials (wool 0.15.7).

Usage (from target/venvs/wool-0.15.7, made by scripts/setup-venvs.sh):

    python wool_rotating_client.py TARGET --tls-ca CA --tls-cert CERT --tls-key KEY
                                   [--fresh-for S] [--interval S] [--timeout S]

One ``wool.WorkerConnection`` to TARGET with, as credentials, the reloadable provider Wool's
docstring shows for material that rotates out of band:
``WorkerCredentialsProvider(functools.partial(WorkerCredentials.from_files, CA, KEY, CERT),
reloadable=True, fresh_for=S)``. The connection resolves the provider on every call, so
once the files change (and --fresh-for has passed) its next calls key a new pooled channel
on the new material: a new TLS handshake, the superseded channel expired.

It calls ``idle`` every --interval seconds until stdin reaches end-of-file, then prints
``done`` and exits 0. One line per call on stdout, flushed:

    ok SECONDS TAG             the worker's idle seconds, and TAG, the CA the call's channel
                               was keyed on
    fail CLASS CODE TAG: MSG   the call raised CLASS (e.g. TransientRpcError), CODE its gRPC
                               status name (or NONE)

TAG is the last 24 base64 characters of that CA's PEM body (before ``-----END``), so a
caller can tell which CA's material a call used without hashing.
Exit status: 0 after ``done``; 2 usage; 3 an unexpected exception (``error: ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import os
import sys
import threading


def emit(line: str) -> None:
    print(line, flush=True)


def tag_of(ca_pem: bytes) -> str:
    body = ca_pem.split(b"-----END", 1)[0]
    return b"".join(body.split())[-24:].decode("ascii", "replace")


def watch_stdin(loop: asyncio.AbstractEventLoop, done: asyncio.Event) -> None:
    def run() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        try:
            loop.call_soon_threadsafe(done.set)
        except RuntimeError:  # loop already closed
            pass

    threading.Thread(target=run, name="stdin-watch", daemon=True).start()


async def run(args: argparse.Namespace) -> int:
    from wool import RpcError, WorkerConnection
    from wool.runtime.worker.auth import WorkerCredentials, WorkerCredentialsProvider

    factory = functools.partial(
        WorkerCredentials.from_files, args.tls_ca, args.tls_key, args.tls_cert
    )
    provider = WorkerCredentialsProvider(
        factory,
        reloadable=True,
        fresh_for=datetime.timedelta(seconds=args.fresh_for),
    )
    conn = WorkerConnection(args.target, credentials=provider)
    done = asyncio.Event()
    watch_stdin(asyncio.get_running_loop(), done)

    def used_tag() -> str:
        # The pool key of the call just made (WorkerConnection._resolve_key): the material
        # its channel was built with.
        key = getattr(conn, "_key", None)
        credentials = getattr(key, "credentials", None)
        return tag_of(credentials.ca_cert) if credentials is not None else "none"

    try:
        while not done.is_set():
            try:
                seconds = await conn.idle(timeout=args.timeout)
            except RpcError as e:
                code = e.code.name if e.code is not None else "NONE"
                details = " ".join(str(e.details).split())
                emit(f"fail {type(e).__name__} {code} {used_tag()}: {details}")
            except Exception as e:  # e.g. IdleUnavailable: not expected, but reported
                msg = " ".join(str(e).split())
                emit(f"fail {type(e).__name__} NONE {used_tag()}: {msg}")
            else:
                emit(f"ok {float(seconds)!r} {used_tag()}")
            try:
                await asyncio.wait_for(done.wait(), timeout=args.interval)
            except asyncio.TimeoutError:
                pass
    finally:
        try:
            await conn.close()
        except Exception:
            pass
    emit("done")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Poll idle with Wool 0.15.7's WorkerConnection over a reloadable provider.",
    )
    parser.add_argument("target", metavar="TARGET")
    parser.add_argument("--tls-ca", metavar="CA", required=True)
    parser.add_argument("--tls-cert", metavar="CERT", required=True)
    parser.add_argument("--tls-key", metavar="KEY", required=True)
    parser.add_argument("--fresh-for", type=float, default=1.0, metavar="S",
                        help="the provider's fresh_for (Wool's default 1 s)")
    parser.add_argument("--interval", type=float, default=0.05, metavar="S",
                        help="pause between calls (default 0.05)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S",
                        help="each call's deadline (default 5)")
    args = parser.parse_args()
    if args.fresh_for < 0 or args.interval < 0 or args.timeout <= 0:
        parser.error("--fresh-for and --interval must be >= 0, --timeout > 0")
    try:
        return asyncio.run(run(args))
    except BaseException as e:
        msg = " ".join(str(e).split())
        emit(f"error: {type(e).__name__}: {msg}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
