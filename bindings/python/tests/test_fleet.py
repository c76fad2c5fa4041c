"""The fleet calls (libwool.fleet) against real processes: `discover` and `watch` against real
Wool pools (tests/interop/wool_pool.py, Wool 0.15.7, LocalDiscovery in the shared-memory
registry), compared with Wool's own subscriber; `connect_worker` to the workers found;
`sweep` and `retire_idle` against libwool's reference worker. The LAN backend needs network
namespaces and is tested in Rust; here only its argument checks.
"""

from __future__ import annotations

import ctypes
import json
import math
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

import libwool
from libwool import _ffi, fleet

from conftest import INTEROP, PY15, ROOT, task_in_flight

POOL_SCRIPT = INTEROP / "wool_pool.py"
POOL_TIMEOUT = 30.0  # waiting for a pool's workers to show up in, or leave, a watch


def unique_namespace() -> str:
    return f"libwool-py-{uuid.uuid4().hex[:16]}"


class Pool:
    """A real Wool WorkerPool under a namespace; `terminate` ends it with SIGTERM."""

    def __init__(self, process, namespace: str):
        self.process = process
        self.namespace = namespace

    def terminate(self) -> None:
        proc = self.process.proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def start_pool(spawn):
    """Start Wool 0.15.7 pools (`wool_pool.py pool NS --spawn N`), each returned once it
    printed ``ready``; each is terminated with SIGTERM when the test ends."""
    pools: list[Pool] = []

    def start(namespace: str, workers: int) -> Pool:
        if not PY15.exists():
            pytest.fail(f"{PY15} is missing: run scripts/setup-venvs.sh")
        process = spawn([PY15, POOL_SCRIPT, "pool", namespace, "--spawn", str(workers)],
                        stdin=subprocess.PIPE)
        assert process.address == "ready", f"{process}: {process.address}"
        pool = Pool(process, namespace)
        pools.append(pool)
        return pool

    yield start
    for pool in pools:
        pool.terminate()


