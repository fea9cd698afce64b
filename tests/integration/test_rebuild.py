"""Episodic memory by default, rebuild and re-embed, through the real proxy and the openai SDK.

A token with no embedder at all still recalls what an end user said in another session (BM25
alone here: the tests' default embedder is `none`); a rebuild from the log gives the same recall
as before and switches shards; changing a token's embedder re-embeds its past turns while
recall keeps answering from the old shard, then switches to the new model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.longterm_support import (
    forwarded_recall,
    memory_block,
    memory_fields,
    wait_until,
)
from tests.support.proxy import Proxy, start_proxy

FACTS = (
    "My sister Ingrid lives in Trondheim",
    "I bought a red kayak last summer",
    "Our dentist appointment is on Thursday",
)
QUERIES = ("Where does Ingrid live?", "What kayak did I buy?", "When is the dentist?")


@pytest.fixture
def fast_proxy(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Proxy]:
    # A short token cache: the old shard is dropped one cache period after the switch.
    server, proxy = start_proxy(tmp_path / "data", upstream_server[1], token_cache_ttl=0.2)
    try:
        yield proxy
    finally:
        server.stop()


def _say(proxy: Proxy, token: str, text: str, session: str, user: str = "ada") -> None:
    reply = proxy.client(token).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user=user,
        extra_headers={"X-Session-Id": session},
    )
    assert reply.choices[0].message.content


def _jobs_done(proxy: Proxy, token_id: int, consumer: str = "episodic") -> bool:
    counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"].get(consumer, {})
    return bool(counts) and set(counts) == {"done"}


def _recalls(proxy: Proxy, token: str, upstream: FakeUpstream, round_: str) -> list[list[str]]:
    """Per query, the facts recalled, in their order (the questions asked by earlier rounds
    are stored turns too, and would differ between rounds: left out)."""
    recalled = []
    for i, query in enumerate(QUERIES):
        _say(proxy, token, query, f"ask-{round_}-{i}", user="ada")
        items = memory_block(forwarded_recall(upstream))
        recalled.append([item for item in items if item in FACTS])
    return recalled


def _rebuild(proxy: Proxy, token_id: int) -> dict[str, Any]:
    reply = proxy.admin("GET", f"/tokens/{token_id}/rebuild")
    assert reply.status_code == 200, reply.text
    layers: dict[str, Any] = reply.json()["layers"]
    return layers.get("episodic", {})


def _shards(proxy: Proxy, token_id: int) -> list[str]:
    home = proxy.settings.memory_bridge_data_dir / "vectors" / f"t{token_id}"
    models = (json.loads((d / "meta.json").read_text())["model_id"] for d in home.iterdir())
    return sorted(m for m in models if not m.startswith("mem0:"))  # Mem0's facts: not episodic


def test_a_token_without_embedder_recalls_and_a_rebuild_gives_the_same_recall(
    fast_proxy: Proxy, upstream: FakeUpstream
) -> None:
    proxy = fast_proxy
    upstream.memory_responder = lambda _: Scenario(content=json.dumps({"memory": []}))
    token_id, token = proxy.create_token()  # no embedder, no memory LLM
    detail = proxy.admin("GET", f"/tokens/{token_id}").json()
    assert detail["memory_layers"]["episodic"] == "on (no embedder: BM25 alone)"
    for i, fact in enumerate(FACTS):
        _say(proxy, token, fact, f"monday-{i}")
    _say(proxy, token, "I bought a red kayak last summer", "other", user="bob")
    wait_until(lambda: _jobs_done(proxy, token_id), what="the episodic jobs")

    before = _recalls(proxy, token, upstream, "before")
    for fact, facts in zip(FACTS, before, strict=True):
        assert facts[0] == fact  # said in another session, recalled with no embedder at all
    assert _shards(proxy, token_id) == ["none:bm25"]

    started = proxy.admin("POST", f"/tokens/{token_id}/rebuild?layer=episodic")
    assert started.status_code == 202, started.text
    assert started.json()["layers"]["episodic"]["target"]["model"] == "none:bm25@g1"
    wait_until(lambda: _rebuild(proxy, token_id)["state"] == "idle", what="the rebuild")
    state = _rebuild(proxy, token_id)
    # The six turns of ada (three facts, three questions) and bob's one were replayed.
    assert state["active"] == {"model": "none:bm25@g1", "dims": 0}
    assert state["done"] == state["total"] == 7 and state["target"] is None
    wait_until(lambda: _shards(proxy, token_id) == ["none:bm25@g1"], what="the old shard dropped")

    after = _recalls(proxy, token, upstream, "after")
    assert after == before
    # Bob's kayak stays bob's after the rebuild.
    _say(proxy, token, "What kayak did I buy?", "ask-eve", user="eve")
    assert "kayak" not in forwarded_recall(upstream)

    # A token without long-term memory: its long-term layer is refused clearly.
    refused = proxy.admin("POST", f"/tokens/{token_id}/rebuild?layer=longterm")
    assert refused.status_code == 409 and "no long-term memory" in refused.text
    assert proxy.admin("POST", "/tokens/999999/rebuild").status_code == 404


def test_changing_the_embedder_re_embeds_while_recall_keeps_working(
    fast_proxy: Proxy, upstream: FakeUpstream
) -> None:
    proxy = fast_proxy
    upstream.memory_responder = lambda _: Scenario(content=json.dumps({"memory": []}))
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, dims=32, embed_body={"model": "bow-old"})
    )
    for i, fact in enumerate(FACTS):
        _say(proxy, token, fact, f"monday-{i}")
    wait_until(lambda: _jobs_done(proxy, token_id), what="the episodic jobs")
    assert _shards(proxy, token_id) == ["openai:bow-old"]

    # The new model's batches (the re-embed) wait; single queries are answered.
    upstream.hold_embeddings(
        when=lambda body: body.get("model") == "bow-new" and len(body.get("input", [])) > 1
    )
    try:
        patched = proxy.admin(
            "PATCH",
            f"/tokens/{token_id}?validate=false",
            json={"embed_dims": 48, "embed_body": {"model": "bow-new"}},
        )
        assert patched.status_code == 200, patched.text
        reindex = patched.json()["reindex"]["episodic"]
        assert reindex["state"] == "running" and reindex["reason"] == "reembed"
        assert reindex["active"] == {"model": "openai:bow-old", "dims": 32}
        assert reindex["target"] == {"model": "openai:bow-new@g1", "dims": 48}

        # While the re-embed is stuck, recall answers from the old shard, every time.
        for round_ in range(2):
            for query, fact in zip(QUERIES, FACTS, strict=True):
                _say(proxy, token, query, f"during-{round_}")
                assert fact in forwarded_recall(upstream)
        _say(proxy, token, "I keep a green canoe in the garage", "during-canoe")
        assert _rebuild(proxy, token_id)["state"] == "running"
    finally:
        upstream.release_embeddings()

    wait_until(lambda: _rebuild(proxy, token_id)["state"] == "idle", what="the re-embed")
    assert _rebuild(proxy, token_id)["active"] == {"model": "openai:bow-new@g1", "dims": 48}
    wait_until(
        lambda: _shards(proxy, token_id) == ["openai:bow-new@g1"], what="the old shard dropped"
    )
    wait_until(lambda: _jobs_done(proxy, token_id), what="the turns said meanwhile")
    seen = len(upstream.embedding_requests)
    _say(proxy, token, "Where does Ingrid live?", "after")
    assert FACTS[0] in forwarded_recall(upstream)
    queried = [r.json for r in upstream.embedding_requests[seen:]]
    assert any(q.get("model") == "bow-new" for q in queried)
    assert all(q.get("model") != "bow-old" for q in queried)
    # A turn said during the re-embed is in the new shard too.
    _say(proxy, token, "Where is my canoe?", "after-canoe")
    assert "green canoe" in forwarded_recall(upstream)
    # The detail never shows the embedder's key.
    assert "embed-secret" not in proxy.admin("GET", f"/tokens/{token_id}").text


def test_the_rebuild_command_follows_a_running_server(
    fast_proxy: Proxy, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from memory_bridge.cli.main import cli

    proxy = fast_proxy
    token_id, token = proxy.create_token()
    _say(proxy, token, FACTS[0], "monday")
    wait_until(lambda: _jobs_done(proxy, token_id), what="the episodic jobs")
    monkeypatch.setenv("MEMORY_BRIDGE_ADMIN_TOKEN", proxy.admin_token)

    result = CliRunner().invoke(cli, ["rebuild", "--token", str(token_id), "--url", proxy.url])
    assert result.exit_code == 0, result.output
    done = f"Token {token_id}: episodic: 1 turn(s) rebuilt into none:bm25@g1 (0 dims)."
    assert done in result.output
    assert "rebuild: episodic idle 1/1" in result.output
    refused = CliRunner().invoke(
        cli, ["rebuild", "--token", str(token_id), "--layer", "longterm", "--url", proxy.url]
    )
    assert refused.exit_code == 1 and "no long-term memory" in refused.output
