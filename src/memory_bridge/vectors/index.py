"""The index interface every vector engine adapter implements, and the values it speaks.

One *index* is one shard: the points of one token and one embedding model (and dimension).
The embedded adapter (`vectors.edge`) keeps it as a Qdrant Edge shard in the data directory;
the server adapter (`vectors.server`) as a Qdrant collection. Callers never see either
engine's types: they pass `VectorPoint`s and `Where`s and get `HybridHit`s back.

The calls are synchronous (callers run them in a bounded thread pool) and thread-safe within
one process. One shard is owned by one process.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

__all__ = [
    "DENSE",
    "SPARSE",
    "DimensionMismatch",
    "HybridHit",
    "IndexClosed",
    "IndexStats",
    "JSONValue",
    "NoRoom",
    "PointPayload",
    "ShardKey",
    "ShardState",
    "StoredPoint",
    "VectorEngine",
    "VectorIndex",
    "VectorIndexError",
    "VectorPoint",
    "Where",
    "canonical_id",
    "check_dense",
]

# Named vectors of every shard, the same in both adapters.
DENSE = "dense"
SPARSE = "bm25"

JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None


class VectorIndexError(Exception):
    """A vector index refused an operation or could not carry it out."""


class DimensionMismatch(VectorIndexError, ValueError):
    """A dense vector whose length is not the shard's dimension."""


class IndexClosed(VectorIndexError):
    """The index (or its engine) was closed."""


class NoRoom(VectorIndexError):
    """The disk under the embedded engine is nearly full: nothing is created or written.

    The engine maps its files into memory, and a write into a mapped page the file system
    cannot back kills the whole process (SIGBUS) instead of raising: so writes stop early."""


@dataclass(frozen=True, slots=True)
class ShardKey:
    """Which shard: the stable token id (never the secret), the embedding model, its size.

    `dims == 0` is a sparse-only shard (BM25 alone): a token without any embedder.
    """

    token_id: int
    model_id: str
    dims: int

    def __post_init__(self) -> None:
        if self.token_id < 1:
            raise ValueError(f"token_id must be positive, got {self.token_id}")
        if not self.model_id:
            raise ValueError("model_id must not be empty")
        if not 0 <= self.dims <= 65_536:
            raise ValueError(f"dims must be in 0..65536, got {self.dims}")


@dataclass(frozen=True, slots=True)
class PointPayload:
    """What is stored with a point: the namespace fields, the text, and anything else."""

    user: str
    kind: str
    text: str
    session: str | None = None
    event_id: str | None = None
    created_at: float = 0.0
    extra: Mapping[str, JSONValue] = field(default_factory=dict)
    # Normalised keys of the entities the text names (`core.entities`): the entity index of
    # the relational fetch, kept with the point so it is rebuilt and erased with it.
    entities: tuple[str, ...] = ()

    def to_json(self) -> dict[str, JSONValue]:
        # `extra` stays nested so it can never shadow a namespace field a filter relies on.
        return {
            "user": self.user,
            "kind": self.kind,
            "text": self.text,
            "session": self.session,
            "event_id": self.event_id,
            "created_at": self.created_at,
            "extra": dict(self.extra),
            "entities": list(self.entities),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, object] | None) -> PointPayload:
        """Read back a stored payload; a field of the wrong type reads as absent."""
        data = raw or {}
        created = data.get("created_at")
        extra = data.get("extra")
        entities = data.get("entities")
        return cls(
            user=_str_or(data.get("user"), ""),
            kind=_str_or(data.get("kind"), ""),
            text=_str_or(data.get("text"), ""),
            session=_opt_str(data.get("session")),
            event_id=_opt_str(data.get("event_id")),
            created_at=float(created) if isinstance(created, int | float) else 0.0,
            extra=extra if isinstance(extra, dict) else {},
            entities=tuple(e for e in entities if isinstance(e, str))
            if isinstance(entities, list)
            else (),
        )


@dataclass(frozen=True, slots=True)
class VectorPoint:
    """One point to upsert. `id` is a UUID string (any spelling; stored canonical).

    The sparse vector is computed by the adapter from `index_text` (default: `payload.text`)
    with the engine's BM25 tokenizer, so a message can be keyword-indexed together with its
    context while the stored text stays the message alone.
    """

    id: str
    dense: Sequence[float] | None
    payload: PointPayload
    index_text: str | None = None

    @property
    def sparse_text(self) -> str:
        return self.payload.text if self.index_text is None else self.index_text


@dataclass(frozen=True, slots=True)
class Where:
    """A filter on the namespace fields; every given field must match (AND).

    A field is one value or a collection of values (any of them). An empty collection matches
    nothing. `created_at` is bounded by `created_from` (inclusive) and `created_before`.
    """

    user: str | Collection[str] | None = None
    session: str | Collection[str] | None = None
    kind: str | Collection[str] | None = None
    event_id: str | Collection[str] | None = None
    entities: str | Collection[str] | None = None  # any of these entity keys is named
    created_from: float | None = None
    created_before: float | None = None

    def matchers(self) -> list[tuple[str, str | tuple[str, ...]]]:
        """(field, value or values) for every keyword condition given, in a stable order."""
        out: list[tuple[str, str | tuple[str, ...]]] = []
        for name in ("user", "session", "kind", "event_id", "entities"):
            value = _normalise(getattr(self, name))
            if value is not None:
                out.append((name, value))
        return out

    def matches_nothing(self) -> bool:
        return any(value == () for _, value in self.matchers())

    def is_empty(self) -> bool:
        return not self.matchers() and self.created_from is None and self.created_before is None


