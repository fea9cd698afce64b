"""The relational fetch through the real proxy: a fact about a person said in one session
and a fact linking that person to a place said in another; a question naming only the place
recalls both, the second through the person ("via entity … (depth 2)" in the trace), and never
for another end user of the token or another token."""

from __future__ import annotations

from typing import Any

from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import forwarded_recall, wait_until
from tests.support.proxy import Proxy

PERSON = "Ingrid started a pottery class"
PLACE = "Ingrid moved to Trondheim"
QUESTION = "Who do I know in Trondheim?"


def _say(proxy: Proxy, token: str, text: str, session: str, user: str = "ada") -> str:
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user=user,
        extra_headers={"X-Session-Id": session},
    )
    return str(raw.headers["x-request-id"])


def _indexed(proxy: Proxy, token_id: int) -> bool:
    counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
    return set(counts.get("episodic", {})) == {"done"}


def test_a_question_naming_a_place_recalls_the_person_linked_to_it(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    # BM25 alone (no embedder, no memory LLM); the token opts in to the fetch's weight.
    token_id, token = proxy.create_token(memory={"forge": {"graphWeight": 1}})
    other_id, other = proxy.create_token(name="other")
    _say(proxy, token, PERSON, "session-a")
    _say(proxy, token, PLACE, "session-b")
    _say(proxy, other, PERSON, "session-a")
    wait_until(lambda: _indexed(proxy, token_id), what="the episodic jobs")
    wait_until(lambda: _indexed(proxy, other_id), what="the other token's jobs")

    rid = _say(proxy, token, QUESTION, "session-c")
    block = forwarded_recall(upstream)
    assert PERSON in block and PLACE in block
    trace: dict[str, Any] = proxy.admin("GET", f"/tokens/{token_id}/traces/{rid}").json()
    assert trace["weights"]["graph"] == 1
    kept = {c["text"]: c for c in trace["candidates"] if c["kept"]}
    assert PLACE in kept and PERSON in kept
    assert kept[PLACE]["lineage"]["via"] == "entity trondheim (depth 1)"
    assert kept[PERSON]["lineage"]["via"] == "entity ingrid (depth 2)"
    assert kept[PERSON]["scores"]["graph_rank"] == 2
    assert kept[PERSON]["scores"]["sparse_rank"] is None  # keywords alone would miss it

    # Another end user of the token, and another token's end user of the same name.
    rid = _say(proxy, token, QUESTION, "session-c", user="eve")
    trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{rid}").json()
    assert not [c for c in trace["candidates"] if "Ingrid" in c["text"]]
    assert "Ingrid" not in forwarded_recall(upstream)
    rid = _say(proxy, other, QUESTION, "session-c")
    trace = proxy.admin("GET", f"/tokens/{other_id}/traces/{rid}").json()
    # The other token's own "Ingrid" memory names no place: nothing reaches it from here.
    assert not [c for c in trace["candidates"] if "Ingrid" in c["text"]]


def test_without_a_graph_weight_the_walk_is_not_taken(proxy: Proxy, upstream: FakeUpstream) -> None:
    # The default ranking gives the fetch no weight: its walk over the entity index (a scan per
    # entity) is skipped, so no candidate carries a path through an entity.
    token_id, token = proxy.create_token()
    _say(proxy, token, PERSON, "session-a")
    _say(proxy, token, PLACE, "session-b")
    wait_until(lambda: _indexed(proxy, token_id), what="the episodic jobs")

    rid = _say(proxy, token, QUESTION, "session-c")
    trace: dict[str, Any] = proxy.admin("GET", f"/tokens/{token_id}/traces/{rid}").json()
    assert trace["weights"]["graph"] == 0
    place = [c for c in trace["candidates"] if c["text"] == PLACE]
    assert place and place[0]["kept"]  # found by its keyword
    assert all(c["scores"]["graph_rank"] is None for c in trace["candidates"])
    assert not any(
        "entity" in str(c.get("lineage", {}).get("via", "")) for c in trace["candidates"]
    )
