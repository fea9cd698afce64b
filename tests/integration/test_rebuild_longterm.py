"""The long-term layer's rebuild and re-embed from the `longterm.*` events, through the real
proxy (openai SDK for the turns, Mem0 with the fake memory LLM): the same facts are recalled
after as before, no LLM call is made, Mem0 keeps updating and deleting on the rebuilt shard,
and the old shard goes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import (
    Running,
    memory_fields,
    memory_texts,
    start,
    wait_for_memory,
    wait_until,
)

FACTS = (
    "My sister Ingrid lives in Trondheim",
    "I bought a red kayak last summer",
    "Our dentist appointment is on Thursday",
    "My old phone number is secret",
)
QUERIES = ("Where does Ingrid live?", "What kayak did I buy?", "When is the dentist?")


@pytest.fixture
def fast(tmp_path: Path, upstream_server: tuple[FakeUpstream, str]) -> Iterator[Running]:
    # A short token cache: the old shard is dropped one cache period after the switch.
    run = start(tmp_path / "data", upstream_server[1], episodic_memory=False, token_cache_ttl=0.2)
    try:
        yield run
    finally:
        run.server.stop()


def _say(run: Running, token: str, text: str) -> None:
    reply = run.proxy.client(token).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user="ada",
        extra_headers={"X-Session-Id": "s"},
    )
    assert reply.choices[0].message.content


def _recall(run: Running, token_id: int) -> list[list[tuple[str, str]]]:
    out = []
    for query in QUERIES:
        reply = run.proxy.admin(
            "GET", f"/tokens/{token_id}/memories/search", params={"query": query, "user": "ada"}
        )
        assert reply.status_code == 200, reply.text
        out.append([(m["id"], m["memory"]) for m in reply.json()["data"]])
    return out


def _layer(run: Running, token_id: int) -> dict[str, Any]:
    reply = run.proxy.admin("GET", f"/tokens/{token_id}/rebuild")
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()["layers"].get("longterm", {})
    return found


def _switched(run: Running, token_id: int, model: str, dims: int) -> bool:
    state = _layer(run, token_id)
    return state.get("state") == "idle" and state["active"] == {"model": model, "dims": dims}


def test_facts_are_rebuilt_from_their_events_without_the_llm(
    fast: Running, upstream: FakeUpstream
) -> None:
    proxy = fast.proxy
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    for fact in FACTS:
        _say(fast, token, fact)
        wait_for_memory(proxy, token_id, fact, "ada")
    # A fact deleted by the operator stays deleted through the rebuild.
    gone = next(
        m
        for m in proxy.admin("GET", f"/tokens/{token_id}/memories").json()["data"]
        if m["memory"] == FACTS[3]
    )
    assert proxy.admin("DELETE", f"/tokens/{token_id}/memories/{gone['id']}").status_code == 204
    before = _recall(fast, token_id)
    assert all(hits for hits in before)
    calls = len(upstream.chat_requests)

    reply = proxy.admin("POST", f"/tokens/{token_id}/rebuild", params={"layer": "longterm"})
    assert reply.status_code == 202, reply.text
    wait_until(lambda: _switched(fast, token_id, "mem0:bow-embed@g1", 32), what="the switch")
    # 3 retained and 1 deleted: the deleted fact's `retained` event went with its text.
    assert _layer(fast, token_id)["done"] == 4
    assert _recall(fast, token_id) == before  # same ids, texts and order
    assert memory_texts(proxy, token_id) == set(FACTS[:3])
    assert len(upstream.chat_requests) == calls  # no LLM call
    model = "mem0:bow-embed@g1"
    wait_until(lambda: fast.shards(token_id) == [(token_id, model, 32)], what="the old drop")

    # Mem0 keeps working on the rebuilt shard: a new turn's fact, an operator's delete.
    _say(fast, token, "My cat is called Tom")
    wait_for_memory(proxy, token_id, "My cat is called Tom", "ada")
    kayak = before[1][0][0]
    assert proxy.admin("DELETE", f"/tokens/{token_id}/memories/{kayak}").status_code == 204
    assert FACTS[1] not in memory_texts(proxy, token_id)

    # A new embedder size re-embeds the facts; Mem0 reads the old shard until the switch.
    reply = proxy.admin("PATCH", f"/tokens/{token_id}", json={"embed_dims": 24})
    assert reply.status_code == 200, reply.text
    assert memory_texts(proxy, token_id) == {FACTS[0], FACTS[2], "My cat is called Tom"}
    wait_until(lambda: _switched(fast, token_id, "mem0:bow-embed@g2", 24), what="the re-embed")
    assert memory_texts(proxy, token_id) == {FACTS[0], FACTS[2], "My cat is called Tom"}
    hits = _recall(fast, token_id)
    assert hits[0][0][1] == FACTS[0] and hits[2][0][1] == FACTS[2]
    wait_until(
        lambda: fast.shards(token_id) == [(token_id, "mem0:bow-embed@g2", 24)],
        what="the old shard to go",
    )
