"""The server adapter: one Qdrant collection per (token, model, dims), through qdrant-client.

The collection is named ``<prefix>_t<token>_<model-slug>-d<dims>`` and carries what it is
(and its BM25 settings) in its metadata. The queries are those of the embedded adapter: one
batch of a dense and a BM25 query, each filtered and `prefetch_limit` deep, fused here.

`ServerEngine.local()` opens qdrant-client's local mode (in memory or a directory), which
speaks the same client API: the tests run the same suite against it. Local mode is pure Python
and not thread-safe, so there every call takes one engine-wide lock; a remote client is
thread-safe and takes none.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from qdrant_client import QdrantClient, models

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
from memory_bridge.vectors.index import (
    DENSE,
    SPARSE,
    DimensionMismatch,
    IndexClosed,
    IndexStats,
    PointPayload,
    ShardKey,
    ShardState,
    StoredPoint,
    VectorIndexError,
    VectorPoint,
    Where,
    canonical_id,
    check_dense,
)

__all__ = ["ServerEngine", "ServerIndex"]

T = TypeVar("T")
META_KEY = "memory_bridge"


class ServerEngine:
    def __init__(
        self,
        client: QdrantClient,
        *,
        bm25: Bm25Settings | None = None,
        prefix: str = "mb",
        serialize: bool = False,
    ) -> None:
        self._client = client
        self._bm25 = bm25 or Bm25Settings()
        self._prefix = prefix
        self._guard: contextlib.AbstractContextManager[object] = (
            threading.RLock() if serialize else contextlib.nullcontext()
        )
        self._lock = threading.Lock()
        self._open: dict[ShardKey, ServerIndex] = {}
        # One encoder per BM25 settings, shared by the collections made with them: the only
        # per-token cost on this side is then the small `ServerIndex` (no thread, no file).
        self._encoders: dict[Bm25Settings, Bm25Encoder] = {}
        self._closed = False

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        api_key: str | None = None,
        timeout: int = 10,
        bm25: Bm25Settings | None = None,
        prefix: str = "mb",
    ) -> ServerEngine:
        client = QdrantClient(url=url, api_key=api_key or None, timeout=timeout)
        return cls(client, bm25=bm25, prefix=prefix)

    @classmethod
    def local(
        cls, location: str | Path = ":memory:", *, bm25: Bm25Settings | None = None
    ) -> ServerEngine:
        """qdrant-client's local mode: in memory (":memory:") or in a directory."""
        if str(location) == ":memory:":
            client = QdrantClient(location=":memory:")
        else:
            # Calls come from a thread pool; the engine-wide lock serialises them.
            client = QdrantClient(path=str(location), force_disable_check_same_thread=True)
        return cls(client, bm25=bm25, serialize=True)

    def collection_name(self, key: ShardKey) -> str:
        return f"{self._prefix}_t{key.token_id}_{shard_name(key)}"

    def index(self, token_id: int, model_id: str, dims: int) -> ServerIndex:
        key = ShardKey(token_id, model_id, dims)
        with self._lock:
            if self._closed:
                raise IndexClosed("the vector engine is closed")
            found = self._open.get(key)
            if found is None:
                name = self.collection_name(key)
                settings = self._settle(name, key)
                encoder = self._encoders.get(settings)
                if encoder is None:
                    encoder = self._encoders[settings] = Bm25Encoder(settings)
                found = ServerIndex(self._client, name, key, encoder, self._guard)
                self._open[key] = found
            return found

    def existing(self, token_id: int, model_id: str, dims: int) -> ServerIndex | None:
        key = ShardKey(token_id, model_id, dims)
        with self._lock:
            found = self._open.get(key)
        if found is not None:
            return found
        name = self.collection_name(key)
        if not self._call(partial(self._client.collection_exists, name)):
            return None
        return self.index(token_id, model_id, dims)

    def drop_token(self, token_id: int) -> int:
        start = f"{self._prefix}_t{token_id}_"
        with self._lock:
            for key in [k for k in self._open if k.token_id == token_id]:
                self._open.pop(key).close()
            names = self._call(lambda: [c.name for c in self._client.get_collections().collections])
            dropped = [n for n in names if n.startswith(start)]
            for name in dropped:
                self._call(partial(self._client.delete_collection, name))
            return len(dropped)

    def drop_shard(self, token_id: int, model_id: str, dims: int) -> bool:
        key = ShardKey(token_id, model_id, dims)
        name = self.collection_name(key)
        with self._lock:
            found = self._open.pop(key, None)
            if found is not None:
                found.close()
            return bool(self._call(partial(self._client.delete_collection, name)))

    def shard_state(self) -> ShardState | None:
        return None  # a server keeps its collections; nothing here opens or closes them

    def shards(self, token_id: int) -> list[ShardKey]:
        start = f"{self._prefix}_t{token_id}_"
        names = self._call(lambda: [c.name for c in self._client.get_collections().collections])
        found = []
        for name in sorted(n for n in names if n.startswith(start)):
            info = self._call(partial(self._client.get_collection, name))
            meta = (info.config.metadata or {}).get(META_KEY)
            if isinstance(meta, dict):
                found.append(ShardKey(token_id, str(meta.get("model_id")), int(meta["dims"])))
        return found

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for found in self._open.values():
                found.close()
            self._open.clear()
            self._call(self._client.close)

    def _settle(self, name: str, key: ShardKey) -> Bm25Settings:
        """Create the collection if needed; check an existing one and keep its BM25."""
        expect = {"token_id": key.token_id, "model_id": key.model_id, "dims": key.dims}
        if not self._call(lambda: self._client.collection_exists(name)):
            meta = {META_KEY: {**expect, "bm25": self._bm25.to_json()}}
            try:
                self._call(lambda: self._create(name, key, meta))
            except VectorIndexError:
                # Another process may have created it first; then it is checked below.
                if not self._call(lambda: self._client.collection_exists(name)):
                    raise
            else:
                return self._bm25
        info = self._call(lambda: self._client.get_collection(name))
        stored = (info.config.metadata or {}).get(META_KEY)
        found = {k: stored.get(k) for k in expect} if isinstance(stored, dict) else None
        if found != expect:
            raise DimensionMismatch(f"collection {name} holds {found}, not {expect}")
        return Bm25Settings.from_json(stored.get("bm25") if isinstance(stored, dict) else None)

    def _create(self, name: str, key: ShardKey, meta: dict[str, Any]) -> None:
        dense = (
            {DENSE: models.VectorParams(size=key.dims, distance=models.Distance.COSINE)}
            if key.dims
            else {}
        )
        self._client.create_collection(
            name,
            vectors_config=dense,
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            # Per-user graphs only, as in the embedded adapter (see vectors.edge).
            hnsw_config=models.HnswConfigDiff(m=0, payload_m=16),
            metadata=meta,
        )
        for field in KEYWORD_FIELDS + FLOAT_FIELDS:
            self._client.create_payload_index(name, field, field_schema=_index_params(field))

    def _call(self, call: Callable[[], T]) -> T:
        with self._guard:
            try:
                return call()
            except Exception as exc:
                raise VectorIndexError(f"qdrant: {exc}") from exc


