"""A bound on the embedded shards open at once: the cost of a tenant stays flat.

An open Qdrant Edge shard holds its engine threads (a search pool sized by the CPUs), its open
files and its mapped pages for as long as it is open: one shard per token kept open forever
made a process of 200 tokens run 3,241 threads. `OpenShards` keeps at most `limit` of them open;
when one more must open, the least recently used idle one is *parked*: its engine shard is
closed, while the `EdgeIndex` object (cheap: paths, locks, the shared BM25 encoder) stays, and
reopens its shard on its next use. Whoever holds the index never sees the difference.

A shard is parked only when it is idle: `Parkable.try_park` takes the index's own locks
without waiting, so a shard in the middle of a read, a write, an optimisation, a compaction or
a swap is skipped (the next idle one goes instead). Nothing here ever waits for an index's
lock while holding this one's: an index calls in with its own lock held (`used`, `opened`),
so the order is always index → slots, and no two openers can wait on each other. When every
open shard is busy, the count goes over the limit for as long as they stay busy (by at most
the threads running engine calls); the next opening brings it back down.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

__all__ = ["OpenShards", "Parkable"]


class Parkable(Protocol):
    def try_park(self) -> bool:
        """Close the engine shard now if nothing is using it (without waiting for any lock);
        True if it is closed (or was), False if it is busy."""
        ...


class OpenShards:
    """The open shards, least recently used first; at most `limit` of them (0: no bound)."""

    def __init__(self, limit: int, on_reopen: Callable[[], None] | None = None) -> None:
        if limit < 0:
            raise ValueError(f"the open shard limit must be >= 0, got {limit}")
        self.limit = limit
        self._lock = threading.Lock()
        self._open: OrderedDict[int, Parkable] = OrderedDict()  # by id(): any object will do
        # Parked now (closed to make room, not closed for good): they reopen on their next use.
        self._parked: dict[int, Parkable] = {}
        self._on_reopen = on_reopen
        self.parked = 0  # shards closed to make room, since start (metrics, tests)
        self.reopens = 0  # parked shards opened again, since start

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def state(self) -> tuple[int, int]:
        """(open, parked) now: the engine shards open, and those closed to make room."""
        with self._lock:
            return len(self._open), len(self._parked)

    def make_room(self, opening: Parkable) -> None:
        """Before `opening` opens its shard: park idle shards until one more fits."""
        if self.limit == 0:
            return
        with self._lock:
            excess = len(self._open) + 1 - self.limit
            if excess <= 0:
                return
            candidates = [s for s in self._open.values() if s is not opening]
        # Outside the lock: closing an engine shard joins its threads (milliseconds), and every
        # other shard's `used` takes this lock.
        for shard in candidates:
            if excess <= 0:
                break
            with self._lock:
                if id(shard) not in self._open:
                    continue  # parked or closed meanwhile
            if shard.try_park():
                excess -= 1

    def opened(self, shard: Parkable) -> None:
        """`shard` has opened its engine shard: the most recently used."""
        with self._lock:
            self._open[id(shard)] = shard
            self._open.move_to_end(id(shard))
            reopened = self._parked.pop(id(shard), None) is not None
            if reopened:
                self.reopens += 1
        if reopened and self._on_reopen is not None:
            self._on_reopen()

    def used(self, shard: Parkable) -> None:
        with self._lock:
            if id(shard) in self._open:
                self._open.move_to_end(id(shard))

    def closed(self, shard: Parkable, *, parked: bool = False) -> None:
        """`shard` has closed its engine shard (parked to make room), or is closed for good
        (whether its engine shard was open or parked)."""
        with self._lock:
            was_open = self._open.pop(id(shard), None) is not None
            if parked and was_open:
                self.parked += 1
                self._parked[id(shard)] = shard
            elif not parked:
                self._parked.pop(id(shard), None)
