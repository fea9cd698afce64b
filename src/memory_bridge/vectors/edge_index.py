"""One embedded shard: a Qdrant Edge shard of one (token, model, dims) in the data directory.

Layout: ``<data>/vectors/t<token>/<model-slug>-d<dims>/`` holds ``meta.json`` (what the shard
is, and the BM25 settings its documents were tokenized with) and ``shard/`` (the engine's).

Thread safety: every engine call holds the GIL (measured), so engine calls never run in
parallel anyway; the locks here only make our compound steps atomic. Writes take the write
lock, reads the read lock, and only `close`, parking and the swap at the end of `optimize` take
both, so reads go on while an optimisation copies or replays. The engine itself refuses a second
owner of a shard (its WAL is locked), also from another process.

The engine shard may be parked (closed to keep the number of open shards bounded,
`edge_slots`) whenever the index is idle; the next call reopens it under the lock it holds.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import qdrant_edge as qe

from memory_bridge.vectors import edge_optimize
from memory_bridge.vectors.common import (
    FLOAT_FIELDS,
    KEYWORD_FIELDS,
    Bm25Encoder,
    Bm25Settings,
    IndexBase,
    Ranked,
    SearchPlan,
)
from memory_bridge.vectors.edge_schema import (
    copy_points,
    dense_of,
    edge_config,
    edge_filter,
    ensure_room,
    index_params,
    ranked,
    settle_meta,
)
from memory_bridge.vectors.edge_slots import OpenShards
from memory_bridge.vectors.index import (
    DENSE,
    SPARSE,
    DimensionMismatch,
    IndexClosed,
    IndexStats,
    PointPayload,
    ShardKey,
    StoredPoint,
    VectorIndexError,
    VectorPoint,
    Where,
    canonical_id,
    check_dense,
)

if TYPE_CHECKING:
    from qdrant_edge import NamedVector

__all__ = ["EdgeIndex"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class EdgeIndex(IndexBase):
    def __init__(
        self,
        home: Path,
        key: ShardKey,
        bm25: Bm25Settings,
        *,
        optimize_timeout: float,
        min_free_bytes: int = 0,
        slots: OpenShards | None = None,
        encoder: Callable[[Bm25Settings], Bm25Encoder] = Bm25Encoder,
    ) -> None:
        self._home = home
        self._min_free = min_free_bytes
        self._optimize_timeout = optimize_timeout
        self._slots = slots if slots is not None else OpenShards(0)  # (an empty one is falsy)
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._optimize_lock = threading.Lock()
        # Taken only to reopen a parked shard: a reader and a writer may both find it parked.
        self._open_lock = threading.Lock()
        # Writes made while an optimisation runs, replayed onto the optimised copy.
        self._journal: list[qe.UpdateOperation] | None = None
        self._closed = False
        self._shard: qe.EdgeShard | None = None
        # Memories are private: every level we create is owner-only (mkdir's mode only
        # applies to the last level of parents=True).
        home.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for level in (home.parent, home):
            level.mkdir(exist_ok=True, mode=0o700)
        edge_optimize.recover(home)
        super().__init__(key, encoder(settle_meta(self._home, key, bm25)))
        with self._read_lock:  # opened now: a shard another process owns is refused here
            self._live()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- writes ---------------------------------------------------------------------------

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        if points:
            # Validation and BM25 encoding happen before any lock is taken.
            self._write(qe.UpdateOperation.upsert_points([self._point(p) for p in points]))

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            self._write(qe.UpdateOperation.delete_points([canonical_id(i) for i in ids]))

    def _delete_where(self, where: Where) -> None:
        flt = edge_filter(where)
        if flt is not None:
            self._write(qe.UpdateOperation.delete_points_by_filter(flt))

    # -- reads ----------------------------------------------------------------------------

    def _count(self, where: Where) -> int:
        request = qe.CountRequest(exact=True, filter=edge_filter(where))
        return self._read(lambda shard: shard.count(request))

    def _scroll_page(
        self, where: Where, offset: str | None, limit: int, with_dense: bool
    ) -> tuple[list[StoredPoint], str | None]:
        request = qe.ScrollRequest(
            offset=offset,
            limit=limit,
            filter=edge_filter(where),
            with_payload=True,
            with_vector=[DENSE] if with_dense and self._key.dims else False,
        )
        records, next_id = self._read(lambda shard: shard.scroll(request))
        page = [
            StoredPoint(
                id=str(record.id),
                payload=PointPayload.from_json(record.payload),
                dense=dense_of(record.vector) if with_dense else None,
            )
            for record in records
        ]
        return page, None if next_id is None else str(next_id)

    def _search(self, plan: SearchPlan) -> tuple[Ranked, Ranked]:
        flt = edge_filter(plan.where)
        requests: list[qe.QueryRequest] = []
        if plan.dense is not None:
            requests.append(
                qe.QueryRequest(
                    limit=plan.prefetch_limit,
                    query=qe.Query.Nearest(plan.dense, using=DENSE),
                    filter=flt,
                    with_payload=False,
                )
            )
        if plan.sparse is not None:
            idf = qe.IdfParams(corpus=edge_filter(Where(user=plan.where.user)))
            requests.append(
                qe.QueryRequest(
                    limit=plan.prefetch_limit,
                    query=qe.Query.Nearest(plan.sparse, using=SPARSE),
                    filter=flt,
                    with_payload=False,
                    params=qe.SearchParams(idf=idf),
                )
            )
        batch = qe.QueryBatchRequest(requests)
        results = [ranked(found) for found in self._read(lambda s: s.query_batch(batch))]
        dense = results.pop(0) if plan.dense is not None else []
        return dense, results.pop(0) if plan.sparse is not None else []

    def _payloads(self, ids: list[str]) -> dict[str, PointPayload]:
        records = self._read(lambda s: s.retrieve(list(ids), with_payload=True, with_vector=False))
        return {str(r.id): PointPayload.from_json(r.payload) for r in records}

    def stats(self) -> IndexStats:
        info = self._read(lambda shard: shard.info())
        return IndexStats(
            points=info.points_count,
            indexed_vectors=info.indexed_vectors_count,
            segments=info.segments_count,
        )

    # -- lifecycle ------------------------------------------------------------------------

    def optimize(self) -> bool:
        """Optimise in a child process (see `edge_optimize`); False if nothing changed.

        Blocking for as long as the build takes: call it from a worker, never a request.
        """
        with self._optimize_lock:
            with self._write_lock:
                self._live().flush()
                copy = edge_optimize.copy_shard(self._home)
                self._journal = []
            try:
                changed = edge_optimize.run_optimizer(copy, self._optimize_timeout)
            except BaseException:
                with self._write_lock:
                    self._journal = None
                shutil.rmtree(copy, ignore_errors=True)
                raise
            with self._write_lock:
                journal, self._journal = self._journal or [], None
                if not changed or self._closed:
                    shutil.rmtree(copy, ignore_errors=True)
                    if self._closed:
                        raise IndexClosed(f"vector shard {self._home} was closed")
                    return False
                self._replay(copy, journal)
                with self._read_lock:
                    self._swap()
            return True

    def compact(self) -> bool:
        """Copy the live points (every vector, payload as stored) into a fresh shard and put
        it live: a deleted point's payload otherwise stays in segment pages and the WAL until
        the engine happens to vacuum. Writes wait meanwhile; reads go on until the swap."""
        with self._optimize_lock, self._write_lock:
            # Reading without the read lock is safe here: only close, parking and the swap
            # replace the shard, and each needs the write lock held here.
            shard = self._live()
            target = self._home / edge_optimize.NEXT
            shutil.rmtree(target, ignore_errors=True)
            try:
                copy_points(shard, target, self._key.dims)
            except Exception as exc:
                shutil.rmtree(target, ignore_errors=True)
                if isinstance(exc, VectorIndexError):
                    raise
                raise VectorIndexError(f"compacting vector shard {self._home}: {exc}") from exc
            with self._read_lock:
                self._swap()
        return True

    def close(self) -> None:
        with self._write_lock, self._read_lock:
            if not self._closed:
                self._closed = True
                self._close_shard(parked=False)

    @property
    def parked(self) -> bool:
        """True while the engine shard is closed to make room (it reopens on the next call)."""
        return self._shard is None and not self._closed

    def try_park(self) -> bool:
        """Close the engine shard if the index is idle, without waiting: a shard being read,
        written, optimised, compacted or swapped is left open (False)."""
        locks = (self._optimize_lock, self._write_lock, self._read_lock)
        held = []
        try:
            for lock in locks:
                if not lock.acquire(blocking=False):
                    return False
                held.append(lock)
            if self._shard is not None:
                self._close_shard(parked=True)
            return True
        finally:
            for lock in reversed(held):
                lock.release()

    # -- internals ------------------------------------------------------------------------

    def _open_shard(self) -> qe.EdgeShard:
        path = str(self._home / edge_optimize.LIVE)
        config = edge_config(self._key.dims)
        try:
            if (self._home / edge_optimize.LIVE).exists():
                shard = qe.EdgeShard.load(path, config)
            else:
                shard = qe.EdgeShard.create(path, config)
        except Exception as exc:
            raise VectorIndexError(f"cannot open vector shard {path}: {exc}") from exc
        try:
            present = set(shard.info().payload_schema)
            for name in KEYWORD_FIELDS + FLOAT_FIELDS:
                if name not in present:
                    shard.update(qe.UpdateOperation.create_field_index(name, index_params(name)))
        except Exception as exc:
            shard.close()
            raise VectorIndexError(f"cannot index payload of {path}: {exc}") from exc
        return shard

    def _live(self) -> qe.EdgeShard:
        """The engine shard, reopened if it was parked; the caller holds the read or the write
        lock (so it cannot be parked before the caller is done with it)."""
        if self._closed:
            raise IndexClosed(f"vector shard {self._home} is closed")
        shard = self._shard
        if shard is not None:
            self._slots.used(self)
            return shard
        with self._open_lock:
            shard = self._shard
            if shard is None:
                self._slots.make_room(self)
                shard = self._shard = self._open_shard()
                self._slots.opened(self)
            return shard

    def _close_shard(self, *, parked: bool) -> None:
        """Both locks held (or every lock, when parking). Closed for good, a parked index is
        no longer counted as parked either."""
        shard, self._shard = self._shard, None
        if shard is not None or not parked:
            self._slots.closed(self, parked=parked)
        if shard is not None:
            shard.close()

    def _write(self, op: qe.UpdateOperation) -> None:
        ensure_room(self._home, self._min_free)
        with self._write_lock:
            shard = self._live()
            try:
                shard.update(op)
            except Exception as exc:
                raise VectorIndexError(f"vector shard {self._home}: {exc}") from exc
            if self._journal is not None:
                self._journal.append(op)

    def _read(self, call: Callable[[qe.EdgeShard], T]) -> T:
        with self._read_lock:
            shard = self._live()
            try:
                return call(shard)
            except Exception as exc:
                raise VectorIndexError(f"vector shard {self._home}: {exc}") from exc

    def _point(self, point: VectorPoint) -> qe.Point:
        point_id = canonical_id(point.id)
        dense = check_dense(point.dense, self._key, f"point {point_id}")
        if self._key.dims and dense is None:
            raise DimensionMismatch(f"point {point_id}: the shard needs a dense vector")
        vector: dict[str, NamedVector] = {SPARSE: self._encoder.document(point.sparse_text)}
        if dense is not None:
            vector[DENSE] = dense
        return qe.Point(point_id, vector, point.payload.to_json())

    def _replay(self, copy: Path, journal: list[qe.UpdateOperation]) -> None:
        """Apply the writes made during the build to the optimised copy; write lock held."""
        try:
            fresh = qe.EdgeShard.load(str(copy))
            try:
                for op in journal:
                    fresh.update(op)
                fresh.flush()
            finally:
                fresh.close()
        except Exception as exc:
            shutil.rmtree(copy, ignore_errors=True)
            raise VectorIndexError(f"replaying writes onto optimised {copy}: {exc}") from exc

    def _swap(self) -> None:
        """Put the optimised copy live; every lock held (the shard is open: the caller's
        `_live` opened it, and nothing parks a shard whose optimize lock is held)."""
        live = self._home / edge_optimize.LIVE
        prev = self._home / edge_optimize.PREV
        self._close_shard(parked=False)
        live.rename(prev)
        (self._home / edge_optimize.NEXT).rename(live)
        try:
            self._shard = self._open_shard()
        except VectorIndexError:
            # Back to the shard we had: it is complete.
            shutil.rmtree(live, ignore_errors=True)
            prev.rename(live)
            self._shard = self._open_shard()
            raise
        finally:
            if self._shard is not None:
                self._slots.opened(self)
        shutil.rmtree(prev, ignore_errors=True)
