"""The one Qdrant client of the process, shared by every Mem0 instance.

Local mode (`QDRANT_PATH`, the default) allows one client per storage path per process, and
that client is not thread-safe: concurrent calls from a thread pool corrupt it (measured:
`SystemError`, `IndexError`, sqlite "cannot commit - no transaction is active", lost points in
5 of 5 trials with 8 threads). So in local mode every call that reaches the storage is
serialised by one lock. Calls are kept short (at 1,000 points: a filtered search ~1.3 ms, an
upsert ~0.3 ms; see below), while the slow parts of Mem0 (embedding and LLM calls over HTTP)
happen outside it. Server mode (`QDRANT_URL`) needs no lock: the HTTP client is thread-safe.

Local mode has no payload index: it evaluates every filter with its generic interpreter,
point by point (~7-15 µs per point: a JSON-path parse, type dispatch and a few generator
frames each), on every search, scroll and count. Every filter MemoryBridge and Mem0 send is
the namespace: `user_id` equals a string (Mem0 may add `agent_id`/`run_id` the same way). Such
filters get a fast path (`FastFilterCollection`): one dictionary lookup and comparison per
point, with exactly the local interpreter's semantics (a list value matches when it holds the
string; any other type never equals a string); every other filter goes to the interpreter
unchanged. Measured at 1,000 points: the filter from ~7.4 ms to ~0.15 ms, so a filtered search
costs about what an unfiltered one does (`scripts/bench/longterm_micro.py`). That lookup still
visited every point on every search and on every add (Mem0 searches before it writes): 18% of
the proxy's CPU with every layer on. So each collection's payload list (`IndexedPayloads`)
keeps the answer per `key == value` pair as a boolean column, built on first use and kept up
to date point by point as payloads are added or replaced; a search reads the column.

A Qdrant server needs none of this: Mem0 creates keyword payload indexes on `user_id`,
`agent_id`, `run_id` and `actor_id` in every collection it opens there. Every committed point
is also written through a write-ahead log (`_write_ahead`), so upserts hold the lock for no
fsync.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.local.local_collection import LocalCollection
from qdrant_client.local.qdrant_local import QdrantLocal

log = logging.getLogger(__name__)
# A key the local JSON-path parser reads as one top-level key (no `.`, `[]`, quotes).
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Backend calls after which the backend may hold collections not yet adopted.
_CREATES = frozenset({"create_collection", "recreate_collection"})


def string_equalities(payload_filter: models.Filter | None) -> tuple[tuple[str, str], ...] | None:
    """`((key, value), ...)` when the filter is only `must` conditions, each "top-level key
    equals this string"; None for any other filter (or none)."""
    if payload_filter is None or payload_filter.must is None:
        return None
    if any(value is not None for name, value in payload_filter if name != "must"):
        return None
    must = payload_filter.must
    conditions = must if isinstance(must, list) else [must]
    pairs: list[tuple[str, str]] = []
    for condition in conditions:
        if type(condition) is not models.FieldCondition:
            return None
        if any(value is not None for name, value in condition if name not in ("key", "match")):
            return None  # range, geo, values_count, is_empty, is_null, or a field added later
        match = condition.match
        if type(match) is not models.MatchValue or type(match.value) is not str:
            return None
        if not _PLAIN_KEY.match(condition.key):
            return None
        pairs.append((condition.key, match.value))
    return tuple(pairs) if pairs else None


def equality_mask(payloads: Sequence[dict[str, Any]], pairs: tuple[tuple[str, str], ...]) -> Any:
    """Which payloads satisfy every `key == value` pair, as the local interpreter decides it:
    a string equals the value; a list matches when it holds the value (one level, like the
    interpreter's flattening); every other type (numbers, dicts, null) never equals a string."""
    mask: Any = None
    for key, value in pairs:
        column = np.fromiter(
            (_matches(payload, key, value) for payload in payloads),
            dtype=bool,
            count=len(payloads),
        )
        mask = column if mask is None else mask & column
    return mask


def _matches(payload: dict[str, Any], key: str, value: str) -> bool:
    """One point's answer to `key == value`, as the local interpreter decides it."""
    found = payload.get(key)
    return found == value or (type(found) is list and value in found)


class _Column:
    """A growable boolean array: appends are amortised O(1), not a copy of the whole column."""

    __slots__ = ("_buffer", "size")

    def __init__(self, values: Any) -> None:
        self._buffer = values
        self.size = len(values)

    def view(self) -> Any:
        return self._buffer[: self.size]

    def append(self, value: bool) -> None:
        if self.size == len(self._buffer):
            grown = np.zeros(max(16, 2 * self.size), dtype=bool)
            grown[: self.size] = self._buffer[: self.size]
            self._buffer = grown
        self._buffer[self.size] = value
        self.size += 1

    def set(self, index: int, value: bool) -> None:
        self._buffer[index] = value


