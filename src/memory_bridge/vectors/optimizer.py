"""Optimisation of vector shards off the hot path, on a size threshold.

An embedded shard answers a hybrid query several times faster after `optimize()` (the HNSW
build and segment merge), but a big shard's build takes tens of seconds: it must never run in a
request (figures: docs/performance.md#figures-behind-code-choices). The job worker tells
`ShardOptimizer` after each job which token it worked for (`poke`); one background thread then
looks at that token's shards and optimises one whose point count has grown since its last
optimisation (or since this process opened it) by `threshold`, or by half its size then if that
is more, one shard at a time. The growth is geometric so that the builds of a growing shard
cost a constant factor of its last one, while at most a third of its points are ever outside
the optimised segments: a scanning search of a mid-sized shard was the difference between
meeting the recall stage's target and missing it. The build itself runs in a child process
(`edge_optimize`); reads and writes go on meanwhile.

The count is kept in memory: after a restart a shard is optimised once it has grown by
`threshold` again. (A Qdrant server optimises by itself: its `optimize()` does nothing.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from memory_bridge.vectors.index import IndexClosed, ShardKey, VectorEngine, VectorIndex

__all__ = ["OptimizeRun", "ShardOptimizer", "TrackedEngine"]

log = logging.getLogger(__name__)

# A shard is optimised again once it has grown by this fraction of its size at the last
# optimisation (or by the threshold, if that is more).
GROWTH = 0.5


@dataclass(frozen=True, slots=True)
class OptimizeRun:
    key: ShardKey
    grown: int  # points since the previous optimisation
    changed: bool | None  # None: it failed
    seconds: float


class TrackedEngine:
    """The engine, with every shard it opens made known to the optimizer; everything else is
    the engine's own (delegated as it is, whatever the engine interface grows to)."""

    def __init__(self, engine: VectorEngine, seen: Callable[[VectorIndex], None]) -> None:
        self.inner = engine
        self._seen = seen

    def index(self, token_id: int, model_id: str, dims: int) -> VectorIndex:
        index = self.inner.index(token_id, model_id, dims)
        self._seen(index)
        return index

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ShardOptimizer:
    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # Shards by key, and each one's point count after its last optimisation (or when seen).
        self._shards: dict[ShardKey, VectorIndex] = {}
        self._base: dict[ShardKey, int] = {}
        self._pending: set[int] = set()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.running: ShardKey | None = None
        self.runs: list[OptimizeRun] = []  # the latest few, for operators and tests

    def track(self, engine: VectorEngine) -> VectorEngine:
        """`engine`, telling this optimizer of each shard it opens. The optimizer only ever
        uses the shard objects it was shown: a dropped shard (closed) is forgotten, never
        re-created."""
        return cast(VectorEngine, TrackedEngine(engine, self._seen))

    def _seen(self, index: VectorIndex) -> None:
        key = index.key
        with self._lock:
            known = self._shards.get(key)
            if known is index:
                return
        # A shard opened (again): its present size is the base. Outside the lock: the engine
        # call may wait for the shard's own lock.
        try:
            points = index.stats().points
        except IndexClosed:
            return
        with self._lock:
            if self._shards.get(key) is not index:
                self._shards[key] = index
                self._base[key] = points

    def poke(self, token_id: int) -> None:
        """After a job for `token_id`: look at its shards soon, off the caller's thread."""
        if self.threshold <= 0:
            return
        with self._lock:
            if self._closed or not any(k.token_id == token_id for k in self._shards):
                return
            self._pending.add(token_id)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="memory-bridge-optimize", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def close(self) -> None:
        """Stop looking. A build under way is not waited for: closing the engine ends it."""
        with self._lock:
            self._closed = True
            self._wake.notify()

    # -- the thread ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                tokens, self._pending = self._pending, set()
                shards = [(k, i) for k, i in self._shards.items() if k.token_id in tokens]
            for key, index in sorted(shards, key=lambda s: repr(s[0])):
                self._maybe_optimise(key, index)

    def _maybe_optimise(self, key: ShardKey, index: VectorIndex) -> None:
        try:
            points = index.stats().points
        except IndexClosed:
            self._drop(key, index)
            return
        except Exception as exc:
            log.warning("vector shard stats failed (%s)", type(exc).__name__)
            return
        with self._lock:
            if self._closed or self._shards.get(key) is not index:
                return
            base = self._base.get(key, points)
            grown = points - base
            if grown < max(self.threshold, int(base * GROWTH)):
                return
            # Writes made during the build count toward the next one.
            self._base[key] = points
            self.running = key
        started = time.perf_counter()
        changed: bool | None = None
        try:
            changed = index.optimize()
        except IndexClosed:
            self._drop(key, index)
        except Exception as exc:
            # Retried only after another `threshold` points: a failing build must not loop.
            log.warning(
                "optimising the vector shard of token %d failed (%s)",
                key.token_id,
                type(exc).__name__,
            )
        seconds = time.perf_counter() - started
        with self._lock:
            self.running = None
            self.runs = [*self.runs[-19:], OptimizeRun(key, grown, changed, seconds)]
        if changed is not None:
            log.info(
                "optimised the vector shard of token %d (%s, %d dims; %d points since the last "
                "optimisation) in %.1f s%s",
                key.token_id,
                key.model_id,
                key.dims,
                grown,
                seconds,
                "" if changed else ": nothing to do",
            )

    def _drop(self, key: ShardKey, index: VectorIndex) -> None:
        with self._lock:
            if self._shards.get(key) is index:
                del self._shards[key]
                self._base.pop(key, None)