def wool_subscribe(namespace: str, seconds: float = 2.0) -> list[dict]:
    """Wool's own subscriber's listing of `namespace` (`wool_pool.py subscribe`)."""
    done = subprocess.run(
        [PY15, POOL_SCRIPT, "subscribe", namespace, "--seconds", str(seconds)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    lines = done.stdout.strip().splitlines()
    assert lines and lines[-1] == "done", done
    return [json.loads(line) for line in lines[:-1]]


# ---------------------------------------------------------------- discovery


def test_discover_lists_what_wools_subscriber_lists(start_pool):
    # Given a real Wool pool of 3 workers under a fresh namespace, When it is listed, Then
    # the listing is exactly Wool's own subscriber's (every field), sorted by address; and
    # each worker found is reachable through connect_worker.
    namespace = unique_namespace()
    start_pool(namespace, 3)

    got = fleet.discover(namespace)
    want = sorted(wool_subscribe(namespace), key=lambda w: w["address"])

    assert len(got) == 3 and len(want) == 3, (got, want)
    assert [w.address for w in got] == sorted(w.address for w in got)
    assert [
        {
            "uid": w.uid, "address": w.address, "pid": w.pid, "version": w.version,
            "tags": list(w.tags), "extra": dict(w.extra), "secure": w.secure,
            "identity": w.identity,
        }
        for w in got
    ] == want
    for worker in got:
        with fleet.connect_worker(worker) as conn:
            assert conn.target == worker.address and not conn.secure
            assert conn.idle(timeout=10.0) > 0.0


def test_discover_of_an_unused_namespace_is_empty():
    assert fleet.discover(unique_namespace()) == []


def test_the_main_names_are_reexported():
    for name in fleet.__all__:
        assert getattr(libwool, name) is getattr(fleet, name)


@pytest.mark.parametrize(
    "namespace, kwargs",
    [
        ("", {}),
        ("", {"lan": True}),
        ("a/b", {}),
        ("fine", {"listen": -1.0}),
        ("fine", {"listen": math.nan}),
        ("fine", {"listen": math.inf}),
    ],
    ids=["empty", "empty-lan", "slash", "negative-listen", "nan-listen", "inf-listen"],
)
def test_discovery_refuses_bad_arguments(namespace, kwargs):
    # Given a bad namespace or listening window, Then discover (and, without listen, watch)
    # raise ValueError with libwool's message.
    with pytest.raises(ValueError, match="wool_discover"):
        fleet.discover(namespace, **kwargs)
    if "listen" not in kwargs:
        with pytest.raises(ValueError, match="wool_watch_new"):
            fleet.watch(namespace, **kwargs)


def test_discovery_refuses_wrong_types():
    with pytest.raises(ValueError, match="NUL"):
        fleet.discover("a\0b")
    with pytest.raises(TypeError):
        fleet.discover(b"bytes")
    with pytest.raises(TypeError):
        fleet.discover("fine", lan=1)
    with pytest.raises(TypeError):
        fleet.watch(None)


def test_an_unknown_backend_is_refused_by_the_library():
    # The Python API offers only the two backends; the C call itself refuses any other.
    listing = _ffi.WorkerListPtr()
    status = libwool._ffi.default().wool_discover(b"fine", 7, 0.0, ctypes.byref(listing))
    with pytest.raises(ValueError, match="backend must be"):
        libwool._errors._check(_ffi.default(), status)
    assert not listing


# ---------------------------------------------------------------- watches


def test_a_watch_sees_workers_join_and_leave(start_pool):
    # Given a watch on a fresh namespace, When a Wool pool of 2 workers starts under it, Then
    # it reports both as added (the workers discover lists); When the pool is terminated,
    # Then it reports both as dropped with their metadata; after close, next raises.
    namespace = unique_namespace()
    with fleet.watch(namespace) as events:
        assert events.namespace == namespace and not events.lan
        pool = start_pool(namespace, 2)
        listed = {w.uid: w for w in fleet.discover(namespace)}
        assert len(listed) == 2

        added: dict[str, fleet.DiscoveredWorker] = {}
        deadline = time.monotonic() + POOL_TIMEOUT
        while len(added) < 2:
            event = events.next(timeout=max(deadline - time.monotonic(), 0.0))
            assert event is not None, f"not within {POOL_TIMEOUT} s: {added}"
            assert event.type in ("worker-added", "worker-updated"), event
            added[event.worker.uid] = event.worker
        assert added == listed

        pool.terminate()
        dropped: dict[str, fleet.DiscoveredWorker] = {}
        deadline = time.monotonic() + POOL_TIMEOUT
        while len(dropped) < 2:
            event = events.next(timeout=max(deadline - time.monotonic(), 0.0))
            assert event is not None, f"not within {POOL_TIMEOUT} s: {dropped}"
            if event.type == "worker-dropped":
                dropped[event.worker.uid] = event.worker
        assert {uid: (w.address, w.pid) for uid, w in dropped.items()} == {
            uid: (w.address, w.pid) for uid, w in listed.items()
        }
        assert fleet.discover(namespace) == []
    assert events.closed
    events.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        events.next(timeout=0)


def test_a_watch_iterates_until_closed_and_next_times_out():
    # Given a watch on a quiet namespace, Then next with a timeout gives None; iteration in
    # another thread ends once the watch is closed.
    events = fleet.watch(unique_namespace())
    assert events.next(timeout=0) is None
    assert events.next(timeout=0.3) is None
    with pytest.raises(ValueError, match="timeout_seconds"):
        events.next(timeout=-1.0)
    seen: list = []
    ended = threading.Event()

    def iterate():
        seen.extend(events)
        ended.set()

    thread = threading.Thread(target=iterate, daemon=True)
    thread.start()
    time.sleep(0.2)
    events.close()
    assert ended.wait(10.0), "iteration did not end after close"
    assert seen == []


# ---------------------------------------------------------------- connect_worker


def test_connect_worker_refuses_bad_workers(worker):
    for bad, message in [
        (fleet.DiscoveredWorker(uid="", address=worker.address, version="0.15.7", secure=True),
         "credentials"),
        (fleet.DiscoveredWorker(uid="", address=worker.address), "version"),
        (fleet.DiscoveredWorker(uid="", address="127.0.0.1"), "port"),
    ]:
        with pytest.raises(ValueError, match=message):
            fleet.connect_worker(bad)
    with pytest.raises(ValueError, match="NUL"):
        fleet.connect_worker(fleet.DiscoveredWorker(uid="", address="127.0.0.1:1\0"))
    with pytest.raises(TypeError):
        fleet.connect_worker(worker.address)
    with pytest.raises(TypeError):
        fleet.connect_worker(fleet.DiscoveredWorker(uid="", address=worker.address), bogus=1)
    with pytest.raises(ValueError, match="keepalive_timeout"):
        fleet.connect_worker(fleet.DiscoveredWorker(uid="", address=worker.address,
                                                    version="0.15.7"),
                             keepalive_timeout=0.0)


def test_connect_worker_with_channel_options_reaches_a_hand_made_worker(worker):
    hand_made = fleet.DiscoveredWorker(uid="", address=worker.address, version="0.15.7")
    with fleet.connect_worker(hand_made, connect_timeout=5.0) as conn:
        assert dict(conn.channel_options) == {"connect_timeout": 5.0}
        assert conn.idle(timeout=10.0) > 0.0


def test_connect_worker_over_tls(spawn_worker, certs):
    # Given a one-way TLS reference worker, When it is reached as a secure discovered worker
    # with the CA's credentials, Then polls succeed against its advertised identity (a name
    # in its certificate) or, advertising none, the address; an identity its certificate
    # lacks fails with HandshakeError; a bad identity is refused at once.
    tls = spawn_worker("--tls-ca", certs / "ca.pem", "--tls-cert", certs / "worker.pem",
                       "--tls-key", certs / "worker.key", "--one-way")
    plain_credentials = libwool.WorkerCredentials.from_files(certs / "ca.pem", mutual=False)
    # Advertised names are verified only under a peers policy accepting them.
    credentials = plain_credentials.with_peers("localhost", "elsewhere.example", "not a name!")

    def reach(identity, credentials=credentials):
        return fleet.connect_worker(
            fleet.DiscoveredWorker(uid="", address=tls.address, version="0.15.7", secure=True,
                                   identity=identity),
            credentials,
        )

    for identity, creds in (("localhost", credentials), (None, plain_credentials),
                            ("elsewhere.example", plain_credentials)):
        with reach(identity, creds) as conn:
            assert conn.secure
            assert conn.idle(timeout=10.0) > 0.0
    with reach("elsewhere.example") as conn:
        with pytest.raises(libwool.HandshakeError):
            conn.idle(timeout=10.0)
    with pytest.raises(ValueError, match="identity"):
        reach("not a name!")


def test_discover_dns_lists_and_connects_the_workers_a_name_resolves_to(worker):
    # Given a reference worker on 127.0.0.1, When `localhost` is listed at its port, Then its
    # address is there with the DNS name as identity and admitted, and `connect_dns` reaches
    # it (every address `localhost` resolves to is listed: ::1 too, where nothing listens).
    port = int(worker.address.rsplit(":", 1)[1])
    listed = fleet.discover_dns("localhost", port, timeout=5.0)
    ours = [w for w in listed if w.address == worker.address]
    assert len(ours) == 1, listed
    assert ours[0].identity == "localhost" and ours[0].refusal is None
    assert all(w.address.endswith(f":{port}") for w in listed)
    connections = fleet.connect_dns("localhost", port, timeout=5.0, connect_timeout=5.0)
    try:
        assert [c.target for c in connections] == [w.address for w in listed]
        results = dict(zip((c.target for c in connections),
                           fleet.sweep(connections, timeout=10.0)))
        assert isinstance(results[worker.address], float) and results[worker.address] > 0.0
    finally:
        for conn in connections:
            conn.close()


def test_a_dns_name_that_does_not_resolve_is_an_error():
    """Given a DNS name that does not exist ("nosuchhost.invalid.": the special-use .invalid
    zone, answered NXDOMAIN by the resolver itself; the final dot keeps resolv.conf's search
    list out, so no query leaves the machine), when discover_dns and connect_dns list it, then
    each raises TransientRpcError saying the name does not resolve, not an empty fleet."""
    for listing in (fleet.discover_dns, fleet.connect_dns):
        with pytest.raises(libwool.TransientRpcError) as failure:
            listing("nosuchhost.invalid.", 50051, timeout=5.0)
        assert "nosuchhost.invalid. does not resolve" in failure.value.details, failure.value


@pytest.mark.parametrize(("name", "port", "error"), [
    ("localhost:80", 80, ValueError),
    ("localhost", 0, ValueError),
    ("localhost", 70000, ValueError),
    ("", 80, ValueError),
    ("localhost", "80", TypeError),
    (b"localhost", 80, TypeError),
])
def test_discover_dns_refuses_bad_arguments(name, port, error):
    with pytest.raises(error):
        fleet.discover_dns(name, port)
    with pytest.raises(error):
        fleet.connect_dns(name, port)


# ---------------------------------------------------------------- sweep


def test_sweep_polls_a_fleet(spawn_worker, unused_address):
    # Given two reference workers, an address where nothing listens and a closed connection,
    # When they are swept (one worker twice), Then the workers give positive readings, the
    # unreachable one TransientRpcError code 14, the closed one ValueError.
    a, b = spawn_worker(), spawn_worker()
    conns = [libwool.WorkerConnection(t) for t in (a.address, b.address, unused_address)]
    closed = libwool.WorkerConnection(a.address)
    closed.close()
    try:
        results = fleet.sweep([conns[0], conns[1], conns[2], closed, conns[0]], timeout=10.0,
                              max_in_flight=2)
    finally:
        for conn in conns:
            conn.close()
    assert isinstance(results[0], float) and results[0] > 0.0
    assert isinstance(results[1], float) and results[1] > 0.0
    assert isinstance(results[4], float) and results[4] > 0.0
    assert type(results[2]) is libwool.TransientRpcError and results[2].code == 14
    # the worker's own message, from libwool's result for it
    assert results[2].details.startswith("wool_idle: ") and unused_address in results[2].details
    assert isinstance(results[3], ValueError) and "closed" in str(results[3])
    assert fleet.sweep([]) == []


def test_sweep_results_are_a_list_in_slot_order(worker, unused_address):
    # Given 60 slots of one worker, with an unreachable address in every 7th and a closed
    # connection in every 13th, When they are swept, Then the result is a plain list of 60
    # in slot order: a float for each worker slot, TransientRpcError for each unreachable
    # one, ValueError for each closed one; a sweep of only the worker is all floats.
    good = libwool.WorkerConnection(worker.address)
    bad = libwool.WorkerConnection(unused_address)
    closed = libwool.WorkerConnection(worker.address)
    closed.close()
    slots = [closed if i % 13 == 12 else bad if i % 7 == 6 else good for i in range(60)]
    try:
        mixed = fleet.sweep(slots, timeout=10.0, max_in_flight=16)
        healthy = fleet.sweep([good] * 40, timeout=10.0)
    finally:
        good.close()
        bad.close()
    assert type(mixed) is list and len(mixed) == 60
    for i, result in enumerate(mixed):
        if slots[i] is good:
            assert type(result) is float and result >= 0.0, (i, result)
        elif slots[i] is bad:
            assert type(result) is libwool.TransientRpcError and result.code == 14, (i, result)
        else:
            assert type(result) is ValueError and "closed" in str(result), (i, result)
    assert type(healthy) is list and len(healthy) == 40
    assert all(type(r) is float and r >= 0.0 for r in healthy)


def test_sweep_refuses_bad_arguments(worker):
    with libwool.WorkerConnection(worker.address) as conn:
        with pytest.raises(ValueError, match="max_in_flight"):
            fleet.sweep([conn], max_in_flight=0)
        with pytest.raises(ValueError, match="timeout"):
            fleet.sweep([conn], timeout=0.0)
        with pytest.raises(ValueError, match="max_in_flight"):
            fleet.sweep([conn], max_in_flight=-1)
        with pytest.raises(TypeError):
            fleet.sweep([worker.address])


# ---------------------------------------------------------------- retire_idle

THRESHOLD = 0.1


def idle_workers(spawn_worker, n: int):
    """n reference workers and a connection each, once every one is idle past THRESHOLD."""
    workers = [spawn_worker() for _ in range(n)]
    conns = [libwool.WorkerConnection(w.address) for w in workers]
    for conn in conns:
        deadline = time.monotonic() + 10.0
        while conn.idle(timeout=10.0) < THRESHOLD:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    return workers, conns


@pytest.fixture
def closing():
    """Connections to close when the test ends."""
    conns: list = []
    yield conns.extend
    for conn in conns:
        conn.close()


def test_retire_idle_retires_idle_workers_and_keeps_a_busy_one(spawn_worker, closing):
    # Given three reference workers, two idle past the threshold and one running a task,
    # When a round with the default policy runs, Then the idle two are retired and stopped
    # (their processes exit 0) and the busy one is kept with reason busy, idle exactly 0.
    workers, conns = idle_workers(spawn_worker, 3)
    closing(conns)
    policy = fleet.RetirePolicy(idle_threshold=THRESHOLD)
    assert (policy.grace, policy.stop_timeout, policy.keep_min, policy.max_stops,
            policy.dry_run) == (30.0, 60.0, 0, None, False)
    with task_in_flight(workers[2].address, 30.0):
        decisions = fleet.retire_idle(conns, policy, poll_timeout=10.0)
        for decision, worker in zip(decisions[:2], workers):
            assert decision.reason == "idle" and decision.retire, decision
            assert decision.stopped and decision.stop_error is None, decision
            assert decision.idle_error is None and decision.idle >= THRESHOLD, decision
            assert worker.wait(10) == 0
        busy = decisions[2]
        assert busy.reason == "busy" and not busy.retire and not busy.stopped, busy
        assert busy.idle == 0.0 and busy.idle_error is None and busy.stop_error is None
        assert conns[2].idle(timeout=10.0) == 0.0


def test_retire_idle_dry_run_stops_nothing(spawn_worker, closing):
    _, conns = idle_workers(spawn_worker, 2)
    closing(conns)
    policy = fleet.RetirePolicy(idle_threshold=THRESHOLD, dry_run=True)
    for decision in fleet.retire_idle(conns, policy):
        assert decision.reason == "idle" and decision.retire, decision
        assert not decision.stopped and decision.stop_error is None, decision
    for conn in conns:
        assert conn.idle(timeout=10.0) >= THRESHOLD


def test_retire_idle_honours_keep_min(spawn_worker, closing):
    # Given three idle workers, When a round with keep_min 2 runs, Then exactly one is
    # retired, the most idle, and the other two are kept with reason minimum.
    workers, conns = idle_workers(spawn_worker, 3)
    closing(conns)
    decisions = fleet.retire_idle(conns, fleet.RetirePolicy(idle_threshold=THRESHOLD,
                                                            keep_min=2))
    retired = [i for i, d in enumerate(decisions) if d.reason == "idle"]
    assert len(retired) == 1, decisions
    (index,) = retired
    assert decisions[index].stopped and decisions[index].stop_error is None
    assert decisions[index].idle == max(d.idle for d in decisions)
    assert all(d.reason == "minimum" and not d.stopped
               for i, d in enumerate(decisions) if i != index), decisions
    assert workers[index].wait(10) == 0
    for i, conn in enumerate(conns):
        if i != index:
            assert conn.idle(timeout=10.0) > 0.0


def test_retire_idle_honours_max_stops(spawn_worker, closing):
    workers, conns = idle_workers(spawn_worker, 3)
    closing(conns)
    decisions = fleet.retire_idle(conns, fleet.RetirePolicy(idle_threshold=THRESHOLD,
                                                            max_stops=1))
    assert sorted(d.reason for d in decisions) == ["idle", "round-limit", "round-limit"]
    for worker, decision in zip(workers, decisions):
        if decision.reason == "idle":
            assert worker.wait(10) == 0


def test_retire_idle_keeps_what_it_cannot_poll(worker, unused_address):
    # Given an address where nothing listens and a closed connection, Then both are kept:
    # unreachable (TransientRpcError) and poll-failed (ValueError); an empty round is empty.
    unreachable = libwool.WorkerConnection(unused_address)
    closed = libwool.WorkerConnection(worker.address)
    closed.close()
    try:
        first, second = fleet.retire_idle([unreachable, closed], fleet.RetirePolicy(0.0))
    finally:
        unreachable.close()
    assert first.reason == "unreachable" and not first.stopped and first.idle is None
    assert type(first.idle_error) is libwool.TransientRpcError
    assert second.reason == "poll-failed" and isinstance(second.idle_error, ValueError)
    assert fleet.retire_idle([], fleet.RetirePolicy(0.0)) == []
    with libwool.WorkerConnection(worker.address) as conn:
        assert conn.idle(timeout=10.0) > 0.0


@pytest.mark.parametrize(
    "policy, message",
    [
        (fleet.RetirePolicy(0.0, stop_timeout=30.0), "must exceed the grace"),
        (fleet.RetirePolicy(0.0, stop_timeout=0.0), "timeout"),
        (fleet.RetirePolicy(0.0, grace=math.inf), "unbounded grace"),
        (fleet.RetirePolicy(-1.0), "idle_threshold"),
        (fleet.RetirePolicy(math.nan), "idle_threshold"),
        (fleet.RetirePolicy(0.0, grace=math.nan), "grace"),
        (fleet.RetirePolicy(0.0, keep_min=-1), "keep_min"),
        (fleet.RetirePolicy(0.0, max_stops=-1), "max_stops"),
    ],
)
def test_retire_idle_refuses_bad_policies(worker, policy, message):
    # Given a bad policy, Then retire_idle raises ValueError naming it and stops nothing.
    with libwool.WorkerConnection(worker.address) as conn:
        with pytest.raises(ValueError, match=message):
            fleet.retire_idle([conn], policy)
        assert conn.idle(timeout=10.0) > 0.0


def test_retire_idle_refuses_bad_arguments(worker):
    with libwool.WorkerConnection(worker.address) as conn:
        with pytest.raises(ValueError, match="timeout"):
            fleet.retire_idle([conn], fleet.RetirePolicy(0.0), poll_timeout=0.0)
        with pytest.raises(ValueError, match="max_in_flight"):
            fleet.retire_idle([conn], fleet.RetirePolicy(0.0), max_in_flight=0)
        with pytest.raises(TypeError):
            fleet.retire_idle([conn], {"idle_threshold": 0.0})
        with pytest.raises(TypeError):
            fleet.retire_idle([conn], fleet.RetirePolicy(0.0, dry_run=1))
        assert conn.idle(timeout=10.0) > 0.0
    forever = fleet.RetirePolicy(0.0, grace=math.inf, stop_timeout=None)
    assert fleet.retire_idle([], forever) == []


def test_retire_reason_names_are_the_librarys():
    names = [_ffi.default().wool_retire_reason_name(i).decode() for i in range(-1, 9)]
    assert names == ["unknown", "idle", "busy", "below-threshold", "minimum", "round-limit",
                     "idle-unavailable", "unreachable", "poll-failed", "unknown"]


# ---------------------------------------------------------------- fidelity to wool.h


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_struct_layouts_match_the_header(tmp_path):
    # The ctypes structures have the header's sizes and field offsets (compiled from wool.h).
    structs = [_ffi.wool_worker_info, _ffi.wool_retire_policy, _ffi.wool_retire_decision]
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "wool.h"', "int main(void) {"]
    for struct in structs:
        name = struct.__name__
        lines.append(f'printf("{name} %zu\\n", sizeof({name}));')
        for field_name, _ in struct._fields_:
            lines.append(f'printf("{name}.{field_name} %zu\\n", offsetof({name}, {field_name}));')
    lines.append("return 0; }")
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines))
    binary = tmp_path / "layout"
    subprocess.run(["cc", "-I", str(ROOT / "include"), str(source), "-o", str(binary)],
                   check=True, capture_output=True, timeout=60)
    from_c = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
    from_ctypes = []
    for struct in structs:
        from_ctypes.append(f"{struct.__name__} {ctypes.sizeof(struct)}")
        for field_name, _ in struct._fields_:
            from_ctypes.append(f"{struct.__name__}.{field_name} "
                               f"{getattr(struct, field_name).offset}")
    assert from_c.split("\n")[:-1] == from_ctypes


