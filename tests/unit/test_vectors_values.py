"""The pure parts of the vector layer: fusion, filters, payloads, names, BM25 settings."""

from __future__ import annotations

import pytest

from memory_bridge.vectors import (
    DimensionMismatch,
    PointPayload,
    ShardKey,
    VectorIndexError,
    Where,
)
from memory_bridge.vectors.common import (
    Bm25Encoder,
    Bm25Settings,
    assemble_hits,
    model_slug,
    plan_search,
    shard_name,
)
from memory_bridge.vectors.fusion import rrf_fuse
from memory_bridge.vectors.index import canonical_id, check_dense


def test_rrf_is_the_sum_of_weight_over_k_plus_rank() -> None:
    fused = rrf_fuse({"dense": [("a", 0.9), ("b", 0.8)], "sparse": [("b", 7.0), ("c", 3.0)]})

    assert [f.id for f in fused] == ["b", "a", "c"]
    assert fused[0].fused_score == pytest.approx(1 / 62 + 1 / 61)
    assert fused[0].ranks == {"dense": (2, 0.8), "sparse": (1, 7.0)}
    assert fused[1].ranks == {"dense": (1, 0.9)}


def test_rrf_weights_and_k() -> None:
    lists = {"dense": [("a", 1.0), ("b", 0.5)], "sparse": [("b", 2.0), ("a", 1.0)]}
    assert [f.id for f in rrf_fuse(lists, weights={"sparse": 2.0})] == ["b", "a"]
    assert [f.id for f in rrf_fuse(lists, weights={"dense": 2.0})] == ["a", "b"]
    silent = rrf_fuse(lists, k=1, weights={"sparse": 0.0})
    assert silent[0].fused_score == pytest.approx(1 / 2)
    assert silent[0].ranks["sparse"] == (2, 1.0)  # ranked, just not counted
    with pytest.raises(ValueError, match="k must be"):
        rrf_fuse(lists, k=0)
    with pytest.raises(ValueError, match="weight"):
        rrf_fuse(lists, weights={"dense": -1.0})


def test_rrf_ties_are_deterministic_and_repeats_ignored() -> None:
    fused = rrf_fuse({"dense": [("z", 1.0), ("z", 0.9), ("y", 0.5)], "sparse": [("y", 1.0)]})
    assert [(f.id, f.ranks) for f in fused] == [
        ("y", {"dense": (2, 0.5), "sparse": (1, 1.0)}),
        ("z", {"dense": (1, 1.0)}),
    ]
    tied = rrf_fuse({"dense": [("b", 1.0)], "sparse": [("a", 1.0)]})
    assert [f.id for f in tied] == ["a", "b"]


def test_where_normalises_values() -> None:
    where = Where(user="u1", kind=["fact", "episodic"], event_id=set())
    assert where.matchers() == [("user", "u1"), ("kind", ("fact", "episodic")), ("event_id", ())]
    assert where.matches_nothing()
    assert not where.is_empty()
    assert Where().is_empty()
    assert not Where(created_before=1.0).is_empty()


def test_payload_round_trip_and_tolerant_reading() -> None:
    payload = PointPayload(
        user="u", kind="fact", text="t", session="s", event_id="e", extra={"x": 1}
    )
    assert PointPayload.from_json(payload.to_json()) == payload
    odd = PointPayload.from_json({"user": 5, "created_at": "yesterday", "extra": [1], "text": "t"})
    assert odd == PointPayload(user="", kind="", text="t")
    assert PointPayload.from_json(None).user == ""


def test_ids_and_vectors_are_checked() -> None:
    assert canonical_id("6F9619FF-8B86-D011-B42D-00C04FC964FF") == (
        "6f9619ff-8b86-d011-b42d-00c04fc964ff"
    )
    with pytest.raises(VectorIndexError):
        canonical_id("42")
    key = ShardKey(1, "m", 3)
    assert check_dense([1, 2, 3], key, "q") == [1.0, 2.0, 3.0]
    assert check_dense(None, key, "q") is None
    with pytest.raises(DimensionMismatch):
        check_dense([1.0], key, "q")
    assert check_dense([], ShardKey(1, "m", 0), "q") is None