@dataclass(frozen=True, slots=True)
class HybridHit:
    """One fused result, with what the Forge needs to rank it and to write its trace.

    Ranks are 1-based positions in each engine list (None: not in that list). `fused_score`
    is weighted RRF: sum of weight / (k + rank) over the lists the point is in.
    """

    id: str
    payload: PointPayload
    rank: int
    fused_score: float
    dense_score: float | None
    dense_rank: int | None
    sparse_score: float | None
    sparse_rank: int | None
    # The fraction of the query's BM25 terms (after the tokenizer's stemming and stop words)
    # found in the stored text: unlike the BM25 score, comparable across queries and across
    # shards of any size. None without a keyword query.
    sparse_coverage: float | None = None
    query_terms: int = 0  # how many BM25 terms the query has


@dataclass(frozen=True, slots=True)
class StoredPoint:
    """A point read back by `scroll` (for export and rebuilds)."""

    id: str
    payload: PointPayload
    dense: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class ShardState:
    """The embedded engine's bound on open shards, now (`/metrics`)."""

    open: int  # engine shards open (over `bound` only while every open one is busy)
    parked: int  # shards closed to make room, reopened on their next use
    bound: int  # VECTOR_MAX_OPEN_SHARDS (0: no bound)


@dataclass(frozen=True, slots=True)
class IndexStats:
    points: int
    indexed_vectors: int
    segments: int


class VectorIndex(Protocol):
    """One shard. Every method may raise `VectorIndexError` (and `IndexClosed` after close)."""

    @property
    def key(self) -> ShardKey: ...

    def upsert(self, points: Sequence[VectorPoint]) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...

    def delete_where(self, where: Where) -> None:
        """Delete every point matching `where` (erasure of an event, a session, a user).

        An empty `where` is refused: dropping a whole shard is `VectorEngine.drop_token`.
        """
        ...

    def count(self, where: Where | None = None) -> int: ...

    def retrieve(self, ids: Sequence[str]) -> dict[str, PointPayload]:
        """The payloads of those of these points that exist, by canonical id."""
        ...

    def scroll(
        self, where: Where | None = None, *, batch: int = 256, with_dense: bool = False
    ) -> Iterator[StoredPoint]:
        """Every matching point once, in id order, fetched `batch` at a time."""
        ...

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
        """Dense and BM25 lists (each `prefetch_limit` deep) of one end user, fused.

        `user` is required: a search never crosses end users. `where.user`, if given, must
        be the same user. Either query may be None (or, for text, have no token left after
        stop words): the other list alone is then ranked.
        """
        ...

    def optimize(self) -> bool:
        """Build indexes and merge segments. Slow: never call it on a request's path."""
        ...

    def compact(self) -> bool:
        """Rewrite the stored data without what was deleted (erasure: deleted payloads must
        not stay on disk). Blocks writes for as long as it runs; False if nothing to do."""
        ...

    def stats(self) -> IndexStats: ...

    def close(self) -> None: ...


class VectorEngine(Protocol):
    """Opens shards; one engine per process and storage."""

    def index(self, token_id: int, model_id: str, dims: int) -> VectorIndex:
        """The shard of (token, model, dims), created on first use; the same object after."""
        ...

    def existing(self, token_id: int, model_id: str, dims: int) -> VectorIndex | None:
        """The shard if it was ever created, else None: a read path creates nothing (creating
        an embedded shard is file work no request should pay for)."""
        ...

    def drop_token(self, token_id: int) -> int:
        """Delete every shard of a token (erasure); returns how many there were."""
        ...

    def drop_shard(self, token_id: int, model_id: str, dims: int) -> bool:
        """Delete one shard (the old one after a rebuild switched); False if it was absent."""
        ...

    def shards(self, token_id: int) -> list[ShardKey]:
        """Every shard the token has (every model it ever used), without creating any."""
        ...

    def shard_state(self) -> ShardState | None:
        """The bound on open shards, now; None for an engine without one (a server)."""
        ...

    def close(self) -> None: ...


def canonical_id(point_id: str) -> str:
    """The canonical spelling of a UUID point id; anything else is refused."""
    try:
        return str(uuid.UUID(point_id))
    except (ValueError, TypeError, AttributeError) as exc:
        raise VectorIndexError(f"point id must be a UUID string, got {point_id!r}") from exc


def check_dense(vector: Sequence[float] | None, key: ShardKey, what: str) -> list[float] | None:
    """The vector as floats, checked against the shard's dimension (and for NaN/inf)."""
    if key.dims == 0:
        if vector is not None and len(vector) > 0:
            raise DimensionMismatch(
                f"{what}: shard {key.model_id!r} of token {key.token_id} is sparse-only "
                f"(dims 0) but got a dense vector of {len(vector)}"
            )
        return None
    if vector is None:
        return None
    if len(vector) != key.dims:
        raise DimensionMismatch(
            f"{what}: shard {key.model_id!r} of token {key.token_id} has dims {key.dims}, "
            f"got a vector of {len(vector)}"
        )
    out = list(map(float, vector))
    # One sum instead of a check per element: NaN and infinity both survive a sum (a sum of
    # huge finite values may overflow too: such a vector is refused as well, rightly).
    if not math.isfinite(sum(out)):
        raise VectorIndexError(f"{what}: the dense vector holds NaN or infinity")
    return out


def _normalise(value: str | Collection[str] | None) -> str | tuple[str, ...] | None:
    if value is None or isinstance(value, str):
        return value
    return tuple(value)


def _str_or(value: object, default: str) -> str:
    return value if isinstance(value, str) else default


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None
