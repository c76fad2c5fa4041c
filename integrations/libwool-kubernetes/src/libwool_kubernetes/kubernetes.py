"""`KubernetesDiscovery`: a Wool discovery over the Kubernetes API (pods by label selector)."""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from dataclasses import dataclass
from typing import AsyncIterator, Final, Mapping

import httpx2 as httpx
from lightkube import AsyncClient, KubeConfig
from lightkube.config.client_adapter import verify_cluster
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod as PodModel
from lightkube.resources.core_v1 import Pod
from wool.runtime.discovery.base import (
    Discovery,
    DiscoveryEvent,
    DiscoveryEventType,
    DiscoveryPublisherLike,
    DiscoverySubscriberLike,
    PredicateFunction,
)
from wool.runtime.worker.metadata import WorkerMetadata
from wool.utilities.afilter import afilter

from .bounded import MAX_ANSWER_BYTES, BoundedTransport
from .pods import Declared, PodSkipped, worker_from_pod
from .roster import DEFAULT_MAX_WORKERS, Roster

logger = logging.getLogger(__name__)

#: Pods asked for per list request (the list is paged, so memory is bounded per page).
LIST_PAGE_PODS: Final = 100
#: Seconds the API server keeps one watch request open before ending it (the client then
#: resumes from the last event it saw).
WATCH_SECONDS: Final = 300
#: Seconds without any event after which the watch is judged dead and the pods listed anew
#: (a silent fleet costs one list request this often; a dead connection is found this soon).
SILENT_WATCH_SECONDS: Final = WATCH_SECONDS + 30
#: The first and the longest pause, in seconds, before listing again after an error.
BACKOFF_FIRST: Final = 1.0
BACKOFF_MAX: Final = 30.0


class PublishNotSupported(RuntimeError):
    """Raised by `KubernetesDiscovery`'s publisher for ``worker-added`` and ``worker-updated``."""


