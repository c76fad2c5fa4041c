"""`libwool_kubernetes.demand` against a real ``wool-scaler`` (``target/debug/wool-scaler``,
built by ``cargo build -p wool-scaler``) and real Wool 0.15.7 workers started on this machine
(``tests/interop/wool_pool.py``). Run with the package's other tests
(``scripts/kubernetes-python-test.sh -k demand``), or alone from the Wool 0.15.7 venv that
``scripts/setup-venvs.sh`` makes::

    PYTHONPATH=integrations/libwool-kubernetes/src \\
        target/venvs/wool-0.15.7/bin/python -m pytest -p no:cacheprovider \\
        integrations/libwool-kubernetes/tests/test_demand.py

KEDA's side is played by the test itself: it asks the scaler ``IsActive`` as KEDA does (the
request encoded by hand: KEDA's stubs are not in the venv) and starts a worker once the answer
is true, as KEDA would start a replica. Waits end as soon as what they wait for is there, within
generous limits.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import cloudpickle
import grpc
import pytest
import wool
from wool.runtime.discovery.local import LocalDiscovery
from wool.runtime.loadbalancer.base import NoWorkersAvailable

from libwool_kubernetes.demand import DemandLoadBalancer, DemandReporter, ScalerTls

REPO = Path(__file__).resolve().parents[3]
SCALER = REPO / "target" / "debug" / "wool-scaler"
POOL_SCRIPT = REPO / "tests" / "interop" / "wool_pool.py"
MAKE_CERTS = REPO / "tests" / "interop" / "make-test-certs.sh"

# How long anything may take to be seen (a busy machine included).
LIMIT = 60.0
# The scaler's demand TTL in these tests: short, so that refreshes are exercised.
TTL = 3.0
ACCEPTED = 'wool_scaler_demand_reports_total{outcome="accepted"}'


@wool.routine
async def double(x: int) -> int:
    return 2 * x


class RescanningDiscovery:
    """Wool's `LocalDiscovery` for ``namespace`` whose subscribers also rescan the registry
    every half second. On this machine Wool 0.15.7's subscriber, which waits for its
    notification file to be modified, does not see workers published after it started (a
    subscriber started afterwards does): a client started before its fleet, the case at hand,
    needs the rescan, as a Kubernetes client's discovery finds pods that start later."""

    def __init__(self, namespace: str) -> None:
        self._inner = LocalDiscovery(namespace)

    def __enter__(self) -> RescanningDiscovery:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    @property
    def publisher(self):
        return self._inner.publisher

    @property
    def subscriber(self):
        return self._inner.subscribe(poll_interval=0.5)

    def subscribe(self, filter=None, poll_interval=None):
        return self._inner.subscribe(filter=filter, poll_interval=poll_interval or 0.5)