class IndexedPayloads(list[dict[str, Any]]):
    """A local collection's payloads (one per point, in storage order) with the answers to
    namespace filters kept alongside: per `(key, value)` a boolean column, built on first use
    (one pass, `equality_mask`) and updated as the collection appends or replaces a payload —
    the only two ways qdrant-client changes the list. Any other change to the list drops every
    column (rebuilt on the next search), so a column can never describe stale payloads. Not
    thread-safe by itself: local mode runs every call under the client's lock."""

    MAX_COLUMNS = 256  # namespaces (end users) remembered per collection; least recent go

    def __init__(self, payloads: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(payloads)
        self._columns: dict[tuple[str, str], _Column] = {}

    def column(self, key: str, value: str) -> Any:
        pair = (key, value)
        found = self._columns.pop(pair, None)
        if found is None or found.size != len(self):
            found = _Column(equality_mask(self, (pair,)))
            if len(self._columns) >= self.MAX_COLUMNS:
                del self._columns[next(iter(self._columns))]
        self._columns[pair] = found  # most recently used last
        return found.view()

    def append(self, payload: dict[str, Any]) -> None:
        super().append(payload)
        for (key, value), column in self._columns.items():
            column.append(_matches(payload, key, value))

    def __setitem__(self, index: Any, payload: Any) -> None:
        super().__setitem__(index, payload)
        if type(index) is not int or not isinstance(payload, dict):
            self._columns.clear()
            return
        position = index % len(self)
        for (key, value), column in self._columns.items():
            column.set(position, _matches(payload, key, value))

    def _changed(self) -> None:
        self._columns.clear()

    def __delitem__(self, index: Any) -> None:
        self._changed()
        super().__delitem__(index)

    def __iadd__(self, other: Any) -> Self:  # type: ignore[override,misc]
        self._changed()
        return super().__iadd__(other)

    def __imul__(self, count: Any) -> Self:  # type: ignore[misc]
        self._changed()
        return super().__imul__(count)

    def extend(self, payloads: Any) -> None:
        self._changed()
        super().extend(payloads)

    def insert(self, index: Any, payload: Any) -> None:
        self._changed()
        super().insert(index, payload)

    def pop(self, index: Any = -1) -> dict[str, Any]:
        self._changed()
        return super().pop(index)

    def remove(self, payload: Any) -> None:
        self._changed()
        super().remove(payload)

    def clear(self) -> None:
        self._changed()
        super().clear()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._changed()
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        self._changed()
        super().reverse()


class FastFilterCollection(LocalCollection):
    """A local collection whose namespace filters skip the generic per-point interpreter."""

    def _payload_and_non_deleted_mask(
        self, payload_filter: models.Filter | None, vector_name: str | None = None
    ) -> Any:
        pairs = string_equalities(payload_filter)
        if pairs is None:
            return super()._payload_and_non_deleted_mask(payload_filter, vector_name)
        mask = super()._payload_and_non_deleted_mask(None, vector_name)  # a new array: ours
        payloads = self.payload
        if not isinstance(payloads, IndexedPayloads):
            return mask & equality_mask(payloads, pairs)
        for key, value in pairs:
            mask &= payloads.column(key, value)
        return mask


def _adopt(local: QdrantLocal) -> None:
    """Give every collection of the backend the fast filter path (with its indexed payloads)
    and a write-ahead log (the backend builds plain `LocalCollection`s when it opens the
    storage and when a collection is created)."""
    for collection in local.collections.values():
        if type(collection) is LocalCollection:
            collection.__class__ = FastFilterCollection
            collection.payload = IndexedPayloads(collection.payload)
            _write_ahead(collection)


def _write_ahead(collection: LocalCollection) -> None:
    """Local mode keeps each collection in its own SQLite file and commits every point on its
    own, in SQLite's default rollback-journal mode with `synchronous=FULL`: several fsyncs per
    point, all under the lock every search waits on (measured: upsert p50 2-3 ms, p95 10-15 ms,
    outliers of 50-190 ms). WAL with `synchronous=NORMAL`, as for MemoryBridge's own database:
    no fsync per commit (upsert p50 0.27 ms, p95 0.64 ms). A commit survives a crash of the
    process; a power loss may drop the last writes, never corrupt the file. Best effort: a
    file that refuses (a filesystem without shared memory) keeps its journal."""
    persistence = getattr(collection, "storage", None)
    connection = getattr(persistence, "storage", None)
    if not isinstance(connection, sqlite3.Connection):
        return
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error as exc:
        log.warning("Qdrant local storage keeps its rollback journal: %s", exc)


class _Serialised:
    """Proxy for the local backend: every method call holds the lock."""

    def __init__(self, inner: QdrantLocal, lock: threading.RLock) -> None:
        self._inner = inner
        self._lock = lock
        _adopt(inner)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        creates = name in _CREATES

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                try:
                    return attr(*args, **kwargs)
                finally:
                    if creates:
                        _adopt(self._inner)

        return call


class SharedQdrantClient(QdrantClient):
    """A `QdrantClient` (so Mem0 accepts it as its `client`) that is safe to share.

    Local mode: the backend behind the public API is wrapped so that every call is serialised.
    Never copied: Mem0 deep-copies its vector store config (which holds this client) for its
    entity store; a copy would duplicate the whole local storage in memory.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.local = isinstance(self._client, QdrantLocal)
        if isinstance(self._client, QdrantLocal):
            self._client = _Serialised(self._client, threading.RLock())  # type: ignore[assignment]

    def __copy__(self) -> SharedQdrantClient:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedQdrantClient:
        return self


def open_client(path: Path, url: str, api_key: str) -> SharedQdrantClient:
    """Server mode when `url` is set, else local mode under `path` (created if missing)."""
    if url:
        return SharedQdrantClient(url=url, api_key=api_key or None)
    # Mem0 asks for payload indexes on the collections it creates; local mode has none.
    warnings.filterwarnings(
        "ignore", "Payload indexes have no effect in the local Qdrant", UserWarning
    )
    path.mkdir(parents=True, exist_ok=True)
    return SharedQdrantClient(path=str(path))


def collection_names(client: QdrantClient) -> list[str]:
    return [c.name for c in client.get_collections().collections]
