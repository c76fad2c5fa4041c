#!/usr/bin/env python3
"""Check a worker's wire behaviour with Wool's own generated gRPC stubs.

Usage (from target/venvs/wool-0.15.7, made by scripts/setup-venvs.sh):

    python raw_wire.py TARGET [--tls-ca CA [--tls-cert CERT --tls-key KEY]] [--one-way]
                       [--authority NAME] [--wool-pickle] CMD [CMD ...]

Speaks ``wool.protocol.wire_pb2`` / ``wire_pb2_grpc`` (package wool.runtime.protobuf.wire,
service Worker: dispatch / stop / idle) over a ``grpc.aio`` channel, without Wool's
client. By default it talks to a worker built with libwool, whose routines are Rust:
``Task.callable`` = routine name (UTF-8), ``Task.args`` = input bytes, ``result.dump`` =
output bytes, ``exception.dump`` = UTF-8 error message. Routines used: ``echo`` (result =
args) and ``sleep`` (args = seconds as ASCII decimal; returns args).

--wool-pickle instead encodes the same routines the way Wool's Python runtime does
(cloudpickled ``@wool.routine`` functions, args tuple, kwargs dict, a pickled
``WorkerProxy``; ``Task.to_protobuf``), so every check can be run against a real Wool
worker (tests/interop/wool_worker.py) to validate this script and compare behaviours.

Commands (several may be given; they run in order):

    echo                  dispatch echo(b"hello"): ack, `next`, result == b"hello", end
    sleep                 dispatch sleep(b"0.2"): same shape, takes >= 0.2 s
    idle-zero-under-load  20 concurrent sleep(b"1.0"); after all acks, 3 idle polls read
                          exactly 0.0; after all finish, idle reads > 0 and < 1.0, then grows
    unknown-routine       dispatch callable b"no-such-routine": refused within 1 s by a
                          nack or a gRPC error status; then echo still works
    idle                  print the raw idle answer (``idle SECONDS``)
    stop-drains           sleep(b"1.0") in flight, stop with grace 5 s: a new dispatch
                          during the drain fails UNAVAILABLE, the sleep still returns its
                          result, stop answers Void, a second stop is harmless or the
                          worker is gone. ENDS THE WORKER.
    stop                  stop with grace 0 (prints ``stopped``). ENDS THE WORKER.

Output: one line per check, ``ok NAME[: detail]`` or ``FAIL NAME: detail``, then
``done: N ok, M failed``. Exit 0 only if every check passed; 1 if one failed; 2 usage;
3 an unexpected error (``error: CLASS: message``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid

import grpc
import grpc.aio

from wool.protocol import wire_pb2 as pb
from wool.protocol import wire_pb2_grpc as pb_grpc

try:
    from importlib.metadata import version as _pkg_version

    WOOL_VERSION = _pkg_version("wool")
except Exception:  # pragma: no cover
    WOOL_VERSION = "0.15.7"


def emit(line: str) -> None:
    print(line, flush=True)


def clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


class Failed(Exception):
    """A check failed; the message says how."""


# ---------------------------------------------------------------- payload codecs


class RustCodec:
    """libwool's convention: routine name + raw bytes."""

    name = "rust"

    def __init__(self, task_version: str):
        self.task_version = task_version

    def task(self, routine: str | bytes, args: bytes) -> pb.Task:
        callable_ = routine if isinstance(routine, bytes) else routine.encode()
        return pb.Task(
            version=self.task_version,
            id=str(uuid.uuid4()),
            tag=f"raw_wire:{callable_.decode(errors='replace')}",
            callable=callable_,
            args=args,
        )

    def result(self, dump: bytes) -> bytes:
        return dump

    def error(self, dump: bytes) -> str:
        try:
            return clip(dump.decode("utf-8"))
        except UnicodeDecodeError:
            return f"<{len(dump)} bytes, not UTF-8: {clip(repr(dump))}>"


