"""`DnsDiscovery` against real DNS answers: a DNS server on loopback, written here with
dnspython's wire format, playing a headless Service's records (nothing leaves the machine)."""

from __future__ import annotations

import asyncio
import logging
import pickle

import dns.message
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import pytest
from wool.runtime.worker.proxy import WorkerProxy

from libwool_kubernetes import DnsDiscovery
from libwool_kubernetes.dns import uid_of

pytestmark = pytest.mark.usefixtures("installed_package")

NAME = "wool-workers.batch.svc.cluster.local."
LIMIT = 30.0


class StandInDns(asyncio.DatagramProtocol):
    """Answers A queries for the names in ``records`` (NXDOMAIN for others); while ``silent``,
    answers nothing. Counts the queries it gets."""

    def __init__(self) -> None:
        self.records: dict[str, list[str]] = {}
        self.silent = False
        self.queries = 0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, peer) -> None:
        self.queries += 1
        if self.silent:
            return
        query = dns.message.from_wire(data)
        answer = dns.message.make_response(query)
        question = query.question[0]
        name = question.name.to_text()
        if name not in self.records:
            answer.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype == dns.rdatatype.A:
            rrset = answer.find_rrset(answer.answer, question.name, dns.rdataclass.IN, dns.rdatatype.A, create=True)
            for ip in self.records[name]:
                rrset.add(dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.A, ip), ttl=5)
        self.transport.sendto(answer.to_wire(), peer)


async def stand_in() -> tuple[StandInDns, int]:
    transport, server = await asyncio.get_running_loop().create_datagram_endpoint(
        StandInDns, local_addr=("127.0.0.1", 0)
    )
    return server, transport.get_extra_info("sockname")[1]


def discovery(server_port: int, **options) -> DnsDiscovery:
    """A DnsDiscovery asking the stand-in on ``server_port``, polling every 0.1 s."""
    options = {"version": "0.15.7", "interval": 0.1, "timeout": 0.5, "nameservers": (("127.0.0.1", server_port),)} | options
    return DnsDiscovery(NAME, **options)


async def next_events(stream, count: int) -> list[tuple[str, str]]:
    return [(e.type, e.metadata.address) for e in [await asyncio.wait_for(anext(stream), LIMIT) for _ in range(count)]]


def test_records_become_workers_and_changes_become_events():
    """Given a name with two A records, the stream starts with both as worker-added (stable
    uids from their addresses, the constructor's version), then follows a change of records
    with a drop and an add, and NXDOMAIN empties the fleet."""

    async def scenario():
        server, port = await stand_in()
        server.records[NAME] = ["10.244.0.7", "10.244.0.12"]
        stream = aiter(pickle.loads(pickle.dumps(discovery(port).subscriber)))
        first = [await asyncio.wait_for(anext(stream), LIMIT) for _ in range(2)]
        assert [(e.type, e.metadata.address) for e in first] == [
            ("worker-added", "10.244.0.7:50051"),
            ("worker-added", "10.244.0.12:50051"),
        ]
        assert first[0].metadata.uid == uid_of("10.244.0.7:50051")
        assert first[0].metadata.version == "0.15.7" and first[0].metadata.pid == 1
        WorkerProxy(workers=[e.metadata for e in first], quorum=2)  # Wool's gate admits both

        server.records[NAME] = ["10.244.0.12", "10.244.0.30"]
        assert await next_events(stream, 2) == [("worker-dropped", "10.244.0.7:50051"), ("worker-added", "10.244.0.30:50051")]

        del server.records[NAME]
        assert sorted(await next_events(stream, 2)) == [
            ("worker-dropped", "10.244.0.12:50051"),
            ("worker-dropped", "10.244.0.30:50051"),
        ]
        await stream.aclose()

    asyncio.run(scenario())


def test_a_name_that_does_not_exist_yet_is_an_empty_fleet():
    """Given NXDOMAIN at first, the stream is quiet; when the records appear, workers are added."""

    async def scenario():
        server, port = await stand_in()
        stream = aiter(discovery(port).subscriber)
        pending = asyncio.ensure_future(anext(stream))
        await wait_for_queries(server, 2)
        assert not pending.done()
        server.records[NAME] = ["10.244.1.2"]
        event = await asyncio.wait_for(pending, LIMIT)
        assert (event.type, event.metadata.address) == ("worker-added", "10.244.1.2:50051")
        await stream.aclose()

    asyncio.run(scenario())


def test_a_silent_server_keeps_the_last_answer(caplog):
    """Given a fleet known, when the DNS server stops answering, no worker is dropped (a
    warning is logged per failed poll); when it answers again, only the real change shows."""

    async def scenario():
        server, port = await stand_in()
        server.records[NAME] = ["10.244.0.7", "10.244.0.8"]
        stream = aiter(discovery(port, timeout=0.2).subscriber)
        await next_events(stream, 2)
        server.silent = True
        pending = asyncio.ensure_future(anext(stream))
        await wait_for_queries(server, server.queries + 3)
        assert not pending.done()
        server.records[NAME] = ["10.244.0.8"]
        server.silent = False
        event = await asyncio.wait_for(pending, LIMIT)
        assert (event.type, event.metadata.address) == ("worker-dropped", "10.244.0.7:50051")
        await stream.aclose()

    with caplog.at_level(logging.WARNING, logger="libwool_kubernetes.dns"):
        asyncio.run(scenario())
    assert any("keeping the last answer" in r.getMessage() for r in caplog.records)


def test_records_past_the_bound_are_left_out(caplog):
    """Given 6 records and max_workers=4, the first 4 addresses (in order) are workers and a
    warning says the rest are left out."""

    async def scenario():
        server, port = await stand_in()
        server.records[NAME] = [f"10.244.0.{n}" for n in range(1, 7)]
        stream = aiter(discovery(port, max_workers=4).subscriber)
        added = await next_events(stream, 4)
        await stream.aclose()
        return added

    with caplog.at_level(logging.WARNING, logger="libwool_kubernetes.roster"):
        added = asyncio.run(scenario())
    assert added == [("worker-added", f"10.244.0.{n}:50051") for n in range(1, 5)]
    assert any("the most allowed" in r.getMessage() for r in caplog.records)


async def wait_for_queries(server: StandInDns, count: int) -> None:
    deadline = asyncio.get_running_loop().time() + LIMIT
    while server.queries < count:
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"precondition not met within {LIMIT:g} s: {count} DNS queries")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("options", [{"interval": 0.0}, {"timeout": 0.01}, {"max_workers": 0}, {"port": 70000}])
def test_arguments_out_of_range_are_refused(options):
    with pytest.raises(ValueError):
        discovery(53, **options)
