"""Dated recall through the real proxy: a turn imported at a given date is recalled (episodic)
with that date in the injected block, in the token's template language, and in the trace."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.longterm_support import forwarded_recall, memory_fields, wait_until
from tests.support.proxy import Proxy

STORED_AT = "2025-03-14T10:00:00+00:00"


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


def _indexed(proxy: Proxy, token_id: int) -> Any:
    def done() -> bool:
        counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
        episodic = counts.get("episodic", {})
        return bool(episodic) and set(episodic) == {"done"}

    return done


def _redated_export(proxy: Proxy, token_id: int) -> str:
    """The token's sessions as an export whose events all happened on `STORED_AT`."""
    reply = proxy.admin("GET", f"/tokens/{token_id}/export", params={"include": "sessions"})
    assert reply.status_code == 200, reply.text
    lines = [json.loads(line) for line in reply.text.splitlines()]
    for event in lines[1:]:
        event["created_at"] = STORED_AT
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def test_an_injected_item_shows_the_date_its_turn_was_stored(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    upstream.memory_responder = _no_facts
    fields = memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    source_id, source = proxy.create_token(name="source", **fields)
    _say(proxy, source, "My sister Ingrid lives in Trondheim", "monday")
    wait_until(_indexed(proxy, source_id), what="the source's episodic jobs")
    body = _redated_export(proxy, source_id)

    for language, label in (("en", "[on 2025-03-14]"), ("zh", "[记于 2025-03-14]")):
        token_id, token = proxy.create_token(name=f"dated-{language}", template=language, **fields)
        imported = httpx.post(
            f"{proxy.url}/v1/admin/tokens/{token_id}/import",
            content=body.encode(),
            headers={**proxy.admin_headers, "Content-Type": "application/x-ndjson"},
            timeout=60,
        )
        assert imported.status_code == 200, imported.text
        wait_until(_indexed(proxy, token_id), what="the imported turns' episodic jobs")

        request_id = _say(proxy, token, "Where does Ingrid live?", "friday")
        block = forwarded_recall(upstream)
        assert f"- {label} My sister Ingrid lives in Trondheim" in block
        trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{request_id}").json()
        dates = {c["text"]: c["date"] for c in trace["candidates"]}
        assert dates["My sister Ingrid lives in Trondheim"] == "2025-03-14"
