"""What erasure needs of both vector adapters: every shard of a token listed (whatever model
made it), and a compaction after which the other users' points answer searches exactly as
before while, on the embedded engine, a deleted point's text is in no file any more."""

from __future__ import annotations

from pathlib import Path

from memory_bridge.vectors import VectorEngine, Where
from memory_bridge.vectors.edge import EdgeEngine
from memory_bridge.vectors.index import ShardKey
from tests.integration.test_vectors_adapters import engine, hashed, make_engine, point

__all__ = ["engine", "make_engine"]  # the fixtures
SECRET = "Quuxwort5521"


def test_shards_lists_every_model_of_a_token_only(engine: VectorEngine) -> None:
    assert engine.shards(1) == []
    engine.index(1, "model-a", 64)
    engine.index(1, "mem0:model-b", 8)
    engine.index(2, "model-a", 64)
    assert sorted(engine.shards(1), key=str) == sorted(
        [ShardKey(1, "model-a", 64), ShardKey(1, "mem0:model-b", 8)], key=str
    )


def test_compaction_keeps_every_other_point_and_its_ranking(engine: VectorEngine) -> None:
    index = engine.index(1, "model-a", 64)
    texts = [f"bob likes {w} and {v}" for w in ("tea", "maps", "jazz") for v in ("rain", "sun")]
    index.upsert([point(t, hashed(t), user="bob") for t in texts])
    index.upsert([point(f"{SECRET} is alice's", hashed("alice"), user="alice")])

    def found() -> set[tuple[str, float | None, float | None]]:
        # Scores, not ranks: ties may come back in another order from a rewritten shard.
        hits = index.hybrid_search(user="bob", query_dense=hashed("jazz rain"), query_text="jazz")
        return {(h.payload.text, _r(h.dense_score), _r(h.sparse_score)) for h in hits}

    before = found()
    index.delete_where(Where(user="alice"))
    index.compact()
    assert found() == before and index.count() == len(texts)
    assert index.count(Where(user="alice")) == 0


def test_after_compaction_no_file_of_the_shard_holds_a_deleted_text(tmp_path: Path) -> None:
    engine = EdgeEngine(tmp_path)
    try:
        index = engine.index(1, "model-a", 64)
        index.upsert([point(f"{SECRET} said alice", hashed("a"), user="alice")])
        index.upsert([point("bob's own words", hashed("b"), user="bob")])
        index.delete_where(Where(user="alice"))
        assert _holding(tmp_path)  # a delete alone leaves it in the segment and the WAL
        index.compact()
        assert _holding(tmp_path) == []
        assert index.count() == 1
    finally:
        engine.close()


def _r(score: float | None) -> float | None:
    return None if score is None else round(score, 5)


def _holding(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