def test_constants_match_the_header():
    header = (ROOT / "include" / "wool.h").read_text()
    for name in ("DISCOVERY_LOCAL", "DISCOVERY_LAN", "DISCOVERY_EVENT_NONE",
                 "DISCOVERY_EVENT_ADDED", "DISCOVERY_EVENT_UPDATED", "DISCOVERY_EVENT_DROPPED"):
        assert f"#define WOOL_{name} {getattr(_ffi, name)}\n" in header


def test_the_admission_gate_refuses_through_the_binding(start_pool, certs):
    # Given a plaintext Wool pool, When it is listed with credentials, Then each worker is
    # refused on security and connect_worker refuses it (before the gate the credentials were
    # dropped and it was reached in plaintext); a worker advertising "w2" under a peers policy
    # accepting only "w1" is refused with a reason naming the accepted peers.
    namespace = unique_namespace()
    start_pool(namespace, 2)
    credentials = libwool.WorkerCredentials.from_files(certs / "ca.pem", mutual=False)
    listed = fleet.discover(namespace, credentials=credentials)
    assert len(listed) == 2
    assert all(w.refusal == "security" and "security" in w.refusal_reason for w in listed)
    assert all(w.refusal is None for w in fleet.discover(namespace))
    with fleet.watch(namespace, credentials=credentials) as events:
        first = events.next(timeout=10.0)
        assert first is not None and first.worker.refusal == "security", first
    with pytest.raises(ValueError, match="security"):
        fleet.connect_worker(listed[0], credentials)
    gated = credentials.with_peers("w1")
    assert gated.peers == ("w1",)
    w2 = fleet.DiscoveredWorker(uid="", address="127.0.0.1:1", version="0.15.7", secure=True,
                                identity="w2")
    with pytest.raises(ValueError, match="accepted peers: w1"):
        fleet.connect_worker(w2, gated)
    with pytest.raises(ValueError):
        credentials.with_peers(" ")
