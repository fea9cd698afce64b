"""One suite, both vector adapters: embedded Qdrant Edge, and qdrant-client's local mode
standing in for a Qdrant server (it speaks the same client API).

Dense vectors are chosen by hand (unit directions and mixes of them) where a test needs a
precise dense ranking, and made by a hashing bag-of-words elsewhere: no model is loaded.
"""

from __future__ import annotations

import hashlib
import math
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from memory_bridge.vectors import (
    DimensionMismatch,
    IndexClosed,
    PointPayload,
    VectorEngine,
    VectorIndexError,
    VectorPoint,
    Where,
)
from memory_bridge.vectors.edge import EdgeEngine
from memory_bridge.vectors.server import ServerEngine

DIMS = 8
MODEL = "fake-model"

EngineFactory = Callable[[], VectorEngine]


def unit(i: int, dims: int = DIMS) -> list[float]:
    out = [0.0] * dims
    out[i] = 1.0
    return out


def mix(*parts: tuple[int, float], dims: int = DIMS) -> list[float]:
    out = [0.0] * dims
    for i, weight in parts:
        out[i] += weight
    return out


def hashed(text: str, dims: int = 64) -> list[float]:
    """A deterministic bag-of-words embedding: each word adds ±1 at a hashed position."""
    out = [0.0] * dims
    for word in text.lower().split():
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        out[digest[0] % dims] += 1.0 if digest[1] % 2 else -1.0
    norm = math.sqrt(sum(x * x for x in out)) or 1.0
    return [x / norm for x in out] if any(out) else [1.0] + [0.0] * (dims - 1)


def point(
    text: str,
    dense: Sequence[float] | None,
    *,
    user: str = "u1",
    kind: str = "episodic",
    event_id: str | None = None,
    session: str | None = None,
    created_at: float = 0.0,
    point_id: str | None = None,
) -> VectorPoint:
    return VectorPoint(
        id=point_id or str(uuid.uuid4()),
        dense=dense,
        payload=PointPayload(
            user=user,
            kind=kind,
            text=text,
            session=session,
            event_id=event_id,
            created_at=created_at,
        ),
    )


@pytest.fixture(params=["edge", "server-local"])
def make_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EngineFactory]:
    """A factory of engines over one storage: call it again after close() to reopen."""
    made: list[VectorEngine] = []

    def make() -> VectorEngine:
        engine: VectorEngine
        if request.param == "edge":
            engine = EdgeEngine(tmp_path / "data")
        else:
            engine = ServerEngine.local(tmp_path / "qdrant")
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


@pytest.fixture
def engine(make_engine: EngineFactory) -> VectorEngine:
    return make_engine()


def test_round_trip_returns_the_stored_payload_and_both_ranks(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, 64)
    texts = ["my dog is named Rex", "I work as a nurse in Boston", "we hiked the alps in May"]
    upper_id = str(uuid.uuid4()).upper()
    points = [point(t, hashed(t)) for t in texts[:2]]
    points.append(
        VectorPoint(
            id=upper_id,
            dense=hashed(texts[2]),
            payload=PointPayload(
                user="u1",
                kind="fact",
                text=texts[2],
                session="s9",
                event_id="e9",
                created_at=1_700_000_000.5,
                extra={"source": "test", "tags": ["a", 1, None]},
            ),
        )
    )
    index.upsert(points)

    hits = index.hybrid_search(
        user="u1", query_dense=hashed(texts[2]), query_text="alps hike", limit=3
    )

    top = hits[0]
    assert top.id == upper_id.lower()  # stored canonical
    assert (top.rank, top.dense_rank, top.sparse_rank) == (1, 1, 1)
    assert top.dense_score == pytest.approx(1.0, abs=1e-5)
    assert top.sparse_score is not None and top.sparse_score > 0
    assert top.fused_score == pytest.approx(2 / 61)
    assert top.payload == points[2].payload
    assert [h.rank for h in hits] == [1, 2, 3]


