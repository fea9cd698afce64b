"""Many tenants on the embedded engine: a bound on the shards open at once, and everything a
shard guarantees kept across being parked (closed to make room) and reopened.

Real Qdrant Edge shards in a temporary directory; what is measured is the process's own
threads (/proc/self/task), open files (/proc/self/fd) and resident memory (VmRSS).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from memory_bridge.vectors import IndexClosed, Where, edge_optimize
from memory_bridge.vectors.common import shard_name
from memory_bridge.vectors.edge import DEFAULT_MAX_OPEN, EdgeEngine, EdgeIndex
from memory_bridge.vectors.index import ShardKey
from tests.integration.test_vectors_adapters import DIMS, MODEL, hashed, point, unit
from tests.support.settled import files_holding

SECRET = "Zorblattine7731"


def _home(root: Path, token: int) -> Path:
    return root / "vectors" / f"t{token}" / shard_name(ShardKey(token, MODEL, DIMS))


def _filled(engine: EdgeEngine, token: int, n: int = 12) -> EdgeIndex:
    index = engine.index(token, MODEL, DIMS)
    words = ("tea", "maps", "jazz", "rain", "sun", "bikes")
    texts = [f"t{token} likes {words[i % 6]} {i}" for i in range(n)]
    index.upsert([point(t, unit(i % DIMS), event_id=f"e{i}") for i, t in enumerate(texts)])
    return index


def _found(index: EdgeIndex) -> list[tuple[str, float | None, float | None]]:
    hits = index.hybrid_search(user="u1", query_dense=unit(2), query_text="jazz", limit=5)
    return [(h.id, _r(h.dense_score), _r(h.sparse_score)) for h in hits]


def _r(score: float | None) -> float | None:
    return None if score is None else round(score, 5)


def test_a_parked_shard_reopens_on_use_and_answers_as_before(tmp_path: Path) -> None:
    engine = EdgeEngine(tmp_path, max_open=1)
    try:
        first = _filled(engine, 1)
        before = _found(first)
        second = _filled(engine, 2)  # one shard open at most: the first one is parked
        assert first.parked and not second.parked
        assert engine.open_shards() == 1 and engine.slots.parked == 1

        assert _found(first) == before  # reopened on use, the same answer
        assert second.parked and not first.parked
        assert engine.index(1, MODEL, DIMS) is first  # one object per shard, open or parked
        assert engine.existing(2, MODEL, DIMS) is second and second.parked  # not reopened
        first.upsert([point("one more jazz note", unit(2), event_id="late")])
        assert second.count() == 12 and first.count() == 13
    finally:
        engine.close()


def test_threads_using_many_shards_while_they_are_parked_see_no_error(tmp_path: Path) -> None:
    engine = EdgeEngine(tmp_path, max_open=2)
    tokens = list(range(1, 7))
    errors: list[BaseException] = []
    written = {t: 0 for t in tokens}
    lock = threading.Lock()
    try:
        for token in tokens:
            _filled(engine, token, 3)

        def work(seed: int) -> None:
            rng = random.Random(seed)
            try:
                for i in range(25):
                    token = rng.choice(tokens)
                    index = engine.index(token, MODEL, DIMS)
                    note = point(f"jazz {seed} {i}", unit(i % DIMS), event_id=f"w{seed}-{i}")
                    index.upsert([note])
                    with lock:
                        written[token] += 1
                    assert index.hybrid_search(user="u1", query_dense=unit(1), query_text="jazz")
                    index.count()
            except BaseException as exc:  # reported below, with the thread's traceback
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert errors == []
        assert engine.slots.parked > 10  # shards were parked and reopened all along
        for token in tokens:
            assert engine.index(token, MODEL, DIMS).count() == 3 + written[token]
        assert engine.open_shards() <= 2 + len(threads)  # busy ones may overshoot, briefly
    finally:
        engine.close()


def test_dropping_a_parked_token_removes_its_files_and_it_does_not_come_back(
    tmp_path: Path,
) -> None:
    engine = EdgeEngine(tmp_path, max_open=1)
    try:
        gone = engine.index(1, MODEL, DIMS)
        gone.upsert([point(f"{SECRET} said alice", hashed("a", DIMS), user="alice")])
        _filled(engine, 2)
        assert gone.parked and files_holding(tmp_path, SECRET)

        assert engine.drop_token(1) == 1
        assert not (tmp_path / "vectors" / "t1").exists()
        assert files_holding(tmp_path, SECRET) == []
        with pytest.raises(IndexClosed):  # a holder of the old index does not recreate it
            gone.count()
        assert not (tmp_path / "vectors" / "t1").exists()
        assert engine.existing(1, MODEL, DIMS) is None
    finally:
        engine.close()


def test_a_parked_shard_erases_and_compacts_to_the_last_byte(tmp_path: Path) -> None:
    engine = EdgeEngine(tmp_path, max_open=1)
    try:
        index = engine.index(1, MODEL, DIMS)
        index.upsert([point(f"{SECRET} said alice", hashed("a", DIMS), user="alice")])
        index.upsert([point("bob's own words", hashed("b", DIMS), user="bob")])
        _filled(engine, 2)
        assert index.parked

        index.delete_where(Where(user="alice"))  # reopens it (and parks token 2's)
        _filled(engine, 3, 1)
        assert index.parked
        index.compact()
        assert files_holding(tmp_path, SECRET) == []
        assert index.count() == 1
    finally:
        engine.close()


def test_a_shard_being_optimised_is_never_parked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = EdgeEngine(tmp_path, max_open=1)
    real = edge_optimize.run_optimizer
    try:
        index = _filled(engine, 1, 30)

        def optimiser_while_others_open(path: Path, timeout: float) -> bool:
            # Other tenants' shards open while the child builds: this one is busy, not parked.
            for token in (2, 3):
                _filled(engine, token, 2)
            assert not index.parked
            index.upsert([point("written while optimising", unit(5), event_id="late")])
            real(path, timeout)
            return True

        monkeypatch.setattr(edge_optimize, "run_optimizer", optimiser_while_others_open)
        assert index.optimize() is True
        assert index.count() == 31
        assert sorted(p.name for p in _home(tmp_path, 1).iterdir()) == ["meta.json", "shard"]
        assert engine.open_shards() == 2  # over the bound while it was busy
        assert engine.index(2, MODEL, DIMS).count() == 2  # the next opening parks the idle
        assert index.parked and engine.open_shards() == 1
    finally:
        engine.close()


def test_the_bound_is_the_configured_default() -> None:
    from memory_bridge.settings import Settings

    assert Settings().vector_max_open_shards == DEFAULT_MAX_OPEN == 32


# -- a thousand tenants ---------------------------------------------------------------------

BOUND = 10  # shards open at once in the test below: at 10 tokens every one of them is open


def _cost() -> tuple[int, int, int, float]:
    """Python threads, kernel threads (the engine's own), open files, RSS in MiB."""
    status = Path("/proc/self/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return (
        threading.active_count(),
        len(os.listdir("/proc/self/task")),
        len(os.listdir("/proc/self/fd")),
        rss / 1024,
    )


def _stamp(root: Path, template: Path, token: int) -> None:
    """A new tenant's shard as the engine creates it (its payload indexes included), copied
    from one made by the engine: creating 1,000 costs 7 fsyncs each, minutes on a busy disk.
    Copied sparse: the engine's preallocated files are mostly holes (200 MB apparent)."""
    home = _home(root, token)
    home.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-r", "--sparse=always", str(template), str(home)], check=True)
    meta = json.loads((home / "meta.json").read_text())
    (home / "meta.json").write_text(json.dumps({**meta, "token_id": token}))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_a_thousand_tenants_cost_what_ten_do(tmp_path: Path) -> None:
    """Each token upserts a point and searches; threads, open files and RSS stay within a
    fixed bound of what the process had with 10 tokens (without the bound on open shards each
    token adds about 8 threads, a file and 32 MiB of mapped pages, forever)."""
    made = EdgeEngine(tmp_path, max_open=BOUND)
    _filled(made, 1, 1)
    made.close()
    template = tmp_path / "template"
    shutil.move(_home(tmp_path, 1), template)
    shutil.rmtree(tmp_path / "vectors" / "t1")
    for token in range(1, 1001):
        _stamp(tmp_path, template, token)

    engine = EdgeEngine(tmp_path, max_open=BOUND)
    try:
        at_ten: tuple[int, int, int, float] | None = None
        for token in range(1, 1001):
            index = engine.index(token, MODEL, DIMS)
            index.upsert([point(f"token {token} likes jazz", unit(token % DIMS), user="u1")])
            assert len(index.hybrid_search(user="u1", query_dense=unit(0), query_text="jazz")) == 2
            if token == 10:
                at_ten = _cost()
            elif at_ten is not None and token % 100 == 0:
                py_threads, threads, fds, rss = _cost()
                assert py_threads <= at_ten[0], f"{token} tokens: Python threads"
                assert threads <= at_ten[1] + 2, f"{token} tokens: {threads} threads"
                assert fds <= at_ten[2] + 2, f"{token} tokens: {fds} open files"
                assert rss <= at_ten[3] + 96, f"{token} tokens: {rss:.0f} MiB"
        assert engine.open_shards() == BOUND
        assert engine.slots.parked == 1000 - BOUND
        assert engine.index(1, MODEL, DIMS).count() == 2  # the first one, reopened
    finally:
        engine.close()
