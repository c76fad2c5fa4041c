"""The workers one subscriber iteration knows, and the events that changes to them make.

Pure and bounded: a `Roster` holds at most ``max_workers`` workers, whatever a peer (the API
server, a DNS answer) lists; a worker past the bound is left out with a logged warning and
taken in later if room frees up at the next full listing.
"""

from __future__ import annotations

import logging
import uuid
from typing import Iterable

from wool.runtime.discovery.base import DiscoveryEvent
from wool.runtime.worker.metadata import WorkerMetadata

logger = logging.getLogger(__name__)

#: The default bound on the workers one discovery holds: libwool's scaler's
#: ``--max-pods-per-fleet`` default.
DEFAULT_MAX_WORKERS = 10_000


class Roster:
    """Known workers keyed by uid; every change returns the Wool discovery events it makes.

    :param max_workers: the most workers held at once (at least 1).
    :param source: what lists the workers, for log lines (e.g. ``pods app=wool in ns``).
    :raises ValueError: if ``max_workers`` is below 1.
    """

    def __init__(self, max_workers: int, source: str) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self._max = max_workers
        #: What lists the workers, for log lines.
        self.source = source
        self._workers: dict[uuid.UUID, WorkerMetadata] = {}
        self._full_warned = False

    def __len__(self) -> int:
        return len(self._workers)

    @property
    def workers(self) -> dict[uuid.UUID, WorkerMetadata]:
        """A copy of the workers held, by uid."""
        return dict(self._workers)

    def observe(self, uid: uuid.UUID, worker: WorkerMetadata | None) -> list[DiscoveryEvent]:
        """One source object seen now: ``worker`` is what it is, ``None`` when it is no worker.

        :returns: ``worker-added`` for a new worker (none when the roster is full),
            ``worker-updated`` for a known one whose metadata changed, ``worker-dropped`` for a
            known one that is no worker any more; else nothing.
        """
        known = self._workers.get(uid)
        if worker is None:
            return self.forget(uid)
        if known is not None:
            if known == worker:
                return []
            self._workers[uid] = worker
            return [DiscoveryEvent("worker-updated", metadata=worker)]
        if len(self._workers) >= self._max:
            self._warn_full(worker)
            return []
        self._workers[uid] = worker
        return [DiscoveryEvent("worker-added", metadata=worker)]

    def forget(self, uid: uuid.UUID) -> list[DiscoveryEvent]:
        """One source object gone: ``worker-dropped`` if it was a known worker, else nothing."""
        known = self._workers.pop(uid, None)
        if known is None:
            return []
        if len(self._workers) < self._max:
            self._full_warned = False
        return [DiscoveryEvent("worker-dropped", metadata=known)]

    def listing(self) -> Listing:
        """A full listing to take one worker at a time; see `Listing`."""
        return Listing(self)

    def replace(self, listing: Iterable[tuple[uuid.UUID, WorkerMetadata]]) -> list[DiscoveryEvent]:
        """A full listing of the source at once; see `Listing`.

        :param listing: (uid, worker) pairs, each uid once.
        """
        full = Listing(self)
        for uid, worker in listing:
            full.add(uid, worker)
        return full.finish()

    def _warn_full(self, worker: WorkerMetadata) -> None:
        if not self._full_warned:
            self._full_warned = True
            logger.warning(
                "%s: holding %d workers, the most allowed (max_workers); leaving out %s at %s "
                "and any other past the bound until room frees up",
                self.source, self._max, worker.uid, worker.address,
            )


class Listing:
    """A full listing of a roster's source, taken one worker at a time (a paged list).

    `finish` makes drops for the known workers the listing lacked first (so their room goes to
    new ones), then adds and updates in the listing's order. It holds at most the roster's
    known workers plus ``max_workers`` others, however long the listing.
    """

    def __init__(self, roster: Roster) -> None:
        self._roster = roster
        self._listed: dict[uuid.UUID, WorkerMetadata] = {}
        self._others = 0

    def add(self, uid: uuid.UUID, worker: WorkerMetadata) -> None:
        """One worker of the listing."""
        roster = self._roster
        if uid in roster._workers:
            self._listed[uid] = worker
        elif self._others < roster._max:
            self._others += 1
            self._listed[uid] = worker
        else:
            roster._warn_full(worker)

    def finish(self) -> list[DiscoveryEvent]:
        """The events that bring the roster to the listing (the roster is changed)."""
        roster = self._roster
        events = []
        for uid in [uid for uid in roster._workers if uid not in self._listed]:
            events += roster.forget(uid)
        for uid, worker in self._listed.items():
            events += roster.observe(uid, worker)
        return events