class WoolPickleCodec:
    """Wool's Python convention: cloudpickle everywhere (for self-tests against Wool)."""

    name = "wool-pickle"

    def __init__(self, task_version: str):
        import cloudpickle
        import wool
        from wool.runtime.routine.task import Task

        self._cloudpickle = cloudpickle
        self._Task = Task
        self._proxy = wool.WorkerProxy("raw-wire-self-test")  # lazy: never connects
        self.task_version = task_version

    def task(self, routine: str | bytes, args: bytes) -> pb.Task:
        if isinstance(routine, bytes):  # a raw, unloadable callable
            msg = self._Task(
                id=uuid.uuid4(), callable=_echo, args=(args,), kwargs={}, proxy=self._proxy
            ).to_protobuf()
            msg.callable = routine
        else:
            fn = {"echo": _echo, "sleep": _sleep}[routine]
            msg = self._Task(
                id=uuid.uuid4(), callable=fn, args=(args,), kwargs={}, proxy=self._proxy,
                tag=f"raw_wire:{routine}",
            ).to_protobuf()
        msg.version = self.task_version
        return msg

    def result(self, dump: bytes):
        return self._cloudpickle.loads(dump)

    def error(self, dump: bytes) -> str:
        try:
            e = self._cloudpickle.loads(dump)
            return clip(f"{type(e).__name__}: {e}")
        except Exception as err:  # pragma: no cover
            return f"<undecodable exception dump: {err}>"


def _routine(fn):
    import wool

    return wool.routine(fn)


@_routine
async def _echo(data: bytes) -> bytes:
    return data


@_routine
async def _sleep(data: bytes) -> bytes:
    import asyncio as _asyncio

    await _asyncio.sleep(float(data.decode()))
    return data


# ---------------------------------------------------------------- wire helpers


def describe_rpc_error(e: grpc.RpcError) -> str:
    try:
        code = e.code().name
    except Exception:
        code = "?"
    try:
        details = e.details()
    except Exception:
        details = ""
    debug = ""
    if hasattr(e, "debug_error_string"):
        try:
            debug = " ".join((e.debug_error_string() or "").split())
        except Exception:
            pass
    return f"{code}: {details}" + (f" [debug: {debug}]" if debug else "")


def kind(resp: pb.Response) -> str:
    return resp.WhichOneof("payload") or "<empty>"


class Dispatch:
    """One dispatch call, step by step."""

    def __init__(self, ctx: "Ctx", routine: str | bytes, args: bytes):
        self.ctx = ctx
        self.routine = routine
        self.args = args
        self.call = ctx.stub.dispatch(timeout=ctx.call_timeout)

    async def read(self, what: str, within: float):
        try:
            return await asyncio.wait_for(self.call.read(), within)
        except asyncio.TimeoutError:
            raise Failed(f"no {what} within {within} s") from None
        except grpc.RpcError as e:
            raise Failed(f"gRPC error while waiting for {what}: {describe_rpc_error(e)}") from None

    async def start(self, within: float = 5.0) -> pb.Response:
        """Send the task; return the first response (ack or nack)."""
        await self.write(pb.Request(task=self.ctx.codec.task(self.routine, self.args)), "task")
        return await self.read("ack", within)

    async def expect_ack(self, within: float = 5.0) -> pb.Ack:
        first = await self.start(within)
        if first is grpc.aio.EOF:
            raise Failed(f"stream ended before an ack (status {await self._status()})")
        if kind(first) != "ack":
            detail = ""
            if kind(first) == "nack" and first.nack.HasField("exception"):
                detail = f": {self.ctx.codec.error(first.nack.exception.dump)}"
            raise Failed(f"expected ack, got {kind(first)}{detail}")
        return first.ack

    async def write(self, request: pb.Request, what: str) -> None:
        try:
            await self.call.write(request)
        except (grpc.RpcError, asyncio.InvalidStateError) as e:
            status = await self._status() if self.call.done() else "still open"
            raise Failed(f"could not send {what}: {type(e).__name__}: {e}; "
                         f"stream status {status}") from None

    async def send_next(self) -> None:
        await self.write(pb.Request(next=pb.Void()), "next")

    async def next_result(self, within: float):
        await self.send_next()
        resp = await self.read("result", within)
        if resp is grpc.aio.EOF:
            raise Failed(f"stream ended instead of a result (status {await self._status()})")
        if kind(resp) == "exception":
            raise Failed(f"routine failed: {self.ctx.codec.error(resp.exception.dump)}")
        if kind(resp) != "result":
            raise Failed(f"expected result, got {kind(resp)}")
        return self.ctx.codec.result(resp.result.dump)

    async def expect_end(self, within: float = 2.0) -> None:
        resp = await self.read("end of stream", within)
        if resp is not grpc.aio.EOF:
            raise Failed(f"expected end of stream, got another response: {kind(resp)}")
        status = await self._status()
        if status != "OK":
            raise Failed(f"stream ended with status {status}")

    async def _status(self) -> str:
        try:
            code = await asyncio.wait_for(self.call.code(), 2.0)
            details = await self.call.details()
            return code.name + (f" ({details})" if details else "")
        except Exception as e:  # pragma: no cover
            return f"<unknown: {type(e).__name__}>"

    def cancel(self) -> None:
        self.call.cancel()


