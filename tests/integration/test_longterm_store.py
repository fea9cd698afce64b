"""Mem0's vector store over the engine (`longterm.mem0_store.EngineStore`), both adapters.

Driven through Mem0's own `VectorStoreBase` calls, as Mem0 makes them: what goes in comes
back exactly, namespaces and kinds never mix, Mem0's filters select what they say, and the
store is safe to share between threads.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_bridge.sources.longterm.config import namespace
from memory_bridge.sources.longterm.mem0_store import EngineStore
from memory_bridge.sources.longterm.points import ENTITY_KIND, MEMORY_KIND, UnsupportedFilter
from memory_bridge.vectors.edge import EdgeEngine
from memory_bridge.vectors.index import VectorEngine, VectorIndexError
from memory_bridge.vectors.server import ServerEngine

DIMS = 4
TOKEN = 3


@pytest.fixture(params=["edge", "server-local"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorEngine]:
    made: VectorEngine = (
        EdgeEngine(tmp_path / "data") if request.param == "edge" else ServerEngine.local()
    )
    yield made
    made.close()


def _stores(engine: VectorEngine) -> tuple[EngineStore, EngineStore]:
    index = engine.index(TOKEN, "mem0:test", DIMS)
    return EngineStore(index, TOKEN, MEMORY_KIND), EngineStore(index, TOKEN, ENTITY_KIND)


def _payload(text: str, user: str, **extra: Any) -> dict[str, Any]:
    return {
        "data": text,
        "hash": f"h-{text}",
        "user_id": namespace(TOKEN, user),
        "created_at": "2026-01-02T03:04:05+00:00",
        "updated_at": "2026-01-02T03:04:05+00:00",
        "text_lemmatized": text.lower(),
        **extra,
    }


def _unit(i: int, lean: float = 0.0) -> list[float]:
    out = [0.0] * DIMS
    out[i] = 1.0
    out[(i + 1) % DIMS] = lean
    return out


def test_round_trip_search_update_delete(engine: VectorEngine) -> None:
    memories, _ = _stores(engine)
    ids = [str(uuid.uuid4()) for _ in range(3)]
    payloads = [
        _payload("likes tea", "alice", event_id="e1", role="user"),
        _payload("likes chess", "alice", event_id="e2", dia_id="D1:3"),
        _payload("likes jazz", "bob"),
    ]
    memories.insert([_unit(0), _unit(1), _unit(0)], payloads, ids)

    got = memories.get(ids[1])
    assert got is not None and got.id == ids[1] and got.payload == payloads[1]
    assert memories.get(str(uuid.uuid4())) is None and memories.get("not-an-id") is None

    alice = {"user_id": namespace(TOKEN, "alice")}
    found = memories.search("q", _unit(1, 0.1), top_k=5, filters=alice)
    assert [f.id for f in found] == [ids[1], ids[0]]
    assert found[0].payload == payloads[1]
    assert math.isclose(found[0].score or 0, 1 / math.sqrt(1.01), rel_tol=1e-4)

    changed = {**payloads[0], "data": "likes green tea"}
    memories.update(ids[0], vector=_unit(2), payload=changed)
    assert memories.search("q", _unit(2), top_k=1, filters=alice)[0].payload == changed
    memories.update(ids[0], payload={**changed, "role": "assistant"})  # vector kept
    top = memories.search("q", _unit(2), top_k=1, filters=alice)[0]
    assert top.id == ids[0] and top.payload["role"] == "assistant"

    memories.delete(ids[0])
    assert memories.get(ids[0]) is None
    (rows,) = memories.list(filters=alice)
    assert [r.id for r in rows] == [ids[1]]


def test_namespaces_kinds_and_filters_never_mix(engine: VectorEngine) -> None:
    memories, entities = _stores(engine)
    other_token = EngineStore(engine.index(TOKEN + 1, "mem0:test", DIMS), TOKEN + 1, MEMORY_KIND)
    mem_ids = [str(uuid.uuid4()) for _ in range(4)]
    memories.insert(
        [_unit(0)] * 4,
        [
            _payload("a1", "alice", event_id="e1", run_id="r1"),
            _payload("a2", "alice", event_id="e2", agent_id="helper"),
            _payload("b1", "bob", event_id="e1"),
            _payload("t1", ""),  # token-wide
        ],
        mem_ids,
    )
    entity_id = str(uuid.uuid4())
    entities.insert(
        [_unit(0)], [{"data": "Alice", "user_id": namespace(TOKEN, "alice")}], [entity_id]
    )
    theirs = {**_payload("x", "alice"), "user_id": namespace(TOKEN + 1, "alice")}
    other_token.insert([_unit(0)], [theirs], [str(uuid.uuid4())])

    def texts(**filters: Any) -> list[str]:
        (rows,) = memories.list(filters=filters)
        return sorted(r.payload["data"] for r in rows)

    alice = namespace(TOKEN, "alice")
    assert texts(user_id=alice) == ["a1", "a2"]
    assert texts(user_id=namespace(TOKEN, "")) == ["t1"]
    assert texts(user_id="*") == ["a1", "a2", "b1", "t1"]
    assert texts(user_id={"in": [alice, namespace(TOKEN, "bob")]}) == ["a1", "a2", "b1"]
    assert texts(user_id=namespace(TOKEN + 1, "alice")) == []  # another token's namespace
    assert texts(event_id="e1") == ["a1", "b1"]
    assert texts(user_id=alice, run_id="r1") == ["a1"]
    assert texts(user_id=alice, agent_id="helper") == ["a2"]  # checked on the payloads
    assert [
        f.payload["data"]
        for f in memories.search("q", _unit(0), 10, {"user_id": alice, "agent_id": "helper"})
    ] == ["a2"]
    for bad in ({"OR": [{"user_id": alice}]}, {"user_id": {"ne": alice}}, {"hash": 3}):
        with pytest.raises(UnsupportedFilter):
            memories.list(filters=bad)
    with pytest.raises(ValueError, match="not a namespace of this token"):
        memories.insert([_unit(0)], [_payload("y", "z", user_id="t99")], [str(uuid.uuid4())])

    # Entities share the shard but are another kind: never a memory, and not dropped with them.
    assert memories.get(entity_id) is None and entities.get(entity_id) is not None
    assert entities.list(filters={"user_id": alice})[0][0].payload["data"] == "Alice"
    memories.reset()
    assert texts(user_id="*") == []
    assert entities.get(entity_id) is not None
    assert other_token.list()[0][0].payload["data"] == "x"


def test_a_search_across_every_end_user_ranks_by_cosine(engine: VectorEngine) -> None:
    memories, _ = _stores(engine)
    vectors = {"alice": _unit(0, 0.5), "bob": _unit(0), "carol": _unit(1)}
    ids = {user: str(uuid.uuid4()) for user in vectors}
    memories.insert(
        list(vectors.values()), [_payload(u, u) for u in vectors], [ids[u] for u in vectors]
    )
    found = memories.search("q", _unit(0), top_k=2, filters={"user_id": "*"})
    assert [f.id for f in found] == [ids["bob"], ids["alice"]]
    assert math.isclose(found[1].score or 0, 1 / math.sqrt(1.25), rel_tol=1e-6)


def test_shared_between_threads(engine: VectorEngine) -> None:
    memories, _ = _stores(engine)
    errors: list[BaseException] = []
    per_thread = 40

    def work(n: int) -> None:
        user = f"user{n}"
        ns = {"user_id": namespace(TOKEN, user)}
        try:
            for i in range(per_thread):
                memories.insert(
                    [_unit(i % DIMS)], [_payload(f"{user}-{i}", user)], [str(uuid.uuid4())]
                )
                found = memories.search("q", _unit(i % DIMS), top_k=3, filters=ns)
                assert found and all(f.payload["user_id"] == ns["user_id"] for f in found)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    (rows,) = memories.list(filters={"user_id": "*"})
    assert len(rows) == 8 * per_thread
    for n in range(8):
        (mine,) = memories.list(filters={"user_id": namespace(TOKEN, f"user{n}")})
        assert len(mine) == per_thread


def test_a_closed_engine_fails_loudly(engine: VectorEngine) -> None:
    memories, _ = _stores(engine)
    engine.close()
    with pytest.raises(VectorIndexError):
        memories.insert([_unit(0)], [_payload("late", "alice")], [str(uuid.uuid4())])
