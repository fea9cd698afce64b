"""What both adapters share: shard names, BM25 encoding, search checks, hit assembly.

Both adapters tokenize with Qdrant Edge's built-in `Bm25` (client-side, also for a server):
documents and queries of a shard are then tokenized identically whatever the engine, no model
is ever downloaded (Mem0's and qdrant-client's BM25 paths need `fastembed`, which fetches its
model at run time), and a shard can move between engines by `scroll` + `upsert`. The IDF part
of BM25 is the engine's (the `Idf` modifier of the sparse vector), computed over the searching
end user's own points: scores never depend on another user's data.
"""

from __future__ import annotations

import functools
import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TypeAlias

import qdrant_edge

from memory_bridge.vectors.fusion import rrf_fuse
from memory_bridge.vectors.index import (
    DENSE,
    SPARSE,
    HybridHit,
    PointPayload,
    ShardKey,
    StoredPoint,
    VectorIndexError,
    Where,
    canonical_id,
    check_dense,
)

__all__ = [
    "Bm25Encoder",
    "Bm25Settings",
    "IndexBase",
    "Ranked",
    "SearchPlan",
    "assemble_hits",
    "model_slug",
    "plan_search",
    "shard_name",
]

# Keyword payload indexes of every shard (`user` is the tenant field), and a float index for
# time windows. Without the keyword index a filtered query scans every point of the shard.
KEYWORD_FIELDS = ("user", "session", "kind", "event_id", "entities")
FLOAT_FIELDS = ("created_at",)
MAX_LIMIT = 1_000

_TOKENIZERS = {
    "multilingual": qdrant_edge.TokenizerType.Multilingual,
    "word": qdrant_edge.TokenizerType.Word,
    "whitespace": qdrant_edge.TokenizerType.Whitespace,
}


