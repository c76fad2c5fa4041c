"""Demand input for Wool clients: tell ``wool-scaler`` that tasks wait for a worker.

A Wool fleet that KEDA has scaled to zero has no busy worker for ``wool-scaler`` to count, so
nothing would ever start one: a client dispatching to it waits, then fails. With
`DemandLoadBalancer` as the pool's load balancer, a task that finds no worker is reported to
``wool-scaler`` as waiting (libwool's ``libwool.scaler.v1.Demand`` service, on the scaler's
KEDA address), which makes the ScaledObject active at once (KEDA starts a replica) and adds the
waiting tasks to its metric; the task waits, at most ``wait_timeout`` seconds, for a worker to
appear, then goes to the wrapped load balancer as usual::

    import wool
    from wool.runtime.discovery.local import LocalDiscovery
    from libwool_kubernetes.demand import DemandLoadBalancer

    balancer = DemandLoadBalancer(
        "wool-scaler.wool.svc:9090",       # the ScaledObject trigger's scalerAddress
        namespace="default",               # the ScaledObject this fleet is scaled by
        name="workers",
        wait_timeout=300.0,                # seconds a task may wait for a worker
    )
    async with wool.WorkerPool(discovery=..., loadbalancer=balancer, quorum=0):
        result = await my_routine()

**``quorum=0`` is needed.** With Wool's default ``quorum=1`` the pool's `WorkerProxy` waits
(``quorum_timeout``, 60 s by default) for a worker at the first dispatch *before* it asks the
load balancer, so no demand is reported and the first dispatch to a fleet at zero fails with
`asyncio.TimeoutError`; with ``quorum=0`` (or ``None``) every dispatch goes to the load
balancer, which reports and waits. (Wool checks the quorum only on the first dispatch: later
ones, after the fleet went back to zero, reach the balancer whatever the quorum.) When the wait
ends without a worker, the balancer yields nothing and Wool raises `NoWorkersAvailable`, as it
would without demand.

Reporting (`DemandReporter`): the count of tasks waiting in this process for this
ScaledObject, reported when it changes (at most half as often as the scaler's rate, changes in
between folded into one report), again every ``report_interval_seconds`` the scaler's ack
gives (a third of its TTL) while tasks wait, and 0 once none waits (the figure is withdrawn, the
reporting task ends and its channel is closed). A report that fails is logged (at most once a
minute) and tried again with a backoff; the tasks still wait for a worker, since a fleet above
zero, or another client's demand, may bring one. Each reporter is one client of the scaler,
with an id of its own (a new UUID unless given). A process that ends (or whose event loop
ends) while tasks wait leaves its figure to expire at the scaler's TTL.

TLS: `ScalerTls` (the CA, and the client certificate and key). A scaler serving TLS takes
demand only over mutual TLS (one-way TLS answers ``UNAUTHENTICATED``); in plaintext the
scaler's NetworkPolicy decides who may report.

The stubs ``_demand_pb2.py`` and ``_demand_pb2_grpc.py`` are generated from libwool's
``proto/libwool/demand.proto`` with grpcio-tools 1.76.0: its protobuf gencode 6.31.1 and stubs
for grpcio 1.76 run on the protobuf 6.33 and grpcio 1.85 that Wool 0.15.7 installs (and
anything newer within protobuf 6), where grpcio-tools 1.85's gencode 7.x would be refused by
protobuf 6. The proto is copied as ``libwool_kubernetes/_demand.proto`` so that the stubs
import each other from this package::

    pip install grpcio-tools==1.76.0          # in a venv of its own
    mkdir -p /tmp/gen/libwool_kubernetes
    cp proto/libwool/demand.proto /tmp/gen/libwool_kubernetes/_demand.proto
    python -m grpc_tools.protoc -I /tmp/gen --python_out=OUT --grpc_python_out=OUT \\
        /tmp/gen/libwool_kubernetes/_demand.proto
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncGenerator

import grpc
from grpc import aio
from wool.runtime.loadbalancer.roundrobin import RoundRobinLoadBalancer

from . import _demand_pb2 as pb
from . import _demand_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from wool.runtime.loadbalancer.base import LoadBalancerContextView, LoadBalancerLike
    from wool.runtime.routine.task import Task

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_RPC_TIMEOUT",
    "DEFAULT_WAIT_TIMEOUT",
    "DemandLoadBalancer",
    "DemandReporter",
    "ScalerTls",
]

_log = logging.getLogger(__name__)

DEFAULT_WAIT_TIMEOUT = 300.0
"""Seconds a task waits for a worker before the balancer gives up (`NoWorkersAvailable`):
long enough for KEDA to see the demand, the pod to be scheduled, its image pulled and the
worker to start."""

DEFAULT_POLL_INTERVAL = 0.1
"""Seconds between looks at the pool while a task waits for a worker (Wool's balancer context
offers no event to wait on; a look is a length check of a dict)."""

DEFAULT_RPC_TIMEOUT = 5.0
"""Seconds one report may take before it counts as failed."""

# Until the first ack says otherwise: wool-scaler's defaults.
_DEFAULT_REPORT_INTERVAL = 10.0
_DEFAULT_REPORTS_PER_SECOND = 10
_DEFAULT_MAX_WAITING = 100_000

# A failed report is tried again after 0.5 s, doubling up to this (and never later than the
# next refresh).
_MAX_BACKOFF = 8.0

# A task counts as waiting once the pool has had no worker for this long (seconds): a pool
# just started has not yet admitted the workers its discovery is about to find.
_REPORT_AFTER = 0.5

# A withdrawal (0) that keeps failing is given up after this many tries: the figure expires at
# the scaler's TTL anyway.
_WITHDRAWAL_TRIES = 3

# Failed reports are logged at most this often (seconds).
_WARN_EVERY = 60.0


@dataclass(frozen=True)
class ScalerTls:
    """TLS toward ``wool-scaler``: the CA its certificate chains to (``None``: the system's
    roots), and for mutual TLS, which demand needs, this client's certificate chain and private
    key (PEM, both or neither); ``server_name`` overrides the name the scaler's certificate is
    verified against (default: the host of the address).

    :raises ValueError: if only one of ``cert_pem`` and ``key_pem`` is given.
    """

    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_pem is None) != (self.key_pem is None):
            raise ValueError("ScalerTls needs both cert_pem and key_pem, or neither")

    @classmethod
    def from_files(
        cls,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        server_name: str | None = None,
    ) -> ScalerTls:
        """Reads the PEM files (once, now).

        :raises OSError: if a file cannot be read.
        :raises ValueError: if only one of ``cert`` and ``key`` is given.
        """

        def read(path: str | Path | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return cls(read(ca), read(cert), read(key), server_name)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """grpc's channel credentials for these PEMs."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_pem,
            private_key=self.key_pem,
            certificate_chain=self.cert_pem,
        )


