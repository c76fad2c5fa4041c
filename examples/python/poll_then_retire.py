#!/usr/bin/env python3
"""Poll a Wool worker's idle time and retire it once it has been idle long enough.

    pip install bindings/python        # once, from the repository root (needs Rust)
    python examples/python/poll_then_retire.py 127.0.0.1:50051 --interval 0.5 --threshold 2

Prints one line per reading, then retires the worker (stop with --grace) once idle reaches
--threshold seconds. A worker that cannot be reached this round is skipped and polled again
(a transient failure); one that predates the idle RPC cannot be judged and is left alone.

Exit status: 0 once the worker was retired; 1 on any other failure; 2 for bad usage.
The libwool package is the installed one, else (none installed) this checkout's
bindings/python. The library is found by libwool.load: --libwool PATH, else $LIBWOOL_PATH,
else the copy bundled in the installed package, else this repository's target/release or
target/debug build (`cargo build -p libwool-capi`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

try:
    import libwool
except ImportError:  # not installed: the package in this checkout (bindings/python)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python"))
    import libwool


def credentials(args: argparse.Namespace) -> libwool.WorkerCredentials | None:
    if not args.tls_ca:
        return None
    return libwool.WorkerCredentials.from_files(
        args.tls_ca, args.tls_key, args.tls_cert, mutual=not args.one_way
    )


def poll_then_retire(conn: libwool.WorkerConnection, args: argparse.Namespace) -> None:
    """Poll until idle reaches the threshold, then stop the worker."""
    while True:
        try:
            idle = conn.idle(timeout=args.timeout)
        except libwool.TransientRpcError as e:  # includes HandshakeError: skip, keep polling
            print(f"{conn.target}: skipped this round ({type(e).__name__}: {e})", flush=True)
        else:
            if idle >= args.threshold:
                print(f"{conn.target}: idle {idle:.3f} s >= {args.threshold:g} s: "
                      f"retiring (grace {args.grace:g} s)", flush=True)
                started = time.monotonic()
                conn.stop(grace=args.grace, timeout=args.stop_timeout)
                print(f"{conn.target}: retired in {time.monotonic() - started:.3f} s",
                      flush=True)
                return
            state = "busy" if idle == 0.0 else "idle"
            print(f"{conn.target}: {state} {idle:.3f} s", flush=True)
        time.sleep(args.interval)


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Poll a Wool worker's idle time; retire it once idle long enough.",
    )
    parser.add_argument("address", help="the worker: host:port, unix:PATH, dns:..., ...")
    parser.add_argument("--interval", type=float, default=1.0, metavar="S",
                        help="seconds between polls (default 1)")
    parser.add_argument("--threshold", type=float, default=60.0, metavar="S",
                        help="retire once idle this many seconds (default 60)")
    parser.add_argument("--grace", type=float, default=0.0, metavar="S",
                        help="seconds in-flight work may finish when retiring; "
                             "inf or negative = however long (default 0: cancel it)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S",
                        help="deadline of each idle poll (default 5)")
    parser.add_argument("--tls-ca", metavar="PEM", help="CA the worker's certificate chains to")
    parser.add_argument("--tls-cert", metavar="PEM", help="client certificate (mutual TLS)")
    parser.add_argument("--tls-key", metavar="PEM", help="client private key (mutual TLS)")
    parser.add_argument("--one-way", action="store_true",
                        help="one-way TLS: present no client certificate")
    parser.add_argument("--libwool", metavar="PATH", help="libwool shared library to load")
    args = parser.parse_args()
    if (args.tls_cert or args.tls_key or args.one_way) and not args.tls_ca:
        parser.error("TLS options need --tls-ca")
    # The stop call's own deadline must outlast the grace to see the worker's answer.
    args.stop_timeout = None if math.isinf(args.grace) or args.grace < 0 else args.grace + 30

    try:
        library = libwool.load(args.libwool)
        print(f"libwool {library.version} ({library.path})", flush=True)
        with libwool.WorkerConnection(args.address, credentials(args)) as conn:
            poll_then_retire(conn, args)
    except libwool.IdleUnavailable as e:
        print(f"{args.address}: predates the idle RPC, left alone ({e})", file=sys.stderr)
        return 1
    except (libwool.RpcError, libwool.LibraryNotFound, ValueError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