class Ctx:
    def __init__(self, args: argparse.Namespace, codec):
        self.args = args
        self.codec = codec
        self.call_timeout = 30.0
        options = [
            ("grpc.max_receive_message_length", 100 * 1024 * 1024),
            ("grpc.max_send_message_length", 100 * 1024 * 1024),
        ]
        if args.authority:
            options.append(("grpc.default_authority", args.authority))
        creds = channel_credentials(args)
        if creds is None:
            self.channel = grpc.aio.insecure_channel(args.target, options=options)
        else:
            if args.peer:
                options.append(("grpc.ssl_target_name_override", args.peer))
            self.channel = grpc.aio.secure_channel(args.target, creds, options=options)
        self.stub = pb_grpc.WorkerStub(self.channel)
        self.passed = 0
        self.failed = 0

    def ok(self, name: str, detail: str = "") -> None:
        self.passed += 1
        emit(f"ok {name}" + (f": {detail}" if detail else ""))

    def fail(self, name: str, detail: str) -> None:
        self.failed += 1
        emit(f"FAIL {name}: {' '.join(detail.split())}")

    async def check(self, name: str, coro) -> bool:
        """Run one check coroutine; it returns a detail string or raises Failed."""
        try:
            detail = await coro
        except Failed as e:
            self.fail(name, str(e))
            return False
        except grpc.RpcError as e:
            self.fail(name, f"gRPC error: {describe_rpc_error(e)}")
            return False
        except Exception as e:
            self.fail(name, f"unexpected {type(e).__name__}: {e}")
            return False
        self.ok(name, detail or "")
        return True

    async def idle(self) -> float:
        return (await self.stub.idle(pb.Void(), timeout=5.0)).seconds


def channel_credentials(args: argparse.Namespace):
    if not args.tls_ca:
        if args.tls_cert or args.tls_key or args.one_way or args.peer:
            raise SystemExit("TLS options need --tls-ca")
        return None
    with open(args.tls_ca, "rb") as f:
        ca = f.read()
    if bool(args.tls_cert) != bool(args.tls_key):
        raise SystemExit("--tls-cert and --tls-key go together")
    if args.tls_cert and not args.one_way:
        with open(args.tls_cert, "rb") as f:
            cert = f.read()
        with open(args.tls_key, "rb") as f:
            key = f.read()
        return grpc.ssl_channel_credentials(ca, key, cert)
    if not args.one_way:
        raise SystemExit("mutual TLS needs --tls-cert and --tls-key (or --one-way)")
    return grpc.ssl_channel_credentials(ca)


# ---------------------------------------------------------------- checks


async def one_call(ctx: Ctx, routine: str, args: bytes, expect, *, min_s=0.0, within=5.0):
    """Full coroutine-shaped dispatch: ack, next -> result, end. Returns a detail."""
    t0 = time.monotonic()
    d = Dispatch(ctx, routine, args)
    try:
        ack = await d.expect_ack()
        result = await d.next_result(within)
        if result != expect:
            raise Failed(f"result {result!r} != {expect!r}")
        await d.expect_end()
    finally:
        d.cancel()
    took = time.monotonic() - t0
    if took < min_s:
        raise Failed(f"returned after {took:.3f} s, expected >= {min_s} s")
    return f"ack version {ack.version!r}, result {result!r}, stream ended OK, {took:.3f} s"


async def cmd_echo(ctx: Ctx) -> None:
    await ctx.check("echo", one_call(ctx, "echo", b"hello", b"hello"))


async def cmd_sleep(ctx: Ctx) -> None:
    await ctx.check("sleep", one_call(ctx, "sleep", b"0.2", b"0.2", min_s=0.2))


async def cmd_idle(ctx: Ctx) -> None:
    async def run():
        return f"idle {await ctx.idle()!r}"

    await ctx.check("idle", run())


