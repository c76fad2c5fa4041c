"""`DnsDiscovery`: Wool workers as the A records of a name (a headless Service), polled."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import uuid
from dataclasses import dataclass
from typing import AsyncIterator, Final

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.resolver
from wool.runtime.discovery.base import (
    Discovery,
    DiscoveryEvent,
    DiscoverySubscriberLike,
    PredicateFunction,
)
from wool.runtime.worker.metadata import WorkerMetadata
from wool.utilities.afilter import afilter

from .kubernetes import KubernetesPublisher
from .pods import POD_WORKER_PID, Declared
from .roster import DEFAULT_MAX_WORKERS, Roster

logger = logging.getLogger(__name__)

#: The namespace of the workers' uids: ``uuid5(DNS_UID_NAMESPACE, "ip:port")``.
DNS_UID_NAMESPACE: Final = uuid.UUID("6f1d3c2e-5b0a-4e55-9a59-1b3f0c7d2a10")


def uid_of(address: str) -> uuid.UUID:
    """The stable uid of the worker at ``address`` (``ip:port``): the same address, the same uid."""
    return uuid.uuid5(DNS_UID_NAMESPACE, address)


class DnsDiscovery(Discovery):
    """Wool workers as the IPv4 addresses a DNS name resolves to, polled every ``interval``.

    Meant for the headless Service of the worker pods (``clusterIP: None``), whose A records are
    the Ready pods' IPs; for clients with no rights on the Kubernetes API. Each address is a
    worker at ``ip:port`` with uid ``uuid5(DNS_UID_NAMESPACE, "ip:port")``, and every worker
    gets the same ``version``, ``secure``, ``identity`` and ``tags`` (DNS carries none).

    Limits, from what DNS can say: a pod restarted with the same IP keeps its uid (its client
    sees no drop and add, only failed dispatches until the worker is back); a worker leaves
    only when its record does, i.e. after readiness turns false, Kubernetes updates the
    Service, the DNS cache expires (CoreDNS: 5 s by default) and the next poll. A name that does
    not exist (NXDOMAIN), or has no A record, is an empty fleet; any other failure keeps the
    last answer and logs a warning.

    :param name: the DNS name, e.g. ``wool-workers.batch.svc.cluster.local`` (search domains
        of the resolver configuration apply).
    :param port: the workers' gRPC port (1-65535).
    :param version: the workers' Wool version (required: Wool's gate compares it).
    :param secure: whether the workers serve TLS.
    :param identity: their workload identity, or ``None``.
    :param tags: their capability tags.
    :param interval: seconds between polls (at least 0.1).
    :param timeout: seconds one resolution may take (at least 0.1).
    :param max_workers: the most workers held; addresses past it (in sorted order) are left
        out with a logged warning.
    :param nameservers: ``(ip, port)`` of the DNS servers to ask; ``None`` reads the system's
        resolver configuration (``/etc/resolv.conf``).
    :param filter: the default predicate of `subscriber`.
    :raises ValueError: if an argument is out of range.
    """

    def __init__(
        self,
        name: str,
        *,
        port: int = 50051,
        version: str,
        secure: bool = False,
        identity: str | None = None,
        tags: frozenset[str] = frozenset(),
        interval: float = 5.0,
        timeout: float = 5.0,
        max_workers: int = DEFAULT_MAX_WORKERS,
        nameservers: tuple[tuple[str, int], ...] | None = None,
        filter: PredicateFunction | None = None,
    ) -> None:
        if interval < 0.1 or timeout < 0.1:
            raise ValueError("interval and timeout must be at least 0.1 s")
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        if not name:
            raise ValueError("the DNS name is empty")
        self._subscriber = DnsSubscriber(
            name=name,
            declared=Declared(port=port, version=version, secure=secure, identity=identity),
            tags=frozenset(tags),
            interval=interval,
            timeout=timeout,
            max_workers=max_workers,
            nameservers=tuple(nameservers) if nameservers is not None else None,
        )
        self._filter = filter

    @property
    def publisher(self) -> KubernetesPublisher:
        """A `KubernetesPublisher`: Kubernetes publishes the pods' records, not Wool."""
        return KubernetesPublisher()

    @property
    def subscriber(self) -> DiscoverySubscriberLike:
        """The subscriber with the constructor's filter; see `subscribe`."""
        return self.subscribe()

    def subscribe(self, filter: PredicateFunction | None = None) -> DiscoverySubscriberLike:
        """A subscriber to the name's workers, picklable, each iteration independent.

        :param filter: a predicate on `WorkerMetadata`; ``None`` takes the constructor's.
        """
        effective = filter if filter is not None else self._filter
        return afilter(effective, self._subscriber) if effective is not None else self._subscriber


@dataclass(frozen=True)
class DnsSubscriber:
    """Streams a name's workers as Wool discovery events; see `DnsDiscovery`.

    Each iteration resolves the name at once (``worker-added`` for each address), then every
    ``interval`` seconds, and emits the differences. Picklable: it holds only plain values.
    """

    name: str
    declared: Declared
    tags: frozenset[str]
    interval: float
    timeout: float
    max_workers: int
    nameservers: tuple[tuple[str, int], ...] | None

    def __aiter__(self) -> AsyncIterator[DiscoveryEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[DiscoveryEvent]:
        roster = Roster(self.max_workers, f"DNS name {self.name}")
        resolver = self._resolver()
        while True:
            addresses = await self._resolve(resolver)
            if addresses is not None:
                for event in roster.replace((uid_of(a), self._worker(a)) for a in addresses):
                    yield event
            await asyncio.sleep(self.interval)

    def _resolver(self) -> dns.asyncresolver.Resolver:
        if self.nameservers is None:
            return dns.asyncresolver.Resolver()
        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = [dns.nameserver.Do53Nameserver(ip, port) for ip, port in self.nameservers]
        return resolver

    async def _resolve(self, resolver: dns.asyncresolver.Resolver) -> list[str] | None:
        """The workers' addresses (``ip:port``, sorted), ``[]`` for NXDOMAIN or no A record,
        ``None`` when the resolution failed otherwise (logged)."""
        try:
            answer = await resolver.resolve(self.name, "A", search=True, lifetime=self.timeout)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return []
        except dns.exception.DNSException as error:
            logger.warning("DNS name %s: %s: %s; keeping the last answer", self.name, type(error).__name__, error)
            return None
        ips = sorted({str(ipaddress.IPv4Address(r.address)) for r in answer}, key=ipaddress.IPv4Address)
        return [f"{ip}:{self.declared.port}" for ip in ips]

    def _worker(self, address: str) -> WorkerMetadata:
        return WorkerMetadata(
            uid=uid_of(address),
            address=address,
            pid=POD_WORKER_PID,
            version=self.declared.version or "",
            tags=self.tags,
            secure=self.declared.secure,
            identity=self.declared.identity,
        )