@dataclass(frozen=True, slots=True)
class Bm25Settings:
    """The BM25 tokenizer and term-frequency parameters of a shard; fixed at its creation.

    The multilingual tokenizer splits CJK text into words and treats Latin text like the
    `word` tokenizer; `language` picks stop words and the stemmer. `avg_len` (the expected
    document length in tokens) stays at Qdrant's 256 although messages are far shorter: the
    length normalisation then almost vanishes, which recalled best of the values tried on LoCoMo
    (docs/performance.md, "bench_recall.py: recall quality on LoCoMo").
    """

    language: str = "english"
    tokenizer: str = "multilingual"
    k: float = 1.2
    b: float = 0.75
    avg_len: float = 256.0

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: object) -> Bm25Settings:
        if not isinstance(raw, dict):
            raise VectorIndexError(f"stored BM25 settings are not an object: {raw!r}")
        try:
            return cls(
                language=str(raw["language"]),
                tokenizer=str(raw["tokenizer"]),
                k=float(raw["k"]),
                b=float(raw["b"]),
                avg_len=float(raw["avg_len"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise VectorIndexError(f"stored BM25 settings are invalid: {raw!r}") from exc


# Texts whose BM25 term ids a `Bm25Encoder` remembers.
TERMS_CACHE = 1024


class Bm25Encoder:
    """Text to sparse vectors with the engine's tokenizer (thread-safe: no Python state)."""

    def __init__(self, settings: Bm25Settings) -> None:
        tokenizer = _TOKENIZERS.get(settings.tokenizer)
        if tokenizer is None:
            raise VectorIndexError(
                f"unknown BM25 tokenizer {settings.tokenizer!r}; one of {sorted(_TOKENIZERS)}"
            )
        self.settings = settings
        try:
            self._model = qdrant_edge.Bm25(
                qdrant_edge.Bm25Config(
                    k=settings.k,
                    b=settings.b,
                    avg_len=settings.avg_len,
                    tokenizer=tokenizer,
                    language=settings.language,
                )
            )
        except ValueError as exc:
            raise VectorIndexError(f"invalid BM25 settings {settings}: {exc}") from exc
        # A search reads the terms of each of its hits (their coverage of the query), and the
        # same memories come back for query after query: re-encoding them was a twentieth of a
        # loaded proxy's GIL time. Bounded; the texts are the stored, bounded form.
        self.terms = functools.lru_cache(maxsize=TERMS_CACHE)(self._terms)

    def document(self, text: str) -> qdrant_edge.SparseVector:
        return self._model.embed_document(text)

    def _terms(self, text: str) -> frozenset[int]:
        """The BM25 term ids of a text (stemmed, stop words dropped)."""
        return frozenset(self._model.embed_document(text).indices)

    def query(self, text: str) -> qdrant_edge.SparseVector | None:
        """None when no token is left (empty text, or stop words only)."""
        vector = self._model.embed_query(text)
        return vector if vector.indices else None


def model_slug(model_id: str) -> str:
    """A file- and collection-safe name for a model id; the hash keeps distinct ids apart."""
    base = re.sub(r"[^a-z0-9._-]+", "-", model_id.lower()).strip("-.")[:40] or "model"
    digest = hashlib.sha256(model_id.encode()).hexdigest()[:8]
    return f"{base}-{digest}"


def shard_name(key: ShardKey) -> str:
    # The dimension is in the name: a model whose size changes gets a new, empty shard
    # instead of sharing one with vectors it cannot be compared with.
    return f"{model_slug(key.model_id)}-d{key.dims}"


@dataclass(frozen=True, slots=True)
class SearchPlan:
    where: Where  # with the user set
    dense: list[float] | None
    sparse: qdrant_edge.SparseVector | None
    limit: int
    prefetch_limit: int
    weights: dict[str, float]
    rrf_k: int


def plan_search(
    key: ShardKey,
    encoder: Bm25Encoder,
    *,
    user: str,
    query_dense: Sequence[float] | None,
    query_text: str | None,
    where: Where | None,
    limit: int,
    prefetch_limit: int,
    dense_weight: float,
    sparse_weight: float,
    rrf_k: int,
) -> SearchPlan:
    """Check a hybrid search's arguments once, for both adapters."""
    if not 1 <= limit <= MAX_LIMIT:
        raise VectorIndexError(f"limit must be in 1..{MAX_LIMIT}, got {limit}")
    if not limit <= prefetch_limit <= MAX_LIMIT:
        raise VectorIndexError(
            f"prefetch_limit must be in {limit}..{MAX_LIMIT}, got {prefetch_limit}"
        )
    if dense_weight < 0 or sparse_weight < 0:
        raise VectorIndexError("fusion weights must be >= 0")
    if rrf_k < 1:
        raise VectorIndexError(f"rrf_k must be >= 1, got {rrf_k}")
    where = where or Where()
    if where.user is not None and where.user != user:
        raise VectorIndexError("where.user must be absent or equal to the searching user")
    return SearchPlan(
        where=replace(where, user=user),
        dense=check_dense(query_dense, key, "query"),
        sparse=encoder.query(query_text) if query_text else None,
        limit=limit,
        prefetch_limit=prefetch_limit,
        weights={DENSE: dense_weight, SPARSE: sparse_weight},
        rrf_k=rrf_k,
    )


# An engine list: (point id, engine score), best first.
Ranked: TypeAlias = Sequence[tuple[str, float]]


def assemble_hits(
    plan: SearchPlan,
    dense: Ranked,
    sparse: Ranked,
    payloads: Callable[[list[str]], dict[str, PointPayload]],
    terms: Callable[[str], frozenset[int]] | None = None,
) -> list[HybridHit]:
    """Fuse the two engine lists, cut at the plan's limit, and read only the kept payloads.

    The engine lists carry no payload: converting 2 x `prefetch_limit` payloads to Python
    cost more than the search itself. A point deleted between the search and the read of
    its payload is left out.
    """
    fused = rrf_fuse({DENSE: dense, SPARSE: sparse}, k=plan.rrf_k, weights=plan.weights)
    kept = fused[: plan.limit]
    found = payloads([item.id for item in kept]) if kept else {}
    hits: list[HybridHit] = []
    asked = frozenset(plan.sparse.indices) if plan.sparse is not None else frozenset()
    for item in kept:
        payload = found.get(item.id)
        if payload is None:
            continue
        coverage = None
        if asked and terms is not None:
            coverage = round(len(asked & terms(payload.text)) / len(asked), 4)
        dense_rank, dense_score = item.ranks.get(DENSE, (None, None))
        sparse_rank, sparse_score = item.ranks.get(SPARSE, (None, None))
        hits.append(
            HybridHit(
                id=item.id,
                payload=payload,
                rank=len(hits) + 1,
                fused_score=item.fused_score,
                dense_score=dense_score,
                dense_rank=dense_rank,
                sparse_score=sparse_score,
                sparse_rank=sparse_rank,
                sparse_coverage=coverage,
                query_terms=len(asked),
            )
        )
    return hits


class IndexBase(ABC):
    """The engine-neutral half of a `VectorIndex`: argument checks, paging, fusion.

    An adapter translates four primitives to its engine; everything callers can observe
    beyond the engine's own answers is decided here, once for both adapters.
    """

    def __init__(self, key: ShardKey, encoder: Bm25Encoder) -> None:
        self._key = key
        self._encoder = encoder

    @property
    def key(self) -> ShardKey:
        return self._key

    def count(self, where: Where | None = None) -> int:
        where = where or Where()
        return 0 if where.matches_nothing() else self._count(where)

    def retrieve(self, ids: Sequence[str]) -> dict[str, PointPayload]:
        wanted = [canonical_id(i) for i in ids]
        return self._payloads(wanted) if wanted else {}

    def delete_where(self, where: Where) -> None:
        if where.is_empty():
            raise VectorIndexError("delete_where needs a filter; use drop_token to drop a shard")
        if not where.matches_nothing():
            self._delete_where(where)

    def scroll(
        self, where: Where | None = None, *, batch: int = 256, with_dense: bool = False
    ) -> Iterator[StoredPoint]:
        where = where or Where()
        if where.matches_nothing():
            return
        offset: str | None = None
        while True:
            # One engine call per page: no lock is held while the caller consumes a page.
            page, offset = self._scroll_page(where, offset, max(1, batch), with_dense)
            yield from page
            if offset is None:
                return

    def hybrid_search(
        self,
        *,
        user: str,
        query_dense: Sequence[float] | None,
        query_text: str | None,
        where: Where | None = None,
        limit: int = 10,
        prefetch_limit: int = 50,
        dense_weight: float = 1.0,
        sparse_weight: float = 1.0,
        rrf_k: int = 60,
    ) -> list[HybridHit]:
        plan = plan_search(
            self._key,
            self._encoder,
            user=user,
            query_dense=query_dense,
            query_text=query_text,
            where=where,
            limit=limit,
            prefetch_limit=prefetch_limit,
            dense_weight=dense_weight,
            sparse_weight=sparse_weight,
            rrf_k=rrf_k,
        )
        if plan.where.matches_nothing() or (plan.dense is None and plan.sparse is None):
            return []
        dense, sparse = self._search(plan)
        return assemble_hits(plan, dense, sparse, self._payloads, self._encoder.terms)

    @abstractmethod
    def _count(self, where: Where) -> int: ...

    @abstractmethod
    def _delete_where(self, where: Where) -> None: ...

    @abstractmethod
    def _scroll_page(
        self, where: Where, offset: str | None, limit: int, with_dense: bool
    ) -> tuple[list[StoredPoint], str | None]:
        """One page in id order, and the id to start the next page from (None: the end)."""

    @abstractmethod
    def _search(self, plan: SearchPlan) -> tuple[Ranked, Ranked]:
        """The dense and the BM25 list, in ONE engine request, filtered by the plan's `where`;
        a list whose query the plan lacks is empty. The BM25 list's IDF is computed over the
        plan's user's points."""

    @abstractmethod
    def _payloads(self, ids: list[str]) -> dict[str, PointPayload]:
        """The payloads of these points (those that still exist)."""
