"""Consolidation of long-term facts through the real proxy, with a fake memory LLM (a loopback
server answering Mem0's extraction prompt and the consolidation prompt): a newer fact
supersedes an older one (never recalled again, listed with both dates, restorable), the same
fact said in three sessions is one memory, an invalid judgement keeps both and says why, and
without the judge only exact and near duplicates merge. Rebuild replays it all."""

from __future__ import annotations

import json
import logging
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
    memory_block,
    memory_fields,
    memory_texts,
    start,
    wait_for_memory,
    wait_until,
)

PARIS = "I live in Paris"
BERLIN = "I now live in Berlin"


@pytest.fixture
def run(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Running]:
    # Mem0 alone: episodic recall of the raw turns would inject Paris from the old turn.
    # A short token cache: a rebuild's old shard is dropped one cache period after the switch.
    running = start(
        tmp_path / "data", upstream_server[1], episodic_memory=False, token_cache_ttl=0.2
    )
    try:
        yield running
    finally:
        running.server.stop()


def _statements(texts: list[str]) -> Scenario:
    """The extraction answer: every user text a fact, except questions."""
    return extract_user_facts([t for t in texts if not t.strip().endswith("?")])


def _judge(answer: Callable[[str, list[str]], Any]) -> Callable[[Any], Scenario | None]:
    """A responder answering the consolidation prompt with `answer(new, existing)` (JSON-able,
    or a raw string); every other call falls through to the default reply."""

    def respond(payload: Any) -> Scenario | None:
        messages = payload.get("messages") or []
        if not messages or "Fact Consolidator" not in str(messages[0].get("content")):
            return None
        prompt = str(messages[-1]["content"])
        new = prompt.split("NEW fact:\n", 1)[1].split("\n\n", 1)[0]
        existing = re.findall(r"^\d+\. (.*)$", prompt.split("EXISTING facts:\n", 1)[1], re.M)
        out = answer(new, existing)
        return Scenario(content=out if isinstance(out, str) else json.dumps(out))

    return respond


def _updates(new: str, existing: list[str]) -> dict[str, Any]:
    verdicts = [
        {"fact": i, "relation": "update" if "live" in text and "live" in new else "unrelated"}
        for i, text in enumerate(existing, 1)
    ]
    return {"verdicts": verdicts}


def _say(run: Running, token: str, text: str, session: str) -> None:
    run.proxy.client(token).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user="ada",
        extra_headers={"X-Session-Id": session},
    )


def _jobs_done(run: Running, token_id: int) -> Callable[[], bool]:
    def done() -> bool:
        counts = run.proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
        return all(set(c) <= {"done"} for c in counts.values()) and "consolidation" in counts

    return done


def _token(run: Running, consolidation: str, **longterm: Any) -> tuple[int, str]:
    memory = {"longterm": {"consolidation": consolidation, **longterm}}
    return run.proxy.create_token(**memory_fields(run.proxy.upstream_url), memory=memory)


def _rebuilt(run: Running, token_id: int) -> bool:
    reply = run.proxy.admin("GET", f"/tokens/{token_id}/rebuild")
    state = reply.json()["layers"].get("longterm", {})
    return bool(
        state.get("state") == "idle" and state.get("active", {}).get("model", "").endswith("@g1")
    )


def _superseded(run: Running, token_id: int) -> list[dict[str, Any]]:
    reply = run.proxy.admin(
        "GET", f"/tokens/{token_id}/memories", params={"user": "ada", "include": "superseded"}
    )
    assert reply.status_code == 200, reply.text
    found: list[dict[str, Any]] = reply.json()["superseded"]
    return found


def test_a_newer_fact_supersedes_the_older_one_which_an_admin_can_restore(
    run: Running, upstream: FakeUpstream
) -> None:
    upstream.responder = _judge(_updates)
    upstream.memory_responder = _statements
    token_id, token = _token(run, "judge")
    _say(run, token, PARIS, "march")
    wait_for_memory(run.proxy, token_id, PARIS, "ada")
    wait_until(_jobs_done(run, token_id), what="the first consolidation")
    _say(run, token, BERLIN, "june")
    wait_until(lambda: memory_texts(run.proxy, token_id, "ada") == {BERLIN}, what="Paris gone")

    _say(run, token, "Where do I live?", "later")
    items = memory_block(forwarded_recall(upstream))
    assert BERLIN in items and PARIS not in items

    (old,) = _superseded(run, token_id)
    assert old["text"] == PARIS and old["superseded_by"]["text"] == BERLIN
    assert old["learned_at"] and old["superseded_by"]["learned_at"] and old["superseded_at"]
    assert [v["event"] for v in old["history"]] == ["longterm.superseded"]

    # The log holds it all: the export carries the events, a rebuild gives the same facts.
    export = run.proxy.admin(
        "GET", f"/tokens/{token_id}/export", params={"include": "longterm"}
    ).text
    types = [json.loads(line).get("type") for line in export.splitlines()[1:]]
    assert "longterm.superseded" in types
    reply = run.proxy.admin("POST", f"/tokens/{token_id}/rebuild", params={"layer": "longterm"})
    assert reply.status_code == 202, reply.text
    wait_until(lambda: _rebuilt(run, token_id), what="the rebuild's switch")
    assert memory_texts(run.proxy, token_id, "ada") == {BERLIN}
    assert [m["text"] for m in _superseded(run, token_id)] == [PARIS]

    restored = run.proxy.admin("POST", f"/tokens/{token_id}/memories/{old['id']}/restore")
    assert restored.status_code == 200, restored.text
    assert restored.json()["memory"] == PARIS
    assert memory_texts(run.proxy, token_id, "ada") == {PARIS, BERLIN}
    assert _superseded(run, token_id) == []
    again = run.proxy.admin("POST", f"/tokens/{token_id}/memories/{old['id']}/restore")
    assert again.status_code == 404