def test_search_never_returns_another_users_points(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, 64)
    texts = ["my dog is named Rex", "my cat is named Tom", "my dog likes the park"]
    index.upsert([point(t, hashed(t), user=u) for t in texts for u in ("u1", "u2")])

    for user in ("u1", "u2"):
        hits = index.hybrid_search(user=user, query_dense=hashed("dog"), query_text="dog", limit=10)
        assert len(hits) == 3
        assert {h.payload.user for h in hits} == {user}
    assert index.hybrid_search(user="u3", query_dense=hashed("dog"), query_text="dog") == []
    with pytest.raises(VectorIndexError, match="searching user"):
        index.hybrid_search(user="u1", query_dense=None, query_text="dog", where=Where(user="u2"))


def test_tokens_never_share_a_shard(engine: VectorEngine) -> None:
    first, second = engine.index(1, MODEL, 64), engine.index(2, MODEL, 64)
    first.upsert([point("token one likes tea", hashed("tea"))])
    second.upsert([point("token two likes tea", hashed("tea")) for _ in range(3)])

    hits = first.hybrid_search(user="u1", query_dense=hashed("tea"), query_text="tea")
    assert [h.payload.text for h in hits] == ["token one likes tea"]
    assert (first.count(), second.count()) == (1, 3)
    assert engine.index(1, MODEL, 64) is first


def _fillers(n: int) -> list[VectorPoint]:
    # Dense-close to unit(0) (cosine ~0.89), sharing no word with the queries below.
    return [point(f"filler number {i}", mix((0, 1.0), (1 + i % 7, 0.5))) for i in range(n)]


