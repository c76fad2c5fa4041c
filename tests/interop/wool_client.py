#!/usr/bin/env python3
"""Poll or stop a worker with Wool's own client, ``wool.WorkerConnection`` (wool 0.15.7).

Usage (from target/venvs/wool-0.15.7, made by scripts/setup-venvs.sh):

    python wool_client.py TARGET [--tls-ca CA [--tls-cert CERT --tls-key KEY]] [--one-way]
                          [--peer NAME] [--timeout S] CMD [CMD-ARGS]

TARGET is anything WorkerConnection takes: ``host:port``, ``dns://host:port``,
``ipv4:addr:port``, ``ipv6:[addr]:port``, ``unix:/path``.
TLS: --tls-ca, --tls-cert and --tls-key give mutual TLS (WorkerCredentials.from_files);
--one-way with only --tls-ca (or with all three) verifies the worker but presents no
client certificate. --peer pins the name checked against the worker's certificate
(default: the dialed address).

Commands and what they print on stdout (one item per line, flushed):

    idle                  the worker's idle seconds as a float, e.g. ``1.234``
    stop [--grace S]      ``stopped`` once the worker answered the stop RPC
    poll-accrues          idle twice 0.3 s apart, one float per line; exit 0 only if
                          both are >= 0 and the second is larger
    expect-transient      calls idle; exit 0 only if Wool raised TransientRpcError (or
                          its subclass HandshakeError): prints the class name, then a
                          line ``detail: CODE: details``
    expect-idle-unavailable
                          calls idle; exit 0 only if Wool raised IdleUnavailable (the
                          worker answered UNIMPLEMENTED): prints ``IdleUnavailable``

Exit status: 0 success; 1 an expectation failed (``fail: ...`` printed); 2 usage;
3 an unexpected exception, printed as ``error: <ClassName>: <message>``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys


def emit(line: str) -> None:
    print(line, flush=True)


class CheckFailed(Exception):
    pass


def load_credentials(args: argparse.Namespace):
    if not args.tls_ca:
        if args.tls_cert or args.tls_key or args.one_way:
            raise SystemExit("usage: TLS options need --tls-ca")
        return None
    from wool import WorkerCredentials

    if args.tls_cert and args.tls_key:
        return WorkerCredentials.from_files(
            ca_path=args.tls_ca,
            key_path=args.tls_key,
            cert_path=args.tls_cert,
            mutual=not args.one_way,
        )
    if args.tls_cert or args.tls_key:
        raise SystemExit("usage: --tls-cert and --tls-key go together")
    if not args.one_way:
        raise SystemExit("usage: mutual TLS needs --tls-cert and --tls-key (or --one-way)")
    with open(args.tls_ca, "rb") as f:
        ca = f.read()
    # One-way: client_credentials() uses only the CA when mutual is False.
    return WorkerCredentials(ca_cert=ca, worker_key=b"", worker_cert=b"", mutual=False)


def fmt(seconds: float) -> str:
    return repr(float(seconds))


async def run(args: argparse.Namespace) -> int:
    from wool import IdleUnavailable, TransientRpcError, WorkerConnection

    credentials = load_credentials(args)
    if credentials is None:
        if args.peer:
            raise SystemExit("usage: --peer needs TLS options")
        conn = WorkerConnection(args.target)
    else:
        conn = WorkerConnection(args.target, credentials=credentials, peer=args.peer)
    timeout = args.timeout if args.timeout and args.timeout > 0 else None
    try:
        if args.cmd == "idle":
            emit(fmt(await conn.idle(timeout=timeout)))
        elif args.cmd == "stop":
            grace = args.grace
            if args.timeout is not None:
                stop_timeout = timeout
            elif grace is None or grace >= 0:
                stop_timeout = (grace or 0.0) + 10.0  # must exceed the grace
            else:
                stop_timeout = None  # negative grace: drain however long it takes
            await conn.stop(grace=grace, timeout=stop_timeout)
            emit("stopped")
        elif args.cmd == "poll-accrues":
            first = await conn.idle(timeout=timeout)
            emit(fmt(first))
            await asyncio.sleep(0.3)
            second = await conn.idle(timeout=timeout)
            emit(fmt(second))
            for v in (first, second):
                if not isinstance(v, float) or math.isnan(v) or v < 0:
                    raise CheckFailed(f"idle {v!r} is not a float >= 0")
            if not second > first:
                raise CheckFailed(f"idle did not grow: {first!r} then {second!r}")
        elif args.cmd == "expect-transient":
            try:
                value = await conn.idle(timeout=timeout)
            except TransientRpcError as e:
                emit(type(e).__name__)
                code = e.code.name if e.code is not None else "NONE"
                emit(f"detail: {code}: {e.details}")
            else:
                raise CheckFailed(f"expected TransientRpcError, idle answered {value!r}")
        elif args.cmd == "expect-idle-unavailable":
            try:
                value = await conn.idle(timeout=timeout)
            except IdleUnavailable as e:
                emit(type(e).__name__)
            else:
                raise CheckFailed(f"expected IdleUnavailable, idle answered {value!r}")
        else:  # pragma: no cover - argparse guards
            raise SystemExit(f"usage: unknown command {args.cmd}")
    finally:
        try:
            await conn.close()
        except Exception:
            pass
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Drive a worker with Wool 0.15.7's WorkerConnection.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("Commands and", 1)[1].join(["Commands and", ""]),
    )
    parser.add_argument("target", metavar="TARGET", help="host:port, unix:/path, ...")
    parser.add_argument("--tls-ca", metavar="CA")
    parser.add_argument("--tls-cert", metavar="CERT")
    parser.add_argument("--tls-key", metavar="KEY")
    parser.add_argument("--one-way", action="store_true", help="present no client certificate")
    parser.add_argument("--peer", metavar="NAME", help="name to verify the worker's cert against")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="call deadline in seconds (idle: default 10; stop: grace+10)")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="CMD")
    sub.add_parser("idle", help="print idle seconds")
    stop = sub.add_parser("stop", help="stop the worker, print 'stopped'")
    stop.add_argument("--grace", type=float, default=None, metavar="S",
                      help="grace seconds (default: cancel in-flight work at once; <0: wait)")
    sub.add_parser("poll-accrues", help="idle twice, 0.3 s apart; second must be larger")
    sub.add_parser("expect-transient", help="idle must raise TransientRpcError")
    sub.add_parser("expect-idle-unavailable", help="idle must raise IdleUnavailable")
    args = parser.parse_args()
    if args.timeout is None and args.cmd != "stop":
        args.timeout = 10.0
    try:
        return asyncio.run(run(args))
    except CheckFailed as e:
        emit(f"fail: {e}")
        return 1
    except SystemExit as e:
        if isinstance(e.code, str):
            emit(f"error: {e.code}")
            return 2
        raise
    except BaseException as e:
        msg = " ".join(str(e).split())  # keep it on one line
        emit(f"error: {type(e).__name__}: {msg}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
