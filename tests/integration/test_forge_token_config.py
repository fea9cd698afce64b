"""A token's own forge settings and placement, through the real proxy and the openai SDK: its
`memory.forge` budget and weights decide what is injected and in which order (the trace says
why), and `memory.placement` decides where the recall block goes, for chat completions and for
the Responses API alike (checked on what the upstream received)."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.longterm_support import memory_fields, wait_until
from tests.support.proxy import Proxy

FACTS = (
    # Sparse (BM25, IDF per user) favours the rare word "kumquat"; dense (bag-of-words cosine)
    # favours the short text made of the query's common word "garden" alone.
    "garden garden",
    "kumquat jam in the pantry by the old stove and the big wooden table",
    "garden shed",
    "garden gnome",
)
QUESTION = "garden kumquat"
MEMORY_MARK = "## Memories about this user"  # templates/memory_template.md


def _no_facts(_: list[str]) -> Scenario:
    return Scenario(content=json.dumps({"memory": []}))


def _say(proxy: Proxy, token: str, text: str, session: str) -> str:
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user="ada",
        extra_headers={"X-Session-Id": session},
    )
    return str(raw.headers["x-request-id"])


def _indexed(proxy: Proxy, token_id: int) -> bool:
    counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"].get("episodic")
    return bool(counts) and set(counts) == {"done"}


def _forge(proxy: Proxy, token_id: int, forge: dict[str, Any]) -> None:
    reply = proxy.admin("PATCH", f"/tokens/{token_id}", json={"memory": {"forge": forge}})
    assert reply.status_code == 200, reply.text


def _facts_in_trace(proxy: Proxy, token_id: int, rid: str) -> list[dict[str, Any]]:
    trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{rid}").json()
    return [c for c in trace["candidates"] if c["text"] in FACTS]


def test_budget_and_weights_are_per_token(proxy: Proxy, upstream: FakeUpstream) -> None:
    upstream.memory_responder = _no_facts
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    for i, fact in enumerate(FACTS):
        _say(proxy, token, fact, f"facts-{i}")
    wait_until(lambda: _indexed(proxy, token_id), what="the episodic jobs")

    # Dense only: the order of the dense list.
    _forge(proxy, token_id, {"sourceWeights": {"episodic": {"dense": 1, "sparse": 0}}})
    dense = _facts_in_trace(proxy, token_id, _say(proxy, token, QUESTION, "q1"))
    # Sparse only (the same index, another session so no history hides a fact).
    _forge(proxy, token_id, {"sourceWeights": {"episodic": {"dense": 0, "sparse": 1}}})
    sparse = _facts_in_trace(proxy, token_id, _say(proxy, token, QUESTION, "q2"))
    assert all(c["kept"] for c in dense + sparse)

    def order(candidates: list[dict[str, Any]], by: str) -> list[str]:
        listed = [c for c in candidates if c["scores"][by] is not None]
        return [c["text"] for c in sorted(listed, key=lambda c: c["scores"][by])]

    by_rank = [c["text"] for c in sorted(dense, key=lambda c: c["rank"])]
    assert by_rank[: len(order(dense, "dense_rank"))] == order(dense, "dense_rank")
    by_rank = [c["text"] for c in sorted(sparse, key=lambda c: c["rank"])]
    assert by_rank[: len(order(sparse, "sparse_rank"))] == order(sparse, "sparse_rank")
    first = {
        min(dense, key=lambda c: c["rank"])["text"],
        min(sparse, key=lambda c: c["rank"])["text"],
    }
    assert first == {"garden garden", FACTS[1]}  # the weights changed what comes first

    # A tiny budget: fewer items injected, and the trace says the rest did not fit.
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": QUESTION}],
        user="ada",
        extra_headers={"X-Session-Id": "q3-before"},
    )
    before = int(dict(_layers(raw.headers["x-memorybridge-injected"]))["episodic"])
    _forge(proxy, token_id, {"memoryTokenBudget": 3})
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": QUESTION}],
        user="ada",
        extra_headers={"X-Session-Id": "q3"},
    )
    after = int(dict(_layers(raw.headers["x-memorybridge-injected"]))["episodic"])
    trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{raw.headers['x-request-id']}").json()
    assert trace["budget_tokens"] == 3 and trace["recalled_tokens"] <= 3
    assert 1 <= after < before
    assert [c["dropped"] for c in trace["candidates"] if not c["kept"]].count("budget") >= 1
    # A bad value is refused and changes nothing.
    bad = proxy.admin("PATCH", f"/tokens/{token_id}", json={"memory": {"forge": {"minScore": 2}}})
    assert bad.status_code == 422 and "memory.forge.minScore" in bad.text
    saved = proxy.admin("GET", f"/tokens/{token_id}").json()["config"]["memory"]
    assert saved == {"forge": {"memoryTokenBudget": 3}}


def _layers(header: str) -> list[tuple[str, str]]:
    return [tuple(p.strip().split("=", 1)) for p in header.split(",")]  # type: ignore[misc]


def _recall_block(item: dict[str, Any]) -> bool:
    text = json.dumps(item.get("content"))
    return item.get("role") == "user" and MEMORY_MARK in text and "red kayak" in text


def test_placement_stable_and_reference_first_for_chat_and_responses(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    upstream.memory_responder = _no_facts
    layouts = {}
    for placement in ("stable", "reference_first"):
        token_id, token = proxy.create_token(
            name=placement,
            memory={"placement": placement},
            **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"}),
        )
        _say(proxy, token, "I bought a red kayak", "old")
        wait_until(lambda: _indexed(proxy, token_id), what="the episodic jobs")  # noqa: B023
        _say(proxy, token, "Hello there", "new")  # the session's history: one turn
        client = proxy.client(token)
        question = "Tell me about the red kayak I bought"
        client.chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": "S"}, {"role": "user", "content": question}],
            user="ada",
            extra_headers={"X-Session-Id": "new"},
        )
        chat = upstream.proxied_requests[-1].json["messages"]
        client.responses.create(
            model="m",
            instructions="S",
            input=question,
            user="ada",
            extra_headers={"X-Session-Id": "new"},
        )
        items = upstream.responses_requests[-1].json["input"]
        layouts[placement] = (chat, items)

    def shape(messages: list[dict[str, Any]]) -> list[str]:
        names = []
        for i, m in enumerate(messages):
            if m["role"] == "system":
                names.append("system")
            elif _recall_block(m):
                names.append("recall")
            elif i == len(messages) - 1:
                names.append("question")
            else:
                names.append("history")
        return names

    chat, items = layouts["stable"]
    assert shape(chat) == ["system", "history", "history", "recall", "question"]
    assert shape(items)[-2:] == ["recall", "question"] and shape(items)[0] == "history"
    chat, items = layouts["reference_first"]
    assert shape(chat) == ["system", "recall", "history", "history", "question"]
    assert shape(items)[0] == "recall" and shape(items)[-1] == "question"
    assert "history" in shape(items)[1:-1]