class DemandReporter:
    """Reports one ScaledObject's tasks waiting in this process to ``wool-scaler``.

    `add` counts tasks starting and ending their wait (from code running on an asyncio event
    loop); a task on that loop reports the count as the module's docs say, and ends once 0 has
    been reported. `report_once` makes one report directly.

    :param scaler:
        The scaler's address, ``host:port`` (the ScaledObject trigger's ``scalerAddress``).
    :param namespace:
        The ScaledObject's namespace.
    :param name:
        The ScaledObject's name.
    :param client_id:
        This client's id for the scaler, at most 128 bytes; default a new UUID.
    :param tls:
        TLS toward the scaler; ``None`` for plaintext.
    :param rpc_timeout:
        Seconds one report may take.
    :raises ValueError:
        if ``client_id`` is empty or longer than 128 bytes, or ``rpc_timeout`` is not positive.
    """

    def __init__(
        self,
        scaler: str,
        *,
        namespace: str,
        name: str,
        client_id: str | None = None,
        tls: ScalerTls | None = None,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT,
    ) -> None:
        self._client_id = client_id if client_id is not None else str(uuid.uuid4())
        if not 0 < len(self._client_id.encode()) <= 128:
            raise ValueError("client_id must be 1 to 128 bytes")
        if rpc_timeout <= 0:
            raise ValueError("rpc_timeout must be positive")
        self._scaler = scaler
        self._namespace = namespace
        self._name = name
        self._tls = tls
        self._rpc_timeout = rpc_timeout
        self._waiting = 0
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._report_interval = _DEFAULT_REPORT_INTERVAL
        self._reports_per_second = _DEFAULT_REPORTS_PER_SECOND
        self._max_waiting = _DEFAULT_MAX_WAITING
        self._warned_at = -_WARN_EVERY
        self._suppressed = 0

    @property
    def client_id(self) -> str:
        """This client's id for the scaler."""
        return self._client_id

    @property
    def waiting(self) -> int:
        """Tasks waiting now, as counted by `add`."""
        return self._waiting

    def add(self, tasks: int) -> None:
        """Counts ``tasks`` more waiting (negative: fewer) and has the change reported.

        Must be called on a running event loop; the reporting task runs there.
        """
        self._waiting = max(0, self._waiting + tasks)
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A new event loop (a new `asyncio.run`): the old one's task is gone with it.
            self._loop, self._task, self._changed = loop, None, asyncio.Event()
        assert self._changed is not None
        self._changed.set()
        if self._task is None and self._waiting > 0:
            self._task = loop.create_task(self._run(), name="libwool-demand-reporter")

    async def report_once(self, waiting: int) -> pb.DemandAck:
        """Reports ``waiting`` tasks now, over a channel of its own.

        :returns: the scaler's ack (its TTL, report interval, rate and largest figure).
        :raises grpc.aio.AioRpcError: if the scaler refuses the report or cannot be reached
            (the status says which: ``INVALID_ARGUMENT``, ``RESOURCE_EXHAUSTED``,
            ``UNAUTHENTICATED``, ``UNAVAILABLE``, …).
        """
        async with self._channel() as channel:
            return await self._report(pb_grpc.DemandStub(channel), waiting)

    def _channel(self) -> aio.Channel:
        if self._tls is None:
            return aio.insecure_channel(self._scaler)
        options = []
        if self._tls.server_name:
            options.append(("grpc.ssl_target_name_override", self._tls.server_name))
        return aio.secure_channel(
            self._scaler, self._tls.channel_credentials(), options=options
        )

    async def _report(self, stub: pb_grpc.DemandStub, waiting: int) -> pb.DemandAck:
        report = pb.DemandReport(
            scaled_object=pb.ScaledObject(name=self._name, namespace=self._namespace),
            client_id=self._client_id,
            waiting=waiting,
        )
        ack = await stub.Report(report, timeout=self._rpc_timeout)
        if ack.report_interval_seconds > 0:
            self._report_interval = ack.report_interval_seconds
        if ack.reports_per_second > 0:
            self._reports_per_second = ack.reports_per_second
        if ack.max_waiting > 0:
            self._max_waiting = ack.max_waiting
        return ack

    async def _run(self) -> None:
        """Reports the count until 0 has been reported (or a withdrawal keeps failing)."""
        loop = asyncio.get_running_loop()
        changed = self._changed
        assert changed is not None
        channel = self._channel()
        stub = pb_grpc.DemandStub(channel)
        # What the scaler holds: None when not known (nothing sent yet, or the last report
        # failed); `reported` once a figure above 0 may have reached it.
        sent: int | None = None
        reported = False
        last_at = -float("inf")
        refresh_at = 0.0
        retry_at = 0.0
        failures = 0
        try:
            while True:
                want = min(self._waiting, self._max_waiting)
                if want == 0 and (sent == 0 or not reported):
                    return
                now = loop.time()
                if want != sent:
                    # Changes no more than half the scaler's rate, folded together.
                    at = max(last_at + 2.0 / self._reports_per_second, retry_at)
                else:
                    at = refresh_at
                if now < at:
                    changed.clear()
                    try:
                        await asyncio.wait_for(changed.wait(), at - now)
                    except asyncio.TimeoutError:
                        pass
                    continue
                last_at = now
                reported = reported or want > 0
                try:
                    await self._report(stub, want)
                except aio.AioRpcError as error:
                    failures += 1
                    self._warn(want, error)
                    if want == 0 and failures >= _WITHDRAWAL_TRIES:
                        return
                    backoff = min(_MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
                    retry_at = refresh_at = loop.time() + min(backoff, self._report_interval)
                    sent = None
                    continue
                failures, retry_at, sent = 0, 0.0, want
                refresh_at = loop.time() + self._report_interval
        except Exception:  # noqa: BLE001 - a reporter must never take the client down
            _log.exception("demand reporting to %s stopped", self._scaler)
        finally:
            current = asyncio.current_task()
            if self._task is current:
                self._task = None
            await channel.close()
            # Demand that came while closing starts a new reporting task (unless this one is
            # being cancelled: the loop is going).
            cancelled = current is not None and current.cancelling() > 0
            if self._waiting > 0 and self._task is None and self._loop is loop and not cancelled:
                self._task = loop.create_task(self._run(), name="libwool-demand-reporter")

    def _warn(self, waiting: int, error: aio.AioRpcError) -> None:
        now = time.monotonic()
        if now - self._warned_at < _WARN_EVERY:
            self._suppressed += 1
            return
        _log.warning(
            "reporting %d waiting task(s) for ScaledObject %s/%s to %s failed: %s: %s%s",
            waiting,
            self._namespace,
            self._name,
            self._scaler,
            error.code().name,
            error.details(),
            (
                f" ({self._suppressed} more failures since the last warning)"
                if self._suppressed
                else ""
            ),
        )
        self._warned_at, self._suppressed = now, 0


def _restore_balancer(kwargs: dict[str, Any]) -> DemandLoadBalancer:
    return DemandLoadBalancer(**kwargs)


class DemandLoadBalancer:
    """A Wool load balancer that reports tasks waiting for a worker to ``wool-scaler`` and
    waits for one, then hands each task to the wrapped balancer (see the module's docs; use it
    with ``quorum=0``).

    When a task is delegated and the pool has no worker, it counts as waiting (reported by its
    `DemandReporter`, once the pool has had no worker for half a second) until a worker
    appears or ``wait_timeout`` seconds have passed; then the wrapped balancer yields the
    candidates and the pool dispatches as usual. If the wrapped balancer runs out of
    candidates because the pool emptied meanwhile, the task waits again,
    within the same deadline. A pool with workers pays one length check per task.

    Picklable (Wool sends the balancer along with nested dispatches): a copy reports as a
    client of its own (a new id) unless ``client_id`` was given.

    :param scaler:
        ``wool-scaler``'s address, ``host:port`` (the trigger's ``scalerAddress``).
    :param namespace:
        The namespace of the ScaledObject that scales this pool's fleet.
    :param name:
        That ScaledObject's name.
    :param wait_timeout:
        Seconds a task may wait for a worker; then the balancer yields nothing and Wool raises
        `NoWorkersAvailable`.
    :param loadbalancer:
        The balancer that chooses among workers once there are some; default a new
        `RoundRobinLoadBalancer`. Must be picklable for nested dispatch.
    :param tls:
        TLS toward the scaler (`ScalerTls`); ``None`` for plaintext.
    :param client_id:
        This client's id for the scaler; default a new UUID per instance.
    :param poll_interval:
        Seconds between looks at the pool while a task waits.
    :param rpc_timeout:
        Seconds one report may take.
    :raises ValueError:
        if ``wait_timeout``, ``poll_interval`` or ``rpc_timeout`` is not positive, or
        ``client_id`` is empty or longer than 128 bytes.
    """

    def __init__(
        self,
        scaler: str,
        *,
        namespace: str,
        name: str,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        loadbalancer: LoadBalancerLike | None = None,
        tls: ScalerTls | None = None,
        client_id: str | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT,
    ) -> None:
        if wait_timeout <= 0:
            raise ValueError("wait_timeout must be positive")
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self._settings: dict[str, Any] = {
            "scaler": scaler,
            "namespace": namespace,
            "name": name,
            "wait_timeout": wait_timeout,
            "loadbalancer": loadbalancer,
            "tls": tls,
            "client_id": client_id,
            "poll_interval": poll_interval,
            "rpc_timeout": rpc_timeout,
        }
        self._inner = loadbalancer if loadbalancer is not None else RoundRobinLoadBalancer()
        self._wait_timeout = wait_timeout
        self._poll_interval = poll_interval
        self._reporter = DemandReporter(
            scaler,
            namespace=namespace,
            name=name,
            client_id=client_id,
            tls=tls,
            rpc_timeout=rpc_timeout,
        )

    def __reduce__(self):
        return (_restore_balancer, (dict(self._settings),))

    @property
    def reporter(self) -> DemandReporter:
        """The reporter of this balancer's waiting tasks."""
        return self._reporter

    async def delegate(
        self,
        task: Task,
        *,
        context: LoadBalancerContextView,
    ) -> AsyncGenerator[uuid.UUID, uuid.UUID | None]:
        """Yields the wrapped balancer's candidates once the pool has a worker, having
        reported the task as waiting while it had none (Wool's `LoadBalancerLike` protocol:
        ``athrow`` and ``asend`` are passed to the wrapped balancer's generator).

        Ends without a candidate (Wool then raises `NoWorkersAvailable`) when no worker
        appeared within ``wait_timeout`` seconds, or when the wrapped balancer runs out of
        candidates while the pool has workers.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_timeout
        while True:
            if not context.workers and not await self._wait_for_worker(context, deadline):
                return
            inner = self._inner.delegate(task, context=context)
            succeeded = False
            try:
                try:
                    uid = await anext(inner)
                except StopAsyncIteration:
                    uid = None
                while uid is not None:
                    try:
                        sent = yield uid
                    except GeneratorExit:
                        raise
                    except Exception as failure:
                        # The pool reports a failed dispatch: the wrapped balancer decides.
                        try:
                            uid = await inner.athrow(failure)
                        except StopAsyncIteration:
                            uid = None
                        continue
                    succeeded = sent is not None
                    try:
                        uid = await inner.asend(sent)
                    except StopAsyncIteration:
                        uid = None
                    if succeeded:
                        # Wool's protocol ends the generator after a success, whatever the
                        # wrapped one does.
                        return
            finally:
                await inner.aclose()
            if succeeded or context.workers:
                return
            # Every worker left while this task was being placed: wait again.

    async def _wait_for_worker(
        self, context: LoadBalancerContextView, deadline: float
    ) -> bool:
        """Counts this task as waiting (after a short grace, for a pool still discovering its
        workers) until the pool has a worker (``True``) or the deadline passes (``False``)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        counted = False
        try:
            while not context.workers:
                now = loop.time()
                if not counted and now - started >= _REPORT_AFTER:
                    self._reporter.add(1)
                    counted = True
                left = deadline - now
                if left <= 0:
                    _log.warning(
                        "no worker appeared within %.1f s: giving the task up",
                        self._wait_timeout,
                    )
                    return False
                await asyncio.sleep(min(self._poll_interval, left))
            return True
        finally:
            if counted:
                self._reporter.add(-1)
