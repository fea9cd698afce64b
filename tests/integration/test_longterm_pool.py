"""The pool of Mem0 instances: built lazily, rebuilt on PATCH, purged on DELETE, closed at
shutdown — every instance's vectors in the process's one vector engine."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_bridge.http.services import services_of_app
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm import pool as pool_module
from memory_bridge.sources.longterm.mem0_store import EngineStore
from memory_bridge.sources.longterm.points import MEMORY_KIND, from_mem0_result
from memory_bridge.sources.longterm.pool import Mem0Pool
from memory_bridge.tenancy.config import validate_config
from memory_bridge.vectors.edge import EdgeEngine
from memory_bridge.vectors.index import StoredPoint, VectorEngine, Where
from memory_bridge.vectors.server import ServerEngine
from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import (
    Running,
    chat,
    forwarded_recall,
    memory_block,
    memory_fields,
    memory_texts,
    running,
    start,
    wait_for_memory,
    wait_until,
)

__all__ = ["running"]  # the fixture


def _history_file(run: Running, token_id: int) -> Path:
    return run.proxy.settings.mem0_dir / "history" / f"t{token_id}.db"


def test_instances_are_lazy_share_the_engine_and_patch_rebuilds(
    running: Running, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, pool = running.proxy, running.pool
    freezes: list[int] = []  # each build (heap.py)
    monkeypatch.setattr(pool_module, "freeze_long_lived", lambda: freezes.append(pool.built))
    a_id, a = proxy.create_token(name="a", **memory_fields(proxy.upstream_url))
    b_id, b = proxy.create_token(name="b", **memory_fields(proxy.upstream_url))
    assert pool.current(a_id) is None and pool.built == 0  # nothing built before first use
    assert chat(proxy, a, "My cat is called Tom").status_code == 200
    assert chat(proxy, b, "My cat is called Felix").status_code == 200
    wait_for_memory(proxy, a_id, "My cat is called Tom")
    first = pool.current(a_id)
    assert first is not None and pool.current(b_id) is not None
    # Each instance's store is a shard of the runtime's engine, the one episodic memory uses.
    stores = [pool.current(i).vector_store for i in (a_id, b_id)]
    assert all(isinstance(store, EngineStore) for store in stores)
    assert [store.index.key.token_id for store in stores] == [a_id, b_id]
    key = stores[0].index.key
    assert (key.model_id, key.dims) == ("mem0:bow-embed", 32)
    assert pool.engine is services_of_app(running.server.app).memory.vectors
    assert stores[0].index is pool.engine.index(a_id, key.model_id, key.dims)
    built = pool.built
    frozen = len(freezes)  # when the builds imported Mem0 (if no test before did)

    # Any change to the token drops its instance; the next request builds a new one.
    reply = proxy.admin("PATCH", f"/tokens/{a_id}", json={"memory_limit": 3})
    assert reply.status_code == 200
    assert pool.current(a_id) is None
    wait_until(lambda: first.db is None, what="the replaced instance to be closed")
    # Asked in a new session: the forge never injects what the history already carries.
    assert chat(proxy, a, "What is my cat called?", session="q").status_code == 200
    assert memory_block(forwarded_recall(upstream)) == ["My cat is called Tom"]
    second = pool.current(a_id)
    assert second is not None and second is not first and pool.built == built + 1
    assert len(freezes) == frozen  # nothing imported: an instance is not frozen (core/heap.py)
    assert pool.current(b_id) is not None  # the other token's instance is untouched

    # Rotation keeps the namespace (the id), so the memories stay.
    new_secret = proxy.admin("POST", f"/tokens/{a_id}/rotate").json()["token"]
    assert chat(proxy, new_secret, "Remind me of my cat", session="r").status_code == 200
    assert "My cat is called Tom" in memory_block(forwarded_recall(upstream))


def _longterm_state(proxy: Any, token_id: int) -> Any:
    layers = proxy.admin("GET", f"/tokens/{token_id}/rebuild").json()["layers"]
    return layers.get("longterm", {}).get("state")


def test_new_embedding_space_gets_its_own_shard_and_purge_drops_all(
    running: Running, upstream: FakeUpstream
) -> None:
    proxy = running.proxy
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url, dims=16))
    other_id, other = proxy.create_token(**memory_fields(proxy.upstream_url, dims=16))
    assert chat(proxy, token, "My car is a red Volvo").status_code == 200
    assert chat(proxy, other, "My car is a blue Fiat").status_code == 200
    wait_for_memory(proxy, token_id, "My car is a red Volvo")
    wait_for_memory(proxy, other_id, "My car is a blue Fiat")

    reply = proxy.admin("PATCH", f"/tokens/{token_id}", json={"embed_dims": 24})
    assert reply.status_code == 200
    # Vectors of another size (or model) are not comparable: the facts are re-embedded from
    # their events into a shard of their own (tests/integration/test_rebuild_longterm.py).
    model = "mem0:bow-embed"
    wait_until(
        lambda: (token_id, f"{model}@g1", 24) in running.shards(token_id), what="the re-embed"
    )
    wait_until(lambda: _longterm_state(proxy, token_id) == "idle", what="the switch")
    assert memory_texts(proxy, token_id) == {"My car is a red Volvo"}
    assert not _history_file(running, token_id).exists()  # Mem0's history is in memory

    # Without purge the data stays; with it, every shard of the token goes.
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 204
    assert running.shards(token_id) == []
    assert not _history_file(running, token_id).exists()
    assert running.pool.current(token_id) is None
    assert memory_texts(proxy, other_id) == {"My car is a blue Fiat"}

    assert proxy.admin("DELETE", f"/tokens/{other_id}").status_code == 204
    assert running.shards(other_id) == [(other_id, model, 16)]


def test_purge_of_a_token_that_never_used_memory_creates_nothing(
    running: Running, upstream: FakeUpstream
) -> None:
    proxy = running.proxy
    token_id, token = proxy.create_token()
    assert chat(proxy, token, "hi").status_code == 200
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 204
    data = proxy.settings.memory_bridge_data_dir
    assert not (data / "vectors" / f"t{token_id}").exists()
    assert not (data / "qdrant").exists()  # no local-mode storage any more


def test_shutdown_closes_every_instance_and_the_engine(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    run = start(tmp_path / "data", upstream_server[1])
    proxy = run.proxy
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    assert chat(proxy, token, "I was born in Lisbon").status_code == 200
    wait_for_memory(proxy, token_id, "I was born in Lisbon")
    memory = run.pool.current(token_id)
    assert memory is not None and memory.db is not None
    key = memory.vector_store.index.key
    run.server.stop()

    assert memory.db is None  # Mem0's history connection is closed
    # A shard has one owner: reopening it works only if the server's engine let it go.
    engine = EdgeEngine(proxy.settings.memory_bridge_data_dir)
    try:
        points = engine.index(key.token_id, key.model_id, key.dims).scroll(Where(kind=MEMORY_KIND))
        assert [p.payload.text for p in points] == ["I was born in Lisbon"]
    finally:
        engine.close()


@pytest.fixture(params=["edge", "server-local"])
async def vectors(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorEngine]:
    """The embedded engine, and qdrant-client's local mode standing in for a Qdrant server
    (`QDRANT_URL`): the server adapter speaks the same client API to both."""
    engine: VectorEngine = (
        EdgeEngine(tmp_path / "data") if request.param == "edge" else ServerEngine.local()
    )
    yield engine
    engine.close()


def _direct_pool(
    tmp_path: Path, upstream_url: str, engine: VectorEngine, threads: int = 2
) -> tuple[Mem0Pool, mem0_config.Mem0Spec]:
    """A pool used without the proxy, and the spec of token 1 with the fake upstream's Mem0."""
    pool = Mem0Pool(engine, tmp_path / "mem0", threads=threads, embed_timeout=10, llm_timeout=10)
    config = validate_config(
        {"name": "t", "llm_base_url": "http://unused", **memory_fields(upstream_url)}
    )
    return pool, mem0_config.build_spec(1, config, pool.mem0_dir)


