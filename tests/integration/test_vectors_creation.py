"""Opening or creating a shard holds back only its own token: another token's search, and
another token's new shard, go on while one shard is held mid-creation (an event holds it, so
nothing here depends on how long a creation takes)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from memory_bridge.vectors import edge_index
from memory_bridge.vectors.edge import EdgeEngine, EdgeIndex
from tests.integration.test_vectors_adapters import DIMS, MODEL, point, unit

WAIT = 20.0  # bounds a hang of a broken build; nothing is timed


def test_a_shard_held_mid_creation_holds_back_only_its_own_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = EdgeEngine(tmp_path, max_open=4)
    entered, release = threading.Event(), threading.Event()
    real = edge_index.settle_meta

    def held(home: Path, key: Any, bm25: Any) -> Any:
        if key.token_id == 1:  # token 1's shard stops halfway through its creation
            entered.set()
            release.wait()
        return real(home, key, bm25)

    try:
        other = engine.index(2, MODEL, DIMS)
        other.upsert([point("token two likes jazz", unit(1), event_id="e1")])
        monkeypatch.setattr(edge_index, "settle_meta", held)
        created: list[EdgeIndex] = []
        creator = threading.Thread(target=lambda: created.append(engine.index(1, MODEL, DIMS)))
        creator.start()
        assert entered.wait(WAIT)

        seen: dict[str, object] = {}

        def others() -> None:
            found = engine.index(2, MODEL, DIMS).hybrid_search(
                user="u1", query_dense=unit(1), query_text="jazz"
            )
            seen["search"] = [hit.id for hit in found]
            seen["new shard"] = engine.index(3, MODEL, DIMS).count()
            seen["absent"] = engine.existing(4, MODEL, DIMS)

        worker = threading.Thread(target=others)
        worker.start()
        worker.join(WAIT)
        assert not worker.is_alive(), "another token waited for token 1's shard"
        assert not release.is_set() and created == []  # token 1 still held meanwhile
        assert len(seen["search"]) == 1  # type: ignore[arg-type]
        assert seen["new shard"] == 0 and seen["absent"] is None

        # A second caller of the same shard waits for it, and gets the same object.
        again: list[EdgeIndex] = []
        second = threading.Thread(target=lambda: again.append(engine.index(1, MODEL, DIMS)))
        second.start()
        release.set()
        creator.join(WAIT)
        second.join(WAIT)
        assert created and again and created[0] is again[0]
        assert engine.existing(1, MODEL, DIMS) is created[0]
    finally:
        release.set()
        engine.close()