class ServerIndex(IndexBase):
    def __init__(
        self,
        client: QdrantClient,
        name: str,
        key: ShardKey,
        encoder: Bm25Encoder,
        guard: contextlib.AbstractContextManager[object],
    ) -> None:
        super().__init__(key, encoder)
        self._client = client
        self._name = name
        self._guard = guard
        self._closed = False

    @property
    def name(self) -> str:
        return self._name

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        if points:
            structs = [self._point(p) for p in points]
            self._call(lambda: self._client.upsert(self._name, points=structs, wait=True))

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            selector = models.PointIdsList(points=[canonical_id(i) for i in ids])
            self._call(lambda: self._client.delete(self._name, selector, wait=True))

    def _delete_where(self, where: Where) -> None:
        flt = _filter(where)
        if flt is not None:
            selector = models.FilterSelector(filter=flt)
            self._call(lambda: self._client.delete(self._name, selector, wait=True))

    def _count(self, where: Where) -> int:
        flt = _filter(where)
        return self._call(lambda: self._client.count(self._name, flt, exact=True).count)

    def _scroll_page(
        self, where: Where, offset: str | None, limit: int, with_dense: bool
    ) -> tuple[list[StoredPoint], str | None]:
        flt = _filter(where)
        vectors: bool | list[str] = [DENSE] if with_dense and self._key.dims else False
        records, next_id = self._call(
            lambda: self._client.scroll(
                self._name,
                scroll_filter=flt,
                limit=limit,
                offset=offset,
                with_payload=True,
                with_vectors=vectors,
            )
        )
        page = [
            StoredPoint(
                id=str(record.id),
                payload=PointPayload.from_json(record.payload),
                dense=_dense_of(record.vector) if with_dense else None,
            )
            for record in records
        ]
        return page, None if next_id is None else str(next_id)

    def _search(self, plan: SearchPlan) -> tuple[Ranked, Ranked]:
        flt = _filter(plan.where)
        requests: list[models.QueryRequest] = []
        if plan.dense is not None:
            requests.append(
                models.QueryRequest(
                    query=plan.dense,
                    using=DENSE,
                    filter=flt,
                    limit=plan.prefetch_limit,
                    with_payload=False,
                )
            )
        if plan.sparse is not None:
            sparse = models.SparseVector(indices=plan.sparse.indices, values=plan.sparse.values)
            corpus = _filter(Where(user=plan.where.user))
            idf = models.IdfCorpusParams(corpus=corpus) if corpus else None
            requests.append(
                models.QueryRequest(
                    query=sparse,
                    using=SPARSE,
                    filter=flt,
                    limit=plan.prefetch_limit,
                    with_payload=False,
                    params=models.SearchParams(idf=idf),
                )
            )
        answers = self._call(lambda: self._client.query_batch_points(self._name, requests))
        results = [_ranked(answer.points) for answer in answers]
        dense = results.pop(0) if plan.dense is not None else []
        return dense, results.pop(0) if plan.sparse is not None else []

    def _payloads(self, ids: list[str]) -> dict[str, PointPayload]:
        records = self._call(
            lambda: self._client.retrieve(self._name, ids, with_payload=True, with_vectors=False)
        )
        return {str(r.id): PointPayload.from_json(r.payload) for r in records}

    def optimize(self) -> bool:
        """Nothing to do: a Qdrant server builds its indexes in the background by itself."""
        self._check_open()
        return False

    def compact(self) -> bool:
        """Nothing to do here: a Qdrant server's vacuum optimizer rewrites segments whose
        deleted share passes its `deleted_threshold` (docs/operations.md)."""
        self._check_open()
        return False

    def stats(self) -> IndexStats:
        info = self._call(lambda: self._client.get_collection(self._name))
        return IndexStats(
            points=info.points_count or 0,
            indexed_vectors=info.indexed_vectors_count or 0,
            segments=info.segments_count,
        )

    def close(self) -> None:
        # The client belongs to the engine, which closes it.
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise IndexClosed(f"collection {self._name} is closed")

    def _call(self, call: Callable[[], T]) -> T:
        self._check_open()
        with self._guard:
            try:
                return call()
            except Exception as exc:
                raise VectorIndexError(f"collection {self._name}: {exc}") from exc

    def _point(self, point: VectorPoint) -> models.PointStruct:
        point_id = canonical_id(point.id)
        dense = check_dense(point.dense, self._key, f"point {point_id}")
        if self._key.dims and dense is None:
            raise DimensionMismatch(f"point {point_id}: the shard needs a dense vector")
        sparse = self._encoder.document(point.sparse_text)
        vector: dict[str, models.Vector] = {
            SPARSE: models.SparseVector(indices=sparse.indices, values=sparse.values)
        }
        if dense is not None:
            vector[DENSE] = dense
        return models.PointStruct(id=point_id, vector=vector, payload=point.payload.to_json())


def _index_params(name: str) -> models.KeywordIndexParams | models.FloatIndexParams:
    if name == "user":
        return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
    if name in FLOAT_FIELDS:
        return models.FloatIndexParams(type=models.FloatIndexType.FLOAT, enable_hnsw=False)
    return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, enable_hnsw=False)


def _filter(where: Where) -> models.Filter | None:
    must: list[models.Condition] = []
    for name, value in where.matchers():
        match: models.MatchValue | models.MatchAny = (
            models.MatchValue(value=value)
            if isinstance(value, str)
            else models.MatchAny(any=list(value))
        )
        must.append(models.FieldCondition(key=name, match=match))
    if where.created_from is not None or where.created_before is not None:
        bounds = models.Range(gte=where.created_from, lt=where.created_before)
        must.append(models.FieldCondition(key="created_at", range=bounds))
    return models.Filter(must=must) if must else None


def _ranked(found: Sequence[models.ScoredPoint]) -> list[tuple[str, float]]:
    return [(str(p.id), p.score) for p in found]


def _dense_of(vector: object) -> tuple[float, ...] | None:
    if isinstance(vector, dict):
        dense = vector.get(DENSE)
        if isinstance(dense, list):
            return tuple(float(x) for x in dense)
    return None
