"""The console's memory over time, through the real app with httpx: a superseded fact (what
superseded it, the dates, a restore that needs the CSRF token), a session summary with links to
the turns it covers, and fading (last used, importance, fade factor) on the facts, the use
list and the trace; memory text written by end users and LLMs shows escaped everywhere."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario, extract_user_facts
from tests.support.longterm_support import (
    Running,
    forwarded_recall,
    memory_fields,
    memory_texts,
    start,
    wait_for_memory,
    wait_until,
)

HOSTILE = "<img src=x onerror=alert(1)>"
PARIS = f"I live in Paris {HOSTILE}"
BERLIN = f"I now live in Berlin {HOSTILE}"
SUMMARY = "Summary: talked about the weather </td><script>alert(2)</script>"


@pytest.fixture
def run(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Running]:
    # Mem0 alone (as the consolidation tests): no episodic recall of the raw turns.
    running = start(tmp_path / "data", upstream_server[1], episodic_memory=False)
    try:
        yield running
    finally:
        running.server.stop()


def _judge(payload: Any) -> Scenario | None:
    """The memory LLM's consolidation verdicts: a fact about where one lives updates another."""
    messages = payload.get("messages") or []
    if not messages or "Fact Consolidator" not in str(messages[0].get("content")):
        return None
    prompt = str(messages[-1]["content"])
    new = prompt.split("NEW fact:\n", 1)[1].split("\n\n", 1)[0]
    existing = re.findall(r"^\d+\. (.*)$", prompt.split("EXISTING facts:\n", 1)[1], re.M)
    verdicts = [
        {"fact": i, "relation": "update" if "live" in text and "live" in new else "unrelated"}
        for i, text in enumerate(existing, 1)
    ]
    return Scenario(content=json.dumps({"verdicts": verdicts}))


def _statements(texts: list[str]) -> Scenario:
    return extract_user_facts([t for t in texts if not t.strip().endswith("?")])


def _jobs_done(run: Running, token_id: int) -> Callable[[], bool]:
    def done() -> bool:
        counts = run.proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
        return all(set(c) <= {"done"} for c in counts.values()) and "consolidation" in counts

    return done


def _say(run: Running, token: str, text: str, session: str) -> str:
    raw = run.proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user="ada",
        extra_headers={"X-Session-Id": session},
    )
    return str(raw.headers["x-request-id"])


def _summarised_session() -> str:
    """An export of one session of ada's: two turns and a summary covering them."""
    lines: list[dict[str, Any]] = [{"format": "memory-bridge.export", "version": 1}]

    def event(i: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        at = f"2025-05-01T10:{i:02d}:00+00:00"
        return {"event_id": f"e{i}", "type": kind, "payload": payload, "created_at": at}

    lines.append(event(0, "session.started", {"user": "ada", "session": "weather"}))
    for i in (1, 2):
        said = f"Is it raining today, number {i}?"
        messages = [{"role": "user", "content": said}, {"role": "assistant", "content": "No."}]
        payload = {"user": "ada", "session": "weather", "messages": messages, "query": said}
        lines.append(event(i, "session.appended", {**payload, "finish_reason": "stop"}))
    summary = {
        "user": "ada",
        "session": "weather",
        "text": SUMMARY,
        "covers": ["e1", "e2"],
        "last_at": "2025-05-01T10:02:00+00:00",
    }
    lines.append(event(3, "session.summarised", summary))
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def _sign_in(client: httpx.Client, run: Running) -> None:
    form = client.get("/console/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    done = client.post(
        "/console/login", data={"csrf": csrf.group(1), "token": run.proxy.admin_token}
    )
    assert done.status_code == 303 and done.headers["location"] == "/console/"


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def _superseded(run: Running, token_id: int) -> list[dict[str, Any]]:
    reply = run.proxy.admin(
        "GET", f"/tokens/{token_id}/memories", params={"user": "ada", "include": "superseded"}
    )
    assert reply.status_code == 200, reply.text
    return list(reply.json()["superseded"])


def test_superseded_facts_summaries_and_fading_show_escaped_and_a_fact_restores(
    run: Running, upstream: FakeUpstream
) -> None:
    upstream.responder = _judge
    upstream.memory_responder = _statements
    memory = {"longterm": {"consolidation": "judge"}, "forge": {"fadeHalfLifeDays": 30}}
    token_id, token = run.proxy.create_token(**memory_fields(run.proxy.upstream_url), memory=memory)
    _say(run, token, PARIS, "march")
    wait_for_memory(run.proxy, token_id, PARIS, "ada")
    wait_until(_jobs_done(run, token_id), what="the first consolidation")
    _say(run, token, BERLIN, "june")
    wait_until(lambda: memory_texts(run.proxy, token_id, "ada") == {BERLIN}, what="Paris gone")
    asked = _say(run, token, "Where do I live?", "later")
    assert BERLIN in forwarded_recall(upstream)  # injected: its use is recorded
    upstream.memory_responder = lambda _: Scenario(content=json.dumps({"memory": []}))
    imported = httpx.post(
        f"{run.proxy.url}/v1/admin/tokens/{token_id}/import",
        content=_summarised_session().encode(),
        headers={**run.proxy.admin_headers, "Content-Type": "application/x-ndjson"},
        timeout=60,
    )
    assert imported.status_code == 200, imported.text
    (old,) = _superseded(run, token_id)
    berlin_id = next(
        m["id"]
        for m in run.proxy.admin("GET", f"/tokens/{token_id}/memories").json()["data"]
        if m["memory"] == BERLIN
    )

    with httpx.Client(base_url=run.proxy.url, timeout=30) as console:
        _sign_in(console, run)
        html = console.get("/console/evolving", params={"token": token_id, "user": "ada"}).text
        # Escaped, never markup: the superseded fact and the summary as text.
        assert HOSTILE not in html and "<script>alert(2)" not in html
        assert "I live in Paris &lt;img src=x onerror=alert(1)&gt;" in html
        assert "&lt;/td&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in html
        # The superseded fact, what superseded it and the dates; its restore form.
        assert "I now live in Berlin &lt;img" in html and old["superseded_at"][:10] in html
        assert f'action="/console/evolving/{token_id}/{old["id"]}/restore"' in html
        # The summary's lineage: a link to each turn it covers, which opens its transcript.
        turns = re.findall(r'href="(/console/conversations/turn\?token=\d+&amp;event=[^"]+)"', html)
        assert len(turns) == 2
        opened = console.get(turns[0].replace("&amp;", "&"))
        assert opened.status_code == 303 and "name=weather" in opened.headers["location"]
        # Fading: Berlin's use (written in a batch), with its importance and factor.
        uses = html.split("Fading:", 1)[1]
        assert f"<code>{berlin_id}</code>" in uses and "0.50" in uses and "1.000" in uses

        facts = console.get("/console/memories", params={"token": token_id, "user": "ada"}).text
        assert '<th scope="col">Fade</th>' in facts and "Last used" in facts
        trace = console.get(f"/console/traces/{token_id}/{asked}").text
        assert '<th scope="col">Fade</th>' in trace

        # A restore without the session's CSRF token changes nothing; with it, Paris is back.
        path = f"/console/evolving/{token_id}/{old['id']}/restore"
        refused = console.post(path, data={"user": "ada"})
        assert refused.status_code == 403 and len(_superseded(run, token_id)) == 1
        done = console.post(path, data={"user": "ada", "csrf": _csrf(html)})
        assert done.status_code == 303 and "message=restored" in done.headers["location"]
    assert _superseded(run, token_id) == []
    assert memory_texts(run.proxy, token_id, "ada") == {PARIS, BERLIN}
