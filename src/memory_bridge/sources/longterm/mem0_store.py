"""Mem0's vector store, implemented over one shard of MemoryBridge's vector engine.

`EngineStore` implements Mem0's public `VectorStoreBase` (the interface every Mem0 vector
store implements) on a `vectors.VectorIndex`: the embedded Qdrant Edge shard of the token, or
its collection on a Qdrant server. Mem0 only ever sees this object (`instance` binds it), so
its reads and writes go through the engine's thread-safe calls, with the engine's payload
indexes on the namespace fields; how a memory maps to a point is `points`.

Imports Mem0: load this module only from the memory thread pool (see `instance`).

- `search` is the engine's dense list, filtered; Mem0's score is the cosine similarity. A
  search across every end user of the token (`user_id="*"`, the admin search) has no engine
  query (an engine search is always one end user's): it compares the query with every
  selected point's vector here, exactly, which is fine for an admin's occasional search.
- `keyword_search` is left to the base class (None: dense only), as Mem0 ran here before; the
  episodic index is where BM25 recall lives.
- `delete_col`/`reset` drop this store's points (its `kind`) from the shard, nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mem0.vector_stores.base import VectorStoreBase  # type: ignore[import-untyped]

from memory_bridge.sources.longterm.points import Selection, select, to_mem0, to_point
from memory_bridge.vectors.index import StoredPoint, VectorIndex, VectorIndexError

__all__ = ["EngineStore", "Found"]

# `EngineStore.list` (Mem0's name) shadows the builtin inside the class.
Founds = list["Found"]

_MAX_SEARCH = 1_000  # the engine's limit per list


@dataclass(frozen=True, slots=True)
class Found:
    """One answer, shaped as Mem0 reads them (`id`, `score`, `payload`)."""

    id: str
    payload: dict[str, Any] = field(default_factory=dict)
    score: float | None = None


class EngineStore(VectorStoreBase):  # type: ignore[misc]
    def __init__(self, index: VectorIndex, token_id: int, kind: str) -> None:
        self.index = index
        self.token_id = token_id
        self.kind = kind

    # -- writes -----------------------------------------------------------------------------

    def create_col(self, name: Any = None, vector_size: Any = None, distance: Any = None) -> None:
        """Nothing to do: the engine creates the shard when it is first opened."""

    def insert(
        self, vectors: Sequence[Any], payloads: Sequence[Any] | None = None, ids: Any = None
    ) -> None:
        if ids is None:
            raise VectorIndexError("every memory needs an id")
        rows = payloads or [{}] * len(vectors)
        points = [
            to_point(self.token_id, self.kind, str(i), vector, payload)
            for i, vector, payload in zip(ids, vectors, rows, strict=True)
        ]
        self.index.upsert(points)

    def update(self, vector_id: Any, vector: Any = None, payload: Any = None) -> None:
        point_id = str(vector_id)
        if payload is None or vector is None:
            current = self._stored(point_id)
            if current is None:
                raise VectorIndexError(f"no memory {point_id}")
            if payload is None:
                payload = to_mem0(self.token_id, current.payload)
            if vector is None:
                vector = current.dense
        self.index.upsert([to_point(self.token_id, self.kind, point_id, vector, payload)])

    def delete(self, vector_id: Any) -> None:
        self.index.delete([str(vector_id)])

    def delete_col(self) -> None:
        self.index.delete_where(select(self.token_id, self.kind, None).where)

    def reset(self) -> None:
        self.delete_col()

    # -- reads ------------------------------------------------------------------------------

    def get(self, vector_id: Any) -> Found | None:
        try:
            found = self.index.retrieve([str(vector_id)])
        except VectorIndexError:
            return None  # not a point id at all
        for point_id, payload in found.items():
            if payload.kind == self.kind:
                return Found(point_id, to_mem0(self.token_id, payload))
        return None

    def search(
        self, query: Any, vectors: Sequence[float], top_k: int = 5, filters: Any = None
    ) -> Founds:
        chosen = select(self.token_id, self.kind, filters)
        limit = max(1, min(int(top_k), _MAX_SEARCH))
        if chosen.user is None:
            return self._search_everyone(chosen, vectors, limit)
        deeper = _MAX_SEARCH if chosen.equal else limit
        hits = self.index.hybrid_search(
            user=chosen.user,
            query_dense=vectors,
            query_text=None,
            where=chosen.where,
            limit=deeper,
            prefetch_limit=deeper,
        )
        out = []
        for hit in hits:
            payload = to_mem0(self.token_id, hit.payload)
            if chosen.accepts(payload):
                out.append(Found(hit.id, payload, hit.dense_score))
        return out[:limit]

    def list(self, filters: Any = None, top_k: int | None = None) -> list[Founds]:
        """Mem0 reads the first element: the matching points, at most `top_k` (None: all)."""
        rows: list[Found] = []
        for point in self._scroll(select(self.token_id, self.kind, filters)):
            rows.append(Found(point.id, to_mem0(self.token_id, point.payload)))
            if top_k is not None and len(rows) >= top_k:
                break
        return [rows]

    def list_cols(self) -> Any:
        key = self.index.key
        return [f"t{key.token_id}/{key.model_id}/d{key.dims}"]

    def col_info(self) -> dict[str, Any]:
        key, stats = self.index.key, self.index.stats()
        return {"model_id": key.model_id, "dims": key.dims, "points": stats.points}

    # -- internals --------------------------------------------------------------------------

    def _scroll(self, chosen: Selection, *, with_dense: bool = False) -> Iterator[StoredPoint]:
        for point in self.index.scroll(chosen.where, with_dense=with_dense):
            if chosen.accepts(to_mem0(self.token_id, point.payload)):
                yield point

    def _stored(self, point_id: str) -> StoredPoint | None:
        """One point with its vector (the engine reads vectors only by scrolling)."""
        found = self.index.retrieve([point_id]).get(point_id)
        if found is None or found.kind != self.kind:
            return None
        chosen = select(self.token_id, self.kind, None)
        where = replace(chosen.where, user=found.user, event_id=found.event_id)
        for point in self.index.scroll(where, with_dense=True):
            if point.id == point_id:
                return point
        return None

    def _search_everyone(self, chosen: Selection, vector: Sequence[float], limit: int) -> Founds:
        scored = []
        for point in self._scroll(chosen, with_dense=True):
            if point.dense is not None:
                scored.append((_cosine(vector, point.dense), point))
        scored.sort(key=lambda pair: (-pair[0], pair[1].id))
        return [
            Found(p.id, to_mem0(self.token_id, p.payload), score) for score, p in scored[:limit]
        ]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