class KubernetesDiscovery(Discovery):
    """Wool workers as the pods a label selector picks in one namespace.

    A pod counts as a worker while it is Ready, has a pod IP and is not terminating; it
    becomes a `WorkerMetadata` by the rules of `libwool_kubernetes.pods.worker_from_pod` (uid =
    the pod's UID, address = ``podIP:port``, version / secure / identity / tags / port from the
    pod's ``wool.libwool.dev/*`` annotations, else from the arguments below).

    The API server is found as `lightkube` finds it: the in-cluster service account, else
    ``$KUBECONFIG``, else ``~/.kube/config``. Its RBAC needs are ``get``, ``list`` and
    ``watch`` on ``pods`` in ``namespace``, nothing else. Worker pods that dispatch nested
    routines carry this discovery with them (it rides Wool's proxy), so their service account
    needs the same rights.

    Use it for a pool that only discovers: ``WorkerPool(discovery=KubernetesDiscovery(...))``.
    Pods are published by Kubernetes, so a pool that also spawns workers of its own
    (``spawn=``) fails at start (see `KubernetesPublisher`).

    :param selector: the pods' labels, as a mapping or as ``"key=value,key=value"``
        (equality only).
    :param namespace: the pods' namespace; ``None`` for the client's own (the service
        account's namespace in a pod, the kubeconfig context's outside).
    :param port: the workers' gRPC port when a pod does not annotate one (1-65535).
    :param version: the workers' Wool version when a pod does not annotate one; ``None``
        skips such pods.
    :param secure: whether the workers serve TLS, when a pod does not annotate it.
    :param identity: the workers' workload identity, when a pod does not annotate one.
    :param max_workers: the most workers held at once; pods past it are left out with a
        logged warning (at least 1).
    :param filter: the default predicate of `subscriber` (see `subscribe`).
    :raises ValueError: if ``selector`` is empty or malformed, ``port`` or ``max_workers`` out
        of range.
    """

    def __init__(
        self,
        selector: Mapping[str, str] | str,
        *,
        namespace: str | None = None,
        port: int = 50051,
        version: str | None = None,
        secure: bool = False,
        identity: str | None = None,
        max_workers: int = DEFAULT_MAX_WORKERS,
        filter: PredicateFunction | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self._subscriber = KubernetesSubscriber(
            selector=parse_selector(selector),
            namespace=namespace,
            declared=Declared(port=port, version=version, secure=secure, identity=identity),
            max_workers=max_workers,
        )
        self._filter = filter

    @property
    def publisher(self) -> DiscoveryPublisherLike:
        """A `KubernetesPublisher` (Kubernetes publishes the pods, not Wool)."""
        return KubernetesPublisher()

    @property
    def subscriber(self) -> DiscoverySubscriberLike:
        """The subscriber with the constructor's filter; see `subscribe`."""
        return self.subscribe()

    def subscribe(self, filter: PredicateFunction | None = None) -> DiscoverySubscriberLike:
        """A subscriber to the worker pods, picklable, each iteration independent.

        :param filter: a predicate on `WorkerMetadata`; a worker it refuses never appears in
            the stream. ``None`` takes the constructor's.
        """
        effective = filter if filter is not None else self._filter
        return afilter(effective, self._subscriber) if effective is not None else self._subscriber


class KubernetesPublisher:
    """The publisher of `KubernetesDiscovery`: workers are published by Kubernetes (a pod
    appears when it is Ready), so Wool cannot publish one here.

    ``bind_host`` is ``0.0.0.0``: a worker reached at its pod IP listens on all interfaces.
    """

    bind_host: str = "0.0.0.0"

    async def publish(self, type: DiscoveryEventType, metadata: WorkerMetadata) -> None:
        """Refuse to publish a worker; ignore its drop.

        A ``worker-dropped`` is a no-op (Wool's pool sends one for each worker it stops, and a
        drop of a worker never published is a no-op by Wool's contract).

        :raises PublishNotSupported: for ``worker-added`` and ``worker-updated``: Wool's pool
            publishes the workers it spawns, and they would never be discovered here (only
            pods are), so its start fails at once instead of waiting on a quorum that never
            comes.
        """
        if type == "worker-dropped":
            return
        raise PublishNotSupported(
            f"KubernetesDiscovery cannot publish worker {metadata.uid} ({type}): its workers "
            "are pods, published by Kubernetes. Use WorkerPool(discovery=...) without spawn."
        )


@dataclass(frozen=True)
class KubernetesSubscriber:
    """Streams the worker pods as Wool discovery events; see `KubernetesDiscovery`.

    Each iteration lists the pods (``worker-added`` for each worker), then watches them, with
    its own API client, closed when the iteration ends or is cancelled. A watch whose
    ``resourceVersion`` expired (410) lists again at once (a second 410 before any event
    waits as an error does); any other error lists again after a pause (1 s doubling to 30 s,
    with jitter, back to 1 s once the watch delivers), and the listing's differences from what
    was known come out as events. Picklable: it holds only plain values.
    """

    selector: tuple[tuple[str, str], ...]
    namespace: str | None
    declared: Declared
    max_workers: int

    def __aiter__(self) -> AsyncIterator[DiscoveryEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[DiscoveryEvent]:
        source = f"pods {format_selector(self.selector)} in namespace {self.namespace or '(not known yet)'}"
        roster = Roster(self.max_workers, source)
        skips = _Skips(self.max_workers)
        backoff = _Backoff()
        client: AsyncClient | None = None
        try:
            while True:
                try:
                    if client is None:
                        client = _client()
                        namespace = self.namespace or client.namespace
                        roster.source = source = f"pods {format_selector(self.selector)} in namespace {namespace}"
                    version, events = await self._list(client, namespace, roster, skips)
                    logger.info("%s: listed, %d workers", source, len(roster))
                    for event in events:
                        yield event
                    async for event in self._watch(client, namespace, version, roster, skips, backoff):
                        yield event
                except Exception as error:  # never ends the stream: listed again
                    if _cancelling():
                        # An error raised while the iteration is being cancelled (a watch
                        # closed mid-read) is the cancellation's: the stream ends.
                        raise
                    if isinstance(error, ApiError) and error.status.code == 410 and backoff.fresh:
                        logger.info("%s: 410 Gone (resourceVersion expired), listing again", source)
                        backoff.delay()  # a second 410 before any event waits
                    elif isinstance(error, TimeoutError):
                        logger.info("%s: no event for %d s, listing again", source, SILENT_WATCH_SECONDS)
                    else:
                        delay = backoff.delay()
                        logger.warning(
                            "%s: %s: %s; listing again in %.1f s", source, type(error).__name__, error, delay
                        )
                        await asyncio.sleep(delay)
        finally:
            if client is not None:
                await client.close()

    async def _list(
        self, client: AsyncClient, namespace: str, roster: Roster, skips: _Skips
    ) -> tuple[str, list[DiscoveryEvent]]:
        """List the pods page by page: (the list's resourceVersion, the roster's events)."""
        listing = client.list(Pod, namespace=namespace, labels=dict(self.selector), chunk_size=LIST_PAGE_PODS)
        full = roster.listing()
        async for pod in listing:
            if (uid := _uid(pod)) is not None and (worker := self._worker(pod, skips)) is not None:
                full.add(uid, worker)
        return listing.resourceVersion, full.finish()

    async def _watch(
        self, client: AsyncClient, namespace: str, version: str, roster: Roster, skips: _Skips, backoff: _Backoff
    ) -> AsyncIterator[DiscoveryEvent]:
        """The roster's events for each watch event from ``version`` on (each resets ``backoff``).

        :raises TimeoutError: after `SILENT_WATCH_SECONDS` without an event.
        :raises ApiError: 410 when ``version`` expired; other API errors.
        """
        stream = client.watch(
            Pod,
            namespace=namespace,
            labels=dict(self.selector),
            resource_version=version,
            server_timeout=WATCH_SECONDS,
        ).__aiter__()
        try:
            while True:
                # In this task (asyncio.timeout, not wait_for's task of its own): a cancellation
                # then never finds the watch's generator running in another task when it closes it.
                async with asyncio.timeout(SILENT_WATCH_SECONDS):
                    kind, pod = await anext(stream)
                backoff.reset()
                if (uid := _uid(pod)) is None:
                    continue
                if kind == "DELETED":
                    events = roster.forget(uid)
                elif kind in ("ADDED", "MODIFIED"):
                    events = roster.observe(uid, self._worker(pod, skips))
                else:
                    continue
                for event in events:
                    yield event
        finally:
            try:
                await stream.aclose()
            except RuntimeError:
                # A read cancelled mid-way may leave the watch's generator running
                # ("aclose(): asynchronous generator is already running"); the exception on its
                # way out (the cancellation) is what counts, not this one.
                if not _cancelling():
                    raise

    def _worker(self, pod: PodModel, skips: _Skips) -> WorkerMetadata | None:
        try:
            return worker_from_pod(pod, self.declared)
        except PodSkipped as skipped:
            skips.warn(pod.metadata.uid, skipped)
            return None


def _cancelling() -> bool:
    """Whether the current task is being cancelled."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def parse_selector(selector: Mapping[str, str] | str) -> tuple[tuple[str, str], ...]:
    """A label selector as sorted (key, value) pairs.

    :param selector: a mapping, or ``"key=value,key=value"`` (``==`` also accepted).
    :raises ValueError: if it is empty, or a term is not ``key=value`` with a non-empty key.
    """
    if isinstance(selector, str):
        pairs = []
        for term in filter(None, (t.strip() for t in selector.split(","))):
            key, equals, value = term.replace("==", "=").partition("=")
            if not equals or not key.strip() or "!" in key:
                raise ValueError(f"label selector term {term!r} is not key=value (only equality is supported)")
            pairs.append((key.strip(), value.strip()))
    else:
        pairs = [(str(k), str(v)) for k, v in selector.items()]
    if not pairs:
        raise ValueError("the label selector is empty: it would pick every pod in the namespace")
    return tuple(sorted(pairs))


def format_selector(selector: tuple[tuple[str, str], ...]) -> str:
    """``key=value,key=value``."""
    return ",".join(f"{k}={v}" for k, v in selector)


def _client() -> AsyncClient:
    """An API client as lightkube configures one (in-cluster, else ``$KUBECONFIG``, else
    ``~/.kube/config``), its answers bounded by `BoundedTransport`.

    Proxy variables of the environment are not used: a proxy's transport would bypass the bound.
    """
    config = KubeConfig.from_env().get()
    verify = verify_cluster(config.cluster, config.user, config.abs_file, trust_env=False)
    transport = BoundedTransport(httpx.AsyncHTTPTransport(verify=verify), MAX_ANSWER_BYTES)
    return AsyncClient(config, transport=transport, trust_env=False)


def _uid(pod: PodModel) -> uuid.UUID | None:
    try:
        return uuid.UUID((pod.metadata and pod.metadata.uid) or "")
    except ValueError:
        return None


class _Skips:
    """Warns once per pod and reason that a pod is left out; remembers at most ``most`` pods."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._seen: dict[str | None, str] = {}

    def warn(self, uid: str | None, skipped: PodSkipped) -> None:
        if self._seen.get(uid) == skipped.reason:
            return
        if len(self._seen) >= self._most:
            self._seen.clear()
        self._seen[uid] = skipped.reason
        logger.warning("%s; the pod is left out", skipped)


class _Backoff:
    """Pauses before listing again: `BACKOFF_FIRST` doubling to `BACKOFF_MAX`, each drawn
    between half and all of it; back to the first once the watch delivers an event."""

    def __init__(self) -> None:
        self._next = BACKOFF_FIRST

    @property
    def fresh(self) -> bool:
        """No pause taken since the last event."""
        return self._next == BACKOFF_FIRST

    def reset(self) -> None:
        self._next = BACKOFF_FIRST

    def delay(self) -> float:
        """The next pause, in seconds (the one after it doubles)."""
        delay = self._next * random.uniform(0.5, 1.0)
        self._next = min(self._next * 2, BACKOFF_MAX)
        return delay
