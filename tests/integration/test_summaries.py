"""Session summaries through the real proxy, with a fake memory LLM answering the summary
prompt: a 30-turn session (imported at a past date, so it is idle) gets one summary with its
lineage; a question answered in those turns gets the summary injected and the raw turn it
covers dropped (`summarised`); a rebuild of the episodic index keeps it so; no summaries for a
token that does not ask for them. The importance the LLM gives a summary is stored with it and
read by fading (a summary rated 0.9 fades slower than one at the default); an importance out of
range is the default."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.longterm_support import forwarded_recall, memory_fields, wait_until
from tests.support.proxy import Proxy

SUMMARY = "Summary: the user's locker code is 4417; the rest was small talk about the weather."
LOCKER = "My locker code is 4417"


def _no_facts(_: list[str]) -> Scenario:
    return Scenario(content=json.dumps({"memory": []}))


def _summariser(prompts: list[str]) -> Callable[[Any], Scenario | None]:
    def respond(payload: Any) -> Scenario | None:
        messages = payload.get("messages") or []
        if not messages or "Conversation Summariser" not in str(messages[0].get("content")):
            return None
        prompts.append(str(messages[-1]["content"]))
        return Scenario(content=SUMMARY)

    return respond


def _rating_summariser(importance: list[object]) -> Callable[[Any], Scenario | None]:
    """Answers the summary prompt with the JSON it asks for, rated `importance[0]`."""

    def respond(payload: Any) -> Scenario | None:
        messages = payload.get("messages") or []
        if not messages or "Conversation Summariser" not in str(messages[0].get("content")):
            return None
        return Scenario(content=json.dumps({"summary": SUMMARY, "importance": importance[0]}))

    return respond


def _session_lines(turns: int) -> str:
    """An export of one 30-turn session of `ada`, said on 2025-05-01."""
    lines: list[dict[str, Any]] = [{"format": "memory-bridge.export", "version": 1}]

    def event(i: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        at = f"2025-05-01T10:{i:02d}:00+00:00"
        return {"event_id": f"e{i}", "type": kind, "payload": payload, "created_at": at}

    lines.append(event(0, "session.started", {"user": "ada", "session": "long"}))
    for i in range(1, turns + 1):
        said = LOCKER if i == 17 else f"Small talk number {i} about the weather"
        messages = [
            {"role": "user", "content": said},
            {"role": "assistant", "content": "Noted." if i == 17 else f"Indeed, chat {i}."},
        ]
        payload = {"user": "ada", "session": "long", "messages": messages, "query": said}
        lines.append(event(i, "session.appended", {**payload, "finish_reason": "stop"}))
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def _import(proxy: Proxy, token_id: int, body: str) -> None:
    reply = httpx.post(
        f"{proxy.url}/v1/admin/tokens/{token_id}/import",
        content=body.encode(),
        headers={**proxy.admin_headers, "Content-Type": "application/x-ndjson"},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text


def _events(proxy: Proxy, token_id: int) -> list[dict[str, Any]]:
    reply = proxy.admin("GET", f"/tokens/{token_id}/export", params={"include": "sessions"})
    assert reply.status_code == 200, reply.text
    return [json.loads(line) for line in reply.text.splitlines()[1:]]


def _jobs_done(proxy: Proxy, token_id: int, *names: str) -> Callable[[], bool]:
    def done() -> bool:
        counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
        return all(counts.get(n) and set(counts[n]) == {"done"} for n in names)

    return done


def _ask(proxy: Proxy, token: str) -> str:
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "What is my locker code?"}],
        user="ada",
        extra_headers={"X-Session-Id": "later"},
    )
    return str(raw.headers["x-request-id"])


def test_an_idle_session_is_summarised_and_the_summary_replaces_its_turns(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    upstream.memory_responder = _no_facts
    prompts: list[str] = []
    upstream.responder = _summariser(prompts)
    fields = memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    summaries = {"longterm": {"summaries": True, "summaryTurns": 50}}
    token_id, token = proxy.create_token(name="summarised", memory=summaries, **fields)
    plain_id, plain = proxy.create_token(name="plain", **fields)
    body = _session_lines(30)
    _import(proxy, token_id, body)
    _import(proxy, plain_id, body)
    wait_until(_jobs_done(proxy, token_id, "episodic", "summary"), what="the summary jobs")
    wait_until(_jobs_done(proxy, plain_id, "episodic"), what="the plain token's jobs")

    events = _events(proxy, token_id)
    (summary,) = [e for e in events if e["type"] == "session.summarised"]
    turns = [e["event_id"] for e in events if e["type"] == "session.appended"]
    assert summary["payload"]["text"] == SUMMARY and summary["payload"]["covers"] == turns
    assert len(turns) == 30 and len(prompts) == 1 and LOCKER in prompts[0]

    request_id = _ask(proxy, token)
    assert SUMMARY in forwarded_recall(upstream)
    trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{request_id}").json()
    fates = {c["text"]: c for c in trace["candidates"]}
    assert fates[SUMMARY]["kept"] and fates[SUMMARY]["lineage"]["type"] == "summary"
    assert fates[LOCKER]["dropped"] == "summarised"
    assert fates[LOCKER]["lineage"]["event_id"] in summary["payload"]["covers"]

    # A rebuild of the episodic index from the log keeps the summary and the rule.
    assert (
        proxy.admin("POST", f"/tokens/{token_id}/rebuild", params={"layer": "episodic"}).status_code
        == 202
    )
    wait_until(_jobs_done(proxy, token_id, "rebuild"), what="the rebuild")
    request_id = _ask(proxy, token)
    trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{request_id}").json()
    fates = {c["text"]: c for c in trace["candidates"]}
    assert fates[SUMMARY]["kept"] and fates[LOCKER]["dropped"] == "summarised"

    # A token that does not ask for summaries gets none, and its raw turn is injected.
    assert not [e for e in _events(proxy, plain_id) if e["type"] == "session.summarised"]
    _ask(proxy, plain)
    block = forwarded_recall(upstream)
    assert LOCKER in block and SUMMARY not in block

    # An export carries the summary: imported elsewhere it is indexed, with no new LLM call.
    exported = proxy.admin("GET", f"/tokens/{token_id}/export", params={"include": "sessions"})
    copy_id, copy = proxy.create_token(name="copy", memory=summaries, **fields)
    _import(proxy, copy_id, exported.text)
    wait_until(_jobs_done(proxy, copy_id, "episodic", "summary"), what="the copy's jobs")
    request_id = _ask(proxy, copy)
    assert SUMMARY in forwarded_recall(upstream)
    trace = proxy.admin("GET", f"/tokens/{copy_id}/traces/{request_id}").json()
    assert {c["text"]: c for c in trace["candidates"]}[LOCKER]["dropped"] == "summarised"
    # (The questions' session came along, idle: it alone was summarised anew.)
    assert len([p for p in prompts if "Small talk" in p]) == 1

    # Erasing the end user takes the summary with the turns: no byte of it is left.
    assert proxy.admin("DELETE", f"/tokens/{token_id}/users/ada").status_code == 200
    assert "4417" not in json.dumps(_events(proxy, token_id))
    _ask(proxy, token)
    assert "4417" not in forwarded_recall(upstream)


def test_the_importance_the_llm_gives_a_summary_slows_its_fading(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    upstream.memory_responder = _no_facts
    importance: list[object] = [0.9]
    upstream.responder = _rating_summariser(importance)
    fields = memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    # Fading on, with a half-life long enough that nothing fades under the floor.
    memory = {
        "longterm": {"summaries": True, "summaryTurns": 50},
        "forge": {"fadeHalfLifeDays": 3650},
    }
    body = _session_lines(30)
    rated_id, rated = proxy.create_token(name="rated", memory=memory, **fields)
    _import(proxy, rated_id, body)
    wait_until(_jobs_done(proxy, rated_id, "episodic", "summary"), what="the rated summary")
    importance[0] = 1.5  # out of range: the default
    plain_id, plain = proxy.create_token(name="out-of-range", memory=memory, **fields)
    _import(proxy, plain_id, body)
    wait_until(_jobs_done(proxy, plain_id, "episodic", "summary"), what="the other summary")

    def summary_of(token_id: int) -> dict[str, Any]:
        (event,) = [e for e in _events(proxy, token_id) if e["type"] == "session.summarised"]
        assert event["payload"]["text"] == SUMMARY
        return dict(event["payload"])

    assert summary_of(rated_id)["importance"] == 0.9
    assert "importance" not in summary_of(plain_id)

    def read(token_id: int, token: str) -> dict[str, Any]:
        trace = proxy.admin("GET", f"/tokens/{token_id}/traces/{_ask(proxy, token)}").json()
        item = {c["text"]: c for c in trace["candidates"]}[SUMMARY]
        assert item["kept"]
        return dict(item)

    high, default = read(rated_id, rated), read(plain_id, plain)
    assert (high["importance"], default["importance"]) == (0.9, 0.5)
    # Said on the same day, never used: the rated summary has kept more of its score.
    assert high["date"] == default["date"]
    assert 0.1 < default["scores"]["fade"] < high["scores"]["fade"] < 1

    # A rebuild of the episodic index from the log keeps the importance.
    reply = proxy.admin("POST", f"/tokens/{rated_id}/rebuild", params={"layer": "episodic"})
    assert reply.status_code == 202
    wait_until(_jobs_done(proxy, rated_id, "rebuild"), what="the rebuild")
    assert read(rated_id, rated)["importance"] == 0.9
