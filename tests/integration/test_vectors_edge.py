"""What only the embedded adapter does: its files, optimising out of process, recovery."""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_bridge.vectors import (
    DimensionMismatch,
    IndexClosed,
    NoRoom,
    VectorIndexError,
    Where,
    edge_optimize,
)
from memory_bridge.vectors.common import Bm25Settings, shard_name
from memory_bridge.vectors.edge import EdgeEngine, EdgeIndex
from memory_bridge.vectors.index import ShardKey
from tests.integration.test_vectors_adapters import DIMS, MODEL, point, unit


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EdgeEngine]:
    made = EdgeEngine(tmp_path)
    yield made
    made.close()


def _home(tmp_path: Path, token: int = 1, dims: int = DIMS) -> Path:
    return tmp_path / "vectors" / f"t{token}" / shard_name(ShardKey(token, MODEL, dims))


def _filled(engine: EdgeEngine, n: int = 30) -> EdgeIndex:
    index = engine.index(1, MODEL, DIMS)
    index.upsert([point(f"note {i}", unit(i % DIMS), event_id=f"e{i}") for i in range(n)])
    return index


def test_layout_is_one_directory_per_token_and_model(engine: EdgeEngine, tmp_path: Path) -> None:
    _filled(engine)
    home = _home(tmp_path)
    assert sorted(p.name for p in home.iterdir()) == ["meta.json", "shard"]
    meta = json.loads((home / "meta.json").read_text())
    assert (meta["token_id"], meta["model_id"], meta["dims"]) == (1, MODEL, DIMS)
    assert home.name.endswith(f"-d{DIMS}")
    for level in (tmp_path / "vectors", home.parent, home):
        assert level.stat().st_mode & 0o777 == 0o700  # memories are private


def test_optimize_swaps_in_the_optimised_copy(engine: EdgeEngine, tmp_path: Path) -> None:
    index = _filled(engine, 2400)
    # Half the points deleted: the vacuum optimiser has work to do even on a small shard.
    index.delete_where(Where(event_id=[f"e{i}" for i in range(0, 2400, 2)]))

    assert index.optimize() is True
    assert index.count() == 1200
    assert sorted(p.name for p in _home(tmp_path).iterdir()) == ["meta.json", "shard"]
    hits = index.hybrid_search(user="u1", query_dense=unit(1), query_text="note")
    # Every DIMS-th point has this very vector: the first hit is one of those exact matches
    # (which of the tied ones the engine ranks first is its own business).
    assert hits and hits[0].dense_score == pytest.approx(1.0)
    assert index.optimize() is False  # nothing left to do


