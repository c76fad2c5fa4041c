"""The discovery objects themselves: the roster's events and bound, pickling, the publisher's
refusal (and a real Wool pool that would misuse it), label selectors."""

from __future__ import annotations

import asyncio
import logging
import pickle
import uuid

import pytest
import wool
from wool.runtime.discovery.base import DiscoveryLike
from wool.utilities.afilter import afilter

from libwool_kubernetes import DnsDiscovery, KubernetesDiscovery, PublishNotSupported
from libwool_kubernetes.kubernetes import KubernetesSubscriber, parse_selector
from libwool_kubernetes.roster import Roster

pytestmark = pytest.mark.usefixtures("installed_package")


def worker(n: int, version: str = "0.15.7") -> wool.WorkerMetadata:
    return wool.WorkerMetadata(uid=uuid.UUID(int=n), address=f"10.0.0.{n}:50051", pid=1, version=version)


def kinds(events) -> list[tuple[str, int]]:
    return [(e.type, e.metadata.uid.int) for e in events]


def test_roster_turns_observations_into_events():
    roster = Roster(10, "test")
    assert kinds(roster.observe(uuid.UUID(int=1), worker(1))) == [("worker-added", 1)]
    assert roster.observe(uuid.UUID(int=1), worker(1)) == []
    assert kinds(roster.observe(uuid.UUID(int=1), worker(1, "0.15.8"))) == [("worker-updated", 1)]
    assert kinds(roster.observe(uuid.UUID(int=1), None)) == [("worker-dropped", 1)]
    assert roster.observe(uuid.UUID(int=2), None) == []
    assert roster.forget(uuid.UUID(int=3)) == []


def test_roster_holds_at_most_its_bound_and_warns_once(caplog):
    """Given a roster of 2, a third worker is left out with one warning, and taken in when
    room frees up at the next listing."""
    roster = Roster(2, "test")
    with caplog.at_level(logging.WARNING, logger="libwool_kubernetes.roster"):
        for n in (1, 2, 3, 4):
            roster.observe(uuid.UUID(int=n), worker(n))
    assert len(roster) == 2
    assert len([r for r in caplog.records if "the most allowed" in r.getMessage()]) == 1
    events = roster.replace([(uuid.UUID(int=n), worker(n)) for n in (2, 3, 4)])
    assert kinds(events) == [("worker-dropped", 1), ("worker-added", 3)]
    assert sorted(u.int for u in roster.workers) == [2, 3]


def test_a_listing_past_the_bound_keeps_the_known_workers():
    roster = Roster(3, "test")
    roster.replace([(uuid.UUID(int=n), worker(n)) for n in (1, 2, 3)])
    events = roster.replace([(uuid.UUID(int=n), worker(n)) for n in range(10, 2000)] + [(uuid.UUID(int=1), worker(1))])
    assert kinds(events) == [("worker-dropped", 2), ("worker-dropped", 3), ("worker-added", 10), ("worker-added", 11)]
    assert sorted(u.int for u in roster.workers) == [1, 10, 11]


def test_subscribers_are_picklable_and_discoveries_are_discovery_like():
    """Given both discoveries, they satisfy Wool's DiscoveryLike and their subscribers (which
    ride Wool's proxy to nested dispatches) survive pickling unchanged."""
    kubernetes = KubernetesDiscovery("app=wool", namespace="batch", version="0.15.7")
    dns = DnsDiscovery("wool-workers.batch.svc.cluster.local", version="0.15.7")
    for discovery in (kubernetes, dns):
        assert isinstance(discovery, DiscoveryLike)
        subscriber = discovery.subscriber
        assert pickle.loads(pickle.dumps(subscriber)) == subscriber
        assert isinstance(discovery.subscribe(lambda w: "gpu" in w.tags), afilter)
        assert discovery.publisher.bind_host == "0.0.0.0"
    assert isinstance(kubernetes.subscriber, KubernetesSubscriber)


def test_publisher_refuses_workers_and_ignores_drops():
    publisher = KubernetesDiscovery({"app": "wool"}).publisher

    async def scenario():
        await publisher.publish("worker-dropped", worker(1))
        for kind in ("worker-added", "worker-updated"):
            with pytest.raises(PublishNotSupported):
                await publisher.publish(kind, worker(1))

    asyncio.run(scenario())


def test_a_pool_that_spawns_fails_at_start():
    """Given a real Wool pool that would spawn a worker of its own next to the pods, its start
    fails at once with PublishNotSupported (instead of waiting on a quorum that never comes)."""

    async def scenario():
        async with wool.WorkerPool(spawn=1, discovery=KubernetesDiscovery("app=wool", version="0.15.7")):
            pass

    with pytest.raises(ExceptionGroup) as failed:
        asyncio.run(scenario())
    assert failed.group_contains(PublishNotSupported)


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        ("app=wool", (("app", "wool"),)),
        (" tier = worker , app==wool ", (("app", "wool"), ("tier", "worker"))),
        ("app.kubernetes.io/name=wool-worker", (("app.kubernetes.io/name", "wool-worker"),)),
    ],
)
def test_label_selectors_parse(text, pairs):
    assert parse_selector(text) == pairs


@pytest.mark.parametrize("text", ["", " , ", "app", "app!=wool", "=wool", "app in (a,b)"])
def test_label_selectors_that_are_not_equality_are_refused(text):
    with pytest.raises(ValueError):
        parse_selector(text)
