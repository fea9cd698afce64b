"""Intent-aware weights through the real proxy: the same memories, a "when" question and a
"who" question are ranked with different weights, and the trace says which intent and which
weights; a token can turn the presets off."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.longterm_support import memory_fields, wait_until
from tests.support.proxy import Proxy

FACTS = ("I met Ingrid in Trondheim last spring", "Ingrid and I went kayaking in June")


def _ask(proxy: Proxy, token: str, text: str, session: str) -> str:
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user="ada",
        extra_headers={"X-Session-Id": session},
    )
    return str(raw.headers["x-request-id"])


def _trace(proxy: Proxy, token_id: int, rid: str) -> dict[str, Any]:
    reply = proxy.admin("GET", f"/tokens/{token_id}/traces/{rid}")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def test_a_when_and_a_who_question_are_ranked_with_their_own_weights(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    upstream.memory_responder = lambda _: Scenario(content=json.dumps({"memory": []}))
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, dims=256, embed_body={"model": "bow-words"})
    )
    for i, fact in enumerate(FACTS):
        _ask(proxy, token, fact, f"facts-{i}")

    def indexed() -> bool:
        counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
        return set(counts.get("episodic", {})) == {"done"}

    wait_until(indexed, what="the episodic jobs")

    when = _trace(proxy, token_id, _ask(proxy, token, "When did I meet Ingrid?", "q1"))
    who = _trace(proxy, token_id, _ask(proxy, token, "Who went kayaking with me?", "q2"))
    assert (when["intent"], who["intent"]) == ("temporal", "relational")
    assert when["weights"] != who["weights"]
    # A "when" question keeps the defaults (recency only breaks ties); a "who" question leans
    # on the keyword list.
    assert (when["weights"]["recency"], who["weights"]["recency"]) == (0.0, 0.0)
    assert when["weights"]["per_source"]["episodic"] == {"dense": 0.5, "sparse": 1.0}
    assert who["weights"]["per_source"]["episodic"]["dense"] < 0.5
    # Both found what they asked about, each with its own weights.
    assert any(c["kept"] and c["text"] == FACTS[0] for c in when["candidates"])
    assert any(c["kept"] and c["text"] == FACTS[1] for c in who["candidates"])

    # The token turns the presets off: both questions get the same weights.
    patched = proxy.admin(
        "PATCH", f"/tokens/{token_id}", json={"memory": {"forge": {"intentWeights": False}}}
    )
    assert patched.status_code == 200, patched.text
    when = _trace(proxy, token_id, _ask(proxy, token, "When did I meet Ingrid?", "q3"))
    who = _trace(proxy, token_id, _ask(proxy, token, "Who went kayaking with me?", "q4"))
    assert when["intent"] == "temporal" and when["weights"] == who["weights"]