async def cmd_idle_zero_under_load(ctx: Ctx) -> None:
    n = 20
    calls = [Dispatch(ctx, "sleep", b"1.0") for _ in range(n)]
    try:
        before = None
        try:
            before = await ctx.idle()
        except grpc.RpcError:
            pass

        async def acks():
            results = await asyncio.gather(*(c.expect_ack() for c in calls),
                                           return_exceptions=True)
            bad = [r for r in results if isinstance(r, BaseException)]
            if bad:
                raise Failed(f"{len(bad)} of {n} dispatches not acked: {bad[0]}")
            # Ask each for its result now (a routine may only start on `next`).
            for c in calls:
                await c.send_next()
            return f"{n} dispatches acked (idle before load: {before!r})"

        if not await ctx.check("load-acked", acks()):
            return

        async def polls():
            values = []
            for _ in range(3):
                values.append(await ctx.idle())
                await asyncio.sleep(0.05)
            if any(v != 0.0 for v in values):
                raise Failed(f"idle under load read {values!r}, expected exactly 0.0")
            return f"idle under load {values!r}"

        await ctx.check("idle-zero-under-load", polls())

        async def drain():
            async def finish(c: Dispatch):
                resp = await c.read("result", 10.0)
                if resp is grpc.aio.EOF or kind(resp) != "result":
                    got = "end of stream" if resp is grpc.aio.EOF else kind(resp)
                    raise Failed(f"expected result, got {got}")
                if ctx.codec.result(resp.result.dump) != b"1.0":
                    raise Failed("wrong result")
                await c.expect_end()

            results = await asyncio.gather(*(finish(c) for c in calls),
                                           return_exceptions=True)
            bad = [r for r in results if isinstance(r, BaseException)]
            if bad:
                raise Failed(f"{len(bad)} of {n} dispatches did not finish cleanly: {bad[0]}")
            return f"{n} results received, streams ended OK"

        if not await ctx.check("load-drained", drain()):
            return

        async def restart():
            first = await ctx.idle()
            if not (0.0 < first < 1.0):
                raise Failed(f"idle right after the drain read {first!r}, expected > 0 and < 1.0")
            await asyncio.sleep(0.2)
            second = await ctx.idle()
            if not second > first:
                raise Failed(f"idle did not grow after the drain: {first!r} then {second!r}")
            return f"idle after drain {first!r}, 0.2 s later {second!r}"

        await ctx.check("idle-restarts-after-drain", restart())
    finally:
        for c in calls:
            c.cancel()


async def cmd_unknown_routine(ctx: Ctx) -> None:
    async def refused():
        t0 = time.monotonic()
        d = Dispatch(ctx, b"no-such-routine", b"x")
        try:
            try:
                first = await asyncio.wait_for(d.start(within=1.0), 1.0)
            except Failed as e:
                if "gRPC error" in str(e):
                    return f"refused by gRPC status after {time.monotonic() - t0:.3f} s: " + \
                        str(e).split("waiting for ack: ", 1)[-1]
                raise
            except grpc.RpcError as e:  # write failed
                return f"refused by gRPC status (on write): {describe_rpc_error(e)}"
            took = time.monotonic() - t0
            if first is grpc.aio.EOF:
                status = await d._status()
                if status.startswith("OK"):
                    raise Failed("stream ended with OK and no nack")
                return f"refused by gRPC status after {took:.3f} s: {status}"
            if kind(first) == "nack":
                msg = (ctx.codec.error(first.nack.exception.dump)
                       if first.nack.HasField("exception") else "<no exception>")
                await d.expect_end()
                return f"refused by nack after {took:.3f} s: {msg!r}; stream ended OK"
            raise Failed(f"not refused: got {kind(first)}")
        finally:
            d.cancel()

    await ctx.check("unknown-routine-refused", refused())
    await ctx.check("echo-after-unknown-routine", one_call(ctx, "echo", b"hello", b"hello"))


async def cmd_stop(ctx: Ctx) -> None:
    async def run():
        await ctx.stub.stop(pb.StopRequest(timeout=0.0), timeout=10.0)
        emit("stopped")
        return ""

    await ctx.check("stop", run())


