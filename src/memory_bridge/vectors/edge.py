"""The embedded adapter: one Qdrant Edge shard per (token, model, dims) in the data directory.

Layout: ``<data>/vectors/t<token>/<model-slug>-d<dims>/`` holds ``meta.json`` (what the shard
is, and the BM25 settings its documents were tokenized with) and ``shard/`` (the engine's).

Thread safety: every engine call holds the GIL (measured), so engine calls never run in
parallel anyway; the locks here only make our compound steps atomic. Writes take the write
lock, reads the read lock, and only `close` and the swap at the end of `optimize` take both,
so reads go on while an optimisation copies or replays. The engine itself refuses a second
owner of a shard (its WAL is locked), also from another process.
"""

from __future__ import annotations

import json
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
    shard_name,
)
from memory_bridge.vectors.edge_schema import (
    META,
    copy_points,
    dense_of,
    edge_config,
    edge_filter,
    ensure_room,
    index_params,
    ranked,
    settle_meta,
)
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

__all__ = ["EdgeEngine", "EdgeIndex"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class EdgeEngine:
    """Opens embedded shards under ``<data_dir>/vectors``; one engine per process."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        bm25: Bm25Settings | None = None,
        optimize_timeout: float = 3600.0,
        min_free_bytes: int = 0,
    ) -> None:
        self._root = Path(data_dir) / "vectors"
        self._min_free = min_free_bytes
        self._bm25 = bm25 or Bm25Settings()
        self._optimize_timeout = optimize_timeout
        self._lock = threading.Lock()
        self._open: dict[ShardKey, EdgeIndex] = {}
        self._closed = False

    def index(self, token_id: int, model_id: str, dims: int) -> EdgeIndex:
        key = ShardKey(token_id, model_id, dims)
        with self._lock:
            if self._closed:
                raise IndexClosed("the vector engine is closed")
            found = self._open.get(key)
            if found is None or found.closed:
                home = self._root / f"t{token_id}" / shard_name(key)
                if not home.exists():
                    ensure_room(self._root, self._min_free)
                found = EdgeIndex(
                    home,
                    key,
                    self._bm25,
                    optimize_timeout=self._optimize_timeout,
                    min_free_bytes=self._min_free,
                )
                self._open[key] = found
            return found

    def existing(self, token_id: int, model_id: str, dims: int) -> EdgeIndex | None:
        key = ShardKey(token_id, model_id, dims)
        with self._lock:
            found = self._open.get(key)
            if found is not None and not found.closed:
                return found
        if not (self._root / f"t{token_id}" / shard_name(key) / META).is_file():
            return None
        return self.index(token_id, model_id, dims)

    def drop_token(self, token_id: int) -> int:
        with self._lock:
            for key in [k for k in self._open if k.token_id == token_id]:
                self._open.pop(key).close()
            home = self._root / f"t{token_id}"
            if not home.exists():
                return 0
            shards = sum(1 for child in home.iterdir() if child.is_dir())
            shutil.rmtree(home)
            return shards

    def drop_shard(self, token_id: int, model_id: str, dims: int) -> bool:
        key = ShardKey(token_id, model_id, dims)
        with self._lock:
            found = self._open.pop(key, None)
            if found is not None:
                found.close()
            home = self._root / f"t{token_id}" / shard_name(key)
            if not home.exists():
                return False
            shutil.rmtree(home)
            return True

    def shards(self, token_id: int) -> list[ShardKey]:
        home = self._root / f"t{token_id}"
        if not home.is_dir():
            return []
        found = []
        for meta in sorted(home.glob(f"*/{META}")):
            try:
                data = json.loads(meta.read_text())
                found.append(ShardKey(token_id, str(data["model_id"]), int(data["dims"])))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise VectorIndexError(f"vector shard {meta.parent}: unreadable {META}") from exc
        return found

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for found in self._open.values():
                found.close()
            self._open.clear()


class EdgeIndex(IndexBase):
    def __init__(
        self,
        home: Path,
        key: ShardKey,
        bm25: Bm25Settings,
        *,
        optimize_timeout: float,
        min_free_bytes: int = 0,
    ) -> None:
        self._home = home
        self._min_free = min_free_bytes
        self._optimize_timeout = optimize_timeout
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._optimize_lock = threading.Lock()
        # Writes made while an optimisation runs, replayed onto the optimised copy.
        self._journal: list[qe.UpdateOperation] | None = None
        self._closed = False
        # Memories are private: every level we create is owner-only (mkdir's mode only
        # applies to the last level of parents=True).
        home.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for level in (home.parent, home):
            level.mkdir(exist_ok=True, mode=0o700)
        edge_optimize.recover(home)
        super().__init__(key, Bm25Encoder(settle_meta(self._home, key, bm25)))
        self._shard = self._open_shard()

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
            # Reading without the read lock is safe here: only close and the swap replace
            # the shard, and both need the write lock held here.
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
                self._shard.close()

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
        if self._closed:
            raise IndexClosed(f"vector shard {self._home} is closed")
        return self._shard

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
        """Put the optimised copy live; both locks held."""
        live = self._home / edge_optimize.LIVE
        prev = self._home / edge_optimize.PREV
        self._shard.close()
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
        shutil.rmtree(prev, ignore_errors=True)