async def test_pool_used_directly_with_raw_adds_that_carry_metadata(
    tmp_path: Path,
    upstream: FakeUpstream,
    upstream_server: tuple[FakeUpstream, str],
    vectors: VectorEngine,
) -> None:
    """The pool without the proxy (as a benchmark uses it): raw adds need no LLM."""
    pool, spec = _direct_pool(tmp_path, upstream_server[1], vectors)
    ns = mem0_config.namespace(1, "conv-26")
    items = [
        ("Caroline went to an LGBTQ support group", {"dia_id": "D1:3"}),
        ("Melanie painted a sunrise over the lake", {"dia_id": "D1:7"}),
    ]
    assert await pool.add_raw(spec, ns, items) == 2
    found = await pool.search(spec, ns, "what did melanie paint", 1)
    assert [(m.text, m.metadata.get("dia_id")) for m in found] == [
        ("Melanie painted a sunrise over the lake", "D1:7")
    ]
    assert upstream.memory_requests == []  # no LLM call for raw adds
    listed = await pool.list_memories(spec, ns)
    assert {m.text for m in listed} == {text for text, _ in items}
    assert {m.namespace for m in listed} == {ns}

    # Mem0's entity store and its reset stay on our shard: nothing else is opened.
    memory = pool.current(1)
    store = memory.vector_store
    assert isinstance(store, EngineStore) and store.kind == MEMORY_KIND
    assert isinstance(memory.entity_store, EngineStore)
    assert memory.entity_store.index is store.index and memory.entity_store.kind != MEMORY_KIND
    await pool.executor.run(memory.reset)
    assert memory.vector_store is store
    assert await pool.list_memories(spec, ns) == []
    await pool.close_all(5)
    with pytest.raises(RuntimeError):
        await pool.search(spec, ns, "anything", 1)