async def cmd_stop_drains(ctx: Ctx) -> None:
    d = Dispatch(ctx, "sleep", b"1.0")
    try:
        async def inflight():
            await d.expect_ack()
            await d.send_next()
            return "sleep(1.0) acked"

        if not await ctx.check("drain-inflight", inflight()):
            return
        t0 = time.monotonic()
        stop = asyncio.ensure_future(ctx.stub.stop(pb.StopRequest(timeout=5.0), timeout=15.0))
        await asyncio.sleep(0.2)

        async def refused():
            d2 = Dispatch(ctx, "echo", b"late")
            try:
                first = await d2.start(within=2.0)
            except Failed as e:
                if "UNAVAILABLE" in str(e):
                    return str(e).split("waiting for ack: ", 1)[-1]
                raise
            finally:
                d2.cancel()
            got = "end of stream" if first is grpc.aio.EOF else kind(first)
            raise Failed(f"new dispatch during the drain was not refused UNAVAILABLE: {got}")

        await ctx.check("drain-refuses-new", refused())

        async def finished():
            resp = await d.read("result", 5.0)
            if resp is grpc.aio.EOF or kind(resp) != "result":
                got = "end of stream" if resp is grpc.aio.EOF else kind(resp)
                if got == "exception":
                    got += f" ({ctx.codec.error(resp.exception.dump)})"
                raise Failed(f"in-flight sleep did not finish under grace: {got}")
            await d.expect_end()
            return "in-flight sleep returned its result during the drain"

        await ctx.check("drain-finishes-inflight", finished())

        async def stopped():
            try:
                await stop
            except grpc.RpcError as e:
                raise Failed(f"stop failed: {describe_rpc_error(e)}") from None
            took = time.monotonic() - t0
            if took > 5.0:
                raise Failed(f"stop answered after {took:.3f} s (grace 5 s, work ~1 s)")
            return f"stop answered Void after {took:.3f} s"

        await ctx.check("drain-stop-answers", stopped())

        async def again():
            try:
                await ctx.stub.stop(pb.StopRequest(timeout=0.0), timeout=3.0)
                return "second stop answered Void"
            except grpc.RpcError as e:
                if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                    return f"worker gone: {e.code().name}"
                raise Failed(f"second stop: {describe_rpc_error(e)}") from None

        await ctx.check("drain-second-stop-harmless", again())
    finally:
        d.cancel()


COMMANDS = {
    "echo": cmd_echo,
    "sleep": cmd_sleep,
    "idle": cmd_idle,
    "idle-zero-under-load": cmd_idle_zero_under_load,
    "unknown-routine": cmd_unknown_routine,
    "stop-drains": cmd_stop_drains,
    "stop": cmd_stop,
}


async def run(args: argparse.Namespace) -> int:
    codec_cls = WoolPickleCodec if args.wool_pickle else RustCodec
    codec = codec_cls(args.task_version)
    ctx = Ctx(args, codec)
    try:
        for name in args.commands:
            await COMMANDS[name](ctx)
    finally:
        await ctx.channel.close()
    emit(f"done: {ctx.passed} ok, {ctx.failed} failed")
    return 0 if ctx.failed == 0 else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Wire-level checks of a worker, with Wool's generated stubs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands: " + ", ".join(COMMANDS),
    )
    parser.add_argument("target", metavar="TARGET", help="host:port or unix:/path")
    parser.add_argument("commands", metavar="CMD", nargs="+", choices=list(COMMANDS))
    parser.add_argument("--tls-ca", metavar="CA")
    parser.add_argument("--tls-cert", metavar="CERT")
    parser.add_argument("--tls-key", metavar="KEY")
    parser.add_argument("--one-way", action="store_true", help="present no client certificate")
    parser.add_argument("--peer", metavar="NAME",
                        help="name to verify the worker's certificate against")
    parser.add_argument("--authority", metavar="NAME",
                        help="override the HTTP/2 :authority (grpc.default_authority)")
    parser.add_argument("--wool-pickle", action="store_true",
                        help="encode tasks like Wool's Python runtime (for a Wool worker)")
    parser.add_argument("--task-version", default=WOOL_VERSION, metavar="V",
                        help=f"Task.version to send (default: installed wool, {WOOL_VERSION})")
    args = parser.parse_args()
    try:
        return asyncio.run(run(args))
    except SystemExit as e:
        if isinstance(e.code, str):
            emit(f"error: {e.code}")
            return 2
        raise
    except BaseException as e:
        emit(f"error: {type(e).__name__}: {' '.join(str(e).split())}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