def test_bm25_finds_what_dense_misses(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    target = point("my licence plate reads XK42Q", unit(7))
    index.upsert([*_fillers(10), target])

    hits = index.hybrid_search(
        user="u1", query_dense=unit(0), query_text="XK42Q", limit=10, prefetch_limit=10
    )

    found = next(h for h in hits if h.id == target.id)
    assert found.sparse_rank == 1
    assert found.dense_rank is None  # eleventh by dense: beyond the prefetch
    assert found.rank <= 10


def test_dense_finds_what_bm25_misses(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    target = point("a canine companion sleeps by the fire", unit(0))
    index.upsert([point(f"puppy story {i}", unit(3)) for i in range(5)] + [target])

    hits = index.hybrid_search(user="u1", query_dense=unit(0), query_text="puppy", limit=10)

    found = next(h for h in hits if h.id == target.id)
    assert (found.dense_rank, found.sparse_rank, found.sparse_score) == (1, None, None)
    assert all(h.sparse_rank is not None for h in hits if h.id != target.id)


def test_a_point_high_in_both_lists_wins_the_fusion(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    dense_best = point("nothing relevant here", unit(0))  # dense 1, not in BM25
    both = point("alpha beta gamma delta", mix((0, 1.0), (1, 0.1)))  # dense 2, BM25 2
    sparse_best = point("alpha beta", unit(1))  # BM25 1, dense last
    index.upsert([dense_best, both, sparse_best, *_fillers(8)])

    hits = index.hybrid_search(user="u1", query_dense=unit(0), query_text="alpha beta", limit=3)

    assert [h.id for h in hits] == [both.id, sparse_best.id, dense_best.id]
    assert (hits[0].dense_rank, hits[0].sparse_rank) == (2, 2)
    assert hits[0].fused_score == pytest.approx(2 / 62)
    assert hits[1].fused_score == pytest.approx(1 / 61 + 1 / 71)

    dense_only = index.hybrid_search(
        user="u1", query_dense=unit(0), query_text="alpha beta", limit=1, sparse_weight=0
    )
    assert dense_only[0].id == dense_best.id
    sparse_only = index.hybrid_search(
        user="u1", query_dense=unit(0), query_text="alpha beta", limit=1, dense_weight=0
    )
    assert sparse_only[0].id == sparse_best.id


def test_either_query_alone_ranks_its_list(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    index.upsert([point("alpha", unit(0)), point("beta", unit(1))])

    dense = index.hybrid_search(user="u1", query_dense=unit(1), query_text=None, limit=2)
    assert [h.payload.text for h in dense] == ["beta", "alpha"]
    assert all(h.sparse_rank is None for h in dense)
    sparse = index.hybrid_search(user="u1", query_dense=None, query_text="alpha", limit=2)
    assert [h.payload.text for h in sparse] == ["alpha"]
    # Stop words only and no dense vector: nothing to rank.
    assert index.hybrid_search(user="u1", query_dense=None, query_text="the of and") == []


def test_delete_where_erases_an_event_then_a_user(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    index.upsert(
        [
            point("one", unit(0), event_id="e1"),
            point("two", unit(1), event_id="e1"),
            point("three", unit(2), event_id="e1", user="u2"),
            point("four", unit(3), event_id="e2"),
            point("five", unit(4), event_id="e3", user="u2"),
        ]
    )

    index.delete_where(Where(event_id=[]))  # matches nothing
    assert index.count() == 5
    index.delete_where(Where(event_id="e1"))
    assert index.count() == 2
    assert index.count(Where(event_id="e1")) == 0
    index.delete_where(Where(user="u2"))
    assert [p.payload.text for p in index.scroll()] == ["four"]
    with pytest.raises(VectorIndexError, match="needs a filter"):
        index.delete_where(Where())


def test_delete_by_id(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    keep, drop = point("keep", unit(0)), point("drop", unit(1))
    index.upsert([keep, drop])
    index.delete([drop.id.upper()])
    index.delete([])
    assert [p.id for p in index.scroll()] == [keep.id]


def test_retrieve_by_id_returns_the_payloads_that_exist(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    kept = point("kept", unit(0), user="u2", event_id="e1")
    index.upsert([kept])
    missing = str(uuid.uuid4())
    found = index.retrieve([kept.id.upper(), missing])
    assert list(found) == [kept.id] and found[kept.id] == kept.payload
    assert index.retrieve([]) == {}
    with pytest.raises(VectorIndexError):
        index.retrieve(["not-a-uuid"])


def test_count_and_scroll_with_filters(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    points = [
        point(
            f"memory {i}",
            unit(i % DIMS),
            user=f"u{i % 3}",
            kind="fact" if i % 2 else "episodic",
            session=f"s{i % 4}",
            created_at=1000.0 + i,
        )
        for i in range(25)
    ]
    index.upsert(points)

    scrolled = list(index.scroll(batch=7))
    assert sorted(p.id for p in scrolled) == sorted(p.id for p in points)
    assert all(p.dense is None for p in scrolled)
    assert index.count() == 25
    assert index.count(Where(user="u0")) == 9
    assert index.count(Where(user="u0", kind="fact")) == 4
    assert index.count(Where(kind=["fact", "episodic"], session="s1")) == 6
    assert index.count(Where(created_from=1010.0, created_before=1015.0)) == 5
    assert index.count(Where(user=())) == 0
    assert list(index.scroll(Where(kind=()))) == []
    with_dense = {p.id: p.dense for p in index.scroll(Where(user="u1"), with_dense=True)}
    assert len(with_dense) == 8
    for p in points:
        if p.id in with_dense:
            assert with_dense[p.id] == pytest.approx(p.dense)


def test_search_filters_on_kind_session_and_time(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    index.upsert(
        [
            point("tea in the morning", unit(0), kind="fact", session="a", created_at=10),
            point("tea at night", unit(0), kind="episodic", session="b", created_at=20),
        ]
    )

    def texts(where: Where) -> list[str]:
        hits = index.hybrid_search(user="u1", query_dense=unit(0), query_text="tea", where=where)
        return [h.payload.text for h in hits]

    assert texts(Where(kind="fact")) == ["tea in the morning"]
    assert texts(Where(session=["b"])) == ["tea at night"]
    assert texts(Where(created_from=15)) == ["tea at night"]
    assert texts(Where(event_id=())) == []


def test_points_persist_across_reopen(make_engine: EngineFactory) -> None:
    engine = make_engine()
    stored = point("the wifi password is on the fridge", unit(2), event_id="e1")
    engine.index(1, MODEL, DIMS).upsert([stored])
    engine.close()

    reopened = make_engine().index(1, MODEL, DIMS)

    assert reopened.count() == 1
    hits = reopened.hybrid_search(user="u1", query_dense=unit(2), query_text="wifi password")
    assert hits[0].id == stored.id
    assert hits[0].payload == stored.payload


def test_dimension_mismatch_is_refused_clearly(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    with pytest.raises(DimensionMismatch, match=r"has dims 8, got a vector of 7"):
        index.upsert([point("short", [1.0] * 7)])
    with pytest.raises(DimensionMismatch, match="needs a dense vector"):
        index.upsert([point("none", None)])
    with pytest.raises(DimensionMismatch, match=r"has dims 8, got a vector of 9"):
        index.hybrid_search(user="u1", query_dense=[1.0] * 9, query_text="x")
    with pytest.raises(VectorIndexError, match="NaN"):
        index.upsert([point("nan", [math.nan] * DIMS)])
    assert index.count() == 0
    # Another size of the same model is another shard: vectors of two sizes never meet.
    other = engine.index(1, MODEL, 4)
    other.upsert([point("four dims", [1.0, 0, 0, 0])])
    assert (index.count(), other.count()) == (0, 1)


def test_a_sparse_only_shard_serves_a_token_without_embedder(engine: VectorEngine) -> None:
    index = engine.index(1, "bm25-only", 0)
    index.upsert([point("the boat is called Seabird", None), point("lunch was pasta", [])])

    hits = index.hybrid_search(user="u1", query_dense=None, query_text="boat name")
    assert [h.payload.text for h in hits] == ["the boat is called Seabird"]
    assert next(iter(index.scroll(with_dense=True))).dense is None
    with pytest.raises(DimensionMismatch, match="sparse-only"):
        index.hybrid_search(user="u1", query_dense=[1.0], query_text="boat")


def test_bad_arguments_are_refused(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    with pytest.raises(VectorIndexError, match="UUID"):
        index.upsert([point("x", unit(0), point_id="not-a-uuid")])
    for kwargs in ({"limit": 0}, {"limit": 20, "prefetch_limit": 10}, {"rrf_k": 0}):
        with pytest.raises(VectorIndexError):
            index.hybrid_search(user="u1", query_dense=unit(0), query_text="x", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(VectorIndexError, match="weights"):
        index.hybrid_search(user="u1", query_dense=unit(0), query_text="x", dense_weight=-1)


def test_optimize_keeps_every_point(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    index.upsert([point(f"note {i}", unit(i % DIMS)) for i in range(40)])
    assert isinstance(index.optimize(), bool)
    assert index.count() == 40
    assert index.stats().points == 40
    assert index.hybrid_search(user="u1", query_dense=unit(3), query_text="note")[0].dense_rank


def test_closed_engine_and_index_refuse_work(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    engine.close()
    engine.close()  # twice is fine
    with pytest.raises(IndexClosed):
        index.count()
    with pytest.raises(IndexClosed):
        index.upsert([point("late", unit(0))])
    with pytest.raises(IndexClosed):
        engine.index(1, MODEL, DIMS)


def test_drop_token_erases_its_shards_only(engine: VectorEngine) -> None:
    engine.index(1, MODEL, DIMS).upsert([point("a", unit(0))])
    engine.index(1, "other-model", 4).upsert([point("b", [1.0, 0, 0, 0])])
    engine.index(2, MODEL, DIMS).upsert([point("c", unit(0))])

    assert engine.drop_token(1) == 2
    assert engine.drop_token(1) == 0
    assert engine.index(1, MODEL, DIMS).count() == 0
    assert engine.index(2, MODEL, DIMS).count() == 1


def test_concurrent_writes_and_searches(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(20):
                index.upsert([point(f"writer {n} note {i}", unit((n + i) % DIMS), user=f"u{n}")])
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(40):
                for hit in index.hybrid_search(user="u0", query_dense=unit(0), query_text="note"):
                    assert hit.payload.user == "u0"
                index.count(Where(user="u1"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert index.count() == 60


def test_a_text_without_any_token_is_still_indexed_densely(engine: VectorEngine) -> None:
    index = engine.index(1, MODEL, DIMS)
    silent = point("", unit(4))
    index.upsert([silent, point("the of and", unit(5))])

    hits = index.hybrid_search(user="u1", query_dense=unit(4), query_text="anything", limit=1)
    assert [(h.id, h.sparse_rank) for h in hits] == [(silent.id, None)]


def test_existing_opens_a_created_shard_and_creates_none(engine: VectorEngine) -> None:
    """The read path's way in: a shard never written is None, and asking creates nothing."""
    assert engine.existing(7, MODEL, DIMS) is None
    assert engine.shards(7) == []
    index = engine.index(7, MODEL, DIMS)
    index.upsert([point("kept", unit(1), event_id="e1")])
    found = engine.existing(7, MODEL, DIMS)
    assert found is not None and found.count() == 1
    assert engine.existing(7, MODEL, DIMS + 1) is None
