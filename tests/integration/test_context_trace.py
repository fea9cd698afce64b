"""The context trace of a chat request, read back through the admin API as an operator would:
every recalled candidate with its scores, rank, tokens and fate; the placed blocks; scoped to
its token; and the token budget applied to what is injected."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import (
    EMBED_KEY,
    MEMORY_LLM_KEY,
    memory_fields,
    wait_for_memory,
)
from tests.support.proxy import UPSTREAM_KEY, Proxy, start_proxy


def _remember_two_facts(proxy: Proxy, token_id: int, token: str) -> None:
    client = proxy.client(token)
    for fact in ("My favourite colour is teal", "My cat is called Tom"):
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": fact}],
            extra_headers={"X-Session-Id": "facts"},
        )
        wait_for_memory(proxy, token_id, fact)


def test_a_request_trace_lists_every_candidate_and_block(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    other_id, _ = proxy.create_token(name="other")
    _remember_two_facts(proxy, token_id, token)
    client = proxy.client(token)
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hello"}],
        extra_headers={"X-Session-Id": "s2"},
    )
    raw = client.chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "What colour do I like?"}],
        extra_headers={"X-Session-Id": "s2"},
    )
    request_id = raw.headers["x-request-id"]
    reply = proxy.admin("GET", f"/tokens/{token_id}/traces/{request_id}")
    assert reply.status_code == 200, reply.text
    trace = reply.json()
    assert trace["request_id"] == request_id
    assert trace["budget_tokens"] == proxy.settings.memory_token_budget
    texts = {c["text"] for c in trace["candidates"]}
    assert {"My favourite colour is teal", "My cat is called Tom"} <= texts
    for candidate in trace["candidates"]:
        assert candidate["source"] == "longterm"
        assert candidate["kept"] is True and candidate["tokens"] > 0
        assert candidate["rank"] >= 1 and len(candidate["digest"]) == 16
        assert candidate["scores"]["final"] > 0
    assert trace["recalled_tokens"] == sum(c["tokens"] for c in trace["candidates"])
    kinds = [b["kind"] for b in trace["blocks"]]
    assert "history" in kinds  # the session's earlier turns, placed as they are

    # Asked in the session that stated the facts, they are already in the prompt (history).
    raw = client.chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "What colour do I like?"}],
        extra_headers={"X-Session-Id": "facts"},
    )
    again = proxy.admin("GET", f"/tokens/{token_id}/traces/{raw.headers['x-request-id']}").json()
    fates = {c["text"]: c for c in again["candidates"]}
    assert fates["My favourite colour is teal"]["dropped"] == "in_prompt"
    assert fates["My cat is called Tom"]["dropped"] == "in_prompt"
    # Scoped to its token, and no secret anywhere in it.
    assert proxy.admin("GET", f"/tokens/{other_id}/traces/{request_id}").status_code == 404
    assert proxy.admin("GET", f"/tokens/{token_id}/traces/ffffffff").status_code == 404
    for secret in (UPSTREAM_KEY, MEMORY_LLM_KEY, EMBED_KEY, token, proxy.admin_token):
        assert secret not in reply.text


@pytest.fixture
def tight(tmp_path: Path, upstream_server: tuple[FakeUpstream, str]) -> Iterator[Proxy]:
    server, proxy = start_proxy(
        tmp_path / "data", upstream_server[1], memory_token_budget=8, episodic_memory=False
    )
    try:
        yield proxy
    finally:
        server.stop()


def test_the_budget_decides_what_is_injected_and_the_trace_says_why(
    tight: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = tight.create_token(**memory_fields(tight.upstream_url))
    _remember_two_facts(tight, token_id, token)
    raw = tight.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "Tell me about my cat Tom"}],
        extra_headers={"X-Session-Id": "new-session"},
    )
    trace = tight.admin("GET", f"/tokens/{token_id}/traces/{raw.headers['x-request-id']}").json()
    kept = [c for c in trace["candidates"] if c["kept"]]
    dropped = [c for c in trace["candidates"] if not c["kept"]]
    assert len(kept) == 1 and len(dropped) == 1
    assert dropped[0]["dropped"] == "budget"
    assert trace["recalled_tokens"] <= 8
    forwarded = str(upstream.proxied_requests[-1].json["messages"])
    assert kept[0]["text"] in forwarded
    assert dropped[0]["text"] not in forwarded


async def test_traces_are_kept_for_a_bounded_count_and_age(tmp_path: Path) -> None:
    from memory_bridge.storage.db import create_engine, create_schema, session_factory
    from memory_bridge.storage.traces import TraceStore

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    await create_schema(engine)
    db = session_factory(engine)
    try:
        by_count = TraceStore(db, keep_count=5, keep_seconds=3600)
        for i in range(100):
            by_count.save(1, f"{i:08x}", {"n": i})
            await by_count.flush()
        by_count.save(2, "0000000a", {"n": "other token"})
        assert await by_count.get(1, f"{99:08x}") == {"n": 99}
        assert await by_count.get(1, f"{95:08x}") == {"n": 95}
        assert await by_count.get(1, f"{90:08x}") is None  # pruned: only the newest are kept
        assert await by_count.get(2, "0000000a") == {"n": "other token"}
        by_age = TraceStore(db, keep_count=1000, keep_seconds=0.0)
        for i in range(50):
            by_age.save(3, f"{i:08x}", {"n": i})
        await by_age.close()
        assert await by_age.get(3, f"{48:08x}") is None  # older than the age limit
    finally:
        await db.close()
        await engine.dispose()


@pytest.fixture
def proxy(mem0_proxy: Proxy) -> Proxy:
    """These tests are about Mem0's facts: episodic recall is off (tested on its own)."""
    return mem0_proxy