async def test_search_answers_as_mem0s_own_search_does(
    tmp_path: Path,
    upstream_server: tuple[FakeUpstream, str],
    vectors: VectorEngine,
) -> None:
    """The pool reads the store directly (no 60-candidate over-fetch): the same memories,
    order, scores and metadata as `Memory.search`, its threshold included."""
    pool, spec = _direct_pool(tmp_path, upstream_server[1], vectors)
    ns = mem0_config.namespace(1, "u1")
    items = [
        ("Caroline went to an LGBTQ support group", {"dia_id": "D1:3"}),
        ("Melanie painted a sunrise over the lake", {"dia_id": "D1:7"}),
        ("Caroline is researching adoption agencies", {"dia_id": "D2:1"}),
        ("Melanie's kids love the pottery class", {"dia_id": "D2:9"}),
        ("The camping trip was in the mountains", {"dia_id": "D3:2"}),
    ]
    assert await pool.add_raw(spec, ns, items) == len(items)
    memory = pool.current(1)
    below_threshold = 0
    for query in ("what did melanie paint", "adoption", "zzz qqq", "camping mountains"):
        for limit in (1, 3, 10):
            ours = await pool.search(spec, ns, query, limit)
            theirs = await pool.executor.run(
                lambda q=query, n=limit: memory.search(q, filters={"user_id": ns}, top_k=n)
            )
            want = [from_mem0_result(item) for item in theirs["results"]]
            assert [(m.id, m.text, m.metadata) for m in ours] == [
                (m.id, m.text, m.metadata) for m in want
            ]
            assert [m.score for m in ours] == pytest.approx([m.score for m in want])
            below_threshold += len(want) < min(limit, len(items))
    assert below_threshold > 0  # the threshold was exercised
    await pool.close_all(5)


async def test_end_users_of_one_token_stay_apart_under_concurrent_writes(
    tmp_path: Path, upstream_server: tuple[FakeUpstream, str], vectors: VectorEngine
) -> None:
    """One shard per token: the namespace keeps end users apart, in searches, listings and
    deletes, while every end user's adds run at once on four threads (nothing lost)."""
    pool, spec = _direct_pool(tmp_path, upstream_server[1], vectors, threads=4)
    users = {"": "token", "alice": "alice", "bob smith": "bob", "carol": "carol"}
    things = ("tea", "chess", "jazz", "rain", "maps")

    async def add(user: str, who: str, thing: str) -> int:
        ns = mem0_config.namespace(1, user)
        return await pool.add_raw(spec, ns, [(f"{who} likes {thing}", {"who": who})])

    writes = [add(user, who, thing) for user, who in users.items() for thing in things]
    assert sum(await asyncio.gather(*writes)) == len(users) * len(things)

    for user, who in users.items():
        ns = mem0_config.namespace(1, user)
        found = await pool.search(spec, ns, "likes chess", 20)
        assert {m.text.split()[0] for m in found} == {who} and len(found) == len(things)
        assert found[0].text == f"{who} likes chess"
        listed = await pool.list_memories(spec, ns)
        assert {m.text.split()[0] for m in listed} == {who} and len(listed) == len(things)
    token_wide = await pool.search(spec, None, "likes chess", 50)  # every namespace
    assert len(token_wide) == len(users) * len(things)
    assert {m.text for m in token_wide[: len(users)]} == {
        f"{w} likes chess" for w in users.values()
    }

    gone = await pool.delete_namespace(spec, mem0_config.namespace(1, "alice"))
    assert sorted(m.text for m in gone) == sorted(f"alice likes {t}" for t in things)
    assert await pool.list_memories(spec, mem0_config.namespace(1, "alice")) == []
    assert len(await pool.list_memories(spec, None)) == (len(users) - 1) * len(things)
    await pool.close_all(5)


