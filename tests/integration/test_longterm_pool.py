"""The pool of Mem0 instances: built lazily, rebuilt on PATCH, purged on DELETE, closed at
shutdown — and one Qdrant client for all of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from qdrant_client import QdrantClient
from qdrant_client.local.local_collection import LocalCollection

from memory_bridge.sources import mem0_config, mem0_pool
from memory_bridge.sources.mem0_pool import Mem0Pool, PoolPaths
from memory_bridge.sources.qdrant_store import FastFilterCollection
from memory_bridge.tenancy.config import validate_config
from tests.fakes.upstream import FakeUpstream
from tests.integration.longterm_support import (
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


def test_instances_are_lazy_shared_client_and_patch_rebuilds(
    running: Running, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, pool = running.proxy, running.pool
    freezes: list[int] = []  # the Qdrant client's opening and each build (heap.py)
    monkeypatch.setattr(mem0_pool, "freeze_long_lived", lambda: freezes.append(pool.built))
    a_id, a = proxy.create_token(name="a", **memory_fields(proxy.upstream_url))
    b_id, b = proxy.create_token(name="b", **memory_fields(proxy.upstream_url))
    assert pool.current(a_id) is None and pool.built == 0  # nothing built before first use
    assert chat(proxy, a, "My cat is called Tom").status_code == 200
    assert chat(proxy, b, "My cat is called Felix").status_code == 200
    wait_for_memory(proxy, a_id, "My cat is called Tom")
    first = pool.current(a_id)
    assert first is not None and pool.current(b_id) is not None
    assert first.vector_store.client is pool.current(b_id).vector_store.client
    built = pool.built
    assert len(freezes) == 1 + built  # once for the client, once per instance

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
    assert pool.current(b_id) is not None  # the other token's instance is untouched

    # Rotation keeps the namespace (the id), so the memories stay.
    new_secret = proxy.admin("POST", f"/tokens/{a_id}/rotate").json()["token"]
    assert chat(proxy, new_secret, "Remind me of my cat", session="r").status_code == 200
    assert "My cat is called Tom" in memory_block(forwarded_recall(upstream))


def test_new_embedding_space_gets_its_own_collection_and_purge_drops_all(
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
    # Vectors of another size (or model) are not comparable: a fresh collection, empty.
    assert memory_texts(proxy, token_id) == set()
    assert chat(proxy, token, "What car do I have?").status_code == 200
    assert memory_block(forwarded_recall(upstream)) == []
    mine = [n for n in running.collections() if n.startswith(f"mb_t{token_id}_")]
    assert len(mine) == 2
    assert _history_file(running, token_id).exists()

    # Without purge the data stays; with it, every collection of the token goes.
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 204
    assert not [n for n in running.collections() if n.startswith(f"mb_t{token_id}_")]
    assert not _history_file(running, token_id).exists()
    assert running.pool.current(token_id) is None
    assert memory_texts(proxy, other_id) == {"My car is a blue Fiat"}

    assert proxy.admin("DELETE", f"/tokens/{other_id}").status_code == 204
    assert [n for n in running.collections() if n.startswith(f"mb_t{other_id}_")]


def test_purge_of_a_token_that_never_used_memory_creates_nothing(
    running: Running, upstream: FakeUpstream
) -> None:
    proxy = running.proxy
    token_id, token = proxy.create_token()
    assert chat(proxy, token, "hi").status_code == 200
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 204
    assert not proxy.settings.resolved_qdrant_path.exists()


def test_shutdown_closes_every_instance_and_the_qdrant_client(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    run = start(tmp_path / "data", upstream_server[1])
    proxy = run.proxy
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    assert chat(proxy, token, "I was born in Lisbon").status_code == 200
    wait_for_memory(proxy, token_id, "I was born in Lisbon")
    memory = run.pool.current(token_id)
    assert memory is not None and memory.db is not None
    run.server.stop()

    assert memory.db is None  # Mem0's history connection is closed
    # Local mode allows one client per path: reopening works only if ours was closed.
    client = QdrantClient(path=str(proxy.settings.resolved_qdrant_path))
    try:
        (name,) = client.get_collections().collections
        points, _ = client.scroll(name.name, with_payload=True)
        assert [p.payload["data"] for p in points if p.payload] == ["I was born in Lisbon"]
    finally:
        client.close()


def _direct_pool(tmp_path: Path, upstream_url: str) -> tuple[Mem0Pool, mem0_config.Mem0Spec]:
    """A pool used without the proxy, and the spec of token 1 with the fake upstream's Mem0."""
    pool = Mem0Pool(
        PoolPaths(tmp_path / "qdrant", "", "", tmp_path / "mem0"),
        threads=2,
        embed_timeout=10,
        llm_timeout=10,
    )
    config = validate_config(
        {"name": "t", "llm_base_url": "http://unused", **memory_fields(upstream_url)}
    )
    return pool, mem0_config.build_spec(1, config, pool.mem0_dir)


async def test_pool_used_directly_with_raw_adds_that_carry_metadata(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    """The pool without the proxy (as a benchmark uses it): raw adds need no LLM."""
    pool, spec = _direct_pool(tmp_path, upstream_server[1])
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
    await pool.close_all(5)
    with pytest.raises(RuntimeError):
        await pool.search(spec, ns, "anything", 1)


async def test_end_users_of_one_token_stay_apart_on_the_fast_filter_path(
    tmp_path: Path, upstream_server: tuple[FakeUpstream, str]
) -> None:
    """One collection per token: the namespace filter keeps end users apart, and the fast
    path (`qdrant_store.FastFilterCollection`) finds exactly what the generic interpreter of
    Qdrant's local mode finds, scores included."""
    pool, spec = _direct_pool(tmp_path, upstream_server[1])
    users = {"": "token", "alice": "alice", "bob smith": "bob"}
    for user, who in users.items():
        items = [(f"{who} likes {thing}", {"who": who}) for thing in ("tea", "chess", "jazz")]
        await pool.add_raw(spec, mem0_config.namespace(1, user), items)

    async def search_all() -> dict[str, list[tuple[str, float | None]]]:
        out = {}
        for user in users:
            found = await pool.search(spec, mem0_config.namespace(1, user), "likes chess", 10)
            out[user] = [(m.text, m.score) for m in found]
        return out

    fast = await search_all()
    for user, who in users.items():
        assert {text.split()[0] for text, _ in fast[user]} == {who}, fast[user]
        assert len(fast[user]) == 3
    token_wide = await pool.search(spec, None, "likes chess", 20)  # every namespace
    assert len(token_wide) == 9

    client = pool._qdrant()
    backend = client._client._inner  # type: ignore[attr-defined]
    collection = backend.collections[spec.collection]
    assert type(collection) is FastFilterCollection
    collection.__class__ = LocalCollection  # the interpreter, as qdrant-client ships it
    try:
        assert await search_all() == fast
    finally:
        collection.__class__ = FastFilterCollection
    await pool.close_all(5)