def free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class Scaler:
    """A ``wool-scaler`` process with a metrics port, killed on close."""

    def __init__(self, *args: str) -> None:
        assert SCALER.exists(), f"{SCALER} is missing: run `cargo build -p wool-scaler` first"
        self.metrics_address = free_address()
        self.process = subprocess.Popen(
            [str(SCALER), "--listen", "127.0.0.1:0", "--metrics-listen", self.metrics_address,
             *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline().strip()
        assert line, "wool-scaler printed no address"
        self.address = line

    def __enter__(self) -> Scaler:
        return self

    def __exit__(self, *exc) -> None:
        self.process.kill()
        self.process.wait()

    def metrics(self) -> dict[str, float]:
        url = f"http://{self.metrics_address}/metrics"
        with urllib.request.urlopen(url, timeout=LIMIT) as answer:
            text = answer.read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        return samples


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def scaled_object_ref(name: str, namespace: str, metadata: dict[str, str]) -> bytes:
    """KEDA's ``ScaledObjectRef`` (name = 1, namespace = 2, scalerMetadata = 3), encoded."""
    out = _field(1, name.encode()) + _field(2, namespace.encode())
    for key, value in metadata.items():
        out += _field(3, _field(1, key.encode()) + _field(2, value.encode()))
    return out


async def is_active(address: str, name: str, metadata: dict[str, str]) -> bool:
    """``IsActive`` as KEDA asks it, for ScaledObject ``default/name``."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/externalscaler.ExternalScaler/IsActive",
            request_serializer=lambda raw: raw,
            response_deserializer=lambda raw: raw,
        )
        answer = await call(scaled_object_ref(name, "default", metadata), timeout=LIMIT)
    # IsActiveResponse { bool result = 1; }: true is 08 01, false the empty message.
    return answer == b"\x08\x01"


async def eventually(check, what: str) -> None:
    """Waits until the async ``check()`` is true, within LIMIT."""
    deadline = time.monotonic() + LIMIT
    while not await check():
        assert time.monotonic() < deadline, f"never: {what} (within {LIMIT} s)"
        await asyncio.sleep(0.1)


def start_workers(namespace: str) -> subprocess.Popen:
    """A real Wool 0.15.7 pool of one worker published under ``namespace``, as KEDA would
    start a replica; ends when its stdin closes. Its workers import this module (the routine's:
    its folder is put on their path) and the package under test (as this process has it)."""
    module = sys.modules[double.__module__]
    root = Path(module.__file__).resolve().parent
    for _ in range(double.__module__.count(".")):
        root = root.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    pool = subprocess.Popen(
        [sys.executable, str(POOL_SCRIPT), "pool", namespace, "--spawn", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    return pool


def stop_workers(pool: subprocess.Popen) -> None:
    pool.stdin.close()
    try:
        pool.wait(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        pool.kill()
        pool.wait()


def waiting_series(metrics: dict[str, float], name: str) -> float | None:
    return metrics.get(f'wool_scaler_demand_waiting{{scaledobject="default/{name}"}}')


def test_a_task_at_zero_workers_gets_its_result_once_a_worker_is_started_on_demand():
    """Given a fleet at zero workers and a client pool (quorum=0) with the demand balancer,
    when a task is dispatched, then the scaler turns active (the test, as KEDA, sees it and
    waits two TTLs: the demand is refreshed, not expired), and once a worker is started the
    task gets its result; then nothing waits: the demand is withdrawn (not expired) and the
    ScaledObject is inactive again."""
    namespace = f"demand-{uuid.uuid4().hex}"
    metadata = {"namespace": namespace, "idleThreshold": "0"}
    with Scaler("--demand-ttl", f"{TTL}s") as scaler:

        async def main() -> None:
            balancer = DemandLoadBalancer(
                scaler.address, namespace="default", name="workers", wait_timeout=LIMIT * 3
            )
            assert not await is_active(scaler.address, "workers", metadata)
            async with wool.WorkerPool(
                discovery=RescanningDiscovery(namespace), loadbalancer=balancer, quorum=0
            ):
                result = asyncio.ensure_future(double(21))
                await eventually(
                    lambda: is_active(scaler.address, "workers", metadata),
                    "the scaler active on the waiting task",
                )
                # Two TTLs pass with the task waiting: reports keep the demand alive.
                await asyncio.sleep(2 * TTL)
                assert await is_active(scaler.address, "workers", metadata)
                metrics = scaler.metrics()
                assert waiting_series(metrics, "workers") == 1.0, metrics
                assert metrics["wool_scaler_demand_expired_total"] == 0.0, metrics
                assert metrics[ACCEPTED] >= 2.0
                assert not result.done()

                pool = start_workers(namespace)
                try:
                    assert await asyncio.wait_for(result, LIMIT) == 42

                    async def withdrawn() -> bool:
                        return waiting_series(scaler.metrics(), "workers") is None

                    await eventually(withdrawn, "the demand withdrawn")
                    await eventually(
                        lambda: _not(is_active(scaler.address, "workers", metadata)),
                        "the scaler inactive once the task ran",
                    )
                    assert scaler.metrics()["wool_scaler_demand_expired_total"] == 0.0
                    # With the worker there, another task runs with no demand reported.
                    accepted = scaler.metrics()[ACCEPTED]
                    assert await asyncio.wait_for(double(5), LIMIT) == 10
                    assert balancer.reporter.waiting == 0
                    after = scaler.metrics()[ACCEPTED]
                    assert after == accepted
                finally:
                    stop_workers(pool)

        asyncio.run(main())


async def _not(awaitable) -> bool:
    return not await awaitable


def test_a_task_gives_up_after_its_wait_timeout_and_the_demand_is_withdrawn():
    """Given a fleet that never gets a worker, when a task waits with a wait_timeout of 2 s,
    then Wool raises NoWorkersAvailable once that deadline has passed, and the demand is
    withdrawn."""
    namespace = f"demand-{uuid.uuid4().hex}"
    metadata = {"namespace": namespace, "idleThreshold": "0"}
    wait_timeout = 2.0
    with Scaler() as scaler:

        async def main() -> None:
            balancer = DemandLoadBalancer(
                scaler.address, namespace="default", name="orphan", wait_timeout=wait_timeout
            )
            async with wool.WorkerPool(
                discovery=RescanningDiscovery(namespace), loadbalancer=balancer, quorum=0
            ):
                started = time.monotonic()
                with pytest.raises(NoWorkersAvailable):
                    await asyncio.wait_for(double(1), LIMIT)
                assert time.monotonic() - started >= wait_timeout

                async def withdrawn() -> bool:
                    return waiting_series(scaler.metrics(), "orphan") is None

                await eventually(withdrawn, "the demand withdrawn")
                assert not await is_active(scaler.address, "orphan", metadata)
                assert scaler.metrics()[ACCEPTED] >= 2.0

        asyncio.run(main())


def test_the_reporter_counts_clamps_and_the_scaler_refuses_past_its_bounds():
    """Given a scaler taking at most 5 waiting tasks a report, when the reporter counts 7
    waiting, then it reports 5 (the bound the ack gave), and a direct report of 6 is refused
    INVALID_ARGUMENT naming the flag; two reporters for one ScaledObject add up."""
    with Scaler("--max-demand-waiting", "5") as scaler:

        async def main() -> None:
            first = DemandReporter(scaler.address, namespace="default", name="bounded")
            second = DemandReporter(scaler.address, namespace="default", name="bounded")
            ack = await first.report_once(1)
            assert ack.max_waiting == 5
            assert (ack.ttl_seconds, ack.report_interval_seconds) == (30.0, 10.0)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await first.report_once(6)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "--max-demand-waiting" in refused.value.details()

            first.add(7)
            second.add(2)

            async def counted() -> bool:
                return waiting_series(scaler.metrics(), "bounded") == 7.0

            await eventually(counted, "5 (clamped) + 2 waiting")
            first.add(-7)
            second.add(-2)

            async def withdrawn() -> bool:
                return waiting_series(scaler.metrics(), "bounded") is None

            await eventually(withdrawn, "both withdrawn")

        asyncio.run(main())


def test_the_balancer_pickles_as_wool_sends_it_with_a_client_id_of_its_own():
    balancer = DemandLoadBalancer(
        "127.0.0.1:9090", namespace="default", name="workers", wait_timeout=10.0
    )
    copies = (pickle.loads(pickle.dumps(balancer)), cloudpickle.loads(cloudpickle.dumps(balancer)))
    for copy in copies:
        assert isinstance(copy, DemandLoadBalancer)
        assert copy._settings == balancer._settings
        assert copy.reporter.client_id != balancer.reporter.client_id
    named = DemandLoadBalancer(
        "127.0.0.1:9090", namespace="default", name="workers", client_id="client-7"
    )
    assert pickle.loads(pickle.dumps(named)).reporter.client_id == "client-7"
    with pytest.raises(ValueError):
        DemandLoadBalancer("127.0.0.1:9090", namespace="default", name="w", wait_timeout=0)
    with pytest.raises(ValueError):
        DemandReporter("127.0.0.1:9090", namespace="default", name="w", client_id="x" * 129)


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test certificates")
    subprocess.run(["bash", str(MAKE_CERTS), str(tmp_path)], check=True, stdout=subprocess.DEVNULL)
    return tmp_path


def test_under_tls_demand_needs_a_client_certificate(certs: Path):
    """Given a scaler serving mutual TLS, then a reporter with a client certificate of its CA
    is acked, one without a certificate or with a certificate of another CA is refused; given
    one-way TLS, then a report is UNAUTHENTICATED."""
    tls_args = ["--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / "worker.pem"),
                "--tls-key", str(certs / "worker.key")]

    def reporter(address: str, tls: ScalerTls) -> DemandReporter:
        return DemandReporter(
            address, namespace="default", name="secured", tls=tls, rpc_timeout=LIMIT
        )

    trusted = ScalerTls.from_files(certs / "ca.pem", certs / "client.pem", certs / "client.key",
                                   server_name="localhost")
    anonymous = ScalerTls.from_files(certs / "ca.pem", server_name="localhost")
    rogue = ScalerTls.from_files(certs / "ca.pem", certs / "rogue.pem", certs / "rogue.key",
                                 server_name="localhost")
    with Scaler(*tls_args) as scaler:

        async def mutual() -> None:
            ack = await reporter(scaler.address, trusted).report_once(1)
            assert ack.ttl_seconds == 30.0
            for refused_tls in (anonymous, rogue):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await reporter(scaler.address, refused_tls).report_once(1)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
            assert waiting_series(scaler.metrics(), "secured") == 1.0

        asyncio.run(mutual())
    with Scaler(*tls_args, "--one-way") as scaler:

        async def one_way() -> None:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await reporter(scaler.address, trusted).report_once(1)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "mutual TLS" in refused.value.details()

        asyncio.run(one_way())