def test_the_same_fact_said_in_three_sessions_is_one_memory(
    run: Running, upstream: FakeUpstream
) -> None:
    calls: list[str] = []
    upstream.responder = _judge(lambda new, existing: calls.append(new) or _updates(new, existing))
    token_id, token = _token(run, "judge")
    for i, text in enumerate(
        ("My cat is called Tom", "my cat is called tom!", "My cat is called Tom.")
    ):
        _say(run, token, text, f"s{i}")
        wait_until(_jobs_done(run, token_id), what="the consolidation")
    assert len(memory_texts(run.proxy, token_id, "ada")) == 1
    assert calls == []  # the same fact again: merged with no LLM call


def test_an_invalid_judgement_keeps_both_facts_and_says_why(
    run: Running, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    upstream.responder = _judge(
        lambda new, existing: {"verdicts": [{"fact": 7, "relation": "update"}]}
    )
    token_id, token = _token(run, "judge")
    _say(run, token, PARIS, "march")
    wait_until(_jobs_done(run, token_id), what="the first consolidation")
    with caplog.at_level(logging.WARNING, logger="memory_bridge"):
        _say(run, token, BERLIN, "june")
        wait_for_memory(run.proxy, token_id, BERLIN, "ada")
        wait_until(_jobs_done(run, token_id), what="the second consolidation")
    assert memory_texts(run.proxy, token_id, "ada") == {PARIS, BERLIN}
    assert _superseded(run, token_id) == []
    refused = [r.getMessage() for r in caplog.records if "consolidation" in r.getMessage()]
    assert any("names no listed fact" in line for line in refused), refused


def test_without_the_judge_only_exact_and_near_duplicates_merge(
    run: Running, upstream: FakeUpstream
) -> None:
    asked: list[str] = []
    upstream.responder = _judge(lambda new, existing: asked.append(new) or _updates(new, existing))
    token_id, token = _token(run, "dedup")
    for i, text in enumerate((PARIS, "i live in PARIS!", BERLIN)):
        _say(run, token, text, f"s{i}")
        wait_until(_jobs_done(run, token_id), what="the consolidation")
    assert memory_texts(run.proxy, token_id, "ada") == {PARIS, BERLIN}
    assert _superseded(run, token_id) == [] and asked == []


def test_erasing_the_end_user_leaves_nothing_of_superseded_facts(
    run: Running, upstream: FakeUpstream
) -> None:
    upstream.responder = _judge(_updates)
    token_id, token = _token(run, "judge")
    _say(run, token, PARIS, "march")
    wait_until(_jobs_done(run, token_id), what="the first consolidation")
    _say(run, token, BERLIN, "june")
    wait_until(lambda: _superseded(run, token_id), what="Paris superseded")

    assert run.proxy.admin("DELETE", f"/tokens/{token_id}/users/ada").status_code == 200
    export = run.proxy.admin(
        "GET", f"/tokens/{token_id}/export", params={"include": "longterm,sessions"}
    ).text
    assert "Paris" not in export and "Berlin" not in export
    assert _superseded(run, token_id) == []
    assert memory_texts(run.proxy, token_id, "ada") == set()


def test_an_export_carries_supersession_into_another_token(
    run: Running, upstream: FakeUpstream
) -> None:
    upstream.responder = _judge(_updates)
    a_id, a = _token(run, "judge")
    _say(run, a, PARIS, "march")
    wait_until(_jobs_done(run, a_id), what="the first consolidation")
    _say(run, a, BERLIN, "june")
    wait_until(lambda: _superseded(run, a_id), what="Paris superseded")
    export = run.proxy.admin("GET", f"/tokens/{a_id}/export", params={"include": "longterm"})
    assert export.status_code == 200, export.text

    b_id, _ = _token(run, "judge")
    imported = httpx.post(
        f"{run.proxy.url}/v1/admin/tokens/{b_id}/import",
        content=export.content,
        headers={**run.proxy.admin_headers, "Content-Type": "application/x-ndjson"},
        timeout=60,
    )
    assert imported.status_code == 200, imported.text
    assert imported.json()["counts"]["longterm.superseded"] == 1
    wait_until(lambda: memory_texts(run.proxy, b_id, "ada") == {BERLIN}, what="B's facts")
    (old,) = _superseded(run, b_id)
    (live,) = [m for m in run.proxy.admin("GET", f"/tokens/{b_id}/memories").json()["data"]]
    assert old["text"] == PARIS and old["superseded_by"]["id"] == live["id"]
    assert old["id"] not in {m["id"] for m in _superseded(run, a_id)}  # B's own ids