async def test_an_instance_is_replaced_after_its_write_budget_and_after_a_namespace_delete(
    tmp_path: Path,
    upstream_server: tuple[FakeUpstream, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mem0's history lives in the instance's memory: bounded by replacing the instance after
    so many writes, and dropped with it when an end user's memories are deleted."""
    monkeypatch.setattr(pool_module, "MAX_WRITES_PER_INSTANCE", 3)
    engine = EdgeEngine(tmp_path / "data")
    pool, spec = _direct_pool(tmp_path, upstream_server[1], engine)
    ns = mem0_config.namespace(1, "alice")
    for n in range(2):
        await pool.add_raw(spec, ns, [(f"alice fact {n}", {})])
    first = pool.current(1)
    await pool.add_raw(spec, ns, [("alice fact 2", {})])  # the third write retires it
    assert pool.current(1) is None and pool.built == 1
    found = await pool.search(spec, ns, "alice fact", 10)  # a new instance, same memories
    assert len(found) == 3 and pool.current(1) is not first and pool.built == 2

    second = pool.current(1)
    await pool.delete_namespace(spec, ns)
    assert pool.current(1) is None
    assert await pool.list_memories(spec, ns) == []
    await pool.search(spec, ns, "anything", 1)
    assert pool.current(1) is not second and pool.built == 3
    await pool.close_all(5)
    engine.close()


async def test_a_page_of_memories_reads_that_page_not_the_whole_namespace(
    tmp_path: Path,
    upstream_server: tuple[FakeUpstream, str],
    vectors: VectorEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The console lists a user's facts a page at a time: a user of 100,000 facts costs a
    page, so reading one must not walk the others."""
    pool, spec = _direct_pool(tmp_path, upstream_server[1], vectors)
    ns = mem0_config.namespace(1, "ada")
    await pool.add_raw(spec, ns, [(f"Ada fact number {n}", {}) for n in range(7)])
    pages = [await pool.page_memories(spec, ns, offset, 3) for offset in (0, 3, 6)]
    assert [len(found) for found, _ in pages] == [3, 3, 1]
    assert {total for _, total in pages} == {7}
    texts = [m.text for found, _ in pages for m in found]
    assert sorted(texts) == sorted(f"Ada fact number {n}" for n in range(7))

    read: list[str] = []
    index = pool._index(spec)

    class Counting:
        def scroll(self, where: object = None, **kwargs: object) -> Iterator[StoredPoint]:
            for point in index.scroll(where, **kwargs):  # type: ignore[arg-type]
                read.append(point.id)
                yield point

        def count(self, where: object = None) -> int:
            return index.count(where)  # type: ignore[arg-type]

    monkeypatch.setattr(pool, "_index", lambda _spec: Counting())
    found, total = await pool.page_memories(spec, ns, 0, 2)
    assert len(found) == 2 and total == 7 and len(read) == 2
    await pool.close_all(5)


async def test_instances_are_bounded_least_recently_used_first_and_an_evicted_token_works(
    tmp_path: Path, upstream_server: tuple[FakeUpstream, str]
) -> None:
    """More tokens than `max_instances`: the pool keeps the most recently used ones, closes
    what an evicted one held (its history connection), and builds it again when needed."""
    engine = EdgeEngine(tmp_path / "data")
    pool = Mem0Pool(
        engine, tmp_path / "mem0", threads=2, embed_timeout=10, llm_timeout=10, max_instances=2
    )
    config = validate_config(
        {"name": "t", "llm_base_url": "http://unused", **memory_fields(upstream_server[1])}
    )
    specs = {i: mem0_config.build_spec(i, config, pool.mem0_dir) for i in range(1, 6)}
    built: dict[int, Any] = {}
    frozen = 0
    for token_id, spec in specs.items():
        ns = mem0_config.namespace(token_id, "u")
        await pool.add_raw(spec, ns, [(f"token {token_id} keeps a pet otter", {})])
        built[token_id] = pool.current(token_id)
        assert pool.instances <= 2
        frozen = frozen or gc.get_freeze_count()
    # Instances are not frozen out of the collector: an evicted one's cycles are collected.
    assert gc.get_freeze_count() == frozen
    assert pool.built == 5 and pool.evicted == 3
    assert [pool.current(i) is not None for i in specs] == [False, False, False, True, True]
    # Closed once idle: Mem0's history connection is gone.
    wait_until(lambda: all(built[t].db is None for t in (1, 2, 3)), what="evicted ones closed")
    assert built[5].db is not None

    found = await pool.search(specs[1], mem0_config.namespace(1, "u"), "pet otter", 5)
    assert [m.text for m in found] == ["token 1 keeps a pet otter"]
    assert pool.built == 6 and pool.instances == 2
    assert pool.current(1) is not built[1] and pool.current(4) is None  # 4 was the oldest
    await pool.close_all(5)
    engine.close()


def test_the_bound_on_instances_comes_from_the_settings(tmp_path: Path) -> None:
    from memory_bridge.settings import Settings
    from memory_bridge.sources.services import create_long_term_memory

    assert Settings().mem0_max_instances == pool_module.DEFAULT_MAX_INSTANCES == 64
    settings = Settings(memory_bridge_data_dir=tmp_path, mem0_max_instances=3)
    engine = EdgeEngine(tmp_path)
    try:
        pool = create_long_term_memory(settings, engine, None).pool
        assert pool._max_instances == 3
    finally:
        engine.close()