@pytest.mark.parametrize(
    ("token_id", "model_id", "dims"), [(0, "m", 3), (1, "", 3), (1, "m", -1), (1, "m", 70_000)]
)
def test_shard_keys_are_validated(token_id: int, model_id: str, dims: int) -> None:
    with pytest.raises(ValueError, match="must"):
        ShardKey(token_id, model_id, dims)


def test_model_slugs_are_safe_and_distinct() -> None:
    assert model_slug("a/b") != model_slug("a-b")
    assert model_slug("Text-Embedding-3/Small").startswith("text-embedding-3-small-")
    assert model_slug("///").startswith("model-")
    assert shard_name(ShardKey(1, "m", 384)).endswith("-d384")


def test_bm25_settings() -> None:
    settings = Bm25Settings()
    assert Bm25Settings.from_json(settings.to_json()) == settings
    for bad in (None, {"language": "english"}, {**settings.to_json(), "k": "x"}):
        with pytest.raises(VectorIndexError):
            Bm25Settings.from_json(bad)
    with pytest.raises(VectorIndexError, match="tokenizer"):
        Bm25Encoder(Bm25Settings(tokenizer="nope"))
    with pytest.raises(VectorIndexError, match="invalid"):
        Bm25Encoder(Bm25Settings(b=2.0))
    encoder = Bm25Encoder(settings)
    assert encoder.query("the of and") is None
    # Stemmed and multilingual: "running" and "runs" meet, CJK text is split into words.
    assert encoder.query("running").indices == encoder.query("runs").indices  # type: ignore[union-attr]
    assert len(encoder.document("我喜欢在阿尔卑斯山徒步").indices) > 1


def test_hits_whose_payload_is_gone_are_left_out() -> None:
    plan = plan_search(
        ShardKey(1, "m", 2),
        Bm25Encoder(Bm25Settings()),
        user="u",
        query_dense=[1.0, 0.0],
        query_text=None,
        where=None,
        limit=2,
        prefetch_limit=3,
        dense_weight=1.0,
        sparse_weight=1.0,
        rrf_k=60,
    )
    asked: list[list[str]] = []

    def payloads(ids: list[str]) -> dict[str, PointPayload]:
        asked.append(ids)
        return {"c": PointPayload(user="u", kind="k", text="c")}

    hits = assemble_hits(plan, [("a", 0.9), ("c", 0.8), ("d", 0.7)], [], payloads)
    assert asked == [["a", "c"]]  # only the kept hits are read
    assert [(h.id, h.rank, h.dense_rank) for h in hits] == [("c", 1, 2)]
    assert assemble_hits(plan, [], [], payloads) == []


def test_hits_carry_the_share_of_the_query_terms_they_contain() -> None:
    encoder = Bm25Encoder(Bm25Settings())
    plan = plan_search(
        ShardKey(1, "m", 2),
        encoder,
        user="u",
        query_dense=None,
        query_text="Where did my sister adopt the puppies?",
        where=None,
        limit=3,
        prefetch_limit=3,
        dense_weight=1.0,
        sparse_weight=1.0,
        rrf_k=60,
    )
    texts = {
        "all": "My sister adopted two puppies where she lives",
        "half": "The puppies were cute",
        "none": "Gardening books are nice",
    }

    def payloads(ids: list[str]) -> dict[str, PointPayload]:
        return {i: PointPayload(user="u", kind="k", text=texts[i]) for i in ids}

    ranked = [("all", 3.0), ("half", 2.0), ("none", 1.0)]
    hits = assemble_hits(plan, [], ranked, payloads, encoder.terms)
    coverage = {h.id: h.sparse_coverage for h in hits}
    # Stop words ("where", "did", "my", "the") are not terms; stems match ("adopted").
    assert coverage == {"all": 1.0, "half": 0.3333, "none": 0.0}
    assert all(h.sparse_coverage is None for h in assemble_hits(plan, [], ranked, payloads))
