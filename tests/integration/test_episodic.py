"""Episodic memory through the real proxy and the openai SDK: what an end user said in one
session is recalled in another by its words and its meaning, with no fact extraction at all;
never for another end user or token; and the trace says where each item came from."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.longterm_support import forwarded_recall, memory_fields, wait_until
from tests.support.proxy import Proxy


def _no_facts(_: list[str]) -> Scenario:
    # Mem0's extraction finds nothing: whatever is recalled comes from the raw conversation.
    return Scenario(content=json.dumps({"memory": []}))


def _say(proxy: Proxy, token: str, text: str, session: str, user: str = "ada") -> str:
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user=user,
        extra_headers={"X-Session-Id": session},
    )
    return str(raw.headers["x-request-id"])


def _indexed(proxy: Proxy, token_id: int) -> Callable[[], bool]:
    def done() -> bool:
        summary = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()
        counts = summary["consumers"].get("episodic", {})
        return bool(counts) and set(counts) == {"done"}

    return done


def test_a_fact_said_in_one_session_is_recalled_in_another_for_that_user_only(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    upstream.memory_responder = _no_facts
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    other_id, other = proxy.create_token(
        name="other", **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    _say(proxy, token, "My sister Ingrid lives in Trondheim", "monday")
    _say(proxy, token, "I bought a red kayak", "monday")
    _say(proxy, other, "My sister Ingrid lives in Trondheim", "monday", user="bob")
    wait_until(_indexed(proxy, token_id), what="the episodic jobs")

    rid = _say(proxy, token, "Where does Ingrid live?", "friday")
    block = forwarded_recall(upstream)
    assert "My sister Ingrid lives in Trondheim" in block
    # Another end user of the same token, and another token, get none of it.
    _say(proxy, token, "Where does Ingrid live?", "friday", user="eve")
    assert "Trondheim" not in forwarded_recall(upstream)
    _say(proxy, other, "What kayak did I buy?", "friday", user="bob")
    assert "kayak" not in forwarded_recall(upstream)

    trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{rid}").json()
    episodic = [c for c in trace["candidates"] if c["source"] == "episodic"]
    hit = next(c for c in episodic if c["text"] == "My sister Ingrid lives in Trondheim")
    assert hit["kept"] and hit["rank"] == 1
    assert hit["scores"]["sparse_rank"] == 1 and hit["scores"]["dense_rank"] is not None
    assert hit["lineage"]["session"] == "monday" and len(hit["lineage"]["event_id"]) == 36
    assert other_id != token_id


def test_an_answer_is_found_by_the_words_of_its_question(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    """The reply is indexed with the message before it: asking with the question's words
    finds the answer even when the answer shares none of them."""
    upstream.memory_responder = _no_facts
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    upstream.enqueue(Scenario(content="Forty-two, obviously."))
    _say(proxy, token, "What is the answer to everything?", "s1")
    wait_until(_indexed(proxy, token_id), what="the episodic jobs")
    rid = _say(proxy, token, "Remind me: the answer to everything?", "s2")
    assert "Forty-two, obviously." in forwarded_recall(upstream)
    trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{rid}").json()
    answer = next(c for c in trace["candidates"] if c["text"] == "Forty-two, obviously.")
    assert answer["scores"]["sparse_rank"] is not None  # found by its question's words


def test_purging_a_token_drops_its_episodic_index(proxy: Proxy, upstream: FakeUpstream) -> None:
    upstream.memory_responder = _no_facts
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    _say(proxy, token, "The vault code is 7351", "s1")
    wait_until(_indexed(proxy, token_id), what="the episodic jobs")
    shards = proxy.settings.memory_bridge_data_dir / "vectors" / f"t{token_id}"
    assert shards.exists() and any(shards.iterdir())
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 204
    assert not shards.exists() or not any(shards.iterdir())