def test_writes_during_an_optimisation_are_kept(
    engine: EdgeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = _filled(engine)
    late = point("written while optimising", unit(5))
    real = edge_optimize.run_optimizer

    def optimiser_with_traffic(path: Path, timeout: float) -> bool:
        # The child runs without the shard's locks: reads and writes go on meanwhile.
        index.upsert([late])
        index.delete_where(Where(event_id="e0"))
        assert index.count() == 30
        real(path, timeout)
        return True  # swap even if the engine found nothing to do

    monkeypatch.setattr(edge_optimize, "run_optimizer", optimiser_with_traffic)

    assert index.optimize() is True
    assert index.count() == 30
    assert index.count(Where(event_id="e0")) == 0
    assert [p.id for p in index.scroll() if p.payload.text == late.payload.text] == [late.id]


def test_a_failed_optimisation_leaves_the_shard_as_it_was(
    engine: EdgeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = _filled(engine)

    def broken(path: Path, timeout: float) -> bool:
        raise VectorIndexError("child died")

    monkeypatch.setattr(edge_optimize, "run_optimizer", broken)
    with pytest.raises(VectorIndexError, match="child died"):
        index.optimize()
    index.upsert([point("after", unit(0))])
    assert index.count() == 31
    assert not (_home(tmp_path) / edge_optimize.NEXT).exists()


def test_closing_during_an_optimisation_discards_the_copy(
    engine: EdgeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = _filled(engine)

    def close_meanwhile(path: Path, timeout: float) -> bool:
        threading.Thread(target=index.close).start()
        while not index.closed:
            pass
        return True

    monkeypatch.setattr(edge_optimize, "run_optimizer", close_meanwhile)
    with pytest.raises(IndexClosed):
        index.optimize()
    assert not (_home(tmp_path) / edge_optimize.NEXT).exists()


def test_the_optimiser_child_reports_failures_and_timeouts(tmp_path: Path) -> None:
    with pytest.raises(VectorIndexError, match="failed"):
        edge_optimize.run_optimizer(tmp_path / "no-such-shard", timeout=60)
    with pytest.raises(VectorIndexError, match="longer than"):
        edge_optimize.run_optimizer(tmp_path / "no-such-shard", timeout=0.001)


def test_open_recovers_from_an_interrupted_swap(tmp_path: Path) -> None:
    engine = EdgeEngine(tmp_path)
    _filled(engine)
    engine.close()
    home = _home(tmp_path)
    # Crashed between the two renames: only shard.prev/ and a half-made shard.next/.
    (home / edge_optimize.LIVE).rename(home / edge_optimize.PREV)
    (home / edge_optimize.NEXT).mkdir()

    reopened = EdgeEngine(tmp_path)
    try:
        assert reopened.index(1, MODEL, DIMS).count() == 30
        assert sorted(p.name for p in home.iterdir()) == ["meta.json", "shard"]
    finally:
        reopened.close()


def test_a_shard_has_one_owner(engine: EdgeEngine, tmp_path: Path) -> None:
    _filled(engine)
    second = EdgeEngine(tmp_path)
    try:
        with pytest.raises(VectorIndexError, match="cannot open"):
            second.index(1, MODEL, DIMS)
    finally:
        second.close()


def test_a_shard_of_another_model_is_refused(tmp_path: Path) -> None:
    engine = EdgeEngine(tmp_path)
    _filled(engine)
    engine.close()
    meta_path = _home(tmp_path) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "dims": 16}))

    reopened = EdgeEngine(tmp_path)
    try:
        with pytest.raises(DimensionMismatch, match="refusing to mix"):
            reopened.index(1, MODEL, DIMS)
        meta_path.write_text("{not json")
        with pytest.raises(VectorIndexError, match="unreadable"):
            reopened.index(1, MODEL, DIMS)
    finally:
        reopened.close()


def test_a_shard_keeps_the_bm25_settings_it_was_made_with(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = EdgeEngine(tmp_path)
    _filled(engine)
    engine.close()

    changed = EdgeEngine(tmp_path, bm25=Bm25Settings(tokenizer="word", avg_len=100))
    try:
        with caplog.at_level(logging.WARNING, logger="memory_bridge.vectors.edge"):
            index = changed.index(1, MODEL, DIMS)
        assert "keeps its BM25 settings" in caplog.text
        assert index.hybrid_search(user="u1", query_dense=None, query_text="note")
    finally:
        changed.close()


def test_a_nearly_full_disk_refuses_new_shards_and_writes_but_not_reads(tmp_path: Path) -> None:
    """A write the file system cannot back would kill the process (SIGBUS on a mapped page):
    below the free-space floor the engine refuses it with `NoRoom`, and reads go on."""
    roomy = EdgeEngine(tmp_path)
    _filled(roomy, 3).close()
    roomy.close()
    free = shutil.disk_usage(tmp_path).free
    engine = EdgeEngine(tmp_path, min_free_bytes=free * 4)  # more than the disk has
    try:
        with pytest.raises(NoRoom):
            engine.index(2, MODEL, DIMS)  # a new shard: nothing created
        assert not (tmp_path / "vectors" / "t2").exists()
        index = engine.index(1, MODEL, DIMS)  # an existing one opens
        assert index.count() == 3
        with pytest.raises(NoRoom):
            index.upsert([point("one more", unit(0), event_id="e9")])
        assert index.count() == 3
    finally:
        engine.close()
